/* Attention softmax over keys, in place on scores [B, heads, T, T]. As HF:
 * p = softmax(s / sqrt(d) + (1 - mask) * FLT_MIN_NEG) with the key mask of the
 * row's sequence; a fully masked row becomes uniform, like torch. One
 * work-group per row. */

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

/* In place: dP -> dS = P * (dP - sum(dP * P)) / sqrt(d), the gradient with
 * respect to the raw Q K^T scores. */
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
