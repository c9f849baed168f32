/* fp16 compute around a GEMM (src/device/gemm_half.c): the operands are
 * rounded to half before the product, and the half product is added into the
 * fp32 destination, so sums that need fp32 (gradients accumulating over
 * micro-batches and shared layers) stay fp32.
 *
 * Two builds of this file:
 * - DL_HALF_NATIVE (only where the device reports cl_khr_fp16): the operand
 *   buffers hold halves and the product is CLBlastHgemm;
 * - otherwise (the test-only emulation): the operand buffers hold fp32 values
 *   rounded to half (vstore_half_rte, core OpenCL 1.2), the product is an
 *   fp32 GEMM of them, and its result is rounded to half where Hgemm's output
 *   would be: the same rounding points, but the products inside the GEMM
 *   accumulate in fp32 instead of half. */
#ifdef DL_HALF_NATIVE
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half hval_t;
#define HSTORE(p, i, v) vstore_half_rte((v), (i), (p))
#define HLOAD(p, i) vload_half((i), (p))
#else
typedef float hval_t;
/* v rounded to the nearest half (ties to even; overflow gives Inf), as fp32. */
static inline float dl_round_half(float v) {
    ushort bits;
    vstore_half_rte(v, 0, (__private half *)&bits);
    return vload_half(0, (__private const half *)&bits);
}
#define HSTORE(p, i, v) ((p)[i] = dl_round_half(v))
#define HLOAD(p, i) dl_round_half((p)[i])
#endif

/* dst[i] = half(src[src_off + i]): one GEMM operand's span. */
__kernel void half_operand(__global hval_t *dst, __global const float *src, ulong src_off,
                           ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    HSTORE(dst, i, src[src_off + i]);
}

/* The product back into the fp32 C: item (o, b) of the GEMM, row r, column
 * c sits at e = o * c_outer + b * c_stride + r * ldc + c from C's offset in
 * both buffers; c[c_off + e] = half product (+ beta * c[c_off + e] in fp32).
 * Only the product's elements are touched, so a strided C with gaps between
 * its blocks keeps the gaps. The C argument is never read when beta is 0. */
__kernel void half_result(__global float *c, ulong c_off, __global const hval_t *prod, int cols,
                          int rows, int batch, ulong ldc, ulong c_stride, ulong c_outer,
                          float beta) {
    size_t col = get_global_id(0), r = get_global_id(1), item = get_global_id(2);
    if (col >= (size_t)cols || r >= (size_t)rows) return;
    size_t o = item / (size_t)batch, b = item % (size_t)batch;
    size_t e = o * c_outer + b * c_stride + r * ldc + col;
    float v = HLOAD(prod, e);
    c[c_off + e] = beta == 0.0f ? v : v + beta * c[c_off + e];
}
