/* The shuffle buffer: a reservoir of examples; each new example evicts a
 * uniformly chosen resident once the buffer is full. The larger the buffer,
 * the further apart neighbouring examples of one document land. */
#include "data/data_internal.h"

int dl_shuffle_init(dl_shuffle *sb, size_t cap) {
    sb->count = 0;
    sb->cap = cap ? cap : 1;
    sb->slots = dl_calloc(sb->cap, sizeof *sb->slots);
    return sb->slots ? 0 : -1;
}

bool dl_shuffle_push(dl_shuffle *sb, dl_example ex, dl_rng *rng, dl_example *out) {
    if (sb->count < sb->cap) {
        sb->slots[sb->count++] = ex;
        return false;
    }
    size_t j = (size_t)dl_rng_below(rng, sb->cap);
    *out = sb->slots[j];
    sb->slots[j] = ex;
    return true;
}

bool dl_shuffle_pop(dl_shuffle *sb, dl_rng *rng, dl_example *out) {
    if (!sb->count) return false;
    size_t j = (size_t)dl_rng_below(rng, sb->count);
    *out = sb->slots[j];
    sb->slots[j] = sb->slots[--sb->count];
    return true;
}

void dl_shuffle_free(dl_shuffle *sb) {
    if (!sb->slots) return;
    for (size_t i = 0; i < sb->count; i++) dl_example_free(&sb->slots[i]);
    free(sb->slots);
    sb->slots = NULL;
    sb->count = 0;
}
