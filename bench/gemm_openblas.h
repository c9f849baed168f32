/* The CPU reference of the benchmark program bench_gemm: the same products
 * through OpenBLAS's cblas_sgemm, timed beside CLBlast's. A comparison for
 * us, so it is compiled into that program only (when OpenBLAS is found),
 * never into the dedloc binary or the library. */
#ifndef DEDLOC_BENCH_GEMM_OPENBLAS_H
#define DEDLOC_BENCH_GEMM_OPENBLAS_H

#include "dedloc/device.h"

/* Median seconds per call of shape through cblas_sgemm (random non-zero
 * operands; one untimed call first, then `repeat` timed ones). */
int dl_openblas_gemm_seconds(const dl_gemm_shape *shape, int repeat, double *seconds);

#endif
