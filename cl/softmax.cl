/* Attention softmax over keys, in place on scores [B, heads, T, T]. As HF:
 * p = softmax(s / sqrt(d) + (1 - mask) * FLT_MIN_NEG) with the key mask of the
 * row's sequence; a fully masked row becomes uniform, like torch. One
 * work-group per row, or one item per row on a CPU (DL_ROW_LANES). */

#ifdef DL_ROW_LANES
__kernel void attention_softmax_forward(__global float *att, __global const int *mask,
                                        int rows, int heads, int T, float sqrt_d) {
    int r = get_global_id(0);
    if (r >= rows) return;
    int b = r / (heads * T);
    __global float *s = att + (size_t)r * T;
    __global const int *m = mask + b * T;
    float16 mx = -INFINITY;
    DL_FOR_VECS(j, T) {
        float16 v = vload16(0, s + j) / sqrt_d +
                    select((float16)(-FLT_MAX), (float16)(0.0f), vload16(0, m + j) != 0);
        vstore16(v, 0, s + j);
        mx = fmax(mx, v);
    }
    DL_LANES_TAIL(mx, T, j, lane, {
        float v = s[j] / sqrt_d + (m[j] ? 0.0f : -FLT_MAX);
        s[j] = v;
        *lane = fmax(*lane, v);
    });
    float top = dl_lanes_max(mx);
    float16 part = 0.0f;
    DL_FOR_VECS(j, T) {
        float16 e = exp(vload16(0, s + j) - top);
        vstore16(e, 0, s + j);
        part += e;
    }
    DL_LANES_TAIL(part, T, j, lane, {
        float e = exp(s[j] - top);
        s[j] = e;
        *lane += e;
    });
    float sum = dl_lanes_sum(part);
    for (int j = 0; j + 16 <= T; j += 16) vstore16(vload16(0, s + j) / sum, 0, s + j);
    for (int j = DL_LANES_FULL(T); j < T; j++) s[j] = s[j] / sum;
}
#else
__kernel void attention_softmax_forward(__global float *att, __global const int *mask,
                                        int rows, int heads, int T, float sqrt_d) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    int b = r / (heads * T);
    __global float *s = att + (size_t)r * T;
    __global const int *m = mask + b * T;
    float mx = -INFINITY;
    DL_FOR_ROW(j, lid, n, T) {
        float v = s[j] / sqrt_d + (m[j] ? 0.0f : -FLT_MAX);
        s[j] = v;
        mx = fmax(mx, v);
    }
    mx = dl_group_max(mx, scratch);
    float part = 0.0f;
    DL_FOR_ROW(j, lid, n, T) {
        float e = exp(s[j] - mx);
        s[j] = e;
        part += e;
    }
    float sum = dl_group_sum(part, scratch);
    DL_FOR_ROW(j, lid, n, T) s[j] = s[j] / sum;
}
#endif

/* In place: dP -> dS = P * (dP - sum(dP * P)) / sqrt(d), the gradient with
 * respect to the raw Q K^T scores. */
#ifdef DL_ROW_LANES
__kernel void attention_softmax_backward(__global float *datt, __global const float *att,
                                         int rows, int T, float sqrt_d) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global float *d = datt + (size_t)r * T;
    __global const float *p = att + (size_t)r * T;
    float16 part = 0.0f;
    DL_FOR_VECS(j, T) part += vload16(0, d + j) * vload16(0, p + j);
    DL_LANES_TAIL(part, T, j, lane, *lane += d[j] * p[j]);
    float dot = dl_lanes_sum(part);
    for (int j = 0; j + 16 <= T; j += 16)
        vstore16(vload16(0, p + j) * (vload16(0, d + j) - dot) / sqrt_d, 0, d + j);
    for (int j = DL_LANES_FULL(T); j < T; j++) d[j] = p[j] * (d[j] - dot) / sqrt_d;
}
#else
__kernel void attention_softmax_backward(__global float *datt, __global const float *att,
                                         int rows, int T, float sqrt_d) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    __global float *d = datt + (size_t)r * T;
    __global const float *p = att + (size_t)r * T;
    float part = 0.0f;
    DL_FOR_ROW(j, lid, n, T) part += d[j] * p[j];
    float dot = dl_group_sum(part, scratch);
    DL_FOR_ROW(j, lid, n, T) d[j] = p[j] * (d[j] - dot) / sqrt_d;
}
#endif
