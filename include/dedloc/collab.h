/* dedloc collaborative step: the averaging round and state transfer, built on
 * the networking core (dedloc/net.h). */
#ifndef DEDLOC_COLLAB_H
#define DEDLOC_COLLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/net.h"

/* ==== state transfer ==== */
/* A newcomer, or a peer more than one epoch behind, downloads the full
 * training state from peers at the latest epoch (donors) before it trains.
 *
 * The state is the caller's list of flat buffers (buffer 0 is always the fp32
 * parameter vector; then e.g. the optimizer's moments) plus a metadata blob
 * the caller defines (epoch, schedule position, loss scale...). A donor
 * serves copies taken at publication, so training goes on while others
 * download. A fetcher draws chunks from several donors at once, verifies
 * every chunk (xxh64), the whole (xxh64) and the parameters (BLAKE2b-256,
 * against the hash the donors signed in their progress records), so what it
 * ends with is exactly the donors' bits, or an error.
 *
 * The fetcher applies its own run's optimizer settings (learning rate,
 * schedule length, weight decay...) to the state it receives, never the
 * donor's: the metadata blob is data for the caller to check and use, not
 * configuration to adopt.
 *
 * Wire (requests on dl_net, every integer little-endian):
 *   "state.info"  request: u64 epoch. Answer: the snapshot's description
 *                 (magic "DLST1\0\0\0", epoch, chunk size, buffer sizes,
 *                 param hash, whole-state xxh64, one xxh64 per chunk, the
 *                 metadata blob), or an error naming the epochs served.
 *   "state.chunk" request: u64 epoch, u64 chunk index. Answer: the chunk's
 *                 bytes. Chunks number the buffers' bytes in order, each
 *                 buffer cut into chunk-size pieces (its last one shorter).
 * Only net's lossless compression touches the bytes on the wire. */

/* param_hash: BLAKE2b-256 of the fp32 parameter vector's bytes (little-endian). */
void dl_collab_param_hash(const float *params, size_t n, uint8_t out[32]);

#define DL_STATE_MAX_BUFFERS 16
#define DL_STATE_MAX_META ((size_t)1 << 20)
#define DL_STATE_DEFAULT_CHUNK ((size_t)1 << 20)
#define DL_STATE_MIN_CHUNK ((size_t)4096)
#define DL_STATE_MAX_CHUNK ((size_t)8 << 20) /* well under net's default 16 MiB frame */

/* One buffer to publish (read only). */
struct dl_state_span {
    const void *data;
    size_t size;
};

/* One buffer to fill: its size is the caller's expectation, a donor whose
 * layout differs is not used. */
struct dl_state_buffer {
    void *data;
    size_t size;
};

/* ---- donor ------------------------------------------------------------------- */
typedef struct dl_state_donor dl_state_donor;

struct dl_state_donor_config {
    size_t chunk_size;       /* bytes per chunk (default 1 MiB; 4 KiB .. 8 MiB) */
    size_t keep_snapshots;   /* epochs served at once, newest first (default 2), so a
                              * fetch that began before the newest publication can end */
    size_t serve_threads;    /* threads answering requests off the network thread (default 2) */
    size_t max_queued;       /* requests waiting for a serve thread; beyond, "busy" (default 256) */
};
void dl_state_donor_config_default(struct dl_state_donor_config *config);

/* Registers the "state.info" and "state.chunk" handlers on net and starts the
 * serve threads. Nothing is served until the first publication. Any number
 * of fetchers may download at once; what leaves goes through net's upload cap
 * (dl_net_config.max_upload_mbit). config NULL = defaults. */
int dl_state_donor_start(dl_net *net, const struct dl_state_donor_config *config, dl_state_donor **donor);

/* Publishes the state of `epoch`: copies every buffer and the metadata (the
 * caller may change its buffers as soon as this returns), computes the
 * hashes, and serves it from then on. The oldest snapshot beyond
 * keep_snapshots is dropped (freed once no answer is reading it). buffers[0]
 * must be the fp32 parameter vector (size a multiple of 4). An epoch already
 * published is replaced. Call from one thread at a time, not from a net callback. */
int dl_state_donor_publish(dl_state_donor *donor, uint64_t epoch, const struct dl_state_span *buffers,
                           size_t num_buffers, const void *meta, size_t meta_size);

struct dl_state_donor_stats {
    uint64_t info_served, chunks_served, bytes_served;
    uint64_t refused;        /* unknown epoch, bad request, busy */
    uint64_t newest_epoch;   /* 0 before the first publication */
    size_t snapshots;        /* epochs served now */
};
void dl_state_donor_get_stats(dl_state_donor *donor, struct dl_state_donor_stats *stats);

/* Removes the handlers, waits for answers in progress and frees everything.
 * Call before dl_net_stop on the same net, and not from a net callback.
 * NULL is allowed. */
void dl_state_donor_stop(dl_state_donor *donor);

/* ---- fetcher ----------------------------------------------------------------- */
struct dl_state_fetch_config {
    uint64_t epoch;                      /* the epoch to fetch; donors serving another are not used */
    const char *const *donors;           /* peer ids of connected donors, in order of preference */
    size_t num_donors;                   /* 1 .. 64 */
    const uint8_t *expected_param_hash;  /* required, 32 bytes: from the donors' signed records */
    size_t max_in_flight_per_donor;      /* chunk requests outstanding per donor (default 4) */
    double request_timeout_s;            /* per request; a donor that does not answer in time is
                                          * stalled and dropped (default 60) */
    double timeout_s;                    /* the whole fetch (default 1800) */
    size_t max_meta;                     /* largest metadata blob accepted (default DL_STATE_MAX_META) */
    /* Called on the fetching thread after chunks arrive (not on the network thread). */
    void (*progress)(void *user, size_t chunks_done, size_t chunks_total);
    void *progress_user;
};
void dl_state_fetch_config_default(struct dl_state_fetch_config *config);

/* What one donor did for a fetch. */
struct dl_state_fetch_donor {
    char peer_id[DL_PEER_ID_HEX];
    uint64_t chunks, bytes;     /* verified chunks it delivered */
    uint32_t corrupt;           /* chunks whose xxh64 did not match: a bad donor */
    uint32_t failures;          /* timeouts, disconnections, error answers */
    bool used;                  /* its description matched and it was asked for chunks */
    bool dropped;               /* stopped using it (see reason) */
    char reason[160];           /* why not used or dropped; "" otherwise */
};

struct dl_state_fetch_result {
    uint64_t epoch;
    uint8_t *meta;              /* malloc'd metadata blob of the first used donor (caller frees
                                 * through dl_state_fetch_result_free) */
    size_t meta_size;
    size_t num_chunks, chunks_refetched;
    size_t num_donors;
    struct dl_state_fetch_donor *donors;  /* num_donors entries, in config order */
    double seconds;
};

/* Downloads the state of config->epoch into buffers (sizes as the caller's
 * layout says; the donors' must match). Blocks; call from any thread but the
 * network thread. Chunks are requested from every usable donor at once, each
 * donor keeping max_in_flight_per_donor requests outstanding, so faster
 * donors serve more; a donor that disconnects, stalls past the request
 * timeout or answers errors is dropped and its chunks go to the others. A
 * chunk whose xxh64 does not match is asked again from another donor and its
 * sender is reported (corrupt) and dropped; when it is the last donor left it
 * is given up to 3 tries. Ends with the whole-state xxh64 and
 * the parameters' BLAKE2b-256 checked against expected_param_hash.
 * Returns 0, or -1 with dl_fail() saying why (no donor serves the epoch,
 * layout differs, every donor dropped, hash mismatch, timeout); result is
 * filled either way (donor reports) and must be freed. Buffers hold
 * unspecified bytes after a failure. */
int dl_state_fetch(dl_net *net, const struct dl_state_fetch_config *config, struct dl_state_buffer *buffers,
                   size_t num_buffers, struct dl_state_fetch_result *result);
void dl_state_fetch_result_free(struct dl_state_fetch_result *result);

#endif
