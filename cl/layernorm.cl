/* LayerNorm over the last dimension (biased variance, as torch), one
 * work-group per row (dl_group_sum). Forward keeps mean and 1/std per row for the backward. */

/* The rest of row r's LayerNorm once this item's share of the row sum is
 * in part: mean, biased variance, the normalized row, and the row's mean and
 * 1/std for the backward pass. Every item of the group calls it (it holds
 * the group's barriers). */
inline void layernorm_row_finish(__global float *out, __global float *mean_out,
                                 __global float *rstd_out, __global const float *x,
                                 __global const float *params, int gamma_off, int beta_off,
                                 int r, int C, float eps, float part, __local float *scratch) {
    int lid = get_local_id(0), n = get_local_size(0);
    float mean = dl_group_sum(part, scratch) / C;
    part = 0.0f;
    DL_FOR_ROW(c, lid, n, C) {
        float d = x[c] - mean;
        part += d * d;
    }
    float rstd = 1.0f / sqrt(dl_group_sum(part, scratch) / C + eps);
    __global float *y = out + (size_t)r * C;
    DL_FOR_ROW(c, lid, n, C)
        y[c] = (x[c] - mean) * rstd * params[gamma_off + c] + params[beta_off + c];
    if (lid == 0) {
        mean_out[r] = mean;
        rstd_out[r] = rstd;
    }
}

__kernel void layernorm_forward(__global float *out, __global float *mean_out,
                                __global float *rstd_out, __global const float *in,
                                __global const float *params, int gamma_off, int beta_off,
                                int rows, int C, float eps) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    __global const float *x = in + (size_t)r * C;
    float part = 0.0f;
    DL_FOR_ROW(c, lid, n, C) part += x[c];
    layernorm_row_finish(out, mean_out, rstd_out, x, params, gamma_off, beta_off, r, C, eps, part,
                         scratch);
}

/* Residual + LayerNorm in one pass (a transformer layer's x + dense(h)
 * followed by its LayerNorm): pre[r, c] = residual[r, c] + (pre[r, c] +
 * bias[c]), kept for the backward pass, then out = LayerNorm(pre) as
 * layernorm_forward. The same arithmetic and summation order as
 * bias_residual_add followed by layernorm_forward (each item reads back only
 * the columns it wrote), so the bits are theirs, with one launch and one
 * pass over the row fewer. */
__kernel void bias_residual_layernorm_forward(__global float *out, __global float *mean_out,
                                              __global float *rstd_out, __global float *pre,
                                              __global const float *residual,
                                              __global const float *params, int bias_off,
                                              int gamma_off, int beta_off, int rows, int C,
                                              float eps) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    __global float *x = pre + (size_t)r * C;
    __global const float *res = residual + (size_t)r * C;
    float part = 0.0f;
    DL_FOR_ROW(c, lid, n, C) {
        float v = res[c] + (x[c] + params[bias_off + c]);
        x[c] = v;
        part += v;
    }
    layernorm_row_finish(out, mean_out, rstd_out, x, params, gamma_off, beta_off, r, C, eps, part,
                         scratch);
}

/* dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)); writes dx. */
__kernel void layernorm_backward_input(__global float *dx, __global const float *dy,
                                       __global const float *in, __global const float *mean,
                                       __global const float *rstd, __global const float *params,
                                       int gamma_off, int rows, int C) {
    __local float scratch[DL_ROW_GROUP];
    int r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
    if (r >= rows) return;
    __global const float *x = in + (size_t)r * C;
    __global const float *g = dy + (size_t)r * C;
    float m = mean[r], s = rstd[r];
    float part = 0.0f, part_xhat = 0.0f;
    DL_FOR_ROW(c, lid, n, C) {
        float dxhat = g[c] * params[gamma_off + c];
        part += dxhat;
        part_xhat += dxhat * (x[c] - m) * s;
    }
    float mean_dxhat = dl_group_sum(part, scratch) / C;
    float mean_dxhat_xhat = dl_group_sum(part_xhat, scratch) / C;
    __global float *out = dx + (size_t)r * C;
    DL_FOR_ROW(c, lid, n, C) {
        float xhat = (x[c] - m) * s;
        float dxhat = g[c] * params[gamma_off + c];
        out[c] = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
}

/* layernorm_backward_params fused with the bias gradient of the Linear
 * whose output the LayerNorm's input was (residual layers: its input
 * gradient dx is that Linear's output gradient): dbias += sum_r dx. Each sum
 * in bias_backward's order, so the bits are those of the two kernels. */
__kernel void layernorm_backward_params_bias(__global float *grads, __global const float *dy,
                                             __global const float *in, __global const float *mean,
                                             __global const float *rstd, __global const float *dx,
                                             int gamma_off, int beta_off, int bias_off, int rows,
                                             int C) {
    int c = get_global_id(0);
    if (c >= C) return;
    float dg = 0.0f, db = 0.0f, dbias = 0.0f;
    DL_FOR_REDUCE(r, rows) {
        size_t i = (size_t)r * C + c;
        float d = dy[i];
        dg += d * (in[i] - mean[r]) * rstd[r];
        db += d;
        dbias += dx[i];
    }
    grads[gamma_off + c] += dg;
    grads[beta_off + c] += db;
    grads[bias_off + c] += dbias;
}

/* dgamma += sum_r dy*xhat, dbeta += sum_r dy: one work item per column. */
__kernel void layernorm_backward_params(__global float *grads, __global const float *dy,
                                        __global const float *in, __global const float *mean,
                                        __global const float *rstd, int gamma_off, int beta_off,
                                        int rows, int C) {
    int c = get_global_id(0);
    if (c >= C) return;
    float dg = 0.0f, db = 0.0f;
    DL_FOR_REDUCE(r, rows) {
        float d = dy[(size_t)r * C + c];
        dg += d * (in[(size_t)r * C + c] - mean[r]) * rstd[r];
        db += d;
    }
    grads[gamma_off + c] += dg;
    grads[beta_off + c] += db;
}
