/* GEMM timing for `dedloc bench gemm`, `bench step` and `dedloc tune`: the
 * median of timed calls of one shape after an untimed call that compiles,
 * and the best-of rate of a square product as a device reference. */
#include "dedloc/device.h"

#include <stdlib.h>

#include "dedloc/util.h"

double dl_gemm_shape_flops(const dl_gemm_shape *s) {
    return 2.0 * (double)s->m * (double)s->n * (double)s->k * (double)(s->batch ? s->batch : 1);
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fill_random(dl_device *dev, dl_buffer *buf, size_t count, uint64_t seed) {
    float *host = dl_malloc(count * sizeof *host);
    if (!host) return -1;
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (size_t i = 0; i < count; i++) host[i] = 0.5f + dl_rng_uniform(&rng);
    int rc = dl_buffer_upload(dev, buf, 0, host, count * sizeof *host);
    free(host);
    return rc;
}

int dl_gemm_time(dl_device *dev, const dl_gemm_shape *s, int repeat, double *seconds) {
    size_t batch = s->batch ? s->batch : 1;
    size_t a_elems = s->m * s->k, b_elems = s->k * s->n, c_elems = s->m * s->n;
    dl_buffer a = {0}, b = {0}, c = {0};
    int rc = dl_buffer_alloc(dev, batch * a_elems * 4, &a);
    if (!rc) rc = dl_buffer_alloc(dev, batch * b_elems * 4, &b);
    if (!rc) rc = dl_buffer_alloc(dev, batch * c_elems * 4, &c);
    if (!rc) rc = fill_random(dev, &a, batch * a_elems, 1);
    if (!rc) rc = fill_random(dev, &b, batch * b_elems, 2);
    if (!rc) rc = dl_buffer_fill32(dev, &c, 0, batch * c_elems * 4, 0);
    dl_gemm_args g = {.trans_a = s->trans_a, .trans_b = s->trans_b, .m = s->m, .n = s->n,
                      .k = s->k, .alpha = 1, .beta = 0, .a = &a, .lda = s->trans_a ? s->m : s->k,
                      .b = &b, .ldb = s->trans_b ? s->k : s->n, .c = &c, .ldc = s->n,
                      .batch_count = batch, .a_stride = a_elems, .b_stride = b_elems,
                      .c_stride = c_elems};
    if (repeat < 1) repeat = 1;
    double *times = dl_calloc((size_t)repeat, sizeof *times);
    if (!times) rc = -1;
    /* the first call builds CLBlast's program and the kernels: not timed */
    if (!rc) rc = dl_gemm(dev, &g);
    if (!rc) rc = dl_device_finish(dev);
    for (int i = 0; !rc && i < repeat; i++) {
        double t0 = dl_now();
        rc = dl_gemm(dev, &g);
        if (!rc) rc = dl_device_finish(dev);
        times[i] = dl_now() - t0;
    }
    if (!rc) {
        qsort(times, (size_t)repeat, sizeof *times, compare_double);
        *seconds = times[repeat / 2];
    }
    free(times);
    dl_buffer_free(dev, &a);
    dl_buffer_free(dev, &b);
    dl_buffer_free(dev, &c);
    if (rc) dl_fail_context("timing GEMM %s", s->name);
    return rc;
}

int dl_gemm_square_seconds(dl_device *dev, size_t n, double *seconds) {
    dl_buffer a = {0}, b = {0}, c = {0};
    int rc = dl_buffer_alloc(dev, n * n * 4, &a);
    if (!rc) rc = dl_buffer_alloc(dev, n * n * 4, &b);
    if (!rc) rc = dl_buffer_alloc(dev, n * n * 4, &c);
    if (!rc) rc = dl_buffer_fill32(dev, &a, 0, n * n * 4, 0x3c000000u); /* 1/128 */
    if (!rc) rc = dl_buffer_fill32(dev, &b, 0, n * n * 4, 0x3c000000u);
    dl_gemm_args g = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .a = &a, .lda = n,
                      .b = &b, .ldb = n, .c = &c, .ldc = n, .batch_count = 1};
    double best = 1e30;
    for (int i = 0; !rc && i < 6; i++) {
        double t0 = dl_now();
        rc = dl_gemm(dev, &g);
        if (!rc) rc = dl_device_finish(dev);
        double t = dl_now() - t0;
        if (i > 0 && t < best) best = t;
    }
    if (a.mem) dl_buffer_free(dev, &a);
    if (b.mem) dl_buffer_free(dev, &b);
    if (c.mem) dl_buffer_free(dev, &c);
    *seconds = best;
    return rc;
}
