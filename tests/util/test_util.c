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

static void test_rng_hash(void) {
    dl_rng a, b;
    dl_rng_seed(&a, 42);
    dl_rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 1000; i++) same &= dl_rng_next(&a) == dl_rng_next(&b);
    CHECK(same);
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float x = dl_rng_normal(&a);
        sum += x;
        sq += (double)x * x;
    }
    CHECK(fabs(sum / 100000) < 0.02);
    CHECK(fabs(sq / 100000 - 1.0) < 0.03);
    int in_range = 1;
    for (int i = 0; i < 10000; i++) in_range &= dl_rng_below(&a, 7) < 7;
    CHECK(in_range);
    CHECK(dl_hash64("abc", 3, 0) == dl_hash64("abc", 3, 0));
    CHECK(dl_hash64("abc", 3, 0) != dl_hash64("abd", 3, 0));
    /* xxh64("", seed 0) is a published constant */
    CHECK(dl_hash64("", 0, 0) == 0xef46db3751d8e999ull);
    char hex[17];
    dl_hash64_hex(0x0123456789abcdefull, hex);
    CHECK(!strcmp(hex, "0123456789abcdef"));
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
    test_rng_hash();
    test_files();
    return dl_test_finish("test_util");
}
