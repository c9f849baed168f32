/* The backward pass, top to bottom, from the loss gradients the forward pass
 * left in logits and sop_logits. Every parameter gradient accumulates (+=)
 * into m->grads, so shared layers and the tied decoder need no special case. */
#include <math.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

/* dh holds the gradient of the layer's output on entry and of its input on
 * return; scratch is a second [N, H] buffer. */
static int layer_backward(dl_model *m, int l, dl_buffer *dh, dl_buffer *scratch) {
    const dl_albert_config *c = &m->cfg;
    const layer_offsets *w = &m->off.layers[m->layer_weights[l]];
    layer_acts view, *a = &view, *kept = &m->layers[l];
    dl_buffer *x;
    model_layer_view(m, l, &view, &x);
    int N = m->N, T = m->T, H = c->hidden_size, I = c->intermediate_size,
        heads = c->num_attention_heads, hs = H / heads;
    size_t NH = (size_t)N * H, NI = (size_t)N * I, scores = (size_t)m->B * heads * T * T;
    /* Recompute: this application's activations again, from its kept input;
     * scratch takes the output, which nothing reads. */
    if (m->recompute) {
        if (model_load(m, x, &m->hidden[l], NH) || model_layer_forward(m, l, scratch))
            return dl_fail_context("recomputing layer %d", l);
    } else if (model_load(m, x, &m->hidden[l], NH) || model_load(m, &a->q, &kept->q, NH) ||
        model_load(m, &a->k, &kept->k, NH) || model_load(m, &a->v, &kept->v, NH) ||
        model_load(m, &a->att, &kept->att, scores) || model_load(m, &a->ctx, &kept->ctx, NH) ||
        model_load(m, &a->att_pre, &kept->att_pre, NH) ||
        model_load(m, &a->att_out, &kept->att_out, NH) ||
        model_load(m, &a->ffn_pre, &kept->ffn_pre, NI) ||
        model_load(m, &a->full_pre, &kept->full_pre, NH))
        return -1;
    /* hidden[l+1] = LN(full_pre), full_pre = att_out + ffn_output(gelu(ffn(att_out))) */
    dl_buffer *d_full_pre = scratch;
    if (op_layernorm_backward_bias(m, d_full_pre, dh, &a->full_pre, &a->full_mean, &a->full_rstd,
                                   w->full_ln_g, w->full_ln_b, w->ffn_out_b, N, H) ||
        op_unary(m, m->k.gelu_forward, &m->ffn_act, &a->ffn_pre, N * I) ||
        op_linear_backward_weights(m, &m->d_ffn, false, d_full_pre, &m->ffn_act, w->ffn_out_w,
                                   N, I, H) ||
        op_unary_backward(m, m->k.gelu_backward, &m->d_ffn, &m->d_ffn, &a->ffn_pre, N * I))
        return -1;
    /* the residual already put d_full_pre in scratch: add the FFN input gradient */
    dl_buffer *d_att_out = scratch;
    if (op_linear_backward(m, d_att_out, true, &m->d_ffn, &a->att_out, w->ffn_w, w->ffn_b, N, H,
                           I))
        return -1;
    /* att_out = LN(att_pre), att_pre = x + dense(ctx) */
    dl_buffer *d_att_pre = dh;
    if (op_layernorm_backward_bias(m, d_att_pre, d_att_out, &a->att_pre, &a->att_mean,
                                   &a->att_rstd, w->att_ln_g, w->att_ln_b, w->dense_b, N, H) ||
        op_linear_backward_weights(m, &m->d_ctx, false, d_att_pre, &a->ctx, w->dense_w, N, H, H))
        return -1;
    /* ctx = P V: dP = dctx V^T, dV = P^T dctx */
    if (model_attention_gemm(m, false, true, T, T, hs, &m->d_ctx, false, &a->v, false, &m->d_att,
                             true, false) ||
        model_attention_gemm(m, true, false, T, hs, T, &a->att, true, &m->d_ctx, false, &m->d_v,
                             false, true))
        return -1;
    cl_kernel k = m->k.softmax_backward;
    int rows = m->B * heads * T;
    float sqrt_d = sqrtf((float)hs);
    if (DL_ARG(k, 0, m->d_att.mem) || DL_ARG(k, 1, a->att.mem) || DL_ARG(k, 2, rows) ||
        DL_ARG(k, 3, T) || DL_ARG(k, 4, sqrt_d) || model_launch_row_items(m, k, rows))
        return -1;
    /* S = Q K^T (scaled inside the softmax): dQ = dS K, dK = dS^T Q */
    if (model_attention_gemm(m, false, false, T, hs, T, &m->d_att, true, &a->k, false, &m->d_q,
                             false, false) ||
        model_attention_gemm(m, true, false, T, hs, T, &m->d_att, true, &a->q, false, &m->d_k,
                             false, true))
        return -1;
    /* dh still holds d_att_pre, the residual path into x; add the Q, K, V paths */
    dl_buffer *d_x = dh;
    if (op_linear_backward(m, d_x, true, &m->d_q, x, w->q_w, w->q_b, N, H, H) ||
        op_linear_backward_same_input(m, d_x, true, &m->d_k, x, w->k_w, w->k_b, N, H, H) ||
        op_linear_backward_same_input(m, d_x, true, &m->d_v, x, w->v_w, w->v_b, N, H, H))
        return -1;
    return 0;
}

static int heads_backward(dl_model *m, dl_buffer *d_last) {
    const dl_albert_config *c = &m->cfg;
    const model_offsets *o = &m->off;
    int B = m->B, M = m->M, E = c->embedding_size, H = c->hidden_size;
    double t0 = model_profile_begin(m);
    if (dl_buffer_fill32(m->dev, d_last, 0, (size_t)m->N * (size_t)H * sizeof(float), 0) ||
        model_profile_end(m, "zero hidden gradient (fill)", t0))
        return -1;
    /* SOP: logits = pooled Wc^T + bc, pooled = tanh(pool_in Wp^T + bp) */
    if (op_linear_backward(m, &m->d_pooled, false, &m->sop_logits, &m->pooled, o->sop_w, o->sop_b,
                           B, H, 2) ||
        op_unary_backward(m, m->k.tanh_backward, &m->d_pooled, &m->d_pooled, &m->pooled, B * H) ||
        op_linear_backward(m, &m->d_pool_in, false, &m->d_pooled, &m->pool_in, o->pool_w,
                           o->pool_b, B, H, H) ||
        op_rows(m, m->k.scatter_add_rows, d_last, &m->d_pool_in, &m->sop_rows, B, H))
        return dl_fail_context("SOP head backward");
    if (M == 0) return 0;
    /* MLM: logits = LN(gelu(mlm_in Wd^T + bd)) W_word^T + bias (tied decoder);
     * the decoder's own backward ran with the forward pass, chunk by chunk
     * (mlm_decoder.c), and left d_mlm_ln. */
    if (op_layernorm_backward(m, &m->d_mlm_pre, &m->d_mlm_ln, &m->mlm_act, &m->mlm_mean,
                              &m->mlm_rstd, o->pred_ln_g, o->pred_ln_b, M, E) ||
        op_unary_backward(m, m->k.gelu_backward, &m->d_mlm_pre, &m->d_mlm_pre, &m->mlm_pre,
                          M * E) ||
        op_linear_backward(m, &m->d_mlm_in, false, &m->d_mlm_pre, &m->mlm_in, o->pred_dense_w,
                           o->pred_dense_b, M, H, E) ||
        op_rows(m, m->k.scatter_add_rows, d_last, &m->d_mlm_in, &m->mlm_rows, M, H))
        return dl_fail_context("MLM head backward");
    return 0;
}

static int embeddings_backward(dl_model *m, const dl_buffer *d_hidden0) {
    const dl_albert_config *c = &m->cfg;
    const model_offsets *o = &m->off;
    int B = m->B, T = m->T, N = m->N, E = c->embedding_size, H = c->hidden_size;
    if (op_linear_backward(m, &m->d_emb_ln, false, d_hidden0, &m->emb_ln, o->map_w, o->map_b, N,
                           E, H) ||
        op_layernorm_backward(m, &m->d_emb, &m->d_emb_ln, &m->emb_sum, &m->emb_mean, &m->emb_rstd,
                              o->emb_ln_g, o->emb_ln_b, N, E))
        return -1;
    int word = (int)o->word, pos = (int)o->position, type = (int)o->token_type,
        segments = m->word_segments, types = c->type_vocab_size;
    cl_kernel k = m->k.embedding_backward_word;
    size_t g_word[2] = {(size_t)E, (size_t)segments};
    if (segments > 0 &&
        (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, m->d_emb.mem) ||
         DL_ARG(k, 2, m->word_sorted_rows.mem) || DL_ARG(k, 3, m->word_seg_ids.mem) ||
         DL_ARG(k, 4, m->word_seg_start.mem) || DL_ARG(k, 5, segments) || DL_ARG(k, 6, word) ||
         DL_ARG(k, 7, E) || model_launch(m, k, 2, g_word)))
        return -1;
    k = m->k.embedding_backward_position;
    size_t g_pos[2] = {(size_t)E, (size_t)T};
    if (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, m->d_emb.mem) || DL_ARG(k, 2, pos) ||
        DL_ARG(k, 3, B) || DL_ARG(k, 4, T) || DL_ARG(k, 5, E) ||
        model_launch(m, k, 2, g_pos))
        return -1;
    k = m->k.embedding_backward_type;
    size_t g_type[2] = {(size_t)E, (size_t)types};
    if (DL_ARG(k, 0, m->grads.mem) || DL_ARG(k, 1, m->d_emb.mem) ||
        DL_ARG(k, 2, m->token_type_ids.mem) || DL_ARG(k, 3, type) || DL_ARG(k, 4, N) ||
        DL_ARG(k, 5, types) || DL_ARG(k, 6, E) || model_launch(m, k, 2, g_type))
        return -1;
    return 0;
}

int model_backward_pass(dl_model *m) {
    dl_buffer *dh = &m->d_hidden_a;
    if (heads_backward(m, dh)) return -1;
    for (int l = m->layer_count - 1; l >= 0; l--)
        if (layer_backward(m, l, dh, &m->d_hidden_b))
            return dl_fail_context("layer %d backward", l);
    if (embeddings_backward(m, dh)) return dl_fail_context("embeddings backward");
    return 0;
}
