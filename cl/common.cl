/* Prefixed to every program. Storage-type helpers let one kernel source read
 * and write fp32, fp16 (vload_half/vstore_half, core OpenCL 1.2) or bf16
 * (ushort) storage while computing in fp32: build with -DDL_STORE_F16 or
 * -DDL_STORE_BF16 to switch. */
/* fp32 -> bf16, round to nearest even, NaN kept quiet (as src/util/half.c). */
inline ushort dl_to_bf16(float v) {
    uint x = as_uint(v);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (ushort)((x >> 16) | 0x40u);
    return (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#if defined(DL_STORE_F16)
typedef half store_t;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#elif defined(DL_STORE_BF16)
typedef ushort store_t;
#define LOAD(p, i) as_float(((uint)(p)[i]) << 16)
#define STORE(p, i, v) ((p)[i] = dl_to_bf16(v))
#else
typedef float store_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif

/* Order of the reductions' float sums: build with -DDL_REDUCE_REVERSE
 * (DEDLOC_CL_BUILD_OPTIONS) to add in the other order, as another vendor's
 * kernels may; the cross-vendor test trains peers built both ways together.
 * DL_FOR_REDUCE walks a whole range; DL_FOR_ROW walks one work item's share
 * of a row (items lid, lid + n, ...), forwards or backwards. */
#ifdef DL_REDUCE_REVERSE
#define DL_FOR_REDUCE(i, n) for (int i = (n) - 1; i >= 0; i--)
#define DL_FOR_ROW(c, lid, n, C) for (int c = (lid) + (((C) - 1 - (lid)) / (n)) * (n); c >= (lid) && c < (C); c -= (n))
#else
#define DL_FOR_REDUCE(i, n) for (int i = 0; i < (n); i++)
#define DL_FOR_ROW(c, lid, n, C) for (int c = (lid); c < (C); c += (n))
#endif
/* Row reductions: one work-group per row, its items striding over the row
 * (coalesced on a GPU), combined in local memory by a fixed tree, so the
 * result is the same bits on every run. The local size is a power of two no
 * larger than DL_ROW_GROUP (the host sets both from the device's limits).
 * Every item of the group gets the result; all items must call. */
#ifndef DL_ROW_GROUP
#define DL_ROW_GROUP 256
#endif
inline float dl_group_sum(float v, __local float *scratch) {
    int lid = get_local_id(0), n = get_local_size(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline float dl_group_max(float v, __local float *scratch) {
    int lid = get_local_id(0), n = get_local_size(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
