/* Launchers for the model's kernels and GEMMs. Linear layers follow PyTorch:
 * the weight is [out, in] row-major and y = x W^T + b. */
#include <stdlib.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

/* dl_launch, charged to the kernel's function name when profiling. */
static int launch_timed(dl_model *m, cl_kernel k, int dims, const size_t *global, const size_t *local) {
    if (!m->profiling) return dl_launch(m->dev, k, (cl_uint)dims, global, local);
    char name[64] = "kernel";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    double t0 = model_profile_begin(m);
    if (dl_launch(m->dev, k, (cl_uint)dims, global, local)) return -1;
    return model_profile_end(m, name, t0);
}

/* A fixed work-group size for every launch: the kernels bound-check, and a
 * driver that chose the size per launch (PoCL does) would compile a kernel
 * variant for each batch shape. */
int model_launch(dl_model *m, cl_kernel k, int dims, const size_t *global) {
    size_t group = dl_device_get_info(m->dev)->max_work_group;
    size_t want = 64;
    /* DEDLOC_WORK_GROUP: another work-group size, as another vendor's
     * driver would pick (the cross-vendor test runs peers with several). */
    const char *env = getenv("DEDLOC_WORK_GROUP");
    if (env && atoi(env) > 0 && atoi(env) <= 1024) want = (size_t)atoi(env);
    size_t local[2] = {group < want ? group : want, 1};
    return launch_timed(m, k, dims, global, local);
}

int model_launch_rows(dl_model *m, cl_kernel k, int rows) {
    size_t allowed = 0, group = (size_t)m->row_group;
    if (dl_cl_check(clGetKernelWorkGroupInfo(k, dl_device_get_info(m->dev)->device_id,
                                             CL_KERNEL_WORK_GROUP_SIZE, sizeof allowed, &allowed, NULL),
                    "clGetKernelWorkGroupInfo (row kernel)"))
        return -1;
    while (group > 1 && group > allowed) group /= 2;
    size_t global = (size_t)rows * group, local = group;
    if (rows == 0) return 0;
    return launch_timed(m, k, 1, &global, &local);
}

int model_launch_row_items(dl_model *m, cl_kernel k, int rows) {
    if (!m->row_lanes) return model_launch_rows(m, k, rows);
    if (rows == 0) return 0;
    size_t local = 4, global = ((size_t)rows + local - 1) / local * local;
    return launch_timed(m, k, 1, &global, &local);
}

int model_launch_columns(dl_model *m, cl_kernel k, int C) {
    if (m->col_vec <= 1) {
        size_t global[1] = {(size_t)C};
        return model_launch(m, k, 1, global);
    }
    /* A few vectors per group, so that even a 128-column reduction is
     * shared among the CPU's cores. */
    size_t items = ((size_t)C + (size_t)m->col_vec - 1) / (size_t)m->col_vec, local = 2;
    size_t global = (items + local - 1) / local * local;
    return launch_timed(m, k, 1, &global, &local);
}

/* 2-D launch over (columns, rows). */
static int launch_2d(dl_model *m, cl_kernel k, int cols, int rows) {
    size_t global[2] = {(size_t)cols, (size_t)rows};
    return model_launch(m, k, 2, global);
}

/* An elementwise kernel of cl/activation.cl over n elements: m->col_vec
 * elements per item. */
static int launch_vectors(dl_model *m, cl_kernel k, int n) {
    size_t global[1] = {((size_t)n + (size_t)m->col_vec - 1) / (size_t)m->col_vec};
    return model_launch(m, k, 1, global);
}

static int linear_forward(dl_model *m, dl_buffer *out, const dl_buffer *in, size_t w_off, int rows,
                          int in_features, int out_features, bool same_input) {
    dl_gemm_args g = {.trans_b = true, .m = (size_t)rows, .n = (size_t)out_features,
                      .k = (size_t)in_features, .alpha = 1.0f, .beta = 0.0f,
                      .a = in, .lda = (size_t)in_features,
                      .b = &m->params, .b_off = w_off, .ldb = (size_t)in_features,
                      .c = out, .ldc = (size_t)out_features, .batch_count = 1};
    return (same_input ? model_gemm_again : model_gemm)(m, "gemm linear forward", &g);
}

int op_linear_forward(dl_model *m, dl_buffer *out, const dl_buffer *in, size_t w_off, int rows,
                      int in_features, int out_features) {
    return linear_forward(m, out, in, w_off, rows, in_features, out_features, false);
}

int op_linear_forward_same_input(dl_model *m, dl_buffer *out, const dl_buffer *in, size_t w_off, int rows,
                                 int in_features, int out_features) {
    return linear_forward(m, out, in, w_off, rows, in_features, out_features, true);
}

int op_bias_backward(dl_model *m, const dl_buffer *dy, size_t b_off, int rows, int C) {
    cl_kernel k = m->k.bias_backward;
    int off = (int)b_off;
    if (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, off) ||
        DL_ARG(k, 3, rows) || DL_ARG(k, 4, C))
        return -1;
    return model_launch_columns(m, k, C);
}

static int linear_backward(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                           const dl_buffer *x, size_t w_off, const size_t *b_off, int rows,
                           int in_features, int out_features, bool same_input) {
    /* dW[out, in] += dy^T[out, rows] x[rows, in] */
    dl_gemm_args gw = {.trans_a = true, .m = (size_t)out_features, .n = (size_t)in_features,
                       .k = (size_t)rows, .alpha = 1.0f, .beta = 1.0f,
                       .a = dy, .lda = (size_t)out_features,
                       .b = x, .ldb = (size_t)in_features,
                       .c = &m->grads, .c_off = w_off, .ldc = (size_t)in_features,
                       .batch_count = 1};
    if ((same_input ? model_gemm_again : model_gemm)(m, "gemm linear dW", &gw)) return -1;
    if (b_off && op_bias_backward(m, dy, *b_off, rows, out_features)) return -1;
    if (!dx) return 0;
    /* dx[rows, in] (+)= dy[rows, out] W[out, in] */
    dl_gemm_args gx = {.m = (size_t)rows, .n = (size_t)in_features, .k = (size_t)out_features,
                       .alpha = 1.0f, .beta = accumulate ? 1.0f : 0.0f,
                       .a = dy, .lda = (size_t)out_features,
                       .b = &m->params, .b_off = w_off, .ldb = (size_t)in_features,
                       .c = dx, .ldc = (size_t)in_features, .batch_count = 1};
    /* dy is as the dW product read it (the bias gradient writes only the
     * gradients): its rounding serves again. */
    return model_gemm_again(m, "gemm linear dx", &gx);
}

int op_linear_backward(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                       const dl_buffer *x, size_t w_off, size_t b_off, int rows,
                       int in_features, int out_features) {
    return linear_backward(m, dx, accumulate, dy, x, w_off, &b_off, rows, in_features,
                           out_features, false);
}

int op_linear_backward_same_input(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                                  const dl_buffer *x, size_t w_off, size_t b_off, int rows,
                                  int in_features, int out_features) {
    return linear_backward(m, dx, accumulate, dy, x, w_off, &b_off, rows, in_features,
                           out_features, true);
}

int op_linear_backward_weights(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                               const dl_buffer *x, size_t w_off, int rows, int in_features,
                               int out_features) {
    return linear_backward(m, dx, accumulate, dy, x, w_off, NULL, rows, in_features,
                           out_features, false);
}

int op_bias_add(dl_model *m, dl_buffer *out, size_t bias_off, int rows, int C) {
    cl_kernel k = m->k.bias_add;
    int off = (int)bias_off;
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, m->params.mem) || DL_ARG(k, 2, off) ||
        DL_ARG(k, 3, rows) || DL_ARG(k, 4, C))
        return -1;
    return launch_2d(m, k, C, rows);
}

int op_bias_gelu(dl_model *m, dl_buffer *pre, dl_buffer *act, size_t bias_off, int rows, int C) {
    cl_kernel k = m->k.bias_gelu_forward;
    int off = (int)bias_off;
    if (DL_ARG(k, 0, pre->mem) || DL_ARG(k, 1, act->mem) || DL_ARG(k, 2, m->params.mem) ||
        DL_ARG(k, 3, off) || DL_ARG(k, 4, rows) || DL_ARG(k, 5, C))
        return -1;
    return launch_2d(m, k, (C + m->col_vec - 1) / m->col_vec, rows);
}

int op_bias_residual_add(dl_model *m, dl_buffer *out, const dl_buffer *residual, size_t bias_off,
                         int rows, int C) {
    cl_kernel k = m->k.bias_residual_add;
    int off = (int)bias_off;
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, residual->mem) || DL_ARG(k, 2, m->params.mem) ||
        DL_ARG(k, 3, off) || DL_ARG(k, 4, rows) || DL_ARG(k, 5, C))
        return -1;
    return launch_2d(m, k, C, rows);
}

int op_layernorm_forward(dl_model *m, dl_buffer *out, dl_buffer *mean, dl_buffer *rstd,
                         const dl_buffer *in, size_t g_off, size_t b_off, int rows, int C) {
    cl_kernel k = m->k.layernorm_forward;
    int go = (int)g_off, bo = (int)b_off;
    float eps = m->cfg.layer_norm_eps;
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, mean->mem) || DL_ARG(k, 2, rstd->mem) ||
        DL_ARG(k, 3, in->mem) || DL_ARG(k, 4, m->params.mem) || DL_ARG(k, 5, go) ||
        DL_ARG(k, 6, bo) || DL_ARG(k, 7, rows) || DL_ARG(k, 8, C) || DL_ARG(k, 9, eps))
        return -1;
    return model_launch_row_items(m, k, rows);
}

int op_bias_residual_layernorm(dl_model *m, dl_buffer *pre, dl_buffer *kept,
                               const dl_buffer *residual, size_t bias_off, dl_buffer *out,
                               dl_buffer *mean, dl_buffer *rstd, size_t g_off, size_t b_off,
                               int rows, int C) {
    if (m->staged)
        return op_bias_residual_add(m, pre, residual, bias_off, rows, C) ||
                       model_keep(m, pre, kept, (size_t)rows * C) ||
                       op_layernorm_forward(m, out, mean, rstd, pre, g_off, b_off, rows, C)
                   ? -1
                   : 0;
    cl_kernel k = m->k.bias_residual_layernorm_forward;
    int bo = (int)bias_off, go = (int)g_off, beta = (int)b_off;
    float eps = m->cfg.layer_norm_eps;
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, mean->mem) || DL_ARG(k, 2, rstd->mem) ||
        DL_ARG(k, 3, pre->mem) || DL_ARG(k, 4, residual->mem) || DL_ARG(k, 5, m->params.mem) ||
        DL_ARG(k, 6, bo) || DL_ARG(k, 7, go) || DL_ARG(k, 8, beta) || DL_ARG(k, 9, rows) ||
        DL_ARG(k, 10, C) || DL_ARG(k, 11, eps))
        return -1;
    return model_launch_row_items(m, k, rows);
}

static int layernorm_backward_input(dl_model *m, dl_buffer *dx, const dl_buffer *dy,
                                    const dl_buffer *in, const dl_buffer *mean,
                                    const dl_buffer *rstd, size_t g_off, int rows, int C) {
    cl_kernel k = m->k.layernorm_backward_input;
    int go = (int)g_off;
    if (DL_ARG(k, 0, dx->mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, in->mem) ||
        DL_ARG(k, 3, mean->mem) || DL_ARG(k, 4, rstd->mem) || DL_ARG(k, 5, m->params.mem) ||
        DL_ARG(k, 6, go) || DL_ARG(k, 7, rows) || DL_ARG(k, 8, C))
        return -1;
    return model_launch_row_items(m, k, rows);
}

int op_layernorm_backward_bias(dl_model *m, dl_buffer *dx, const dl_buffer *dy,
                               const dl_buffer *in, const dl_buffer *mean, const dl_buffer *rstd,
                               size_t g_off, size_t b_off, size_t bias_off, int rows, int C) {
    if (layernorm_backward_input(m, dx, dy, in, mean, rstd, g_off, rows, C)) return -1;
    cl_kernel k = m->k.layernorm_backward_params_bias;
    int go = (int)g_off, bo = (int)b_off, lo = (int)bias_off;
    if (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, in->mem) ||
        DL_ARG(k, 3, mean->mem) || DL_ARG(k, 4, rstd->mem) || DL_ARG(k, 5, dx->mem) ||
        DL_ARG(k, 6, go) || DL_ARG(k, 7, bo) || DL_ARG(k, 8, lo) || DL_ARG(k, 9, rows) ||
        DL_ARG(k, 10, C))
        return -1;
    return model_launch_columns(m, k, C);
}

int op_layernorm_backward(dl_model *m, dl_buffer *dx, const dl_buffer *dy, const dl_buffer *in,
                          const dl_buffer *mean, const dl_buffer *rstd, size_t g_off,
                          size_t b_off, int rows, int C) {
    cl_kernel k = m->k.layernorm_backward_input;
    int go = (int)g_off, bo = (int)b_off;
    if (DL_ARG(k, 0, dx->mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, in->mem) ||
        DL_ARG(k, 3, mean->mem) || DL_ARG(k, 4, rstd->mem) || DL_ARG(k, 5, m->params.mem) ||
        DL_ARG(k, 6, go) || DL_ARG(k, 7, rows) || DL_ARG(k, 8, C))
        return -1;
    if (model_launch_row_items(m, k, rows)) return -1;
    k = m->k.layernorm_backward_params;
    if (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, in->mem) ||
        DL_ARG(k, 3, mean->mem) || DL_ARG(k, 4, rstd->mem) || DL_ARG(k, 5, go) ||
        DL_ARG(k, 6, bo) || DL_ARG(k, 7, rows) || DL_ARG(k, 8, C))
        return -1;
    return model_launch_columns(m, k, C);
}

int op_unary(dl_model *m, cl_kernel k, dl_buffer *out, const dl_buffer *in, int n) {
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, in->mem) || DL_ARG(k, 2, n)) return -1;
    return launch_vectors(m, k, n);
}

int op_unary_backward(dl_model *m, cl_kernel k, dl_buffer *dx, const dl_buffer *dy,
                      const dl_buffer *x, int n) {
    if (DL_ARG(k, 0, dx->mem) || DL_ARG(k, 1, dy->mem) || DL_ARG(k, 2, x->mem) ||
        DL_ARG(k, 3, n))
        return -1;
    return launch_vectors(m, k, n);
}

int op_rows(dl_model *m, cl_kernel k, dl_buffer *out, const dl_buffer *in,
            const dl_buffer *index, int rows, int C) {
    if (DL_ARG(k, 0, out->mem) || DL_ARG(k, 1, in->mem) || DL_ARG(k, 2, index->mem) ||
        DL_ARG(k, 3, rows) || DL_ARG(k, 4, C))
        return -1;
    return launch_2d(m, k, C, rows);
}

int op_cross_entropy(dl_model *m, dl_buffer *logits, const dl_buffer *targets, int row0,
                     dl_buffer *losses, int rows, int V, float grad_scale, bool want_grad) {
    cl_kernel k = m->k.cross_entropy;
    int grad = want_grad ? 1 : 0;
    if (DL_ARG(k, 0, logits->mem) || DL_ARG(k, 1, targets->mem) || DL_ARG(k, 2, losses->mem) ||
        DL_ARG(k, 3, rows) || DL_ARG(k, 4, V) || DL_ARG(k, 5, grad_scale) || DL_ARG(k, 6, grad) ||
        DL_ARG(k, 7, row0))
        return -1;
    return model_launch_rows(m, k, rows);
}
