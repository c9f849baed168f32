/* Bias, residual, row gather/scatter and bias gradients on row-major
 * [rows, C] buffers. Every reduction runs in a fixed order in one work item. */

/* out[r, c] += bias[c] */
__kernel void bias_add(__global float *out, __global const float *params, int bias_off, int rows,
                       int C) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows) return;
    out[(size_t)r * C + c] += params[bias_off + c];
}

/* out[r, c] = residual[r, c] + (out[r, c] + bias[c]): HF's x + dense(ctx). */
__kernel void bias_residual_add(__global float *out, __global const float *residual,
                                __global const float *params, int bias_off, int rows, int C) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= C || r >= rows) return;
    size_t i = (size_t)r * C + c;
    out[i] = residual[i] + (out[i] + params[bias_off + c]);
}

/* grads[bias_off + c] += sum_r dy[r, c] */
static inline void bias_backward_column(__global float *grads, __global const float *dy, int bias_off,
                                        int rows, int C, int c) {
    float sum = 0.0f;
    DL_FOR_REDUCE(r, rows) sum += dy[(size_t)r * C + c];
    grads[bias_off + c] += sum;
}

__kernel void bias_backward(__global float *grads, __global const float *dy, int bias_off,
                            int rows, int C) {
#if DL_COL_VEC > 1
    int c0 = get_global_id(0) * DL_COL_VEC;
    if (c0 + DL_COL_VEC <= C) {
        colvec_t sum = 0.0f;
        DL_FOR_REDUCE(r, rows) sum += COL_LOAD(dy, (size_t)r * C + c0);
        COL_STORE(grads, bias_off + c0, COL_LOAD(grads, bias_off + c0) + sum);
        return;
    }
    for (int c = c0; c < C; c++) bias_backward_column(grads, dy, bias_off, rows, C, c);
#else
    int c = get_global_id(0);
    if (c < C) bias_backward_column(grads, dy, bias_off, rows, C, c);
#endif
}

/* out[i, c] = in[index[i], c] */
__kernel void gather_rows(__global float *out, __global const float *in,
                          __global const int *index, int rows, int C) {
    int c = get_global_id(0), i = get_global_id(1);
    if (c >= C || i >= rows) return;
    out[(size_t)i * C + c] = in[(size_t)index[i] * C + c];
}

/* out[index[i], c] += in[i, c]; the indices of one launch are distinct. */
__kernel void scatter_add_rows(__global float *out, __global const float *in,
                               __global const int *index, int rows, int C) {
    int c = get_global_id(0), i = get_global_id(1);
    if (c >= C || i >= rows) return;
    out[(size_t)index[i] * C + c] += in[(size_t)i * C + c];
}
