/* topk contributions and the sparse fp16 results of a topk round (layouts
 * in wirecodec.h).
 *
 * Why blocks of 4096 within the 1 MiB chunk: a 12-bit offset per kept value
 * (an offset within the whole chunk would take 18), and every block of the
 * vector keeps its share of the traffic, so a layer of small values is
 * still sent now and then instead of waiting behind the large ones
 * (SparseLoCo selects per chunk of 4096 in the same way). What a block does
 * not send stays in the sender's residual (error feedback). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"

#define OFFSET_BITS 12
#define CODE_BITS 2
_Static_assert(DL_CODEC_TOPK_BLOCK <= (1 << OFFSET_BITS), "a block offset must fit its bits");
_Static_assert(DL_CODEC_TOPK_BLOCK % DL_CODEC_TOPK_RATIO == 0, "a full block keeps a whole number of values");
#define MAX_KEEP (DL_CODEC_TOPK_BLOCK / DL_CODEC_TOPK_RATIO)

size_t dl_codec_topk_keep(size_t len) { return (len + DL_CODEC_TOPK_RATIO - 1) / DL_CODEC_TOPK_RATIO; }

static size_t block_bytes(size_t keep) { return 8 + ((OFFSET_BITS + CODE_BITS) * keep + 7) / 8; }

size_t dl_codec_topk_size(size_t n) {
    size_t full = n / DL_CODEC_TOPK_BLOCK, rest = n % DL_CODEC_TOPK_BLOCK;
    return full * block_bytes(MAX_KEEP) + (rest ? block_bytes(dl_codec_topk_keep(rest)) : 0);
}

/* Little-endian bit streams: bit b of the stream is bit b % 8 of byte b / 8.
 * The writer keeps the bits not yet written in a 64-bit word and stores
 * whole bytes (at most 19 bits come in at a time, fewer than 8 wait). */
struct bit_writer {
    uint8_t *p;
    uint64_t acc;
    int have;
};

static inline void put_bits(struct bit_writer *w, uint32_t v, int bits) {
    w->acc |= (uint64_t)(v & ((1u << bits) - 1)) << w->have;
    w->have += bits;
    for (; w->have >= 8; w->have -= 8, w->acc >>= 8) *w->p++ = (uint8_t)w->acc;
}

/* The last partial byte, its unused bits zero. */
static void flush_bits(struct bit_writer *w) {
    if (w->have) *w->p++ = (uint8_t)w->acc;
    w->acc = 0;
    w->have = 0;
}

static uint32_t get_bits(const uint8_t *p, size_t *pos, int bits) {
    uint32_t v = 0;
    for (int b = 0; b < bits; b++, (*pos)++) v |= (uint32_t)((p[*pos / 8] >> (*pos % 8)) & 1) << b;
    return v;
}

/* Order of selection: larger magnitude first, then the lower index. The
 * magnitude's bits order finite non-negative floats as their values do. */
static uint64_t rank_of(float v, size_t i) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return ((uint64_t)(u & 0x7fffffffu) << OFFSET_BITS) | (uint64_t)(DL_CODEC_TOPK_BLOCK - 1 - i);
}

static void sift_down(uint64_t *heap, size_t size, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < size && heap[l] < heap[m]) m = l;
        if (r < size && heap[r] < heap[m]) m = r;
        if (m == i) return;
        uint64_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static void sift_up(uint64_t *heap, size_t i) {
    while (i > 0 && heap[(i - 1) / 2] > heap[i]) {
        uint64_t t = heap[i];
        heap[i] = heap[(i - 1) / 2];
        heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* The heap's smallest key is beaten by a later value exactly when that
 * value's magnitude bits are larger: at equal magnitudes the earlier index
 * ranks first, and every value in the heap came earlier. */
static void offer(uint64_t *heap, size_t *size, size_t keep, const float *x, size_t i) {
    uint64_t key = rank_of(x[i], i);
    if (*size < keep) {
        heap[*size] = key;
        sift_up(heap, (*size)++);
    } else if (key > heap[0]) {
        heap[0] = key;
        sift_down(heap, *size, 0);
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define TOPK_HAVE_AVX2 1
#include <immintrin.h>
/* A shorter block (a chunk's last): eight values at a time against the
 * heap's floor once it is full; the blocks of eight that hold a value
 * above it go through offer() in index order, so the heap holds the
 * block's top keys, which are unique, and the bytes are the scalar loop's. */
__attribute__((target("avx2"))) static size_t select_avx2(const float *x, size_t len, size_t keep, uint64_t *heap,
                                                           size_t *size) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i floor = _mm256_set1_epi32(-1); /* below every magnitude */
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        __m256i m = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)), abs_mask);
        int hits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, floor)));
        if (!hits) continue;
        for (int l = 0; l < 8; l++)
            if ((hits >> l) & 1) offer(heap, size, keep, x, i + (size_t)l);
        if (*size == keep) floor = _mm256_set1_epi32((int32_t)(heap[0] >> OFFSET_BITS));
    }
    return i;
}

#define TOPK_VECS (DL_CODEC_TOPK_BLOCK / 8) /* vectors of eight values in a block */
_Static_assert(TOPK_VECS % 16 == 0, "the counts below take sixteen vectors a turn");
_Static_assert(TOPK_VECS / 8 >= MAX_KEEP, "a block needs MAX_KEEP disjoint groups of eight vectors");

/* How many of the TOPK_VECS magnitudes g are at least t (t > 0). */
__attribute__((target("avx2"))) static int count_at_least(const int32_t *g, int32_t t) {
    const __m256i below = _mm256_set1_epi32(t - 1);
    __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
    for (size_t i = 0; i < TOPK_VECS; i += 16) {
        a0 = _mm256_sub_epi32(a0, _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(g + i)), below));
        a1 = _mm256_sub_epi32(a1,
                              _mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(g + i + 8)), below));
    }
    int32_t lane[8];
    _mm256_storeu_si256((__m256i *)(void *)lane, _mm256_add_epi32(a0, a1));
    return lane[0] + lane[1] + lane[2] + lane[3] + lane[4] + lane[5] + lane[6] + lane[7];
}

/* Every lane of the result holds the largest lane of v. */
__attribute__((target("avx2"))) static __m256i lanes_max(__m256i v) {
    v = _mm256_max_epi32(v, _mm256_permute2x128_si256(v, v, 1));
    v = _mm256_max_epi32(v, _mm256_shuffle_epi32(v, 0x4e));
    return _mm256_max_epi32(v, _mm256_shuffle_epi32(v, 0xb1));
}

/* A lower bound, within 1/256 of a binade, on the keep-th largest of the
 * TOPK_VECS magnitudes g (finite floats' bits without the sign): the
 * keep-th largest with all but its top 16 bits (exponent and 8 bits of
 * mantissa) cleared, found by a binary search on those 16 bits with
 * vector counts (no compares to mispredict: a quickselect of 512 values
 * cost more than the rest of the block, and a histogram waited on its own
 * increments). The search starts between `low`, a magnitude that at least
 * keep of g reach, and `high`, the largest. */
__attribute__((target("avx2"))) static int32_t kth_largest_floor(const int32_t *g, size_t keep, int32_t low,
                                                                  int32_t high) {
    int32_t lo = low >> 15, hi = high >> 15;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2; /* > 0 */
        if ((size_t)count_at_least(g, mid << 15) >= keep) lo = mid;
        else hi = mid - 1;
    }
    return lo << 15;
}

/* The keep largest of key[0..n) (unique; n >= keep) into key[0..keep). */
static void top_keys(uint64_t *key, size_t n, size_t keep) {
    size_t lo = 0, hi = n - 1, want = keep - 1;
    while (lo < hi) {
        uint64_t pivot = key[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (key[i] > pivot) i++;
            while (key[j] < pivot) j--;
            if (i <= j) {
                uint64_t t = key[i];
                key[i] = key[j];
                key[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return;
    }
}

/* The largest of each of eight vectors, lane j for v[j]: three rounds of
 * unpack (or swap of halves) and max, as in a transpose. */
__attribute__((target("avx2"))) static __m256i max_of_eight(const __m256i v[8]) {
    __m256i p[4], q[2];
    for (int k = 0; k < 4; k++)
        p[k] = _mm256_max_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        q[k] = _mm256_max_epi32(_mm256_unpacklo_epi64(p[2 * k], p[2 * k + 1]),
                                _mm256_unpackhi_epi64(p[2 * k], p[2 * k + 1]));
    return _mm256_max_epi32(_mm256_permute2x128_si256(q[0], q[1], 0x20), _mm256_permute2x128_si256(q[0], q[1], 0x31));
}

/* A whole block (4096 values, 64 kept) in two passes, no heap:
 *
 * 1. Each vector of eight values gives its largest magnitude (eight vectors
 *    at a time, max_of_eight): 512 disjoint groups. The 64th
 *    largest of their maxima is at most the block's 64th largest magnitude
 *    (64 groups reach it, each through a different value), so no value
 *    below it can be kept; the floor is a bound just under it
 *    (kth_largest_floor). On spread-out data about 1.7% of the values
 *    reach it, 70 or so for 64 places, in about as many vectors: only
 *    those are read again. The same pass gives the block's largest
 *    magnitude, which is its bound check.
 * 2. The values at or above the floor, as selection keys (rank_of: unique,
 *    larger magnitude first, then the lower index), and the 64 largest keys
 *    among them by quickselect.
 *
 * The kept set is the block's 64 largest keys whatever the order they are
 * found in, so the bytes are the scalar loop's. Ties at the floor can let
 * every value through (a block of zeros): the candidates' room is the
 * block. */
enum block_selection { SELECT_OUT_OF_BOUNDS = -1, SELECT_SCALAR = 0, SELECT_DONE = 1 };

/* The largest magnitude's bits that the codecs take (below 2^DL_CODEC_MAX_EXPONENT). */
#define LAST_BOUNDED ((int32_t)(((uint32_t)(127 + DL_CODEC_MAX_EXPONENT) << 23) - 1))

__attribute__((target("avx2"))) static enum block_selection select_block_avx2(const float *x, uint64_t *heap) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    enum { VECS = TOPK_VECS };
    int32_t gmax[VECS]; /* the largest magnitude of each vector of eight values */
    /* The largest magnitude of each group of 64 values (VECS / 8 disjoint
     * groups): at least MAX_KEEP values reach the least of them. */
    __m256i group_min = _mm256_set1_epi32(INT32_MAX), group_max = _mm256_setzero_si256();
    for (size_t r = 0; r < VECS; r += 8) {
        __m256i v[8];
        for (int j = 0; j < 8; j++)
            v[j] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + 8 * (r + (size_t)j))),
                                    abs_mask);
        __m256i m = max_of_eight(v);
        _mm256_storeu_si256((__m256i *)(void *)(gmax + r), m);
        m = lanes_max(m);
        group_min = _mm256_min_epi32(group_min, m);
        group_max = _mm256_max_epi32(group_max, m);
    }
    /* The bound check costs nothing here: the block's largest magnitude is known. */
    if (_mm256_cvtsi256_si32(group_max) > LAST_BOUNDED) return SELECT_OUT_OF_BOUNDS;
    int32_t least = kth_largest_floor(gmax, MAX_KEEP, _mm256_cvtsi256_si32(group_min), _mm256_cvtsi256_si32(group_max));
    const __m256i floor = _mm256_set1_epi32(least - 1); /* magnitudes >= least */
    uint64_t cand[DL_CODEC_TOPK_BLOCK];
    size_t count = 0;
    for (size_t r = 0; r < VECS; r += 8) {
        __m256i m = _mm256_loadu_si256((const __m256i *)(const void *)(gmax + r));
        unsigned vecs = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, floor)));
        while (vecs) {
            size_t v = 8 * (r + (size_t)__builtin_ctz(vecs));
            vecs &= vecs - 1;
            __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + v)), abs_mask);
            unsigned hits = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, floor)));
            while (hits) {
                unsigned l = (unsigned)__builtin_ctz(hits);
                hits &= hits - 1;
                cand[count++] = rank_of(x[v + l], v + l);
            }
        }
    }
    if (count < MAX_KEEP) return SELECT_SCALAR; /* cannot happen (see above); the scalar loop would decide */
    top_keys(cand, count, MAX_KEEP);
    memcpy(heap, cand, MAX_KEEP * sizeof *heap);
    return SELECT_DONE;
}

/* How many leading values are certainly within the codecs' bound (a
 * multiple of 8; the scalar loop checks from there and names the index). */
__attribute__((target("avx2"))) static size_t bounded_prefix_avx2(const float *x, size_t n) {
    const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
    const __m256i last_ok = _mm256_set1_epi32(LAST_BOUNDED);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i e = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)), exp_mask);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(e, last_ok)))) break;
    }
    return i;
}
#else
#define TOPK_HAVE_AVX2 0
#endif

/* Whether every value of a block is within the codecs' bound. */
static bool block_bounded(const float *x, size_t len, bool vector) {
    size_t i = 0;
#if TOPK_HAVE_AVX2
    if (vector) i = bounded_prefix_avx2(x, len);
#else
    (void)vector;
#endif
    for (; i < len; i++)
        if (!dl_codec_bounded(x[i])) return false;
    return true;
}

/* One block into out; false (nothing written) if a value is beyond the
 * codecs' bound. */
static bool encode_block(const float *x, size_t len, uint8_t *out, bool vector) {
    size_t keep = dl_codec_topk_keep(len);
    uint64_t heap[MAX_KEEP] = {0};
    size_t size = 0, i = 0;
    bool checked = false;
#if TOPK_HAVE_AVX2
    if (vector && len == DL_CODEC_TOPK_BLOCK && keep == MAX_KEEP) {
        enum block_selection sel = select_block_avx2(x, heap);
        if (sel == SELECT_OUT_OF_BOUNDS) return false;
        checked = true;
        if (sel == SELECT_DONE) {
            size = keep;
            i = len;
        }
    }
#endif
    if (!checked) {
        if (!block_bounded(x, len, vector)) return false;
#if TOPK_HAVE_AVX2
        if (vector) i = select_avx2(x, len, keep, heap, &size);
#endif
    }
    for (; i < len; i++) offer(heap, &size, keep, x, i);
    /* Both vector selections leave `keep` keys (a heap that is not full
     * means values were passed over that should not have been): should
     * they not, the scalar loop decides. */
    if (size != keep)
        for (i = size = 0; i < len; i++) offer(heap, &size, keep, x, i);
    /* The kept offsets in increasing order, through a bitmap of the block. */
    uint64_t kept[DL_CODEC_TOPK_BLOCK / 64] = {0};
    for (size_t j = 0; j < keep; j++) {
        size_t v = DL_CODEC_TOPK_BLOCK - 1 - (size_t)(heap[j] & (DL_CODEC_TOPK_BLOCK - 1));
        kept[v / 64] |= 1ull << (v % 64);
    }
    /* Each kept offset's place is the number of kept offsets below it
     * (counted from the bitmap, no branch on its bits). */
    uint32_t below[DL_CODEC_TOPK_BLOCK / 64];
    uint32_t run = 0;
    for (size_t w = 0; w < DL_CODEC_TOPK_BLOCK / 64; w++) {
        below[w] = run;
        run += (uint32_t)__builtin_popcountll(kept[w]);
    }
    uint16_t idx[MAX_KEEP] = {0}; /* one place for each of the `keep` distinct offsets */
    for (size_t j = 0; j < keep; j++) {
        size_t v = DL_CODEC_TOPK_BLOCK - 1 - (size_t)(heap[j] & (DL_CODEC_TOPK_BLOCK - 1));
        uint64_t lower = kept[v / 64] & ((1ull << (v % 64)) - 1);
        idx[below[v / 64] + (uint32_t)__builtin_popcountll(lower)] = (uint16_t)v;
    }
    double lo_mag = INFINITY, hi_mag = 0;
    for (size_t j = 0; j < keep; j++) {
        double m = fabs((double)x[idx[j]]);
        if (m < lo_mag) lo_mag = m;
        if (m > hi_mag) hi_mag = m;
    }
    /* Each side's sum in index order. Adding +0 to the other side's sum
     * changes none of its bits (it starts at +0 and adds magnitudes, so it
     * is never -0): no branch to mispredict. */
    double mid = (lo_mag + hi_mag) / 2, sum[2] = {0, 0};
    size_t high = 0;
    for (size_t j = 0; j < keep; j++) {
        double m = fabs((double)x[idx[j]]);
        int side = m >= mid;
        sum[1] += side ? m : 0.0;
        sum[0] += side ? 0.0 : m;
        high += (size_t)side;
    }
    size_t count[2] = {keep - high, high};
    float level[2];
    for (int s = 0; s < 2; s++) level[s] = (float)(count[s] ? sum[s] / (double)count[s] : mid);
    memcpy(out, &level[0], 4);
    memcpy(out + 4, &level[1], 4);
    struct bit_writer w = {out + 8, 0, 0};
    for (size_t j = 0; j < keep; j++) put_bits(&w, idx[j], OFFSET_BITS);
    for (size_t j = 0; j < keep; j++) {
        float v = x[idx[j]];
        uint32_t code = (signbit(v) ? 1u : 0u) | (fabs((double)v) >= mid ? 2u : 0u);
        put_bits(&w, code, CODE_BITS);
    }
    flush_bits(&w); /* block_bytes(keep) written in all */
    return true;
}

/* Block by block, each checked against the codecs' bound as it is read (on
 * the vector path, by its selection's first pass): the first block with a
 * value beyond it is searched again for that value's index. */
int dl_codec_topk_encode(const float *x, size_t n, uint8_t *out, bool vector) {
    for (size_t b = 0; b * DL_CODEC_TOPK_BLOCK < n; b++) {
        size_t start = b * DL_CODEC_TOPK_BLOCK, len = n - start < DL_CODEC_TOPK_BLOCK ? n - start : DL_CODEC_TOPK_BLOCK;
        if (!encode_block(x + start, len, out, vector)) {
            for (size_t i = start; i < start + len; i++)
                if (!dl_codec_bounded(x[i])) return dl_codec_refuse_value(i, n, x[i]);
            return dl_fail("topk block %zu was refused but holds no value beyond the bound", b); /* cannot happen */
        }
        out += block_bytes(dl_codec_topk_keep(len));
    }
    return 0;
}

/* One block as a decoder may take it: its kept offsets and values. */
struct topk_block {
    size_t keep;
    uint16_t offset[MAX_KEEP];
    float value[MAX_KEEP];
};

static int read_block(const uint8_t *in, size_t block, size_t len, struct topk_block *out) {
    float level[2];
    memcpy(&level[0], in, 4);
    memcpy(&level[1], in + 4, 4);
    for (int s = 0; s < 2; s++)
        if (signbit(level[s]) || !dl_codec_bounded(level[s]))
            return dl_fail("topk block %zu: magnitude %g is negative, NaN, Inf or beyond 2^%d", block,
                           (double)level[s], DL_CODEC_MAX_EXPONENT);
    if (level[0] > level[1])
        return dl_fail("topk block %zu: its low magnitude %g is above its high one %g", block, (double)level[0],
                       (double)level[1]);
    size_t keep = dl_codec_topk_keep(len), pos = 0;
    const uint8_t *bits = in + 8;
    out->keep = keep;
    for (size_t j = 0; j < keep; j++) {
        uint32_t off = get_bits(bits, &pos, OFFSET_BITS);
        if (off >= len || (j > 0 && off <= out->offset[j - 1]))
            return dl_fail("topk block %zu: offset %zu is %u: beyond the block's %zu values or not above the one "
                           "before", block, j, off, len);
        out->offset[j] = (uint16_t)off;
    }
    for (size_t j = 0; j < keep; j++) {
        uint32_t code = get_bits(bits, &pos, CODE_BITS);
        float m = level[code >> 1];
        out->value[j] = code & 1 ? -m : m;
    }
    size_t end = (block_bytes(keep) - 8) * 8;
    for (; pos < end; pos++)
        if ((bits[pos / 8] >> (pos % 8)) & 1) return dl_fail("topk block %zu: padding bits are not zero", block);
    return 0;
}

/* Every block checked, none written: the refusals come before any output. */
static int check_topk(const uint8_t *in, size_t n, struct topk_block *scratch) {
    for (size_t b = 0; b * DL_CODEC_TOPK_BLOCK < n; b++) {
        size_t start = b * DL_CODEC_TOPK_BLOCK, len = n - start < DL_CODEC_TOPK_BLOCK ? n - start : DL_CODEC_TOPK_BLOCK;
        if (read_block(in, b, len, scratch)) return -1;
        in += block_bytes(scratch->keep);
    }
    return 0;
}

int dl_codec_topk_decode(const uint8_t *in, size_t n, float *out) {
    struct topk_block blk;
    if (check_topk(in, n, &blk)) return -1;
    if (n) memset(out, 0, n * sizeof(float));
    for (size_t b = 0; b * DL_CODEC_TOPK_BLOCK < n; b++) {
        size_t start = b * DL_CODEC_TOPK_BLOCK, len = n - start < DL_CODEC_TOPK_BLOCK ? n - start : DL_CODEC_TOPK_BLOCK;
        read_block(in, b, len, &blk);
        for (size_t j = 0; j < blk.keep; j++) out[start + blk.offset[j]] = blk.value[j];
        in += block_bytes(blk.keep);
    }
    return 0;
}

int dl_codec_topk_accumulate(const uint8_t *in, size_t n, double weight, double *acc) {
    struct topk_block blk;
    if (check_topk(in, n, &blk)) return -1;
    for (size_t b = 0; b * DL_CODEC_TOPK_BLOCK < n; b++) {
        size_t start = b * DL_CODEC_TOPK_BLOCK, len = n - start < DL_CODEC_TOPK_BLOCK ? n - start : DL_CODEC_TOPK_BLOCK;
        read_block(in, b, len, &blk);
        for (size_t j = 0; j < blk.keep; j++) acc[start + blk.offset[j]] += weight * (double)blk.value[j];
        in += block_bytes(blk.keep);
    }
    return 0;
}

/* ---- sparse fp16 (the results of a topk round) ---------------------------------- */

size_t dl_codec_sparse16_size(const uint8_t *in, size_t avail, size_t n) {
    size_t map = (n + 7) / 8;
    if (avail < map) {
        dl_fail("sparse fp16 result of %zu values needs a %zu-byte bitmap, got %zu bytes", n, map, avail);
        return SIZE_MAX;
    }
    if (n % 8 && (in[map - 1] >> (n % 8))) {
        dl_fail("sparse fp16 result: bitmap bits past value %zu are set", n);
        return SIZE_MAX;
    }
    size_t set = 0;
    for (size_t i = 0; i < map; i++) set += (size_t)__builtin_popcount(in[i]);
    return map + 2 * set;
}

int dl_codec_sparse16_encode(const float *x, size_t n, uint8_t *out, size_t *size) {
    size_t map = (n + 7) / 8;
    memset(out, 0, map);
    uint8_t *values = out + map;
    size_t set = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (!dl_codec_bounded(v)) return dl_codec_refuse_value(i, n, v);
        if (v > DL_CODEC_FP16_MAX) v = DL_CODEC_FP16_MAX;
        if (v < -DL_CODEC_FP16_MAX) v = -DL_CODEC_FP16_MAX;
        uint16_t h = dl_f32_to_f16(v);
        if (!(h & 0x7fffu)) continue;
        out[i / 8] |= (uint8_t)(1u << (i % 8));
        memcpy(values + 2 * set++, &h, 2);
    }
    *size = map + 2 * set;
    return 0;
}

int dl_codec_sparse16_decode(const uint8_t *in, size_t size, size_t n, float *out) {
    size_t want = dl_codec_sparse16_size(in, size, n);
    if (want == SIZE_MAX) return -1;
    if (size != want)
        return dl_fail("sparse fp16 result of %zu values: its bitmap gives %zu bytes, got %zu", n, want, size);
    size_t map = (n + 7) / 8, set = 0;
    const uint8_t *values = in + map;
    for (size_t i = 0; i < n; i++) {
        if (!((in[i / 8] >> (i % 8)) & 1)) continue;
        uint16_t h;
        memcpy(&h, values + 2 * set++, 2);
        if ((h & 0x7c00u) == 0x7c00u || !(h & 0x7fffu))
            return dl_fail("sparse fp16 value %zu of %zu is NaN, Inf or a zero marked as not zero", i, n);
    }
    set = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = 0;
        if ((in[i / 8] >> (i % 8)) & 1) memcpy(&h, values + 2 * set++, 2);
        out[i] = dl_f16_to_f32(h);
    }
    return 0;
}
