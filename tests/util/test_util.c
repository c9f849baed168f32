/* util: fp16/bf16 conversion, hashing, rng, atomic files, errors. */
#include <stdint.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dl_test.h"

static void test_half(void) {
    /* exact values round-trip */
    const float exact[] = {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        CHECK(dl_f16_to_f32(dl_f32_to_f16(exact[i])) == exact[i]);
    CHECK(dl_f32_to_f16(1.0f) == 0x3c00);
    CHECK(dl_f32_to_f16(-2.0f) == 0xc000);
    CHECK(dl_f32_to_f16(65520.0f) == 0x7c00);           /* rounds to Inf */
    CHECK(dl_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie to even */
    CHECK(dl_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02); /* tie to even, up */
    CHECK(isnan(dl_f16_to_f32(dl_f32_to_f16(NAN))));
    CHECK(isinf(dl_f16_to_f32(dl_f32_to_f16(INFINITY))));
    /* every half value round-trips exactly through float */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dl_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (dl_f32_to_f16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d half values do not round-trip", bad);
    CHECK(dl_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(dl_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(dl_f32_to_bf16(1.00390625f) == 0x3f80); /* tie to even */
    CHECK(isnan(dl_bf16_to_f32(dl_f32_to_bf16(NAN))));
}

/* Reference values from scripts/util_reference_values.py, which computes them
 * without dedloc's code: xxh64 from the xxHash project's Python bindings
 * (xxhash 4.1.0 from PyPI), dl_rng from its own Python implementation of
 * splitmix64 + xoshiro256**:
 *   $REFENV/bin/python scripts/util_reference_values.py
 * xxh64("", seed 0) = 0xef46db3751d8e999 and xxh64("abc", 0) =
 * 0x44bc2cf5ad770999 are also the xxHash project's published values. */
static const struct {
    size_t len;
    uint64_t seed, xxh64;
} xxh64_vectors[] = {
    {0, 0x0ull, 0xef46db3751d8e999ull},    /* "" */
    {0, 0x1ull, 0xd5afba1336a3be4bull},    /* "", seed 1 */
    {1, 0x0ull, 0xd24ec4f1a98c6e5bull},    /* "a" */
    {3, 0x0ull, 0x44bc2cf5ad770999ull},    /* "abc" */
    {3, 0x9e3779b97f4a7c15ull, 0x2ed0f59d6b43ac8bull}, /* "abc", seed 0x9e3779b97f4a7c15 */
    {31, 0x0ull, 0xa2aa5f33cc4a6119ull},   /* pattern(31) */
    {32, 0x0ull, 0x23c3c17ef790fd97ull},   /* pattern(32) */
    {33, 0x7ull, 0x97e8c13707136565ull},   /* pattern(33), seed 7 */
    {1000, 0x0ull, 0x5f235fa033f1a3fbull}, /* pattern(1000) */
    {1000, 0x75bcd15ull, 0x716e35557ae862d5ull}, /* pattern(1000), seed 123456789 */
};

static void test_hash(void) {
    /* the short vectors hash text, the long ones the pattern (i * 7 + 3) mod 256 */
    static const char *const text[] = {"", "", "a", "abc", "abc"};
    uint8_t pattern[1000];
    for (int i = 0; i < 1000; i++) pattern[i] = (uint8_t)(i * 7 + 3);
    for (size_t v = 0; v < sizeof xxh64_vectors / sizeof *xxh64_vectors; v++) {
        const void *data = v < 5 ? (const void *)text[v] : (const void *)pattern;
        uint64_t got = dl_hash64(data, xxh64_vectors[v].len, xxh64_vectors[v].seed);
        CHECK_MSG(got == xxh64_vectors[v].xxh64, "vector %zu: %016llx, expected %016llx", v,
                  (unsigned long long)got, (unsigned long long)xxh64_vectors[v].xxh64);
    }
    char hex[17];
    dl_hash64_hex(0x0123456789abcdefull, hex);
    CHECK(!strcmp(hex, "0123456789abcdef"));
    dl_hash64_hex(0xef46db3751d8e999ull, hex);
    CHECK(!strcmp(hex, "ef46db3751d8e999"));
}

static void test_rng(void) {
    /* Seeding: the state is four splitmix64 outputs. Its first output from
     * seed 0, 0xe220a8397b1dcdaf, is the value the algorithm's reference
     * (splitmix64.c) gives. */
    dl_rng r;
    dl_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafull);
    static const uint64_t next0[6] = {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull,
                                      0x6aa594f1262d2d2cull, 0xbba5ad4a1f842e59ull, 0xffef8375d9ebcacaull};
    static const uint64_t next42[6] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull,
                                       0xecb8ad4703b360a1ull, 0xfde6dc7fe2ec5e64ull, 0xc50da53101795238ull};
    int bad = 0;
    for (int i = 0; i < 6; i++) bad += dl_rng_next(&r) != next0[i];
    dl_rng_seed(&r, 42);
    for (int i = 0; i < 6; i++) bad += dl_rng_next(&r) != next42[i];
    CHECK_MSG(bad == 0, "%d xoshiro256** outputs differ from the reference", bad);
    /* uniform, below and normal on top of it (seed 7, in that order) */
    static const float uniform7[4] = {0.7005764245986938f, 0.2787511944770813f, 0.8396274447441101f,
                                      0.9810976982116699f};
    static const uint64_t below7[4] = {664, 721, 716, 196};
    static const float normal7[4] = {0.779201388f, -0.126007661f, 0.260004759f, -1.17008495f};
    dl_rng_seed(&r, 7);
    for (int i = 0; i < 4; i++) CHECK(dl_rng_uniform(&r) == uniform7[i]);
    for (int i = 0; i < 4; i++) CHECK(dl_rng_below(&r, 1000) == below7[i]);
    /* log and cos may differ in the last bit between C libraries */
    for (int i = 0; i < 4; i++) {
        float x = dl_rng_normal(&r);
        CHECK_MSG(fabsf(x - normal7[i]) <= 1e-6f * (1 + fabsf(normal7[i])), "normal %d: %.9g vs %.9g", i,
                  x, normal7[i]);
    }
    /* statistics over many draws: standard normal, below() in range and even */
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float x = dl_rng_normal(&r);
        sum += x;
        sq += (double)x * x;
    }
    CHECK(fabs(sum / 100000) < 0.02);
    CHECK(fabs(sq / 100000 - 1.0) < 0.03);
    int counts[7] = {0}, in_range = 1;
    for (int i = 0; i < 70000; i++) {
        uint64_t k = dl_rng_below(&r, 7);
        in_range &= k < 7;
        if (k < 7) counts[k]++;
    }
    CHECK(in_range);
    for (int k = 0; k < 7; k++) CHECK_MSG(abs(counts[k] - 10000) < 500, "below(7) = %d: %d times", k, counts[k]);
}

static void test_files(void) {
    char dir[] = "/tmp/dedloc-test-util-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/a/b/c.bin", dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    CHECK_OK(dl_mkdirs(sub));
    CHECK_OK(dl_write_file_atomic(path, "hello", 5));
    char *data;
    size_t size;
    CHECK_OK(dl_read_file(path, 100, &data, &size));
    CHECK(size == 5 && !memcmp(data, "hello", 5) && data[5] == 0);
    free(data);
    CHECK(dl_read_file(path, 4, &data, &size) == -1);
    CHECK(strstr(dl_error(), "more than") != NULL);
    CHECK(dl_read_file("/nonexistent/x", 4, &data, &size) == -1);
    CHECK(strstr(dl_error(), "/nonexistent/x") != NULL);
    dl_fail("inner");
    dl_fail_context("outer %d", 1);
    CHECK(!strcmp(dl_error(), "outer 1: inner"));
    CHECK(dl_mul_size(SIZE_MAX / 2, 3) == SIZE_MAX);
    unlink(path);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/a", dir);
    rmdir(sub);
    CHECK(rmdir(dir) == 0); /* nothing else left behind */
}

int main(void) {
    test_half();
    test_hash();
    test_rng();
    test_files();
    return dl_test_finish("test_util");
}
