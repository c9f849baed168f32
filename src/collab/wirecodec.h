/* Wire codecs for averaging traffic (private to src/collab).
 *
 * A vector travels in chunks; each chunk is encoded on its own, so sending
 * and reducing overlap and a bad chunk costs only itself. NaN and Inf never
 * enter, nor finite values beyond 2^DL_CODEC_MAX_EXPONENT: encoding refuses
 * them and decoding refuses anything that would produce them, so a peer's
 * garbage stays a refused message.
 *
 * Layouts (little-endian, n values per chunk):
 *   none   n x fp32                                   4 n bytes
 *   fp16   n x IEEE binary16, round to nearest even;  2 n bytes
 *          finite values beyond +-65504 are clamped to +-65504 (fp16's
 *          largest), never turned into Inf
 *   uint8  256 x fp32 codebook, then n x one byte      1024 + n bytes
 *          per chunk: range mean +- 6 sigma (population sigma, in double),
 *          256 equal bins over it, values outside clamped into the end bins;
 *          codebook entry = mean of the chunk's values in that bin (an empty
 *          bin holds its centre); each value is sent as its bin's index.
 *          So a value decodes within one bin width of itself, except in an
 *          end bin that also holds values clamped from beyond 6 sigma: all
 *          of that bin decodes to its mean, outliers included. A bin holding
 *          a single distinct value decodes it exactly.
 *   int8   fp32 scale, then n x int8                   4 + n bytes
 *          scale = (largest |x|) / 127 in fp32 (the smallest subnormal
 *          when that underflows to 0 but some |x| > 0; a float step lower
 *          where 127 x scale would round to 2^32); code = x / scale in
 *          double, rounded to nearest even, within [-127, 127]; decoded
 *          (float)(code x scale). So |x - decoded| <= scale / 2 plus half an
 *          ulp of the decoded value. Refused: -128, a scale that is negative,
 *          NaN, Inf or so large that 127 x scale passes the bound.
 *   topk   per block of DL_CODEC_TOPK_BLOCK values (the chunk's last block
 *          may be shorter, L values): the k = ceil(L / DL_CODEC_TOPK_RATIO)
 *          largest |x|, ties to the lower index; everything else decodes to
 *          0. A block is two fp32 magnitudes (lo, hi: 0 <= lo <= hi), then
 *          a little-endian bit stream of k 12-bit offsets within the block
 *          (strictly increasing, < L), then k 2-bit codes (bit 0: negative,
 *          bit 1: hi), zero bits up to the byte: 8 + ceil(14 k / 8) bytes,
 *          120 for a full block (0.234 bits per value). The kept magnitudes
 *          split at the midpoint of their smallest t and largest M; lo and
 *          hi are the means (in double, index order) of each side (an empty
 *          side holds the midpoint). A kept value decodes to its sign times
 *          its side's mean: within (M - t) / 2 of itself, plus a float
 *          rounding. Offsets travel as fixed-width 12-bit numbers rather
 *          than a delta code so that a chunk's size is a function of n.
 * Results (what an aggregator returns, dl_codec_result_*) use the same
 * layout for none, fp16, uint8 and int8; a uint8 result's 256 bins run from
 * its smallest value to its largest (nothing clamped: each value decodes
 * within (max - min) / 256 of itself, a bound members can check). A topk round returns sparse fp16:
 * a bitmap of ceil(n / 8) bytes (bit e % 8 of byte e / 8: element e is not
 * zero in fp16; bits past n zero), then, in index order, the fp16 value
 * (as the fp16 codec rounds it, never +-0) of each element whose bit is
 * set: ceil(n / 8) + 2 x (set bits) bytes. The mean of sparse contributions
 * is zero outside the union of their supports, so the result costs 1 bit
 * per value plus 16 per element of that union; it decodes to exactly what
 * the fp16 codec would give (but +0 for -0). */
#ifndef DEDLOC_COLLAB_WIRECODEC_H
#define DEDLOC_COLLAB_WIRECODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dedloc/collab.h" /* enum dl_codec and its names */

#define DL_CODEC_UINT8_BINS 256
#define DL_CODEC_TOPK_BLOCK 4096
#define DL_CODEC_TOPK_RATIO 64
#define DL_CODEC_FP16_MAX 65504.0f
/* No value at or beyond 2^DL_CODEC_MAX_EXPONENT (about 4.3e9) is encoded or
 * decoded, as if it were NaN: a gradient element that large is a diverged
 * or hostile one, and under the plain mean a single huge finite value (3e38
 * passes every finiteness check) would take over the average. Far above
 * any honest gradient (fp16 storage ends at 65504) and far below where a
 * mean of DL_AVG_MAX_MEMBERS contributions could overflow a float. */
#define DL_CODEC_MAX_EXPONENT 32

/* Exact encoded bytes of n floats (one chunk); 0 for an unknown codec. */
size_t dl_codec_size(enum dl_codec codec, size_t n);
/* Encodes n floats (one chunk) into out (dl_codec_size(codec, n) bytes);
 * refuses (-1, dl_fail naming the index) any NaN/Inf input. out may be
 * partly written on failure. */
int dl_codec_encode(enum dl_codec codec, const float *x, size_t n, uint8_t *out);
/* Decodes exactly n floats from size bytes; refuses a wrong size, a
 * non-finite codebook or any non-finite output. out may be partly written on
 * failure. */
int dl_codec_decode(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, float *out);

/* The reduce's step for one contribution, without a decoded copy:
 * acc[i] += weight * (double)value_i for the n values dl_codec_decode would
 * give, each a multiply then an add in double (the same bits as decoding
 * first). Refuses exactly what dl_codec_decode refuses, before acc is
 * touched, so a bad chunk leaves the sum as it was. */
int dl_codec_decode_accumulate(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, double weight,
                               double *acc);
/* out[i] = (float)(acc[i] / total): the reduce's last step. */
void dl_codec_mean(const double *acc, size_t n, double total, float *out);

/* Values kept of a topk block of len values: ceil(len / DL_CODEC_TOPK_RATIO). */
size_t dl_codec_topk_keep(size_t len);

/* What an aggregator sends back for a chunk of n values under `codec` (see
 * the layouts above): the contribution's own layout, except sparse fp16 for
 * topk, whose size depends on the data. dl_codec_result_max: the most bytes
 * a result can take. dl_codec_result_size: the size of the result that
 * begins at in (avail bytes there), read from its own bytes; SIZE_MAX with
 * dl_fail when avail cannot hold one. Encoding writes *size bytes; decoding refuses
 * what dl_codec_result_size refuses, a size other than that, and anything
 * that would decode to NaN, Inf or beyond the bound. */
size_t dl_codec_result_max(enum dl_codec codec, size_t n);
size_t dl_codec_result_size(enum dl_codec codec, const uint8_t *in, size_t avail, size_t n);
int dl_codec_result_encode(enum dl_codec codec, const float *x, size_t n, uint8_t *out, size_t *size);
int dl_codec_result_decode(enum dl_codec codec, const uint8_t *in, size_t size, size_t n, float *out);

/* Implementations of the codecs. Every path gives the same bytes and the
 * same floats as the scalar one, on every input (the sums that define a
 * uint8 codebook run in the same lanes and order in all of them); they
 * differ only in speed. dl_codec_encode/decode use the best path this CPU has. */
enum dl_codec_path {
    DL_CODEC_PATH_SCALAR, /* portable C, any CPU */
    DL_CODEC_PATH_AVX2,   /* x86-64 with AVX2 and F16C, checked at run time */
    DL_CODEC_PATH_AVX512, /* AVX-512 F and BW besides, checked at run time */
    DL_CODEC_PATH_COUNT
};
const char *dl_codec_path_name(enum dl_codec_path path);
bool dl_codec_path_available(enum dl_codec_path path);
enum dl_codec_path dl_codec_best_path(void);
/* dl_codec_encode/decode on a given path; -1 (dl_fail) if this CPU lacks it. */
int dl_codec_encode_path(enum dl_codec_path path, enum dl_codec codec, const float *x, size_t n, uint8_t *out);
int dl_codec_decode_path(enum dl_codec_path path, enum dl_codec codec, const uint8_t *in, size_t size, size_t n,
                         float *out);
int dl_codec_decode_accumulate_path(enum dl_codec_path path, enum dl_codec codec, const uint8_t *in, size_t size,
                                    size_t n, double weight, double *acc);
int dl_codec_mean_path(enum dl_codec_path path, const double *acc, size_t n, double total, float *out);
/* The mean and sigma that place a uint8 chunk's grid, on a given path: the
 * codebook's bytes hide most differences in their last bits, so tests
 * compare these. */
int dl_codec_uint8_moments_path(enum dl_codec_path path, const float *x, size_t n, double *mean, double *sigma);
/* dl_codec_result_encode on a given path (the uint8 result's grid). */
int dl_codec_result_encode_path(enum dl_codec_path path, enum dl_codec codec, const float *x, size_t n, uint8_t *out,
                                size_t *size);

/* ---- int8 and topk (wirecodec_int8.c, wirecodec_topk.c) -------------------------
 * int8 has AVX2 paths with the same results, topk an AVX2 selection with
 * the same bytes. Each
 * decode refuses before it writes; accumulate adds weight * value in double
 * exactly as the reduce does after a decode (for topk only at the kept
 * offsets: adding the others' +0 would change no sum). */
static inline bool dl_codec_bounded(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7f800000u) < ((uint32_t)(127 + DL_CODEC_MAX_EXPONENT) << 23);
}
int dl_codec_refuse_value(size_t i, size_t n, float v);
size_t dl_codec_int8_size(size_t n);
/* vector: the AVX2 loops (only where the caller's path has AVX2); the same
 * bytes and floats either way. */
int dl_codec_int8_encode(const float *x, size_t n, uint8_t *out, bool vector);
int dl_codec_int8_decode(const uint8_t *in, size_t n, float *out, bool vector);
int dl_codec_int8_accumulate(const uint8_t *in, size_t n, double weight, double *acc, bool vector);
size_t dl_codec_topk_size(size_t n);
int dl_codec_topk_encode(const float *x, size_t n, uint8_t *out, bool vector);
int dl_codec_topk_decode(const uint8_t *in, size_t n, float *out);
int dl_codec_topk_accumulate(const uint8_t *in, size_t n, double weight, double *acc);
size_t dl_codec_sparse16_size(const uint8_t *in, size_t avail, size_t n);
int dl_codec_sparse16_encode(const float *x, size_t n, uint8_t *out, size_t *size);
int dl_codec_sparse16_decode(const uint8_t *in, size_t size, size_t n, float *out);

#endif
