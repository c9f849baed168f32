/* device: fp16 compute around GEMMs (dl_half_gemm) against a host reference
 * written from the definition: A and B rounded to half (util's
 * dl_f32_to_f16), their product summed in double, rounded to half, then
 * added to beta * C in fp32. Emulated on every device; natively (Hgemm, with
 * a looser bound for its half accumulation) where cl_khr_fp16 is reported,
 * and refused with a message naming cl_khr_fp16 elsewhere. The cases are
 * attention's shape: an outer batch around a strided batch whose C blocks
 * leave gaps, which are poisoned and must come back untouched. */
#include <stdint.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { POISON = 0x7fc0dead };

static dl_rng rng;

static float uniform_pm1(void) { return 2.0f * dl_rng_uniform(&rng) - 1.0f; }
static float to_half(float v) { return dl_f16_to_f32(dl_f32_to_f16(v)); }

typedef struct half_case {
    size_t m, n, k, batch, outer;
    bool trans_a, trans_b, prepared_b;
    float beta;
} half_case;

/* Returns the number of elements off. Emulated: within one half ulp of the
 * product (the double sum's rounding or its neighbour). Native: Hgemm also
 * rounds each of its k partial sums to half, so k * 2^-11 * sum |x y| more. */
static int run_case(dl_half_gemm *h, dl_device *dev, const half_case *hc) {
    bool native = !dl_half_gemm_emulated(h);
    size_t m = hc->m, n = hc->n, k = hc->k, batch = hc->batch, outer = hc->outer;
    size_t a_rows = hc->trans_a ? k : m, a_cols = hc->trans_a ? m : k;
    size_t b_rows = hc->trans_b ? n : k, b_cols = hc->trans_b ? k : n;
    size_t lda = a_cols + 1, ldb = b_cols + 2, ldc = n + 3;
    size_t a_off = 2, b_off = 3, c_off = 5;
    size_t a_stride = a_rows * lda + 1, b_stride = b_rows * ldb, c_stride = m * ldc + 4;
    size_t a_outer = batch * a_stride + 2, b_outer = batch * b_stride + 1, c_outer = batch * c_stride + 6;
    size_t a_len = a_off + outer * a_outer, b_len = b_off + outer * b_outer, c_len = c_off + outer * c_outer;
    float *a = malloc(a_len * 4), *b = malloc(b_len * 4), *c = malloc(c_len * 4), *got = malloc(c_len * 4);
    if (!a || !b || !c || !got) {
        CHECK(!"out of memory");
        free(a), free(b), free(c), free(got);
        return 1;
    }
    for (size_t i = 0; i < a_len; i++) a[i] = uniform_pm1();
    for (size_t i = 0; i < b_len; i++) b[i] = uniform_pm1();
    uint32_t poison = POISON;
    for (size_t i = 0; i < c_len; i++) memcpy(&c[i], &poison, 4);
    bool *written = calloc(c_len, 1);
    for (size_t o = 0; o < outer; o++)
        for (size_t t = 0; t < batch; t++)
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    size_t e = c_off + o * c_outer + t * c_stride + r * ldc + j;
                    c[e] = uniform_pm1();
                    if (written) written[e] = true;
                }
    dl_buffer da = {0}, db = {0}, dc = {0}, prepared = {0};
    CHECK_OK(dl_buffer_alloc(dev, a_len * 4, &da));
    CHECK_OK(dl_buffer_alloc(dev, b_len * 4, &db));
    CHECK_OK(dl_buffer_alloc(dev, c_len * 4, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, a_len * 4));
    CHECK_OK(dl_buffer_upload(dev, &db, 0, b, b_len * 4));
    CHECK_OK(dl_buffer_upload(dev, &dc, 0, c, c_len * 4));
    if (hc->prepared_b) CHECK_OK(dl_half_gemm_operand(h, &db, 0, b_len, &prepared));
    dl_gemm_args g = {.trans_a = hc->trans_a, .trans_b = hc->trans_b, .m = m, .n = n, .k = k,
                      .alpha = 1.0f, .beta = hc->beta, .a = &da, .a_off = a_off, .lda = lda,
                      .b = &db, .b_off = b_off, .ldb = ldb, .c = &dc, .c_off = c_off, .ldc = ldc,
                      .batch_count = batch, .a_stride = a_stride, .b_stride = b_stride,
                      .c_stride = c_stride, .outer_count = outer, .a_outer = a_outer,
                      .b_outer = b_outer, .c_outer = c_outer};
    CHECK_OK(dl_half_gemm_run(h, &g, hc->prepared_b ? &prepared : NULL));
    CHECK_OK(dl_buffer_download(dev, &dc, 0, got, c_len * 4));
    int bad = 0;
    for (size_t o = 0; o < outer; o++)
        for (size_t t = 0; t < batch; t++) {
            const float *ai = a + a_off + o * a_outer + t * a_stride;
            const float *bi = b + b_off + o * b_outer + t * b_stride;
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    double sum = 0, sum_abs = 0;
                    for (size_t q = 0; q < k; q++) {
                        float x = hc->trans_a ? ai[q * lda + r] : ai[r * lda + q];
                        float y = hc->trans_b ? bi[j * ldb + q] : bi[q * ldb + j];
                        sum += (double)to_half(x) * (double)to_half(y);
                        sum_abs += fabs((double)to_half(x) * (double)to_half(y));
                    }
                    float p = to_half((float)sum);
                    size_t e = c_off + o * c_outer + t * c_stride + r * ldc + j;
                    float want = hc->beta == 0.0f ? p : p + hc->beta * c[e];
                    /* one half ulp of p: 2^-10 relative, 2^-24 absolute near 0 */
                    double ulp = fmax(fabs((double)p) / 1024.0, 0x1p-24);
                    double bound = ulp + 1e-6 * fabs((double)want) +
                                   (native ? (double)k * 0x1p-11 * sum_abs : 0.0);
                    if (!(fabs((double)got[e] - want) <= bound)) {
                        if (bad < 5)
                            printf("item (%zu, %zu) [%zu, %zu]: got %.9g want %.9g\n", o, t, r, j,
                                   got[e], want);
                        bad++;
                    }
                    /* with beta 0 the result is the half product itself */
                    if (hc->beta == 0.0f && to_half(got[e]) != got[e]) bad++;
                }
        }
    for (size_t i = 0; i < c_len; i++)
        if (written && !written[i] && memcmp(&got[i], &poison, 4)) {
            if (bad < 5) printf("element %zu outside the product changed\n", i);
            bad++;
        }
    if (prepared.mem) dl_buffer_free(dev, &prepared);
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
    free(a), free(b), free(c), free(got), free(written);
    return bad;
}

static void run_all(dl_half_gemm *h, dl_device *dev) {
    const half_case cases[] = {
        /* attention's Q K^T and P V over (sequence, head), accumulate off */
        {17, 17, 8, 3, 2, false, true, false, 0.0f},
        {17, 8, 17, 3, 2, false, false, false, 0.0f},
        /* a Linear's dW (A^T, accumulating into gradients) and dx (prepared weights) */
        {9, 11, 33, 1, 1, true, false, false, 1.0f},
        {33, 11, 9, 1, 1, false, false, true, 1.0f},
        {33, 11, 9, 1, 1, false, true, true, 0.0f},
        {5, 7, 300, 2, 1, true, true, false, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int bad = run_case(h, dev, &cases[i]);
        CHECK_MSG(bad == 0, "%s case %zu: %d elements off", dl_half_gemm_emulated(h) ? "emulated" : "native",
                  i, bad);
    }
}

/* Values past half's range overflow to Inf in the product, as Hgemm's would:
 * the loss scaler then drops the micro-batch. */
static void test_overflow(dl_half_gemm *h, dl_device *dev) {
    float a[4] = {300, 300, 300, 300}, b[4] = {300, 300, 300, 300}, c[4] = {0};
    dl_buffer da, db, dc;
    CHECK_OK(dl_buffer_alloc(dev, sizeof a, &da));
    CHECK_OK(dl_buffer_alloc(dev, sizeof b, &db));
    CHECK_OK(dl_buffer_alloc(dev, sizeof c, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, sizeof a));
    CHECK_OK(dl_buffer_upload(dev, &db, 0, b, sizeof b));
    CHECK_OK(dl_buffer_upload(dev, &dc, 0, c, sizeof c));
    dl_gemm_args g = {.m = 2, .n = 2, .k = 2, .alpha = 1, .beta = 1, .a = &da, .lda = 2, .b = &db,
                      .ldb = 2, .c = &dc, .ldc = 2, .batch_count = 1};
    CHECK_OK(dl_half_gemm_run(h, &g, NULL));
    CHECK_OK(dl_buffer_download(dev, &dc, 0, c, sizeof c));
    for (int i = 0; i < 4; i++) CHECK_MSG(isinf(c[i]) && c[i] > 0, "c[%d] = %g, want +Inf", i, c[i]);
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
}

int main(void) {
    dl_rng_seed(&rng, 20261130);
    dl_device *dev = NULL;
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &dev));
    if (!dev) return dl_test_finish("test_gemm_half");
    const dl_device_info *info = dl_device_get_info(dev);
    printf("device %s, cl_khr_fp16 %s, GEMM backend %s\n", info->name, info->fp16 ? "yes" : "no",
           dl_gemm_backend_name(dl_device_gemm_backend(dev)));
    dl_half_gemm *h = NULL;
    CHECK_OK(dl_half_gemm_create(dev, true, &h));
    if (h) {
        CHECK(dl_half_gemm_emulated(h) && dl_half_gemm_element_size(h) == 4);
        run_all(h, dev);
        test_overflow(h, dev);
        dl_half_gemm_free(h);
        h = NULL;
    }
    int rc = dl_half_gemm_create(dev, false, &h);
    if (!info->fp16) {
        CHECK(rc == -1 && h == NULL);
        CHECK_MSG(strstr(dl_error(), "cl_khr_fp16") != NULL, "refusal: %s", dl_error());
    } else {
        CHECK_OK(rc);
        if (h) run_all(h, dev);
        if (h) test_overflow(h, dev);
    }
    dl_half_gemm_free(h);
    dl_device_close(dev);
    return dl_test_finish("test_gemm_half");
}
