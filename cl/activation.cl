/* gelu_new (the tanh approximation HF uses for ALBERT) and tanh (pooler). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

__kernel void gelu_forward(__global float *out, __global const float *in, int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanh(GELU_K * (x + GELU_A * x * x * x)));
}

/* Fused bias + gelu_new after a Linear: pre[r, c] += bias[c] (kept for the
 * backward pass) and act[r, c] = gelu(pre[r, c]), in one pass over the rows
 * instead of two launches. The same arithmetic as bias_add then
 * gelu_forward, so the bits match theirs. */
__kernel void bias_gelu_forward(__global float *pre, __global float *act,
                                __global const float *params, int bias_off, int rows, int C) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows) return;
    size_t i = (size_t)r * C + c;
    float x = pre[i] + params[bias_off + c];
    pre[i] = x;
    act[i] = 0.5f * x * (1.0f + tanh(GELU_K * (x + GELU_A * x * x * x)));
}

/* dx = dy * gelu'(x); dx may be the same buffer as dy. */
__kernel void gelu_backward(__global float *dx, __global const float *dy,
                            __global const float *in, int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    float x = in[i];
    float t = tanh(GELU_K * (x + GELU_A * x * x * x));
    float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    dx[i] = dy[i] * grad;
}

__kernel void tanh_forward(__global float *out, __global const float *in, int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    out[i] = tanh(in[i]);
}

/* dx = dy * (1 - y^2) from the forward output y. */
__kernel void tanh_backward(__global float *dx, __global const float *dy, __global const float *y,
                            int n) {
    int i = get_global_id(0);
    if (i >= n) return;
    dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}
