/* tokenizer.json files: refused or loaded without crashing; a loaded
 * tokenizer encodes a fixed sentence to ids inside its vocabulary. */
#include "dedloc/text.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    char *json = fuzz_copy(data, size, true);
    dl_tokenizer *tok = NULL;
    if (dl_tokenizer_load_json(json, size, &tok) == 0) {
        static const char sample[] = "Hello, world! \xe0\xa6\x86\xe0\xa6\xae\xe0\xa6\xbe\xe0\xa6\xb0 12.5 \xff";
        int32_t *ids = NULL;
        size_t count = 0;
        if (dl_tokenizer_encode(tok, sample, sizeof sample - 1, &ids, &count, NULL) == 0) {
            size_t vocab = dl_tokenizer_vocab_size(tok);
            for (size_t i = 0; i < count; i++) FUZZ_ASSERT(ids[i] >= 0 && (size_t)ids[i] < vocab);
            int32_t *all = NULL, *types = NULL;
            size_t n = 0;
            if (dl_tokenizer_post_process(tok, ids, count, ids, count, &all, &types, &n) == 0) {
                free(all);
                free(types);
            }
            free(ids);
        }
        dl_tokenizer_free(tok);
    }
    free(json);
    return 0;
}
