/* The arithmetic of accountable aggregation (src/collab/audit.c): the
 * directions, the measures senders publish, the tolerance of the mean's
 * equation at its edge, a codec's rounding inside the tolerance, senders
 * that cancel each other, and CenteredClip's equation with its published
 * clip weights (an aggregator that lies about them, consistently or not, is
 * caught; one that claims too much slack is uncheckable, never passed). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/centered_clip.h"
#include "collab/wirecodec.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define LEN 1001 /* odd, not a multiple of 8: the measures' lanes end in a tail */
#define K 5

static uint64_t rng = 777;
static double uniform(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static const uint8_t seed[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

/* Claims and result numbers for the result q of contributions x with
 * weights w and clip weights c, the result's own v (double) and iterate. */
static void describe(float x[][LEN], const double *w, const double *c, size_t k, const double *v, const double *iterate,
                     const float *q, int codec, struct dl_audit_claim *claims, struct dl_audit_result *res) {
    int16_t z[LEN];
    dl_audit_direction(seed, 42, LEN, z);
    for (size_t j = 0; j < k; j++) {
        claims[j].weight = w[j];
        claims[j].clip = c[j];
        dl_audit_measure(z, x[j], q, LEN, &claims[j].m);
    }
    struct dl_audit_measure qm;
    dl_audit_measure(z, q, NULL, LEN, &qm);
    double e2 = 0, dc = 0, l2 = 0, linf = 0, lowest = q[0], highest = q[0];
    for (size_t e = 0; e < LEN; e++) {
        linf = fmax(linf, fabs((double)q[e]));
        lowest = fmin(lowest, (double)q[e]);
        highest = fmax(highest, (double)q[e]);
        e2 += (v[e] - q[e]) * (v[e] - q[e]);
        if (iterate) dc += (iterate[e] - v[e]) * (iterate[e] - v[e]);
        l2 += (double)q[e] * q[e];
    }
    *res = (struct dl_audit_result){.s = qm.s, .l1 = qm.a, .l2 = sqrt(l2), .linf = linf, .range = highest - lowest, .e2 = sqrt(e2),
                                    .delta = sqrt(dc), .len = LEN, .codec = codec};
}

static void weighted_mean(float x[][LEN], const double *w, const double *c, size_t k, double *v) {
    double total = 0;
    for (size_t j = 0; j < k; j++) total += w[j] * c[j];
    for (size_t e = 0; e < LEN; e++) {
        double acc = 0;
        for (size_t j = 0; j < k; j++) acc += w[j] * c[j] * (double)x[j][e];
        v[e] = acc / total;
    }
}

/* The result an honest aggregator sends for v, decoded. */
static void round_to(int codec, const double *v, float *q) {
    float f[LEN];
    uint8_t wire[4 * LEN + 2048];
    size_t size = 0;
    for (size_t e = 0; e < LEN; e++) f[e] = (float)v[e];
    CHECK_OK(dl_codec_result_encode(codec, f, LEN, wire, &size));
    CHECK_OK(dl_codec_result_decode(codec, wire, size, LEN, q));
}

/* A standard normal draw. */
static double normal(void) {
    double u = (uniform() + 1) / 2, t = (uniform() + 1) / 2;
    return sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * t);
}

int main(void) {
    static float x[K][LEN];
    static double v[LEN], iterate[LEN];
    static float q[LEN];
    double w[K] = {1, 2, 3, 1, 5}, ones[K] = {1, 1, 1, 1, 1};
    struct dl_audit_claim claims[K];
    struct dl_audit_result res;
    char why[300];

    /* 1. Directions: the same for the same seed and chunk, another for
     * another chunk; the words are ChaCha20's stream read as little-endian
     * int16 (RFC 8439's first block for an all-zero key and nonce starts
     * 76 b8 e0 ad); z lies in (3/4, 1) in magnitude, half of it negative,
     * with E z^2 about 0.77. */
    int16_t a[LEN], b[LEN], c2[LEN];
    dl_audit_direction(seed, 7, LEN, a);
    dl_audit_direction(seed, 7, LEN, b);
    dl_audit_direction(seed, 8, LEN, c2);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c2, sizeof a));
    {
        /* OpenSSL's stream and libsodium's, word for word, at lengths that
         * end inside and at the edge of ChaCha20's 64-byte blocks, for
         * chunk indexes that fill the nonce's high bytes. */
        static int16_t fast[131072 + 8], portable[131072 + 8];
        const size_t lens[] = {0, 1, 31, 32, 33, 64, 1001, 131072 + 7};
        const uint64_t chunks[] = {0, 9, 0x0102030405060708ull, UINT64_MAX};
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
            for (size_t j = 0; j < sizeof chunks / sizeof *chunks; j++) {
                memset(fast, 0x11, sizeof fast);
                memset(portable, 0x22, sizeof portable);
                dl_audit_direction_path(false, seed, chunks[j], lens[i], fast);
                dl_audit_direction_path(true, seed, chunks[j], lens[i], portable);
                CHECK_MSG(!memcmp(fast, portable, 2 * lens[i]) && fast[lens[i]] == 0x1111 &&
                              portable[lens[i]] == 0x2222,
                          "direction of %zu words for chunk %llx: OpenSSL and libsodium differ", lens[i],
                          (unsigned long long)chunks[j]);
            }
        static const uint8_t zero_key[32];
        int16_t first[2];
        dl_audit_direction(zero_key, 0, 2, first);
        CHECK_MSG(first[0] == (int16_t)0xb876 && first[1] == (int16_t)0xade0, "ChaCha20 words %04x %04x",
                  (unsigned)(uint16_t)first[0], (unsigned)(uint16_t)first[1]);
        CHECK(dl_audit_z(0) == (3.0 * 65536 + 1) / 262144 && dl_audit_z(-1) == -(3.0 * 65536 + 65535) / 262144);
        CHECK(dl_audit_z(32767) == 262143.0 / 262144 && dl_audit_z(-32768) == -(3.0 * 65536 + 1) / 262144);
        int negative = 0;
        double square = 0;
        for (size_t e = 0; e < LEN; e++) {
            double ze = dl_audit_z(a[e]);
            CHECK(fabs(ze) > 0.75 && fabs(ze) < 1);
            negative += ze < 0;
            square += ze * ze / LEN;
        }
        CHECK_MSG(negative > LEN / 2 - 100 && negative < LEN / 2 + 100 && fabs(square - 37.0 / 48) < 0.02,
                  "z: %d of %d negative, mean square %g", negative, LEN, square);
    }

    /* 1b. The measures: the fast path (AVX2 where the CPU has it) and the
     * portable one give the same bits, over every length up to 40 (the
     * lanes' tail) and a long odd one; both are the index-order sums up to
     * double rounding, and the extremes are exact. */
    {
        static float xs[LEN], qs[LEN];
        for (size_t e = 0; e < LEN; e++) {
            xs[e] = (float)(uniform() * 1e3);
            qs[e] = (float)uniform();
        }
        xs[500] = -3e3f; /* the smallest, inside the vector part */
        xs[998] = 4e3f;  /* the largest, in the tail beyond the last 8 */
        size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 40, LEN};
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
            size_t n = lens[i];
            for (int with_q = 0; with_q < 2; with_q++) {
                struct dl_audit_measure fast, portable;
                struct dl_audit_extremes fe, pe;
                dl_audit_measure_path(false, a, xs, with_q ? qs : NULL, n, &fast, &fe);
                dl_audit_measure_path(true, a, xs, with_q ? qs : NULL, n, &portable, &pe);
                CHECK_MSG(!memcmp(&fast, &portable, sizeof fast) && fe.lo == pe.lo && fe.hi == pe.hi,
                          "length %zu: fast %.17g %.17g %.17g, portable %.17g %.17g %.17g", n, fast.s, fast.a, fast.d,
                          portable.s, portable.a, portable.d);
                long double s = 0, ab = 0, d2 = 0, prod = 0, prod_abs = 0;
                double lo = n ? xs[0] : 0, hi = lo;
                for (size_t e = 0; e < n; e++) {
                    long double v = xs[e], diff = v - (with_q ? (long double)qs[e] : 0);
                    s += (long double)dl_audit_z(a[e]) * v;
                    ab += fabsl(v);
                    d2 += diff * diff;
                    prod += v * (with_q ? (long double)qs[e] : v);
                    prod_abs += fabsl(v * (with_q ? (long double)qs[e] : v));
                    lo = xs[e] < lo ? xs[e] : lo;
                    hi = xs[e] > hi ? xs[e] : hi;
                }
                double slack = 1e-13 * (double)ab + 1e-300;
                CHECK_MSG(fabs(fast.s - (double)s) <= slack && fabs(fast.a - (double)ab) <= slack &&
                              fabs(fast.d - sqrt((double)d2)) <= 1e-13 * sqrt((double)d2) + 1e-300,
                          "length %zu: %.17g %.17g %.17g against %.17Lg %.17Lg %.17Lg", n, fast.s, fast.a, fast.d, s, ab,
                          sqrtl(d2));
                /* r: x.q, or x.x (d's sum before its root) without q */
                CHECK_MSG(fabs(fast.r - (double)prod) <= 1e-13 * (double)prod_abs + 1e-300,
                          "length %zu (q %d): r %.17g against %.17Lg", n, with_q, fast.r, prod);
                CHECK(fe.lo == lo && fe.hi == hi);
            }
        }
        struct dl_audit_extremes ext;
        struct dl_audit_measure m;
        dl_audit_measure_result(a, xs, LEN, &m, &ext);
        CHECK(ext.lo == -3e3 && ext.hi == 4e3);
        /* One sweep for x against q and for q alone: the bits of the two
         * calls, on both paths, at lengths that end inside a tile's last
         * block, at a tile's edge and past it. */
        static float xl[8192 * 2 + 13], ql[8192 * 2 + 13];
        static int16_t zl[8192 * 2 + 13];
        dl_audit_direction(seed, 3, sizeof zl / sizeof *zl, zl);
        for (size_t e = 0; e < sizeof xl / sizeof *xl; e++) {
            xl[e] = (float)(uniform() * 10);
            ql[e] = (float)uniform();
        }
        const size_t both_lens[] = {0, 5, 8, 8191, 8192, 8200, 8192 * 2 + 13};
        for (size_t i = 0; i < sizeof both_lens / sizeof *both_lens; i++)
            for (int portable = 0; portable < 2; portable++) {
                size_t n = both_lens[i];
                struct dl_audit_measure sx, sq, bx, bq;
                struct dl_audit_extremes se, be;
                dl_audit_measure_path(portable, zl, xl, ql, n, &sx, NULL);
                dl_audit_measure_path(portable, zl, ql, NULL, n, &sq, &se);
                dl_audit_measure_both_path(portable, zl, xl, ql, n, &bx, &bq, &be);
                CHECK_MSG(!memcmp(&sx, &bx, sizeof sx) && !memcmp(&sq, &bq, sizeof sq) && se.lo == be.lo &&
                              se.hi == be.hi,
                          "length %zu (%s): one sweep differs from two", n, portable ? "portable" : "fast");
            }
    }

    /* 2. The mean, fp32 on the wire: passes; the tolerance's edge is sharp. */
    for (size_t j = 0; j < K; j++)
        for (size_t e = 0; e < LEN; e++) x[j][e] = (float)uniform();
    weighted_mean(x, w, ones, K, v);
    round_to(DL_CODEC_NONE, v, q);
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    CHECK(dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_PASS);
    double tol = dl_audit_tolerance(claims, K, &res);
    CHECK_MSG(tol > 0 && tol < 1e-5, "tolerance %g", tol);
    double want = 0, total = 0;
    for (size_t j = 0; j < K; j++) want += w[j] * claims[j].m.s, total += w[j];
    want /= total;
    struct dl_audit_result edge = res;
    edge.s = want + 0.99 * tol;
    CHECK(dl_audit_check(claims, K, &edge, false, 1, NULL, 0) == DL_AUDIT_PASS);
    edge.s = want - 1.01 * tol;
    CHECK(dl_audit_check(claims, K, &edge, false, 1, why, sizeof why) == DL_AUDIT_WRONG);
    /* One element off by 1e-3 (far below what any attack moves) is caught. */
    q[17] += 1e-3f;
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    CHECK(dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_WRONG);
    /* ...but not when the aggregator also claims that much rounding: a
     * claim beyond what fp32 needs is held to the bound, and caught. */
    res.e2 = 1;
    CHECK(dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_WRONG);
    /* A sender who lies about a chunk's projection moves the equation too. */
    q[17] -= 1e-3f;
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    claims[2].m.s += 1e-3;
    CHECK(dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_WRONG);
    /* The aggregator's recomputation tells the lie from the truth. */
    struct dl_audit_measure truth = claims[2].m;
    truth.s -= 1e-3;
    CHECK(!dl_audit_measure_agrees(&claims[2].m, &truth));
    CHECK(dl_audit_measure_agrees(&truth, &truth));
    /* Clip weights other than 1 under the mean are refused. */
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    claims[0].clip = 0.5;
    CHECK(dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_WRONG);

    /* 3. fp16 and uint8 rounding stay within the tolerance, over many
     * draws; the committed e2 stays within its bound. */
    int passed16 = 0, passed8 = 0;
    for (int trial = 0; trial < 200; trial++) {
        double scale = pow(10, (trial % 9) - 4);
        for (size_t j = 0; j < K; j++)
            for (size_t e = 0; e < LEN; e++) x[j][e] = (float)(scale * uniform());
        weighted_mean(x, w, ones, K, v);
        round_to(DL_CODEC_FP16, v, q);
        describe(x, w, ones, K, v, NULL, q, DL_CODEC_FP16, claims, &res);
        passed16 += dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_PASS;
        CHECK(res.e2 <= dl_audit_e2_bound(DL_CODEC_FP16, res.l2, 0, 0, LEN));
        round_to(DL_CODEC_UINT8, v, q);
        describe(x, w, ones, K, v, NULL, q, DL_CODEC_UINT8, claims, &res);
        passed8 += dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_PASS;
    }
    CHECK_MSG(passed16 == 200, "fp16: %d of 200 honest results passed", passed16);
    CHECK_MSG(passed8 == 200, "uint8: %d of 200 honest results passed", passed8);
    /* A claim beyond uint8's bound is held to it, and uncheckable. */
    res.e2 = 10 * dl_audit_e2_bound(DL_CODEC_UINT8, res.l2, res.linf, res.range, LEN);
    CHECK(dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_UNCHECKABLE);

    /* 3b. uint8 on gradient-like chunks: sparse ones (an embedding's
     * gradient: most rows untouched, 0.5 to 5 % of the values non-zero,
     * heavy-tailed) and dense ones whose scales differ by 1000 across the
     * chunk, under the mean and centered clip. Where the contributions'
     * mean +- 6 sigma grid clamps most non-zeros into its end bins, the
     * result's own grid (its smallest to its largest value) keeps every
     * value within one bin width: every honest result passes, with its e2
     * within the bound. */
    int honest8 = 0, caught8 = 0, trials8 = 0;
    for (int trial = 0; trial < 120; trial++) {
        bool sparse = trial % 2 == 0;
        double keep = 0.005 * (1 + trial % 10);
        for (size_t e = 0; e < LEN; e++) {
            bool row = !sparse || (uniform() + 1) / 2 < keep;
            double scale = sparse ? 1 : pow(10, -3.0 * (double)e / LEN);
            for (size_t j = 0; j < K; j++) {
                double g = row ? scale * normal() * (1 + 3 * fabs(normal())) : 0;
                x[j][e] = (float)g;
            }
        }
        weighted_mean(x, w, ones, K, v);
        round_to(DL_CODEC_UINT8, v, q);
        describe(x, w, ones, K, v, NULL, q, DL_CODEC_UINT8, claims, &res);
        double bound = dl_audit_e2_bound(DL_CODEC_UINT8, res.l2, res.linf, res.range, LEN);
        CHECK_MSG(res.e2 <= bound, "trial %d: e2 %g beyond the bound %g (|q| %g)", trial, res.e2, bound, res.l2);
        enum dl_audit_verdict verdict = dl_audit_check(claims, K, &res, false, 1, why, sizeof why);
        CHECK_MSG(verdict == DL_AUDIT_PASS, "trial %d (%s, %g): %s", trial, sparse ? "sparse" : "dense", keep, why);
        honest8 += verdict == DL_AUDIT_PASS;
        trials8++;
        /* A x(-100) flip, claiming the most slack the bound allows (0.05 to
         * 0.2 |q| here, and it scales with the lie): each chunk has its own
         * direction, and about half of them catch it, so a part of a few
         * chunks escapes with a probability of about 2^-chunks. */
        float flipped[LEN];
        for (size_t e = 0; e < LEN; e++) flipped[e] = -100 * q[e];
        describe(x, w, ones, K, v, NULL, flipped, DL_CODEC_UINT8, claims, &res);
        res.e2 = dl_audit_e2_bound(DL_CODEC_UINT8, res.l2, res.linf, res.range, LEN);
        caught8 += dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_WRONG;
    }
    CHECK_MSG(honest8 == trials8, "uint8, gradient-like: %d of %d honest results passed", honest8, trials8);
    CHECK_MSG(caught8 >= trials8 * 2 / 5, "uint8, gradient-like: %d of %d flipped results caught", caught8, trials8);

    /* 3b. A lie of +c on one element and -c on another (the largest and
     * the smallest swapped, so exactly +-c), c far beyond the tolerance,
     * each chunk with its own direction: z.q moves by c (z_a - z_b). +-1
     * signs let it through whenever the two signs agree (one chunk in two,
     * whatever c); these directions only when z_a and z_b lie within
     * tolerance / c of each other. */
    {
        for (size_t j = 0; j < K; j++)
            for (size_t e = 0; e < LEN; e++) x[j][e] = (float)normal();
        weighted_mean(x, w, ones, K, v);
        round_to(DL_CODEC_NONE, v, q);
        double e2 = 0;
        size_t top = 0, bottom = 0;
        for (size_t e = 0; e < LEN; e++) {
            e2 += (v[e] - q[e]) * (v[e] - q[e]);
            top = q[e] > q[top] ? e : top;
            bottom = q[e] < q[bottom] ? e : bottom;
        }
        int caught = 0, trials = 400;
        for (int t = 0; t < trials; t++) {
            static float lie[LEN];
            int16_t zt[LEN];
            memcpy(lie, q, sizeof lie);
            lie[top] = q[bottom];
            lie[bottom] = q[top];
            dl_audit_direction(seed, 1000 + (uint64_t)t, LEN, zt);
            for (size_t j = 0; j < K; j++) {
                claims[j] = (struct dl_audit_claim){.weight = w[j], .clip = 1};
                dl_audit_measure(zt, x[j], lie, LEN, &claims[j].m);
            }
            struct dl_audit_measure qm;
            struct dl_audit_extremes ext;
            dl_audit_measure_result(zt, lie, LEN, &qm, &ext);
            res = (struct dl_audit_result){.s = qm.s, .l1 = qm.a, .l2 = qm.d, .linf = fmax(fabs(ext.lo), fabs(ext.hi)),
                                           .range = ext.hi - ext.lo, .e2 = sqrt(e2), .len = LEN, .codec = DL_CODEC_NONE};
            caught += dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_WRONG;
        }
        CHECK_MSG(caught >= trials - 2, "a +-%g pair caught in %d of %d chunks", (double)(q[top] - q[bottom]), caught,
                  trials);
    }

    /* 4. Senders that cancel (+1000 g and -1000 g): the result is small, the
     * rounding of their projections is not; the tolerance covers it. */
    for (size_t e = 0; e < LEN; e++) {
        double g = uniform();
        x[0][e] = (float)(1000 * g + 1e-3 * uniform());
        x[1][e] = (float)(-1000 * g + 1e-3 * uniform());
    }
    double w2[2] = {1, 1}, c2w[2] = {1, 1};
    weighted_mean(x, w2, c2w, 2, v);
    round_to(DL_CODEC_NONE, v, q);
    describe(x, w2, c2w, 2, v, NULL, q, DL_CODEC_NONE, claims, &res);
    CHECK(dl_audit_check(claims, 2, &res, false, 1, why, sizeof why) == DL_AUDIT_PASS);

    /* 5. CenteredClip: four honest contributions and one x1000 outlier. The
     * result is the reweighted mean at the iterate, clip weights from there. */
    for (size_t j = 0; j < K; j++)
        for (size_t e = 0; e < LEN; e++) x[j][e] = (float)(0.05 * uniform() + (j == 4 ? -1000 * 0.3 : 0.3));
    const float *xs[K] = {x[0], x[1], x[2], x[3], x[4]};
    double tau = 1, clip[K];
    CHECK_OK(dl_centered_clip(xs, w, K, LEN, tau, 20, iterate, NULL));
    for (size_t j = 0; j < K; j++) {
        double d2 = 0;
        for (size_t e = 0; e < LEN; e++) d2 += (x[j][e] - iterate[e]) * (x[j][e] - iterate[e]);
        clip[j] = sqrt(d2) > tau ? tau / sqrt(d2) : 1;
    }
    CHECK(clip[4] < 1e-3);
    weighted_mean(x, w, clip, K, v);
    round_to(DL_CODEC_FP16, v, q);
    describe(x, w, clip, K, v, iterate, q, DL_CODEC_FP16, claims, &res);
    CHECK_MSG(dl_audit_check(claims, K, &res, true, tau, why, sizeof why) == DL_AUDIT_PASS, "%s", why);
    /* (e) The lucky direction under centered clip: the result 1000 times
     * the true one (away from the outlier too), int8, with the clip weights
     * such a result gives every contributor (tau over its distance to it),
     * no iterate distance, and its projection where its contributors' put
     * it. The equation and the clip weights hold; a weighted mean of these
     * chunks cannot be 1000 times larger than most of them, and the norm
     * refuses it (without that bound this passed). */
    {
        double vl[LEN], cl[K];
        float ql[LEN];
        for (size_t e = 0; e < LEN; e++) vl[e] = 1000 * v[e];
        round_to(DL_CODEC_INT8, vl, ql);
        for (size_t j = 0; j < K; j++) {
            double d2 = 0;
            for (size_t e = 0; e < LEN; e++) d2 += ((double)x[j][e] - ql[e]) * ((double)x[j][e] - ql[e]);
            cl[j] = sqrt(d2) > tau ? tau / sqrt(d2) : 1;
        }
        struct dl_audit_claim lc[K];
        struct dl_audit_result lr;
        describe(x, w, cl, K, vl, NULL, ql, DL_CODEC_INT8, lc, &lr);
        double want = 0, wc = 0;
        for (size_t j = 0; j < K; j++) want += lc[j].weight * lc[j].clip * lc[j].m.s, wc += lc[j].weight * lc[j].clip;
        lr.s = want / wc;
        CHECK_MSG(dl_audit_check(lc, K, &lr, true, tau, why, sizeof why) == DL_AUDIT_WRONG && strstr(why, "L1 norm"),
                  "a result 1000 times the clipped mean: %s", why);
    }
    /* (a) it publishes the outlier unclipped but reduced as it should: the
     * equation fails. */
    claims[4].clip = 1;
    CHECK(dl_audit_check(claims, K, &res, true, tau, NULL, 0) == DL_AUDIT_WRONG);
    /* (b) it reduces with the outlier unclipped and says so: the equation
     * holds, the clip weight contradicts the outlier's distance. */
    double lied[K];
    memcpy(lied, clip, sizeof lied);
    lied[4] = 1;
    weighted_mean(x, w, lied, K, v);
    round_to(DL_CODEC_FP16, v, q);
    describe(x, w, lied, K, v, iterate, q, DL_CODEC_FP16, claims, &res);
    res.delta = 0.1;
    CHECK_MSG(dl_audit_check(claims, K, &res, true, tau, why, sizeof why) == DL_AUDIT_WRONG, "%s", why);
    CHECK(strstr(why, "clip weight") != NULL);
    /* (c) ...and claims a distance to its iterate so large that any clip
     * weight would do: uncheckable, not passed. */
    res.delta = 1000;
    CHECK(dl_audit_check(claims, K, &res, true, tau, NULL, 0) == DL_AUDIT_UNCHECKABLE);
    /* (d) the edge of the clip-weight interval: c = tau / (d + delta). */
    weighted_mean(x, w, clip, K, v);
    round_to(DL_CODEC_FP16, v, q);
    describe(x, w, clip, K, v, iterate, q, DL_CODEC_FP16, claims, &res);
    double d4 = claims[4].m.d, lo = tau / (d4 + res.delta);
    claims[4].clip = lo * (1 + 1e-12);
    /* (the equation moves by a negligible amount with it) */
    CHECK_MSG(dl_audit_check(claims, K, &res, true, tau, why, sizeof why) == DL_AUDIT_PASS, "%s", why);
    claims[4].clip = lo * 0.99;
    describe(x, w, clip, K, v, iterate, q, DL_CODEC_FP16, claims, &res);
    claims[4].clip = tau / (d4 + res.delta) * 0.99;
    CHECK(dl_audit_check(claims, K, &res, true, tau, why, sizeof why) == DL_AUDIT_WRONG);
    /* Nonsense commitments are refused outright. */
    describe(x, w, clip, K, v, iterate, q, DL_CODEC_FP16, claims, &res);
    res.e2 = NAN;
    CHECK(dl_audit_check(claims, K, &res, true, tau, NULL, 0) == DL_AUDIT_WRONG);
    CHECK(dl_audit_check(claims, 0, &res, true, tau, NULL, 0) == DL_AUDIT_WRONG);

    /* 6. Claims bounded by what a chunk can be (dl_audit_claim_possible).
     * (a) True measures always are: dense and one-element differences,
     * x equal to q, tiny and large scales, over many directions. */
    {
        static float xs6[LEN], qs6[LEN];
        static int16_t z6[LEN];
        size_t refused = 0, trials = 0;
        double worst = 0;
        for (int t = 0; t < 400; t++) {
            double scale = t % 4 == 0 ? 1e-20 : t % 4 == 1 ? 1e4 : 1;
            for (size_t e = 0; e < LEN; e++) {
                qs6[e] = (float)(scale * uniform());
                xs6[e] = t % 5 == 0 ? qs6[e] : t % 5 == 1 ? qs6[e] + (e == 7 ? (float)scale : 0.0f)
                                                           : (float)(scale * uniform());
            }
            dl_audit_direction(seed, (uint64_t)t, LEN, z6);
            struct dl_audit_measure mx, mq;
            dl_audit_measure(z6, xs6, qs6, LEN, &mx);
            dl_audit_measure(z6, qs6, NULL, LEN, &mq);
            struct dl_audit_result r6 = {.s = mq.s, .l1 = mq.a, .l2 = mq.d, .len = LEN, .codec = DL_CODEC_NONE};
            if (mx.d > 0) worst = fmax(worst, fabs(mx.s - mq.s) / mx.d);
            refused += !dl_audit_claim_possible(&mx, &r6, why, sizeof why);
            trials++;
        }
        CHECK_MSG(refused == 0, "%zu of %zu true measures refused: %s", refused, trials, why);
        /* |z.(x - q)| / |x - q| stays near E z^2's root, far inside 8. */
        CHECK_MSG(worst > 0.5 && worst < 4, "largest |z.(x - q)| / |x - q| %g", worst);
    }
    /* (b) The hole it closes: a result -1000 times the mean passes the
     * equation when one contributor (the aggregator, for its own chunk,
     * which nobody else holds) claims an L1 norm of 1e300, since the
     * tolerance covers the rounding of sums that large. No chunk at that
     * distance from the result has that norm. */
    for (size_t j = 0; j < K; j++)
        for (size_t e = 0; e < LEN; e++) x[j][e] = (float)uniform();
    weighted_mean(x, w, ones, K, v);
    for (size_t e = 0; e < LEN; e++) v[e] *= -1000;
    round_to(DL_CODEC_NONE, v, q);
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    CHECK(dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_WRONG);
    for (size_t j = 0; j < K; j++) CHECK(dl_audit_claim_possible(&claims[j].m, &res, NULL, 0));
    /* (b2) The same result where the direction happens to be nearly
     * orthogonal to the mean, so that its projection agrees with the
     * contributors' (one round in a few for int8's coarse rounding, whose
     * share of the tolerance grows with the lie): its L1 norm, 1000 times
     * the mean's, is beyond every chunk's, and is refused all the same.
     * Honest claims throughout, so the result is what is wrong. */
    {
        struct dl_audit_result lucky = res;
        double want = 0, total = 0;
        for (size_t j = 0; j < K; j++) want += claims[j].weight * claims[j].m.s, total += claims[j].weight;
        lucky.s = want / total;
        CHECK(dl_audit_check(claims, K, &lucky, false, 1, why, sizeof why) == DL_AUDIT_WRONG);
        CHECK_MSG(strstr(why, "L1 norm") != NULL, "%s", why);
    }
    /* Honest results at the norm bound's edge: every contributor the same
     * chunk, so the mean's L1 norm equals each chunk's, on every codec. */
    {
        const int codecs[] = {DL_CODEC_NONE, DL_CODEC_FP16, DL_CODEC_UINT8, DL_CODEC_INT8};
        float same[K][LEN];
        for (size_t e = 0; e < LEN; e++) same[0][e] = (float)(uniform() - 0.5);
        for (size_t j = 1; j < K; j++) memcpy(same[j], same[0], sizeof same[0]);
        double vs[LEN];
        float qs[LEN];
        struct dl_audit_claim cs[K];
        struct dl_audit_result rs;
        weighted_mean(same, w, ones, K, vs);
        for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
            round_to(codecs[c], vs, qs);
            describe(same, w, ones, K, vs, NULL, qs, codecs[c], cs, &rs);
            CHECK_MSG(dl_audit_check(cs, K, &rs, false, 1, why, sizeof why) == DL_AUDIT_PASS,
                      "identical chunks, codec %d: %s", codecs[c], why);
        }
    }
    claims[0].m.a = 1e300;
    {
        /* with its product covering the lie in the alignment check too
         * (impossible as well, (g)), the check alone passes it */
        double others = 0, total = 0;
        for (size_t j = 0; j < K; j++) total += claims[j].weight;
        for (size_t j = 1; j < K; j++) others += claims[j].weight * claims[j].m.r;
        double honest_r = claims[0].m.r;
        claims[0].m.r = (total * res.l2 * res.l2 - others) / claims[0].weight;
        CHECK(dl_audit_check(claims, K, &res, false, 1, NULL, 0) == DL_AUDIT_PASS);
        claims[0].m.r = honest_r;
    }
    CHECK(!dl_audit_claim_possible(&claims[0].m, &res, why, sizeof why));
    CHECK_MSG(strstr(why, "L1 norm") != NULL, "%s", why);
    /* (c) A projection that absorbs the lie (the equation then holds),
     * with the distance the chunk has from the true mean (what keeps a
     * clip weight of 1 under centered clip), or 0 ("my chunk is the
     * result"): far beyond 8 distances from z.q. */
    describe(x, w, ones, K, v, NULL, q, DL_CODEC_NONE, claims, &res);
    double others = 0, wsum = 0, near2 = 0;
    for (size_t j = 0; j < K; j++) wsum += w[j];
    for (size_t j = 1; j < K; j++) others += w[j] * claims[j].m.s;
    for (size_t e = 0; e < LEN; e++) near2 += (x[0][e] + v[e] / 1000) * (x[0][e] + v[e] / 1000);
    claims[0].m.s = (wsum * res.s - others) / w[0];
    claims[0].m.a = fmax(claims[0].m.a, fabs(claims[0].m.s));
    claims[0].m.d = sqrt(near2);
    /* The equation holds; the result's norm, beyond what these chunks
     * allow, still fails (b2), and the claim is impossible besides. */
    CHECK_MSG(dl_audit_check(claims, K, &res, false, 1, why, sizeof why) == DL_AUDIT_WRONG && strstr(why, "L1 norm"),
              "%s", why);
    CHECK(!dl_audit_claim_possible(&claims[0].m, &res, why, sizeof why));
    CHECK_MSG(strstr(why, "times the claimed distance") != NULL, "%s", why);
    claims[0].m.d = 0;
    CHECK(!dl_audit_claim_possible(&claims[0].m, &res, NULL, 0));
    /* ...while a claim 8 distances out is the edge: inside passes. */
    struct dl_audit_measure edge6 = {.s = res.s + 7.9 * 2.0, .a = fabs(res.s) + 20, .d = 2.0, .r = res.l2 * res.l2};
    CHECK(dl_audit_claim_possible(&edge6, &res, why, sizeof why));
    edge6.s = res.s + 8.1 * 2.0;
    CHECK(!dl_audit_claim_possible(&edge6, &res, NULL, 0));
    /* (d) Nonsense: a projection beyond the L1 norm, not finite, a
     * negative distance, a distance values below 2^32 cannot reach. */
    double rq = res.l2 * res.l2; /* a possible product, so that each case fails on its own count */
    struct dl_audit_measure bad = {.s = 2, .a = 1, .d = 1, .r = rq};
    CHECK(!dl_audit_claim_possible(&bad, &res, NULL, 0));
    bad = (struct dl_audit_measure){.s = NAN, .a = 1, .d = 1, .r = rq};
    CHECK(!dl_audit_claim_possible(&bad, &res, NULL, 0));
    bad = (struct dl_audit_measure){.s = res.s, .a = 1, .d = -1, .r = rq};
    CHECK(!dl_audit_claim_possible(&bad, &res, NULL, 0));
    bad = (struct dl_audit_measure){.s = res.s, .a = 1, .d = 1e30, .r = rq};
    CHECK(!dl_audit_claim_possible(&bad, &res, NULL, 0));

    /* (g) The alignment check, q.q against sum_j w_j c_j r_j / W (r_j =
     * x_j.q). Gradient-like chunks: a shared direction with a few large
     * values, plus each sender's noise. */
    {
        const int codecs[] = {DL_CODEC_NONE, DL_CODEC_FP16, DL_CODEC_UINT8, DL_CODEC_INT8};
        static float xg[K][LEN];
        static double vg[LEN], vf[LEN];
        static float qg[LEN], qf[LEN];
        struct dl_audit_claim cg[K];
        struct dl_audit_result rg;
        size_t honest_refused = 0, flips_passed = 0, covers_possible = 0, trials = 0;
        char honest_why[256] = "", flip_why[256] = "";
        for (int t = 0; t < 30; t++) {
            for (size_t e = 0; e < LEN; e++) {
                double shared = normal() * (e % 97 == 0 ? 20.0 : 1.0);
                for (size_t j = 0; j < K; j++) xg[j][e] = (float)(shared + 0.7 * normal());
            }
            weighted_mean(xg, w, ones, K, vg);
            for (size_t e = 0; e < LEN; e++) vf[e] = -vg[e];
            for (size_t c = 0; c < sizeof codecs / sizeof *codecs; c++, trials++) {
                /* honest: passes */
                round_to(codecs[c], vg, qg);
                describe(xg, w, ones, K, vg, NULL, qg, codecs[c], cg, &rg);
                if (dl_audit_check(cg, K, &rg, false, 1, why, sizeof why) != DL_AUDIT_PASS) {
                    honest_refused++;
                    snprintf(honest_why, sizeof honest_why, "codec %d: %s", codecs[c], why);
                }
                /* the flipped mean, with honest claims about it, its
                 * projection made to agree with them (the direction the
                 * liar hopes for: with uint8 and int8 about one chunk in
                 * two, (b2)), and the largest e2 its codec allows: its
                 * L1 norm is the mean's, so only the alignment sees it */
                round_to(codecs[c], vf, qf);
                describe(xg, w, ones, K, vf, NULL, qf, codecs[c], cg, &rg);
                rg.e2 = dl_audit_e2_bound(codecs[c], rg.l2, rg.linf, rg.range, LEN);
                double want = 0, total = 0;
                for (size_t j = 0; j < K; j++) want += cg[j].weight * cg[j].m.s, total += cg[j].weight;
                rg.s = want / total;
                enum dl_audit_verdict v = dl_audit_check(cg, K, &rg, false, 1, why, sizeof why);
                if (v != DL_AUDIT_WRONG || !strstr(why, "squared norm")) {
                    flips_passed++;
                    snprintf(flip_why, sizeof flip_why, "codec %d: verdict %d %s", codecs[c], (int)v, why);
                }
                /* a sender covering the flip in its product (as it could
                 * in its projection): no chunk at its distance gives it */
                double others = 0;
                for (size_t j = 1; j < K; j++) others += cg[j].weight * cg[j].m.r;
                cg[0].m.r = (total * rg.l2 * rg.l2 - others) / cg[0].weight;
                covers_possible += dl_audit_claim_possible(&cg[0].m, &rg, why, sizeof why) || !strstr(why, "product");
            }
        }
        CHECK_MSG(honest_refused == 0, "%zu of %zu honest results refused, last %s", honest_refused, trials,
                  honest_why);
        CHECK_MSG(flips_passed == 0, "%zu of %zu flipped results not refused on their alignment, last %s", flips_passed,
                  trials, flip_why);
        CHECK_MSG(covers_possible == 0, "%zu of %zu products covering a flip possible", covers_possible, trials);
        /* What it leaves: a lie on the sphere through 0 and v (v / 2 + R, R
         * orthogonal to v, |R| = |v| / 2) keeps q.(q - v) = 0 and the norm
         * within the contributors'; the projection meets it, with the
         * widest e2 its codec allows: fp32 and fp16 catch it every time,
         * while uint8 and int8, whose rounding bound grows with the result,
         * let some through (printed, not held: the rate is the codec's). */
        size_t rot_passed[4] = {0}, rot_trials = 0;
        for (int t = 0; t < 30; t++, rot_trials++) {
            for (size_t e = 0; e < LEN; e++) {
                double shared = normal() * (e % 97 == 0 ? 20.0 : 1.0);
                for (size_t j = 0; j < K; j++) xg[j][e] = (float)(shared + 0.7 * normal());
            }
            weighted_mean(xg, w, ones, K, vg);
            double vv = 0, uv = 0, uu = 0;
            for (size_t e = 0; e < LEN; e++) vv += vg[e] * vg[e], uv += (e & 1 ? 1.0 : -1.0) * vg[e];
            for (size_t e = 0; e < LEN; e++) {
                double u = (e & 1 ? 1.0 : -1.0) - uv / vv * vg[e];
                uu += u * u;
            }
            for (size_t e = 0; e < LEN; e++)
                vf[e] = 0.5 * vg[e] + 0.5 * sqrt(vv / uu) * ((e & 1 ? 1.0 : -1.0) - uv / vv * vg[e]);
            for (size_t c = 0; c < sizeof codecs / sizeof *codecs; c++) {
                round_to(codecs[c], vf, qf);
                describe(xg, w, ones, K, vf, NULL, qf, codecs[c], cg, &rg);
                rg.e2 = dl_audit_e2_bound(codecs[c], rg.l2, rg.linf, rg.range, LEN);
                enum dl_audit_verdict v = dl_audit_check(cg, K, &rg, false, 1, why, sizeof why);
                if (v == DL_AUDIT_PASS) rot_passed[c]++;
                else if (codecs[c] == DL_CODEC_FP16 || codecs[c] == DL_CODEC_NONE)
                    CHECK_MSG(v == DL_AUDIT_WRONG && strstr(why, "its projection") != NULL, "codec %d: %d %s",
                              codecs[c], (int)v, why);
            }
        }
        CHECK_MSG(rot_passed[0] == 0 && rot_passed[1] == 0, "the orthogonal lie passed fp32 %zu, fp16 %zu times",
                  rot_passed[0], rot_passed[1]);
        printf("orthogonal lie v/2 + R (widest e2) passed the projection in %zu (uint8) and %zu (int8) of %zu "
               "gradient-like chunks\n", rot_passed[2], rot_passed[3], rot_trials);
    }

    /* (h) The coarse codecs' rounding bounds at their edge, where an
     * honest e2 comes closest: uint8 data whose every bin holds values at
     * its two ends (Bhatia-Davis at equality: each value half a bin from
     * the bin's mean), int8 data just below half a step from each level.
     * The bound holds there with a quarter to spare (its margin over the
     * rigorous sqrt(len) w / 2 and sqrt(len) max|q| / 253), and no more:
     * the tolerance a liar can claim is no wider than that. */
    {
        static double ve[LEN];
        static float qe[LEN];
        const int coarse[] = {DL_CODEC_UINT8, DL_CODEC_INT8};
        for (size_t c = 0; c < 2; c++) {
            for (size_t e = 0; e < LEN; e++) {
                if (coarse[c] == DL_CODEC_UINT8) ve[e] = (double)((e / 2) % 256) + (e & 1 ? 0.999 : 0.001);
                else ve[e] = e == 0 ? 127.0 : (double)(e % 127) + 0.499;
                ve[e] = (double)(float)ve[e];
            }
            round_to(coarse[c], ve, qe);
            double e2 = 0, l2 = 0, lo = qe[0], hi = qe[0], linf = 0;
            for (size_t e = 0; e < LEN; e++) {
                e2 += (ve[e] - qe[e]) * (ve[e] - qe[e]);
                l2 += (double)qe[e] * qe[e];
                lo = fmin(lo, (double)qe[e]);
                hi = fmax(hi, (double)qe[e]);
                linf = fmax(linf, fabs((double)qe[e]));
            }
            double bound = dl_audit_e2_bound(coarse[c], sqrt(l2), linf, hi - lo, LEN), ratio = sqrt(e2) / bound;
            CHECK_MSG(ratio <= 1 && ratio > 0.75, "codec %d: an honest e2 at %.4f of its bound", coarse[c], ratio);
            printf("codec %d: an honest e2 at the edge is %.4f of its bound\n", coarse[c], ratio);
        }
    }

    /* A revealed nonce opens its commitment and nothing else: another
     * nonce, or the same nonce in another round, does not. */
    {
        uint8_t round_id[16], other_round[16], nonce[DL_AUDIT_NONCE], commit[32];
        memset(round_id, 0xA5, sizeof round_id);
        memset(other_round, 0xA5, sizeof other_round);
        other_round[15] ^= 1;
        for (size_t i = 0; i < sizeof nonce; i++) nonce[i] = (uint8_t)(3 * i + 1);
        dl_audit_nonce_commit(round_id, nonce, commit);
        CHECK(dl_audit_reveal_matches(round_id, nonce, commit));
        CHECK(!dl_audit_reveal_matches(other_round, nonce, commit));
        nonce[31] ^= 0x80;
        CHECK(!dl_audit_reveal_matches(round_id, nonce, commit));
    }
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
