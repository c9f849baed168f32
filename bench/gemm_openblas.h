/* The CPU reference of `dedloc bench gemm`: the same products through
 * OpenBLAS's cblas_sgemm. OpenBLAS is a benchmark-only dependency, so this
 * is compiled into the dedloc binary (when OpenBLAS is found), never into
 * the library. */
#ifndef DEDLOC_BENCH_GEMM_OPENBLAS_H
#define DEDLOC_BENCH_GEMM_OPENBLAS_H

#include "dedloc/device.h"

/* Median seconds per call of shape through cblas_sgemm (random non-zero
 * operands; one untimed call first, then `repeat` timed ones). */
int dl_openblas_gemm_seconds(const dl_gemm_shape *shape, int repeat, double *seconds);

#endif
