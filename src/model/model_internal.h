/* Private to src/model: the device model's buffers, parameter offsets and the
 * kernel launchers shared by the forward and backward passes. */
#ifndef DEDLOC_MODEL_INTERNAL_H
#define DEDLOC_MODEL_INTERNAL_H

#include "dedloc/model.h"

/* Offsets (in elements) of one AlbertLayer's parameters in the flat vector;
 * the same offsets index the gradient vector. */
typedef struct layer_offsets {
    size_t full_ln_g, full_ln_b;
    size_t q_w, q_b, k_w, k_b, v_w, v_b, dense_w, dense_b;
    size_t att_ln_g, att_ln_b;
    size_t ffn_w, ffn_b, ffn_out_w, ffn_out_b;
} layer_offsets;

typedef struct model_offsets {
    size_t word, position, token_type, emb_ln_g, emb_ln_b, map_w, map_b;
    layer_offsets *layers;        /* [groups * inner_group_num] */
    size_t pool_w, pool_b, pred_bias, pred_ln_g, pred_ln_b, pred_dense_w, pred_dense_b;
    size_t sop_w, sop_b;
} model_offsets;

typedef struct model_kernels {
    cl_kernel embedding_forward, embedding_backward_word, embedding_backward_position,
        embedding_backward_type;
    cl_kernel layernorm_forward, layernorm_backward_input, layernorm_backward_params;
    cl_kernel bias_residual_layernorm_forward, layernorm_backward_params_bias;
    cl_kernel gelu_forward, gelu_backward, tanh_forward, tanh_backward, bias_gelu_forward;
    cl_kernel softmax_forward, softmax_backward;
    cl_kernel bias_add, bias_residual_add, bias_backward, gather_rows, scatter_add_rows;
    cl_kernel cross_entropy;
    cl_kernel storage_keep, storage_load;  /* built for the storage precision */
} model_kernels;

/* Activations of one layer application, kept for the backward pass; each
 * [N, H] unless noted (N = B*T tokens). The layer input is hidden[l]. Every
 * activation is its own buffer sized for (max_batch, max_seq); a smaller
 * batch uses the first N rows. */
typedef struct layer_acts {
    dl_buffer q, k, v, ctx, att_pre, att_out, full_pre;
    dl_buffer ffn_pre;                 /* [N, I] */
    dl_buffer att;                     /* [B, heads, T, T] probabilities */
    dl_buffer att_mean, att_rstd, full_mean, full_rstd; /* [N] */
} layer_acts;

struct dl_model {
    dl_device *dev;
    dl_albert_config cfg;
    dl_param_layout layout;
    dl_precision precision;
    int max_batch, max_seq;
    int layer_count;              /* num_hidden_layers * inner_group_num applications */
    int *layer_weights;           /* [layer_count]: index into off.layers */
    model_offsets off;
    model_kernels k;
    int row_group;                /* work-group of the row kernels (model.c) */
    int col_vec;                  /* columns per work item of the column reductions (model.c) */
    bool row_lanes;               /* the LayerNorm and softmax kernels take a row per item (model.c) */

    dl_buffer params, grads;
    /* inputs and index lists (int32) */
    dl_buffer input_ids, token_type_ids, attention_mask;
    dl_buffer word_sorted_rows, word_seg_ids, word_seg_start;
    dl_buffer mlm_rows, mlm_targets, sop_rows, sop_targets;
    /* activations (float) */
    dl_buffer emb_sum, emb_ln, emb_mean, emb_rstd;  /* [N, E], [N, E], [N], [N] */
    /* Per layer application: its input hidden[l] and what its backward needs.
     * In fp32 the layers compute in these buffers directly. With fp16/bf16
     * storage they hold halves (statistics stay fp32) and each layer computes
     * in the fp32 working set below, keeping (storage_keep) every activation
     * as it is produced and reloading them (storage_load) for its backward. */
    dl_buffer *hidden;                              /* [layer_count + 1] of [N, H]; the last is fp32 */
    layer_acts *layers;                             /* [layer_count] */
    bool staged;                                    /* fp16/bf16: the working set is used */
    /* Recomputation: layers[] is not allocated; the forward pass keeps only
     * hidden[], and each layer's backward first reruns its forward in the
     * working set (with its own statistics). */
    bool recompute;
    bool use_work;                                  /* staged || recompute */
    layer_acts work;                                /* fp32 working set (statistics used only with recompute) */
    dl_buffer x_work;                               /* fp32 [N, H]: the current layer's input */
    dl_buffer mlm_in, mlm_pre, mlm_act, mlm_ln, mlm_mean, mlm_rstd;  /* [M, H|E], [M] */
    dl_buffer logits, mlm_losses;                   /* [one chunk of M, V], [M] */
    dl_buffer pool_in, pooled, sop_logits, sop_losses;  /* [B, H], [B, H], [B, 2], [B] */
    /* backward scratch */
    dl_buffer d_hidden_a, d_hidden_b, d_ctx, d_q, d_k, d_v;  /* [N, H] */
    dl_buffer ffn_act, d_ffn;                                /* [N, I] */
    dl_buffer d_att;                                         /* [B, heads, T, T] */
    dl_buffer d_emb, d_emb_ln;                               /* [N, E] */
    dl_buffer d_mlm_ln, d_mlm_pre, d_mlm_in;                 /* [M, E], [M, E], [M, H] */
    dl_buffer d_pooled, d_pool_in;                           /* [B, H] */

    /* host staging for index lists and losses */
    int32_t *host_ints;           /* 5 * max_tokens + 1 + max_batch */
    float *host_losses;           /* max_tokens */
    /* shape of the last forward pass */
    int B, T, N, M;
    int word_segments;            /* distinct non-pad token ids in the batch */
    bool logits_valid;            /* the last pass was forward only */
    /* fp16 compute (half_compute.c): NULL unless --precision fp16 runs half GEMMs */
    dl_half_gemm *half;
    dl_buffer params_half;        /* the weights rounded for half GEMMs */
    /* bf16 compute (bf16_compute.c): NULL unless --precision bf16 runs bf16 GEMMs */
    dl_bf16_gemm *bf16;
    /* per-op profile (profile.c); off unless `bench step --profile` */
    bool profiling;
    dl_op_profile *profile;
    int profile_count, profile_cap;
};

/* Uploads the batch (already checked) and builds the index lists; sets B, T, N, M. */
int model_upload_batch(dl_model *m, const dl_batch *batch);
/* Forward through both losses; with want_grad the loss gradients (times
 * loss_scale) are left in logits and sop_logits for the backward pass. The
 * per-row losses stay on the device until model_read_losses. */
int model_forward_pass(dl_model *m, float loss_scale, bool want_grad);
/* Downloads the per-row losses of the last forward pass and averages them. */
int model_read_losses(dl_model *m, dl_losses *out);
/* Attention GEMMs for every sequence, batched over heads; each operand is
 * either a [B, heads, T, T] score buffer or a [N, H] token buffer. again:
 * as model_gemm_again. */
int model_attention_gemm(dl_model *m, bool trans_a, bool trans_b, int rows, int cols, int inner,
                         const dl_buffer *a, bool a_is_scores, const dl_buffer *b,
                         bool b_is_scores, dl_buffer *c, bool c_is_scores, bool again);
/* Storage staging (no-ops without the working set, and when the stored copy
 * is not allocated, as the per-layer activations under recompute): keep
 * writes work into the stored copy and rounds work to it; load fills work
 * from the stored copy. n in elements. */
int model_keep(dl_model *m, dl_buffer *work, dl_buffer *stored, size_t n);
int model_load(dl_model *m, dl_buffer *work, const dl_buffer *stored, size_t n);
/* The buffers layer l computes with: the stored ones in fp32, else the
 * working set with layer l's own statistics. */
void model_layer_view(dl_model *m, int l, layer_acts *view, dl_buffer **x);
/* Forward of layer application l. recompute_out NULL: the forward pass
 * (output to hidden[l+1], activations kept). Otherwise the backward pass's
 * recomputation: the input is already in the working set, the output goes to
 * recompute_out (a scratch buffer: the backward pass does not read it) and
 * nothing is kept. */
int model_layer_forward(dl_model *m, int l, dl_buffer *recompute_out);
/* The MLM decoder in chunks of at most model_mlm_chunk_rows rows
 * (mlm_decoder.c): logits, their loss and, with want_grad, the decoder's
 * weight, bias and input gradients (d_mlm_ln), chunk by chunk. */
enum { MODEL_MLM_CHUNK = 512 };
size_t model_mlm_chunk_rows(size_t rows);
int model_mlm_decoder(dl_model *m, float grad_scale, bool want_grad);
/* After a forward-only pass: the logits of every masked row, [M, V]. */
int model_mlm_logits_download(dl_model *m, float *out);
/* Backward from the loss gradients; accumulates into m->grads. */
int model_backward_pass(dl_model *m);

/* Profiling (profile.c): begin drains the queue and returns the time (0
 * when off, -1 on error); end drains it again and charges the wall time to
 * `name`. Both are no-ops with profiling off. */
double model_profile_begin(dl_model *m);
int model_profile_end(dl_model *m, const char *name, double t0);
/* dl_gemm, charged to `what` in the profile. */
int model_gemm(dl_model *m, const char *what, const dl_gemm_args *g);
/* model_gemm right after other products, when the matrices g reads are
 * unchanged since the products from the last model_gemm on read them: bf16
 * compute reuses their rounding (dl_bf16_gemm_run_again). */
int model_gemm_again(dl_model *m, const char *what, const dl_gemm_args *g);

/* fp16 compute (half_compute.c): open chooses it from the precision, the
 * device and DEDLOC_FP16_COMPUTE; params rounds the weights after each
 * upload; gemm runs one product in half; bytes is what the rounded weights and the scratch hold. */
int model_half_open(dl_model *m);
/* The largest A, B (not the weights) and C spans of the model's GEMMs at
 * batch x seq (memory.c): what the fp16 compute scratch is reserved for. */
void model_half_scratch_spans(const dl_albert_config *cfg, size_t batch, size_t seq, size_t span[3]);
/* Allocates the rounded weights and the scratch for the model's shape. */
int model_half_reserve(dl_model *m);
void model_half_close(dl_model *m);
int model_half_params(dl_model *m);
size_t model_half_bytes(const dl_model *m);
int model_half_gemm(dl_model *m, const dl_gemm_args *g);

/* bf16 compute (bf16_compute.c): open chooses it from the precision, the
 * device and DEDLOC_BF16_COMPUTE (logging once why not, when not); params
 * rounds the host weights after each upload. */
int model_bf16_open(dl_model *m);
void model_bf16_close(dl_model *m);
int model_bf16_params(dl_model *m, const float *params);

/* Enqueues a 1- or 2-D launch with the model's fixed work-group size. */
int model_launch(dl_model *m, cl_kernel k, int dims, const size_t *global);
/* Enqueues a row kernel: one work-group of m->row_group items per row
 * (fewer if the kernel itself allows fewer). */
int model_launch_rows(dl_model *m, cl_kernel k, int rows);
/* Enqueues a LayerNorm or softmax kernel over rows: a work-group per row,
 * or an item per row when m->row_lanes. */
int model_launch_row_items(dl_model *m, cl_kernel k, int rows);
/* Enqueues a column reduction over C columns: m->col_vec columns per item. */
int model_launch_columns(dl_model *m, cl_kernel k, int C);

/* ---- launchers (ops.c). Parameter and gradient offsets are in elements. ---- */
/* out[rows, out_f] = in[rows, in_f] W^T (no bias; see op_bias_add). */
int op_linear_forward(dl_model *m, dl_buffer *out, const dl_buffer *in, size_t w_off, int rows,
                      int in_features, int out_features);
/* op_linear_forward of the input of the op_linear_forward before it, which
 * nothing has written since (Q, K and V of one input). */
int op_linear_forward_same_input(dl_model *m, dl_buffer *out, const dl_buffer *in, size_t w_off, int rows,
                                 int in_features, int out_features);
/* dW += dy^T x; db += colsum(dy); dx = dy W, or dx += dy W with accumulate;
 * dx may be NULL. */
int op_linear_backward(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                       const dl_buffer *x, size_t w_off, size_t b_off, int rows,
                       int in_features, int out_features);
/* op_linear_backward of the input x of the op_linear_backward before it,
 * which nothing has written since (Q, K and V of one input). */
int op_linear_backward_same_input(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                                  const dl_buffer *x, size_t w_off, size_t b_off, int rows,
                                  int in_features, int out_features);
int op_bias_add(dl_model *m, dl_buffer *out, size_t bias_off, int rows, int C);
/* Loss per row into losses[row0..] against targets[row0..]; with want_grad
 * the logits become their gradient times grad_scale. */
int op_cross_entropy(dl_model *m, dl_buffer *logits, const dl_buffer *targets, int row0,
                     dl_buffer *losses, int rows, int V, float grad_scale, bool want_grad);
/* pre += bias (per column); act = gelu_new(pre): one launch. */
int op_bias_gelu(dl_model *m, dl_buffer *pre, dl_buffer *act, size_t bias_off, int rows, int C);
int op_bias_residual_add(dl_model *m, dl_buffer *out, const dl_buffer *residual, size_t bias_off,
                         int rows, int C);
int op_layernorm_forward(dl_model *m, dl_buffer *out, dl_buffer *mean, dl_buffer *rstd,
                         const dl_buffer *in, size_t g_off, size_t b_off, int rows, int C);
/* A residual layer's end: pre = residual + (pre + bias), kept (model_keep),
 * out = LayerNorm(pre). One launch in fp32; with 16-bit storage the kept copy
 * rounds pre before the LayerNorm reads it, so three. */
int op_bias_residual_layernorm(dl_model *m, dl_buffer *pre, dl_buffer *kept,
                               const dl_buffer *residual, size_t bias_off, dl_buffer *out,
                               dl_buffer *mean, dl_buffer *rstd, size_t g_off, size_t b_off,
                               int rows, int C);
/* Writes dx; accumulates the gamma and beta gradients. */
int op_layernorm_backward(dl_model *m, dl_buffer *dx, const dl_buffer *dy, const dl_buffer *in,
                          const dl_buffer *mean, const dl_buffer *rstd, size_t g_off,
                          size_t b_off, int rows, int C);
/* op_layernorm_backward where the LayerNorm's input came out of a Linear
 * (plus a residual): that Linear's bias gradient (bias_off) is summed in the
 * same pass as gamma's and beta's. Pair it with op_linear_backward_weights. */
int op_layernorm_backward_bias(dl_model *m, dl_buffer *dx, const dl_buffer *dy,
                               const dl_buffer *in, const dl_buffer *mean, const dl_buffer *rstd,
                               size_t g_off, size_t b_off, size_t bias_off, int rows, int C);
/* op_linear_backward without the bias gradient. */
int op_linear_backward_weights(dl_model *m, dl_buffer *dx, bool accumulate, const dl_buffer *dy,
                               const dl_buffer *x, size_t w_off, int rows, int in_features,
                               int out_features);
/* Elementwise kernels of the form k(out, in, n). */
int op_unary(dl_model *m, cl_kernel k, dl_buffer *out, const dl_buffer *in, int n);
/* Elementwise backward kernels of the form k(dx, dy, x, n). */
int op_unary_backward(dl_model *m, cl_kernel k, dl_buffer *dx, const dl_buffer *dy,
                      const dl_buffer *x, int n);
/* gather_rows / scatter_add_rows: k(out, in, index, rows, C). */
int op_rows(dl_model *m, cl_kernel k, dl_buffer *out, const dl_buffer *in,
            const dl_buffer *index, int rows, int C);
int op_bias_backward(dl_model *m, const dl_buffer *dy, size_t b_off, int rows, int C);

#endif
