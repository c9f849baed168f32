/* Wire codecs: fp32 as is, fp16 (round to nearest even, clamped to fp16's
 * range) and 8-bit quantisation with a per-chunk codebook, with their
 * vector paths; the dispatch to int8 (wirecodec_int8.c) and topk
 * (wirecodec_topk.c), and what a round's results use. Values are copied
 * as host bytes, which are the wire's little-endian bytes (guarded below). */
#include "collab/wirecodec.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>

#include "dedloc/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the averaging wire format is little-endian; these codecs copy host floats as is"
#endif

#define UINT8_HEADER (DL_CODEC_UINT8_BINS * sizeof(float))

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define DL_CODEC_HAVE_X86 1
#else
#define DL_CODEC_HAVE_X86 0
#endif

size_t dl_codec_size(enum dl_codec codec, size_t n) {
    switch (codec) {
    case DL_CODEC_NONE: return n > SIZE_MAX / 4 ? 0 : 4 * n;
    case DL_CODEC_FP16: return n > SIZE_MAX / 2 ? 0 : 2 * n;
    case DL_CODEC_UINT8: return n > SIZE_MAX - UINT8_HEADER ? 0 : UINT8_HEADER + n;
    case DL_CODEC_INT8: return dl_codec_int8_size(n);
    case DL_CODEC_TOPK: return dl_codec_topk_size(n);
    default: return 0;
    }
}

/* A size of 0 is a valid answer only for an empty chunk of a known codec. */
static bool size_known(enum dl_codec codec, size_t n, size_t size) {
    return size || (n == 0 && (unsigned)codec < DL_CODEC_COUNT);
}

/* The exponent bits of the smallest float refused: 2^DL_CODEC_MAX_EXPONENT.
 * NaN and Inf (all ones) are above it too, so one compare refuses both. */
#define BOUND_BITS ((uint32_t)(127 + DL_CODEC_MAX_EXPONENT) << 23)

/* |f| < 2^DL_CODEC_MAX_EXPONENT (so finite). */
static inline bool finite_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7f800000u) < BOUND_BITS;
}

int dl_codec_refuse_value(size_t i, size_t n, float v) {
    if (isfinite(v))
        return dl_fail("cannot encode value %zu of %zu: %g is beyond the averaging bound 2^%d (a diverged gradient?)",
                       i, n, (double)v, DL_CODEC_MAX_EXPONENT);
    return dl_fail("cannot encode value %zu of %zu: %s is not a finite number (a diverged gradient?)", i, n,
                   isnan(v) ? "NaN" : "Inf");
}

/* Scalar codecs over [from, n): the vector paths hand a block back here when
 * it holds a value to refuse, so that the error names the same index. */
static int check_finite_scalar(const float *x, size_t from, size_t n) {
    for (size_t i = from; i < n; i++)
        if (!finite_bits(x[i])) return dl_codec_refuse_value(i, n, x[i]);
    return 0;
}

static int check_decoded_scalar(const float *y, size_t from, size_t n) {
    for (size_t i = from; i < n; i++)
        if (!finite_bits(y[i])) return dl_fail("fp32 value %zu of %zu is NaN, Inf or beyond 2^%d", i, n, DL_CODEC_MAX_EXPONENT);
    return 0;
}

static int encode_fp16_scalar(const float *x, size_t from, size_t n, uint8_t *out) {
    for (size_t i = from; i < n; i++) {
        float v = x[i];
        if (!finite_bits(v)) return dl_codec_refuse_value(i, n, v);
        /* Beyond 65504 round-to-nearest gives Inf (from 65520 up): clamp so a
         * large but finite gradient stays finite on the wire. */
        if (v > DL_CODEC_FP16_MAX) v = DL_CODEC_FP16_MAX;
        if (v < -DL_CODEC_FP16_MAX) v = -DL_CODEC_FP16_MAX;
        uint16_t h = dl_f32_to_f16(v);
        memcpy(out + 2 * i, &h, 2);
    }
    return 0;
}

static int decode_fp16_scalar(const uint8_t *in, size_t from, size_t n, float *out) {
    for (size_t i = from; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        if ((h & 0x7c00u) == 0x7c00u) return dl_fail("fp16 value %zu of %zu is NaN or Inf", i, n);
        out[i] = dl_f16_to_f32(h);
    }
    return 0;
}

/* Codebook entries stay inside the decoder's bound: an empty bin's centre
 * (mean +- 6 sigma reaches past the largest input) must not make a chunk of
 * bounded values undecodable. */
static float clamp_to_float(double v) {
    const double largest = ldexp(1.0, DL_CODEC_MAX_EXPONENT) - ldexp(1.0, DL_CODEC_MAX_EXPONENT - 24);
    if (v > largest) return (float)largest;
    if (v < -largest) return (float)-largest;
    return (float)v;
}

/* Bin of each value: pos = (x - lo) / width, clamped to [0, 255], truncated.
 * For finite pos, clamp-then-truncate equals the scalar's two comparisons,
 * which is what lets the vector path compute it lanewise. */
static void uint8_codes_scalar(const float *x, size_t from, size_t n, double lo, double inv_width,
                               uint8_t *codes) {
    for (size_t i = from; i < n; i++) {
        double pos = ((double)x[i] - lo) * inv_width;
        int k = pos <= 0 ? 0 : pos >= DL_CODEC_UINT8_BINS - 1 ? DL_CODEC_UINT8_BINS - 1 : (int)pos;
        codes[i] = (uint8_t)k;
    }
}

static void uint8_decode_scalar(const float *codebook, const uint8_t *codes, size_t from, size_t n, float *out) {
    for (size_t i = from; i < n; i++) out[i] = codebook[codes[i]];
}

/* The sums that place a uint8 chunk's grid (its mean and sigma) run in
 * SUM_LANES lanes: lane l adds the values i = l (mod SUM_LANES) in index
 * order, one rounding per value, and lanes_total joins the lanes in a fixed
 * tree. A vector path keeps each lane in a register lane and hands its
 * lanes over for the tail, so every path gives the same bits, at vector
 * speed (one chain of dependent adds per value ran at a quarter of it). */
#define SUM_LANES 16

/* The moments in one pass, about a shift K (the chunk's first value): per
 * lane the sums of d = x - K and of d * d, each d rounded once to double,
 * and whether every value is within the codecs' bound (the encoder's check
 * rides on this pass; it finds the index only when one is not). One pass,
 * not a mean's pass and then a pass of squares about the mean: the chunk's
 * first read comes from memory, and the squares' work hides under it. */
static bool lane_moments_scalar(const float *x, size_t from, size_t n, double shift, double sums[SUM_LANES],
                                double squares[SUM_LANES]) {
    bool bounded = true;
    for (size_t i = from; i < n; i++) {
        double d = (double)x[i] - shift;
        sums[i % SUM_LANES] += d;
        squares[i % SUM_LANES] += d * d;
        bounded &= finite_bits(x[i]);
    }
    return bounded;
}

static double lanes_total(const double lanes[SUM_LANES]) {
    double t[SUM_LANES];
    memcpy(t, lanes, sizeof t);
    for (int half = SUM_LANES / 2; half >= 1; half /= 2)
        for (int l = 0; l < half; l++) t[l] += t[l + half];
    return t[0];
}

/* Smallest and largest of finite values. Which zero comes out when zeros of
 * both signs meet depends on the order of the compares, but not the bytes:
 * x - lo, the codes and lo + (k + 1/2) width are the same for -0 and +0. */
static void min_max_scalar(const float *x, size_t from, size_t n, float *lo, float *hi) {
    float l = *lo, h = *hi;
    for (size_t i = from; i < n; i++) {
        l = x[i] < l ? x[i] : l;
        h = x[i] > h ? x[i] : h;
    }
    *lo = l;
    *hi = h;
}

/* The reduce's inner loops: acc += weight * value, in double, one rounding
 * for the product and one for the sum (no contraction), per element, so any
 * lane width gives the same bits; and the mean, rounded once to float. */
static void accumulate_f32_scalar(const uint8_t *in, size_t from, size_t n, double weight, double *acc) {
    for (size_t i = from; i < n; i++) {
        float v;
        memcpy(&v, in + 4 * i, 4); /* wire bytes: no alignment promised */
        acc[i] += weight * (double)v;
    }
}

static void accumulate_f16_scalar(const uint8_t *in, size_t from, size_t n, double weight, double *acc) {
    for (size_t i = from; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        acc[i] += weight * (double)dl_f16_to_f32(h);
    }
}

static int check_f32_wire_scalar(const uint8_t *in, size_t from, size_t n) {
    for (size_t i = from; i < n; i++) {
        float v;
        memcpy(&v, in + 4 * i, 4);
        if (!finite_bits(v)) return dl_fail("fp32 value %zu of %zu is NaN, Inf or beyond 2^%d", i, n, DL_CODEC_MAX_EXPONENT);
    }
    return 0;
}

static int check_f16_wire_scalar(const uint8_t *in, size_t from, size_t n) {
    for (size_t i = from; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        if ((h & 0x7c00u) == 0x7c00u) return dl_fail("fp16 value %zu of %zu is NaN or Inf", i, n);
    }
    return 0;
}

static void accumulate_u8_scalar(const float *codebook, const uint8_t *codes, size_t n, double weight, double *acc) {
    for (size_t i = 0; i < n; i++) acc[i] += weight * (double)codebook[codes[i]];
}

static void mean_scalar(const double *acc, size_t from, size_t n, double total, float *out) {
    for (size_t i = from; i < n; i++) out[i] = (float)(acc[i] / total);
}

/* One implementation of the parts that vectorise; everything else (the
 * codebook's per-bin sums) is shared, in index order. */
struct codec_kernels {
    int (*check_finite)(const float *x, size_t n);
    int (*copy_decoded)(const uint8_t *in, size_t n, float *out); /* fp32 in, refused if not finite */
    int (*encode_fp16)(const float *x, size_t n, uint8_t *out);
    int (*decode_fp16)(const uint8_t *in, size_t n, float *out);
    /* codes, and per bin the sum and count of its values in index order */
    void (*uint8_bins)(const float *x, size_t n, double lo, double inv_width, uint8_t *codes, double (*bins)[2]);
    void (*uint8_decode)(const float *codebook, const uint8_t *codes, size_t n, float *out);
    /* sums[], squares[] += per lane (lane_moments_scalar); false if a value is beyond the bound */
    bool (*lane_moments)(const float *x, size_t n, double shift, double sums[SUM_LANES], double squares[SUM_LANES]);
    void (*min_max)(const float *x, size_t n, float *lo, float *hi); /* n > 0, finite */
    /* on input already checked (no NaN/Inf can come out) */
    void (*accumulate_f32)(const uint8_t *in, size_t n, double weight, double *acc);
    void (*accumulate_f16)(const uint8_t *in, size_t n, double weight, double *acc);
    void (*mean)(const double *acc, size_t n, double total, float *out);
    /* refuse as decoding would, writing nothing */
    int (*check_f32_wire)(const uint8_t *in, size_t n);
    int (*check_f16_wire)(const uint8_t *in, size_t n);
};

static int check_finite_all_scalar(const float *x, size_t n) { return check_finite_scalar(x, 0, n); }
static int copy_decoded_all_scalar(const uint8_t *in, size_t n, float *out) {
    if (n) memcpy(out, in, 4 * n);
    return check_decoded_scalar(out, 0, n);
}
static int encode_fp16_all_scalar(const float *x, size_t n, uint8_t *out) { return encode_fp16_scalar(x, 0, n, out); }
static int decode_fp16_all_scalar(const uint8_t *in, size_t n, float *out) { return decode_fp16_scalar(in, 0, n, out); }
static void uint8_bins_scalar(const float *x, size_t from, size_t n, const uint8_t *codes, double (*bins)[2]) {
    for (size_t i = from; i < n; i++) {
        double *b = bins[codes[i]];
        b[0] += x[i];
        b[1] += 1;
    }
}
static void uint8_bins_all_scalar(const float *x, size_t n, double lo, double inv_width, uint8_t *codes,
                                  double (*bins)[2]) {
    uint8_codes_scalar(x, 0, n, lo, inv_width, codes);
    uint8_bins_scalar(x, 0, n, codes, bins);
}
static void uint8_decode_all_scalar(const float *codebook, const uint8_t *codes, size_t n, float *out) {
    uint8_decode_scalar(codebook, codes, 0, n, out);
}

static bool lane_moments_all_scalar(const float *x, size_t n, double shift, double sums[SUM_LANES],
                                    double squares[SUM_LANES]) {
    return lane_moments_scalar(x, 0, n, shift, sums, squares);
}
static void min_max_all_scalar(const float *x, size_t n, float *lo, float *hi) {
    *lo = *hi = x[0];
    min_max_scalar(x, 1, n, lo, hi);
}

static void accumulate_f32_all_scalar(const uint8_t *in, size_t n, double weight, double *acc) {
    accumulate_f32_scalar(in, 0, n, weight, acc);
}
static void accumulate_f16_all_scalar(const uint8_t *in, size_t n, double weight, double *acc) {
    accumulate_f16_scalar(in, 0, n, weight, acc);
}
static void mean_all_scalar(const double *acc, size_t n, double total, float *out) {
    mean_scalar(acc, 0, n, total, out);
}

static int check_f32_wire_all_scalar(const uint8_t *in, size_t n) { return check_f32_wire_scalar(in, 0, n); }
static int check_f16_wire_all_scalar(const uint8_t *in, size_t n) { return check_f16_wire_scalar(in, 0, n); }

static const struct codec_kernels scalar_kernels = {
    check_finite_all_scalar,   copy_decoded_all_scalar,   encode_fp16_all_scalar, decode_fp16_all_scalar,
    uint8_bins_all_scalar,     uint8_decode_all_scalar,   lane_moments_all_scalar,
    min_max_all_scalar,        accumulate_f32_all_scalar,
    accumulate_f16_all_scalar, mean_all_scalar,           check_f32_wire_all_scalar, check_f16_wire_all_scalar};

#if DL_CODEC_HAVE_X86
#include <cpuid.h>
#include <immintrin.h>

/* AVX2 + F16C, compiled for those instructions only here (target
 * attributes), called only where cpuid reports them: the binary still runs
 * on any x86-64. Unaligned loads throughout: chunks start anywhere in a
 * message. */
#define AVX2_TARGET __attribute__((target("avx2,f16c")))

/* Lanes that finite_bits refuses (NaN, Inf or beyond the bound), as a bit
 * mask: the masked exponents are non-negative, so a signed compare works. */
AVX2_TARGET static inline int nonfinite_mask8(__m256 v) {
    const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
    const __m256i last_ok = _mm256_set1_epi32((int)(BOUND_BITS - 1));
    __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp_mask);
    return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(e, last_ok)));
}

AVX2_TARGET static int check_finite_avx2(const float *x, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        int bad = nonfinite_mask8(_mm256_loadu_ps(x + i)) | nonfinite_mask8(_mm256_loadu_ps(x + i + 8)) |
                  nonfinite_mask8(_mm256_loadu_ps(x + i + 16)) | nonfinite_mask8(_mm256_loadu_ps(x + i + 24));
        if (bad) break;
    }
    return check_finite_scalar(x, i, n);
}

AVX2_TARGET static int copy_decoded_avx2(const uint8_t *in, size_t n, float *out) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps((const float *)(const void *)(in + 4 * i));
        if (nonfinite_mask8(v)) break;
        _mm256_storeu_ps(out + i, v);
    }
    if (i < n) memcpy(out + i, in + 4 * i, 4 * (n - i));
    return check_decoded_scalar(out, i, n);
}

AVX2_TARGET static int encode_fp16_avx2(const float *x, size_t n, uint8_t *out) {
    /* max then min, as the scalar compares: -0 stays -0 (max(-0, -65504) is
     * -0), and F16C rounds to nearest even with subnormals kept, as
     * dl_f32_to_f16 does; fp32 subnormals become a signed zero in both. */
    const __m256 hi = _mm256_set1_ps(DL_CODEC_FP16_MAX), lo = _mm256_set1_ps(-DL_CODEC_FP16_MAX);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        if (nonfinite_mask8(a) | nonfinite_mask8(b)) break;
        a = _mm256_min_ps(_mm256_max_ps(a, lo), hi);
        b = _mm256_min_ps(_mm256_max_ps(b, lo), hi);
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i + 16), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
    }
    return encode_fp16_scalar(x, i, n, out);
}

AVX2_TARGET static int decode_fp16_avx2(const uint8_t *in, size_t n, float *out) {
    const __m128i exp_mask = _mm_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i + 16));
        __m128i bad = _mm_or_si128(_mm_cmpeq_epi16(_mm_and_si128(a, exp_mask), exp_mask),
                                   _mm_cmpeq_epi16(_mm_and_si128(b, exp_mask), exp_mask));
        if (_mm_movemask_epi8(bad)) break;
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(b));
    }
    return decode_fp16_scalar(in, i, n, out);
}

/* One bin's (sum, count) += (value, 1): a 128-bit add, the scalar's two
 * additions in the same order. */
AVX2_TARGET static inline void add_to_bin(char *bins, uint64_t byte_offset, __m128d value_one) {
    double *b = (double *)(void *)(bins + byte_offset);
    _mm_storeu_pd(b, _mm_add_pd(_mm_loadu_pd(b), value_one));
}

/* Adds four widened values to their bins; c holds their codes in its low
 * four bytes (bin k's pair starts at byte 16 k). */
AVX2_TARGET static inline void add_four_to_bins(char *bins, uint64_t c, __m256d v, __m256d one) {
    __m256d even = _mm256_unpacklo_pd(v, one), odd = _mm256_unpackhi_pd(v, one); /* v0 1 v2 1, v1 1 v3 1 */
    add_to_bin(bins, (c & 0xff) << 4, _mm256_castpd256_pd128(even));
    add_to_bin(bins, (c >> 4) & 0xff0, _mm256_castpd256_pd128(odd));
    add_to_bin(bins, (c >> 12) & 0xff0, _mm256_extractf128_pd(even, 1));
    add_to_bin(bins, (c >> 20) & 0xff0, _mm256_extractf128_pd(odd, 1));
}

/* The bins, eight values a turn: the codes read as one word, the values
 * widened four at a time and paired with their count in registers. Each
 * bin still takes its values in index order, so the sums are the scalar's
 * bits; 0.41 ns a value where the scalar loop takes 0.57 (one load of a
 * code, a value and a bin per value was what bound it). */
AVX2_TARGET static inline void add_eight_to_bins(char *bins, const float *x, const uint8_t *codes, __m256d one) {
    uint64_t c;
    memcpy(&c, codes, 8);
    __m256 v = _mm256_loadu_ps(x);
    add_four_to_bins(bins, c, _mm256_cvtps_pd(_mm256_castps256_ps128(v)), one);
    add_four_to_bins(bins, c >> 32, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), one);
}

AVX2_TARGET static void uint8_scatter_avx2(const float *x, size_t n, const uint8_t *codes, double (*bins)[2]) {
    const __m256d one = _mm256_set1_pd(1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) add_eight_to_bins((char *)bins, x + i, codes + i, one);
    uint8_bins_scalar(x, i, n, codes, bins);
}

/* The constants of the fp32 codes below, or false where the argument
 * does not hold (the caller keeps the fp64 loop). */
struct codes_f32 {
    float lo, inv_width, near; /* near: E rounded up to fp32 */
};
static bool codes_f32_setup(double lo, double inv_width, struct codes_f32 *c) {
    const double big = ldexp(1.0, 64);
    if (!(inv_width > 0 && inv_width <= big && fabs(lo) <= big)) return false;
    double e = ldexp(257 + inv_width * fabs(lo), -21) + ldexp(1.0, -60);
    if (!(e < 1.0 / 16)) return false;
    float ef = (float)e;
    if ((double)ef < e) ef = nextafterf(ef, INFINITY);
    *c = (struct codes_f32){(float)lo, (float)inv_width, ef};
    return true;
}

/* The lanes of `near` (bit l: value i + l) lie too near a bin edge for
 * fp32 to tell: the scalar formula codes them. */
static void codes_near_scalar(const float *x, size_t i, uint32_t near, double lo, double inv_width, uint8_t *codes) {
    while (near) {
        size_t l = i + (size_t)__builtin_ctz(near);
        near &= near - 1;
        uint8_codes_scalar(x, l, l + 1, lo, inv_width, codes);
    }
}

/* The codes in fp32, sixteen a turn, where that gives the scalar's codes.
 *
 * The scalar truncates pd = ((double)x - lo) * inv_width. In fp32, with
 * lo and inv_width rounded to fp32, pf = (x - lo) * inv_width is three
 * roundings (u = 2^-24 each) and one rounded operand away from the exact
 * P = (x - lo) inv_width:
 *
 *     |pf - P| <= 3.1 u |P| + 1.01 u inv_width |lo| (+ 2^-86 for subnormals)
 *
 * and pd is within 2^-51 |P| of it. On [-1/2, 255 + 1/2] (|P| < 257) both
 * are within E = 2^-21 (257 + inv_width |lo|) + 2^-60 of P, so where pf
 * lies at least E from every integer, P, pf and pd share one unit
 * interval and truncate alike (on [-1/2, 0) to 0, as the scalar's pd <= 0
 * does). Lanes above it clamp to 255 + 1/2 and their codes to 255, which
 * pd gives too, since E < 1/16 cannot carry P across half a bin. Lanes
 * below it are not clamped (two instructions fewer a turn, 2% of the
 * encoder): they truncate to 0 or a negative integer, which the unsigned
 * packs saturate to 0, and pd, within 2E < 1/8 of them, is below 1 and
 * codes 0 too. (One that happens to lie near an integer goes to the
 * scalar formula below like any other: needlessly, rightly.) A lane nearer an integer than E (about 2E of them: a few dozen in
 * a chunk of 131,072 gradient values) is coded by the scalar formula.
 * The distance pc - rint(pc) is exact in fp32. Where E would be 1/16 or
 * more (too many lanes to hand over), or lo or inv_width beyond 2^64 (fp32
 * products could overflow: subnormal chunks), the caller keeps the fp64
 * loop (codes_f32_setup). 0.17 ns a value against 0.27 in fp64.
 * This codes the 16 values from x[i]. */
AVX2_TARGET static inline void uint8_codes16_avx2(const float *x, size_t i, const struct codes_f32 *c, double lo,
                                                  double inv_width, uint8_t *codes) {
    const __m256 vlo = _mm256_set1_ps(c->lo), vinv = _mm256_set1_ps(c->inv_width);
    const __m256 high = _mm256_set1_ps(DL_CODEC_UINT8_BINS - 0.5f);
    const __m256 ve = _mm256_set1_ps(c->near), magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 p0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vlo), vinv);
    __m256 p1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vlo), vinv);
    p0 = _mm256_min_ps(p0, high);
    p1 = _mm256_min_ps(p1, high);
#define NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* an immediate: clang wants a constant */
    __m256 d0 = _mm256_and_ps(_mm256_sub_ps(p0, _mm256_round_ps(p0, NEAREST)), magnitude);
    __m256 d1 = _mm256_and_ps(_mm256_sub_ps(p1, _mm256_round_ps(p1, NEAREST)), magnitude);
#undef NEAREST
    /* packus works within 128-bit halves: lanes 0-3 8-11 4-7 12-15, put back in order */
    __m256i k16 = _mm256_packus_epi32(_mm256_cvttps_epi32(p0), _mm256_cvttps_epi32(p1));
    __m128i k8 = _mm_packus_epi16(_mm256_castsi256_si128(k16), _mm256_extracti128_si256(k16, 1));
    _mm_storeu_si128((__m128i *)(void *)(codes + i), _mm_shuffle_epi32(k8, _MM_SHUFFLE(3, 1, 2, 0)));
    uint32_t near = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(d0, ve, _CMP_LT_OQ)) |
                    (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(d1, ve, _CMP_LT_OQ)) << 8;
    codes_near_scalar(x, i, near, lo, inv_width, codes);
}

/* Codes and bins in one pass, the codes 32 values ahead of the bins: the
 * bins' read-modify-writes (about 1.4 cycles a value on Zen 4, whatever
 * their width) leave the vector units idle, and the codes fill them, with
 * their addresses ready well before the bins need them. (Adding each value
 * to its bin straight from the vector of codes measured slower: the bins'
 * addresses then wait on the conversions.) Each bin takes its values in
 * index order: the scalar's bits. Where the fp32 codes' argument does not
 * hold, the fp64 codes in a pass of their own. */
AVX2_TARGET static void uint8_bins_avx2(const float *x, size_t n, double lo, double inv_width, uint8_t *codes,
                                        double (*bins)[2]) {
    const __m256d one = _mm256_set1_pd(1);
    struct codes_f32 c;
    if (n >= 32 && codes_f32_setup(lo, inv_width, &c)) {
        uint8_codes16_avx2(x, 0, &c, lo, inv_width, codes);
        uint8_codes16_avx2(x, 16, &c, lo, inv_width, codes);
        size_t i = 0;
        for (; i + 64 <= n; i += 32) {
            uint8_codes16_avx2(x, i + 32, &c, lo, inv_width, codes);
            uint8_codes16_avx2(x, i + 48, &c, lo, inv_width, codes);
            for (size_t j = 0; j < 32; j += 8) add_eight_to_bins((char *)bins, x + i + j, codes + i + j, one);
        }
        uint8_codes_scalar(x, i + 32, n, lo, inv_width, codes);
        uint8_bins_scalar(x, i, n, codes, bins);
        return;
    }
    const __m256d vlo = _mm256_set1_pd(lo), vinv = _mm256_set1_pd(inv_width);
    const __m256d zero = _mm256_setzero_pd(), top = _mm256_set1_pd(DL_CODEC_UINT8_BINS - 1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        /* the same two roundings as the scalar: the difference, the product */
        __m256d p0 = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vlo), vinv);
        __m256d p1 = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vlo), vinv);
        p0 = _mm256_min_pd(_mm256_max_pd(p0, zero), top);
        p1 = _mm256_min_pd(_mm256_max_pd(p1, zero), top);
        __m128i k0 = _mm256_cvttpd_epi32(p0), k1 = _mm256_cvttpd_epi32(p1);
        __m128i k16 = _mm_packus_epi32(k0, k1);
        __m128i k8 = _mm_packus_epi16(k16, k16);
        _mm_storel_epi64((__m128i *)(void *)(codes + i), k8);
    }
    uint8_codes_scalar(x, i, n, lo, inv_width, codes);
    uint8_scatter_avx2(x, n, codes, bins);
}

/* d = x - K into one lane's sum and sum of squares: the scalar's
 * roundings (the difference, the square, the two additions). */
AVX2_TARGET static inline void moment_lane(__m256d *sum, __m256d *square, __m128 v, __m256d shift) {
    __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(v), shift);
    *sum = _mm256_add_pd(*sum, d);
    *square = _mm256_add_pd(*square, _mm256_mul_pd(d, d));
}

/* Four registers of each kind hold lanes 0-3, 4-7, 8-11 and 12-15;
 * sixteen values a turn, each added to its own lane, as
 * lane_moments_scalar adds them. */
AVX2_TARGET static bool lane_moments_avx2(const float *x, size_t n, double shift, double sums[SUM_LANES],
                                          double squares[SUM_LANES]) {
    const __m256d k = _mm256_set1_pd(shift);
    __m256d a0 = _mm256_loadu_pd(sums), a1 = _mm256_loadu_pd(sums + 4);
    __m256d a2 = _mm256_loadu_pd(sums + 8), a3 = _mm256_loadu_pd(sums + 12);
    __m256d q0 = _mm256_loadu_pd(squares), q1 = _mm256_loadu_pd(squares + 4);
    __m256d q2 = _mm256_loadu_pd(squares + 8), q3 = _mm256_loadu_pd(squares + 12);
    /* the largest exponent field seen (masked, so non-negative: a signed max works) */
    const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
    __m256i top = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        moment_lane(&a0, &q0, _mm256_castps256_ps128(v0), k);
        moment_lane(&a1, &q1, _mm256_extractf128_ps(v0, 1), k);
        moment_lane(&a2, &q2, _mm256_castps256_ps128(v1), k);
        moment_lane(&a3, &q3, _mm256_extractf128_ps(v1, 1), k);
        top = _mm256_max_epi32(top, _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(v0), exp_mask),
                                                     _mm256_and_si256(_mm256_castps_si256(v1), exp_mask)));
    }
    _mm256_storeu_pd(sums, a0);
    _mm256_storeu_pd(sums + 4, a1);
    _mm256_storeu_pd(sums + 8, a2);
    _mm256_storeu_pd(sums + 12, a3);
    _mm256_storeu_pd(squares, q0);
    _mm256_storeu_pd(squares + 4, q1);
    _mm256_storeu_pd(squares + 8, q2);
    _mm256_storeu_pd(squares + 12, q3);
    bool bounded = !_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32((int)(BOUND_BITS - 1)))));
    return lane_moments_scalar(x, i, n, shift, sums, squares) && bounded;
}

/* min and max are exact, so lanes may meet in any order (for zeros, see
 * min_max_scalar). */
AVX2_TARGET static void min_max_avx2(const float *x, size_t n, float *lo, float *hi) {
    *lo = *hi = x[0];
    size_t i = 0;
    if (n >= 16) {
        __m256 l0 = _mm256_loadu_ps(x), l1 = _mm256_loadu_ps(x + 8), h0 = l0, h1 = l1;
        for (i = 16; i + 16 <= n; i += 16) {
            __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
            l0 = _mm256_min_ps(l0, v0);
            l1 = _mm256_min_ps(l1, v1);
            h0 = _mm256_max_ps(h0, v0);
            h1 = _mm256_max_ps(h1, v1);
        }
        float l[16], h[16];
        _mm256_storeu_ps(l, l0);
        _mm256_storeu_ps(l + 8, l1);
        _mm256_storeu_ps(h, h0);
        _mm256_storeu_ps(h + 8, h1);
        min_max_scalar(l, 0, 16, lo, hi);
        min_max_scalar(h, 0, 16, lo, hi);
    }
    min_max_scalar(x, i ? i : 1, n, lo, hi);
}

/* Four lanes of acc += weight * value: a multiply then an add, as the
 * scalar (this target has no FMA, and -ffp-contract=off forbids it). */
AVX2_TARGET static inline void accumulate4(double *acc, __m256d w, __m128 v) {
    __m256d a = _mm256_loadu_pd(acc);
    _mm256_storeu_pd(acc, _mm256_add_pd(a, _mm256_mul_pd(w, _mm256_cvtps_pd(v))));
}

AVX2_TARGET static void accumulate_f32_avx2(const uint8_t *in, size_t n, double weight, double *acc) {
    const __m256d w = _mm256_set1_pd(weight);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps((const float *)(const void *)(in + 4 * i));
        accumulate4(acc + i, w, _mm256_castps256_ps128(v));
        accumulate4(acc + i + 4, w, _mm256_extractf128_ps(v, 1));
    }
    accumulate_f32_scalar(in, i, n, weight, acc);
}

AVX2_TARGET static void accumulate_f16_avx2(const uint8_t *in, size_t n, double weight, double *acc) {
    const __m256d w = _mm256_set1_pd(weight);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i)));
        accumulate4(acc + i, w, _mm256_castps256_ps128(v));
        accumulate4(acc + i + 4, w, _mm256_extractf128_ps(v, 1));
    }
    accumulate_f16_scalar(in, i, n, weight, acc);
}

AVX2_TARGET static void mean_avx2(const double *acc, size_t n, double total, float *out) {
    /* a true division, as the scalar: a multiply by 1/total would round twice */
    const __m256d t = _mm256_set1_pd(total);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128 lo = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_loadu_pd(acc + i), t));
        __m128 hi = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_loadu_pd(acc + i + 4), t));
        _mm256_storeu_ps(out + i, _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1));
    }
    mean_scalar(acc, i, n, total, out);
}

AVX2_TARGET static int check_f32_wire_avx2(const uint8_t *in, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const float *x = (const float *)(const void *)(in + 4 * i);
        int bad = nonfinite_mask8(_mm256_loadu_ps(x)) | nonfinite_mask8(_mm256_loadu_ps(x + 8)) |
                  nonfinite_mask8(_mm256_loadu_ps(x + 16)) | nonfinite_mask8(_mm256_loadu_ps(x + 24));
        if (bad) break;
    }
    return check_f32_wire_scalar(in, i, n);
}

AVX2_TARGET static int check_f16_wire_avx2(const uint8_t *in, size_t n) {
    const __m256i exp_mask = _mm256_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(in + 2 * i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(in + 2 * i + 32));
        __m256i bad = _mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(a, exp_mask), exp_mask),
                                      _mm256_cmpeq_epi16(_mm256_and_si256(b, exp_mask), exp_mask));
        if (_mm256_movemask_epi8(bad)) break;
    }
    return check_f16_wire_scalar(in, i, n);
}

/* uint8 decoding stays a scalar table lookup: an AVX2 gather of eight
 * codebook entries measured 4x slower here than eight plain loads. */
static const struct codec_kernels avx2_kernels = {
    check_finite_avx2,   copy_decoded_avx2,       encode_fp16_avx2,    decode_fp16_avx2, uint8_bins_avx2,
    uint8_decode_all_scalar, lane_moments_avx2, min_max_avx2, accumulate_f32_avx2, accumulate_f16_avx2, mean_avx2, check_f32_wire_avx2,
    check_f16_wire_avx2};
#endif

#if DL_CODEC_HAVE_X86
/* AVX-512 F and BW (BW for the 16-bit compares of fp16 checks), the same
 * operations as the AVX2 path on twice the lanes, so the same bytes; the
 * uint8 bins keep AVX2's 128-bit adds (one per value: the bins' bound). */
#define AVX512_TARGET __attribute__((target("avx2,f16c,avx512f,avx512bw")))

AVX512_TARGET static inline __mmask16 nonfinite_mask16(__m512 v) {
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
    const __m512i last_ok = _mm512_set1_epi32((int)(BOUND_BITS - 1));
    return _mm512_cmpgt_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exp_mask), last_ok);
}

/* 32 fp16 values whose exponent is all ones (Inf or NaN), as a mask. */
AVX512_TARGET static inline __mmask32 f16_special_mask32(__m512i h) {
    const __m512i exp_mask = _mm512_set1_epi16(0x7c00);
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, exp_mask), exp_mask);
}

AVX512_TARGET static int check_finite_avx512(const float *x, size_t n) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __mmask16 bad = nonfinite_mask16(_mm512_loadu_ps(x + i)) | nonfinite_mask16(_mm512_loadu_ps(x + i + 16)) |
                        nonfinite_mask16(_mm512_loadu_ps(x + i + 32)) | nonfinite_mask16(_mm512_loadu_ps(x + i + 48));
        if (bad) break;
    }
    return check_finite_scalar(x, i, n);
}

AVX512_TARGET static int copy_decoded_avx512(const uint8_t *in, size_t n, float *out) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps((const float *)(const void *)(in + 4 * i));
        if (nonfinite_mask16(v)) break;
        _mm512_storeu_ps(out + i, v);
    }
    if (i < n) memcpy(out + i, in + 4 * i, 4 * (n - i));
    return check_decoded_scalar(out, i, n);
}

AVX512_TARGET static int encode_fp16_avx512(const float *x, size_t n, uint8_t *out) {
    /* as encode_fp16_avx2: max then min, round to nearest even */
    const __m512 hi = _mm512_set1_ps(DL_CODEC_FP16_MAX), lo = _mm512_set1_ps(-DL_CODEC_FP16_MAX);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        if (nonfinite_mask16(a) | nonfinite_mask16(b)) break;
        a = _mm512_min_ps(_mm512_max_ps(a, lo), hi);
        b = _mm512_min_ps(_mm512_max_ps(b, lo), hi);
        _mm256_storeu_si256((__m256i *)(void *)(out + 2 * i), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_si256((__m256i *)(void *)(out + 2 * i + 32), _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT));
    }
    return encode_fp16_scalar(x, i, n, out);
}

AVX512_TARGET static int decode_fp16_avx512(const uint8_t *in, size_t n, float *out) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i h = _mm512_loadu_si512((const void *)(in + 2 * i));
        if (f16_special_mask32(h)) break;
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm512_castsi512_si256(h)));
        _mm512_storeu_ps(out + i + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)));
    }
    return decode_fp16_scalar(in, i, n, out);
}

/* Eight lanes of acc += weight * value: a multiply then an add, as the
 * scalar (-ffp-contract=off keeps them apart). */
AVX512_TARGET static inline void accumulate8(double *acc, __m512d w, __m256 v) {
    __m512d a = _mm512_loadu_pd(acc);
    _mm512_storeu_pd(acc, _mm512_add_pd(a, _mm512_mul_pd(w, _mm512_cvtps_pd(v))));
}

AVX512_TARGET static void accumulate_f32_avx512(const uint8_t *in, size_t n, double weight, double *acc) {
    const __m512d w = _mm512_set1_pd(weight);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const float *x = (const float *)(const void *)(in + 4 * i);
        accumulate8(acc + i, w, _mm256_loadu_ps(x));
        accumulate8(acc + i + 8, w, _mm256_loadu_ps(x + 8));
    }
    accumulate_f32_scalar(in, i, n, weight, acc);
}

AVX512_TARGET static void accumulate_f16_avx512(const uint8_t *in, size_t n, double weight, double *acc) {
    const __m512d w = _mm512_set1_pd(weight);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(in + 2 * i)));
        accumulate8(acc + i, w, _mm512_castps512_ps256(v));
        accumulate8(acc + i + 8, w, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    }
    accumulate_f16_scalar(in, i, n, weight, acc);
}

AVX512_TARGET static void mean_avx512(const double *acc, size_t n, double total, float *out) {
    /* a true division, as the scalar */
    const __m512d t = _mm512_set1_pd(total);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(_mm512_div_pd(_mm512_loadu_pd(acc + i), t)));
        _mm256_storeu_ps(out + i + 8, _mm512_cvtpd_ps(_mm512_div_pd(_mm512_loadu_pd(acc + i + 8), t)));
    }
    mean_scalar(acc, i, n, total, out);
}

AVX512_TARGET static int check_f32_wire_avx512(const uint8_t *in, size_t n) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const float *x = (const float *)(const void *)(in + 4 * i);
        __mmask16 bad = nonfinite_mask16(_mm512_loadu_ps(x)) | nonfinite_mask16(_mm512_loadu_ps(x + 16)) |
                        nonfinite_mask16(_mm512_loadu_ps(x + 32)) | nonfinite_mask16(_mm512_loadu_ps(x + 48));
        if (bad) break;
    }
    return check_f32_wire_scalar(in, i, n);
}

AVX512_TARGET static int check_f16_wire_avx512(const uint8_t *in, size_t n) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __mmask32 bad = f16_special_mask32(_mm512_loadu_si512((const void *)(in + 2 * i))) |
                        f16_special_mask32(_mm512_loadu_si512((const void *)(in + 2 * i + 64)));
        if (bad) break;
    }
    return check_f16_wire_scalar(in, i, n);
}

/* lane_moments_avx2 on two registers of eight lanes each (0-7, 8-15),
 * sixteen values a turn: each lane takes its values in index order with
 * the scalar's roundings, so the same bits. Zen 4 issues a 512-bit
 * operation as two 256-bit halves, yet the pass runs faster than AVX2's:
 * what bound it was the count of operations (conversions, extractions)
 * issued per value, which this halves. */
AVX512_TARGET static bool lane_moments_avx512(const float *x, size_t n, double shift, double sums[SUM_LANES],
                                            double squares[SUM_LANES]) {
    const __m512d k = _mm512_set1_pd(shift);
    __m512d a0 = _mm512_loadu_pd(sums), a1 = _mm512_loadu_pd(sums + 8);
    __m512d q0 = _mm512_loadu_pd(squares), q1 = _mm512_loadu_pd(squares + 8);
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
    __m512i top = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        __m512d d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), k);
        __m512d d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8)), k);
        a0 = _mm512_add_pd(a0, d0);
        a1 = _mm512_add_pd(a1, d1);
        q0 = _mm512_add_pd(q0, _mm512_mul_pd(d0, d0));
        q1 = _mm512_add_pd(q1, _mm512_mul_pd(d1, d1));
        __m512 v = _mm512_loadu_ps(x + i);
        top = _mm512_max_epi32(top, _mm512_and_si512(_mm512_castps_si512(v), exp_mask));
    }
    _mm512_storeu_pd(sums, a0);
    _mm512_storeu_pd(sums + 8, a1);
    _mm512_storeu_pd(squares, q0);
    _mm512_storeu_pd(squares + 8, q1);
    bool bounded = !_mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32((int)(BOUND_BITS - 1)));
    return lane_moments_scalar(x, i, n, shift, sums, squares) && bounded;
}

/* uint8_codes16_avx2 on 32 values from x[i], sixteen lanes a register,
 * with the same bound E and the same hand-over of lanes near an integer
 * (the argument there holds lanewise). Negative truncations are raised to
 * 0 and the rest narrowed with unsigned saturation, which is what AVX2's
 * two packs do. */
AVX512_TARGET static inline void uint8_codes32_avx512(const float *x, size_t i, const struct codes_f32 *c, double lo,
                                                      double inv_width, uint8_t *codes) {
    const __m512 vlo = _mm512_set1_ps(c->lo), vinv = _mm512_set1_ps(c->inv_width);
    const __m512 high = _mm512_set1_ps(DL_CODEC_UINT8_BINS - 0.5f), ve = _mm512_set1_ps(c->near);
    const __m512i zero = _mm512_setzero_si512();
    __m512 p0 = _mm512_min_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vlo), vinv), high);
    __m512 p1 = _mm512_min_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vlo), vinv), high);
#define NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    __m512 d0 = _mm512_abs_ps(_mm512_sub_ps(p0, _mm512_roundscale_ps(p0, NEAREST)));
    __m512 d1 = _mm512_abs_ps(_mm512_sub_ps(p1, _mm512_roundscale_ps(p1, NEAREST)));
#undef NEAREST
    __m512i k0 = _mm512_max_epi32(_mm512_cvttps_epi32(p0), zero);
    __m512i k1 = _mm512_max_epi32(_mm512_cvttps_epi32(p1), zero);
    _mm_storeu_si128((__m128i *)(void *)(codes + i), _mm512_cvtusepi32_epi8(k0));
    _mm_storeu_si128((__m128i *)(void *)(codes + i + 16), _mm512_cvtusepi32_epi8(k1));
    uint32_t near = (uint32_t)_mm512_cmp_ps_mask(d0, ve, _CMP_LT_OQ) |
                    (uint32_t)_mm512_cmp_ps_mask(d1, ve, _CMP_LT_OQ) << 16;
    codes_near_scalar(x, i, near, lo, inv_width, codes);
}

/* Codes and bins in one pass, the codes 32 values ahead of the bins: the
 * bins' read-modify-writes (about 1.4 cycles a value on Zen 4, whatever
 * their width) leave the vector units idle, and the codes fill them, with
 * their addresses ready well before the bins need them; as in
 * uint8_bins_avx2, each bin takes its values in index order. */
AVX512_TARGET static void uint8_bins_avx512(const float *x, size_t n, double lo, double inv_width, uint8_t *codes,
                                            double (*bins)[2]) {
    struct codes_f32 c;
    if (n < 32 || !codes_f32_setup(lo, inv_width, &c)) {
        uint8_bins_avx2(x, n, lo, inv_width, codes, bins);
        return;
    }
    const __m256d one = _mm256_set1_pd(1);
    uint8_codes32_avx512(x, 0, &c, lo, inv_width, codes);
    size_t i = 0;
    for (; i + 64 <= n; i += 32) {
        uint8_codes32_avx512(x, i + 32, &c, lo, inv_width, codes);
        for (size_t j = 0; j < 32; j += 8) add_eight_to_bins((char *)bins, x + i + j, codes + i + j, one);
    }
    uint8_codes_scalar(x, i + 32, n, lo, inv_width, codes);
    uint8_bins_scalar(x, i, n, codes, bins);
}

static const struct codec_kernels avx512_kernels = {
    check_finite_avx512,     copy_decoded_avx512,   encode_fp16_avx512,    decode_fp16_avx512, uint8_bins_avx512,
    uint8_decode_all_scalar, lane_moments_avx512, min_max_avx2, accumulate_f32_avx512, accumulate_f16_avx512, mean_avx512,        check_f32_wire_avx512,
    check_f16_wire_avx512};
#endif

#if DL_CODEC_HAVE_X86
/* cpuid itself rather than __builtin_cpu_supports("f16c"), which not every
 * compiler knows: AVX and F16C (leaf 1), AVX2 (leaf 7), and the OS saving
 * the YMM registers (OSXSAVE, then XCR0 bits 1 and 2). */
static bool cpu_has_avx2_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return false;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 6u) != 6u) return false;
    if (__get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 5)) != 0;
}

/* Besides AVX2 and F16C: AVX512F and AVX512BW (leaf 7, EBX bits 16 and 30)
 * and the OS saving the opmask and ZMM registers (XCR0 bits 5 to 7). */
static bool cpu_has_avx512(void) {
    if (!cpu_has_avx2_f16c()) return false;
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0xe6u) != 0xe6u) return false;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned f = 1u << 16, bw = 1u << 30;
    return (b & (f | bw)) == (f | bw);
}
#endif

const char *dl_codec_path_name(enum dl_codec_path path) {
    switch (path) {
    case DL_CODEC_PATH_SCALAR: return "scalar";
    case DL_CODEC_PATH_AVX2: return "avx2";
    case DL_CODEC_PATH_AVX512: return "avx512";
    default: return "unknown";
    }
}

static bool path_available_uncached(enum dl_codec_path path) {
    switch (path) {
    case DL_CODEC_PATH_SCALAR: return true;
#if DL_CODEC_HAVE_X86
    case DL_CODEC_PATH_AVX2: return cpu_has_avx2_f16c();
    case DL_CODEC_PATH_AVX512: return cpu_has_avx512();
#endif
    default: return false;
    }
}

/* Asked before every chunk is encoded or decoded: cpuid once per path, as
 * in a virtual machine each cpuid traps to the hypervisor (it showed as
 * 1.6% of an 8-member round's CPU time). 0 unknown, 1 no, 2 yes. */
bool dl_codec_path_available(enum dl_codec_path path) {
    static int known[DL_CODEC_PATH_COUNT];
    if ((unsigned)path >= DL_CODEC_PATH_COUNT) return false;
    int k = __atomic_load_n(&known[path], __ATOMIC_RELAXED);
    if (!k) {
        k = path_available_uncached(path) ? 2 : 1;
        __atomic_store_n(&known[path], k, __ATOMIC_RELAXED);
    }
    return k == 2;
}

#if DL_CODEC_HAVE_X86
static bool cpu_is_amd(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "Auth" "enti" "cAMD" */
}
#endif

/* AVX-512 where it is at least as fast as AVX2 everywhere: on AMD (Zen 4
 * and later run 512-bit operations as two 256-bit halves, at full clock).
 * There it encodes uint8 faster (its moments and codes issue half the
 * operations; bench/RESULTS.md) and is within noise of AVX2 on the rest.
 * Intel's server cores before Ice Lake lower their clock for 512-bit
 * arithmetic, for every thread of the core, so AVX2 stays their default.
 * (Callers cache the answer: best_path_cached.) */
enum dl_codec_path dl_codec_best_path(void) {
#if DL_CODEC_HAVE_X86
    if (dl_codec_path_available(DL_CODEC_PATH_AVX512) && cpu_is_amd()) return DL_CODEC_PATH_AVX512;
#endif
    return dl_codec_path_available(DL_CODEC_PATH_AVX2) ? DL_CODEC_PATH_AVX2 : DL_CODEC_PATH_SCALAR;
}

static const struct codec_kernels *kernels_of(enum dl_codec_path path) {
#if DL_CODEC_HAVE_X86
    if (path == DL_CODEC_PATH_AVX2) return &avx2_kernels;
    if (path == DL_CODEC_PATH_AVX512) return &avx512_kernels;
#endif
    (void)path;
    return &scalar_kernels;
}

/* Codes and codebook of a uint8 chunk over the grid lo + k width (values
 * outside go to the end bins). Each bin's sum and count run in index order
 * as one pair of doubles, which the compiler may add as one 128-bit vector:
 * the same two additions, the same bits. */
static void uint8_fill(const struct codec_kernels *kern, const float *x, size_t n, double lo, double width,
                       uint8_t *out) {
    /* width = 0: every value is the same, one bin holds them all. */
    double inv_width = width > 0 ? 1 / width : 0;
    double bins[DL_CODEC_UINT8_BINS][2];
    memset(bins, 0, sizeof bins);
    kern->uint8_bins(x, n, lo, inv_width, out + UINT8_HEADER, bins);
    for (int k = 0; k < DL_CODEC_UINT8_BINS; k++) {
        double v = bins[k][1] > 0 ? bins[k][0] / bins[k][1] : lo + (k + 0.5) * width;
        float f = clamp_to_float(v);
        memcpy(out + 4 * (size_t)k, &f, 4);
    }
}

/* mean and sigma in lanes (SUM_LANES): the same bits on every path. The
 * bound check rides on the pass; the refused value's index is looked for
 * only when there is one. 0, or -1 with dl_fail naming it.
 *
 * With S1 and S2 the sums of d = x - K and d^2, mean = K + S1/n and
 * sigma^2 = S2/n - (S1/n)^2. The shift K is a value of the chunk, so
 * (K - mean)^2 <= n sigma^2 (one term of the sum of squares about the
 * mean): S2/n <= (n + 1) sigma^2, and the subtraction loses at most
 * log2(n + 1) of the 53 bits, about 2^-35 of sigma^2 at n = 2^17, far
 * below what moves a grid of 256 bins. (A fixed shift such as 0 would
 * lose all of them for a chunk whose mean is 10^9 sigma away.) */
static int uint8_moments(const struct codec_kernels *kern, const float *x, size_t n, double *mean, double *sigma) {
    if (!n) {
        *mean = *sigma = 0;
        return 0;
    }
    double sums[SUM_LANES] = {0}, squares[SUM_LANES] = {0}, shift = x[0];
    if (!kern->lane_moments(x, n, shift, sums, squares))
        return kern->check_finite(x, n) ? -1 : dl_fail("uint8: a value beyond the bound that the check does not find");
    double m1 = lanes_total(sums) / (double)n, var = lanes_total(squares) / (double)n - m1 * m1;
    *mean = shift + m1;
    *sigma = var > 0 ? sqrt(var) : 0;
    return 0;
}

static int encode_uint8(const struct codec_kernels *kern, const float *x, size_t n, uint8_t *out) {
    double mean, sigma;
    if (uint8_moments(kern, x, n, &mean, &sigma)) return -1;
    uint8_fill(kern, x, n, mean - 6 * sigma, 12 * sigma / DL_CODEC_UINT8_BINS, out);
    return 0;
}

int dl_codec_uint8_moments_path(enum dl_codec_path path, const float *x, size_t n, double *mean, double *sigma) {
    if (!dl_codec_path_available(path)) return dl_fail("codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    const struct codec_kernels *kern = kernels_of(path);
    return uint8_moments(kern, x, n, mean, sigma);
}

/* A uint8 result: the same layout over the grid from the smallest value to
 * the largest, so no value is clamped and each decodes within one bin width
 * (max - min) / 256 of itself, which members can bound from the decoded
 * result alone (collab/audit.c). */
static int encode_uint8_range(const struct codec_kernels *kern, const float *x, size_t n, uint8_t *out) {
    if (kern->check_finite(x, n)) return -1;
    float lo = 0, hi = 0;
    if (n) kern->min_max(x, n, &lo, &hi);
    uint8_fill(kern, x, n, lo, ((double)hi - (double)lo) / DL_CODEC_UINT8_BINS, out);
    return 0;
}

static int decode_uint8(const struct codec_kernels *kern, const uint8_t *in, size_t n, float *out) {
    float codebook[DL_CODEC_UINT8_BINS];
    memcpy(codebook, in, UINT8_HEADER);
    for (int k = 0; k < DL_CODEC_UINT8_BINS; k++)
        if (!finite_bits(codebook[k])) return dl_fail("uint8 codebook entry %d is NaN, Inf or beyond 2^%d", k, DL_CODEC_MAX_EXPONENT);
    kern->uint8_decode(codebook, in + UINT8_HEADER, n, out);
    return 0;
}

int dl_codec_encode_path(enum dl_codec_path path, enum dl_codec codec, const float *x, size_t n, uint8_t *out) {
    if (!dl_codec_path_available(path)) return dl_fail("encode: codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    const struct codec_kernels *kern = kernels_of(path);
    switch (codec) {
    case DL_CODEC_NONE:
        if (kern->check_finite(x, n)) return -1;
        if (n) memcpy(out, x, 4 * n);
        return 0;
    case DL_CODEC_FP16: return kern->encode_fp16(x, n, out);
    case DL_CODEC_UINT8: return encode_uint8(kern, x, n, out);
    case DL_CODEC_INT8: return dl_codec_int8_encode(x, n, out, path != DL_CODEC_PATH_SCALAR);
    case DL_CODEC_TOPK: return dl_codec_topk_encode(x, n, out, path != DL_CODEC_PATH_SCALAR);
    default: return dl_fail("encode: unknown codec %d", codec);
    }
}

int dl_codec_decode_path(enum dl_codec_path path, enum dl_codec codec, const uint8_t *in, size_t size, size_t n,
                         float *out) {
    if (!dl_codec_path_available(path)) return dl_fail("decode: codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    size_t want = dl_codec_size(codec, n);
    if (!size_known(codec, n, want)) return dl_fail("decode: unknown codec %d or size overflow", codec);
    if (size != want)
        return dl_fail("%s chunk of %zu values must be %zu bytes, got %zu", dl_codec_name(codec), n, want, size);
    const struct codec_kernels *kern = kernels_of(path);
    switch (codec) {
    case DL_CODEC_NONE: return kern->copy_decoded(in, n, out);
    case DL_CODEC_FP16: return kern->decode_fp16(in, n, out);
    case DL_CODEC_UINT8: return decode_uint8(kern, in, n, out);
    case DL_CODEC_INT8: return dl_codec_int8_decode(in, n, out, path != DL_CODEC_PATH_SCALAR);
    case DL_CODEC_TOPK: return dl_codec_topk_decode(in, n, out);
    default: return dl_fail("decode: unknown codec %d", codec);
    }
}

/* Checks in without writing anything: the same refusals, in the same order,
 * as dl_codec_decode_path, so that acc is untouched when a chunk is bad. */
static int check_wire(const struct codec_kernels *kern, enum dl_codec codec, const uint8_t *in, size_t n) {
    switch (codec) {
    case DL_CODEC_NONE: return kern->check_f32_wire(in, n);
    case DL_CODEC_FP16: return kern->check_f16_wire(in, n);
    case DL_CODEC_UINT8:
        for (int k = 0; k < DL_CODEC_UINT8_BINS; k++) {
            float v;
            memcpy(&v, in + 4 * (size_t)k, 4);
            if (!finite_bits(v)) return dl_fail("uint8 codebook entry %d is NaN, Inf or beyond 2^%d", k, DL_CODEC_MAX_EXPONENT);
        }
        return 0;
    default: return dl_fail("decode: unknown codec %d", codec);
    }
}

int dl_codec_decode_accumulate_path(enum dl_codec_path path, enum dl_codec codec, const uint8_t *in, size_t size,
                                    size_t n, double weight, double *acc) {
    if (!dl_codec_path_available(path)) return dl_fail("decode: codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    size_t want = dl_codec_size(codec, n);
    if (!size_known(codec, n, want)) return dl_fail("decode: unknown codec %d or size overflow", codec);
    if (size != want)
        return dl_fail("%s chunk of %zu values must be %zu bytes, got %zu", dl_codec_name(codec), n, want, size);
    /* These check and add in one call, refusing before acc is touched. */
    if (codec == DL_CODEC_INT8) return dl_codec_int8_accumulate(in, n, weight, acc, path != DL_CODEC_PATH_SCALAR);
    if (codec == DL_CODEC_TOPK) return dl_codec_topk_accumulate(in, n, weight, acc);
    const struct codec_kernels *kern = kernels_of(path);
    if (check_wire(kern, codec, in, n)) return -1;
    switch (codec) {
    case DL_CODEC_NONE: kern->accumulate_f32(in, n, weight, acc); return 0;
    case DL_CODEC_FP16: kern->accumulate_f16(in, n, weight, acc); return 0;
    case DL_CODEC_UINT8: {
        float codebook[DL_CODEC_UINT8_BINS];
        memcpy(codebook, in, UINT8_HEADER);
        accumulate_u8_scalar(codebook, in + UINT8_HEADER, n, weight, acc);
        return 0;
    }
    default: return dl_fail("decode: unknown codec %d", codec);
    }
}

int dl_codec_mean_path(enum dl_codec_path path, const double *acc, size_t n, double total, float *out) {
    if (!dl_codec_path_available(path)) return dl_fail("mean: codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    kernels_of(path)->mean(acc, n, total, out);
    return 0;
}

/* The best path is looked up once; cpuid answers do not change. */
static enum dl_codec_path best_path_cached(void) {
    static int cached = -1;
    int p = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (p < 0) {
        p = (int)dl_codec_best_path();
        __atomic_store_n(&cached, p, __ATOMIC_RELAXED);
    }
    return (enum dl_codec_path)p;
}

int dl_codec_encode(enum dl_codec codec, const float *x, size_t n, uint8_t *out) {
    return dl_codec_encode_path(best_path_cached(), codec, x, n, out);
}

int dl_codec_decode(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, float *out) {
    return dl_codec_decode_path(best_path_cached(), codec, in, size, n, out);
}

int dl_codec_decode_accumulate(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, double weight,
                               double *acc) {
    return dl_codec_decode_accumulate_path(best_path_cached(), codec, in, size, n, weight, acc);
}

void dl_codec_mean(const double *acc, size_t n, double total, float *out) {
    dl_codec_mean_path(best_path_cached(), acc, n, total, out);
}

/* ---- results ------------------------------------------------------------------- */

size_t dl_codec_result_max(enum dl_codec codec, size_t n) {
    if (codec == DL_CODEC_TOPK) return n > SIZE_MAX / 3 ? 0 : (n + 7) / 8 + 2 * n;
    return dl_codec_size(codec, n);
}

size_t dl_codec_result_size(enum dl_codec codec, const uint8_t *in, size_t avail, size_t n) {
    if (codec == DL_CODEC_TOPK) return dl_codec_sparse16_size(in, avail, n);
    size_t want = dl_codec_size(codec, n);
    if (!size_known(codec, n, want)) {
        dl_fail("result: unknown codec %d or size overflow", codec);
        return SIZE_MAX;
    }
    if (avail < want) {
        dl_fail("%s result of %zu values needs %zu bytes, got %zu", dl_codec_name(codec), n, want, avail);
        return SIZE_MAX;
    }
    return want;
}

int dl_codec_result_encode_path(enum dl_codec_path path, enum dl_codec codec, const float *x, size_t n, uint8_t *out,
                                size_t *size) {
    if (codec == DL_CODEC_TOPK) return dl_codec_sparse16_encode(x, n, out, size);
    *size = dl_codec_size(codec, n);
    if (codec != DL_CODEC_UINT8) return dl_codec_encode_path(path, codec, x, n, out);
    if (!dl_codec_path_available(path)) return dl_fail("encode: codec path %s is not available on this CPU",
                                                       dl_codec_path_name(path));
    return encode_uint8_range(kernels_of(path), x, n, out);
}

int dl_codec_result_encode(enum dl_codec codec, const float *x, size_t n, uint8_t *out, size_t *size) {
    return dl_codec_result_encode_path(best_path_cached(), codec, x, n, out, size);
}

int dl_codec_result_decode(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, float *out) {
    if (codec == DL_CODEC_TOPK) return dl_codec_sparse16_decode(in, size, n, out);
    return dl_codec_decode(codec, in, size, n, out);
}
