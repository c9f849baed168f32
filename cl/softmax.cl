/* Attention softmax over keys, in place on scores [B, heads, T, T]. As HF:
 * p = softmax(s / sqrt(d) + (1 - mask) * FLT_MIN_NEG) with the key mask of the
 * row's sequence; a fully masked row becomes uniform, like torch. */

__kernel void attention_softmax_forward(__global float *att, __global const int *mask,
                                        int rows, int heads, int T, float sqrt_d) {
    int r = get_global_id(0);
    if (r >= rows) return;
    int b = r / (heads * T);
    __global float *s = att + (size_t)r * T;
    __global const int *m = mask + b * T;
    float mx = -INFINITY;
    for (int j = 0; j < T; j++) {
        float v = s[j] / sqrt_d + (m[j] ? 0.0f : -FLT_MAX);
        s[j] = v;
        mx = fmax(mx, v);
    }
    float sum = 0.0f;
    for (int j = 0; j < T; j++) {
        float e = exp(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    for (int j = 0; j < T; j++) s[j] = s[j] / sum;
}

/* In place: dP -> dS = P * (dP - sum(dP * P)) / sqrt(d), the gradient with
 * respect to the raw Q K^T scores. */
__kernel void attention_softmax_backward(__global float *datt, __global const float *att,
                                         int rows, int T, float sqrt_d) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global float *d = datt + (size_t)r * T;
    __global const float *p = att + (size_t)r * T;
    float dot = 0.0f;
    for (int j = 0; j < T; j++) dot += d[j] * p[j];
    for (int j = 0; j < T; j++) d[j] = p[j] * (d[j] - dot) / sqrt_d;
}
