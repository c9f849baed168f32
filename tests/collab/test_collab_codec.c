/* Wire codecs against references computed in double: fp16 against an
 * independent round-to-nearest-even, uint8 against its error bounds (one bin
 * width inside mean +- 6 sigma, exact for a bin of one distinct value),
 * exact sizes, odd lengths, and refusal of NaN/Inf and malformed chunks. */
#include <float.h>
#include <stdint.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* Nearest fp16 value of x (clamped to +-65504), ties to even, in double. */
static double ref_fp16(double x) {
    double a = fabs(x);
    if (a > 65504) a = 65504;
    double q; /* spacing of fp16 values around a */
    if (a < ldexp(1, -14)) {
        q = ldexp(1, -24);
    } else {
        int e;
        frexp(a, &e); /* a = f 2^e, f in [0.5, 1) */
        q = ldexp(1, e - 1 - 10);
    }
    double m = a / q, lo = floor(m), frac = m - lo;
    double r = frac > 0.5 || (frac == 0.5 && fmod(lo, 2) == 1) ? lo + 1 : lo;
    double v = r * q;
    if (v > 65504) v = 65504;
    return x < 0 ? -v : v;
}

/* The largest float below the averaging bound 2^DL_CODEC_MAX_EXPONENT. */
#define LARGEST_OK 4294967040.0f

static uint8_t *roundtrip(int codec, const float *x, size_t n, float *y) {
    size_t size = dl_codec_size(codec, n);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return NULL;
    int rc = dl_codec_encode(codec, x, n, buf);
    CHECK_MSG(rc == 0, "%s encode of %zu values: %s", dl_codec_name(codec), n, dl_error());
    rc = dl_codec_decode(codec, buf, size, n, y);
    CHECK_MSG(rc == 0, "%s decode of %zu values: %s", dl_codec_name(codec), n, dl_error());
    return buf;
}

static void test_names_and_sizes(void) {
    enum dl_codec c = DL_CODEC_COUNT;
    CHECK(dl_codec_from_name("fp16", &c) == 0 && c == DL_CODEC_FP16);
    CHECK(dl_codec_from_name("uint8", &c) == 0 && c == DL_CODEC_UINT8);
    CHECK(dl_codec_from_name("none", &c) == 0 && c == DL_CODEC_NONE);
    CHECK(dl_codec_from_name("int4", &c) == -1 && strstr(dl_error(), "fp16"));
    CHECK(dl_codec_from_name(NULL, &c) == -1);
    CHECK(!strcmp(dl_codec_name(DL_CODEC_UINT8), "uint8") && !strcmp(dl_codec_name(9), "unknown"));
    size_t ns[] = {0, 1, 7, 1000003};
    for (int i = 0; i < 4; i++) {
        CHECK(dl_codec_size(DL_CODEC_NONE, ns[i]) == 4 * ns[i]);
        CHECK(dl_codec_size(DL_CODEC_FP16, ns[i]) == 2 * ns[i]);
        CHECK(dl_codec_size(DL_CODEC_UINT8, ns[i]) == 1024 + ns[i]);
    }
    CHECK(dl_codec_size(7, 10) == 0);
}

static void test_none(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 1);
    size_t n = 1000003;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = dl_rng_normal(&rng) * 1e-3f;
    x[0] = -0.0f;
    x[1] = LARGEST_OK; /* the largest value inside the bound */
    x[2] = 1e-45f; /* smallest subnormal */
    free(roundtrip(DL_CODEC_NONE, x, n, y));
    CHECK(memcmp(x, y, n * 4) == 0);
    free(x);
    free(y);
}

static void check_fp16(const float *x, size_t n, const char *what) {
    float *y = malloc((n ? n : 1) * 4);
    free(roundtrip(DL_CODEC_FP16, x, n, y));
    size_t wrong = 0, rel_bad = 0;
    for (size_t i = 0; i < n; i++) {
        double want = ref_fp16(x[i]);
        if ((double)y[i] != want) {
            if (wrong++ < 3) fprintf(stderr, "%s: fp16 of %.9g gave %.9g, want %.9g\n", what, x[i], y[i], want);
        }
        double a = fabs((double)x[i]);
        if (a >= ldexp(1, -14) && a <= 65504 && fabs((double)y[i] - x[i]) > ldexp(1, -11) * a) rel_bad++;
    }
    CHECK_MSG(wrong == 0, "%s: %zu of %zu values not rounded to nearest even", what, wrong, n);
    CHECK_MSG(rel_bad == 0, "%s: %zu normal values off by more than 2^-11 relative", what, rel_bad);
    free(y);
}

static void test_fp16(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 2);
    size_t sizes[] = {1, 7, 1000003};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *x = malloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            /* magnitudes 2^-30 .. 2^20: subnormal, normal and clamped values */
            float mag = ldexpf(1 + dl_rng_uniform(&rng), (int)dl_rng_below(&rng, 51) - 30);
            x[i] = dl_rng_below(&rng, 2) ? -mag : mag;
        }
        char what[32];
        snprintf(what, sizeof what, "fp16 n=%zu", n);
        check_fp16(x, n, what);
        free(x);
    }
    /* Edges: ties, the largest half, the clamp, subnormals, zeros. */
    float edge[] = {65504.0f, 65519.0f, 65520.0f, 1e6f, -4e9f, LARGEST_OK, -LARGEST_OK,
                    1.0f + ldexpf(1, -11), 1.0f + 3 * ldexpf(1, -11), ldexpf(1, -24), ldexpf(1, -25),
                    ldexpf(3, -26), ldexpf(1, -14), 0.0f, -0.0f, 2049.0f, 2051.0f, 1e-40f};
    check_fp16(edge, sizeof edge / sizeof edge[0], "fp16 edges");
    float y[3], big[3] = {1e9f, -70000.0f, 65536.0f};
    free(roundtrip(DL_CODEC_FP16, big, 3, y));
    CHECK(y[0] == 65504.0f && y[1] == -65504.0f && y[2] == 65504.0f);
}

/* uint8 checked against mean +- 6 sigma computed here in double. */
static void check_uint8(const float *x, size_t n, const char *what) {
    float *y = malloc((n ? n : 1) * 4);
    uint8_t *buf = roundtrip(DL_CODEC_UINT8, x, n, y);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += ((double)x[i] - mean) * ((double)x[i] - mean);
    double sigma = sqrt(sq / (double)n), lo = mean - 6 * sigma, hi = mean + 6 * sigma, width = (hi - lo) / 256;
    /* Per bin (by this test's own assignment): min and max of the values. */
    double bmin[256], bmax[256];
    for (int k = 0; k < 256; k++) bmin[k] = INFINITY, bmax[k] = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        int k = width > 0 ? (int)floor(((double)x[i] - lo) / width) : 0;
        k = k < 0 ? 0 : k > 255 ? 255 : k;
        bmin[k] = fmin(bmin[k], x[i]);
        bmax[k] = fmax(bmax[k], x[i]);
    }
    /* Which bins received values clamped from beyond mean +- 6 sigma. */
    bool clamped_into[256] = {false};
    for (size_t i = 0; i < n; i++)
        if (x[i] < lo) clamped_into[0] = true;
        else if (x[i] > hi) clamped_into[255] = true;
    size_t too_far = 0, single_off = 0, outlier_bad = 0, inside = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)y[i] - x[i]);
        double tol = width * (1 + 1e-9) + fabs((double)y[i]) * ldexp(1, -23);
        int k = width > 0 ? (int)floor(((double)x[i] - lo) / width) : 0;
        k = k < 0 ? 0 : k > 255 ? 255 : k;
        if (!clamped_into[k]) {
            inside++;
            if (err > tol && too_far++ < 3)
                fprintf(stderr, "%s: %.9g decoded as %.9g (bin width %.3g)\n", what, x[i], y[i], width);
            if (bmin[k] == bmax[k] && !(err == 0 && err <= width / 2)) single_off++;
        } else {
            /* An end bin holding clamped outliers: every member decodes to
             * the bin's mean, between its smallest and largest member. */
            double slack = fabs((double)y[i]) * ldexp(1, -23);
            if (!(y[i] >= bmin[k] - slack && y[i] <= bmax[k] + slack)) outlier_bad++;
        }
    }
    CHECK_MSG(too_far == 0, "%s: %zu of %zu values decode further than one bin width", what, too_far, inside);
    CHECK_MSG(single_off == 0, "%s: %zu values of single-value bins not exact", what, single_off);
    CHECK_MSG(outlier_bad == 0, "%s: %zu outliers not decoded into their end bin", what, outlier_bad);
    for (int k = 0; k < 256; k++) {
        float c;
        memcpy(&c, buf + 4 * k, 4);
        CHECK_MSG(isfinite(c), "%s: codebook entry %d", what, k);
    }
    free(buf);
    free(y);
}

static void test_uint8(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 3);
    size_t sizes[] = {1, 7, 1000003};
    for (int s = 0; s < 3; s++) {
        size_t n = sizes[s];
        float *x = malloc(n * 4);
        char what[64];
        for (size_t i = 0; i < n; i++) x[i] = 0.01f + 3e-3f * dl_rng_normal(&rng);
        snprintf(what, sizeof what, "uint8 normal n=%zu", n);
        check_uint8(x, n, what);
        for (size_t i = 0; i < n; i++) x[i] = dl_rng_uniform(&rng) * 2 - 1;
        snprintf(what, sizeof what, "uint8 uniform n=%zu", n);
        check_uint8(x, n, what);
        /* Heavy tails: one value in 500 is 10^3 larger, beyond 6 sigma. */
        for (size_t i = 0; i < n; i++) x[i] = dl_rng_normal(&rng) * (dl_rng_below(&rng, 500) ? 1.0f : 1000.0f);
        snprintf(what, sizeof what, "uint8 outliers n=%zu", n);
        check_uint8(x, n, what);
        free(x);
    }
    /* Few distinct values: every bin holds one value, decoded exactly. */
    size_t n = 100000;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    const float levels[] = {-3.25f, -1.0f, 0.0f, 0.5f, 2.0f, 5.125f};
    for (size_t i = 0; i < n; i++) x[i] = levels[dl_rng_below(&rng, 6)];
    check_uint8(x, n, "uint8 six levels");
    free(roundtrip(DL_CODEC_UINT8, x, n, y));
    CHECK(memcmp(x, y, n * 4) == 0);
    /* Constant chunk (sigma 0) and the largest values inside the bound stay
     * exact and finite. */
    for (size_t i = 0; i < n; i++) x[i] = 42.5f;
    free(roundtrip(DL_CODEC_UINT8, x, n, y));
    CHECK(dl_test_max_abs(y, x, n) == 0);
    for (size_t i = 0; i < n; i++) x[i] = i % 2 ? LARGEST_OK : -LARGEST_OK;
    check_uint8(x, n, "uint8 +-(2^32 - 256)");
    free(x);
    free(y);
}

/* The moments behind the uint8 grid against a two-pass reference in long
 * double, on chunks that cost a one-pass formula its bits: a mean 10^7
 * sigmas from zero, an outlier as the first value (the worst shift the
 * encoder can draw), a constant chunk, one value. */
static void check_moments(const float *x, size_t n, const char *what) {
    long double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    long double mean = sum / (long double)n;
    for (size_t i = 0; i < n; i++) sq += ((long double)x[i] - mean) * ((long double)x[i] - mean);
    double want_m = (double)mean, want_s = (double)sqrtl(sq / (long double)n);
    for (int p = 0; p < DL_CODEC_PATH_COUNT; p++) {
        if (!dl_codec_path_available((enum dl_codec_path)p)) continue;
        double m = NAN, s = NAN;
        int rc = dl_codec_uint8_moments_path((enum dl_codec_path)p, x, n, &m, &s);
        CHECK_MSG(rc == 0, "%s: moments on %s refused", what, dl_codec_path_name((enum dl_codec_path)p));
        double tol_s = want_s * 1e-9, tol_m = fabs(want_m) * 1e-15 + want_s * 1e-9;
        CHECK_MSG(fabs(s - want_s) <= tol_s && fabs(m - want_m) <= tol_m,
                  "%s on %s: mean %.17g sigma %.17g, reference %.17g %.17g", what,
                  dl_codec_path_name((enum dl_codec_path)p), m, s, want_m, want_s);
    }
}

static void test_uint8_moments(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 11);
    size_t n = 131072;
    float *x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = 1e4f + 1e-3f * dl_rng_normal(&rng);
    check_moments(x, n, "mean 1e4, sigma 1e-3");
    for (size_t i = 0; i < n; i++) x[i] = -3e5f + 0.03f * dl_rng_normal(&rng);
    check_moments(x, n, "mean -3e5, sigma 3e-2");
    for (size_t i = 0; i < n; i++) x[i] = 1e-3f * dl_rng_normal(&rng);
    x[0] = 0.3f; /* ~sqrt(n) sigmas out: as far as a chunk's own value can lie */
    check_moments(x, n, "first value 300 sigmas out");
    for (size_t i = 0; i < n; i++) x[i] = 0.1f;
    check_moments(x, n, "constant");
    double m = 1, s = 1;
    CHECK(dl_codec_uint8_moments_path(DL_CODEC_PATH_SCALAR, x, n, &m, &s) == 0 && s == 0 && m == (double)0.1f);
    check_moments(x, 1, "one value");
    free(x);
}

static void test_refusals(void) {
    float x[16], y[16];
    for (int i = 0; i < 16; i++) x[i] = (float)i * 0.25f;
    uint8_t buf[2048];
    for (int codec = 0; codec <= 2; codec++) {
        /* Finite values at or past 2^32 are refused like NaN: a single 3e38
         * would take over a plain mean. */
        float bad[6] = {NAN, INFINITY, -INFINITY, FLT_MAX, -3e38f, 0x1p32f};
        for (int b = 0; b < 6; b++) {
            x[5] = bad[b];
            CHECK_MSG(dl_codec_encode(codec, x, 16, buf) == -1 && strstr(dl_error(), "value 5"),
                      "%s accepted a non-finite input: %s", dl_codec_name(codec), dl_error());
        }
        x[5] = 1.25f;
        CHECK_OK(dl_codec_encode(codec, x, 16, buf));
        size_t size = dl_codec_size(codec, 16);
        CHECK(dl_codec_decode(codec, buf, size - 1, 16, y) == -1 && strstr(dl_error(), "bytes"));
        CHECK(dl_codec_decode(codec, buf, size + 1, 16, y) == -1);
        CHECK(dl_codec_decode(codec, buf, size, 15, y) == -1);
    }
    CHECK(dl_codec_encode(5, x, 16, buf) == -1);
    CHECK(dl_codec_decode(5, buf, 0, 0, y) == -1);
    /* Non-finite values planted in encoded chunks. */
    float nan = NAN, inf = INFINITY;
    CHECK_OK(dl_codec_encode(DL_CODEC_NONE, x, 16, buf));
    memcpy(buf + 12, &nan, 4);
    CHECK(dl_codec_decode(DL_CODEC_NONE, buf, 64, 16, y) == -1);
    /* A huge finite value planted where the vector path checks 32 at a time
     * (index 40 of 64) and in the scalar tail (index 70). */
    float wide[72], out[72], huge = 3e38f;
    uint8_t wbuf[4 * 72];
    for (int i = 0; i < 72; i++) wide[i] = (float)i;
    for (int at = 40; at <= 70; at += 30) {
        CHECK_OK(dl_codec_encode(DL_CODEC_NONE, wide, 72, wbuf));
        memcpy(wbuf + 4 * at, &huge, 4);
        CHECK_MSG(dl_codec_decode(DL_CODEC_NONE, wbuf, sizeof wbuf, 72, out) == -1 && strstr(dl_error(), "2^32"),
                  "a decoded 3e38 at %d: %s", at, dl_error());
        double acc[72] = {0};
        CHECK(dl_codec_decode_accumulate(DL_CODEC_NONE, wbuf, sizeof wbuf, 72, 1.0, acc) == -1 && acc[0] == 0);
    }
    CHECK_OK(dl_codec_encode(DL_CODEC_UINT8, x, 16, buf));
    memcpy(buf + 4 * 3, &huge, 4); /* a codebook entry */
    CHECK(dl_codec_decode(DL_CODEC_UINT8, buf, 1024 + 16, 16, y) == -1 && strstr(dl_error(), "codebook"));
    CHECK_OK(dl_codec_encode(DL_CODEC_FP16, x, 16, buf));
    buf[6] = 0x00, buf[7] = 0x7c; /* +Inf */
    CHECK(dl_codec_decode(DL_CODEC_FP16, buf, 32, 16, y) == -1);
    buf[6] = 0x01, buf[7] = 0xfe; /* NaN */
    CHECK(dl_codec_decode(DL_CODEC_FP16, buf, 32, 16, y) == -1);
    CHECK_OK(dl_codec_encode(DL_CODEC_UINT8, x, 16, buf));
    memcpy(buf + 4 * 200, &inf, 4); /* an unused codebook entry still refuses */
    CHECK(dl_codec_decode(DL_CODEC_UINT8, buf, 1024 + 16, 16, y) == -1 && strstr(dl_error(), "codebook"));

    /* Random garbage: refused or decoded to finite values, never a crash. */
    dl_rng rng;
    dl_rng_seed(&rng, 4);
    int finite_ok = 1;
    uint8_t junk[1024 + 64];
    for (int rep = 0; rep < 3000; rep++) {
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)dl_rng_next(&rng);
        int codec = rep % 3;
        size_t n = codec == DL_CODEC_UINT8 ? 64 : codec == DL_CODEC_FP16 ? 544 : 272;
        if (dl_codec_decode(codec, junk, sizeof junk, n, (float[544]){0}) == 0) {
            float out[544];
            dl_codec_decode(codec, junk, sizeof junk, n, out);
            for (size_t i = 0; i < n; i++) finite_ok &= isfinite(out[i]) != 0;
        }
    }
    CHECK(finite_ok);
}

int main(void) {
    test_names_and_sizes();
    test_none();
    test_fp16();
    test_uint8();
    test_uint8_moments();
    test_refusals();
    return dl_test_finish("test_collab_codec");
}
