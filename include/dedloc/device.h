/* dedloc device layer: OpenCL discovery, capabilities, programs (embedded
 * sources, on-disk binary cache), buffers, kernel launches and GEMM (CLBlast).
 *
 * Everything above this layer sees a dl_device and dl_buffer; nothing above it
 * calls OpenCL directly except to set kernel arguments (DL_ARG). Also here:
 * GEMM timing and CLBlast tuning (the search `dedloc tune` runs and the stored
 * parameters every open applies).
 *
 * Lives in src/device/ (kernels in cl/); depends on util only. The model
 * builds on it; `dedloc devices`, `bench gemm` and `tune` call it. */
#ifndef DEDLOC_DEVICE_H
#define DEDLOC_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

/* What we know about one device, probed once. */
typedef struct dl_device_info {
    int index;               /* global index over all platforms, as `dedloc devices` shows */
    int platform_index;
    char platform[128];
    char name[256];
    char vendor[128];
    char driver[128];
    char device_version[128];
    char opencl_c_version[128];
    bool is_gpu, is_cpu;
    cl_uint compute_units;
    cl_uint max_clock_mhz;
    cl_ulong global_mem;
    cl_ulong local_mem;
    cl_ulong max_alloc;
    size_t max_work_group;
    size_t max_work_item[3];
    bool fp16;               /* cl_khr_fp16: half arithmetic and CLBlastHgemm allowed */
    bool fp64;               /* cl_khr_fp64 */
    bool unified_memory;     /* CL_DEVICE_HOST_UNIFIED_MEMORY */
    cl_platform_id platform_id;
    cl_device_id device_id;
} dl_device_info;

/* Lists every device of every platform. *infos is malloc'd; free() it. */
int dl_device_list(dl_device_info **infos, int *count);

typedef struct dl_device dl_device;

/* Opens a device: selector NULL or "" = the first GPU, else the first device;
 * a number = that index; otherwise a case-insensitive substring of the device
 * name, vendor or platform. Applies stored CLBlast tuning for the device
 * (see dl_tune_apply), unless DEDLOC_NO_TUNING is set to a non-empty value. */
int dl_device_open(const char *selector, dl_device **out);

/* Flags for dl_device_open_ex. */
enum {
    /* Keep CLBlast's built-in parameters: stored tuning is not applied. CLBlast
     * keeps overrides per OpenCL device for the whole process, so this only
     * means something before any device of the process applied them. */
    DL_OPEN_NO_TUNING = 1u << 0,
    /* Every GEMM through CLBlast, whatever the default backend: for timing
     * and tuning CLBlast itself (bench gemm, tune). */
    DL_OPEN_CLBLAST = 1u << 1,
};
/* dl_device_open with flags (DL_OPEN_*). */
int dl_device_open_ex(const char *selector, unsigned flags, dl_device **out);
void dl_device_close(dl_device *dev);
const dl_device_info *dl_device_get_info(const dl_device *dev);
cl_context dl_device_context(const dl_device *dev);
cl_command_queue dl_device_queue(const dl_device *dev);
/* Blocks until every queued command has finished. */
int dl_device_finish(dl_device *dev);

/* ---- errors ---- */
/* "CL_OUT_OF_RESOURCES" etc., or "CL error -N" for unknown codes. */
const char *dl_cl_error_name(cl_int err);
/* Returns 0 if err == CL_SUCCESS, else records "<what>: <NAME> (<advice>)". */
int dl_cl_check(cl_int err, const char *what);

/* ---- programs and kernels ---- */
/* Source of a kernel file (e.g. "gemm_aux.cl"): from $DEDLOC_CL_DIR if set,
 * else embedded. Returns NULL (with an error) if unknown. */
const char *dl_cl_source(const char *file, size_t *size);
/* Builds (or loads from the binary cache) a program from one cl/ file with
 * the given options, memoised per device. Build failures report the file,
 * the line and the compiler's log. The device owns the program. */
int dl_program_get(dl_device *dev, const char *file, const char *options, cl_program *out);
/* Creates a kernel from a program built by dl_program_get. Caller releases it
 * with clReleaseKernel (or keeps it for the device's lifetime). */
int dl_kernel_create(dl_device *dev, const char *file, const char *options, const char *name,
                     cl_kernel *out);

/* How this device got its programs so far: built from source (a cache miss,
 * slow on PoCL) or loaded from the on-disk binary cache. Programs memoised in
 * the process count once. A warm second start has built_from_source == 0. */
typedef struct dl_program_stats {
    unsigned long built_from_source;
    unsigned long loaded_from_cache;
} dl_program_stats;
dl_program_stats dl_device_program_stats(const dl_device *dev);

/* Sets kernel argument i to a value; evaluates to 0 or -1 (error recorded). */
#define DL_ARG(kernel, i, value) \
    dl_cl_check(clSetKernelArg((kernel), (i), sizeof(value), &(value)), "clSetKernelArg " #value)
/* Local memory argument of the given size in bytes. */
#define DL_ARG_LOCAL(kernel, i, bytes) \
    dl_cl_check(clSetKernelArg((kernel), (i), (bytes), NULL), "clSetKernelArg local")

/* Enqueues a 1-, 2- or 3-D kernel. global sizes are rounded up to multiples of
 * local (local may be NULL = let the driver choose); kernels bound-check. */
int dl_launch(dl_device *dev, cl_kernel kernel, cl_uint dims, const size_t *global,
              const size_t *local);

/* ---- buffers ----
 * A dl_buffer owns its cl_mem; free it once with dl_buffer_free. Offsets and
 * sizes are in bytes. Device memory in use is tracked per device. */
typedef struct dl_buffer {
    cl_mem mem;
    size_t size;
} dl_buffer;

int dl_buffer_alloc(dl_device *dev, size_t bytes, dl_buffer *out);
void dl_buffer_free(dl_device *dev, dl_buffer *buf);
int dl_buffer_upload(dl_device *dev, dl_buffer *buf, size_t offset, const void *src, size_t bytes);
int dl_buffer_download(dl_device *dev, const dl_buffer *buf, size_t offset, void *dst, size_t bytes);
/* Fills bytes with a repeated 32-bit pattern (0 for zeroing, or a NaN poison). */
int dl_buffer_fill32(dl_device *dev, dl_buffer *buf, size_t offset, size_t bytes, uint32_t pattern);
int dl_buffer_copy(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                   size_t dst_off, size_t bytes);
size_t dl_device_bytes_in_use(const dl_device *dev);
size_t dl_device_bytes_peak(const dl_device *dev);

/* ---- GEMM (row-major) ----
 * C[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C, with op = transpose
 * when trans_* is true. Offsets and leading dimensions are in elements. The
 * data type is fp32; DL_GEMM_F16 means A, B, C hold IEEE halves and is only
 * valid where info->fp16 is true (CLBlastHgemm). */
typedef enum { DL_GEMM_F32 = 0, DL_GEMM_F16 = 1 } dl_gemm_type;

typedef struct dl_gemm_args {
    bool trans_a, trans_b;
    size_t m, n, k;
    float alpha, beta;
    const dl_buffer *a; size_t a_off, lda;
    const dl_buffer *b; size_t b_off, ldb;
    dl_buffer *c; size_t c_off, ldc;
    /* strided batch: batch_count >= 1; strides in elements between batch items */
    size_t batch_count;
    size_t a_stride, b_stride, c_stride;
    dl_gemm_type type;
    /* Optional outer batch around the strided one (0 or 1: none): item (o, i)
     * starts at off + o * outer + i * stride for each matrix. Attention uses
     * it for (sequence, head), where the head stride and the sequence stride
     * differ, so each attention product is one call (one launch on CLBlast). */
    size_t outer_count;
    size_t a_outer, b_outer, c_outer;
} dl_gemm_args;

/* Offsets, leading dimensions and batch strides are checked against the
 * buffer sizes before CLBlast runs; a violation is an error naming the matrix. */
int dl_gemm(dl_device *dev, const dl_gemm_args *args);

/* Who computes fp32 GEMMs. On a CPU device whose buffers are host memory
 * (PoCL), OpenBLAS on the mapped buffers is several times faster than CLBlast's
 * OpenCL kernels (bench/RESULTS.md); it is the default there when the build has
 * OpenBLAS. DEDLOC_GEMM_BACKEND=clblast|openblas overrides the default at
 * open. CLBlast is always the path on GPUs and for fp16. */
typedef enum { DL_GEMM_CLBLAST = 0, DL_GEMM_OPENBLAS = 1 } dl_gemm_backend;
dl_gemm_backend dl_device_gemm_backend(const dl_device *dev);
const char *dl_gemm_backend_name(dl_gemm_backend backend);
/* Selects the backend; OpenBLAS only on a host-memory CPU device of a build
 * with OpenBLAS (else -1 with the reason). */
int dl_device_set_gemm_backend(dl_device *dev, dl_gemm_backend backend);

/* ---- precision conversion on the device (cl/convert.cl) ----
 * n elements from src (element offset src_off) to dst (element offset dst_off).
 * Bit-identical to the host conversions in dedloc/util.h (dl_f32_to_f16 ...):
 * round to nearest even, subnormals kept, Inf kept, NaN stays NaN with the
 * same bits the host produces. fp16 and bf16 are stored as 16-bit words. */
int dl_convert_f32_to_f16(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                          size_t dst_off, size_t n);
int dl_convert_f16_to_f32(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                          size_t dst_off, size_t n);
int dl_convert_f32_to_bf16(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                           size_t dst_off, size_t n);
int dl_convert_bf16_to_f32(dl_device *dev, const dl_buffer *src, size_t src_off, dl_buffer *dst,
                           size_t dst_off, size_t n);

/* ---- fp16 compute around GEMMs on fp32 buffers (src/device/gemm_half.c) ----
 * A GEMM whose operands and result live in fp32 buffers runs in half: A and
 * B are rounded into half scratch, CLBlastHgemm multiplies them, and the
 * half product is added into C in fp32 (C = product + beta * C), so sums
 * that accumulate across GEMMs stay fp32. Needs cl_khr_fp16 (info->fp16).
 * `emulate` (test builds; any device): the same rounding points through fp32
 * scratch holding half-rounded values and an fp32 GEMM, which accumulates
 * each element's k products in fp32 where Hgemm keeps them in half. */
typedef struct dl_half_gemm dl_half_gemm;
int dl_half_gemm_create(dl_device *dev, bool emulate, dl_half_gemm **out);
void dl_half_gemm_free(dl_half_gemm *h);
bool dl_half_gemm_emulated(const dl_half_gemm *h);
/* Bytes of one element of a prepared operand: 2 (half), 4 emulated. */
size_t dl_half_gemm_element_size(const dl_half_gemm *h);
/* Rounds n fp32 values of src from src_off into dst (allocated or grown as
 * needed; free with dl_buffer_free): an operand prepared once for many
 * products, such as the weights. */
int dl_half_gemm_operand(dl_half_gemm *h, const dl_buffer *src, size_t src_off, size_t n,
                         dl_buffer *dst);
/* Allocates the scratch for products whose A, B (unprepared) and C span up
 * to a, b and c elements, so that no product allocates later and a model's
 * device memory is known when it is created. Products beyond grow it. */
int dl_half_gemm_reserve(dl_half_gemm *h, size_t a, size_t b, size_t c);
/* Bytes the scratch holds now. */
size_t dl_half_gemm_scratch_bytes(const dl_half_gemm *h);
/* Runs g (type DL_GEMM_F32, alpha and beta as dl_gemm) in half. b_ready:
 * NULL, or B prepared by dl_half_gemm_operand with offset 0 (g's B offsets
 * index it). */
int dl_half_gemm_run(dl_half_gemm *h, const dl_gemm_args *g, const dl_buffer *b_ready);

/* ---- bf16 compute of fp32 GEMMs on CPUs (src/device/gemm_bf16.c) ----
 * A GEMM on fp32 buffers whose A and B are rounded to bf16 (round to nearest
 * even) and multiplied by oneDNN with fp32 accumulation: C = alpha * A B +
 * beta * C, C fp32. Only on a CPU device whose buffers are host memory and
 * whose GEMMs run on the host (dl_device_gemm_backend OpenBLAS), in a build
 * with oneDNN, on a CPU with the AVX512-BF16 instructions (oneDNN decides;
 * DNNL_MAX_CPU_ISA can take them away). Batched products (attention's,
 * with outer_count and batch_count) run as one batched matmul each, their
 * operands rounded the same way. */
typedef struct dl_bf16_gemm dl_bf16_gemm;
/* Whether dev can; if not, why (may be NULL) gets the reason. */
bool dl_bf16_gemm_supported(const dl_device *dev, char *why, size_t size);
int dl_bf16_gemm_create(dl_device *dev, dl_bf16_gemm **out);
void dl_bf16_gemm_free(dl_bf16_gemm *h);
/* Rounds n host values once: the weights, as uploaded after each optimizer
 * step, for the products that name them as B (below). */
int dl_bf16_gemm_set_weights(dl_bf16_gemm *h, const float *values, size_t n);
/* Runs g (type DL_GEMM_F32) in bf16; blocks until done. b_weights: g's B
 * buffer holds the values last given to dl_bf16_gemm_set_weights, so the
 * product reads their rounded copy (with g's B offsets) instead of rounding
 * B again. */
int dl_bf16_gemm_run(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights);
/* dl_bf16_gemm_run after a dl_bf16_gemm_run, for a caller that knows the
 * matrices g reads are unchanged since the products from that run on read
 * them: an operand one of those rounded (the same buffer, offset and layout,
 * transposed or not) is not rounded again. */
int dl_bf16_gemm_run_again(dl_bf16_gemm *h, const dl_gemm_args *g, bool b_weights);
/* Host bytes the rounded and packed weights and the rounded operands hold. */
size_t dl_bf16_gemm_host_bytes(const dl_bf16_gemm *h);

/* ---- GEMM timing (src/device/gemm_timing.c) ----
 * Shapes and timing shared by `dedloc bench gemm` and `dedloc tune`.
 * Row-major C[m x n] = op(A)[m x k] * op(B)[k x n], batch times. Linear layers
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
/* The device's SGEMM rate as a reference: seconds of one n x n x n product
 * (constant operands), the best of 5 calls after an untimed first one. */
int dl_gemm_square_seconds(dl_device *dev, size_t n, double *seconds);

/* ---- CLBlast tuning (src/device/tune*.c) ----
 * Tuned GEMM parameters live in dl_cache_dir()/clblast/<device key>.json,
 * written by `dedloc tune`. The key names the device, platform and driver, so
 * a driver update asks for a new tuning instead of applying stale values. */

/* Writes the file name (no folder) of this device's tuning file into key. */
void dl_tune_device_key(const dl_device_info *info, char *key, size_t size);
/* Full path of this device's tuning file. */
void dl_tune_path(const dl_device_info *info, char *path, size_t size);
/* Applies the stored parameters with CLBlastOverrideParameters. *applied (may
 * be NULL) tells whether a file existed and was applied. A missing file is not
 * an error; a malformed one is (-1, with the reason). */
int dl_tune_apply(dl_device *dev, bool *applied);

/* ---- tuning exploration (src/device/tune_explore.c) ----
 * For `dedloc tune`: runs CLBlast's own kernel tuner (clblast_tuner_xgemm,
 * Debian package clblast-utils) as a child process for a bounded time and
 * keeps the fastest verified configurations it printed. */
enum { DL_XGEMM_PARAMS_MAX = 24 };

/* One complete parameter set of CLBlast's Xgemm kernel. */
typedef struct dl_xgemm_config {
    size_t count;
    char names[DL_XGEMM_PARAMS_MAX][16];
    size_t values[DL_XGEMM_PARAMS_MAX];
    double tuner_gflops; /* as the tuner measured it, 0 for built-in candidates */
} dl_xgemm_config;

/* Runs the tuner on `info`'s device for an m x n x k product until it ends or
 * `seconds` pass, then returns the best distinct configurations (at most
 * max_out, fastest first) in out. *found may be 0 if nothing finished. Fails
 * if the tuner cannot be started. */
int dl_tune_explore(const dl_device_info *info, size_t m, size_t n, size_t k, double seconds,
                    dl_xgemm_config *out, int max_out, int *found);

/* A few configurations that do well on CPUs and GPUs, for when the tuner is
 * not installed. */
int dl_tune_builtin_candidates(dl_xgemm_config *out, int max_out);

/* ---- the tuning search (src/device/tune_search.c) ----
 * What `dedloc tune` runs: time a model preset's GEMM shapes with CLBlast's
 * built-in parameters, explore (above), time the candidates on the preset's
 * shapes within the budget, store the winner as this device's tuning file. */
enum { DL_TUNE_PRESET_SHAPES_MAX = 4 };

/* A model preset's linear layers for 8 x 128 tokens, and the size the kernel
 * tuner explores for it. */
typedef struct dl_tune_preset {
    const char *name;
    dl_gemm_shape shapes[DL_TUNE_PRESET_SHAPES_MAX];
    int nshapes;
    size_t explore_m, explore_n, explore_k;
} dl_tune_preset;

/* "sahajbert" or "tiny"; NULL for any other name. */
const dl_tune_preset *dl_tune_preset_find(const char *name);
/* Median seconds (3 timed calls) of each of the preset's shapes with the
 * parameters in force, and their sum. */
int dl_tune_preset_seconds(dl_device *dev, const dl_tune_preset *preset, double *per_shape,
                           double *total);
/* Makes CLBlast use these Xgemm parameters (single precision) on the device,
 * for the rest of the process (CLBlastOverrideParameters). */
int dl_tune_override_xgemm(dl_device *dev, const dl_xgemm_config *config);
/* "NAME=value NAME=value ..." into buf. */
void dl_xgemm_config_describe(const dl_xgemm_config *config, char *buf, size_t size);
/* Times candidates in order on the preset's shapes until the next one, which
 * costs about last_cost seconds, would end past deadline (dl_now() time).
 * Returns the index of the fastest candidate that beat base_total seconds,
 * with its per-shape seconds in best_times, or -1 if none did (best_times
 * untouched). A line per candidate goes to progress (may be NULL); a failing
 * candidate is reported there and skipped. The last candidate's parameters
 * stay in force. */
int dl_tune_time_candidates(dl_device *dev, const dl_tune_preset *preset,
                            const dl_xgemm_config *candidates, int ncand, double deadline,
                            double last_cost, double base_total, double *best_times, FILE *progress);
/* Writes the tuning file at path (dl_tune_path) atomically: the winning
 * parameters, the preset's shapes with their built-in and tuned GFLOP/s (from
 * the seconds in base and tuned), the device, driver and budget. */
int dl_tune_store(const dl_device_info *info, const dl_tune_preset *preset, const dl_xgemm_config *best,
                  const double *base, const double *tuned, double budget_seconds, const char *path);

#endif
