/* bench_gemm_bf16: the sahajBERT step's linear-layer GEMMs (8 x 128 tokens)
 * three ways, side by side and alternating, on a CPU device:
 *   openblas   dl_gemm on the host path (cblas_sgemm on the mapped buffers),
 *              what fp32 runs today;
 *   dnnl-f32   oneDNN's fp32 matmul on the same host memory (is it faster
 *              than OpenBLAS here?);
 *   bf16       dl_bf16_gemm_run: operands rounded to bf16 by oneDNN, bf16
 *              matmul with fp32 accumulation (the weights pre-rounded, as
 *              the model does once per upload).
 * Prints GFLOP/s per shape (median of --repeat rounds, each round running the
 * three in turn) and one JSON line.
 *   build/bench_gemm_bf16 [--repeat N] [--device D] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/device.h"
#include "dedloc/util.h"

#ifdef DEDLOC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

enum { REPEAT_MAX = 64 };

typedef struct shape {
    const char *name;
    size_t m, n, k;
    bool ta, tb, weights;
} shape;

static const shape shapes[] = {
    {"fwd QKVO 1024x1024x1024 B^T", 1024, 1024, 1024, false, true, true},
    {"fwd FFN-in 1024x4096x1024 B^T", 1024, 4096, 1024, false, true, true},
    {"fwd FFN-out 1024x1024x4096 B^T", 1024, 1024, 4096, false, true, true},
    {"dx FFN-in 1024x1024x4096", 1024, 1024, 4096, false, false, true},
    {"dW FFN-in 4096x1024x1024 A^T", 4096, 1024, 1024, true, false, false},
    {"dW FFN-out 1024x4096x1024 A^T", 1024, 4096, 1024, true, false, false},
};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* oneDNN fp32 matmul straight on host arrays, primitive made once. */
typedef struct f32_matmul {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} f32_matmul;

static int f32_make(dnnl_engine_t eng, const shape *s, float *a, float *b, float *c, f32_matmul *out) {
    dnnl_dims_t ad = {(dnnl_dim_t)s->m, (dnnl_dim_t)s->k}, bd = {(dnnl_dim_t)s->k, (dnnl_dim_t)s->n},
                cd = {(dnnl_dim_t)s->m, (dnnl_dim_t)s->n};
    dnnl_dims_t as = {s->ta ? 1 : (dnnl_dim_t)s->k, s->ta ? (dnnl_dim_t)s->m : 1};
    dnnl_dims_t bs = {s->tb ? 1 : (dnnl_dim_t)s->n, s->tb ? (dnnl_dim_t)s->k : 1};
    dnnl_dims_t cs = {(dnnl_dim_t)s->n, 1};
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_f32, as) ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, bs) ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dnnl_f32, cs) ||
        dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL))
        return dl_fail("oneDNN fp32 matmul for %s", s->name);
    int rc = dnnl_primitive_create(&out->prim, pd) || dnnl_memory_create(&out->a, &amd, eng, a) ||
             dnnl_memory_create(&out->b, &bmd, eng, b) || dnnl_memory_create(&out->c, &cmd, eng, c);
    dnnl_primitive_desc_destroy(pd);
    return rc ? dl_fail("oneDNN fp32 matmul for %s", s->name) : 0;
}

static int f32_run(dnnl_stream_t st, f32_matmul *f) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, f->a}, {DNNL_ARG_WEIGHTS, f->b}, {DNNL_ARG_DST, f->c}};
    if (dnnl_primitive_execute(f->prim, st, 3, args) || dnnl_stream_wait(st)) return dl_fail("oneDNN fp32 matmul");
    return 0;
}

static void f32_free(f32_matmul *f) {
    if (f->prim) dnnl_primitive_destroy(f->prim);
    if (f->a) dnnl_memory_destroy(f->a);
    if (f->b) dnnl_memory_destroy(f->b);
    if (f->c) dnnl_memory_destroy(f->c);
}

static int bench_shape(dl_device *dev, dl_bf16_gemm *h, dnnl_engine_t eng, dnnl_stream_t st, const shape *s,
                       int repeat, double gflops[3]) {
    size_t an = s->m * s->k, bn = s->k * s->n, cn = s->m * s->n;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *c = malloc(cn * 4);
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return dl_fail("out of memory");
    }
    for (size_t i = 0; i < an; i++) a[i] = dl_rng_uniform(&rng) - 0.5f;
    for (size_t i = 0; i < bn; i++) b[i] = dl_rng_uniform(&rng) - 0.5f;
    memset(c, 0, cn * 4);
    dl_buffer da = {0}, db = {0}, dc = {0};
    f32_matmul f = {0};
    int rc = dl_buffer_alloc(dev, an * 4, &da) || dl_buffer_alloc(dev, bn * 4, &db) ||
             dl_buffer_alloc(dev, cn * 4, &dc) || dl_buffer_upload(dev, &da, 0, a, an * 4) ||
             dl_buffer_upload(dev, &db, 0, b, bn * 4) || (s->weights && dl_bf16_gemm_set_weights(h, b, bn)) ||
             f32_make(eng, s, a, b, c, &f);
    dl_gemm_args g = {.trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k, .alpha = 1,
                      .a = &da, .lda = s->ta ? s->m : s->k, .b = &db, .ldb = s->tb ? s->k : s->n,
                      .c = &dc, .ldc = s->n, .batch_count = 1};
    double t[3][REPEAT_MAX];
    /* one untimed round: code generation, first touches */
    for (int r = -1; !rc && r < repeat; r++)
        for (int w = 0; w < 3 && !rc; w++) {
            double t0 = dl_now();
            rc = w == 0   ? dl_gemm(dev, &g) || dl_device_finish(dev)
                 : w == 1 ? f32_run(st, &f)
                          : dl_bf16_gemm_run(h, &g, s->weights);
            if (r >= 0) t[w][r] = dl_now() - t0;
        }
    for (int w = 0; !rc && w < 3; w++) gflops[w] = 2.0 * (double)(s->m * s->n * s->k) / median(t[w], repeat) / 1e9;
    f32_free(&f);
    if (da.mem) dl_buffer_free(dev, &da);
    if (db.mem) dl_buffer_free(dev, &db);
    if (dc.mem) dl_buffer_free(dev, &dc);
    free(a), free(b), free(c);
    return rc ? -1 : 0;
}

int main(int argc, char **argv) {
    int repeat = 5;
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemm_bf16 [--repeat N] [--device D]\n");
            return 2;
        }
    }
    if (repeat < 1 || repeat > REPEAT_MAX) repeat = 5;
    dl_device *dev = NULL;
    dl_bf16_gemm *h = NULL;
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    if (dl_device_open(device, &dev) || dl_bf16_gemm_create(dev, &h) ||
        dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "bench_gemm_bf16: %s\n", dl_error());
        return 1;
    }
    double load[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
        fclose(lf);
    }
    printf("device %s, %d rounds, load average %.2f %.2f %.2f\n", dl_device_get_info(dev)->name, repeat, load[0],
           load[1], load[2]);
    printf("%-34s %10s %10s %10s %9s\n", "shape (MxNxK)", "openblas", "dnnl-f32", "bf16", "bf16/blas");
    char json[4096];
    size_t used = (size_t)snprintf(json, sizeof json, "{\"bench\": \"gemm_bf16\", \"load\": %.2f, \"shapes\": [", load[0]);
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] && !rc; i++) {
        double gf[3] = {0};
        rc = bench_shape(dev, h, eng, st, &shapes[i], repeat, gf);
        if (rc) break;
        printf("%-34s %10.1f %10.1f %10.1f %8.2fx\n", shapes[i].name, gf[0], gf[1], gf[2], gf[2] / gf[0]);
        if (used < sizeof json)
            used += (size_t)snprintf(json + used, sizeof json - used,
                                     "%s{\"shape\": \"%s\", \"openblas\": %.1f, \"dnnl_f32\": %.1f, \"bf16\": %.1f}",
                                     i ? ", " : "", shapes[i].name, gf[0], gf[1], gf[2]);
    }
    if (rc) fprintf(stderr, "bench_gemm_bf16: %s\n", dl_error());
    else printf("%s]}\n", json);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    dl_bf16_gemm_free(h);
    dl_device_close(dev);
    return rc ? 1 : 0;
}
#else
int main(void) {
    fprintf(stderr, "bench_gemm_bf16: this build has no oneDNN (install libdnnl-dev and rebuild)\n");
    return 77;
}
#endif
