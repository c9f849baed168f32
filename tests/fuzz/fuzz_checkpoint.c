/* Checkpoints / training state sent by a peer: refused or accepted without
 * crashing (dl_checkpoint_parse checks the layout, the checksums and the
 * model configuration). */
#include "dedloc/train.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    dl_checkpoint ck;
    if (dl_checkpoint_parse(fuzz_copy(data, size, false), size, &ck) == 0) {
        dl_albert_config cfg;
        dl_checkpoint_model_config(&ck, &cfg);
        dl_checkpoint_free(&ck);
    }
    return 0;
}
