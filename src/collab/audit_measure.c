/* The audit's passes over the elements (collab/audit.h): a chunk's
 * projection on a direction, L1 norm, distance to the result and product
 * with it, and a result's extremes.
 *
 * Every member runs these over its whole vector several times a round (its
 * own chunks, the chunks of its part, every result), so they are the
 * audit's main cost. A measure published by one member is recomputed by
 * another and compared, so the summation order is part of the protocol and
 * the same on every CPU: eight lanes, element e going to lane e mod 8 in
 * index order, the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)). The AVX2 path
 * and the portable one do the same double operations lane by lane (fp32 to
 * double is exact, fabs is exact, z_e x_e is exact: an integer below 2^18
 * times 2^-18 times a 24-bit mantissa fits a double's 53 bits, and the
 * build never contracts a product and a sum), so their results are bitwise
 * equal; test_collab_audit holds them against each other and against a
 * plain index-order sum. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/wirecodec.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define MEASURE_HAVE_X86 1
#else
#define MEASURE_HAVE_X86 0
#endif

#define LANES 8

struct lanes {
    double s[LANES], a[LANES], d[LANES], r[LANES]; /* r: x.q (unused when q is NULL: d holds x.x) */
    float lo, hi;
};

/* Elements [from, to) into their lanes; q NULL: d sums x^2. */
static void measure_scalar(const int16_t *z, const float *x, const float *q, size_t from, size_t to,
                           struct lanes *L) {
    for (size_t e = from; e < to; e++) {
        size_t l = e % LANES;
        double v = (double)x[e];
        L->s[l] += dl_audit_z(z[e]) * v;
        L->a[l] += fabs(v);
        double diff = q ? v - (double)q[e] : v;
        L->d[l] += diff * diff;
        if (q) L->r[l] += v * (double)q[e];
        /* a NaN never replaces a bound, as with _mm256_min_ps(v, bound) */
        L->lo = x[e] < L->lo ? x[e] : L->lo;
        L->hi = x[e] > L->hi ? x[e] : L->hi;
    }
}

#if MEASURE_HAVE_X86
__attribute__((target("avx2"))) static void measure_avx2(const int16_t *z, const float *x, const float *q,
                                                         size_t blocks, struct lanes *L) {
    const __m256i low15 = _mm256_set1_epi32(0x7fff), base1 = _mm256_set1_epi32(DL_AUDIT_Z_BASE + 1);
    const __m256d unit = _mm256_set1_pd(DL_AUDIT_Z_UNIT);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256d s0 = _mm256_loadu_pd(L->s), s1 = _mm256_loadu_pd(L->s + 4);
    __m256d a0 = _mm256_loadu_pd(L->a), a1 = _mm256_loadu_pd(L->a + 4);
    __m256d d0 = _mm256_loadu_pd(L->d), d1 = _mm256_loadu_pd(L->d + 4);
    __m256d r0 = _mm256_loadu_pd(L->r), r1 = _mm256_loadu_pd(L->r + 4);
    __m256 lo = _mm256_set1_ps(L->lo), hi = _mm256_set1_ps(L->hi);
    for (size_t b = 0; b < blocks; b++) {
        __m256 v = _mm256_loadu_ps(x + LANES * b), av = _mm256_andnot_ps(sign, v);
        /* dl_audit_z lanewise: the numerator in int32 (exact), its sign,
         * then the unit */
        __m256i c = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(z + LANES * b)));
        __m256i neg = _mm256_srai_epi32(c, 31);
        c = _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(c, low15), 1), base1);
        c = _mm256_sub_epi32(_mm256_xor_si256(c, neg), neg);
        __m256d z0 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(c)), unit);
        __m256d z1 = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(c, 1)), unit);
        __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(z0, v0));
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(z1, v1));
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(av)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(av, 1)));
        if (q) {
            __m256 qv = _mm256_loadu_ps(q + LANES * b);
            __m256d q0 = _mm256_cvtps_pd(_mm256_castps256_ps128(qv));
            __m256d q1 = _mm256_cvtps_pd(_mm256_extractf128_ps(qv, 1));
            r0 = _mm256_add_pd(r0, _mm256_mul_pd(v0, q0));
            r1 = _mm256_add_pd(r1, _mm256_mul_pd(v1, q1));
            v0 = _mm256_sub_pd(v0, q0);
            v1 = _mm256_sub_pd(v1, q1);
        }
        d0 = _mm256_add_pd(d0, _mm256_mul_pd(v0, v0));
        d1 = _mm256_add_pd(d1, _mm256_mul_pd(v1, v1));
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
    }
    _mm256_storeu_pd(L->s, s0);
    _mm256_storeu_pd(L->s + 4, s1);
    _mm256_storeu_pd(L->a, a0);
    _mm256_storeu_pd(L->a + 4, a1);
    _mm256_storeu_pd(L->d, d0);
    _mm256_storeu_pd(L->d + 4, d1);
    _mm256_storeu_pd(L->r, r0);
    _mm256_storeu_pd(L->r + 4, r1);
    float lanes_lo[LANES], lanes_hi[LANES];
    _mm256_storeu_ps(lanes_lo, lo);
    _mm256_storeu_ps(lanes_hi, hi);
    for (int l = 0; l < LANES; l++) {
        L->lo = lanes_lo[l] < L->lo ? lanes_lo[l] : L->lo;
        L->hi = lanes_hi[l] > L->hi ? lanes_hi[l] : L->hi;
    }
}

#endif


static double lanes_sum(const double *v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

static void lanes_init(struct lanes *L) {
    memset(L, 0, sizeof *L);
    L->lo = INFINITY;
    L->hi = -INFINITY;
}

/* The codecs' check of the CPU (AVX2 with F16C, asked once): the same
 * machines run both. */
static bool use_avx2(bool portable) {
#if MEASURE_HAVE_X86
    return !portable && dl_codec_path_available(DL_CODEC_PATH_AVX2);
#else
    (void)portable;
    return false;
#endif
}

static void measure_lanes(bool portable, const int16_t *z, const float *x, const float *q, size_t len,
                          struct lanes *L) {
    lanes_init(L);
    size_t blocks = len / LANES;
#if MEASURE_HAVE_X86
    if (use_avx2(portable)) {
        measure_avx2(z, x, q, blocks, L);
        measure_scalar(z, x, q, blocks * LANES, len, L);
        return;
    }
#endif
    measure_scalar(z, x, q, 0, len, L);
}

static void lanes_out(const struct lanes *L, bool with_q, size_t len, struct dl_audit_measure *out,
                      struct dl_audit_extremes *ext) {
    out->s = lanes_sum(L->s);
    out->a = lanes_sum(L->a);
    double d2 = lanes_sum(L->d);
    out->d = sqrt(d2);
    out->r = with_q ? lanes_sum(L->r) : d2;
    if (ext) {
        ext->lo = len ? (double)L->lo : 0;
        ext->hi = len ? (double)L->hi : 0;
    }
}

void dl_audit_measure_path(bool portable, const int16_t *z, const float *x, const float *q, size_t len,
                           struct dl_audit_measure *out, struct dl_audit_extremes *ext) {
    struct lanes L;
    measure_lanes(portable, z, x, q, len, &L);
    lanes_out(&L, q != NULL, len, out, ext);
}

/* Tiles of 8192 elements (x, q and z: 80 KiB, within L2), each measured for
 * x against q and then for q alone: every lane still takes its elements in
 * index order, so the bits are those of the two separate passes, and the
 * direction and q are read from memory once. */
#define BOTH_TILE_BLOCKS 1024

void dl_audit_measure_both_path(bool portable, const int16_t *z, const float *x, const float *q, size_t len,
                                struct dl_audit_measure *mx, struct dl_audit_measure *mq,
                                struct dl_audit_extremes *eq) {
    struct lanes Lx, Lq;
    lanes_init(&Lx);
    lanes_init(&Lq);
    size_t blocks = len / LANES, done = 0;
#if MEASURE_HAVE_X86
    if (use_avx2(portable)) {
        for (size_t b = 0; b < blocks; b += BOTH_TILE_BLOCKS) {
            size_t nb = blocks - b < BOTH_TILE_BLOCKS ? blocks - b : BOTH_TILE_BLOCKS, at = LANES * b;
            measure_avx2(z + at, x + at, q + at, nb, &Lx);
            measure_avx2(z + at, q + at, NULL, nb, &Lq);
        }
        done = blocks * LANES;
    }
#endif
    measure_scalar(z, x, q, done, len, &Lx);
    measure_scalar(z, q, NULL, done, len, &Lq);
    lanes_out(&Lx, true, len, mx, NULL);
    lanes_out(&Lq, false, len, mq, eq);
}

void dl_audit_measure(const int16_t *z, const float *x, const float *q, size_t len, struct dl_audit_measure *out) {
    dl_audit_measure_path(false, z, x, q, len, out, NULL);
}

void dl_audit_measure_result(const int16_t *z, const float *q, size_t len, struct dl_audit_measure *out,
                             struct dl_audit_extremes *ext) {
    dl_audit_measure_path(false, z, q, NULL, len, out, ext);
}

void dl_audit_measure_both(const int16_t *z, const float *x, const float *q, size_t len, struct dl_audit_measure *mx,
                           struct dl_audit_measure *mq, struct dl_audit_extremes *eq) {
    dl_audit_measure_both_path(false, z, x, q, len, mx, mq, eq);
}
