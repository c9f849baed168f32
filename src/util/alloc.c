/* Checked allocation: a failure records an error naming the size, and size
 * products are checked for overflow before they reach malloc. */
#include "dedloc/util.h"

#include <stdlib.h>
#include <string.h>

size_t dl_mul_size(size_t a, size_t b) {
    if (a && b > SIZE_MAX / a) {
        dl_fail("size overflow: %zu x %zu", a, b);
        return SIZE_MAX;
    }
    return a * b;
}

void *dl_malloc(size_t size) {
    if (size == SIZE_MAX) return NULL;
    void *p = malloc(size ? size : 1);
    if (!p) dl_fail("out of host memory allocating %zu bytes", size);
    return p;
}

void *dl_calloc(size_t count, size_t size) {
    if (dl_mul_size(count, size) == SIZE_MAX) return NULL;
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) dl_fail("out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *dl_realloc(void *ptr, size_t size) {
    if (size == SIZE_MAX) return NULL;
    void *p = realloc(ptr, size ? size : 1);
    if (!p) dl_fail("out of host memory growing a buffer to %zu bytes", size);
    return p;
}

char *dl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = dl_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
