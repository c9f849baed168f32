/* A tiny test harness: CHECK macros that count, a closing line that ctest's
 * log shows ("N passed, N failed"), and helpers for comparing float tensors. */
#ifndef DEDLOC_TEST_H
#define DEDLOC_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dl_test_passed, dl_test_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            dl_test_passed++;                                                         \
        } else {                                                                      \
            dl_test_failed++;                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (cond) {                                                           \
            dl_test_passed++;                                                 \
        } else {                                                              \
            dl_test_failed++;                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* CHECK that a dedloc call returned 0; prints dl_error() otherwise. */
#define CHECK_OK(expr)                                                                 \
    do {                                                                               \
        if ((expr) == 0) {                                                             \
            dl_test_passed++;                                                          \
        } else {                                                                       \
            dl_test_failed++;                                                          \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, dl_error()); \
        }                                                                              \
    } while (0)

/* Relative L2 error ||a-b|| / max(||b||, tiny). */
static inline double dl_test_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

static inline double dl_test_max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as failure */
    }
    return m;
}

/* Call last in main(): prints the summary and returns the exit status. */
static inline int dl_test_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}

#endif
