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
    uint8_t token[DL_TOKEN_MAX_BYTES]; /* the owner's admission token (closed runs), signed with it */
    size_t token_size;            /* 0: none */
    /* Not on the wire: the role our admission found in the owner's token
     * (DL_ROLE_NONE in an open run, and for our own record). A monitor-role
     * owner watches; its record counts for nothing (dl_swarm_compute). */
    enum dl_role role;
};

/* What a record may claim (docs/protocol.md, "Signed records"): a device
 * does not accumulate more than DL_SWARM_MAX_SPS samples per second (the
 * view counts no more), and an owner's clock is within the skew of ours
 * (DL_SWARM_MAX_SKEW_S, or the expiry when that is shorter). */
#define DL_SWARM_MAX_SPS 1e4
#define DL_SWARM_MAX_SKEW_S 30.0
/* Records one owner may have accepted per second (and in a burst): a peer
 * publishes at most every min_refresh_s plus once per epoch step. */
#define DL_SWARM_OWNER_RATE 10.0
#define DL_SWARM_OWNER_BURST 30.0
#define DL_SWARM_TOMBSTONES 4096

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
/* The two halves of dl_record_verify: dl_record_parse decodes and checks the
 * fields (cheap: no signature), dl_record_check_signature then checks the
 * owner's signature. A receiver asks its table in between whether the record
 * is news at all, so duplicates cost no verification. */
int dl_record_parse(const uint8_t *blob, size_t size, const char *run_id, struct dl_record *r);
int dl_record_check_signature(const uint8_t *blob, size_t size, const struct dl_record *r);

struct dl_swarm_entry {
    struct dl_record rec;
    uint8_t *blob;                /* as signed by the owner, forwarded verbatim */
    size_t blob_size;
    double updated_at;            /* local monotonic time of the last newer record */
    double epoch_since;           /* owner's time of its first record at this epoch that we saw */
    double rate_tokens, rate_last; /* records accepted from this owner (DL_SWARM_OWNER_RATE) */
};

/* The last seq of an owner whose record expired or said goodbye, kept
 * longer than a record may live, so its old records cannot be replayed. */
struct dl_swarm_tombstone {
    uint8_t pk[DL_WIRE_PK];
    uint64_t seq;
    double until;                 /* local monotonic time */
};

struct dl_swarm {
    struct dl_swarm_entry *entries;
    size_t count, cap, max_entries;
    struct dl_swarm_tombstone *tombs; /* DL_SWARM_TOMBSTONES slots, allocated on first use */
    size_t num_tombs;
    /* Our state at vouched_epoch came from a round we verified
     * (dl_net_vouch_epoch): while our record is there with a hash (or
     * still at the epoch before, as it is until the network thread
     * publishes our step), we are one of the voters of the global epoch. */
    bool vouched;
    uint64_t vouched_epoch;
};

void dl_swarm_init(struct dl_swarm *sw, size_t max_entries);
void dl_swarm_free(struct dl_swarm *sw);
/* Merges a verified record (the blob is copied). Returns 1 if it was newer
 * than what we had, 0 if stale or a duplicate, -1 when the table is full. */
int dl_swarm_apply(struct dl_swarm *sw, const struct dl_record *rec, const uint8_t *blob,
                   size_t blob_size, double now);
struct dl_swarm_entry *dl_swarm_find(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK]);
/* Drops records not refreshed within expiry_s, except keep_pk (our own);
 * each leaves a tombstone for 2 (expiry_s + skew). */
size_t dl_swarm_expire(struct dl_swarm *sw, double now, double expiry_s, const uint8_t *keep_pk);

/* The allowed clock difference for a given expiry. */
double dl_swarm_skew(double expiry_s);
enum { DL_SWARM_NEWS = 0, DL_SWARM_OLD = 1, DL_SWARM_TOO_FAST = 2, DL_SWARM_IMPLAUSIBLE = -1 };
/* Whether a parsed, not yet verified record is worth verifying, checked
 * before its signature: DL_SWARM_NEWS when it is; DL_SWARM_OLD for a
 * duplicate, a stale seq or one under a tombstone; DL_SWARM_TOO_FAST when
 * its owner has used up its rate (DL_SWARM_OWNER_*); DL_SWARM_IMPLAUSIBLE
 * (the error says why) for a time outside [now_wall - expiry - skew,
 * now_wall + skew]. */
int dl_swarm_precheck(struct dl_swarm *sw, const struct dl_record *r, double now, double now_wall, double expiry_s);
/* Counts one accepted record against its owner's rate. Called only once its
 * signature checked out, so forgeries in an owner's name cannot use up its
 * allowance. */
void dl_swarm_charge(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK], double now);

/* Computes the view at wall time now_wall: the global numbers and one peer
 * entry per alive (non-goodbye) record of a peer that may train, sorted by
 * peer id. Records of monitor-role owners are counted in num_observers and
 * nowhere else: not in the epoch, the samples, the rate or the peers, so
 * nothing that reads the view (the step loop's epoch and reference hash,
 * matchmaking's leaders, the donors) can follow them. */
int dl_swarm_compute(const struct dl_swarm *sw, double now_wall, double target_batch,
                     const uint8_t *self_pk, struct dl_swarm_view *view);

/* The adaptive publish period: about the time to the next epoch, shortened
 * when peers may join, within [min_s, max_s]. */
double dl_swarm_refresh_period(double eta_s, size_t num_peers, double min_s, double max_s);

#endif
