/* The CPU reference of the bench_gemm program (see gemm_openblas.h). */
#include "bench/gemm_openblas.h"

#include <cblas.h>
#include <stdlib.h>

#include "dedloc/util.h"

/* Median seconds per call of the same product through cblas_sgemm. */
int dl_openblas_gemm_seconds(const dl_gemm_shape *s, int repeat, double *seconds) {
    size_t batch = s->batch ? s->batch : 1;
    size_t a_elems = s->m * s->k, b_elems = s->k * s->n, c_elems = s->m * s->n;
    float *a = dl_malloc(batch * a_elems * 4), *b = dl_malloc(batch * b_elems * 4),
          *c = dl_calloc(batch * c_elems, 4);
    double *times = dl_calloc((size_t)repeat + 1, sizeof *times);
    if (!a || !b || !c || !times) {
        free(a), free(b), free(c), free(times);
        return -1;
    }
    dl_rng rng;
    dl_rng_seed(&rng, 3);
    for (size_t i = 0; i < batch * a_elems; i++) a[i] = 0.5f + dl_rng_uniform(&rng);
    for (size_t i = 0; i < batch * b_elems; i++) b[i] = 0.5f + dl_rng_uniform(&rng);
    for (int r = 0; r <= repeat; r++) { /* r == 0 warms up */
        double t0 = dl_now();
        for (size_t p = 0; p < batch; p++)
            cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans,
                        s->trans_b ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k,
                        1.0f, a + p * a_elems, (int)(s->trans_a ? s->m : s->k), b + p * b_elems,
                        (int)(s->trans_b ? s->k : s->n), 0.0f, c + p * c_elems, (int)s->n);
        times[r] = dl_now() - t0;
    }
    /* median of the timed calls (insertion sort: a handful of values) */
    for (int i = 2; i <= repeat; i++)
        for (int j = i; j > 1 && times[j - 1] > times[j]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    *seconds = times[1 + repeat / 2];
    free(a), free(b), free(c), free(times);
    return 0;
}
