/* bf16 compute of fp32 GEMMs on a CPU device whose buffers are host memory:
 * A and B are rounded to bf16 (round to nearest even) by a oneDNN reorder,
 * oneDNN's matmul multiplies them with fp32 accumulation, and the fp32
 * result lands in C as alpha * product + beta * C. On CPUs with the
 * AVX512-BF16 dot-product instructions this runs about twice the fp32 rate
 * (bench/RESULTS.md). oneDNN's fpmath_mode bf16 on an fp32 matmul would
 * avoid the explicit rounding, but oneDNN 2.6 ignores it for matmul on these
 * CPUs (the fp32 kernel runs; measured), hence the reorders. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "device/device_internal.h"

#ifdef DEDLOC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#endif

bool dl_bf16_gemm_supported(const dl_device *dev, char *why, size_t size) {
    if (!why) size = 0;
#ifdef DEDLOC_HAVE_DNNL
    if (!dev->info.is_cpu || !dev->info.unified_memory) {
        snprintf(why, size, "%s is not a CPU device with host-memory buffers", dev->info.name);
        return false;
    }
    if (dev->gemm_backend != DL_GEMM_OPENBLAS) {
        snprintf(why, size, "GEMMs on %s run through CLBlast (DEDLOC_GEMM_BACKEND), not on the host",
                 dev->info.name);
        return false;
    }
    /* The ISA values nest as bit sets: avx512_core_bf16's bits are in AMX's. */
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) != (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
        snprintf(why, size, "the CPU has no AVX512-BF16 dot-product instructions (oneDNN ISA %s%s)",
                 dnnl_cpu_isa2str(isa), getenv("DNNL_MAX_CPU_ISA") ? ", limited by DNNL_MAX_CPU_ISA" : "");
        return false;
    }
    if (size) why[0] = 0;
    return true;
#else
    (void)dev;
    snprintf(why, size, "this build has no oneDNN (install libdnnl-dev and rebuild)");
    return false;
#endif
}

#ifdef DEDLOC_HAVE_DNNL
/* Products below this many flops run on one thread. oneDNN threads with
 * OpenMP, whose threads wait at each of a product's barriers by spinning:
 * when the cores are shared (PoCL's own threads, other processes), a
 * spinning thread waits for one that is not running, and the tiny model's
 * GEMMs (16-67 MFLOP) took 60-130 ms each on 2 threads against 2-6 ms on
 * one under load (bench/RESULTS.md). sahajBERT's linear layers (2-8 GFLOP)
 * keep OpenMP's default thread count. */
enum { ONE_THREAD_FLOPS = 1 << 28 };

/* One weight matrix as a product reads it (offset, shape, orientation), copied
 * into the blocked layout oneDNN's matmul asks for. Given plain weights, the
 * matmul copies B into that layout inside every call, and for the forward
 * products' transposed W the copy is a transposition; packed once per upload
 * and reused by every layer application and micro-batch instead. */
typedef struct packed_weights {
    size_t off, k, n, ld;
    bool trans;
    dnnl_memory_desc_t md;        /* the layout packed; data holds its bytes */
    void *data;
    size_t bytes;
    unsigned generation;          /* of the weights it was packed from */
} packed_weights;

/* Where the items of a (possibly batched) operand lie: item (o, i) of the
 * outer x batch grid starts o * outer_stride + i * batch_stride elements
 * after the matrix's offset. One item: outer = batch = 1. */
typedef struct grid {
    size_t outer, batch, outer_stride, batch_stride;
} grid;

/* An operand rounded to dense bf16, and the fp32 matrix it was rounded from,
 * as stored: buffer, offset, grid, rows x cols with leading dimension ld (a
 * product that reads it transposed reads the same rounding). Successive
 * products often read one matrix: Q, K and V's from the layer input, a
 * linear layer's dW and dx from its output gradient. */
typedef struct rounded {
    cl_mem mem;
    size_t off, rows, cols, ld;
    grid gr;
    bool valid;
    unsigned long used;           /* when last read, for the least recently used */
    uint16_t *data;
    size_t cap;
} rounded;

/* Three: the QKV backward reads the layer input and two output gradients in
 * turn. */
enum { ROUNDED_SLOTS = 3 };

struct dl_bf16_gemm {
    dl_device *dev;
    int threads;                  /* OpenMP's default, read at create */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    /* The weights rounded once per upload (dl_bf16_gemm_set_weights). */
    uint16_t *weights;
    size_t weights_len, weights_set;
    unsigned generation;          /* counts uploads; a packed copy of an older one is stale */
    packed_weights *packed;
    int packed_count, packed_cap;
    size_t packed_bytes;
    /* Rounded operands of the recent products; grown as needed. */
    rounded slots[ROUNDED_SLOTS];
    unsigned long clock;
};

static int dnnl_check(dnnl_status_t st, const char *what) {
    if (st == dnnl_success) return 0;
    return dl_fail("oneDNN %s: %s", what, dnnl_status2str(st));
}

int dl_bf16_gemm_create(dl_device *dev, dl_bf16_gemm **out) {
    *out = NULL;
    char why[256];
    if (!dl_bf16_gemm_supported(dev, why, sizeof why)) return dl_fail("bf16 compute: %s", why);
    dl_bf16_gemm *h = dl_calloc(1, sizeof *h);
    if (!h) return -1;
    h->dev = dev;
    h->threads = omp_get_max_threads();
    if (dnnl_check(dnnl_engine_create(&h->engine, dnnl_cpu, 0), "creating the CPU engine") ||
        dnnl_check(dnnl_stream_create(&h->stream, h->engine, dnnl_stream_default_flags),
                   "creating a stream")) {
        dl_bf16_gemm_free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void dl_bf16_gemm_free(dl_bf16_gemm *h) {
    if (!h) return;
    if (h->stream) dnnl_stream_destroy(h->stream);
    if (h->engine) dnnl_engine_destroy(h->engine);
    free(h->weights);
    for (int i = 0; i < h->packed_count; i++) free(h->packed[i].data);
    free(h->packed);
    for (int i = 0; i < ROUNDED_SLOTS; i++) free(h->slots[i].data);
    free(h);
}

size_t dl_bf16_gemm_host_bytes(const dl_bf16_gemm *h) {
    if (!h) return 0;
    size_t elements = h->weights_len;
    for (int i = 0; i < ROUNDED_SLOTS; i++) elements += h->slots[i].cap;
    return elements * sizeof(uint16_t) + h->packed_bytes;
}

int dl_bf16_gemm_set_weights(dl_bf16_gemm *h, const float *values, size_t n) {
    if (n > h->weights_len) {
        uint16_t *grown = dl_malloc(dl_mul_size(n, sizeof *grown));
        if (!grown) return -1;
        free(h->weights);
        h->weights = grown;
        h->weights_len = n;
    }
    dl_f32_to_bf16_array(h->weights, values, n);
    h->weights_set = n;
    h->generation++;
    return 0;
}

static int grow(uint16_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    uint16_t *grown = dl_malloc(dl_mul_size(need, sizeof *grown));
    if (!grown) return -1;
    free(*p);
    *p = grown;
    *cap = need;
    return 0;
}

/* A rows x cols matrix (as the product reads it), or a grid of them, stored
 * with leading dimension ld, transposed in memory when trans. One matrix is
 * described in 2D (what the linear layers' products were measured with), a
 * grid in 4D: (outer, batch, rows, cols), oneDNN's batched matmul. */
static int matrix_desc(dnnl_memory_desc_t *md, const grid *gr, size_t rows, size_t cols, size_t ld, bool trans,
                       dnnl_data_type_t type) {
    dnnl_dim_t row_stride = trans ? 1 : (dnnl_dim_t)ld, col_stride = trans ? (dnnl_dim_t)ld : 1;
    if (gr->outer == 1 && gr->batch == 1) {
        dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols}, strides = {row_stride, col_stride};
        return dnnl_check(dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides), "describing a matrix");
    }
    /* A dimension of one item has no stride of its own (dl_gemm_args leaves
     * it 0); give it the span of the dimensions inside, as a dense one has. */
    dnnl_dim_t batch_stride = gr->batch > 1 ? (dnnl_dim_t)gr->batch_stride : (dnnl_dim_t)(rows * cols);
    dnnl_dim_t outer_stride = gr->outer > 1 ? (dnnl_dim_t)gr->outer_stride : batch_stride * (dnnl_dim_t)gr->batch;
    dnnl_dims_t dims = {(dnnl_dim_t)gr->outer, (dnnl_dim_t)gr->batch, (dnnl_dim_t)rows, (dnnl_dim_t)cols};
    dnnl_dims_t strides = {outer_stride, batch_stride, row_stride, col_stride};
    return dnnl_check(dnnl_memory_desc_init_by_strides(md, 4, dims, type, strides), "describing a batch of matrices");
}

/* The grid of a dense copy: items one after the other. */
static grid dense_grid(const grid *gr, size_t rows, size_t cols) {
    return (grid){gr->outer, gr->batch, gr->batch * rows * cols, rows * cols};
}

static int execute(dl_bf16_gemm *h, const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args,
                   const char *what) {
    dnnl_primitive_t prim = NULL;
    /* oneDNN's primitive cache keeps the generated code of every shape seen,
     * so creating the primitive again for a known shape is cheap. */
    int rc = dnnl_check(dnnl_primitive_create(&prim, pd), what) ||
             dnnl_check(dnnl_primitive_execute(prim, h->stream, nargs, args), what) ||
             dnnl_check(dnnl_stream_wait(h->stream), what);
    if (prim) dnnl_primitive_destroy(prim);
    return rc ? -1 : 0;
}

static int make_memory(dl_bf16_gemm *h, dnnl_memory_t *mem, const dnnl_memory_desc_t *md, const void *ptr) {
    return dnnl_check(dnnl_memory_create(mem, md, h->engine, (void *)ptr), "wrapping a matrix");
}

/* Copies from, laid out as from_md, into to, laid out as to_md (a oneDNN
 * reorder: rounding to bf16, or packing into the layout a matmul wants). */
static int reorder(dl_bf16_gemm *h, const dnnl_memory_desc_t *from_md, const void *from,
                   const dnnl_memory_desc_t *to_md, void *to, const char *what) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_t sm = NULL, dm = NULL;
    int rc = dnnl_check(dnnl_reorder_primitive_desc_create(&pd, from_md, h->engine, to_md, h->engine, NULL), what) ||
             make_memory(h, &sm, from_md, from) || make_memory(h, &dm, to_md, to);
    if (!rc) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, sm}, {DNNL_ARG_TO, dm}};
        rc = execute(h, pd, 2, args, what);
    }
    if (sm) dnnl_memory_destroy(sm);
    if (dm) dnnl_memory_destroy(dm);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return rc ? -1 : 0;
}

/* Rounds a rows x cols fp32 matrix (or a grid of them) into dense bf16 of
 * the same orientation (the leading dimension becomes the row or column
 * length; the items follow each other). */
static int round_matrix(dl_bf16_gemm *h, const float *src, const grid *gr, size_t rows, size_t cols, size_t ld,
                        bool trans, uint16_t *dst) {
    dnnl_memory_desc_t src_md, dst_md;
    grid dense = dense_grid(gr, rows, cols);
    if (matrix_desc(&src_md, gr, rows, cols, ld, trans, dnnl_f32) ||
        matrix_desc(&dst_md, &dense, rows, cols, trans ? rows : cols, trans, dnnl_bf16))
        return -1;
    return reorder(h, &src_md, src, &dst_md, dst, "rounding to bf16");
}

/* The copy of the weight matrix at b (as g reads it: offset, shape,
 * orientation) in the layout want, packed from the current upload; packs it
 * where there is none yet or it is stale. */
static int packed_for(dl_bf16_gemm *h, const dl_gemm_args *g, const dnnl_memory_desc_t *b_md, const uint16_t *b,
                      const dnnl_memory_desc_t *want, const void **out) {
    packed_weights *p = NULL;
    for (int i = 0; i < h->packed_count && !p; i++) {
        packed_weights *e = &h->packed[i];
        if (e->off == g->b_off && e->k == g->k && e->n == g->n && e->ld == g->ldb && e->trans == g->trans_b &&
            dnnl_memory_desc_equal(&e->md, want))
            p = e;
    }
    if (!p) {
        if (h->packed_count == h->packed_cap) {
            int cap = h->packed_cap ? 2 * h->packed_cap : 16;
            packed_weights *grown = dl_realloc(h->packed, (size_t)cap * sizeof *grown);
            if (!grown) return -1;
            h->packed = grown;
            h->packed_cap = cap;
        }
        size_t bytes = dnnl_memory_desc_get_size(want);
        void *data = dl_malloc(bytes);
        if (!data) return -1;
        p = &h->packed[h->packed_count++];
        *p = (packed_weights){.off = g->b_off, .k = g->k, .n = g->n, .ld = g->ldb, .trans = g->trans_b,
                              .md = *want, .data = data, .bytes = bytes, .generation = h->generation - 1};
        h->packed_bytes += bytes;
    }
    if (p->generation != h->generation) {
        if (reorder(h, b_md, b, want, p->data, "packing weights")) return -1;
        p->generation = h->generation;
    }
    *out = p->data;
    return 0;
}

/* C = alpha * A B + beta * C on bf16 operands with fp32 accumulation. B is
 * one of the weight matrices when b_weights: then the matmul chooses its
 * layout and reads a packed copy (packed_for). */
static int matmul(dl_bf16_gemm *h, const dl_gemm_args *g, const grid *a_grid, const uint16_t *a, size_t lda,
                  const grid *b_grid, const uint16_t *b, size_t ldb, bool b_weights, const grid *c_grid,
                  float *c) {
    dnnl_memory_desc_t a_md, b_md, b_any, c_md;
    if (matrix_desc(&a_md, a_grid, g->m, g->k, lda, g->trans_a, dnnl_bf16) ||
        matrix_desc(&b_md, b_grid, g->k, g->n, ldb, g->trans_b, dnnl_bf16) ||
        matrix_desc(&c_md, c_grid, g->m, g->n, g->ldc, false, dnnl_f32))
        return -1;
    if (b_weights &&
        dnnl_check(dnnl_memory_desc_init_by_tag(&b_any, b_md.ndims, b_md.dims, dnnl_bf16, dnnl_format_tag_any),
                   "describing packed weights"))
        return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL;
    dnnl_matmul_desc_t desc;
    int rc = dnnl_check(dnnl_matmul_desc_init(&desc, &a_md, b_weights ? &b_any : &b_md, NULL, &c_md),
                        "describing a bf16 matmul") ||
             dnnl_check(dnnl_primitive_attr_create(&attr), "creating matmul attributes");
    if (!rc && g->alpha != 1.0f)
        rc = dnnl_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g->alpha), "setting alpha");
    if (!rc && g->beta != 0.0f)
        rc = dnnl_check(dnnl_post_ops_create(&ops), "creating post-ops") ||
             dnnl_check(dnnl_post_ops_append_sum(ops, g->beta), "adding beta * C") ||
             dnnl_check(dnnl_primitive_attr_set_post_ops(attr, ops), "setting post-ops");
    if (!rc)
        rc = dnnl_check(dnnl_primitive_desc_create(&pd, &desc, attr, h->engine, NULL),
                        "creating a bf16 matmul (the CPU may lack bf16 support)");
    if (!rc && b_weights) {
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        const void *packed = NULL;
        rc = packed_for(h, g, &b_md, b, want, &packed) || make_memory(h, &bm, want, packed);
    } else if (!rc) {
        rc = make_memory(h, &bm, &b_md, b);
    }
    if (!rc) rc = make_memory(h, &am, &a_md, a) || make_memory(h, &cm, &c_md, c);
    if (!rc) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        rc = execute(h, pd, 3, args, "running a bf16 matmul");
    }
    if (am) dnnl_memory_destroy(am);
    if (bm) dnnl_memory_destroy(bm);
    if (cm) dnnl_memory_destroy(cm);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ops) dnnl_post_ops_destroy(ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc ? -1 : 0;
}

/* Maps each distinct buffer once (B and C may share one, as A and B may). */
struct maps {
    const dl_buffer *buf[3];
    cl_map_flags flags[3];
    void *ptr[3];
    int count;
};

static int map_slot(struct maps *mp, const dl_buffer *b, cl_map_flags flags) {
    for (int i = 0; i < mp->count; i++)
        if (mp->buf[i]->mem == b->mem) {
            mp->flags[i] |= flags;
            return i;
        }
    mp->buf[mp->count] = b;
    mp->flags[mp->count] = flags;
    mp->ptr[mp->count] = NULL;
    return mp->count++;
}

static void unmap_all(dl_device *dev, struct maps *mp) {
    for (int i = 0; i < mp->count; i++)
        if (mp->ptr[i]) clEnqueueUnmapMemObject(dev->queue, mp->buf[i]->mem, mp->ptr[i], 0, NULL, NULL);
}

/* One past the last element of a rows x cols matrix grid (with ld). */
static size_t span(size_t off, const grid *gr, size_t rows, size_t cols, size_t ld) {
    size_t last_item = (gr->outer > 1 ? (gr->outer - 1) * gr->outer_stride : 0) +
                       (gr->batch > 1 ? (gr->batch - 1) * gr->batch_stride : 0);
    return off + last_item + (rows - 1) * ld + cols;
}

static bool same_grid(const grid *x, const grid *y) {
    return x->outer == y->outer && x->batch == y->batch && x->outer_stride == y->outer_stride &&
           x->batch_stride == y->batch_stride;
}

/* The dense bf16 rounding of the rows x cols operand (as the product reads
 * it; transposed in memory when trans) at src, offset off of buffer mem: a
 * rounding still held when the product may reuse one, else rounded into
 * the least recently used slot other than the one holding `in_use` (the
 * product's other operand, which a reallocation there would pull away). */
static int rounded_operand(dl_bf16_gemm *h, cl_mem mem, const float *src, size_t off, const grid *gr, size_t rows,
                           size_t cols, size_t ld, bool trans, const uint16_t *in_use, const uint16_t **out) {
    size_t s_rows = trans ? cols : rows, s_cols = trans ? rows : cols;
    rounded *slot = NULL;
    for (int i = 0; i < ROUNDED_SLOTS && !slot; i++) {
        rounded *e = &h->slots[i];
        if (e->valid && e->mem == mem && e->off == off && e->rows == s_rows && e->cols == s_cols && e->ld == ld &&
            same_grid(&e->gr, gr))
            slot = e;
    }
    if (slot) {
        slot->used = ++h->clock;
        *out = slot->data;
        return 0;
    }
    for (int i = 0; i < ROUNDED_SLOTS; i++) {
        rounded *e = &h->slots[i];
        if (e->data && e->data == in_use) continue;
        if (!slot || e->used < slot->used) slot = e;
    }
    if (!slot) return dl_fail("bf16 GEMM: no rounding slot free"); /* not with ROUNDED_SLOTS >= 2 */
    slot->valid = false;
    if (grow(&slot->data, &slot->cap, dl_mul_size(gr->outer * gr->batch, rows * cols)) ||
        round_matrix(h, src, gr, rows, cols, ld, trans, slot->data))
        return -1;
    *slot = (rounded){.mem = mem, .off = off, .rows = s_rows, .cols = s_cols, .ld = ld, .gr = *gr, .valid = true,
                      .used = ++h->clock, .data = slot->data, .cap = slot->cap};
    *out = slot->data;
    return 0;
}

static int run(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights, bool again) {
    size_t batch = g->batch_count ? g->batch_count : 1, outer = g->outer_count ? g->outer_count : 1;
    if (g->m == 0 || g->n == 0 || g->k == 0) return dl_gemm(h->dev, g);
    if (g->type != DL_GEMM_F32) return dl_fail("bf16 compute: the operands must be fp32 buffers");
    bool batched = batch > 1 || outer > 1;
    grid ag = {outer, batch, g->a_outer, g->a_stride}, bg = {outer, batch, g->b_outer, g->b_stride},
         cg = {outer, batch, g->c_outer, g->c_stride};
    /* dl_gemm's shape and bounds checks, on an empty fp32 product of the same
     * layout, would cost a map; check the spans here instead. */
    size_t a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k;
    size_t b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n;
    if (g->lda < a_cols || g->ldb < b_cols || g->ldc < g->n)
        return dl_fail("bf16 GEMM %zux%zux%zu: a leading dimension is smaller than its matrix's columns",
                       g->m, g->n, g->k);
    size_t a_need = span(g->a_off, &ag, a_rows, a_cols, g->lda), b_need = span(g->b_off, &bg, b_rows, b_cols, g->ldb),
           c_need = span(g->c_off, &cg, g->m, g->n, g->ldc);
    /* The rounded weights are one matrix: a batched product rounds its B. */
    bool b_ready = b_weights && !batched;
    if (b_ready && !h->weights_set) return dl_fail("bf16 GEMM: B is the weights, but none were set");
    if (a_need > g->a->size / 4 || c_need > g->c->size / 4 ||
        b_need > (b_ready ? h->weights_set : g->b->size / 4))
        return dl_fail("bf16 GEMM %zux%zux%zu (batch %zu x %zu): a matrix does not fit its buffer", g->m, g->n,
                       g->k, outer, batch);
    size_t items = outer * batch;
    /* Roundings of earlier products are reused only where the caller says
     * their matrices are unchanged (dl_bf16_gemm_run_again). */
    if (!again)
        for (int i = 0; i < ROUNDED_SLOTS; i++) h->slots[i].valid = false;

    /* The kernels queued before wrote the inputs: the blocking maps wait for
     * them; the queued unmaps order the kernels after. */
    struct maps mp = {.count = 0};
    int ia = map_slot(&mp, g->a, CL_MAP_READ), ib = b_ready ? -1 : map_slot(&mp, g->b, CL_MAP_READ);
    int ic = map_slot(&mp, g->c, CL_MAP_READ | CL_MAP_WRITE);
    for (int i = 0; i < mp.count; i++) {
        cl_int err;
        mp.ptr[i] = clEnqueueMapBuffer(h->dev->queue, mp.buf[i]->mem, CL_TRUE, mp.flags[i], 0, mp.buf[i]->size,
                                       0, NULL, NULL, &err);
        if (dl_cl_check(err, "clEnqueueMapBuffer (bf16 GEMM)")) {
            mp.ptr[i] = NULL;
            unmap_all(h->dev, &mp);
            return -1;
        }
    }
    const float *a = (const float *)mp.ptr[ia] + g->a_off;
    float *c = (float *)mp.ptr[ic] + g->c_off;
    const uint16_t *b16 = h->weights + g->b_off;
    size_t ldb16 = g->ldb;
    grid a16g = dense_grid(&ag, a_rows, a_cols), b16g = bg;
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)items;
    omp_set_num_threads(flops < ONE_THREAD_FLOPS ? 1 : h->threads);
    const uint16_t *a16 = NULL;
    int rc = rounded_operand(h, g->a->mem, a, g->a_off, &ag, g->m, g->k, g->lda, g->trans_a, NULL, &a16);
    if (!rc && !b_ready) {
        rc = rounded_operand(h, g->b->mem, (const float *)mp.ptr[ib] + g->b_off, g->b_off, &bg, g->k, g->n,
                             g->ldb, g->trans_b, a16, &b16);
        ldb16 = g->trans_b ? g->k : g->n;
        b16g = dense_grid(&bg, b_rows, b_cols);
    }
    if (!rc) rc = matmul(h, g, &a16g, a16, g->trans_a ? g->m : g->k, &b16g, b16, ldb16, b_ready, &cg, c);
    unmap_all(h->dev, &mp);
    if (rc)
        return dl_fail_context("bf16 GEMM %zux%zux%zu%s%s (batch %zu x %zu)", g->m, g->n, g->k,
                               g->trans_a ? " A^T" : "", g->trans_b ? " B^T" : "", outer, batch);
    return 0;
}

int dl_bf16_gemm_run(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights) {
    return run(h, g, b_weights, false);
}

int dl_bf16_gemm_run_again(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights) {
    return run(h, g, b_weights, true);
}
#else
struct dl_bf16_gemm {
    int unused;
};

int dl_bf16_gemm_create(dl_device *dev, dl_bf16_gemm **out) {
    (void)dev;
    *out = NULL;
    return dl_fail("bf16 compute: this build has no oneDNN (install libdnnl-dev and rebuild)");
}
void dl_bf16_gemm_free(dl_bf16_gemm *h) { free(h); }
size_t dl_bf16_gemm_host_bytes(const dl_bf16_gemm *h) { return 0; }
int dl_bf16_gemm_set_weights(dl_bf16_gemm *h, const float *values, size_t n) {
    return dl_fail("bf16 compute: this build has no oneDNN");
}
int dl_bf16_gemm_run(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights) {
    return dl_fail("bf16 compute: this build has no oneDNN");
}
int dl_bf16_gemm_run_again(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights) {
    return dl_fail("bf16 compute: this build has no oneDNN");
}
#endif
