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

/* Comparing floats. A test poisons outputs with NaN so that an element a
 * kernel never wrote shows up; these helpers must therefore never let a NaN
 * go: a running maximum written as `if (e > worst) worst = e`, `!(e <= worst)`
 * or fmax() drops a NaN as soon as a later element is finite.
 *
 * dl_test_diff: |a - b|, 0 when a == b (equal infinities included), NaN when
 * either side is NaN (a NaN matches nothing, not even another NaN: no test
 * expects one), +Inf when only one side is infinite or the signs differ. */
static inline double dl_test_diff(double a, double b) { return a == b ? 0.0 : fabs(a - b); }

/* The worse of a running worst error and a new one: NaN is worse than any
 * number and stays once seen. */
static inline double dl_test_worse(double worst, double e) {
    if (isnan(worst) || isnan(e)) return NAN;
    return e > worst ? e : worst;
}

/* max |a-b| over n elements; NaN if any element is NaN on either side, +Inf
 * if an infinity meets a finite value or one of the other sign. */
static inline double dl_test_max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = dl_test_worse(m, dl_test_diff(a[i], b[i]));
    return m;
}

/* Relative L2 error ||a-b|| / max(||b||, floor). Sums keep a NaN (and an
 * infinite difference) to the end, so the result then fails any tolerance. */
static inline double dl_test_rel_l2_floor(const float *a, const float *b, size_t n, double floor) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = dl_test_diff(a[i], b[i]);
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (isnan(num) || isnan(den)) return NAN;
    double norm = sqrt(den);
    return sqrt(num) / (norm > floor ? norm : floor);
}

/* Relative L2 error ||a-b|| / ||b|| (||b|| = 0 counts as 1e-30). */
static inline double dl_test_rel_l2(const float *a, const float *b, size_t n) {
    return dl_test_rel_l2_floor(a, b, n, 1e-30);
}

/* Call last in main(): prints the summary and returns the exit status. */
static inline int dl_test_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}

#endif
