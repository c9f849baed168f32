/* The MLM decoder: logits = mlm_ln W_word^T + bias over the masked rows,
 * with the word-embedding matrix as the decoder (tied weights). Its output
 * is the largest buffer of the model by far (V floats a row: 125 KiB at
 * sahajBERT's 32,000 words, 1 GiB for every row of a 16 x 512 batch), and
 * nothing downstream needs all of it at once: the cross-entropy reads a row
 * and replaces it by its gradient, which the decoder's backward consumes
 * straight away. So the rows go in chunks of MODEL_MLM_CHUNK: each chunk's
 * logits, loss and gradient, then (when training) the decoder's weight and
 * bias gradients and the gradient of its input rows, before the next chunk
 * reuses the buffer. The device holds one chunk of logits (62.5 MiB at
 * sahajBERT size) whatever the batch. */
#include <stdlib.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

size_t model_mlm_chunk_rows(size_t rows) {
    size_t chunk = MODEL_MLM_CHUNK;
#ifdef DEDLOC_TEST_HOOKS
    /* Test builds: DEDLOC_MLM_CHUNK=n takes n rows at a time, so that the
     * reference fixtures' few masked rows span several chunks. */
    const char *env = getenv("DEDLOC_MLM_CHUNK");
    if (env && atoi(env) > 0) chunk = (size_t)atoi(env);
#endif
    return rows < chunk ? rows : chunk;
}

/* logits[0..rows) = mlm_ln[row0..row0+rows) W_word^T + bias */
static int chunk_logits(dl_model *m, int row0, int rows) {
    const model_offsets *o = &m->off;
    size_t E = (size_t)m->cfg.embedding_size, V = (size_t)m->cfg.vocab_size;
    dl_gemm_args g = {.trans_b = true, .m = (size_t)rows, .n = V, .k = E, .alpha = 1.0f,
                      .beta = 0.0f, .a = &m->mlm_ln, .a_off = (size_t)row0 * E, .lda = E,
                      .b = &m->params, .b_off = o->word, .ldb = E,
                      .c = &m->logits, .ldc = V, .batch_count = 1};
    if (model_gemm(m, "gemm linear forward", &g)) return -1;
    return op_bias_add(m, &m->logits, o->pred_bias, rows, (int)V);
}

/* The decoder's backward for one chunk whose logits hold their gradient:
 * W_word grad += dlogits^T mlm_ln rows, bias grad += column sums,
 * d_mlm_ln rows = dlogits W_word. */
static int chunk_backward(dl_model *m, int row0, int rows) {
    const model_offsets *o = &m->off;
    size_t E = (size_t)m->cfg.embedding_size, V = (size_t)m->cfg.vocab_size;
    dl_gemm_args gw = {.trans_a = true, .m = V, .n = E, .k = (size_t)rows, .alpha = 1.0f,
                       .beta = 1.0f, .a = &m->logits, .lda = V,
                       .b = &m->mlm_ln, .b_off = (size_t)row0 * E, .ldb = E,
                       .c = &m->grads, .c_off = o->word, .ldc = E, .batch_count = 1};
    if (model_gemm(m, "gemm linear dW", &gw) || op_bias_backward(m, &m->logits, o->pred_bias, rows, (int)V))
        return -1;
    dl_gemm_args gx = {.m = (size_t)rows, .n = E, .k = V, .alpha = 1.0f, .beta = 0.0f,
                       .a = &m->logits, .lda = V,
                       .b = &m->params, .b_off = o->word, .ldb = E,
                       .c = &m->d_mlm_ln, .c_off = (size_t)row0 * E, .ldc = E, .batch_count = 1};
    return model_gemm(m, "gemm linear dx", &gx);
}

int model_mlm_decoder(dl_model *m, float grad_scale, bool want_grad) {
    int M = m->M, V = m->cfg.vocab_size, chunk = (int)model_mlm_chunk_rows((size_t)m->N);
    for (int row0 = 0; row0 < M; row0 += chunk) {
        int rows = M - row0 < chunk ? M - row0 : chunk;
        if (chunk_logits(m, row0, rows) ||
            op_cross_entropy(m, &m->logits, &m->mlm_targets, row0, &m->mlm_losses, rows, V,
                             grad_scale, want_grad) ||
            (want_grad && chunk_backward(m, row0, rows)))
            return dl_fail_context("MLM decoder rows %d..%d of %d", row0, row0 + rows, M);
    }
    return 0;
}

int model_mlm_logits_download(dl_model *m, float *out) {
    int M = m->M, chunk = (int)model_mlm_chunk_rows((size_t)m->N);
    size_t V = (size_t)m->cfg.vocab_size;
    if (M == 0) return 0;
    /* The buffer still holds the last chunk: that one first, then the
     * others computed again (the same bits from the same inputs). */
    int last = (M - 1) / chunk * chunk;
    if (dl_buffer_download(m->dev, &m->logits, 0, out + (size_t)last * V,
                           (size_t)(M - last) * V * sizeof(float)))
        return -1;
    for (int row0 = 0; row0 < last; row0 += chunk)
        if (chunk_logits(m, row0, chunk) ||
            dl_buffer_download(m->dev, &m->logits, 0, out + (size_t)row0 * V,
                               (size_t)chunk * V * sizeof(float)))
            return -1;
    return 0;
}
