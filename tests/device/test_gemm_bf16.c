/* device: bf16 compute of fp32 GEMMs (dl_bf16_gemm) against references
 * written from the definition, on odd shapes, every transpose pair, padded
 * leading dimensions, offsets, alpha and beta, and weights rounded once.
 *
 * Tolerances, with u = 2^-9 the unit roundoff of bf16 (8 significant bits)
 * and e = 2^-24 fp32's, and S = |alpha| sum_q |a_q b_q|:
 * - against the exact fp32 product: each operand is off by at most u
 *   relative, their product by 2u + u^2, the fp32 sum of k terms by k e S
 *   more: |got - want| <= (2u + u^2 + (k + 2) e) S + 2e |beta c|;
 * - against the product of the bf16-rounded operands (util's
 *   dl_f32_to_bf16, round to nearest even), only fp32 accumulation remains:
 *   (k + 2) e S + 2e |beta c|. This one fails if the operands were rounded
 *   any other way or not at all, and either fails for a wrong transpose;
 * - most elements must sit farther from the unrounded product than fp32
 *   arithmetic could, (k + 2) e S: the product really ran in bf16.
 * Elements of C outside the product (padding) are poisoned and must come
 * back untouched.
 *
 * Where bf16 compute is impossible (no oneDNN, no AVX512-BF16: run with
 * DNNL_MAX_CPU_ISA=AVX512_CORE), dl_bf16_gemm_create must refuse with the
 * reason, and the test checks only that. */
#include <math.h>
#include <stdint.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { POISON = 0x7fc0dead };

static dl_rng rng;

static float uniform_pm1(void) { return 2.0f * dl_rng_uniform(&rng) - 1.0f; }
static double to_bf16(float v) { return (double)dl_bf16_to_f32(dl_f32_to_bf16(v)); }

typedef struct bf16_case {
    size_t m, n, k;
    bool trans_a, trans_b, weights;
    float alpha, beta;
} bf16_case;

typedef struct case_result {
    int off_exact, off_rounded, poisoned, near_fp32, elements;
} case_result;

static case_result run_case(dl_bf16_gemm *h, dl_device *dev, const bf16_case *bc) {
    case_result res = {0};
    size_t m = bc->m, n = bc->n, k = bc->k;
    size_t a_rows = bc->trans_a ? k : m, a_cols = bc->trans_a ? m : k;
    size_t b_rows = bc->trans_b ? n : k, b_cols = bc->trans_b ? k : n;
    size_t lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
    size_t a_off = 5, b_off = 7, c_off = 3;
    size_t a_len = a_off + a_rows * lda, b_len = b_off + b_rows * ldb + 4, c_len = c_off + m * ldc + 1;
    float *a = malloc(a_len * 4), *b = malloc(b_len * 4), *c = malloc(c_len * 4), *got = malloc(c_len * 4);
    bool *inside = calloc(c_len, 1);
    if (!a || !b || !c || !got || !inside) {
        CHECK(!"out of memory");
        free(a), free(b), free(c), free(got), free(inside);
        res.off_exact = 1;
        return res;
    }
    for (size_t i = 0; i < a_len; i++) a[i] = uniform_pm1();
    for (size_t i = 0; i < b_len; i++) b[i] = uniform_pm1();
    uint32_t poison = POISON;
    for (size_t i = 0; i < c_len; i++) memcpy(&c[i], &poison, 4);
    for (size_t r = 0; r < m; r++)
        for (size_t j = 0; j < n; j++) {
            c[c_off + r * ldc + j] = uniform_pm1();
            inside[c_off + r * ldc + j] = true;
        }
    dl_buffer da = {0}, db = {0}, dc = {0};
    CHECK_OK(dl_buffer_alloc(dev, a_len * 4, &da));
    CHECK_OK(dl_buffer_alloc(dev, b_len * 4, &db));
    CHECK_OK(dl_buffer_alloc(dev, c_len * 4, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, a_len * 4));
    CHECK_OK(dl_buffer_upload(dev, &db, 0, b, b_len * 4));
    CHECK_OK(dl_buffer_upload(dev, &dc, 0, c, c_len * 4));
    if (bc->weights) CHECK_OK(dl_bf16_gemm_set_weights(h, b, b_len));
    dl_gemm_args g = {.trans_a = bc->trans_a, .trans_b = bc->trans_b, .m = m, .n = n, .k = k,
                      .alpha = bc->alpha, .beta = bc->beta, .a = &da, .a_off = a_off, .lda = lda,
                      .b = &db, .b_off = b_off, .ldb = ldb, .c = &dc, .c_off = c_off, .ldc = ldc,
                      .batch_count = 1};
    CHECK_OK(dl_bf16_gemm_run(h, &g, bc->weights));
    CHECK_OK(dl_buffer_download(dev, &dc, 0, got, c_len * 4));
    const double u = 0x1p-9, e = 0x1p-24;
    for (size_t r = 0; r < m; r++)
        for (size_t j = 0; j < n; j++) {
            double exact = 0, rounded = 0, sum_abs = 0;
            for (size_t q = 0; q < k; q++) {
                float x = bc->trans_a ? a[a_off + q * lda + r] : a[a_off + r * lda + q];
                float y = bc->trans_b ? b[b_off + j * ldb + q] : b[b_off + q * ldb + j];
                exact += (double)x * (double)y;
                rounded += to_bf16(x) * to_bf16(y);
                sum_abs += fabs((double)x * (double)y);
            }
            size_t el = c_off + r * ldc + j;
            double c0 = bc->beta == 0.0f ? 0.0 : (double)bc->beta * (double)c[el];
            double s = fabs((double)bc->alpha) * sum_abs, fp32_err = (double)(k + 2) * e * s + 2 * e * fabs(c0);
            double want_exact = (double)bc->alpha * exact + c0, want_rounded = (double)bc->alpha * rounded + c0;
            double diff_exact = fabs((double)got[el] - want_exact);
            if (!(diff_exact <= (2 * u + u * u) * s + fp32_err)) {
                if (res.off_exact < 3)
                    printf("  [%zu, %zu]: got %.9g, exact %.9g (off %.3g, bound %.3g)\n", r, j, got[el],
                           want_exact, diff_exact, (2 * u + u * u) * s + fp32_err);
                res.off_exact++;
            }
            if (!(fabs((double)got[el] - want_rounded) <= fp32_err)) {
                if (res.off_rounded < 3)
                    printf("  [%zu, %zu]: got %.9g, bf16 operands give %.9g (bound %.3g)\n", r, j, got[el],
                           want_rounded, fp32_err);
                res.off_rounded++;
            }
            if (diff_exact <= fp32_err) res.near_fp32++;
            res.elements++;
        }
    for (size_t i = 0; i < c_len; i++) {
        uint32_t bits;
        memcpy(&bits, &got[i], 4);
        if (!inside[i] && bits != poison) res.poisoned++;
    }
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
    free(a), free(b), free(c), free(got), free(inside);
    return res;
}

static void run_all(dl_bf16_gemm *h, dl_device *dev) {
    const bf16_case cases[] = {
        /* a Linear's forward (weights [out, in] transposed), dW (A^T,
         * accumulating into gradients), dx (weights as they are) */
        {37, 29, 53, false, true, true, 1.0f, 0.0f},
        {29, 53, 37, true, false, false, 1.0f, 1.0f},
        {37, 53, 29, false, false, true, 1.0f, 1.0f},
        /* the other transposes, alpha and beta not 1, a long sum */
        {19, 23, 301, true, true, false, 0.5f, -0.75f},
        {64, 96, 128, false, true, false, 2.0f, 0.0f},
        {1, 17, 9, false, false, false, 1.0f, 0.0f},
        /* past gemm_bf16.c's one-thread limit (2^28 flops): oneDNN's threads */
        {515, 521, 517, false, true, true, 1.0f, 1.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bf16_case *bc = &cases[i];
        case_result r = run_case(h, dev, bc);
        printf("case %zu: %zux%zux%zu%s%s%s alpha %g beta %g: %d/%d near fp32, off %d (exact) %d (bf16 "
               "operands), %d padding changed\n",
               i, bc->m, bc->n, bc->k, bc->trans_a ? " A^T" : "", bc->trans_b ? " B^T" : "",
               bc->weights ? " weights" : "", bc->alpha, bc->beta, r.near_fp32, r.elements, r.off_exact,
               r.off_rounded, r.poisoned);
        CHECK_MSG(r.off_exact == 0 && r.off_rounded == 0 && r.poisoned == 0, "case %zu: elements off", i);
        /* fp32 arithmetic would put every element within that bound; bf16
         * operands put most outside (a fifth inside at k = 517, where the
         * worst-case fp32 bound has grown with k) */
        CHECK_MSG(r.near_fp32 * 2 < r.elements, "case %zu: %d of %d elements as close as fp32 would be",
                  i, r.near_fp32, r.elements);
    }
}

/* Batched products are attention's: they run in fp32 through dl_gemm. */
static void test_batched_fp32(dl_bf16_gemm *h, dl_device *dev) {
    float a[2 * 2 * 3], b[2 * 3 * 2], c[2 * 2 * 2] = {0};
    for (int i = 0; i < 12; i++) a[i] = 1.0f + 0x1p-12f * (float)(i + 1);
    for (int i = 0; i < 12; i++) b[i] = 1.0f - 0x1p-13f * (float)(i + 1);
    dl_buffer da, db, dc;
    CHECK_OK(dl_buffer_alloc(dev, sizeof a, &da));
    CHECK_OK(dl_buffer_alloc(dev, sizeof b, &db));
    CHECK_OK(dl_buffer_alloc(dev, sizeof c, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, sizeof a));
    CHECK_OK(dl_buffer_upload(dev, &db, 0, b, sizeof b));
    CHECK_OK(dl_buffer_upload(dev, &dc, 0, c, sizeof c));
    dl_gemm_args g = {.m = 2, .n = 2, .k = 3, .alpha = 1, .a = &da, .lda = 3, .b = &db, .ldb = 2, .c = &dc,
                      .ldc = 2, .batch_count = 2, .a_stride = 6, .b_stride = 6, .c_stride = 4};
    CHECK_OK(dl_bf16_gemm_run(h, &g, false));
    CHECK_OK(dl_buffer_download(dev, &dc, 0, c, sizeof c));
    int off = 0;
    for (int t = 0; t < 2; t++)
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 2; j++) {
                double want = 0;
                for (int q = 0; q < 3; q++) want += (double)a[t * 6 + r * 3 + q] * (double)b[t * 6 + q * 2 + j];
                /* bf16 operands would all be 1: the sum 3 */
                if (fabs((double)c[t * 4 + r * 2 + j] - want) > 1e-6) off++;
            }
    CHECK_MSG(off == 0, "batched product: %d elements not the fp32 result", off);
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
}

int main(void) {
    dl_rng_seed(&rng, 20261201);
    dl_device *dev = NULL;
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &dev));
    if (!dev) return dl_test_finish("test_gemm_bf16");
    char why[256] = "";
    bool supported = dl_bf16_gemm_supported(dev, why, sizeof why);
    printf("device %s, GEMM backend %s, bf16 compute %s%s\n", dl_device_get_info(dev)->name,
           dl_gemm_backend_name(dl_device_gemm_backend(dev)), supported ? "yes" : "no: ", why);
    dl_bf16_gemm *h = NULL;
    int rc = dl_bf16_gemm_create(dev, &h);
    if (!supported) {
        CHECK(rc == -1 && h == NULL);
        CHECK_MSG(strstr(dl_error(), why) != NULL, "refusal: %s", dl_error());
    } else {
        CHECK_OK(rc);
        if (h) run_all(h, dev);
        if (h) test_batched_fp32(h, dev);
    }
    dl_bf16_gemm_free(h);
    dl_device_close(dev);
    return dl_test_finish("test_gemm_bf16");
}
