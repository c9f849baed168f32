/* One training batch as the data pipeline produces it and the model consumes
 * it: plain row-major int32 arrays, ready to upload. Shared by src/data
 * (producer) and src/model (consumer); neither depends on the other. Its
 * allocation lives in src/util/batch.c. */
#ifndef DEDLOC_BATCH_H
#define DEDLOC_BATCH_H

#include <stdint.h>

typedef struct dl_batch {
    int batch;                     /* B sequences */
    int seq;                       /* T tokens per sequence (padded) */
    int32_t *input_ids;            /* [B, T] */
    int32_t *token_type_ids;       /* [B, T] 0 for segment A, 1 for B */
    int32_t *attention_mask;       /* [B, T] 1 = real token, 0 = padding */
    int32_t *labels;               /* [B, T] original id at masked positions, -100 elsewhere */
    int32_t *sentence_order_label; /* [B] 0 = in order, 1 = swapped */
} dl_batch;

/* Allocates the arrays for B x T (zeroed; labels -100); 0 or -1. */
int dl_batch_alloc(dl_batch *b, int batch, int seq);
void dl_batch_free(dl_batch *b);
/* A 64-bit hash of every array of the batch (xxh64, chained): two batches
 * with the same fingerprint hold the same tokens, masks and labels. */
uint64_t dl_batch_fingerprint(const dl_batch *b);

#endif
