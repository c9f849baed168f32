/* device: fp32 <-> fp16 / bf16 conversion kernels agree with the host
 * conversions bit for bit: every 16-bit pattern, every rounding tie, zeros,
 * subnormals (of both formats), infinities, overflow and NaNs. */
#include <stdint.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Every half value, the exact midpoints to its neighbour and one float ulp
 * either side of them (all rounding cases), then special and random values. */
static float *make_f32_inputs(size_t *count) {
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu,
        0x7fc01234u, 0xffd55555u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00400000u,
        0x477fe000u, /* 65504: largest half */ 0x477fefffu, /* just below the overflow tie */
        0x477ff000u, /* 65520: tie, rounds to Inf */ 0x7f7fffffu, 0xff7fffffu,
        0x33800000u, /* 2^-24: smallest half subnormal */ 0x33000000u, /* 2^-25: tie to 0 */
        0x33000001u, 0x33c00000u, /* 1.5 * 2^-24: tie to 2^-23 */ 0x38800000u, /* 2^-14 */
        0x387fc000u, 0x387fe000u, /* tie between largest subnormal and 2^-14 */
        0x3f801000u, 0x3f803000u, /* 1 + 2^-11, 1 + 3*2^-11: ties to even */
        0x3f808000u, 0x3f818000u, /* bf16 ties */
    };
    size_t nspecial = sizeof specials / sizeof *specials, nrandom = 65536;
    size_t n = 65536 * 4 + nspecial + nrandom;
    float *v = dl_malloc(n * sizeof *v);
    if (!v) return NULL;
    size_t k = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dl_f16_to_f32((uint16_t)h);
        v[k++] = f;
        uint32_t b = bits_of(f);
        /* a float halfway to the next half up: 13 low mantissa bits = 0x1000 */
        uint32_t mid = (b & 0x7f800000u) == 0x7f800000u ? b : b + 0x1000u;
        if ((h & 0x7c00u) == 0) /* subnormal halves are not on the float grid that way */
            mid = bits_of(f + (h & 0x8000u ? -1.0f : 1.0f) * 2.98023223876953125e-08f);
        v[k++] = float_of(mid);
        v[k++] = float_of(mid + 1);
        v[k++] = float_of(mid - 1);
    }
    for (size_t i = 0; i < nspecial; i++) v[k++] = float_of(specials[i]);
    dl_rng rng;
    dl_rng_seed(&rng, 20240607);
    for (size_t i = 0; i < nrandom; i++) v[k++] = float_of((uint32_t)dl_rng_next(&rng));
    *count = k;
    return v;
}

static int report_mismatch(const char *what, size_t i, uint32_t input, uint32_t device,
                           uint32_t host) {
    fprintf(stderr, "%s: element %zu input 0x%08x: device 0x%08x host 0x%08x\n", what, i, input,
            device, host);
    return 1;
}

static void test_to_16(dl_device *dev, const float *in, size_t n, int bf16) {
    const char *what = bf16 ? "f32->bf16" : "f32->f16";
    dl_buffer src, dst;
    const size_t src_off = 3, dst_off = 5; /* offsets in elements */
    if (dl_buffer_alloc(dev, (n + src_off) * 4, &src) ||
        dl_buffer_alloc(dev, (n + dst_off + 1) * 2, &dst)) {
        CHECK_OK(-1);
        return;
    }
    CHECK_OK(dl_buffer_upload(dev, &src, src_off * 4, in, n * 4));
    CHECK_OK(dl_buffer_fill32(dev, &dst, 0, dst.size & ~(size_t)3, 0xdeadbeefu));
    CHECK_OK(bf16 ? dl_convert_f32_to_bf16(dev, &src, src_off, &dst, dst_off, n)
                  : dl_convert_f32_to_f16(dev, &src, src_off, &dst, dst_off, n));
    uint16_t *out = dl_malloc((n + dst_off + 1) * 2);
    CHECK_OK(dl_buffer_download(dev, &dst, 0, out, (n + dst_off + 1) * 2));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t host = bf16 ? dl_f32_to_bf16(in[i]) : dl_f32_to_f16(in[i]);
        if (out[dst_off + i] != host && bad++ < 8)
            report_mismatch(what, i, bits_of(in[i]), out[dst_off + i], host);
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu differ", what, bad, n);
    /* the words before the offset and after the range are untouched */
    CHECK(out[0] == 0xbeef && out[1] == 0xdead && out[4] == 0xbeef);
    CHECK(out[dst_off + n] == (((dst_off + n) & 1) ? 0xdead : 0xbeef));
    free(out);
    dl_buffer_free(dev, &src);
    dl_buffer_free(dev, &dst);
}

static void test_from_16(dl_device *dev, int bf16) {
    const char *what = bf16 ? "bf16->f32" : "f16->f32";
    const size_t n = 65536;
    uint16_t *in = dl_malloc(n * 2);
    for (size_t i = 0; i < n; i++) in[i] = (uint16_t)i;
    dl_buffer src, dst;
    if (dl_buffer_alloc(dev, n * 2, &src) || dl_buffer_alloc(dev, (n + 1) * 4, &dst)) {
        CHECK_OK(-1);
        free(in);
        return;
    }
    CHECK_OK(dl_buffer_upload(dev, &src, 0, in, n * 2));
    CHECK_OK(dl_buffer_fill32(dev, &dst, 0, dst.size, 0xdeadbeefu));
    CHECK_OK(bf16 ? dl_convert_bf16_to_f32(dev, &src, 0, &dst, 1, n)
                  : dl_convert_f16_to_f32(dev, &src, 0, &dst, 1, n));
    float *out = dl_malloc((n + 1) * 4);
    CHECK_OK(dl_buffer_download(dev, &dst, 0, out, (n + 1) * 4));
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t host = bits_of(bf16 ? dl_bf16_to_f32(in[i]) : dl_f16_to_f32(in[i]));
        if (bits_of(out[1 + i]) != host && bad++ < 8)
            report_mismatch(what, i, in[i], bits_of(out[1 + i]), host);
    }
    CHECK_MSG(bad == 0, "%s: %d of %zu differ", what, bad, n);
    CHECK(bits_of(out[0]) == 0xdeadbeefu);
    free(in);
    free(out);
    dl_buffer_free(dev, &src);
    dl_buffer_free(dev, &dst);
}

static void test_ranges(dl_device *dev) {
    dl_buffer f32, f16;
    CHECK_OK(dl_buffer_alloc(dev, 10 * 4, &f32));
    CHECK_OK(dl_buffer_alloc(dev, 10 * 2, &f16));
    CHECK_OK(dl_convert_f32_to_f16(dev, &f32, 0, &f16, 0, 10));
    CHECK_OK(dl_convert_f32_to_f16(dev, &f32, 0, &f16, 0, 0));
    CHECK(dl_convert_f32_to_f16(dev, &f32, 1, &f16, 0, 10) == -1);
    CHECK_MSG(strstr(dl_error(), "source range") != NULL, "%s", dl_error());
    CHECK(dl_convert_f16_to_f32(dev, &f16, 0, &f32, 2, 9) == -1);
    CHECK_MSG(strstr(dl_error(), "destination range") != NULL, "%s", dl_error());
    CHECK(dl_convert_f32_to_bf16(dev, &f32, SIZE_MAX, &f16, 0, 2) == -1);
    CHECK(dl_convert_bf16_to_f32(dev, &f16, 0, &f32, 0, SIZE_MAX) == -1);
    dl_buffer_free(dev, &f32);
    dl_buffer_free(dev, &f16);
}

int main(void) {
    dl_device *dev = NULL;
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &dev));
    if (dev) {
        size_t n = 0;
        float *inputs = make_f32_inputs(&n);
        CHECK(inputs != NULL);
        if (inputs) {
            test_to_16(dev, inputs, n, 0);
            test_to_16(dev, inputs, n, 1);
            free(inputs);
        }
        test_from_16(dev, 0);
        test_from_16(dev, 1);
        test_ranges(dev);
        CHECK_OK(dl_device_finish(dev));
        dl_device_close(dev);
    }
    return dl_test_finish("test_convert");
}
