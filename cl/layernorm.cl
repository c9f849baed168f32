/* LayerNorm over the last dimension (biased variance, as torch), one
 * work-group per row (dl_group_sum), or one item per row on a CPU
 * (DL_ROW_LANES, cl/common.cl). Forward keeps mean and 1/std per row for the backward. */

#ifdef DL_ROW_LANES
/* One item per row (DL_ROW_LANES): part holds the 16 lanes' shares of the
 * row sum. */
static inline void layernorm_row_finish(__global float *out, __global float *mean_out,
                                        __global float *rstd_out, __global const float *x,
                                        __global const float *params, int gamma_off, int beta_off,
                                        int r, int C, float eps, float16 part) {
    float mean = dl_lanes_sum(part) / C;
    float16 sq = 0.0f;
    DL_FOR_VECS(c, C) {
        float16 d = vload16(0, x + c) - mean;
        sq += d * d;
    }
    DL_LANES_TAIL(sq, C, c, lane, {
        float d = x[c] - mean;
        *lane += d * d;
    });
    float rstd = 1.0f / sqrt(dl_lanes_sum(sq) / C + eps);
    __global float *y = out + (size_t)r * C;
    __global const float *gamma = params + gamma_off, *beta = params + beta_off;
    for (int c = 0; c + 16 <= C; c += 16)
        vstore16((vload16(0, x + c) - mean) * rstd * vload16(0, gamma + c) + vload16(0, beta + c), 0,
                 y + c);
    for (int c = DL_LANES_FULL(C); c < C; c++) y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
    mean_out[r] = mean;
    rstd_out[r] = rstd;
}

__kernel void layernorm_forward(__global float *out, __global float *mean_out,
                                __global float *rstd_out, __global const float *in,
                                __global const float *params, int gamma_off, int beta_off,
                                int rows, int C, float eps) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const float *x = in + (size_t)r * C;
    float16 part = 0.0f;
    DL_FOR_VECS(c, C) part += vload16(0, x + c);
    DL_LANES_TAIL(part, C, c, lane, *lane += x[c]);
    layernorm_row_finish(out, mean_out, rstd_out, x, params, gamma_off, beta_off, r, C, eps, part);
}

__kernel void bias_residual_layernorm_forward(__global float *out, __global float *mean_out,
                                              __global float *rstd_out, __global float *pre,
                                              __global const float *residual,
                                              __global const float *params, int bias_off,
                                              int gamma_off, int beta_off, int rows, int C,
                                              float eps) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global float *x = pre + (size_t)r * C;
    __global const float *res = residual + (size_t)r * C;
    __global const float *bias = params + bias_off;
    float16 part = 0.0f;
    DL_FOR_VECS(c, C) {
        float16 v = vload16(0, res + c) + (vload16(0, x + c) + vload16(0, bias + c));
        vstore16(v, 0, x + c);
        part += v;
    }
    DL_LANES_TAIL(part, C, c, lane, {
        float v = res[c] + (x[c] + bias[c]);
        x[c] = v;
        *lane += v;
    });
    layernorm_row_finish(out, mean_out, rstd_out, x, params, gamma_off, beta_off, r, C, eps, part);
}

__kernel void layernorm_backward_input(__global float *dx, __global const float *dy,
                                       __global const float *in, __global const float *mean,
                                       __global const float *rstd, __global const float *params,
                                       int gamma_off, int rows, int C) {
    int r = get_global_id(0);
    if (r >= rows) return;
    __global const float *x = in + (size_t)r * C;
    __global const float *g = dy + (size_t)r * C;
    __global const float *gamma = params + gamma_off;
    float m = mean[r], s = rstd[r];
    float16 part = 0.0f, part_xhat = 0.0f;
    DL_FOR_VECS(c, C) {
        float16 dxhat = vload16(0, g + c) * vload16(0, gamma + c);
        part += dxhat;
        part_xhat += dxhat * (vload16(0, x + c) - m) * s;
    }
    DL_LANES_TAIL(part, C, c, lane, *lane += g[c] * gamma[c]);
    DL_LANES_TAIL(part_xhat, C, c, lane, {
        float dxhat = g[c] * gamma[c];
        *lane += dxhat * (x[c] - m) * s;
    });
    float mean_dxhat = dl_lanes_sum(part) / C;
    float mean_dxhat_xhat = dl_lanes_sum(part_xhat) / C;
    __global float *out = dx + (size_t)r * C;
    for (int c = 0; c + 16 <= C; c += 16) {
        float16 xhat = (vload16(0, x + c) - m) * s;
        float16 dxhat = vload16(0, g + c) * vload16(0, gamma + c);
        vstore16(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat), 0, out + c);
    }
    for (int c = DL_LANES_FULL(C); c < C; c++) {
        float xhat = (x[c] - m) * s;
        float dxhat = g[c] * gamma[c];
        out[c] = s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
}
#else
/* The rest of row r's LayerNorm once this item's share of the row sum is
 * in part: mean, biased variance, the normalized row, and the row's mean and
 * 1/std for the backward pass. Every item of the group calls it (it holds
 * the group's barriers). */
static inline void layernorm_row_finish(__global float *out, __global float *mean_out,
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
#endif

/* layernorm_backward_params fused with the bias gradient of the Linear
 * whose output the LayerNorm's input was (residual layers: its input
 * gradient dx is that Linear's output gradient): dbias += sum_r dx. Each sum
 * in bias_backward's order, so the bits are those of the two kernels. With
 * has_bias 0, dx is not read: layernorm_backward_params. */
static inline void layernorm_params_column(__global float *grads, __global const float *dy,
                                           __global const float *in, __global const float *mean,
                                           __global const float *rstd, __global const float *dx,
                                           int gamma_off, int beta_off, int bias_off, int has_bias,
                                           int rows, int C, int c) {
    float dg = 0.0f, db = 0.0f, dbias = 0.0f;
    DL_FOR_REDUCE(r, rows) {
        size_t i = (size_t)r * C + c;
        float d = dy[i];
        dg += d * (in[i] - mean[r]) * rstd[r];
        db += d;
        if (has_bias) dbias += dx[i];
    }
    grads[gamma_off + c] += dg;
    grads[beta_off + c] += db;
    if (has_bias) grads[bias_off + c] += dbias;
}

#if DL_COL_VEC > 1
/* The same sums for DL_COL_VEC adjacent columns from c0, element by element. */
static inline void layernorm_params_vector(__global float *grads, __global const float *dy,
                                           __global const float *in, __global const float *mean,
                                           __global const float *rstd, __global const float *dx,
                                           int gamma_off, int beta_off, int bias_off, int has_bias,
                                           int rows, int C, int c0) {
    colvec_t dg = 0.0f, db = 0.0f, dbias = 0.0f;
    DL_FOR_REDUCE(r, rows) {
        size_t i = (size_t)r * C + c0;
        colvec_t d = COL_LOAD(dy, i);
        dg += d * (COL_LOAD(in, i) - mean[r]) * rstd[r];
        db += d;
        if (has_bias) dbias += COL_LOAD(dx, i);
    }
    COL_STORE(grads, gamma_off + c0, COL_LOAD(grads, gamma_off + c0) + dg);
    COL_STORE(grads, beta_off + c0, COL_LOAD(grads, beta_off + c0) + db);
    if (has_bias) COL_STORE(grads, bias_off + c0, COL_LOAD(grads, bias_off + c0) + dbias);
}
#endif

static inline void layernorm_params_item(__global float *grads, __global const float *dy,
                                         __global const float *in, __global const float *mean,
                                         __global const float *rstd, __global const float *dx,
                                         int gamma_off, int beta_off, int bias_off, int has_bias,
                                         int rows, int C) {
#if DL_COL_VEC > 1
    int c0 = get_global_id(0) * DL_COL_VEC;
    if (c0 + DL_COL_VEC <= C) {
        layernorm_params_vector(grads, dy, in, mean, rstd, dx, gamma_off, beta_off, bias_off,
                                has_bias, rows, C, c0);
        return;
    }
    for (int c = c0; c < C; c++)
        layernorm_params_column(grads, dy, in, mean, rstd, dx, gamma_off, beta_off, bias_off,
                                has_bias, rows, C, c);
#else
    int c = get_global_id(0);
    if (c < C)
        layernorm_params_column(grads, dy, in, mean, rstd, dx, gamma_off, beta_off, bias_off,
                                has_bias, rows, C, c);
#endif
}

__kernel void layernorm_backward_params_bias(__global float *grads, __global const float *dy,
                                             __global const float *in, __global const float *mean,
                                             __global const float *rstd, __global const float *dx,
                                             int gamma_off, int beta_off, int bias_off, int rows,
                                             int C) {
    layernorm_params_item(grads, dy, in, mean, rstd, dx, gamma_off, beta_off, bias_off, 1, rows,
                          C);
}

/* dgamma += sum_r dy*xhat, dbeta += sum_r dy, column by column. */
__kernel void layernorm_backward_params(__global float *grads, __global const float *dy,
                                        __global const float *in, __global const float *mean,
                                        __global const float *rstd, int gamma_off, int beta_off,
                                        int rows, int C) {
    layernorm_params_item(grads, dy, in, mean, rstd, dy, gamma_off, beta_off, 0, 0, rows, C);
}
