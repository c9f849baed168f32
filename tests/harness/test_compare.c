/* The float comparison helpers of dl_test.h, which every numeric test relies
 * on: a NaN or an infinity that does not match must make them fail wherever it
 * sits in the array (first, middle, last), and equal arrays must compare as
 * equal. A helper that let a NaN through would let a kernel that never wrote
 * some of its (NaN-poisoned) outputs pass. */
#include "dl_test.h"

enum { N = 3 };

/* b with position `at` replaced by `bad` */
static void with_bad(float out[N], const float b[N], int at, float bad) {
    for (int i = 0; i < N; i++) out[i] = i == at ? bad : b[i];
}

/* Every helper on (a, b) must report a failure against a generous tolerance. */
static void expect_failure(const float *a, const float *b, const char *what) {
    double m = dl_test_max_abs(a, b, N), r = dl_test_rel_l2(a, b, N),
           f = dl_test_rel_l2_floor(a, b, N, 1.0);
    CHECK_MSG(!(m < 1e3), "max_abs %s: %g passes", what, m);
    CHECK_MSG(!(r < 1e3), "rel_l2 %s: %g passes", what, r);
    CHECK_MSG(!(f < 1e3), "rel_l2_floor %s: %g passes", what, f);
}

static void test_mismatches_fail_anywhere(void) {
    const float ref[N] = {0.0f, 0.5f, 0.5f};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char *bad_name[] = {"NaN", "+Inf", "-Inf"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        for (int at = 0; at < N; at++) {
            float got[N];
            char what[64];
            with_bad(got, ref, at, bad[k]);
            snprintf(what, sizeof what, "%s at %d in the output", bad_name[k], at);
            expect_failure(got, ref, what);
            snprintf(what, sizeof what, "%s at %d in the reference", bad_name[k], at);
            expect_failure(ref, got, what);
        }
    /* the case that used to pass: NaN first, then equal elements */
    const float poisoned[N] = {NAN, 0.5f, 0.5f};
    CHECK(isnan(dl_test_max_abs(poisoned, ref, N)));
    /* NaN on both sides is not a match either */
    const float nan_both[N] = {0.0f, NAN, 0.5f};
    expect_failure(nan_both, nan_both, "NaN on both sides");
    /* infinities of opposite sign */
    const float plus[N] = {INFINITY, 0.5f, 0.5f}, minus[N] = {-INFINITY, 0.5f, 0.5f};
    expect_failure(plus, minus, "+Inf against -Inf");
}

static void test_equal_and_close(void) {
    const float a[N] = {1.0f, -2.0f, 0.25f}, same[N] = {1.0f, -2.0f, 0.25f};
    CHECK(dl_test_max_abs(a, same, N) == 0.0);
    CHECK(dl_test_rel_l2(a, same, N) == 0.0);
    /* equal infinities are a match: the rest decides */
    const float inf[N] = {INFINITY, -INFINITY, 0.25f};
    CHECK(dl_test_max_abs(inf, inf, N) == 0.0);
    CHECK(dl_test_rel_l2(inf, inf, N) == 0.0);
    /* a finite difference is measured, wherever it is */
    const float off[N] = {1.0f, -2.0f, 0.75f};
    CHECK(dl_test_max_abs(a, off, N) == 0.5);
    CHECK(dl_test_max_abs(off, a, N) == 0.5);
    /* ||(0, 0, -0.5)|| / ||(1, -2, 0.75)|| */
    double want = 0.5 / sqrt(1.0 + 4.0 + 0.5625);
    CHECK(fabs(dl_test_rel_l2(a, off, N) - want) < 1e-15);
    /* the floor replaces a reference norm below it */
    const float zeros[N] = {0, 0, 0}, small[N] = {0, 0, 1e-3f};
    CHECK(fabs(dl_test_rel_l2_floor(small, zeros, N, 1e-2) - 1e-1) < 1e-8);
    CHECK(dl_test_max_abs(a, off, 0) == 0.0);
}

static void test_running_worst(void) {
    CHECK(dl_test_worse(0.0, 2.0) == 2.0);
    CHECK(dl_test_worse(3.0, 2.0) == 3.0);
    CHECK(isnan(dl_test_worse(NAN, 2.0)));
    CHECK(isnan(dl_test_worse(2.0, NAN)));
    CHECK(dl_test_worse(1.0, INFINITY) == INFINITY);
    /* a NaN early in a running maximum survives later finite values */
    double worst = 0;
    const double errors[] = {0.1, NAN, 0.2, 0.0};
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++) worst = dl_test_worse(worst, errors[i]);
    CHECK(isnan(worst));
    CHECK(dl_test_diff(INFINITY, INFINITY) == 0.0);
    CHECK(dl_test_diff(1.0, INFINITY) == INFINITY);
    CHECK(isnan(dl_test_diff(NAN, NAN)));
}

int main(void) {
    test_mismatches_fail_anywhere();
    test_equal_and_close();
    test_running_worst();
    return dl_test_finish("test_compare");
}
