/* State transfer on the wire: the parameter hash, the chunk map and the
 * snapshot description every donor answers to "state.info". */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "collab/state_transfer.h"
#include "dedloc/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the parameter hash is over little-endian fp32 bytes; this code hashes host floats as is"
#endif

static const uint8_t desc_magic[8] = {'D', 'L', 'S', 'T', '1', 0, 0, 0};
#define DESC_FIXED 80 /* magic, epoch, chunk size, counts, sizes, hashes before the arrays */

void dl_collab_param_hash(const float *params, size_t n, uint8_t out[32]) {
    crypto_generichash(out, 32, (const unsigned char *)params, (unsigned long long)n * 4, NULL, 0);
}

void dl_state_put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t dl_state_get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int dl_state_count_chunks(const uint64_t *sizes, uint32_t num_buffers, uint64_t chunk_size, uint64_t *num_chunks) {
    if (num_buffers < 1 || num_buffers > DL_STATE_MAX_BUFFERS)
        return dl_fail("state has %u buffers (1 .. %d)", num_buffers, DL_STATE_MAX_BUFFERS);
    if (chunk_size < DL_STATE_MIN_CHUNK || chunk_size > DL_STATE_MAX_CHUNK)
        return dl_fail("chunk size %llu outside %zu .. %zu", (unsigned long long)chunk_size, DL_STATE_MIN_CHUNK,
                       DL_STATE_MAX_CHUNK);
    uint64_t count = 0;
    for (uint32_t b = 0; b < num_buffers; b++) {
        if (sizes[b] > ((uint64_t)1 << 48)) return dl_fail("state buffer %u claims %llu bytes", b, (unsigned long long)sizes[b]);
        count += (sizes[b] + chunk_size - 1) / chunk_size;
    }
    /* Bounded so the per-chunk arrays of a fetch stay reasonable. */
    if (count > ((uint64_t)1 << 24)) return dl_fail("state has %llu chunks (at most 2^24)", (unsigned long long)count);
    *num_chunks = count;
    return 0;
}

struct dl_state_chunk *dl_state_chunk_map(const uint64_t *sizes, uint32_t num_buffers, uint64_t chunk_size,
                                          uint64_t num_chunks) {
    struct dl_state_chunk *map = dl_calloc(num_chunks ? num_chunks : 1, sizeof *map);
    if (!map) return NULL;
    uint64_t k = 0;
    for (uint32_t b = 0; b < num_buffers; b++)
        for (uint64_t off = 0; off < sizes[b]; off += chunk_size) {
            uint64_t len = sizes[b] - off < chunk_size ? sizes[b] - off : chunk_size;
            map[k++] = (struct dl_state_chunk){b, (uint32_t)len, off};
        }
    return map;
}

uint64_t dl_state_chunk_hash(const struct dl_state_desc *desc, uint64_t k) {
    return dl_state_get_u64(desc->chunk_hashes + 8 * k);
}

int dl_state_whole_hash(const struct dl_state_span *buffers, size_t num_buffers, uint64_t *hash) {
    XXH64_state_t *st = XXH64_createState();
    if (!st) return dl_fail("xxhash: cannot allocate a hash state");
    XXH64_reset(st, 0);
    for (size_t b = 0; b < num_buffers; b++)
        if (buffers[b].size) XXH64_update(st, buffers[b].data, buffers[b].size);
    *hash = (uint64_t)XXH64_digest(st);
    XXH64_freeState(st);
    return 0;
}

uint8_t *dl_state_desc_encode(const struct dl_state_desc *d, const uint64_t *chunk_hashes, const void *meta,
                              size_t *size) {
    size_t n = DESC_FIXED + 8 * (size_t)d->num_buffers + 8 * (size_t)d->num_chunks + d->meta_size;
    uint8_t *p = dl_malloc(n), *q = p;
    if (!p) return NULL;
    memcpy(q, desc_magic, 8);
    dl_state_put_u64(q + 8, d->epoch);
    dl_state_put_u64(q + 16, d->chunk_size);
    put_u32(q + 24, d->num_buffers);
    put_u32(q + 28, d->meta_size);
    dl_state_put_u64(q + 32, d->num_chunks);
    dl_state_put_u64(q + 40, d->whole_hash);
    memcpy(q + 48, d->param_hash, 32);
    q += DESC_FIXED;
    for (uint32_t b = 0; b < d->num_buffers; b++, q += 8) dl_state_put_u64(q, d->sizes[b]);
    for (uint64_t k = 0; k < d->num_chunks; k++, q += 8) dl_state_put_u64(q, chunk_hashes[k]);
    if (d->meta_size) memcpy(q, meta, d->meta_size);
    *size = n;
    return p;
}

int dl_state_desc_decode(const uint8_t *blob, size_t size, size_t max_meta, struct dl_state_desc *d) {
    memset(d, 0, sizeof *d);
    if (size < DESC_FIXED || memcmp(blob, desc_magic, 8))
        return dl_fail("state description is not one (%zu bytes, bad magic or too short)", size);
    d->epoch = dl_state_get_u64(blob + 8);
    d->chunk_size = dl_state_get_u64(blob + 16);
    d->num_buffers = get_u32(blob + 24);
    d->meta_size = get_u32(blob + 28);
    d->num_chunks = dl_state_get_u64(blob + 32);
    d->whole_hash = dl_state_get_u64(blob + 40);
    memcpy(d->param_hash, blob + 48, 32);
    if (d->num_buffers < 1 || d->num_buffers > DL_STATE_MAX_BUFFERS)
        return dl_fail("state description lists %u buffers (1 .. %d)", d->num_buffers, DL_STATE_MAX_BUFFERS);
    if (d->meta_size > max_meta) return dl_fail("state metadata of %u bytes exceeds %zu", d->meta_size, max_meta);
    if (size < DESC_FIXED + 8 * (size_t)d->num_buffers) return dl_fail("state description truncated");
    for (uint32_t b = 0; b < d->num_buffers; b++) d->sizes[b] = dl_state_get_u64(blob + DESC_FIXED + 8 * b);
    uint64_t count;
    if (dl_state_count_chunks(d->sizes, d->num_buffers, d->chunk_size, &count)) return dl_fail_context("state description");
    if (count != d->num_chunks)
        return dl_fail("state description claims %llu chunks, its layout has %llu", (unsigned long long)d->num_chunks,
                       (unsigned long long)count);
    size_t want = DESC_FIXED + 8 * (size_t)d->num_buffers + 8 * (size_t)count + d->meta_size;
    if (size != want) return dl_fail("state description is %zu bytes, its counts say %zu", size, want);
    d->chunk_hashes = blob + DESC_FIXED + 8 * (size_t)d->num_buffers;
    d->meta = d->chunk_hashes + 8 * (size_t)count;
    return 0;
}
