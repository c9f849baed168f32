/* GEMM, row-major, with strided batches for attention: through CLBlast on
 * the device's queue, or, on a CPU device whose buffers are host memory,
 * through OpenBLAS on the mapped buffers. */
#include <clblast_c.h>
#include <stdlib.h>
#include <string.h>
#ifdef DEDLOC_HAVE_OPENBLAS
#include <cblas.h>
#include <pthread.h>
#ifdef DEDLOC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif
#endif

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
                        size_t cols, size_t off, size_t ld, size_t batch, size_t stride,
                        size_t outer, size_t outer_stride) {
    if (!buf || !buf->mem) return dl_fail("GEMM: matrix %s: buffer not allocated", name);
    if (ld < cols)
        return dl_fail("GEMM: matrix %s: leading dimension %zu is smaller than its %zu columns",
                       name, ld, cols);
    /* last element index + 1, computed in floating point first to reject overflow */
    double need = (double)off + (double)(outer - 1) * (double)outer_stride +
                  (double)(batch - 1) * (double)stride + (double)(rows - 1) * ld + (double)cols;
    double have = (double)(buf->size / elem); /* NOLINT(bugprone-integer-division): whole elements */
    if (need > have)
        return dl_fail("GEMM: matrix %s (%zu x %zu, offset %zu, ld %zu, batch %zu, stride %zu) "
                       "needs %.0f elements, its buffer holds %.0f",
                       name, rows, cols, off, ld, batch, stride, need, have);
    return 0;
}

const char *dl_gemm_backend_name(dl_gemm_backend backend) {
    return backend == DL_GEMM_OPENBLAS ? "openblas" : "clblast";
}

dl_gemm_backend dl_device_gemm_backend(const dl_device *dev) { return dev->gemm_backend; }

static bool host_blas_possible(const dl_device_info *info) {
#ifdef DEDLOC_HAVE_OPENBLAS
    return info->is_cpu && info->unified_memory;
#else
    (void)info;
    return false;
#endif
}

dl_gemm_backend dl_gemm_default_backend(const dl_device_info *info) {
    const char *env = getenv("DEDLOC_GEMM_BACKEND");
    if (env && !strcmp(env, "clblast")) return DL_GEMM_CLBLAST;
    if (env && *env && strcmp(env, "openblas"))
        DL_WARN("device", "DEDLOC_GEMM_BACKEND='%s' is neither clblast nor openblas; ignored", env);
    return host_blas_possible(info) ? DL_GEMM_OPENBLAS : DL_GEMM_CLBLAST;
}

int dl_device_set_gemm_backend(dl_device *dev, dl_gemm_backend backend) {
    if (backend == DL_GEMM_OPENBLAS && !host_blas_possible(&dev->info)) {
#ifdef DEDLOC_HAVE_OPENBLAS
        return dl_fail("OpenBLAS GEMM needs a CPU device whose buffers live in host memory; %s is not one",
                       dev->info.name);
#else
        return dl_fail("this build has no OpenBLAS (install libopenblas-dev and rebuild)");
#endif
    }
    dev->gemm_backend = backend;
    return 0;
}

#ifdef DEDLOC_HAVE_OPENBLAS
/* The buffers of one product, each mapped once (A and B may share a buffer,
 * even with C: then it is mapped once for reading and writing). */
struct host_maps {
    const dl_buffer *buf[3];
    cl_map_flags flags[3];
    void *ptr[3];
    int count;
};

static int map_index(struct host_maps *hm, const dl_buffer *b, cl_map_flags flags) {
    for (int i = 0; i < hm->count; i++)
        if (hm->buf[i]->mem == b->mem) {
            hm->flags[i] |= flags;
            return i;
        }
    hm->buf[hm->count] = b;
    hm->flags[hm->count] = flags;
    hm->ptr[hm->count] = NULL;
    return hm->count++;
}

static void unmap_all(dl_device *dev, struct host_maps *hm) {
    for (int i = 0; i < hm->count; i++)
        if (hm->ptr[i]) clEnqueueUnmapMemObject(dev->queue, hm->buf[i]->mem, hm->ptr[i], 0, NULL, NULL);
}

/* A batch of small products (attention's (sequence, head) items) runs one
 * item per call with OpenBLAS single-threaded, the items split over as many
 * threads as OpenBLAS would use: OpenBLAS threads each small call on its
 * own, and waking its threads costs more than the product (measured: about
 * 2 GFLOP/s on 128x128x32 items). Each item is computed whole by one thread
 * either way, so the bits do not depend on the split. */
struct blas_items {
    const dl_gemm_args *g;
    const float *a, *b;
    float *c;
    size_t batch, first, end;   /* flat item range [first, end) over (outer, batch) */
};

static void run_items(const struct blas_items *w) {
    const dl_gemm_args *g = w->g;
    enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
    for (size_t j = w->first; j < w->end; j++) {
        size_t o = j / w->batch, i = j % w->batch;
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)g->m, (blasint)g->n, (blasint)g->k, g->alpha,
                    w->a + o * g->a_outer + i * g->a_stride, (blasint)g->lda,
                    w->b + o * g->b_outer + i * g->b_stride, (blasint)g->ldb, g->beta,
                    w->c + o * g->c_outer + i * g->c_stride, (blasint)g->ldc);
    }
}

static void *run_items_thread(void *arg) {
    run_items(arg);
    return NULL;
}

enum { SMALL_ITEM_FLOPS = 1 << 24, MAX_ITEM_THREADS = 64 };

/* One large product split by rows of C over the threads, each part a
 * single-threaded call: OpenBLAS's own threading of a 1024 x 1024 x 1024
 * product reaches 165 GFLOP/s on this project's 2-core machine against 98-101
 * for one thread, while two independent halves run at the sum (each core
 * keeps its own packed panels in its own cache). Each element of C is still
 * computed whole by one single-threaded call. */
enum { SPLIT_MIN_FLOPS = 1 << 27, SPLIT_ROW_ALIGN = 64 };

struct blas_rows {
    const dl_gemm_args *g;
    const float *a, *b;
    float *c;
    size_t r0, r1;
};

static void run_rows(const struct blas_rows *w) {
    const dl_gemm_args *g = w->g;
    if (w->r1 <= w->r0) return;
    /* op(A)'s rows: rows of A, or columns of A when it is transposed */
    const float *a = w->a + (g->trans_a ? w->r0 : w->r0 * g->lda);
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                g->trans_b ? CblasTrans : CblasNoTrans, (blasint)(w->r1 - w->r0), (blasint)g->n,
                (blasint)g->k, g->alpha, a, (blasint)g->lda, w->b, (blasint)g->ldb, g->beta,
                w->c + w->r0 * g->ldc, (blasint)g->ldc);
}

static void *run_rows_thread(void *arg) {
    run_rows(arg);
    return NULL;
}

#ifdef DEDLOC_HAVE_DNNL
/* Large products go to oneDNN's fp32 GEMM where the build has it: on the
 * step's linear shapes it ran 1.05-1.70x the row-split OpenBLAS below on a
 * quiet machine (bench_gemm_bf16, bench/RESULTS.md). Only products of
 * SPLIT_MIN_FLOPS and more: oneDNN threads with OpenMP, whose threads spin
 * at barriers, and small products on shared cores paid for that (the bf16
 * path's finding, gemm_bf16.c). DEDLOC_FP32_GEMM=openblas keeps every
 * product on OpenBLAS (for comparison). */
static bool dnnl_fp32_wanted(void) {
    static int wanted = -1;
    int w = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
    if (w < 0) {
        const char *env = getenv("DEDLOC_FP32_GEMM");
        w = !(env && !strcmp(env, "openblas"));
        __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
    }
    return w;
}

static bool run_dnnl(const dl_gemm_args *g, const float *a, const float *b, float *c, int threads) {
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
    if (flops < SPLIT_MIN_FLOPS || !dnnl_fp32_wanted()) return false;
    omp_set_num_threads(threads > 0 ? threads : 1);
    return dnnl_sgemm(g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', (dnnl_dim_t)g->m, (dnnl_dim_t)g->n,
                      (dnnl_dim_t)g->k, g->alpha, a, (dnnl_dim_t)g->lda, b, (dnnl_dim_t)g->ldb, g->beta, c,
                      (dnnl_dim_t)g->ldc) == dnnl_success;
}
#endif

/* Returns false when the product is better left to OpenBLAS's threads. */
static bool run_split(const dl_gemm_args *g, const float *a, const float *b, float *c, int threads) {
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
#ifdef DEDLOC_HAVE_DNNL
    if (run_dnnl(g, a, b, c, threads)) return true;
#endif
    if (threads < 2 || flops < SPLIT_MIN_FLOPS || g->m < (size_t)threads * SPLIT_ROW_ALIGN) return false;
    if (threads > MAX_ITEM_THREADS) threads = MAX_ITEM_THREADS;
    struct blas_rows parts[MAX_ITEM_THREADS] = {{0}};
    pthread_t ids[MAX_ITEM_THREADS];
    bool started[MAX_ITEM_THREADS] = {false};
    size_t blocks = (g->m + SPLIT_ROW_ALIGN - 1) / SPLIT_ROW_ALIGN;
    openblas_set_num_threads(1);
    for (int t = 0; t < threads; t++) {
        size_t r0 = blocks * (size_t)t / (size_t)threads * SPLIT_ROW_ALIGN,
               r1 = blocks * (size_t)(t + 1) / (size_t)threads * SPLIT_ROW_ALIGN;
        parts[t] = (struct blas_rows){g, a, b, c, r0 < g->m ? r0 : g->m, r1 < g->m ? r1 : g->m};
        if (t > 0) started[t] = pthread_create(&ids[t], NULL, run_rows_thread, &parts[t]) == 0;
    }
    run_rows(&parts[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(ids[t], NULL);
        else run_rows(&parts[t]);
    }
    openblas_set_num_threads(threads);
    return true;
}

static void run_batch(const dl_gemm_args *g, const float *a, const float *b, float *c, size_t batch, size_t outer) {
    size_t items = batch * outer;
    struct blas_items all = {g, a, b, c, batch, 0, items};
    double item_flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
    int threads = openblas_get_num_threads();
    if (items == 1 && run_split(g, a, b, c, threads)) return;
    if (items < 2 || item_flops >= SMALL_ITEM_FLOPS || threads < 1) {
        run_items(&all);
        return;
    }
    if (threads > MAX_ITEM_THREADS) threads = MAX_ITEM_THREADS;
    if ((size_t)threads > items) threads = (int)items;
    openblas_set_num_threads(1);
    struct blas_items parts[MAX_ITEM_THREADS] = {{0}};
    pthread_t ids[MAX_ITEM_THREADS];
    bool started[MAX_ITEM_THREADS] = {false};
    for (int t = 0; t < threads; t++) {
        parts[t] = all;
        parts[t].first = items * (size_t)t / (size_t)threads;
        parts[t].end = items * (size_t)(t + 1) / (size_t)threads;
        /* the caller takes part 0; a thread that cannot start is run here */
        if (t > 0) started[t] = pthread_create(&ids[t], NULL, run_items_thread, &parts[t]) == 0;
    }
    run_items(&parts[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(ids[t], NULL);
        else run_items(&parts[t]);
    }
    openblas_set_num_threads(threads);
}

/* The kernels queued before this product wrote its inputs: the blocking maps
 * wait for them (the queue is in order). The unmaps are queued, so kernels
 * queued after the product see its result. */
static int gemm_host_blas(dl_device *dev, const dl_gemm_args *g, size_t batch, size_t outer) {
    struct host_maps hm = {.count = 0};
    int ia = map_index(&hm, g->a, CL_MAP_READ), ib = map_index(&hm, g->b, CL_MAP_READ);
    int ic = map_index(&hm, g->c, CL_MAP_READ | CL_MAP_WRITE);
    for (int i = 0; i < hm.count; i++) {
        cl_int err;
        hm.ptr[i] = clEnqueueMapBuffer(dev->queue, hm.buf[i]->mem, CL_TRUE, hm.flags[i], 0, hm.buf[i]->size,
                                       0, NULL, NULL, &err);
        if (dl_cl_check(err, "clEnqueueMapBuffer (GEMM through OpenBLAS)")) {
            hm.ptr[i] = NULL;
            unmap_all(dev, &hm);
            return -1;
        }
    }
    const float *a = (const float *)hm.ptr[ia] + g->a_off;
    const float *b = (const float *)hm.ptr[ib] + g->b_off;
    float *c = (float *)hm.ptr[ic] + g->c_off;
    run_batch(g, a, b, c, batch, outer);
    unmap_all(dev, &hm);
    return 0;
}
#endif

static void gemm_describe(const dl_gemm_args *g, size_t batch, char *what, size_t size) {
    snprintf(what, size, "GEMM %zux%zux%zu%s%s batch %zu", g->m, g->n, g->k,
             g->trans_a ? " A^T" : "", g->trans_b ? " B^T" : "", batch);
}

/* An outer batch of fp32 GEMMs on CLBlast: one batched call with an offset
 * per item (half GEMMs: gemm_clblast_half_outer). */
static int gemm_clblast_outer(dl_device *dev, const dl_gemm_args *g, size_t batch, size_t outer) {
    size_t count = batch * outer;
    size_t *offs = dl_malloc(dl_mul_size(count, 3 * sizeof *offs));
    float *scalars = dl_malloc(dl_mul_size(count, 2 * sizeof *scalars));
    if (!offs || !scalars) {
        free(offs);
        free(scalars);
        return -1;
    }
    size_t *ao = offs, *bo = offs + count, *co = offs + 2 * count;
    for (size_t o = 0; o < outer; o++)
        for (size_t i = 0; i < batch; i++) {
            size_t j = o * batch + i;
            ao[j] = g->a_off + o * g->a_outer + i * g->a_stride;
            bo[j] = g->b_off + o * g->b_outer + i * g->b_stride;
            co[j] = g->c_off + o * g->c_outer + i * g->c_stride;
            scalars[j] = g->alpha;
            scalars[count + j] = g->beta;
        }
    CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
    cl_command_queue q = dev->queue;
    CLBlastStatusCode st =
        CLBlastSgemmBatched(CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, scalars, g->a->mem, ao,
                            g->lda, g->b->mem, bo, g->ldb, scalars + count, g->c->mem, co, g->ldc,
                            count, &q, NULL);
    free(offs);
    free(scalars);
    if (st == CLBlastSuccess) return 0;
    char what[160];
    gemm_describe(g, count, what, sizeof what);
    return clblast_check(st, what);
}

/* An outer batch of half GEMMs: one strided-batched call per outer item.
 * CLBlastHgemmBatched (the per-item-offset form gemm_clblast_outer uses for
 * fp32) gave results off by a factor of about 128 on Intel's OpenCL CPU
 * runtime with Debian's CLBlast 1.5.3, as if it read the per-item half
 * alphas as floats; the strided-batched call takes one alpha by value and
 * is right there (tests/device/test_gemm_half, the attention cases). */
static int gemm_clblast_half_outer(dl_device *dev, const dl_gemm_args *g, size_t batch,
                                   size_t outer) {
    CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
    cl_command_queue q = dev->queue;
    cl_half alpha = dl_f32_to_f16(g->alpha), beta = dl_f32_to_f16(g->beta);
    for (size_t o = 0; o < outer; o++) {
        size_t ao = g->a_off + o * g->a_outer, bo = g->b_off + o * g->b_outer,
               co = g->c_off + o * g->c_outer;
        CLBlastStatusCode st = CLBlastHgemmStridedBatched(
            CLBlastLayoutRowMajor, ta, tb, g->m, g->n, g->k, alpha, g->a->mem, ao, g->lda,
            g->a_stride, g->b->mem, bo, g->ldb, g->b_stride, beta, g->c->mem, co, g->ldc,
            g->c_stride, batch, &q, NULL);
        if (st != CLBlastSuccess) {
            char what[160];
            gemm_describe(g, batch, what, sizeof what);
            return clblast_check(st, what);
        }
    }
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
    size_t outer = g->outer_count ? g->outer_count : 1;
    if (check_matrix("A", g->a, elem, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->a_off,
                     g->lda, batch, g->a_stride, outer, g->a_outer) ||
        check_matrix("B", g->b, elem, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->b_off,
                     g->ldb, batch, g->b_stride, outer, g->b_outer) ||
        check_matrix("C", g->c, elem, g->m, g->n, g->c_off, g->ldc, batch, g->c_stride, outer,
                     g->c_outer))
        return -1;
#ifdef DEDLOC_HAVE_OPENBLAS
    if (dev->gemm_backend == DL_GEMM_OPENBLAS && g->type == DL_GEMM_F32)
        return gemm_host_blas(dev, g, batch, outer);
#endif
    if (outer > 1 && g->type == DL_GEMM_F16) return gemm_clblast_half_outer(dev, g, batch, outer);
    if (outer > 1) return gemm_clblast_outer(dev, g, batch, outer);
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
        gemm_describe(g, batch, what, sizeof what);
        return clblast_check(st, what);
    }
    return 0;
}
