/* Binds the pipeline to a dl_tokenizer (kept in its own file: programs that
 * only serve shards do not pull in the tokenizer). */
#include <stdlib.h>

#include "data/data_internal.h"
#include "dedloc/text.h"

static int encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *count) {
    return dl_tokenizer_encode(ctx, text, len, ids, count, NULL);
}

static int post_process(void *ctx, const int32_t *a, size_t a_len, const int32_t *b, size_t b_len,
                        int32_t **ids, int32_t **type_ids, size_t *count) {
    return dl_tokenizer_post_process(ctx, a, a_len, b, b_len, ids, type_ids, count);
}

static int32_t first_id(const dl_tokenizer *tok, const char *a, const char *b) {
    int32_t id = dl_tokenizer_token_to_id(tok, a);
    return id >= 0 ? id : dl_tokenizer_token_to_id(tok, b);
}

int dl_data_open(const dl_data_config *cfg, const dl_tokenizer *tok, dl_data_stream **out) {
    *out = NULL;
    if (!tok) return dl_fail("dl_data_open: no tokenizer");
    size_t V = dl_tokenizer_vocab_size(tok);
    if (!V) return dl_fail("the tokenizer has an empty vocabulary");
    uint8_t *special = dl_malloc(V), *word_start = dl_malloc(V);
    if (!special || !word_start) {
        free(special);
        free(word_start);
        return -1;
    }
    for (size_t i = 0; i < V; i++) {
        special[i] = dl_tokenizer_is_special(tok, (int32_t)i);
        word_start[i] = dl_tokenizer_starts_word(tok, (int32_t)i);
    }
    dl_data_text text = {
        .ctx = (void *)tok,
        .encode = encode,
        .post_process = post_process,
        .vocab_size = V,
        .special = special,
        .word_start = word_start,
        .pad_id = first_id(tok, "<pad>", "[PAD]"),
        .mask_id = first_id(tok, "[MASK]", "<mask>"),
    };
    int rc = dl_data_open_text(cfg, &text, out); /* copies the tables */
    free(special);
    free(word_start);
    return rc;
}
