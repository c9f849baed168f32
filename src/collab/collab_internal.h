/* State of the averaging service and of one round (private to src/collab).
 *
 * Threads: net's handlers and response callbacks run on the network thread;
 * they only copy what arrived into the service's inbox (under lock) and wake
 * the round thread, the caller of dl_collab_average, which does everything
 * else: decoding, reducing, encoding, signing, deciding. */
#ifndef DEDLOC_COLLAB_INTERNAL_H
#define DEDLOC_COLLAB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "collab/group.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

/* Message headers (docs/protocol.md, "Averaging messages"). */
#define DL_AVG_REF_HEADER 24      /* round_id[16] part u16 pad u16 chunk u32 */
#define DL_AVG_CHUNK_HEADER 32    /* ref header + the sender's weight f64 */
#define DL_AVG_RESULT_SIGNED 68   /* ref header with gen/reducer + mask[32] + total weight f64 */
#define DL_AVG_RESULT_HEADER (DL_AVG_RESULT_SIGNED + DL_NET_SIGNATURE)
#define DL_AVG_JOIN_SIZE 72
/* Chunk requests in flight per (sender, aggregator) and result requests per
 * (aggregator, receiver); reduced chunks not yet sent to everyone. */
#define DL_AVG_SEND_WINDOW 4
#define DL_AVG_RESULT_WINDOW 4
#define DL_AVG_REDUCE_AHEAD 4
/* Seconds after the group forms during which "not connected" means "not yet". */
#define DL_AVG_CONNECT_GRACE_S 3.0

enum dl_avg_event_kind {
    EV_JOIN, EV_CHUNK, EV_RESULT, EV_FETCH, EV_REREDUCE, EV_CONTRIB, EV_ALIVE, /* incoming requests */
    EV_JOIN_REPLY, EV_CHUNK_ACK, EV_RESULT_ACK, EV_FETCH_REPLY, EV_REREDUCE_REPLY, EV_CONTRIB_REPLY,
    EV_PING_REPLY,
};

struct dl_avg_event {
    int kind;
    uint64_t token;               /* incoming: for dl_net_respond */
    char peer_id[DL_PEER_ID_HEX]; /* who sent it / whom we asked */
    int status;                   /* replies: dl_net_status */
    uint64_t serial;              /* replies: the round that asked */
    uint32_t part, chunk, member; /* replies: what was asked */
    uint8_t *data;
    size_t size;
    struct dl_avg_event *next;
};

enum dl_misbehaviour {
    DL_MISBEHAVE_NONE = 0, DL_MISBEHAVE_NAN, DL_MISBEHAVE_WRONG_SIZE, DL_MISBEHAVE_WRONG_PART,
    DL_MISBEHAVE_GARBAGE, DL_MISBEHAVE_WEIGHT_NAN, DL_MISBEHAVE_WEIGHT_NEGATIVE, DL_MISBEHAVE_WEIGHT_HUGE,
};

struct dl_ban_entry {
    char peer_id[DL_PEER_ID_HEX];
    double until;
};

/* A peer found unreachable while its record was still in the view: gone
 * until a record of it newer than record_time arrives. */
struct dl_suspect_entry {
    char peer_id[DL_PEER_ID_HEX];
    double record_time;
};

struct dl_round;

/* Consecutive centered-clip rounds in which this peer, as an aggregator,
 * clipped a member's contribution. */
struct dl_clip_streak {
    char peer_id[DL_PEER_ID_HEX];
    uint32_t rounds;
};

struct dl_collab {
    dl_net *net;
    bool poke;                    /* lock: a handoff changed; wake the round thread */
    struct dl_collab_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct dl_avg_event *inbox, *inbox_tail;
    struct dl_round *cur;         /* lock: the round running now */
    struct dl_round *last;        /* lock: the finished round, kept to serve relays */
    uint64_t next_serial;
    struct dl_ban_entry bans[64];
    size_t num_bans;
    struct dl_suspect_entry suspects[DL_AVG_MAX_MEMBERS]; /* lock */
    size_t num_suspects;
    struct dl_clip_streak streaks[DL_AVG_MAX_MEMBERS]; /* round thread only */
    size_t num_streaks;
    double spread_ema;            /* arrival spread of past matchmakings (s) */
    double measured_mbit;         /* upload rate of past rounds */
    int misbehaviour;             /* tests only: enum dl_misbehaviour */
    uint64_t rounds_done, last_epoch; /* lock */
};

/* One chunk slot at the aggregator: contributions as they arrived. */
struct dl_agg_chunk {
    uint8_t **contrib;            /* per member, encoded bytes (NULL: not yet) */
    uint64_t *ack_token;          /* per member, the delayed answer to its chunk request */
    bool reduced;
};

struct dl_send_part {
    uint32_t total, next, inflight, acked;
    uint32_t *resend;             /* chunks answered "unknown round": send again */
    uint32_t num_resend;
    double resend_at;
    bool done_or_failed;
};

struct dl_result_out {
    uint32_t next, inflight;
    double retry_at;
};

enum { REC_IDLE = 0, REC_FETCHING, REC_REREDUCE_WAIT };

struct dl_recovery {              /* per chunk this member lacks from a failed aggregator */
    int state;
    uint32_t outstanding, got_negative;
    double retry_at;
};

enum { RR_IDLE = 0, RR_PINGING, RR_GATHERING };

struct dl_rereduce {              /* per chunk this member re-reduces for others */
    int state;
    uint64_t *waiters;            /* tokens of requests to answer */
    size_t num_waiters;
    uint8_t **contrib;            /* per member */
    uint32_t outstanding, pings;
    double started;
    bool local_need;
};

struct dl_round {
    struct dl_collab *c;
    uint64_t serial;
    bool has_group;
    struct dl_group g;
    size_t me;
    const float *input;
    size_t n;
    /* The vector and its weight (the samples behind it, in every chunk
     * header). With a handoff (matchmaking ahead of the vector) neither is
     * known until the caller hands them over: nothing of ours is sent,
     * reduced or given away before input_ready. */
    double weight;
    bool input_ready;
    struct dl_avg_handoff *handoff;
    double deadline_s, handed_at;
    double start, group_time, deadline, stall_s, agg_timeout, last_loop;
    _Atomic double heartbeat;     /* last_loop, for the network thread's avg.alive */
    bool i_send, i_receive, i_aggregate;
    /* geometry: global chunk index of part p's first chunk; chunk count */
    size_t *first_chunk;
    size_t num_chunks;
    /* results, signed messages as they travel: every member's store */
    uint8_t **store;
    size_t *store_size;
    size_t have, need;
    /* sending our vector */
    struct dl_send_part *send;
    /* aggregating our part */
    struct dl_agg_chunk *agg;
    uint32_t agg_chunks, next_reduce, oldest_unsent;
    bool *dropped;                /* senders left out of our part */
    double *last_from;            /* last chunk from each sender */
    struct dl_result_out *out;
    /* what we think of the others */
    bool *failed;
    double *last_heard;
    bool *heard;                  /* it answered us at least once this round */
    /* centered clip, in chunks this member reduced: whose contribution was
     * in one, whose was clipped in one */
    bool *reduced_from, *clipped;
    struct dl_recovery *rec;      /* per global chunk */
    struct dl_rereduce *rr;       /* per global chunk */
    /* outcome */
    enum dl_avg_status status;
    char reason[256];
    uint64_t bytes_sent, bytes_received;
    double reduce_s;
    uint64_t reduced_elems;
    uint8_t *group_record;        /* leader: the signed record, for a member that asks again */
    size_t group_record_size;
    float *tmp;                   /* one chunk, decoded */
    double *acc;                  /* one chunk, the weighted sum */
};

/* service.c */
void dl_collab_push(struct dl_collab *c, struct dl_avg_event *ev);
bool dl_collab_is_banned(struct dl_collab *c, const char *peer_id);
void dl_collab_ban(struct dl_collab *c, const char *peer_id, const char *why);
/* Refuses peer_id for the rest of the run (until dl_collab_stop). */
void dl_collab_ban_for_run(struct dl_collab *c, const char *peer_id, const char *why);
/* clip_streak.c: after a centered-clip round, counts each member this peer
 * clipped (or not) as an aggregator; warns and bans past the thresholds. */
void dl_collab_count_clipped(struct dl_collab *c, const struct dl_round *r);
/* Sends a request whose answer comes back as an event of `kind` for round r. */
int dl_round_request(struct dl_round *r, const char *peer_id, const char *method, const void *payload,
                     size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member);
void dl_round_respond(struct dl_round *r, uint64_t token, int status, const void *payload, size_t size);
void dl_round_respond_text(struct dl_round *r, uint64_t token, const char *text);
void dl_avg_event_free(struct dl_avg_event *ev);
/* Serves fetch/rereduce from a finished round's store (network thread, lock held). */
void dl_round_serve_finished(struct dl_collab *c, struct dl_round *r, int kind, const struct dl_net_incoming *in);

/* matchmaking.c: forms the group (fills r->g, r->me); 0 or -1 with r->status set. */
int dl_matchmake(struct dl_round *r, const struct dl_avg_options *opt);
/* Takes queued events (waits until one arrives or `until`). */
struct dl_avg_event *dl_round_wait_events(struct dl_round *r, double until);

/* allreduce.c */
int dl_round_run(struct dl_round *r);
void dl_round_free(struct dl_round *r);
int dl_round_fail(struct dl_round *r, enum dl_avg_status status, const char *fmt, ...) DL_PRINTF(3, 4);
/* chunk geometry */
void dl_round_chunk_range(const struct dl_round *r, size_t part, size_t k, uint64_t *offset, uint64_t *length);
/* Reduces one chunk from the given per-member encoded contributions (NULL =
 * absent) in member order; stores the signed result. 0, or -1 (no contributor). */
int dl_round_reduce(struct dl_round *r, size_t part, size_t k, uint8_t generation, uint8_t **contrib, bool *bad);
/* Whether a chunk header's weight can be taken: finite, >= 0, at most
 * DL_AVG_MAX_WEIGHT. */
bool dl_round_weight_ok(double weight);
/* Validates and stores a signed result message; 1 stored, 0 duplicate, -1 bad. */
int dl_round_accept_result(struct dl_round *r, const uint8_t *msg, size_t size, bool from_reducer,
                           const char *sender);
/* Our own chunk of part p, encoded with our weight in its header
 * (misbehaviour applied). malloc'd; NULL before our vector is handed over. */
uint8_t *dl_round_encode_own(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size);
size_t dl_round_chunks_of(const struct dl_round *r, size_t part);
/* Global chunk index from a message's reference header; -1 when out of range. */
long dl_round_ref_chunk(const struct dl_round *r, const uint8_t *msg, size_t size, size_t *part, size_t *k);
void dl_round_write_ref(uint8_t *out, const struct dl_round *r, size_t part, size_t k);
void dl_round_mark_failed(struct dl_round *r, size_t member, const char *why);
void dl_round_progress(struct dl_round *r);

/* recovery.c */
void dl_recovery_on_event(struct dl_round *r, struct dl_avg_event *ev);
void dl_recovery_pump(struct dl_round *r, double now);
/* The one member that may re-reduce chunks of `part`: the first trainer
 * after it in member order. -1 when there is none. */
long dl_round_rereducer(const struct dl_round *r, size_t part);

#endif
