/* The int8 and topk wire codecs and the sparse fp16 results of a topk round:
 * exact sizes, round-trip bounds (int8 within scale / 2; topk keeps exactly
 * the k largest |x| per block, ties to the lower index, zeros elsewhere),
 * accumulate giving the bits of decode-then-add, every malformed input
 * refused before anything is written, random bytes never crashing, and
 * error feedback over the codecs: (x + r0) = sent + r1 and the sum of what
 * is sent over many syncs of a constant x tracking the sum of x. */
#include <float.h>
#include <stdint.h>

#include "collab/audit.h"
#include "collab/wirecodec.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void fill_normal(float *x, size_t n, uint64_t seed, float scale) {
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) x[i] = dl_rng_normal(&rng) * scale;
}

static void test_names_and_sizes(void) {
    enum dl_codec c = DL_CODEC_COUNT;
    CHECK(dl_codec_from_name("int8", &c) == 0 && c == DL_CODEC_INT8);
    CHECK(dl_codec_from_name("topk", &c) == 0 && c == DL_CODEC_TOPK);
    CHECK(!strcmp(dl_codec_name(DL_CODEC_TOPK), "topk"));
    CHECK(dl_codec_size(DL_CODEC_INT8, 0) == 4 && dl_codec_size(DL_CODEC_INT8, 1000003) == 1000007);
    /* a full block: 2 magnitudes, 64 x (12 + 2) bits */
    CHECK(dl_codec_size(DL_CODEC_TOPK, 4096) == 8 + 112);
    CHECK(dl_codec_size(DL_CODEC_TOPK, 0) == 0);
    CHECK(dl_codec_size(DL_CODEC_TOPK, 1) == 8 + 2);
    CHECK(dl_codec_size(DL_CODEC_TOPK, 65) == 8 + 4); /* keeps 2: 28 bits */
    CHECK(dl_codec_size(DL_CODEC_TOPK, 4097) == 120 + 10);
    CHECK(dl_codec_size(DL_CODEC_TOPK, DL_AVG_CHUNK_ELEMS) == 64 * 120);
    CHECK(dl_codec_topk_keep(4096) == 64 && dl_codec_topk_keep(4095) == 64 && dl_codec_topk_keep(64) == 1 &&
          dl_codec_topk_keep(65) == 2);
    printf("topk: %.4f bits per value on a full chunk; int8: %.4f\n",
           8.0 * (double)dl_codec_size(DL_CODEC_TOPK, DL_AVG_CHUNK_ELEMS) / DL_AVG_CHUNK_ELEMS,
           8.0 * (double)dl_codec_size(DL_CODEC_INT8, DL_AVG_CHUNK_ELEMS) / DL_AVG_CHUNK_ELEMS);
}

static uint8_t *encode(enum dl_codec codec, const float *x, size_t n) {
    size_t size = dl_codec_size(codec, n);
    uint8_t *buf = malloc(size + 1);
    CHECK_MSG(dl_codec_encode(codec, x, n, buf) == 0, "%s encode: %s", dl_codec_name(codec), dl_error());
    return buf;
}

/* ---- int8 ---- */

static void check_int8_roundtrip(const float *x, size_t n, const char *what) {
    uint8_t *buf = encode(DL_CODEC_INT8, x, n);
    float *y = malloc(sizeof(float) * (n ? n : 1)), scale;
    memcpy(&scale, buf, 4);
    CHECK_MSG(dl_codec_decode(DL_CODEC_INT8, buf, 4 + n, n, y) == 0, "%s: %s", what, dl_error());
    float absmax = 0;
    for (size_t i = 0; i < n; i++) absmax = fmaxf(absmax, fabsf(x[i]));
    /* absmax / 127, a step or two below it at the bound (so that 127 x
     * scale stays inside it), the smallest subnormal where it underflows */
    float s0 = absmax / 127.0f > 0 || absmax == 0 ? absmax / 127.0f : FLT_TRUE_MIN;
    CHECK_MSG(scale == s0 || (absmax > 4e9f && scale < s0 && scale >= s0 * (1 - 1e-6f)), "%s: scale %g", what,
              (double)scale);
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)x[i] - (double)y[i]);
        double bound = (double)scale / 2 + 0x1p-24 * fabs((double)y[i]) + 0x1p-150;
        if (err > bound) bad++;
        if (scale > 0 && err / scale > worst) worst = err / scale;
        int8_t code;
        memcpy(&code, buf + 4 + i, 1);
        if (code == -128) bad++;
    }
    CHECK_MSG(bad == 0, "%s: %zu values beyond scale / 2", what, bad);
    printf("int8 %s: %zu values, scale %.3g, worst error %.4f scale\n", what, n, (double)scale, worst);
    /* accumulate: the bits of decode-then-add */
    double *acc = calloc(n ? n : 1, sizeof(double)), *want = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) acc[i] = want[i] = 0.25 * (double)i;
    for (size_t i = 0; i < n; i++) want[i] += 3.0 * (double)y[i];
    CHECK(dl_codec_decode_accumulate(DL_CODEC_INT8, buf, 4 + n, n, 3.0, acc) == 0);
    CHECK_MSG(n == 0 || !memcmp(acc, want, n * sizeof(double)), "%s: accumulate differs from decode", what);
    free(acc);
    free(want);
    free(y);
    free(buf);
}

static void test_int8(void) {
    size_t n = 1000003;
    float *x = malloc(n * sizeof(float));
    fill_normal(x, n, 7, 1e-3f);
    x[5] = -0.0f;
    check_int8_roundtrip(x, n, "normal");
    for (size_t i = 0; i < 1000; i++) x[i] = (float)((int)(i % 255) - 127) * 0.5f; /* on the grid: exact */
    uint8_t *buf = encode(DL_CODEC_INT8, x, 1000);
    float y[1000];
    CHECK(dl_codec_decode(DL_CODEC_INT8, buf, 1004, 1000, y) == 0 && !memcmp(x, y, sizeof y));
    free(buf);
    memset(x, 0, 17 * sizeof(float));
    check_int8_roundtrip(x, 17, "zeros");
    for (size_t i = 0; i < 17; i++) x[i] = (float)i * FLT_TRUE_MIN; /* scale underflows: smallest subnormal */
    check_int8_roundtrip(x, 17, "subnormal");
    check_int8_roundtrip(x, 0, "empty");
    /* at the bound: the largest value inside it still decodes */
    x[0] = 4294967040.0f;
    x[1] = -4294967040.0f;
    x[2] = 1.0f;
    check_int8_roundtrip(x, 17, "at the bound");
    x[3] = NAN;
    CHECK(dl_codec_encode(DL_CODEC_INT8, x, 17, (uint8_t[32]){0}) == -1 && strstr(dl_error(), "value 3"));
    x[3] = 0x1p32f;
    CHECK(dl_codec_encode(DL_CODEC_INT8, x, 17, (uint8_t[32]){0}) == -1 && strstr(dl_error(), "bound"));
    free(x);
}

static void test_int8_malformed(void) {
    float x[100], y[100];
    fill_normal(x, 100, 3, 1.0f);
    uint8_t *good = encode(DL_CODEC_INT8, x, 100), bad[104];
    float poison[100];
    for (int i = 0; i < 100; i++) poison[i] = 12345.0f;
    struct {
        const char *what, *msg;
        float scale;
        int code_at;
    } cases[] = {
        {"-128", "-128", 0, 17},          {"NaN scale", "scale", NAN, -1},
        {"Inf scale", "scale", INFINITY, -1}, {"negative scale", "scale", -0.5f, -1},
        {"-0 scale", "scale", -0.0f, -1}, {"huge scale", "scale", 0x1p26f, -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(bad, good, 104);
        if (cases[c].code_at >= 0) bad[4 + cases[c].code_at] = 0x80;
        else memcpy(bad, &cases[c].scale, 4);
        memcpy(y, poison, sizeof y);
        CHECK_MSG(dl_codec_decode(DL_CODEC_INT8, bad, 104, 100, y) == -1 && strstr(dl_error(), cases[c].msg),
                  "int8 %s: not refused (%s)", cases[c].what, dl_error());
        CHECK_MSG(!memcmp(y, poison, sizeof y), "int8 %s: wrote before refusing", cases[c].what);
        double acc[100] = {0};
        CHECK(dl_codec_decode_accumulate(DL_CODEC_INT8, bad, 104, 100, 1.0, acc) == -1);
        for (int i = 0; i < 100; i++) CHECK(acc[i] == 0);
    }
    CHECK(dl_codec_decode(DL_CODEC_INT8, good, 103, 100, y) == -1 && strstr(dl_error(), "104 bytes"));
    /* a scale whose largest code decodes to 2^32 (127 x scale just below
     * it, rounded up to a float) is refused */
    float over = 33818640.0f; /* 127 x that = 4294967280 -> 2^32 in fp32 */
    memcpy(bad, good, 104);
    memcpy(bad, &over, 4);
    CHECK(dl_codec_decode(DL_CODEC_INT8, bad, 104, 100, y) == -1 && strstr(dl_error(), "scale"));
    /* the largest scale whose codes stay inside the bound decodes */
    float edge = 0x1p32f / 127.0f * 0.999f;
    memcpy(bad, good, 104);
    memcpy(bad, &edge, 4);
    CHECK(dl_codec_decode(DL_CODEC_INT8, bad, 104, 100, y) == 0);
    free(good);
}

/* ---- topk ---- */

/* Checks one encoded vector against its input block by block: exactly the
 * k largest |x| (ties to the lower index) survive with their signs, within
 * half the spread of the kept magnitudes, and everything else is 0. */
static void check_topk(const float *x, size_t n, const char *what) {
    uint8_t *buf = encode(DL_CODEC_TOPK, x, n);
    float *y = malloc(sizeof(float) * (n ? n : 1));
    CHECK_MSG(dl_codec_decode(DL_CODEC_TOPK, buf, dl_codec_size(DL_CODEC_TOPK, n), n, y) == 0, "%s: %s", what,
              dl_error());
    size_t wrong = 0;
    for (size_t start = 0; start < n; start += DL_CODEC_TOPK_BLOCK) {
        size_t len = n - start < DL_CODEC_TOPK_BLOCK ? n - start : DL_CODEC_TOPK_BLOCK;
        size_t keep = dl_codec_topk_keep(len);
        /* the reference selection: rank each value by how many beat it */
        double lo = INFINITY, hi = 0;
        bool *chosen = calloc(len, sizeof(bool));
        for (size_t i = 0; i < len; i++) {
            size_t above = 0;
            double a = fabs((double)x[start + i]);
            for (size_t j = 0; j < len; j++) {
                double b = fabs((double)x[start + j]);
                above += b > a || (b == a && j < i);
            }
            chosen[i] = above < keep;
            if (chosen[i]) {
                lo = fmin(lo, a);
                hi = fmax(hi, a);
            }
        }
        for (size_t i = 0; i < len; i++) {
            float xv = x[start + i], yv = y[start + i];
            if (!chosen[i]) {
                wrong += yv != 0 || signbit(yv);
                continue;
            }
            double err = fabs((double)xv - (double)yv);
            wrong += err > (hi - lo) / 2 + 0x1p-23 * hi || (signbit(xv) != signbit(yv) && yv != 0);
        }
        free(chosen);
    }
    CHECK_MSG(wrong == 0, "topk %s: %zu values not as the reference selection says", what, wrong);
    /* accumulate: the bits of decode-then-add */
    double *acc = calloc(n ? n : 1, sizeof(double)), *want = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) acc[i] = want[i] = (i % 3) ? 0.5 * (double)i : 0.0;
    for (size_t i = 0; i < n; i++) want[i] += 0.75 * (double)y[i];
    CHECK(dl_codec_decode_accumulate(DL_CODEC_TOPK, buf, dl_codec_size(DL_CODEC_TOPK, n), n, 0.75, acc) == 0);
    CHECK_MSG(n == 0 || !memcmp(acc, want, n * sizeof(double)), "topk %s: accumulate differs from decode", what);
    free(acc);
    free(want);
    free(y);
    free(buf);
}

static void test_topk(void) {
    size_t n = 3 * DL_CODEC_TOPK_BLOCK + 1811; /* three full blocks and a short one */
    float *x = malloc(n * sizeof(float));
    fill_normal(x, n, 11, 0.01f);
    check_topk(x, n, "normal");
    /* ties: a block of equal magnitudes keeps its first k */
    for (size_t i = 0; i < n; i++) x[i] = i % 2 ? 0.5f : -0.5f;
    check_topk(x, n, "all tied");
    float y[DL_CODEC_TOPK_BLOCK];
    uint8_t *buf = encode(DL_CODEC_TOPK, x, DL_CODEC_TOPK_BLOCK);
    CHECK(dl_codec_decode(DL_CODEC_TOPK, buf, 120, DL_CODEC_TOPK_BLOCK, y) == 0);
    for (size_t i = 0; i < DL_CODEC_TOPK_BLOCK; i++) CHECK(y[i] == (i < 64 ? x[i] : 0.0f));
    free(buf);
    /* ties at the boundary: 60 large values, then 10 equal ones of which 4 fit */
    memset(x, 0, n * sizeof(float));
    for (size_t i = 0; i < 60; i++) x[4000 - 50 * i] = 1.0f + (float)i;
    for (size_t i = 0; i < 10; i++) x[1 + 7 * i] = -0.25f;
    check_topk(x, DL_CODEC_TOPK_BLOCK, "tied at the boundary");
    buf = encode(DL_CODEC_TOPK, x, DL_CODEC_TOPK_BLOCK);
    CHECK(dl_codec_decode(DL_CODEC_TOPK, buf, 120, DL_CODEC_TOPK_BLOCK, y) == 0);
    for (size_t i = 0; i < 10; i++) CHECK_MSG((y[1 + 7 * i] != 0) == (i < 4), "tied value %zu", i);
    free(buf);
    /* a block of zeros, tiny lengths */
    memset(x, 0, n * sizeof(float));
    check_topk(x, n, "zeros");
    fill_normal(x, n, 12, 3.0f);
    for (size_t len = 1; len < 200; len += 13) check_topk(x, len, "short");
    x[70] = INFINITY;
    CHECK(dl_codec_encode(DL_CODEC_TOPK, x, n, malloc(dl_codec_size(DL_CODEC_TOPK, n))) == -1 &&
          strstr(dl_error(), "value 70"));
    free(x);
}

/* Offsets start after the two magnitudes; bit b of the stream. */
static void set_offset(uint8_t *block, size_t j, unsigned v) {
    for (int b = 0; b < 12; b++) {
        size_t pos = 12 * j + (size_t)b;
        uint8_t *byte = block + 8 + pos / 8;
        *byte = (uint8_t)((*byte & ~(1u << (pos % 8))) | (((v >> b) & 1u) << (pos % 8)));
    }
}

static void test_topk_malformed(void) {
    size_t n = DL_CODEC_TOPK_BLOCK + 100; /* a full block, then one of 100 keeping 2 */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    fill_normal(x, n, 5, 1.0f);
    size_t size = dl_codec_size(DL_CODEC_TOPK, n);
    uint8_t *good = encode(DL_CODEC_TOPK, x, n), *bad = malloc(size);
    uint8_t *second = NULL;
    const char *whats[] = {"offset past a short block", "offsets equal", "offsets decreasing", "NaN magnitude",
                           "negative magnitude", "Inf magnitude", "huge magnitude", "lo above hi", "padding bit"};
    for (int c = 0; c < 9; c++) {
        memcpy(bad, good, size);
        second = bad + 120;
        float v;
        switch (c) {
        case 0: set_offset(second, 1, 100); break; /* the short block holds offsets 0..99 */
        case 1: set_offset(bad, 1, 0), set_offset(bad, 0, 0); break;
        case 2: set_offset(bad, 0, 4000); break;
        case 3: v = NAN, memcpy(bad + 4, &v, 4); break;
        case 4: v = -1.0f, memcpy(bad, &v, 4); break;
        case 5: v = INFINITY, memcpy(bad + 4, &v, 4); break;
        case 6: v = 0x1p33f, memcpy(bad + 4, &v, 4); break;
        case 7: memcpy(&v, bad + 4, 4), v *= 2, memcpy(bad, &v, 4); break;
        case 8: second[8 + 3] |= 0x80; break; /* 2 x 14 bits end in byte 3 at bit 4 */
        }
        for (size_t i = 0; i < n; i++) y[i] = 777.0f;
        CHECK_MSG(dl_codec_decode(DL_CODEC_TOPK, bad, size, n, y) == -1, "topk %s: not refused", whats[c]);
        printf("topk %s: %s\n", whats[c], dl_error());
        bool untouched = true;
        for (size_t i = 0; i < n; i++) untouched &= y[i] == 777.0f;
        CHECK_MSG(untouched, "topk %s: wrote before refusing", whats[c]);
        double *acc = calloc(n, sizeof(double));
        CHECK(dl_codec_decode_accumulate(DL_CODEC_TOPK, bad, size, n, 1.0, acc) == -1);
        for (size_t i = 0; i < n; i++) CHECK(acc[i] == 0);
        free(acc);
    }
    CHECK(dl_codec_decode(DL_CODEC_TOPK, good, size - 1, n, y) == -1 && strstr(dl_error(), "bytes"));
    CHECK(dl_codec_decode(DL_CODEC_TOPK, good, size, n, y) == 0);
    free(good);
    free(bad);
    free(x);
    free(y);
}

/* ---- sparse fp16 results ---- */

static void test_sparse16(void) {
    size_t n = 10007;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
    fill_normal(x, n, 9, 1.0f);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        if (i % 9) x[i] = i % 2 ? 0.0f : -0.0f;
        else nonzero++;
    x[9] = 1e-9f; /* zero in fp16: left out */
    x[18] = 1e6f; /* clamped to 65504 */
    nonzero--;
    size_t size = 0;
    uint8_t *buf = malloc(dl_codec_result_max(DL_CODEC_TOPK, n));
    CHECK(dl_codec_result_encode(DL_CODEC_TOPK, x, n, buf, &size) == 0);
    CHECK_MSG(size == (n + 7) / 8 + 2 * nonzero, "sparse fp16 of %zu non-zeros is %zu bytes", nonzero, size);
    CHECK(dl_codec_result_size(DL_CODEC_TOPK, buf, size, n) == size);
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, buf, size, n, y) == 0);
    uint8_t *dense = encode(DL_CODEC_FP16, x, n);
    CHECK(dl_codec_decode(DL_CODEC_FP16, dense, 2 * n, n, ref) == 0);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += y[i] != ref[i] || (y[i] == 0 && signbit(y[i]));
    CHECK_MSG(differ == 0, "sparse fp16 differs from fp16 in %zu values", differ);
    free(dense);
    /* malformed */
    uint8_t *bad = malloc(size + 2);
    memcpy(bad, buf, size);
    bad[(n + 7) / 8 - 1] |= 0x80; /* bit 10007 of 10008 */
    CHECK(dl_codec_result_size(DL_CODEC_TOPK, bad, size, n) == SIZE_MAX && strstr(dl_error(), "past"));
    memcpy(bad, buf, size);
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, bad, size - 2, n, y) == -1);
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, bad, 100, n, y) == -1 && strstr(dl_error(), "bitmap"));
    memcpy(bad, buf, size);
    bad[(n + 7) / 8] = 0, bad[(n + 7) / 8 + 1] = 0x80; /* the first value: -0 */
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, bad, size, n, y) == -1 && strstr(dl_error(), "zero"));
    bad[(n + 7) / 8 + 1] = 0x7c; /* Inf */
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, bad, size, n, y) == -1 && strstr(dl_error(), "Inf"));
    memcpy(bad, buf, size);
    bad[1] |= 0x02; /* element 9's bit: one value more than the bytes hold */
    CHECK(dl_codec_result_decode(DL_CODEC_TOPK, bad, size, n, y) == -1);
    /* the other codecs' results are their contributions' layout */
    CHECK(dl_codec_result_max(DL_CODEC_INT8, n) == n + 4);
    CHECK(dl_codec_result_size(DL_CODEC_INT8, buf, n + 4, n) == n + 4);
    CHECK(dl_codec_result_size(DL_CODEC_INT8, buf, n + 3, n) == SIZE_MAX);
    free(bad);
    free(buf);
    free(x);
    free(y);
    free(ref);
}

/* ---- random bytes ---- */

static void test_random_bytes(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 99);
    size_t n = 5000, accepted[DL_CODEC_COUNT + 1] = {0};
    float *y = malloc(n * sizeof(float));
    uint8_t *buf = malloc(4 * n + 64);
    double *acc = malloc(n * sizeof(double));
    for (int iter = 0; iter < 3000; iter++) {
        enum dl_codec codec = (enum dl_codec)(iter % (DL_CODEC_COUNT + 1));
        bool result = codec == DL_CODEC_COUNT; /* sparse fp16 */
        size_t len = 1 + (size_t)(dl_rng_next(&rng) % n);
        size_t size = result ? (size_t)(dl_rng_next(&rng) % (3 * len + 8)) : dl_codec_size(codec, len);
        for (size_t i = 0; i < size; i++) buf[i] = (uint8_t)dl_rng_next(&rng);
        /* a share of chunks with plausible structure, so that decoding goes deep */
        if (iter % 3 == 0 && !result && codec == DL_CODEC_INT8) buf[3] = 0x3c;
        if (iter % 3 == 0 && !result && codec == DL_CODEC_TOPK)
            for (size_t b = 0; b + 8 <= size; b += 120) memset(buf + b, 0, 8);
        int rc = result ? dl_codec_result_decode(DL_CODEC_TOPK, buf, size, len, y)
                        : dl_codec_decode(codec, buf, size, len, y);
        if (rc == 0) {
            accepted[codec]++;
            for (size_t i = 0; i < len; i++) CHECK(dl_codec_bounded(y[i]));
        }
        if (!result) {
            memset(acc, 0, len * sizeof(double));
            CHECK(dl_codec_decode_accumulate(codec, buf, size, len, 1.0, acc) == rc);
        }
    }
    printf("random bytes accepted: none %zu fp16 %zu uint8 %zu int8 %zu topk %zu sparse16 %zu\n", accepted[0],
           accepted[1], accepted[2], accepted[3], accepted[4], accepted[5]);
    free(y);
    free(buf);
    free(acc);
}

/* ---- error feedback ---- */

/* One sync of a peer with error feedback, as the outer step does it:
 * v = x + r; sent = what the codec carries of v; r = v - sent. */
static void sync_once(enum dl_codec codec, const float *x, float *r, float *v, float *sent, size_t n, uint8_t *buf) {
    for (size_t i = 0; i < n; i++) v[i] = x[i] + r[i];
    CHECK(dl_codec_encode(codec, v, n, buf) == 0);
    CHECK(dl_codec_decode(codec, buf, dl_codec_size(codec, n), n, sent) == 0);
    for (size_t i = 0; i < n; i++) r[i] = v[i] - sent[i];
}

static void test_error_feedback(void) {
    size_t n = 2 * DL_CODEC_TOPK_BLOCK + 300;
    float *x = malloc(n * sizeof(float)), *r = calloc(n, sizeof(float)), *v = malloc(n * sizeof(float));
    float *sent = malloc(n * sizeof(float));
    double *sum = calloc(n, sizeof(double));
    uint8_t *buf = malloc(dl_codec_size(DL_CODEC_NONE, n));
    /* a few large entries and many small ones: topk alone never sends the small */
    dl_rng rng;
    dl_rng_seed(&rng, 21);
    for (size_t i = 0; i < n; i++) {
        float mag = (i % 97 ? 1e-3f : 1.0f) * (1.0f + dl_rng_uniform(&rng));
        x[i] = dl_rng_next(&rng) & 1 ? -mag : mag;
    }
    enum dl_codec codecs[] = {DL_CODEC_FP16, DL_CODEC_UINT8, DL_CODEC_INT8, DL_CODEC_TOPK};
    for (int c = 0; c < 4; c++) {
        enum dl_codec codec = codecs[c];
        memset(r, 0, n * sizeof(float));
        memset(sum, 0, n * sizeof(double));
        const int syncs = 1000;
        size_t inexact = 0;
        for (int t = 0; t < syncs; t++) {
            float *r0 = malloc(n * sizeof(float));
            memcpy(r0, r, n * sizeof(float));
            sync_once(codec, x, r, v, sent, n, buf);
            /* (x + r0) = sent + r1, up to the float rounding of x + r0 (v is
             * that sum rounded; v - sent is exact when they are close and
             * otherwise one more rounding) */
            for (size_t i = 0; i < n; i++) {
                double lhs = (double)x[i] + (double)r0[i], rhs = (double)sent[i] + (double)r[i];
                inexact += fabs(lhs - rhs) > 0x1p-23 * (fabs(lhs) + fabs((double)sent[i]));
            }
            free(r0);
            for (size_t i = 0; i < n; i++) sum[i] += sent[i];
        }
        CHECK_MSG(inexact == 0, "%s: x + r0 != sent + r1 in %zu places", dl_codec_name(codec), inexact);
        /* The sum of what was sent is syncs x minus the last residual: its
         * mean tracks x, the small entries too. */
        double worst = 0, max_x = 0;
        size_t never = 0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs(sum[i] / syncs - (double)x[i]));
            max_x = fmax(max_x, fabs((double)x[i]));
            never += sum[i] == 0 && x[i] != 0;
        }
        printf("error feedback %s: %d syncs, worst |mean sent - x| %.3g (max |x| %.3g), %zu entries never sent\n",
               dl_codec_name(codec), syncs, worst, max_x, never);
        CHECK_MSG(never == 0, "%s: %zu entries were never sent", dl_codec_name(codec), never);
        CHECK_MSG(worst < 0.02 * max_x, "%s: the mean of what was sent is %.3g from x", dl_codec_name(codec), worst);
    }
    free(x);
    free(r);
    free(v);
    free(sent);
    free(sum);
    free(buf);
}

/* ---- the audit's rounding bounds ---- */

/* What the accountable-aggregation checks allow an aggregator for the
 * rounding of its result (dl_audit_e2_bound) holds for honest int8 and
 * sparse fp16 results, and is not loose by more than a small factor. */
static void test_audit_bounds(void) {
    size_t n = DL_AVG_CHUNK_ELEMS - 5;
    double *v = malloc(n * sizeof(double));
    float *vf = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float));
    uint8_t *buf = malloc(dl_codec_result_max(DL_CODEC_TOPK, n));
    dl_rng rng;
    dl_rng_seed(&rng, 31);
    for (int c = 0; c < 2; c++) {
        enum dl_codec codec = c ? DL_CODEC_TOPK : DL_CODEC_INT8;
        for (size_t i = 0; i < n; i++) {
            v[i] = (double)dl_rng_normal(&rng) * 0.01 + 1e-9 * (double)dl_rng_uniform(&rng);
            if (codec == DL_CODEC_TOPK && i % 29) v[i] = 0; /* a mean of sparse contributions */
            vf[i] = (float)v[i];
        }
        size_t size;
        CHECK(dl_codec_result_encode(codec, vf, n, buf, &size) == 0);
        CHECK(dl_codec_result_decode(codec, buf, size, n, q) == 0);
        double e2 = 0, l2 = 0, linf = 0, lowest = q[0], highest = q[0];
        for (size_t i = 0; i < n; i++) {
            e2 += (v[i] - q[i]) * (v[i] - q[i]);
            l2 += (double)q[i] * q[i];
            linf = fmax(linf, fabs((double)q[i]));
            lowest = fmin(lowest, (double)q[i]);
            highest = fmax(highest, (double)q[i]);
        }
        e2 = sqrt(e2);
        double bound = dl_audit_e2_bound(codec, sqrt(l2), linf, highest - lowest, n);
        printf("audit bound %s: e2 %.4g, bound %.4g (%.2fx)\n", dl_codec_name(codec), e2, bound, bound / e2);
        CHECK_MSG(e2 <= bound && bound < 8 * e2, "%s: e2 %g against the bound %g", dl_codec_name(codec), e2, bound);
    }
    free(v);
    free(vf);
    free(q);
    free(buf);
}

int main(void) {
    test_audit_bounds();
    test_names_and_sizes();
    test_int8();
    test_int8_malformed();
    test_topk();
    test_topk_malformed();
    test_sparse16();
    test_random_bytes();
    test_error_feedback();
    return dl_test_finish("test_collab_codec_sparse");
}
