/* A conservative estimate of the device memory one training micro-batch
 * needs, for choosing a micro-batch before anything is allocated (dedloc
 * join). OpenCL drivers often allocate lazily, so trying sizes until an
 * allocation fails does not tell what fits; this rule over-counts instead:
 * every activation of every layer is taken as kept for the backward pass,
 * in fp32 whatever the storage precision, with its gradient beside it. */
#include "dedloc/model.h"

uint64_t dl_albert_train_bytes(const dl_albert_config *cfg, int batch, int seq, uint64_t *largest_buffer) {
    dl_param_layout pl;
    uint64_t params = 0;
    if (dl_param_layout_build(cfg, &pl) == 0) {
        params = pl.total;
        dl_param_layout_free(&pl);
    }
    const uint64_t b = (uint64_t)batch, t = (uint64_t)seq, h = (uint64_t)cfg->hidden_size;
    const uint64_t heads = (uint64_t)cfg->num_attention_heads, ff = (uint64_t)cfg->intermediate_size;
    const uint64_t layers = (uint64_t)cfg->num_hidden_layers * (uint64_t)(cfg->inner_group_num > 0 ? cfg->inner_group_num : 1);
    const uint64_t vocab = (uint64_t)cfg->vocab_size;
    /* Per layer and token: q, k, v, context, attention output, two
     * LayerNorms with their statistics (about 16 vectors of hidden size) and
     * the feed-forward's input and activation (2 x intermediate); per head,
     * scores, probabilities and their gradient (3 x seq). */
    uint64_t per_layer = t * (16 * h + 2 * ff) + 3 * heads * t * t;
    /* Embeddings in and MLM logits out, with their gradients. */
    uint64_t ends = t * (4 * (uint64_t)cfg->embedding_size + 2 * vocab);
    uint64_t activations = 2 * b * (layers * per_layer + ends); /* values and their gradients */
    /* Weights, their gradient, a compute-precision copy. */
    uint64_t total = 4 * (3 * params + activations);
    if (largest_buffer) {
        uint64_t big = b * heads * t * t;
        if (b * t * vocab > big) big = b * t * vocab;
        if (b * t * ff > big) big = b * t * ff;
        *largest_buffer = 4 * big;
    }
    return total;
}

int dl_albert_fit_micro_batch(const dl_albert_config *cfg, int seq, int max_batch, uint64_t device_bytes,
                              uint64_t max_alloc) {
    int best = 0;
    for (int b = 1; b <= max_batch; b *= 2) {
        uint64_t largest;
        uint64_t need = dl_albert_train_bytes(cfg, b, seq, &largest);
        if (need > device_bytes / 2 || largest > max_alloc) break;
        best = b;
        if (b > max_batch / 2) break;
    }
    /* The manifest's micro-batch itself when it is not a power of two and fits. */
    if (best && best < max_batch) {
        uint64_t largest;
        uint64_t need = dl_albert_train_bytes(cfg, max_batch, seq, &largest);
        if (need <= device_bytes / 2 && largest <= max_alloc) best = max_batch;
    }
    return best;
}
