/* gelu_new (the tanh approximation HF uses for ALBERT) and tanh (pooler).
 * Elementwise: each work item takes DL_COL_VEC consecutive elements (one on
 * a GPU; a float16 on a CPU, so that tanh runs on vectors), the last few of
 * a buffer one at a time. */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

#define GELU_INNER(x) (GELU_K * ((x) + GELU_A * (x) * (x) * (x)))
/* gelu_new'(x) from t = tanh(GELU_INNER(x)), for the backward pass. */
#define GELU_GRAD(x, t) \
    (0.5f * (1.0f + (t)) + 0.5f * (x) * (1.0f - (t) * (t)) * GELU_K * (1.0f + 3.0f * GELU_A * (x) * (x)))

static inline float gelu_new(float x) { return 0.5f * x * (1.0f + tanh(GELU_INNER(x))); }
static inline float gelu_new_grad(float x) {
    float t = tanh(GELU_INNER(x));
    return GELU_GRAD(x, t);
}
#if DL_COL_VEC > 1
static inline colvec_t gelu_new_vec(colvec_t x) { return 0.5f * x * (1.0f + tanh(GELU_INNER(x))); }
static inline colvec_t gelu_new_grad_vec(colvec_t x) {
    colvec_t t = tanh(GELU_INNER(x));
    return GELU_GRAD(x, t);
}
#endif

/* The first element of this item's share, and whether the whole vector fits. */
#define DL_ITEM_FIRST() ((int)get_global_id(0) * DL_COL_VEC)
#define DL_ITEM_WHOLE(i0, n) (DL_COL_VEC > 1 && (i0) + DL_COL_VEC <= (n))

__kernel void gelu_forward(__global float *out, __global const float *in, int n) {
    int i0 = DL_ITEM_FIRST();
#if DL_COL_VEC > 1
    if (DL_ITEM_WHOLE(i0, n)) {
        COL_STORE(out, i0, gelu_new_vec(COL_LOAD(in, i0)));
        return;
    }
#endif
    for (int i = i0; i < n && i < i0 + DL_COL_VEC; i++) out[i] = gelu_new(in[i]);
}

/* Fused bias + gelu_new after a Linear: pre[r, c] += bias[c] (kept for the
 * backward pass) and act[r, c] = gelu(pre[r, c]), in one pass over the rows
 * instead of two launches. The same arithmetic as bias_add then
 * gelu_forward, so the bits match theirs. Items over (column vectors, rows). */
__kernel void bias_gelu_forward(__global float *pre, __global float *act,
                                __global const float *params, int bias_off, int rows, int C) {
    int c0 = DL_ITEM_FIRST(), r = get_global_id(1);
    if (r >= rows) return;
    size_t row = (size_t)r * C;
#if DL_COL_VEC > 1
    if (DL_ITEM_WHOLE(c0, C)) {
        colvec_t x = COL_LOAD(pre, row + c0) + COL_LOAD(params, bias_off + c0);
        COL_STORE(pre, row + c0, x);
        COL_STORE(act, row + c0, gelu_new_vec(x));
        return;
    }
#endif
    for (int c = c0; c < C && c < c0 + DL_COL_VEC; c++) {
        float x = pre[row + c] + params[bias_off + c];
        pre[row + c] = x;
        act[row + c] = gelu_new(x);
    }
}

/* dx = dy * gelu'(x); dx may be the same buffer as dy. */
__kernel void gelu_backward(__global float *dx, __global const float *dy,
                            __global const float *in, int n) {
    int i0 = DL_ITEM_FIRST();
#if DL_COL_VEC > 1
    if (DL_ITEM_WHOLE(i0, n)) {
        COL_STORE(dx, i0, COL_LOAD(dy, i0) * gelu_new_grad_vec(COL_LOAD(in, i0)));
        return;
    }
#endif
    for (int i = i0; i < n && i < i0 + DL_COL_VEC; i++) dx[i] = dy[i] * gelu_new_grad(in[i]);
}

__kernel void tanh_forward(__global float *out, __global const float *in, int n) {
    int i0 = DL_ITEM_FIRST();
#if DL_COL_VEC > 1
    if (DL_ITEM_WHOLE(i0, n)) {
        COL_STORE(out, i0, tanh(COL_LOAD(in, i0)));
        return;
    }
#endif
    for (int i = i0; i < n && i < i0 + DL_COL_VEC; i++) out[i] = tanh(in[i]);
}

/* dx = dy * (1 - y^2) from the forward output y. */
__kernel void tanh_backward(__global float *dx, __global const float *dy, __global const float *y,
                            int n) {
    int i0 = DL_ITEM_FIRST();
#if DL_COL_VEC > 1
    if (DL_ITEM_WHOLE(i0, n)) {
        colvec_t v = COL_LOAD(y, i0);
        COL_STORE(dx, i0, COL_LOAD(dy, i0) * (1.0f - v * v));
        return;
    }
#endif
    for (int i = i0; i < n && i < i0 + DL_COL_VEC; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}
