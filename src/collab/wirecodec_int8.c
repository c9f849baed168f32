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

int dl_codec_int8_encode(const float *x, size_t n, uint8_t *out) {
    float absmax = 0;
    for (size_t i = 0; i < n; i++) {
        if (!dl_codec_bounded(x[i])) return dl_codec_refuse_value(i, n, x[i]);
        float a = fabsf(x[i]);
        if (a > absmax) absmax = a;
    }
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
    for (size_t i = 0; i < n; i++) {
        /* x / scale in double: one rounding, then nearest even (rint in the
         * default rounding mode); the clamp only catches that rounding. */
        double q = rint((double)x[i] / (double)scale);
        if (q > 127) q = 127;
        if (q < -127) q = -127;
        codes[i] = (int8_t)q;
    }
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

int dl_codec_int8_decode(const uint8_t *in, size_t n, float *out) {
    float scale;
    if (check_int8(in, n, &scale)) return -1;
    const int8_t *codes = (const int8_t *)(in + 4);
    for (size_t i = 0; i < n; i++) out[i] = int8_value(codes[i], scale);
    return 0;
}

int dl_codec_int8_accumulate(const uint8_t *in, size_t n, double weight, double *acc) {
    float scale;
    if (check_int8(in, n, &scale)) return -1;
    const int8_t *codes = (const int8_t *)(in + 4);
    for (size_t i = 0; i < n; i++) acc[i] += weight * (double)int8_value(codes[i], scale);
    return 0;
}
