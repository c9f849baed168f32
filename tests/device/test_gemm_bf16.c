/* device: bf16 compute of fp32 GEMMs (dl_bf16_gemm) against references
 * written from the definition, on odd shapes, every transpose pair, padded
 * leading dimensions, offsets, alpha and beta, and weights rounded once.
 *
 * Tolerances, with u = 2^-8 the unit roundoff of bf16 (8 significant bits:
 * half of the step 2^-7 between neighbours in [1, 2)) and e = 2^-24
 * fp32's, and S = |alpha| sum_q |a_q b_q|:
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
 * back untouched. The same holds for batched products (attention's): an
 * outer x batch grid of them with the strides attention uses, where a wrong
 * stride, batch offset or transpose puts elements off both references.
 *
 * Held state must not leak into results: after new weights are set, a
 * product reads them, not the packed copy of the old ones; a product run
 * with dl_bf16_gemm_run_again on an operand rounded just before (the same
 * matrix, read transposed) gives what dl_bf16_gemm_run gives; and after the
 * operand changes, dl_bf16_gemm_run rounds it again. Each compared bit for
 * bit with a fresh handle's product.
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
    /* Batched (attention's products): an outer x batch grid of products.
     * side_by_side: the items of a row of the grid sit next to each other
     * in each row of memory, as heads do in attention's [T, H] token
     * matrices; otherwise each item follows the previous one, as the
     * [heads, T, T] score matrices do. Bit 0: A, bit 1: B, bit 2: C. */
    size_t outer, batch;
    unsigned side_by_side;
} bf16_case;

typedef struct case_result {
    int off_exact, off_rounded, poisoned, near_fp32, elements;
} case_result;

/* Where a matrix of the grid lies: item (o, i), element (r, c) of the
 * matrix as stored (rows x cols) is at off + o * outer + i * stride + r * ld + c. */
typedef struct placement {
    size_t off, ld, stride, outer, len;
} placement;

static placement place(size_t rows, size_t cols, size_t off, size_t pad, size_t outer, size_t batch,
                       bool side_by_side) {
    placement p = {.off = off};
    if (side_by_side) {
        p.ld = batch * cols + pad;
        p.stride = cols;
        p.outer = rows * p.ld + 3;
    } else {
        p.ld = cols + pad;
        p.stride = rows * p.ld + 2;
        p.outer = batch * p.stride + 5;
    }
    p.len = off + outer * p.outer + 4;
    return p;
}

static size_t at(const placement *p, size_t o, size_t i, size_t r, size_t c) {
    return p->off + o * p->outer + i * p->stride + r * p->ld + c;
}

static case_result run_case(dl_bf16_gemm *h, dl_device *dev, const bf16_case *bc) {
    case_result res = {0};
    size_t m = bc->m, n = bc->n, k = bc->k;
    size_t outer = bc->outer ? bc->outer : 1, batch = bc->batch ? bc->batch : 1;
    size_t a_rows = bc->trans_a ? k : m, a_cols = bc->trans_a ? m : k;
    size_t b_rows = bc->trans_b ? n : k, b_cols = bc->trans_b ? k : n;
    placement pa = place(a_rows, a_cols, 5, 3, outer, batch, bc->side_by_side & 1),
              pb = place(b_rows, b_cols, 7, 1, outer, batch, bc->side_by_side & 2),
              pc = place(m, n, 3, 2, outer, batch, bc->side_by_side & 4);
    size_t a_len = pa.len, b_len = pb.len, c_len = pc.len;
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
    for (size_t o = 0; o < outer; o++)
        for (size_t t = 0; t < batch; t++)
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    c[at(&pc, o, t, r, j)] = uniform_pm1();
                    inside[at(&pc, o, t, r, j)] = true;
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
                      .alpha = bc->alpha, .beta = bc->beta, .a = &da, .a_off = pa.off, .lda = pa.ld,
                      .b = &db, .b_off = pb.off, .ldb = pb.ld, .c = &dc, .c_off = pc.off, .ldc = pc.ld,
                      .batch_count = batch, .a_stride = pa.stride, .b_stride = pb.stride, .c_stride = pc.stride,
                      .outer_count = outer, .a_outer = pa.outer, .b_outer = pb.outer, .c_outer = pc.outer};
    CHECK_OK(dl_bf16_gemm_run(h, &g, bc->weights));
    CHECK_OK(dl_buffer_download(dev, &dc, 0, got, c_len * 4));
    const double u = 0x1p-8, e = 0x1p-24;
    for (size_t o = 0; o < outer; o++)
        for (size_t t = 0; t < batch; t++)
            for (size_t r = 0; r < m; r++)
                for (size_t j = 0; j < n; j++) {
                    double exact = 0, rounded = 0, sum_abs = 0;
                    for (size_t q = 0; q < k; q++) {
                        float x = bc->trans_a ? a[at(&pa, o, t, q, r)] : a[at(&pa, o, t, r, q)];
                        float y = bc->trans_b ? b[at(&pb, o, t, j, q)] : b[at(&pb, o, t, q, j)];
                        exact += (double)x * (double)y;
                        rounded += to_bf16(x) * to_bf16(y);
                        sum_abs += fabs((double)x * (double)y);
                    }
                    size_t el = at(&pc, o, t, r, j);
                    double c0 = bc->beta == 0.0f ? 0.0 : (double)bc->beta * (double)c[el];
                    double s = fabs((double)bc->alpha) * sum_abs,
                           fp32_err = (double)(k + 2) * e * s + 2 * e * fabs(c0);
                    double want_exact = (double)bc->alpha * exact + c0,
                           want_rounded = (double)bc->alpha * rounded + c0;
                    double diff_exact = fabs((double)got[el] - want_exact);
                    if (!(diff_exact <= (2 * u + u * u) * s + fp32_err)) {
                        if (res.off_exact < 3)
                            printf("  [%zu, %zu, %zu, %zu]: got %.9g, exact %.9g (off %.3g, bound %.3g)\n", o, t,
                                   r, j, got[el], want_exact, diff_exact, (2 * u + u * u) * s + fp32_err);
                        res.off_exact++;
                    }
                    if (!(fabs((double)got[el] - want_rounded) <= fp32_err)) {
                        if (res.off_rounded < 3)
                            printf("  [%zu, %zu, %zu, %zu]: got %.9g, bf16 operands give %.9g (bound %.3g)\n", o,
                                   t, r, j, got[el], want_rounded, fp32_err);
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
        {37, 29, 53, false, true, true, 1.0f, 0.0f, 1, 1, 0},
        {29, 53, 37, true, false, false, 1.0f, 1.0f, 1, 1, 0},
        {37, 53, 29, false, false, true, 1.0f, 1.0f, 1, 1, 0},
        /* the other transposes, alpha and beta not 1, a long sum */
        {19, 23, 301, true, true, false, 0.5f, -0.75f, 1, 1, 0},
        {64, 96, 128, false, true, false, 2.0f, 0.0f, 1, 1, 0},
        {1, 17, 9, false, false, false, 1.0f, 0.0f, 1, 1, 0},
        /* past gemm_bf16.c's one-thread limit (2^28 flops): oneDNN's threads */
        {515, 521, 517, false, true, true, 1.0f, 1.0f, 1, 1, 0},
        /* attention's batched products over (sequence, head), odd sizes:
         * scores = Q K^T (Q, K heads side by side in token rows, scores
         * stacked), context = P V, and the backward's dP = dctx V^T,
         * dV = P^T dctx, dQ = dS K, dK = dS^T Q */
        {13, 13, 7, false, true, false, 1.0f, 0.0f, 3, 5, 1 | 2},
        {13, 7, 13, false, false, false, 1.0f, 0.0f, 3, 5, 2 | 4},
        {13, 7, 13, true, false, false, 1.0f, 0.0f, 3, 5, 2 | 4},
        /* one outer item, one batch item, alpha, beta, the other transposes */
        {11, 9, 21, true, true, false, 0.5f, 1.0f, 1, 4, 1},
        {11, 9, 21, false, true, false, 1.0f, -0.5f, 3, 1, 2 | 4},
        /* past the one-thread limit: 2 x 16 products of 128 x 128 x 64 (the
         * attention scores of sahajBERT's heads for two sequences) */
        {128, 128, 64, false, true, false, 1.0f, 0.0f, 2, 16, 1 | 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bf16_case *bc = &cases[i];
        case_result r = run_case(h, dev, bc);
        printf("case %zu: %zux%zux%zu%s%s%s alpha %g beta %g batch %zu x %zu: %d/%d near fp32, off %d (exact) "
               "%d (bf16 operands), %d padding changed\n",
               i, bc->m, bc->n, bc->k, bc->trans_a ? " A^T" : "", bc->trans_b ? " B^T" : "",
               bc->weights ? " weights" : "", bc->alpha, bc->beta, bc->outer ? bc->outer : 1,
               bc->batch ? bc->batch : 1, r.near_fp32, r.elements, r.off_exact, r.off_rounded, r.poisoned);
        CHECK_MSG(r.off_exact == 0 && r.off_rounded == 0 && r.poisoned == 0, "case %zu: elements off", i);
        /* fp32 arithmetic would put every element within that bound; bf16
         * operands put most outside (a fifth inside at k = 517, where the
         * worst-case fp32 bound has grown with k) */
        CHECK_MSG(r.near_fp32 * 2 < r.elements, "case %zu: %d of %d elements as close as fp32 would be",
                  i, r.near_fp32, r.elements);
    }
}

/* C = A B^T (B the weights) and D = A^T E on host buffers, where the state
 * of h before matters: each result is compared with a fresh handle's. */
static void fill(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = uniform_pm1();
}

static void product(dl_device *dev, dl_bf16_gemm *h, const dl_gemm_args *g, bool weights, bool again,
                    float *out, size_t len) {
    CHECK_OK((again ? dl_bf16_gemm_run_again : dl_bf16_gemm_run)(h, g, weights));
    CHECK_OK(dl_buffer_download(dev, g->c, 0, out, len * 4));
}

static void fresh_product(dl_device *dev, const float *weights, size_t w_len, const dl_gemm_args *g, bool b_weights,
                          float *out, size_t len) {
    dl_bf16_gemm *f = NULL;
    CHECK_OK(dl_bf16_gemm_create(dev, &f));
    if (!f) return;
    if (b_weights) CHECK_OK(dl_bf16_gemm_set_weights(f, weights, w_len));
    product(dev, f, g, b_weights, false, out, len);
    dl_bf16_gemm_free(f);
}

static void run_held_state(dl_bf16_gemm *h, dl_device *dev) {
    enum { M = 33, N = 40, K = 24 };
    float a[M * K], w1[N * K], w2[N * K], e[M * N], got[N * N], want[N * N];
    fill(a, M * K), fill(w1, N * K), fill(w2, N * K), fill(e, M * N);
    dl_buffer da = {0}, dw = {0}, de = {0}, dc = {0};
    CHECK_OK(dl_buffer_alloc(dev, sizeof a, &da));
    CHECK_OK(dl_buffer_alloc(dev, sizeof w1, &dw));
    CHECK_OK(dl_buffer_alloc(dev, sizeof e, &de));
    CHECK_OK(dl_buffer_alloc(dev, sizeof got, &dc));
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, sizeof a));
    CHECK_OK(dl_buffer_upload(dev, &dw, 0, w2, sizeof w2));
    CHECK_OK(dl_buffer_upload(dev, &de, 0, e, sizeof e));
    /* C[M, N] = A[M, K] W^T */
    dl_gemm_args fwd = {.trans_b = true, .m = M, .n = N, .k = K, .alpha = 1.0f, .a = &da, .lda = K,
                        .b = &dw, .ldb = K, .c = &dc, .ldc = N, .batch_count = 1};
    /* D[K, N] = A^T[K, M] E[M, N]: A read transposed */
    dl_gemm_args dw_like = {.trans_a = true, .m = K, .n = N, .k = M, .alpha = 1.0f, .a = &da, .lda = K,
                            .b = &de, .ldb = N, .c = &dc, .ldc = N, .batch_count = 1};

    /* new weights replace the packed old ones */
    CHECK_OK(dl_bf16_gemm_set_weights(h, w1, N * K));
    product(dev, h, &fwd, true, false, got, M * N);
    CHECK_OK(dl_bf16_gemm_set_weights(h, w2, N * K));
    product(dev, h, &fwd, true, false, got, M * N);
    fresh_product(dev, w2, N * K, &fwd, true, want, M * N);
    CHECK_MSG(!memcmp(got, want, M * N * 4), "a product after new weights read the old ones");

    /* A rounded by the forward serves the transposed read after it */
    product(dev, h, &dw_like, false, true, got, K * N);
    fresh_product(dev, NULL, 0, &dw_like, false, want, K * N);
    CHECK_MSG(!memcmp(got, want, K * N * 4), "dl_bf16_gemm_run_again differs from dl_bf16_gemm_run");

    /* A changed: a plain run rounds it again, and the run_again after it
     * reads the new rounding */
    for (size_t i = 0; i < M * K; i++) a[i] = -a[i] * 0.5f;
    CHECK_OK(dl_buffer_upload(dev, &da, 0, a, sizeof a));
    product(dev, h, &fwd, true, false, got, M * N);
    fresh_product(dev, w2, N * K, &fwd, true, want, M * N);
    CHECK_MSG(!memcmp(got, want, M * N * 4), "a changed operand was not rounded again");
    product(dev, h, &dw_like, false, true, got, K * N);
    fresh_product(dev, NULL, 0, &dw_like, false, want, K * N);
    CHECK_MSG(!memcmp(got, want, K * N * 4), "dl_bf16_gemm_run_again read an old rounding");
    printf("held state: new weights, reused and renewed roundings as a fresh handle's products\n");
    dl_buffer_free(dev, &da);
    dl_buffer_free(dev, &dw);
    dl_buffer_free(dev, &de);
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
        if (h) run_held_state(h, dev);
    }
    dl_bf16_gemm_free(h);
    dl_device_close(dev);
    return dl_test_finish("test_gemm_bf16");
}
