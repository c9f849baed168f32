/* GEMM shapes and timing shared by `dedloc bench gemm` and `dedloc tune`. */
#ifndef DEDLOC_CLI_GEMM_TIMING_H
#define DEDLOC_CLI_GEMM_TIMING_H

#include <stdbool.h>
#include <stddef.h>

#include "dedloc/device.h"

/* Row-major C[m x n] = op(A)[m x k] * op(B)[k x n], batch times. Linear layers
 * multiply activations by PyTorch-layout weights [out, in]: trans_b. */
typedef struct dl_gemm_shape {
    const char *name;
    size_t m, n, k, batch;
    bool trans_a, trans_b;
} dl_gemm_shape;

/* Floating-point operations of one call: 2 m n k batch. */
double dl_gemm_shape_flops(const dl_gemm_shape *shape);

/* Allocates the operands once (random non-zero data), calls the GEMM once to
 * compile and warm up, then times `repeat` calls, each to completion. Returns
 * the median seconds per call in *seconds. */
int dl_gemm_time(dl_device *dev, const dl_gemm_shape *shape, int repeat, double *seconds);

#endif
