/* device: dl_gemm against a double-precision host reference on random
 * non-zero data: odd sizes, every transpose pair, non-zero offsets, padded
 * leading dimensions, beta != 0, strided batches, an outer batch around
 * them (attention's (sequence, head) items). Every element of C outside
 * the written region is poisoned first and must come back untouched. Both
 * backends run every case: CLBlast (the GPU path) and, on a CPU device whose
 * buffers are host memory, OpenBLAS on the mapped buffers.
 *
 * Cold cost: CLBlast builds one program per routine (GEMM, strided-batched
 * GEMM), 10-20 s each on an idle PoCL machine, then compiles each kernel
 * variant on first use; the cases below share those two programs. */
#include <clblast_c.h>
#include <stdint.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { POISON = 0x7fc0dead };

typedef struct gemm_case {
    size_t m, n, k;
    bool trans_a, trans_b;
    size_t batch;
    size_t outer;   /* 0 or 1: no outer batch */
} gemm_case;

static dl_rng rng;

/* non-zero values in [-1, -0.1] or [0.1, 1] */
static float nonzero(void) {
    float v = 0.1f + 0.9f * dl_rng_uniform(&rng);
    return dl_rng_uniform(&rng) < 0.5f ? -v : v;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Row-major element (r, c) of op(X) for X stored with leading dimension ld. */
static float op_at(const float *x, size_t ld, bool trans, size_t r, size_t c) {
    return trans ? x[c * ld + r] : x[r * ld + c];
}

/* Runs one case; returns the number of bad elements (value or poison). */
static int run_case(dl_device *dev, const gemm_case *gc, float alpha, float beta) {
    double started = dl_now();
    const size_t m = gc->m, n = gc->n, k = gc->k, batch = gc->batch ? gc->batch : 1,
                 outer = gc->outer ? gc->outer : 1;
    const size_t a_rows = gc->trans_a ? k : m, a_cols = gc->trans_a ? m : k;
    const size_t b_rows = gc->trans_b ? n : k, b_cols = gc->trans_b ? k : n;
    /* leading dimensions larger than needed, odd offsets, gaps between batch
     * items and larger gaps between outer items */
    const size_t lda = a_cols + 3, ldb = b_cols + 2, ldc = n + 5;
    const size_t a_off = 3, b_off = 5, c_off = 7;
    const size_t a_stride = a_rows * lda + 11, b_stride = b_rows * ldb + 13,
                 c_stride = m * ldc + 17;
    const size_t a_outer = batch * a_stride + 19, b_outer = batch * b_stride + 23,
                 c_outer = batch * c_stride + 29;
    const size_t a_len = a_off + outer * a_outer, b_len = b_off + outer * b_outer,
                 c_len = c_off + outer * c_outer + 9;

    float *a = dl_malloc(a_len * 4), *b = dl_malloc(b_len * 4), *c = dl_malloc(c_len * 4),
          *out = dl_malloc(c_len * 4);
    double *expect = dl_calloc(c_len, sizeof *expect), *scale = dl_calloc(c_len, sizeof *scale);
    bool *inside = dl_calloc(c_len, sizeof *inside);
    int bad = 0;
    dl_buffer da = {0}, db = {0}, dc = {0};
    if (!a || !b || !c || !out || !expect || !scale || !inside) goto done;
    for (size_t i = 0; i < a_len; i++) a[i] = nonzero();
    for (size_t i = 0; i < b_len; i++) b[i] = nonzero();
    uint32_t poison = POISON;
    for (size_t i = 0; i < c_len; i++) memcpy(&c[i], &poison, 4);
    for (size_t o = 0; o < outer; o++)
        for (size_t p = 0; p < batch; p++)
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    size_t at = c_off + o * c_outer + p * c_stride + r * ldc + j;
                    c[at] = nonzero();
                    inside[at] = true;
                }
    /* the reference, in double, from the host copies */
    for (size_t o = 0; o < outer; o++)
        for (size_t p = 0; p < batch; p++) {
            const float *pa = a + a_off + o * a_outer + p * a_stride,
                        *pb = b + b_off + o * b_outer + p * b_stride;
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    size_t at = c_off + o * c_outer + p * c_stride + r * ldc + j;
                    double ref = 0, sc = 0;
                    for (size_t q = 0; q < k; q++) {
                        double prod = (double)op_at(pa, lda, gc->trans_a, r, q) *
                                      (double)op_at(pb, ldb, gc->trans_b, q, j);
                        ref += prod;
                        sc += fabs(prod);
                    }
                    expect[at] = alpha * ref + beta * (double)c[at];
                    scale[at] = fabs(alpha) * sc + fabs(beta * (double)c[at]);
                }
        }

    if (dl_buffer_alloc(dev, a_len * 4, &da) || dl_buffer_alloc(dev, b_len * 4, &db) ||
        dl_buffer_alloc(dev, c_len * 4, &dc) || dl_buffer_upload(dev, &da, 0, a, a_len * 4) ||
        dl_buffer_upload(dev, &db, 0, b, b_len * 4) ||
        dl_buffer_upload(dev, &dc, 0, c, c_len * 4)) {
        CHECK_OK(-1);
        bad = 1;
        goto done;
    }
    dl_gemm_args args = {.trans_a = gc->trans_a, .trans_b = gc->trans_b, .m = m, .n = n, .k = k,
                         .alpha = alpha, .beta = beta, .a = &da, .a_off = a_off, .lda = lda,
                         .b = &db, .b_off = b_off, .ldb = ldb, .c = &dc, .c_off = c_off,
                         .ldc = ldc, .batch_count = gc->batch, .a_stride = a_stride,
                         .b_stride = b_stride, .c_stride = c_stride, .type = DL_GEMM_F32,
                         .outer_count = gc->outer, .a_outer = a_outer, .b_outer = b_outer,
                         .c_outer = c_outer};
    if (dl_gemm(dev, &args) || dl_buffer_download(dev, &dc, 0, out, c_len * 4)) {
        CHECK_OK(-1);
        bad = 1;
        goto done;
    }
    /* expected: poison everywhere except the m x n block of each item */
    for (size_t i = 0; i < c_len; i++) {
        if (!inside[i]) {
            if (bits_of(out[i]) != POISON && bad++ < 5)
                fprintf(stderr, "  element %zu outside C was written: %g\n", i, out[i]);
            continue;
        }
        double err = fabs((double)out[i] - expect[i]);
        if (!(err <= 1e-5 * scale[i] + 1e-30) && bad++ < 5)
            fprintf(stderr, "  C element %zu = %.9g, reference %.9g\n", i, out[i], expect[i]);
    }
done:
    printf("  %zux%zux%zu%s%s batch %zu outer %zu: %.1f s\n", gc->m, gc->n, gc->k,
           gc->trans_a ? " A^T" : "", gc->trans_b ? " B^T" : "", gc->batch, outer, dl_now() - started);
    if (bad)
        fprintf(stderr, "case %zux%zux%zu%s%s batch %zu outer %zu: %d bad elements\n", m, n, k,
                gc->trans_a ? " A^T" : "", gc->trans_b ? " B^T" : "", batch, outer, bad);
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
    free(a);
    free(b);
    free(c);
    free(out);
    free(expect);
    free(scale);
    free(inside);
    return bad;
}

static void test_shapes_and_transposes(dl_device *dev, const char *path) {
    static const size_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {129, 65, 33}};
    for (size_t s = 0; s < 3; s++)
        for (int t = 0; t < 4; t++) {
            gemm_case gc = {sizes[s][0], sizes[s][1], sizes[s][2], t & 1, (t >> 1) & 1, 1, 0};
            CHECK_MSG(run_case(dev, &gc, 0.75f, -0.5f) == 0, "%s path", path);
        }
}

static void test_batched(dl_device *dev) {
    /* attention-like: scores = Q K^T, then context = P V */
    gemm_case scores = {17, 19, 8, false, true, 3, 0};
    CHECK(run_case(dev, &scores, 0.125f, 0.0f) == 0);
    gemm_case context = {17, 8, 19, false, false, 3, 0};
    CHECK(run_case(dev, &context, 1.0f, 0.5f) == 0);
    /* large enough items for the indirect kernel, both operands transposed */
    gemm_case indirect = {129, 131, 67, true, true, 2, 0};
    CHECK(run_case(dev, &indirect, -1.0f, 2.0f) == 0);
    /* (sequence, head) items in one call, as the model's attention issues them */
    gemm_case outer_scores = {17, 19, 8, false, true, 3, 2};
    CHECK(run_case(dev, &outer_scores, 1.0f, 0.0f) == 0);
    gemm_case outer_grad = {17, 8, 19, true, false, 2, 3};
    CHECK(run_case(dev, &outer_grad, 0.5f, 1.0f) == 0);
}

static void test_argument_errors(dl_device *dev) {
    dl_buffer a, b, c;
    CHECK_OK(dl_buffer_alloc(dev, 6 * 4, &a));
    CHECK_OK(dl_buffer_alloc(dev, 6 * 4, &b));
    CHECK_OK(dl_buffer_alloc(dev, 4 * 4, &c));
    dl_gemm_args g = {.m = 2, .n = 2, .k = 3, .alpha = 1, .a = &a, .lda = 3, .b = &b, .ldb = 2,
                      .c = &c, .ldc = 2, .batch_count = 1};
    g.lda = 2;
    CHECK(dl_gemm(dev, &g) == -1);
    CHECK_MSG(strstr(dl_error(), "leading dimension 2") != NULL, "%s", dl_error());
    g.lda = 3;
    g.a_off = 1;
    CHECK(dl_gemm(dev, &g) == -1);
    CHECK_MSG(strstr(dl_error(), "matrix A") && strstr(dl_error(), "needs 7 elements"), "%s",
              dl_error());
    g.a_off = 0;
    g.batch_count = 2;
    g.c_stride = 4;
    CHECK(dl_gemm(dev, &g) == -1);
    g.batch_count = 1;
    g.k = 0;
    CHECK(dl_gemm(dev, &g) == -1);
    g.k = 3;
    g.m = 0; /* nothing to do */
    CHECK_OK(dl_gemm(dev, &g));
    dl_buffer_free(dev, &a);
    dl_buffer_free(dev, &b);
    dl_buffer_free(dev, &c);
}

/* fp16 compute only where the device has cl_khr_fp16; elsewhere a clear refusal. */
static void test_half(dl_device *dev) {
    const dl_device_info *info = dl_device_get_info(dev);
    const size_t m = 7, n = 13, k = 5;
    uint16_t a[7 * 5], b[5 * 13], c[7 * 13];
    float af[7 * 5], bf[5 * 13];
    for (size_t i = 0; i < m * k; i++) a[i] = dl_f32_to_f16(af[i] = nonzero());
    for (size_t i = 0; i < k * n; i++) b[i] = dl_f32_to_f16(bf[i] = nonzero());
    dl_buffer da, db, dc;
    CHECK_OK(dl_buffer_alloc(dev, sizeof a, &da));
    CHECK_OK(dl_buffer_alloc(dev, sizeof b, &db));
    CHECK_OK(dl_buffer_alloc(dev, sizeof c, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, sizeof a));
    CHECK_OK(dl_buffer_upload(dev, &db, 0, b, sizeof b));
    dl_gemm_args g = {.m = m, .n = n, .k = k, .alpha = 1, .beta = 0, .a = &da, .lda = k,
                      .b = &db, .ldb = n, .c = &dc, .ldc = n, .batch_count = 1,
                      .type = DL_GEMM_F16};
    if (!info->fp16) {
        CHECK(dl_gemm(dev, &g) == -1);
        CHECK_MSG(strstr(dl_error(), "cl_khr_fp16") != NULL, "%s", dl_error());
    } else {
        CHECK_OK(dl_gemm(dev, &g));
        CHECK_OK(dl_buffer_download(dev, &dc, 0, c, sizeof c));
        int bad = 0;
        for (size_t r = 0; r < m; r++)
            for (size_t j = 0; j < n; j++) {
                double ref = 0;
                for (size_t q = 0; q < k; q++)
                    ref += (double)dl_f16_to_f32(a[r * k + q]) * dl_f16_to_f32(b[q * n + j]);
                bad += !(fabs(dl_f16_to_f32(c[r * n + j]) - ref) <= 1e-2 * (1 + fabs(ref)));
            }
        CHECK_MSG(bad == 0, "%d fp16 elements off", bad);
    }
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &db);
    dl_buffer_free(dev, &dc);
}

/* CLBlast runs small products (m*n*k below XGEMM_MIN_INDIRECT_SIZE^3) through
 * its "direct" kernels and larger ones through the tiled "indirect" kernel with
 * padding and transposition helpers. The transformer shapes are large, so both
 * paths matter. The threshold is set once, before the first GEMM builds its
 * program (changing it later means another 10-20 s build on PoCL), so that the
 * cases up to 129x65x33 stay direct and the bigger odd ones go indirect. */
enum { INDIRECT_FROM = 100 }; /* products of 1e6 and more */

static int set_indirect_threshold(dl_device *dev) {
    const char *names[] = {"XGEMM_MIN_INDIRECT_SIZE"};
    const size_t values[] = {INDIRECT_FROM};
    CLBlastStatusCode st = CLBlastOverrideParameters(dl_device_get_info(dev)->device_id,
                                                     "GemmRoutine", CLBlastPrecisionSingle, 1,
                                                     names, values);
    return st == CLBlastSuccess ? 0 : dl_fail("CLBlastOverrideParameters: %d", (int)st);
}

int main(void) {
    dl_rng_seed(&rng, 1234567);
    dl_device *dev = NULL;
    /* built-in CLBlast parameters: the result must not depend on a tuning file */
    CHECK_OK(dl_device_open_ex(getenv("DEDLOC_TEST_DEVICE"), DL_OPEN_NO_TUNING, &dev));
    if (!dev) return dl_test_finish("test_gemm");
    CHECK_OK(set_indirect_threshold(dev));
    const dl_device_info *info = dl_device_get_info(dev);
#ifdef DEDLOC_HAVE_OPENBLAS
    bool host_blas = info->is_cpu && info->unified_memory;
#else
    bool host_blas = false;
#endif
    const char *env_backend = getenv("DEDLOC_GEMM_BACKEND");
    if (!env_backend || !*env_backend)
        CHECK_MSG(dl_device_gemm_backend(dev) == (host_blas ? DL_GEMM_OPENBLAS : DL_GEMM_CLBLAST),
                  "default backend %s on %s", dl_gemm_backend_name(dl_device_gemm_backend(dev)), info->name);
    for (int backend = DL_GEMM_CLBLAST; backend <= DL_GEMM_OPENBLAS; backend++) {
        int rc = dl_device_set_gemm_backend(dev, (dl_gemm_backend)backend);
        CHECK_MSG((rc == 0) == (backend == DL_GEMM_CLBLAST || host_blas), "selecting %s: %s",
                  dl_gemm_backend_name((dl_gemm_backend)backend), rc ? dl_error() : "accepted");
        if (rc) continue;
        printf("backend %s\n", dl_gemm_backend_name((dl_gemm_backend)backend));
        test_argument_errors(dev);
        test_shapes_and_transposes(dev, "direct");
        /* CLBlast's indirect path (and the same sizes through OpenBLAS): odd sizes, every transpose pair */
        for (int t = 0; t < 4; t++) {
            gemm_case big = {257, 131, 67, t & 1, (t >> 1) & 1, 1, 0};
            CHECK_MSG(run_case(dev, &big, 0.75f, -0.5f) == 0, "indirect path");
        }
        test_batched(dev);
        /* A product of over 2^27 FLOPs goes to oneDNN's fp32 GEMM where the
         * build has it, else (and with DEDLOC_FP32_GEMM=openblas: ctest
         * device/test_gemm_openblas_split) it is split by rows of C over the
         * OpenBLAS threads (gemm.c, run_split) when there are several; 333
         * rows leave a ragged last part, and op(A)'s rows are columns of A
         * when it is transposed. */
        if (backend == DL_GEMM_OPENBLAS)
            for (int t = 0; t < 4; t++) {
                gemm_case split = {333, 515, 401, t & 1, (t >> 1) & 1, 1, 0};
                CHECK_MSG(run_case(dev, &split, 0.75f, -0.5f) == 0, "split product");
            }
    }
    test_half(dev);
    dl_device_close(dev);
    return dl_test_finish("test_gemm");
}
