/* GEMM through CLBlast, row-major, with strided batches for attention. */
#include <clblast_c.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

static int clblast_check(CLBlastStatusCode status, const char *what) {
    if (status == CLBlastSuccess) return 0;
    if (status > -1024) /* CLBlast passes OpenCL errors through unchanged */
        return dl_cl_check((cl_int)status, what);
    switch (status) {
    case CLBlastNoHalfPrecision:
        return dl_fail("%s: the device has no half precision (cl_khr_fp16); use fp32 compute", what);
    case CLBlastInsufficientMemoryA:
    case CLBlastInsufficientMemoryB:
    case CLBlastInsufficientMemoryC:
        return dl_fail("%s: a matrix does not fit its buffer (CLBlast error %d): check offsets "
                       "and leading dimensions", what, (int)status);
    case CLBlastInvalidLeadDimA:
    case CLBlastInvalidLeadDimB:
    case CLBlastInvalidLeadDimC:
        return dl_fail("%s: invalid leading dimension (CLBlast error %d)", what, (int)status);
    default:
        return dl_fail("%s: CLBlast error %d", what, (int)status);
    }
}

/* Checks that a rows x cols row-major matrix with leading dimension ld, at
 * element offset off, repeated batch times stride apart, fits its buffer. */
static int check_matrix(const char *name, const dl_buffer *buf, size_t elem, size_t rows,
                        size_t cols, size_t off, size_t ld, size_t batch, size_t stride) {
    if (!buf || !buf->mem) return dl_fail("GEMM: matrix %s: buffer not allocated", name);
    if (ld < cols)
        return dl_fail("GEMM: matrix %s: leading dimension %zu is smaller than its %zu columns",
                       name, ld, cols);
    /* last element index + 1, computed in floating point first to reject overflow */
    double need = (double)off + (double)(batch - 1) * (double)stride + (double)(rows - 1) * ld +
                  (double)cols;
    double have = (double)(buf->size / elem); /* NOLINT(bugprone-integer-division): whole elements */
    if (need > have)
        return dl_fail("GEMM: matrix %s (%zu x %zu, offset %zu, ld %zu, batch %zu, stride %zu) "
                       "needs %.0f elements, its buffer holds %.0f",
                       name, rows, cols, off, ld, batch, stride, need, have);
    return 0;
}

int dl_gemm(dl_device *dev, const dl_gemm_args *g) {
    if (g->m == 0 || g->n == 0) return 0;
    size_t batch = g->batch_count ? g->batch_count : 1;
    if (g->type == DL_GEMM_F16 && !dev->info.fp16)
        return dl_fail("fp16 GEMM requested on %s, which does not report cl_khr_fp16",
                       dev->info.name);
    if (g->k == 0) {
        /* C = beta*C; CLBlast rejects k=0, so do it with alpha=0 over k=1 would read A/B.
         * Callers never need this; refuse clearly. */
        return dl_fail("GEMM with k = 0 is not supported");
    }
    size_t elem = g->type == DL_GEMM_F16 ? 2 : 4;
    if (check_matrix("A", g->a, elem, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->a_off,
                     g->lda, batch, g->a_stride) ||
        check_matrix("B", g->b, elem, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->b_off,
                     g->ldb, batch, g->b_stride) ||
        check_matrix("C", g->c, elem, g->m, g->n, g->c_off, g->ldc, batch, g->c_stride))
        return -1;
    CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
    cl_command_queue q = dev->queue;
    CLBlastStatusCode st;
    if (g->type == DL_GEMM_F32) {
        if (batch == 1)
            st = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, g->alpha, g->a->mem,
                              g->a_off, g->lda, g->b->mem, g->b_off, g->ldb, g->beta, g->c->mem,
                              g->c_off, g->ldc, &q, NULL);
        else
            st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k,
                                            g->alpha, g->a->mem, g->a_off, g->lda, g->a_stride,
                                            g->b->mem, g->b_off, g->ldb, g->b_stride, g->beta,
                                            g->c->mem, g->c_off, g->ldc, g->c_stride, batch, &q,
                                            NULL);
    } else {
        cl_half alpha = dl_f32_to_f16(g->alpha), beta = dl_f32_to_f16(g->beta);
        if (batch == 1)
            st = CLBlastHgemm(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, alpha, g->a->mem,
                              g->a_off, g->lda, g->b->mem, g->b_off, g->ldb, beta, g->c->mem,
                              g->c_off, g->ldc, &q, NULL);
        else
            st = CLBlastHgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, alpha,
                                            g->a->mem, g->a_off, g->lda, g->a_stride, g->b->mem,
                                            g->b_off, g->ldb, g->b_stride, beta, g->c->mem,
                                            g->c_off, g->ldc, g->c_stride, batch, &q, NULL);
    }
    if (st != CLBlastSuccess) {
        char what[160];
        snprintf(what, sizeof what, "GEMM %zux%zux%zu%s%s batch %zu", g->m, g->n, g->k,
                 g->trans_a ? " A^T" : "", g->trans_b ? " B^T" : "", batch);
        return clblast_check(st, what);
    }
    return 0;
}
