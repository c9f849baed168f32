/* dl_batch allocation and fingerprint (include/dedloc/batch.h): the batch type data fills and
 * model reads; it lives in util so that neither of them depends on the other. */
#include <stdlib.h>

#include "dedloc/batch.h"
#include "dedloc/util.h"

int dl_batch_alloc(dl_batch *b, int batch, int seq) {
    *b = (dl_batch){0};
    if (batch <= 0 || seq <= 0) return dl_fail("batch shape %d x %d is not positive", batch, seq);
    size_t n = (size_t)batch * (size_t)seq;
    b->batch = batch;
    b->seq = seq;
    b->input_ids = dl_calloc(n, sizeof(int32_t));
    b->token_type_ids = dl_calloc(n, sizeof(int32_t));
    b->attention_mask = dl_calloc(n, sizeof(int32_t));
    b->labels = dl_calloc(n, sizeof(int32_t));
    b->sentence_order_label = dl_calloc((size_t)batch, sizeof(int32_t));
    if (!b->input_ids || !b->token_type_ids || !b->attention_mask || !b->labels ||
        !b->sentence_order_label) {
        dl_batch_free(b);
        return -1;
    }
    for (size_t i = 0; i < n; i++) b->labels[i] = -100;
    return 0;
}

void dl_batch_free(dl_batch *b) {
    free(b->input_ids);
    free(b->token_type_ids);
    free(b->attention_mask);
    free(b->labels);
    free(b->sentence_order_label);
    *b = (dl_batch){0};
}

uint64_t dl_batch_fingerprint(const dl_batch *b) {
    size_t n = (size_t)b->batch * (size_t)b->seq * sizeof(int32_t);
    uint64_t h = dl_hash64(b->input_ids, n, 1);
    h = dl_hash64(b->token_type_ids, n, h);
    h = dl_hash64(b->attention_mask, n, h);
    h = dl_hash64(b->labels, n, h);
    return dl_hash64(b->sentence_order_label, (size_t)b->batch * sizeof(int32_t), h);
}
