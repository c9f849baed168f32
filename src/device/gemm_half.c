/* fp16 compute for GEMMs on fp32 buffers (cl/half_gemm.cl): the operands are
 * rounded into half scratch buffers, the product runs in half
 * (CLBlastHgemm), and the half result is added into the fp32 C with beta in
 * fp32, so accumulating sums (gradients) keep fp32.
 *
 * The emulation (test builds, devices without cl_khr_fp16) keeps the same
 * rounding points with fp32 scratch buffers holding half-rounded values: the
 * operands are rounded to half, the product is an fp32 GEMM (OpenBLAS or
 * CLBlast's SGEMM) of them, and the result is rounded to half before it
 * meets C. What it does not reproduce: Hgemm accumulates the k products of
 * each element in half (CLBlast's kernels keep their partial sums in the
 * half `real` type), the emulation in fp32 and rounds once; so real Hgemm
 * loses up to about log2(k) more bits on long sums, and overflows inside a
 * sum that the emulation only sees when the final value overflows. */
#include <stdlib.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

struct dl_half_gemm {
    dl_device *dev;
    bool emulate;
    size_t elem;                    /* bytes of one operand element: 2, or 4 emulated */
    cl_kernel operand, result;
    dl_buffer a, b, c;              /* operand and product scratch, grown on demand */
};

int dl_half_gemm_create(dl_device *dev, bool emulate, dl_half_gemm **out) {
    *out = NULL;
    if (!emulate && !dev->info.fp16)
        return dl_fail("fp16 compute needs cl_khr_fp16, which %s does not report; use "
                       "--precision fp32, or fp16 storage with fp32 arithmetic",
                       dev->info.name);
    dl_half_gemm *h = dl_calloc(1, sizeof *h);
    if (!h) return -1;
    h->dev = dev;
    h->emulate = emulate;
    h->elem = emulate ? sizeof(float) : sizeof(cl_half);
    /* The native build enables cl_khr_fp16, so it is only compiled where the
     * device was probed to have it. */
    const char *opts = emulate ? "" : "-DDL_HALF_NATIVE";
    if (dl_kernel_create(dev, "half_gemm.cl", opts, "half_operand", &h->operand) ||
        dl_kernel_create(dev, "half_gemm.cl", opts, "half_result", &h->result)) {
        dl_half_gemm_free(h);
        return dl_fail_context("building the fp16 compute kernels");
    }
    *out = h;
    return 0;
}

void dl_half_gemm_free(dl_half_gemm *h) {
    if (!h) return;
    if (h->operand) clReleaseKernel(h->operand);
    if (h->result) clReleaseKernel(h->result);
    dl_buffer *bufs[] = {&h->a, &h->b, &h->c};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]->mem) dl_buffer_free(h->dev, bufs[i]);
    free(h);
}

bool dl_half_gemm_emulated(const dl_half_gemm *h) { return h->emulate; }

size_t dl_half_gemm_element_size(const dl_half_gemm *h) { return h->elem; }

/* Elements from a matrix's offset to its last element + 1, or 0 when the
 * shape does not fit a size_t. */
static size_t matrix_span(size_t rows, size_t cols, size_t ld, size_t batch, size_t stride,
                          size_t outer, size_t outer_stride) {
    double span = (double)(outer - 1) * (double)outer_stride + (double)(batch - 1) * (double)stride +
                  (double)(rows - 1) * (double)ld + (double)cols;
    return span >= (double)(SIZE_MAX / 8) ? 0 : (size_t)span;
}

/* Grows a scratch buffer to hold n operand elements (a quarter extra, so a
 * slowly growing shape does not reallocate every call). */
static int ensure_scratch(dl_half_gemm *h, dl_buffer *buf, size_t n) {
    size_t need = n * h->elem;
    if (buf->mem && buf->size >= need) return 0;
    if (buf->mem) dl_buffer_free(h->dev, buf);
    size_t bytes = (need + need / 4 + 3) & ~(size_t)3;
    if (dl_buffer_alloc(h->dev, bytes, buf))
        return dl_fail_context("allocating %zu bytes of fp16 GEMM scratch", bytes);
    return 0;
}

/* Exactly n operand elements (4-byte aligned), grown by nothing later. */
static int reserve_scratch(dl_half_gemm *h, dl_buffer *buf, size_t n) {
    size_t need = n * h->elem;
    if (buf->mem && buf->size >= need) return 0;
    if (buf->mem) dl_buffer_free(h->dev, buf);
    if (dl_buffer_alloc(h->dev, (need + 3) & ~(size_t)3, buf))
        return dl_fail_context("allocating %zu bytes of fp16 GEMM scratch", need);
    return 0;
}

int dl_half_gemm_reserve(dl_half_gemm *h, size_t a, size_t b, size_t c) {
    return reserve_scratch(h, &h->a, a) || reserve_scratch(h, &h->b, b) || reserve_scratch(h, &h->c, c) ? -1 : 0;
}

size_t dl_half_gemm_scratch_bytes(const dl_half_gemm *h) {
    return (h->a.mem ? h->a.size : 0) + (h->b.mem ? h->b.size : 0) + (h->c.mem ? h->c.size : 0);
}

static int launch_operand(dl_half_gemm *h, const dl_buffer *src, size_t src_off, size_t n,
                          const dl_buffer *dst) {
    cl_ulong off = src_off, count = n;
    if (DL_ARG(h->operand, 0, dst->mem) || DL_ARG(h->operand, 1, src->mem) ||
        DL_ARG(h->operand, 2, off) || DL_ARG(h->operand, 3, count))
        return dl_fail_context("half_operand");
    size_t local = h->dev->info.max_work_group < 64 ? h->dev->info.max_work_group : 64;
    size_t global = (n + local - 1) / local * local;
    return dl_launch(h->dev, h->operand, 1, &global, &local);
}

int dl_half_gemm_operand(dl_half_gemm *h, const dl_buffer *src, size_t src_off, size_t n,
                         dl_buffer *dst) {
    if (!src || !src->mem || src_off > src->size / sizeof(float) ||
        n > src->size / sizeof(float) - src_off)
        return dl_fail("fp16 operand: source range [%zu, +%zu) outside its buffer", src_off, n);
    if (n == 0) return 0;
    if (!dst->mem || dst->size < n * h->elem) {
        if (dst->mem) dl_buffer_free(h->dev, dst);
        if (dl_buffer_alloc(h->dev, (n * h->elem + 3) & ~(size_t)3, dst))
            return dl_fail_context("allocating an fp16 operand of %zu elements", n);
    }
    return launch_operand(h, src, src_off, n, dst);
}

/* One fp32 operand's span, rounded into scratch; *off is where the operand
 * starts in it. ready: the operand already rounded (same offsets), or NULL. */
static int stage_operand(dl_half_gemm *h, const char *name, const dl_buffer *src, size_t src_off,
                         size_t span, const dl_buffer *ready, dl_buffer *scratch,
                         const dl_buffer **use, size_t *off) {
    if (span == 0) return dl_fail("fp16 GEMM: matrix %s is too large", name);
    if (ready) {
        if (src_off > ready->size / h->elem || span > ready->size / h->elem - src_off)
            return dl_fail("fp16 GEMM: the prepared matrix %s is smaller than its span", name);
        *use = ready;
        *off = src_off;
        return 0;
    }
    if (!src || !src->mem || src_off > src->size / sizeof(float) ||
        span > src->size / sizeof(float) - src_off)
        return dl_fail("fp16 GEMM: matrix %s (offset %zu, %zu elements) outside its buffer", name,
                       src_off, span);
    if (ensure_scratch(h, scratch, span) || launch_operand(h, src, src_off, span, scratch))
        return -1;
    *use = scratch;
    *off = 0;
    return 0;
}

int dl_half_gemm_run(dl_half_gemm *h, const dl_gemm_args *g, const dl_buffer *b_ready) {
    if (g->type != DL_GEMM_F32) return dl_fail("fp16 GEMM: the operands must be fp32 buffers");
    if (g->m == 0 || g->n == 0) return 0;
    size_t batch = g->batch_count ? g->batch_count : 1, outer = g->outer_count ? g->outer_count : 1;
    if (g->k == 0) return dl_fail("GEMM with k = 0 is not supported");
    size_t a_span = matrix_span(g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, batch,
                                g->a_stride, outer, g->a_outer);
    size_t b_span = matrix_span(g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, batch,
                                g->b_stride, outer, g->b_outer);
    size_t c_span = matrix_span(g->m, g->n, g->ldc, batch, g->c_stride, outer, g->c_outer);
    if (c_span == 0 || !g->c || !g->c->mem || g->c_off > g->c->size / sizeof(float) ||
        c_span > g->c->size / sizeof(float) - g->c_off)
        return dl_fail("fp16 GEMM: matrix C (offset %zu, %zu elements) outside its buffer",
                       g->c_off, c_span);
    dl_gemm_args half = *g;
    if (stage_operand(h, "A", g->a, g->a_off, a_span, NULL, &h->a, &half.a, &half.a_off) ||
        stage_operand(h, "B", g->b, g->b_off, b_span, b_ready, &h->b, &half.b, &half.b_off) ||
        ensure_scratch(h, &h->c, c_span))
        return -1;
    /* Hgemm with beta 0 must not meet Inf or NaN left in the scratch by an
     * earlier overflow (0 * Inf is NaN): start from zeros. */
    if (!h->emulate &&
        dl_buffer_fill32(h->dev, &h->c, 0, (c_span * h->elem + 3) & ~(size_t)3, 0))
        return -1;
    half.c = &h->c;
    half.c_off = 0;
    half.beta = 0.0f;
    half.type = h->emulate ? DL_GEMM_F32 : DL_GEMM_F16;
    if (dl_gemm(h->dev, &half)) return -1;

    cl_kernel k = h->result;
    cl_ulong c_off = g->c_off, ldc = g->ldc, c_stride = g->c_stride, c_outer = g->c_outer;
    int cols = (int)g->n, rows = (int)g->m, items = (int)batch;
    float beta = g->beta;
    if (DL_ARG(k, 0, g->c->mem) || DL_ARG(k, 1, c_off) || DL_ARG(k, 2, h->c.mem) ||
        DL_ARG(k, 3, cols) || DL_ARG(k, 4, rows) || DL_ARG(k, 5, items) || DL_ARG(k, 6, ldc) ||
        DL_ARG(k, 7, c_stride) || DL_ARG(k, 8, c_outer) || DL_ARG(k, 9, beta))
        return dl_fail_context("half_result");
    size_t local[3] = {h->dev->info.max_work_group < 64 ? h->dev->info.max_work_group : 64, 1, 1};
    size_t global[3] = {(g->n + local[0] - 1) / local[0] * local[0], g->m, batch * outer};
    return dl_launch(h->dev, k, 3, global, local);
}
