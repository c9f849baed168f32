/* safetensors files (models, batches, gradients from anywhere): refused or
 * accepted without crashing; every tensor of an accepted file lies inside
 * the data section and converts to float32 without reading past it. */
#include "dedloc/safetensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    dl_safetensors *st = NULL;
    if (dl_st_parse(fuzz_copy(data, size, false), size, &st)) return 0;
    for (int i = 0; i < st->count; i++) {
        const dl_st_tensor *t = &st->tensors[i];
        FUZZ_ASSERT(t->offset <= st->data_size && t->nbytes <= st->data_size - t->offset);
        FUZZ_ASSERT(dl_st_find(st, t->name) != NULL);
        if (t->numel <= (1u << 16)) {
            float *f = malloc((t->numel ? t->numel : 1) * sizeof *f);
            if (!f) abort();
            dl_st_get_f32(st, t->name, f, t->numel); /* may refuse the dtype */
            free(f);
        }
    }
    dl_st_metadata(st, "format");
    dl_st_free(st);
    return 0;
}
