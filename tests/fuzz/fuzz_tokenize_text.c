/* Corpus text is outside data too: the demo tokenizer encodes any bytes
 * (invalid UTF-8 included) to ids inside its vocabulary. */
#include "dedloc/text.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    static dl_tokenizer *tok;
    if (!tok && dl_tokenizer_load_demo(&tok)) abort();
    char *text = fuzz_copy(data, size, true);
    int32_t *ids = NULL;
    size_t count = 0, invalid = 0;
    if (dl_tokenizer_encode(tok, text, size, &ids, &count, &invalid) == 0) {
        size_t vocab = dl_tokenizer_vocab_size(tok);
        for (size_t i = 0; i < count; i++) FUZZ_ASSERT(ids[i] >= 0 && (size_t)ids[i] < vocab);
        free(ids);
    }
    free(text);
    return 0;
}
