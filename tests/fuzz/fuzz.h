/* Shared by the fuzz harnesses: the libFuzzer entry point, one-time setup,
 * and an assertion that crashes (so the fuzzer reports the input) when a
 * property that must hold for every input does not. */
#ifndef DEDLOC_TEST_FUZZ_H
#define DEDLOC_TEST_FUZZ_H

#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void fuzz_setup(void) {
    static bool done;
    if (done) return;
    done = true;
    dl_log_set_level(DL_LOG_ERROR);
    if (sodium_init() < 0) abort();
}

#define FUZZ_ASSERT(cond)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: property failed: %s (%s)\n", __FILE__, __LINE__, #cond, dl_error()); \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* A malloc'd copy, so reads past the input's end are caught by ASan even
 * when the harness's input lives in a larger buffer. */
static inline char *fuzz_copy(const uint8_t *data, size_t size, bool nul) {
    char *p = malloc(size + (nul ? 1 : 0) + (size == 0 && !nul));
    if (!p) abort();
    if (size) memcpy(p, data, size);
    if (nul) p[size] = 0;
    return p;
}

#endif
