/* config.json of a model folder (or inside a checkpoint from a peer):
 * refused or accepted without crashing; an accepted configuration passes
 * validation and comes back identical through the text we write. */
#include "dedloc/model.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    char *text = fuzz_copy(data, size, false);
    dl_albert_config cfg, back;
    if (dl_albert_config_parse(text, size, "config.json", &cfg) == 0) {
        FUZZ_ASSERT(dl_albert_config_validate(&cfg) == 0);
        char *json = NULL;
        FUZZ_ASSERT(dl_albert_config_to_json(&cfg, &json) == 0);
        FUZZ_ASSERT(dl_albert_config_parse(json, strlen(json), "written", &back) == 0);
        FUZZ_ASSERT(!memcmp(&cfg, &back, sizeof cfg)); /* ints and floats: no padding */
        free(json);
    }
    free(text);
    return 0;
}
