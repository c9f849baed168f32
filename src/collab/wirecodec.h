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
 *          a single distinct value decodes it exactly. */
#ifndef DEDLOC_COLLAB_WIRECODEC_H
#define DEDLOC_COLLAB_WIRECODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/collab.h" /* enum dl_codec and its names */

#define DL_CODEC_UINT8_BINS 256
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

/* Implementations of the codecs. Every path gives the same bytes and the
 * same floats as the scalar one, on every input (the sums that define a
 * uint8 codebook run in index order in all of them); they differ only in
 * speed. dl_codec_encode/decode use the best path this CPU has. */
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

#endif
