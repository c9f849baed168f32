/* Signed progress records and the table they are merged into (the swarm
 * view of DeDLOC). Pure data structures: the event loop owns one table and
 * guards it with its lock; the tests drive it directly. */
#ifndef DEDLOC_NET_SWARM_H
#define DEDLOC_NET_SWARM_H

#include "net/wire.h"

/* What a peer says about itself. Also carries its dial address and declared
 * bandwidth, so record exchange doubles as peer exchange. */
struct dl_record {
    uint8_t pk[DL_WIRE_PK];
    char peer_id[DL_PEER_ID_HEX];
    uint64_t seq;                 /* strictly increasing per owner (microseconds of wall time) */
    uint64_t epoch;
    double samples;
    double samples_per_second;
    double time;                  /* owner's wall clock at publication */
    bool client_mode;
    bool goodbye;                 /* the owner left cleanly */
    char address[DL_NET_ADDR_MAX];
    double bandwidth_mbit;        /* declared, else measured in past rounds; 0 = unknown */
    bool has_param_hash;
    uint8_t param_hash[32];       /* BLAKE2b-256 of the owner's parameters at epoch */
};

/* A blob is msgpack [record bytes (bin), ed25519 signature (bin 64)]; the
 * signature covers "dedloc-record-v1" || record bytes, and the record names
 * the run, so a record cannot be replayed into another run. */
/* Signed blobs (records, metrics): the ed25519 signature covers a context
 * string (with its NUL), then the body's msgpack bytes; the blob is msgpack
 * [bin body, bin64 signature]. dl_signed_wrap signs and wraps bytes (taking
 * ownership of them; NULL in, NULL out). */
void dl_signed_state(crypto_sign_state *st, const char *context, const uint8_t *bytes, size_t n);
uint8_t *dl_signed_wrap(const char *context, uint8_t *bytes, size_t nbytes, const struct dl_identity *id,
                        size_t *size);
uint8_t *dl_record_sign(const struct dl_record *r, const char *run_id, const struct dl_identity *id,
                        size_t *size);
int dl_record_verify(const uint8_t *blob, size_t size, const char *run_id, struct dl_record *r);

struct dl_swarm_entry {
    struct dl_record rec;
    uint8_t *blob;                /* as signed by the owner, forwarded verbatim */
    size_t blob_size;
    double updated_at;            /* local monotonic time of the last newer record */
};

struct dl_swarm {
    struct dl_swarm_entry *entries;
    size_t count, cap, max_entries;
};

void dl_swarm_init(struct dl_swarm *sw, size_t max_entries);
void dl_swarm_free(struct dl_swarm *sw);
/* Merges a verified record (the blob is copied). Returns 1 if it was newer
 * than what we had, 0 if stale or a duplicate, -1 when the table is full. */
int dl_swarm_apply(struct dl_swarm *sw, const struct dl_record *rec, const uint8_t *blob,
                   size_t blob_size, double now);
struct dl_swarm_entry *dl_swarm_find(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK]);
/* Drops records not refreshed within expiry_s, except keep_pk (our own). */
size_t dl_swarm_expire(struct dl_swarm *sw, double now, double expiry_s, const uint8_t *keep_pk);

/* Computes the view at wall time now_wall: the global numbers and one peer
 * entry per alive (non-goodbye) record, sorted by peer id. */
int dl_swarm_compute(const struct dl_swarm *sw, double now_wall, double target_batch,
                     const uint8_t *self_pk, struct dl_swarm_view *view);

/* The adaptive publish period: about the time to the next epoch, shortened
 * when peers may join, within [min_s, max_s]. */
double dl_swarm_refresh_period(double eta_s, size_t num_peers, double min_s, double max_s);

#endif
