/* Prefixed to every program. Storage-type helpers let one kernel source read
 * and write fp32, fp16 (vload_half/vstore_half, core OpenCL 1.2) or bf16
 * (ushort) storage while computing in fp32: build with -DDL_STORE_F16 or
 * -DDL_STORE_BF16 to switch. */
/* fp32 -> bf16, round to nearest even, NaN kept quiet (as src/util/half.c). */
static inline ushort dl_to_bf16(float v) {
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
/* Column reductions (bias and LayerNorm parameter gradients): each work item
 * sums DL_COL_VEC adjacent columns over every row, each column in
 * DL_FOR_REDUCE's order, so the bits do not depend on the width. 1 on a GPU
 * (adjacent items take adjacent columns: coalesced loads); wider on a CPU,
 * whose work items run one after another, so that a row's cache line is read
 * once for a vector of columns rather than once per column. */
#ifndef DL_COL_VEC
#define DL_COL_VEC 1
#endif
#if DL_COL_VEC == 16
typedef float16 colvec_t;
#define COL_LOAD(p, i) vload16(0, (p) + (i))
#define COL_STORE(p, i, v) vstore16((v), 0, (p) + (i))
#elif DL_COL_VEC == 8
typedef float8 colvec_t;
#define COL_LOAD(p, i) vload8(0, (p) + (i))
#define COL_STORE(p, i, v) vstore8((v), 0, (p) + (i))
#elif DL_COL_VEC == 4
typedef float4 colvec_t;
#define COL_LOAD(p, i) vload4(0, (p) + (i))
#define COL_STORE(p, i, v) vstore4((v), 0, (p) + (i))
#elif DL_COL_VEC != 1
#error "DL_COL_VEC must be 1, 4, 8 or 16"
#endif
/* Row reductions: one work-group per row, its items striding over the row
 * (coalesced on a GPU), combined in local memory by a fixed tree, so the
 * result is the same bits on every run. The local size is a power of two no
 * larger than DL_ROW_GROUP (the host sets both from the device's limits).
 * Every item of the group gets the result; all items must call. */
#ifndef DL_ROW_GROUP
#define DL_ROW_GROUP 256
#endif
static inline float dl_group_sum(float v, __local float *scratch) {
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
static inline float dl_group_max(float v, __local float *scratch) {
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

/* Row kernels on a CPU (the host defines DL_ROW_LANES when it would give
 * the row kernels groups of 16): one work item takes a whole row as the 16
 * lanes of a float16, lane l walking columns l, l + 16, ... as item l of a
 * 16-item group does, and the lanes combine in dl_group_sum's tree: the same
 * sums in the same order, without a work-group and its barriers per row,
 * which cost a CPU more than the arithmetic of a 128-column row. The
 * LayerNorm kernels give the 16-item group's bits this way; the softmax's
 * may differ in the last bit, since the vector forms of exp and division
 * need not round as the scalar ones do (OpenCL allows them 3 and 2.5 ulp).
 * The last C % 16 columns go to their lanes one at a time (DL_LANES_TAIL). */
#ifdef DL_ROW_LANES
#define DL_LANES_FULL(C) ((C) & ~15)
#ifdef DL_REDUCE_REVERSE
#define DL_FOR_VECS(b, C) for (int b = DL_LANES_FULL(C) - 16; b >= 0; b -= 16)
#else
#define DL_FOR_VECS(b, C) for (int b = 0; b + 16 <= (C); b += 16)
#endif
/* Runs STEP for each column j of the tail with lane pointing at its lane of
 * acc (a float16), then writes the lanes back. */
#define DL_LANES_TAIL(acc, C, j, lane, STEP)                                 \
    do {                                                                     \
        float lanes_[16];                                                    \
        vstore16((acc), 0, lanes_);                                          \
        for (int j = DL_LANES_FULL(C); j < (C); j++) {                       \
            float *lane = &lanes_[j - DL_LANES_FULL(C)];                     \
            STEP;                                                            \
        }                                                                    \
        (acc) = vload16(0, lanes_);                                          \
    } while (0)
/* dl_group_sum's and dl_group_max's trees over 16 items. */
static inline float dl_lanes_sum(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.lo + c.hi;
}
static inline float dl_lanes_max(float16 v) {
    float8 a = fmax(v.lo, v.hi);
    float4 b = fmax(a.lo, a.hi);
    float2 c = fmax(b.lo, b.hi);
    return fmax(c.lo, c.hi);
}
#endif
