/* CenteredClip (src/collab/centered_clip.c) against a reference written
 * here in long double from the definition: the coordinate-wise median as
 * the start, then v <- v + sum_j w_j (x_j - v) min(1, tau/||x_j - v||) / W.
 * Also: with tau larger than every distance the result is the weighted mean;
 * after enough iterations the result is a fixed point of the update; a
 * minority of outliers scaled by 1000 barely moves it; same inputs give the
 * same bits. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collab/centered_clip.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define K_MAX 9

static uint64_t rng = 12345;
static double uniform(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static int cmp_ld(const void *a, const void *b) {
    long double x = *(const long double *)a, y = *(const long double *)b;
    return (x > y) - (x < y);
}

/* The reference: straight from the definition, long double throughout. */
static void reference(float *const *x, const double *w, size_t k, size_t len, long double tau, int iters,
                      long double *v, bool *clipped) {
    long double col[K_MAX], W = 0;
    for (size_t j = 0; j < k; j++) W += w[j];
    for (size_t e = 0; e < len; e++) {
        for (size_t j = 0; j < k; j++) col[j] = x[j][e];
        qsort(col, k, sizeof col[0], cmp_ld);
        v[e] = k % 2 ? col[k / 2] : (col[k / 2 - 1] + col[k / 2]) / 2;
    }
    long double *next = malloc(sizeof(long double) * len);
    for (int it = 0; it < iters; it++) {
        for (size_t e = 0; e < len; e++) next[e] = v[e];
        for (size_t j = 0; j < k; j++) {
            long double n2 = 0;
            for (size_t e = 0; e < len; e++) n2 += (x[j][e] - v[e]) * (x[j][e] - v[e]);
            long double norm = sqrtl(n2);
            long double scale = norm > tau ? tau / norm : 1;
            for (size_t e = 0; e < len; e++) next[e] += w[j] * (x[j][e] - v[e]) * scale / W;
        }
        for (size_t e = 0; e < len; e++) v[e] = next[e];
    }
    for (size_t j = 0; j < k; j++) {
        long double n2 = 0;
        for (size_t e = 0; e < len; e++) n2 += (x[j][e] - v[e]) * (x[j][e] - v[e]);
        clipped[j] = sqrtl(n2) > tau;
    }
    free(next);
}

static double max_rel(const double *v, const long double *ref, size_t len) {
    long double scale = 0, worst = 0;
    for (size_t e = 0; e < len; e++) scale = fmaxl(scale, fabsl(ref[e]));
    for (size_t e = 0; e < len; e++) {
        long double d = fabsl((long double)v[e] - ref[e]);
        if (isnan((double)d) || d > worst) worst = isnan((double)d) ? INFINITY : d;
    }
    return (double)(worst / (scale > 0 ? scale : 1));
}

int main(void) {
    enum { LEN = 5000 };
    float *x[K_MAX];
    double w[K_MAX];
    for (size_t j = 0; j < K_MAX; j++) x[j] = malloc(sizeof(float) * LEN);
    double *v = malloc(sizeof(double) * LEN), *v2 = malloc(sizeof(double) * LEN);
    long double *ref = malloc(sizeof(long double) * LEN);
    bool clipped[K_MAX], ref_clipped[K_MAX];

    /* 1. Honest contributions around a common vector plus outliers, odd and
     * even k, several taus: equal to the reference, same clipped set. */
    for (size_t k = 2; k <= K_MAX; k++) {
        for (size_t j = 0; j < k; j++) w[j] = 1 + (double)(j % 3);
        for (size_t e = 0; e < LEN; e++) {
            double common = uniform();
            for (size_t j = 0; j < k; j++) x[j][e] = (float)(common + 0.1 * uniform());
        }
        /* the last third: sign-flipped x1000 and noise */
        for (size_t j = k - k / 3; j < k; j++)
            for (size_t e = 0; e < LEN; e++) x[j][e] = j % 2 ? -1000.0f * x[0][e] : (float)(100 * uniform());
        const double taus[] = {0.5, 3, 1e9};
        for (size_t t = 0; t < 3; t++) {
            CHECK_OK(dl_centered_clip((const float *const *)x, w, k, LEN, taus[t], 20, v, clipped));
            reference(x, w, k, LEN, taus[t], 20, ref, ref_clipped);
            double err = max_rel(v, ref, LEN);
            CHECK_MSG(err < 1e-10, "k %zu tau %g: relative error %.3g from the reference", k, taus[t], err);
            for (size_t j = 0; j < k; j++)
                CHECK_MSG(clipped[j] == ref_clipped[j], "k %zu tau %g: clipped[%zu] %d, reference %d", k, taus[t],
                          j, clipped[j], ref_clipped[j]);
            /* Deterministic: the same inputs give the same bits. */
            CHECK_OK(dl_centered_clip((const float *const *)x, w, k, LEN, taus[t], 20, v2, NULL));
            CHECK(!memcmp(v, v2, sizeof(double) * LEN));
        }
    }

    /* 2. tau beyond every distance: one iteration gives the weighted mean,
     * and nothing is clipped. */
    size_t k = 7;
    for (size_t j = 0; j < k; j++) w[j] = 0.5 + (double)j;
    for (size_t e = 0; e < LEN; e++)
        for (size_t j = 0; j < k; j++) x[j][e] = (float)(3 * uniform());
    CHECK_OK(dl_centered_clip((const float *const *)x, w, k, LEN, 1e12, 1, v, clipped));
    long double W = 0;
    for (size_t j = 0; j < k; j++) W += w[j];
    for (size_t e = 0; e < LEN; e++) {
        long double s = 0;
        for (size_t j = 0; j < k; j++) s += w[j] * (long double)x[j][e];
        ref[e] = s / W;
    }
    double err = max_rel(v, ref, LEN);
    CHECK_MSG(err < 1e-13, "large tau: %.3g from the weighted mean", err);
    for (size_t j = 0; j < k; j++) CHECK(!clipped[j]);

    /* 3. Fixed point: after many iterations one more update changes v by
     * (almost) nothing, computed here in long double. */
    double tau = 40;
    CHECK_OK(dl_centered_clip((const float *const *)x, w, k, LEN, tau, 300, v, clipped));
    long double step2 = 0, v2n = 0;
    long double *upd = ref;
    for (size_t e = 0; e < LEN; e++) upd[e] = 0;
    size_t n_clipped = 0;
    for (size_t j = 0; j < k; j++) {
        long double n2 = 0;
        for (size_t e = 0; e < LEN; e++) n2 += (x[j][e] - (long double)v[e]) * (x[j][e] - (long double)v[e]);
        long double scale = sqrtl(n2) > tau ? tau / sqrtl(n2) : 1;
        n_clipped += clipped[j];
        for (size_t e = 0; e < LEN; e++) upd[e] += w[j] * (x[j][e] - (long double)v[e]) * scale / W;
    }
    for (size_t e = 0; e < LEN; e++) {
        step2 += upd[e] * upd[e];
        v2n += (long double)v[e] * v[e];
    }
    CHECK_MSG(sqrtl(step2) < 1e-9 * sqrtl(v2n) + 1e-12, "not a fixed point: one more update moves it by %.3Lg",
              sqrtl(step2));
    CHECK_MSG(n_clipped == k, "tau 40 below every distance clips all %zu contributions, not %zu", k, n_clipped);

    /* 4. Robustness: 5 honest, 3 sign-flipped x1000: the result stays near
     * the honest weighted mean, which the plain mean misses by far. */
    k = 8;
    for (size_t j = 0; j < k; j++) w[j] = 1;
    for (size_t e = 0; e < LEN; e++) {
        double common = uniform();
        for (size_t j = 0; j < 5; j++) x[j][e] = (float)(common + 0.1 * uniform());
        for (size_t j = 5; j < k; j++) x[j][e] = -1000.0f * x[j - 5][e];
    }
    CHECK_OK(dl_centered_clip((const float *const *)x, w, k, LEN, 1.0, 20, v, clipped));
    long double d2 = 0, h2 = 0, m2 = 0;
    for (size_t e = 0; e < LEN; e++) {
        long double honest = 0, mean = 0;
        for (size_t j = 0; j < 5; j++) honest += x[j][e] / 5.0L;
        for (size_t j = 0; j < k; j++) mean += x[j][e] / (long double)k;
        d2 += (v[e] - honest) * (v[e] - honest);
        m2 += (mean - honest) * (mean - honest);
        h2 += honest * honest;
    }
    double rel = (double)sqrtl(d2 / h2), rel_mean = (double)sqrtl(m2 / h2);
    printf("sign-flip x1000, 3 of 8: centered clip %.4f, mean %.1f (relative L2 from the honest mean)\n", rel,
           rel_mean);
    CHECK_MSG(rel < 0.1, "centered clip is %.3g (relative) from the honest mean", rel);
    CHECK(rel_mean > 100);
    for (size_t j = 5; j < k; j++) CHECK(clipped[j]);

    /* 5. Bad arguments are refused. */
    CHECK(dl_centered_clip((const float *const *)x, w, k, LEN, 0, 20, v, NULL) == -1);
    CHECK(dl_centered_clip((const float *const *)x, w, k, LEN, NAN, 20, v, NULL) == -1);
    CHECK(dl_centered_clip((const float *const *)x, w, 0, LEN, 1, 20, v, NULL) == -1);
    double zero[K_MAX] = {0};
    CHECK(dl_centered_clip((const float *const *)x, zero, k, LEN, 1, 20, v, NULL) == -1);

    for (size_t j = 0; j < K_MAX; j++) free(x[j]);
    free(v);
    free(v2);
    free(ref);
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
