/* int8: symmetric 8-bit quantisation with one fp32 scale per chunk
 * (layout in wirecodec.h). Pseudo-gradients after many local steps have no
 * outliers to speak of next to their spread, so one absmax scale per 1 MiB
 * chunk keeps them to within 1/254 of the chunk's largest value, and the
 * rest is what error feedback carries to the next sync. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"

size_t dl_codec_int8_size(size_t n) { return n > SIZE_MAX - 4 ? 0 : 4 + n; }

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define INT8_HAVE_AVX2 1
#include <immintrin.h>
/* The AVX2 path: the same operations per value (exact max, x / scale in
 * double, nearest even, the clamp; code x scale in double, then float), so
 * the same bytes and floats as the scalar loops, which take every tail and
 * every block that holds a value to refuse (so the error names its index). */
#define INT8_AVX2 __attribute__((target("avx2")))
#else
#define INT8_HAVE_AVX2 0
#endif

/* Largest |x| of x[from, n), refusing what the codecs refuse. */
static int absmax_scalar(const float *x, size_t from, size_t n, float *absmax) {
    float m = *absmax;
    for (size_t i = from; i < n; i++) {
        if (!dl_codec_bounded(x[i])) return dl_codec_refuse_value(i, n, x[i]);
        float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    *absmax = m;
    return 0;
}

static void codes_scalar(const float *x, size_t from, size_t n, float scale, int8_t *codes) {
    for (size_t i = from; i < n; i++) {
        /* x / scale in double: one rounding, then nearest even (rint in the
         * default rounding mode); the clamp only catches that rounding. */
        double q = rint((double)x[i] / (double)scale);
        if (q > 127) q = 127;
        if (q < -127) q = -127;
        codes[i] = (int8_t)q;
    }
}

#if INT8_HAVE_AVX2
/* Lanes beyond the codecs' bound (NaN and Inf among them), as a mask. */
INT8_AVX2 static inline int unbounded8(__m256 v) {
    const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
    const __m256i last_ok = _mm256_set1_epi32((int)(((uint32_t)(127 + DL_CODEC_MAX_EXPONENT) << 23) - 1));
    __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp_mask);
    return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(e, last_ok)));
}

INT8_AVX2 static int absmax_avx2(const float *x, size_t n, float *absmax) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        if (unbounded8(v0) | unbounded8(v1)) break;
        m0 = _mm256_max_ps(m0, _mm256_and_ps(v0, abs_mask));
        m1 = _mm256_max_ps(m1, _mm256_and_ps(v1, abs_mask));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
    float m = 0;
    for (int l = 0; l < 8; l++) m = lanes[l] > m ? lanes[l] : m;
    *absmax = m;
    return absmax_scalar(x, i, n, absmax);
}

INT8_AVX2 static void codes_avx2(const float *x, size_t n, float scale, int8_t *codes) {
    const __m256d s = _mm256_set1_pd(scale), hi = _mm256_set1_pd(127), lo = _mm256_set1_pd(-127);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d q0 = _mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), s);
        __m256d q1 = _mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), s);
        q0 = _mm256_round_pd(q0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q1 = _mm256_round_pd(q1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q0 = _mm256_max_pd(_mm256_min_pd(q0, hi), lo);
        q1 = _mm256_max_pd(_mm256_min_pd(q1, hi), lo);
        __m128i k16 = _mm_packs_epi32(_mm256_cvtpd_epi32(q0), _mm256_cvtpd_epi32(q1));
        _mm_storel_epi64((__m128i *)(void *)(codes + i), _mm_packs_epi16(k16, k16));
    }
    codes_scalar(x, i, n, scale, codes);
}
#endif

int dl_codec_int8_encode(const float *x, size_t n, uint8_t *out, bool vector) {
#if !INT8_HAVE_AVX2
    vector = false;
#endif
    float absmax = 0;
#if INT8_HAVE_AVX2
    if (vector ? absmax_avx2(x, n, &absmax) : absmax_scalar(x, 0, n, &absmax)) return -1;
#else
    if (absmax_scalar(x, 0, n, &absmax)) return -1;
#endif
    float scale = absmax / 127.0f;
    /* A chunk of values below 127 x 2^-150 would get scale 0 and lose them
     * all; the smallest subnormal keeps every code within +-64. */
    if (scale == 0 && absmax > 0) scale = FLT_TRUE_MIN;
    /* At the bound, 127 x scale can round up to 2^32, which the decoder
     * refuses: one step down keeps the chunk decodable (the clamp below
     * takes the largest value's code back to 127). */
    while (scale > 0 && !dl_codec_bounded((float)(127.0 * (double)scale))) scale = nextafterf(scale, 0);
    memcpy(out, &scale, 4);
    int8_t *codes = (int8_t *)(out + 4);
    if (scale == 0) {
        memset(codes, 0, n);
        return 0;
    }
#if INT8_HAVE_AVX2
    if (vector) {
        codes_avx2(x, n, scale, codes);
        return 0;
    }
#endif
    codes_scalar(x, 0, n, scale, codes);
    return 0;
}

/* The scale and codes as a decoder may take them; refuses before anything
 * is written. */
static int check_int8(const uint8_t *in, size_t n, float *scale) {
    memcpy(scale, in, 4);
    /* The largest value a code can decode to, rounded as decoding rounds it. */
    if (signbit(*scale) || !dl_codec_bounded(*scale) || !dl_codec_bounded((float)((double)*scale * 127.0)))
        return dl_fail("int8 scale %g is negative, not finite or beyond 2^%d / 127", (double)*scale,
                       DL_CODEC_MAX_EXPONENT);
    const uint8_t *codes = in + 4;
    const void *bad = memchr(codes, 0x80, n);
    if (bad)
        return dl_fail("int8 value %zu of %zu is -128 (the codec is symmetric: -127..127)",
                       (size_t)((const uint8_t *)bad - codes), n);
    return 0;
}

static inline float int8_value(int8_t code, float scale) { return (float)((double)code * (double)scale); }

#if INT8_HAVE_AVX2
/* Eight codes as doubles, times the scale, rounded to float: int8_value. */
INT8_AVX2 static inline __m256 values8(const int8_t *codes, __m256d scale) {
    __m256i k = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)codes));
    __m128 v0 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(k)), scale));
    __m128 v1 = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(k, 1)), scale));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(v0), v1, 1);
}

INT8_AVX2 static size_t decode_avx2(const int8_t *codes, size_t n, float scale, float *out) {
    const __m256d s = _mm256_set1_pd(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, values8(codes + i, s));
    return i;
}

/* acc += weight * value: a multiply then an add, as the scalar loop. */
INT8_AVX2 static size_t accumulate_avx2(const int8_t *codes, size_t n, float scale, double weight, double *acc) {
    const __m256d s = _mm256_set1_pd(scale), w = _mm256_set1_pd(weight);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = values8(codes + i, s);
        __m256d a0 = _mm256_loadu_pd(acc + i), a1 = _mm256_loadu_pd(acc + i + 4);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(w, _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(w, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
        _mm256_storeu_pd(acc + i, a0);
        _mm256_storeu_pd(acc + i + 4, a1);
    }
    return i;
}
#endif

int dl_codec_int8_decode(const uint8_t *in, size_t n, float *out, bool vector) {
    float scale;
    if (check_int8(in, n, &scale)) return -1;
    const int8_t *codes = (const int8_t *)(in + 4);
    size_t i = 0;
#if INT8_HAVE_AVX2
    if (vector) i = decode_avx2(codes, n, scale, out);
#else
    (void)vector;
#endif
    for (; i < n; i++) out[i] = int8_value(codes[i], scale);
    return 0;
}

int dl_codec_int8_accumulate(const uint8_t *in, size_t n, double weight, double *acc, bool vector) {
    float scale;
    if (check_int8(in, n, &scale)) return -1;
    const int8_t *codes = (const int8_t *)(in + 4);
    size_t i = 0;
#if INT8_HAVE_AVX2
    if (vector) i = accumulate_avx2(codes, n, scale, weight, acc);
#else
    (void)vector;
#endif
    for (; i < n; i++) acc[i] += weight * (double)int8_value(codes[i], scale);
    return 0;
}
