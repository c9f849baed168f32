/* The tokenizer files embedded into the binary from assets/. */
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define DEMO_TOKENIZER "tokenizer_bn_demo.json"

struct dl_asset_embedded {
    const char *name;
    const char *data;
    size_t size;
};
extern const struct dl_asset_embedded dl_asset_embedded_table[];

const char *dl_text_asset(const char *name, size_t *size) {
    for (const struct dl_asset_embedded *a = dl_asset_embedded_table; a->name; a++)
        if (!strcmp(a->name, name)) {
            if (size) *size = a->size;
            return a->data;
        }
    return NULL;
}

int dl_tokenizer_load_demo(dl_tokenizer **out) {
    size_t size;
    const char *json = dl_text_asset(DEMO_TOKENIZER, &size);
    *out = NULL;
    if (!json) return dl_fail("the demo tokenizer %s is not embedded in this build", DEMO_TOKENIZER);
    if (dl_tokenizer_load_json(json, size, out)) return dl_fail_context("demo tokenizer %s", DEMO_TOKENIZER);
    return 0;
}
