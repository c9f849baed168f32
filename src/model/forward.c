/* Batch upload and the forward pass of AlbertForPreTraining, with both losses.
 * N = B*T token rows; the MLM head runs only on the M labelled rows (its
 * loss, and so every gradient, depends on nothing else). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

static int upload_ints(dl_model *m, dl_buffer *buf, const int32_t *src, size_t count) {
    if (!count) return 0;
    return dl_buffer_upload(m->dev, buf, 0, src, count * sizeof *src);
}

static int compare_keys(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int model_upload_batch(dl_model *m, const dl_batch *batch) {
    int B = batch->batch, T = batch->seq, N = B * T;
    m->B = B;
    m->T = T;
    m->N = N;
    int32_t *sorted_rows = m->host_ints, *seg_ids = sorted_rows + N, *seg_start = seg_ids + N,
            *mlm_rows = seg_start + N + 1, *mlm_targets = mlm_rows + N,
            *sop_rows = mlm_targets + N;
    /* Group positions by token id (stable: ties keep position order) so one
     * work item sums each embedding row: deterministic, no atomics. */
    int64_t *keys = dl_malloc((size_t)N * sizeof *keys);
    if (!keys) return -1;
    for (int n = 0; n < N; n++) keys[n] = (int64_t)batch->input_ids[n] * N + n;
    qsort(keys, (size_t)N, sizeof *keys, compare_keys);
    int segments = 0;
    int rows_kept = 0;
    for (int j = 0; j < N; j++) {
        int id = (int)(keys[j] / N), row = (int)(keys[j] % N);
        /* nn.Embedding(padding_idx=pad_token_id) gives the pad row no gradient. */
        if (id == m->cfg.pad_token_id) continue;
        if (segments == 0 || seg_ids[segments - 1] != id) {
            seg_ids[segments] = id;
            seg_start[segments] = rows_kept;
            segments++;
        }
        sorted_rows[rows_kept++] = row;
    }
    seg_start[segments] = rows_kept;
    free(keys);
    m->word_segments = segments;
    int M = 0;
    for (int n = 0; n < N; n++)
        if (batch->labels[n] != -100) {
            mlm_rows[M] = n;
            mlm_targets[M] = batch->labels[n];
            M++;
        }
    m->M = M;
    for (int b = 0; b < B; b++) sop_rows[b] = b * T;
    if (upload_ints(m, &m->input_ids, batch->input_ids, (size_t)N) ||
        upload_ints(m, &m->token_type_ids, batch->token_type_ids, (size_t)N) ||
        upload_ints(m, &m->attention_mask, batch->attention_mask, (size_t)N) ||
        upload_ints(m, &m->word_sorted_rows, sorted_rows, (size_t)rows_kept) ||
        upload_ints(m, &m->word_seg_ids, seg_ids, (size_t)segments) ||
        upload_ints(m, &m->word_seg_start, seg_start, (size_t)segments + 1) ||
        upload_ints(m, &m->mlm_rows, mlm_rows, (size_t)M) ||
        upload_ints(m, &m->mlm_targets, mlm_targets, (size_t)M) ||
        upload_ints(m, &m->sop_rows, sop_rows, (size_t)B) ||
        upload_ints(m, &m->sop_targets, batch->sentence_order_label, (size_t)B))
        return -1;
    return 0;
}

/* One batched GEMM per attention product over (sequence, head): head h of
 * sequence b is the column block h*hs of the [T, H] rows of b, so heads are
 * hs floats apart (leading dimension H), sequences T*H apart, and no
 * transpose copies are needed. */
int model_attention_gemm(dl_model *m, bool trans_a, bool trans_b, int rows, int cols, int inner,
                         const dl_buffer *a, bool a_is_scores, const dl_buffer *b,
                         bool b_is_scores, dl_buffer *c, bool c_is_scores, bool again) {
    const dl_albert_config *cfg = &m->cfg;
    size_t T = (size_t)m->T, H = (size_t)cfg->hidden_size, heads = (size_t)cfg->num_attention_heads,
           hs = H / heads;
    size_t token_seq = T * H, score_seq = heads * T * T;
    dl_gemm_args g = {
        .trans_a = trans_a, .trans_b = trans_b, .m = (size_t)rows, .n = (size_t)cols,
        .k = (size_t)inner, .alpha = 1.0f, .beta = 0.0f,
        .a = a, .lda = a_is_scores ? T : H, .a_stride = a_is_scores ? T * T : hs,
        .b = b, .ldb = b_is_scores ? T : H, .b_stride = b_is_scores ? T * T : hs,
        .c = c, .ldc = c_is_scores ? T : H, .c_stride = c_is_scores ? T * T : hs,
        .batch_count = heads, .outer_count = (size_t)m->B,
        .a_outer = a_is_scores ? score_seq : token_seq, .b_outer = b_is_scores ? score_seq : token_seq,
        .c_outer = c_is_scores ? score_seq : token_seq};
    return (again ? model_gemm_again : model_gemm)(m, "gemm attention", &g);
}

/* pre += bias, kept, act = gelu(pre). With fp16/bf16 storage the kept copy
 * rounds pre before gelu reads it, as the backward pass's recomputation
 * from the kept copy does; in fp32 one fused launch does both. */
static int ffn_bias_gelu(dl_model *m, dl_buffer *pre, dl_buffer *kept, size_t bias_off, int rows, int C) {
    size_t n = (size_t)rows * C;
    if (!m->staged || !kept->mem) return op_bias_gelu(m, pre, &m->ffn_act, bias_off, rows, C);
    return op_bias_add(m, pre, bias_off, rows, C) || model_keep(m, pre, kept, n) ||
                   op_unary(m, m->k.gelu_forward, &m->ffn_act, pre, (int)n)
               ? -1
               : 0;
}

int model_layer_forward(dl_model *m, int l, dl_buffer *recompute_out) {
    const dl_albert_config *c = &m->cfg;
    const layer_offsets *w = &m->off.layers[m->layer_weights[l]];
    layer_acts view, *a = &view, *kept = &m->layers[l];
    dl_buffer *x;
    model_layer_view(m, l, &view, &x);
    int N = m->N, T = m->T, H = c->hidden_size, I = c->intermediate_size,
        heads = c->num_attention_heads, hs = H / heads;
    size_t NH = (size_t)N * H, scores = (size_t)m->B * heads * T * T;
    if (op_linear_forward(m, &a->q, x, w->q_w, N, H, H) || op_bias_add(m, &a->q, w->q_b, N, H) ||
        model_keep(m, &a->q, &kept->q, NH) ||
        op_linear_forward_same_input(m, &a->k, x, w->k_w, N, H, H) || op_bias_add(m, &a->k, w->k_b, N, H) ||
        model_keep(m, &a->k, &kept->k, NH) ||
        op_linear_forward_same_input(m, &a->v, x, w->v_w, N, H, H) || op_bias_add(m, &a->v, w->v_b, N, H) ||
        model_keep(m, &a->v, &kept->v, NH))
        return -1;
    /* scores = Q K^T per (sequence, head) */
    if (model_attention_gemm(m, false, true, T, T, hs, &a->q, false, &a->k, false, &a->att, true, false))
        return -1;
    cl_kernel k = m->k.softmax_forward;
    int rows = m->B * heads * T;
    float sqrt_d = sqrtf((float)hs);
    if (DL_ARG(k, 0, a->att.mem) || DL_ARG(k, 1, m->attention_mask.mem) || DL_ARG(k, 2, rows) ||
        DL_ARG(k, 3, heads) || DL_ARG(k, 4, T) || DL_ARG(k, 5, sqrt_d) ||
        model_launch_row_items(m, k, rows) || model_keep(m, &a->att, &kept->att, scores))
        return -1;
    /* ctx = P V */
    if (model_attention_gemm(m, false, false, T, hs, T, &a->att, true, &a->v, false, &a->ctx,
                             false, false) ||
        model_keep(m, &a->ctx, &kept->ctx, NH))
        return -1;
    if (op_linear_forward(m, &a->att_pre, &a->ctx, w->dense_w, N, H, H) ||
        op_bias_residual_layernorm(m, &a->att_pre, &kept->att_pre, x, w->dense_b, &a->att_out,
                                   &a->att_mean, &a->att_rstd, w->att_ln_g, w->att_ln_b, N, H) ||
        model_keep(m, &a->att_out, &kept->att_out, NH))
        return -1;
    /* The output overwrites the input's working buffer: x is not read after
     * the attention residual. */
    bool last = l + 1 == m->layer_count;
    dl_buffer *out = recompute_out       ? recompute_out
                     : last || !m->use_work ? &m->hidden[l + 1]
                                            : &m->x_work;
    if (op_linear_forward(m, &a->ffn_pre, &a->att_out, w->ffn_w, N, H, I) ||
        ffn_bias_gelu(m, &a->ffn_pre, &kept->ffn_pre, w->ffn_b, N, I) ||
        op_linear_forward(m, &a->full_pre, &m->ffn_act, w->ffn_out_w, N, I, H) ||
        op_bias_residual_layernorm(m, &a->full_pre, &kept->full_pre, &a->att_out, w->ffn_out_b,
                                   out, &a->full_mean, &a->full_rstd, w->full_ln_g,
                                   w->full_ln_b, N, H))
        return -1;
    if (!last && !recompute_out && model_keep(m, out, &m->hidden[l + 1], NH)) return -1;
    return 0;
}

/* Mean of the per-row losses, summed on the host in row order. */
static int mean_loss(dl_model *m, const dl_buffer *losses, int rows, float *out) {
    if (rows == 0) {
        *out = 0;
        return 0;
    }
    if (dl_buffer_download(m->dev, losses, 0, m->host_losses, (size_t)rows * sizeof(float)))
        return -1;
    double sum = 0;
    for (int i = 0; i < rows; i++) sum += m->host_losses[i];
    *out = (float)(sum / rows);
    return 0;
}

int model_forward_pass(dl_model *m, float loss_scale, bool want_grad) {
    const dl_albert_config *c = &m->cfg;
    const model_offsets *o = &m->off;
    int B = m->B, T = m->T, N = m->N, M = m->M, E = c->embedding_size, H = c->hidden_size;
    cl_kernel k = m->k.embedding_forward;
    int word = (int)o->word, pos = (int)o->position, type = (int)o->token_type;
    size_t global[2] = {(size_t)E, (size_t)N};
    if (DL_ARG(k, 0, m->emb_sum.mem) || DL_ARG(k, 1, m->input_ids.mem) ||
        DL_ARG(k, 2, m->token_type_ids.mem) || DL_ARG(k, 3, m->params.mem) ||
        DL_ARG(k, 4, word) || DL_ARG(k, 5, pos) || DL_ARG(k, 6, type) || DL_ARG(k, 7, N) ||
        DL_ARG(k, 8, T) || DL_ARG(k, 9, E) || model_launch(m, k, 2, global))
        return -1;
    dl_buffer *first = m->use_work ? &m->x_work : &m->hidden[0];
    if (op_layernorm_forward(m, &m->emb_ln, &m->emb_mean, &m->emb_rstd, &m->emb_sum, o->emb_ln_g,
                             o->emb_ln_b, N, E) ||
        op_linear_forward(m, first, &m->emb_ln, o->map_w, N, E, H) ||
        op_bias_add(m, first, o->map_b, N, H) ||
        model_keep(m, first, &m->hidden[0], (size_t)N * H))
        return -1;
    for (int l = 0; l < m->layer_count; l++)
        if (model_layer_forward(m, l, NULL)) return dl_fail_context("layer %d forward", l);
    dl_buffer *last = &m->hidden[m->layer_count];
    /* MLM head on the labelled rows; the decoder is the word embedding matrix. */
    if (M > 0) {
        if (op_rows(m, m->k.gather_rows, &m->mlm_in, last, &m->mlm_rows, M, H) ||
            op_linear_forward(m, &m->mlm_pre, &m->mlm_in, o->pred_dense_w, M, H, E) ||
            op_bias_gelu(m, &m->mlm_pre, &m->mlm_act, o->pred_dense_b, M, E) ||
            op_layernorm_forward(m, &m->mlm_ln, &m->mlm_mean, &m->mlm_rstd, &m->mlm_act,
                                 o->pred_ln_g, o->pred_ln_b, M, E) ||
            model_mlm_decoder(m, loss_scale / (float)M, want_grad))
            return dl_fail_context("MLM head");
    }
    /* SOP head: tanh pooler on each sequence's first token, then a 2-way linear. */
    if (op_rows(m, m->k.gather_rows, &m->pool_in, last, &m->sop_rows, B, H) ||
        op_linear_forward(m, &m->pooled, &m->pool_in, o->pool_w, B, H, H) ||
        op_bias_add(m, &m->pooled, o->pool_b, B, H) ||
        op_unary(m, m->k.tanh_forward, &m->pooled, &m->pooled, B * H) ||
        op_linear_forward(m, &m->sop_logits, &m->pooled, o->sop_w, B, H, 2) ||
        op_bias_add(m, &m->sop_logits, o->sop_b, B, 2) ||
        op_cross_entropy(m, &m->sop_logits, &m->sop_targets, 0, &m->sop_losses, B, 2,
                         loss_scale / (float)B, want_grad))
        return dl_fail_context("SOP head");
    return 0;
}

/* Read after the backward pass is queued, so the device never waits on the
 * host inside a micro-batch. */
int model_read_losses(dl_model *m, dl_losses *out) {
    double t0 = model_profile_begin(m);
    dl_losses l = {.masked_tokens = m->M, .sequences = m->B};
    if (mean_loss(m, &m->mlm_losses, m->M, &l.mlm_loss) ||
        mean_loss(m, &m->sop_losses, m->B, &l.sop_loss))
        return -1;
    l.loss = l.mlm_loss + l.sop_loss;
    *out = l;
    return model_profile_end(m, "loss download", t0);
}
