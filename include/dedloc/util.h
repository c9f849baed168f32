/* dedloc utilities: errors, logging, checked allocation, files, fp16/bf16,
 * hashing, random numbers and clocks. Every other module builds on these.
 *
 * Lives in src/util/ (batch.h's allocation too); depends on no other dedloc
 * module. Module arrows point down only: cli -> collab -> (net, train);
 * train -> (model, data); model -> (device, safetensors); data -> text;
 * everything -> util. */
#ifndef DEDLOC_UTIL_H
#define DEDLOC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>

#ifdef __GNUC__
#define DL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DL_PRINTF(a, b)
#endif

/* ---- errors ------------------------------------------------------------
 * Functions that can fail return 0 on success and -1 on failure, after
 * recording a message with dl_fail(). The message is per thread and says what
 * failed and, where we know, what the user can do about it. Callers add
 * context with dl_fail_context() and print dl_error() at the top level. */
int dl_fail(const char *fmt, ...) DL_PRINTF(1, 2);
/* Prefixes the current message: "<context>: <previous message>". Returns -1. */
int dl_fail_context(const char *fmt, ...) DL_PRINTF(1, 2);
const char *dl_error(void);
void dl_clear_error(void);

/* ---- logging -------------------------------------------------------------
 * One format for every line: "[time] LEVEL module: message" on stderr.
 * The level comes from DEDLOC_LOG (error, warn, info, debug) or dl_log_set_level. */
enum dl_log_level { DL_LOG_ERROR = 0, DL_LOG_WARN = 1, DL_LOG_INFO = 2, DL_LOG_DEBUG = 3 };
void dl_log_set_level(enum dl_log_level level);
enum dl_log_level dl_log_get_level(void);
void dl_log(enum dl_log_level level, const char *module, const char *fmt, ...) DL_PRINTF(3, 4);
#define DL_ERROR(mod, ...) dl_log(DL_LOG_ERROR, mod, __VA_ARGS__)
#define DL_WARN(mod, ...) dl_log(DL_LOG_WARN, mod, __VA_ARGS__)
#define DL_INFO(mod, ...) dl_log(DL_LOG_INFO, mod, __VA_ARGS__)
#define DL_DEBUG(mod, ...) dl_log(DL_LOG_DEBUG, mod, __VA_ARGS__)

/* ---- allocation ----------------------------------------------------------
 * Checked allocation: NULL with an error message naming the size on failure.
 * Sizes are multiplied with overflow checks. */
void *dl_malloc(size_t size);
void *dl_calloc(size_t count, size_t size);
void *dl_realloc(void *ptr, size_t size);
char *dl_strdup(const char *s);
/* a*b, or SIZE_MAX (and an error) on overflow. */
size_t dl_mul_size(size_t a, size_t b);

/* ---- files ---------------------------------------------------------------- */
/* Reads a whole file, refusing files larger than max_size. The buffer is
 * NUL-terminated (not counted in *size). */
int dl_read_file(const char *path, size_t max_size, char **data, size_t *size);
/* Writes atomically: temporary file in the same folder, fsync, rename, fsync dir.
 * A crash leaves either the old file or the new one, never a torn one. */
int dl_write_file_atomic(const char *path, const void *data, size_t size);
/* mkdir -p with mode 0755. */
int dl_mkdirs(const char *path);
bool dl_file_exists(const char *path);
/* rm -rf: removes path and, if it is a folder, everything under it (links are
 * removed, not followed). A path that does not exist is not an error. */
int dl_remove_tree(const char *path);
/* Puts the finished folder tmp in place as path: a rename, so path is either
 * absent/old or whole. An existing folder at path is moved aside first and
 * removed once tmp is in place. */
int dl_replace_dir(const char *tmp, const char *path);
/* The cache folder: $DEDLOC_CACHE_DIR, else $XDG_CACHE_HOME/dedloc, else
 * ~/.cache/dedloc. Created on first use. Returns a static string. */
const char *dl_cache_dir(void);

/* ---- half precision (host side) -------------------------------------------
 * IEEE binary16 with round-to-nearest-even, matching vstore_half_rte; bf16 as
 * the top 16 bits of an fp32 with round-to-nearest-even (NaN stays NaN). */
uint16_t dl_f32_to_f16(float f);
float dl_f16_to_f32(uint16_t h);
uint16_t dl_f32_to_bf16(float f);
float dl_bf16_to_f32(uint16_t b);
void dl_f32_to_f16_array(uint16_t *dst, const float *src, size_t n);
void dl_f16_to_f32_array(float *dst, const uint16_t *src, size_t n);
void dl_f32_to_bf16_array(uint16_t *dst, const float *src, size_t n);
void dl_bf16_to_f32_array(float *dst, const uint16_t *src, size_t n);

/* ---- arithmetic that every machine rounds alike ---------------------------
 * base^n by repeated squaring in double-double arithmetic: only IEEE +, -
 * and *, so the same bits on every C library (libm's pow may differ in its
 * last bit between implementations, which would let peers' optimizer steps
 * drift apart). n >= 0 (n < 0 gives 1); correctly rounded in practice
 * (about 2^-100 relative error before the final rounding) while the result
 * is a normal double. */
double dl_powi(double base, int64_t n);

/* ---- hashing -------------------------------------------------------------- */
uint64_t dl_hash64(const void *data, size_t size, uint64_t seed);   /* xxh64 */
/* Writes 16 lowercase hex digits and a NUL into out[17]. */
void dl_hash64_hex(uint64_t h, char out[17]);

/* ---- random numbers --------------------------------------------------------
 * xoshiro256** seeded through splitmix64: fast, reproducible on every machine. */
typedef struct { uint64_t s[4]; } dl_rng;
void dl_rng_seed(dl_rng *rng, uint64_t seed);
uint64_t dl_rng_next(dl_rng *rng);
/* Uniform in [0, 1) with 24 random bits (exactly representable as float). */
float dl_rng_uniform(dl_rng *rng);
/* Uniform integer in [0, n), without modulo bias. n > 0. */
uint64_t dl_rng_below(dl_rng *rng, uint64_t n);
/* Standard normal (Box-Muller in double, then rounded). */
float dl_rng_normal(dl_rng *rng);

/* ---- clocks --------------------------------------------------------------- */
double dl_now(void);        /* monotonic seconds */
double dl_wall_time(void);  /* seconds since the Unix epoch */

#endif
