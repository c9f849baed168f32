/* State transfer internals shared by the donor and the fetcher (private to
 * src/collab): the snapshot description on the wire and the chunk map. */
#ifndef DEDLOC_COLLAB_STATE_TRANSFER_H
#define DEDLOC_COLLAB_STATE_TRANSFER_H

#include "dedloc/collab.h"

#define DL_STATE_INFO_METHOD "state.info"
#define DL_STATE_CHUNK_METHOD "state.chunk"
/* Tries a lone donor gets after sending corrupt chunks. */
#define DL_STATE_CORRUPT_TRIES 3

/* A snapshot's description ("state.info" answer). Decoded pointers point
 * into the blob they were decoded from. */
struct dl_state_desc {
    uint64_t epoch, chunk_size, num_chunks, whole_hash;
    uint32_t num_buffers, meta_size;
    uint64_t sizes[DL_STATE_MAX_BUFFERS];
    uint8_t param_hash[32];
    const uint8_t *chunk_hashes; /* num_chunks little-endian u64 */
    const uint8_t *meta;
};

/* Where chunk k lies: buffer, byte offset inside it, length. */
struct dl_state_chunk {
    uint32_t buffer;
    uint32_t len;
    uint64_t offset;
};

/* Chunk count of a layout; -1 with dl_fail when it overflows or a size is
 * out of bounds. */
int dl_state_count_chunks(const uint64_t *sizes, uint32_t num_buffers, uint64_t chunk_size, uint64_t *num_chunks);
/* The map of every chunk (malloc'd, num_chunks entries). */
struct dl_state_chunk *dl_state_chunk_map(const uint64_t *sizes, uint32_t num_buffers, uint64_t chunk_size,
                                          uint64_t num_chunks);
uint64_t dl_state_chunk_hash(const struct dl_state_desc *desc, uint64_t k);
/* xxh64 (seed 0) of the buffers' bytes, in order, as one stream. */
int dl_state_whole_hash(const struct dl_state_span *buffers, size_t num_buffers, uint64_t *hash);

/* Encodes a description with its chunk hashes (host u64) and metadata. */
uint8_t *dl_state_desc_encode(const struct dl_state_desc *desc, const uint64_t *chunk_hashes, const void *meta,
                              size_t *size);
/* Decodes and bounds-checks an untrusted description. */
int dl_state_desc_decode(const uint8_t *blob, size_t size, size_t max_meta, struct dl_state_desc *desc);

/* Little-endian helpers for request payloads. */
void dl_state_put_u64(uint8_t *p, uint64_t v);
uint64_t dl_state_get_u64(const uint8_t *p);

/* Test hook, never reachable from the command line: the next `count` chunk
 * answers of this donor have one byte flipped. */
void dl_state_donor_test_corrupt(dl_state_donor *donor, unsigned count);
/* Test hook, never reachable from the command line: the descriptions of the
 * states published from now on name param_hash, whatever the parameters
 * served are (their chunk and whole-state xxh64s stay consistent with what
 * is served): a donor whose description is right and whose state is not. */
void dl_state_donor_test_claim_param_hash(dl_state_donor *donor, const uint8_t param_hash[32]);

#endif
