/* Wire codecs: fp32 as is, fp16 (round to nearest even, clamped to fp16's
 * range) and 8-bit quantisation with a per-chunk codebook. Values are copied
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

size_t dl_codec_size(enum dl_codec codec, size_t n) {
    switch (codec) {
    case DL_CODEC_NONE: return n > SIZE_MAX / 4 ? 0 : 4 * n;
    case DL_CODEC_FP16: return n > SIZE_MAX / 2 ? 0 : 2 * n;
    case DL_CODEC_UINT8: return n > SIZE_MAX - UINT8_HEADER ? 0 : UINT8_HEADER + n;
    default: return 0;
    }
}

static inline bool finite_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7f800000u) != 0x7f800000u;
}

static int refuse_value(size_t i, size_t n, float v) {
    return dl_fail("cannot encode value %zu of %zu: %s is not a finite number (a diverged gradient?)", i, n,
                   isnan(v) ? "NaN" : "Inf");
}

static int refuse_non_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!finite_bits(x[i])) return refuse_value(i, n, x[i]);
    return 0;
}

static int encode_fp16(const float *x, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (!finite_bits(v)) return refuse_value(i, n, v);
        /* Beyond 65504 round-to-nearest gives Inf (from 65520 up): clamp so a
         * large but finite gradient stays finite on the wire. */
        if (v > DL_CODEC_FP16_MAX) v = DL_CODEC_FP16_MAX;
        if (v < -DL_CODEC_FP16_MAX) v = -DL_CODEC_FP16_MAX;
        uint16_t h = dl_f32_to_f16(v);
        memcpy(out + 2 * i, &h, 2);
    }
    return 0;
}

static int decode_fp16(const uint8_t *in, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        if ((h & 0x7c00u) == 0x7c00u) return dl_fail("fp16 value %zu of %zu is NaN or Inf", i, n);
        out[i] = dl_f16_to_f32(h);
    }
    return 0;
}

static float clamp_to_float(double v) {
    if (v > FLT_MAX) return FLT_MAX;
    if (v < -FLT_MAX) return -FLT_MAX;
    return (float)v;
}

static int encode_uint8(const float *x, size_t n, uint8_t *out) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!finite_bits(x[i])) return refuse_value(i, n, x[i]);
        sum += x[i];
    }
    double mean = n ? sum / (double)n : 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - mean;
        sq += d * d;
    }
    double sigma = n ? sqrt(sq / (double)n) : 0;
    double lo = mean - 6 * sigma, width = 12 * sigma / DL_CODEC_UINT8_BINS;
    /* sigma = 0: every value is the mean, one bin holds them all. */
    double inv_width = width > 0 ? 1 / width : 0;
    double bin_sum[DL_CODEC_UINT8_BINS] = {0};
    size_t bin_count[DL_CODEC_UINT8_BINS] = {0};
    uint8_t *codes = out + UINT8_HEADER;
    for (size_t i = 0; i < n; i++) {
        double pos = ((double)x[i] - lo) * inv_width;
        int k = pos <= 0 ? 0 : pos >= DL_CODEC_UINT8_BINS - 1 ? DL_CODEC_UINT8_BINS - 1 : (int)pos;
        codes[i] = (uint8_t)k;
        bin_sum[k] += x[i];
        bin_count[k]++;
    }
    for (int k = 0; k < DL_CODEC_UINT8_BINS; k++) {
        double v = bin_count[k] ? bin_sum[k] / (double)bin_count[k] : lo + (k + 0.5) * width;
        float f = clamp_to_float(v);
        memcpy(out + 4 * (size_t)k, &f, 4);
    }
    return 0;
}

static int decode_uint8(const uint8_t *in, size_t n, float *out) {
    float codebook[DL_CODEC_UINT8_BINS];
    memcpy(codebook, in, UINT8_HEADER);
    for (int k = 0; k < DL_CODEC_UINT8_BINS; k++)
        if (!finite_bits(codebook[k])) return dl_fail("uint8 codebook entry %d is NaN or Inf", k);
    const uint8_t *codes = in + UINT8_HEADER;
    for (size_t i = 0; i < n; i++) out[i] = codebook[codes[i]];
    return 0;
}

int dl_codec_encode(enum dl_codec codec, const float *x, size_t n, uint8_t *out) {
    switch (codec) {
    case DL_CODEC_NONE:
        if (refuse_non_finite(x, n)) return -1;
        if (n) memcpy(out, x, 4 * n);
        return 0;
    case DL_CODEC_FP16: return encode_fp16(x, n, out);
    case DL_CODEC_UINT8: return encode_uint8(x, n, out);
    default: return dl_fail("encode: unknown codec %d", codec);
    }
}

int dl_codec_decode(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, float *out) {
    size_t want = dl_codec_size(codec, n);
    if (!want && codec != DL_CODEC_NONE && codec != DL_CODEC_FP16)
        return dl_fail("decode: unknown codec %d or size overflow", codec);
    if (size != want)
        return dl_fail("%s chunk of %zu values must be %zu bytes, got %zu", dl_codec_name(codec), n, want, size);
    switch (codec) {
    case DL_CODEC_NONE:
        if (n) memcpy(out, in, 4 * n);
        for (size_t i = 0; i < n; i++)
            if (!finite_bits(out[i])) return dl_fail("fp32 value %zu of %zu is NaN or Inf", i, n);
        return 0;
    case DL_CODEC_FP16: return decode_fp16(in, n, out);
    case DL_CODEC_UINT8: return decode_uint8(in, n, out);
    default: return dl_fail("decode: unknown codec %d", codec);
    }
}
