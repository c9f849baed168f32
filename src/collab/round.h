/* One averaging round of one group (private to src/collab).
 *
 * The round is three files, each calling only the ones below it:
 *   allreduce.c  the loop: sending our vector, aggregating our part,
 *                sending results, dl_round_run and its steps
 *   recovery.c   replacing an aggregator that failed mid-round
 *   round.c      the round's state: chunk geometry, failure marking,
 *                reduction, signed results, and the calls into the
 *                transport and the bans
 * Everything it sends or receives goes through its transport (inbox.h);
 * whom it refuses goes to its ban table (bans.h). It knows nothing of the
 * service that forms its group and owns it, so a test can drive it alone:
 * dl_round_begin, then dl_round_handle and dl_round_advance as events come,
 * then dl_round_end. */
#ifndef DEDLOC_COLLAB_ROUND_H
#define DEDLOC_COLLAB_ROUND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "collab/bans.h"
#include "collab/group.h"
#include "collab/inbox.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

/* Message headers (docs/protocol.md, "Averaging messages"). */
#define DL_AVG_REF_HEADER 24      /* round_id[16] part u16 pad u16 chunk u32 */
#define DL_AVG_CHUNK_HEADER 32    /* ref header + the sender's weight f64 */
#define DL_AVG_RESULT_SIGNED 68   /* ref header with gen/reducer + mask[32] + total weight f64 */
#define DL_AVG_RESULT_HEADER (DL_AVG_RESULT_SIGNED + DL_NET_SIGNATURE)
#define DL_AVG_JOIN_SIZE 72
/* Accountable aggregation (audit_round.c, docs/protocol.md): a chunk ends
 * with its sender's signature over its header and BLAKE2b-256 of its data; a
 * result's data is followed by its commitments: e2 f64, delta f64, the
 * reducer's nonce commitment[32], then per contributor (mask order) the
 * BLAKE2b-256 of its chunk's data and its clip weight f64. */
#define DL_AVG_CHUNK_SIG DL_NET_SIGNATURE
#define DL_AVG_COMMIT_HEAD 48
#define DL_AVG_COMMIT_NONCE 16    /* offset of the nonce commitment in the commitments */
#define DL_AVG_COMMIT_ENTRY 40
/* Centered clip: reweighted-mean steps after the iterations, at most. */
#define DL_AUDIT_REWEIGHT_STEPS 200
/* avg.audit messages: type byte at offset 18 (after round_id and part). */
#define DL_AUDIT_PROJECTIONS 1
#define DL_AUDIT_ATTESTATION 2
#define DL_AUDIT_REVEAL 3
#define DL_AUDIT_REVEAL_SIZE 56   /* round_id part(= sender) u16 type pad u32 pad nonce[32] */
#define DL_AUDIT_REREDUCED 5       /* a re-reducer's record of one contribution to a generation-1 chunk */
#define DL_AUDIT_REREDUCED_HEAD 32 /* round_id part u16 type pad chunk u32 sender u16 kind u8 pad[5] */
#define DL_AUDIT_PROJ1 6           /* a sender's signed projection of one generation-1 chunk, to its re-reducer */
#define DL_AUDIT_PROJ1_SIZE 168    /* round_id part type pad chunk u32 sender u16 pad[6] seed[32] weight s a d r sig */
#define DL_AUDIT_ROSTER 4
#define DL_AUDIT_DISCLOSE 8        /* a member asks a sender for its signed chunk of a failed aggregator's part */
#define DL_AUDIT_DISCLOSE_SIZE 24  /* round_id part u16 type pad chunk u32 */
#define DL_AUDIT_DISCLOSE_KEPT 10  /* a spot checker asks an aggregator for a sender's signed chunk it kept */
#define DL_AUDIT_DISCLOSE_KEPT_SIZE 28 /* round_id part u16 type pad chunk u32 sender u16 pad u16 */
#define DL_AUDIT_VERDICT 9         /* a spot check's outcome (3d), to every member that receives */
#define DL_AUDIT_VERDICT_HEAD 32   /* round_id part u16 type outcome u8 chunk u32 member u16 blocks u16 pad[4] */
/* Spot-check outcomes: the claim drawn agreed with its chunk; it did not
 * (the sender's signed projections of the part and its signed chunk
 * follow the head: evidence anyone can check); the sender did not
 * disclose its chunk; nothing to check. */
enum { DL_SPOT_OK = 0, DL_SPOT_LIE = 1, DL_SPOT_SILENT = 2, DL_SPOT_NONE = 3 };
#define DL_AUDIT_BUNDLE 7          /* a sender's signed projections of every part, to one member */
#define DL_AUDIT_BUNDLE_HEAD 24    /* round_id sender u16 type pad count u16 pad u16, then count type-1 messages */
#define DL_AUDIT_ROSTER_HEAD 24   /* round_id part(= sender) u16 type pad count u32 */
#define DL_AUDIT_ROSTER_ENTRY (DL_AVG_RESULT_SIGNED + 32 + DL_NET_SIGNATURE) /* what a result's signature covers, and it */
#define DL_AUDIT_PROJ_HEAD 64     /* round_id part type pad sender u16 pad u16 seed[32] weight f64 */
#define DL_AUDIT_ATTEST_HEAD 24   /* round_id part type pad count u16 accusations u16 pad u32 */
#define DL_AUDIT_ACCUSE_HEAD 8    /* chunk u32 sender u16 pad u16, then the sender's signed chunk */
/* Chunk requests in flight per (sender, aggregator) and result requests per
 * (aggregator, receiver); reduced chunks not yet sent to everyone. */
#define DL_AVG_SEND_WINDOW 4
/* Chunks held during matchmaking: an honest sender has at most its window
 * in flight to us; in all, a bound on what a crowd of peers can park. */
#define DL_AVG_EARLY_MAX 256
#define DL_AVG_EARLY_MAX_BYTES ((size_t)256 << 20)
#define DL_AVG_RESULT_WINDOW 4
#define DL_AVG_REDUCE_AHEAD 4
/* Seconds after the group forms during which "not connected" means "not yet". */
#define DL_AVG_CONNECT_GRACE_S 3.0

enum dl_misbehaviour {
    DL_MISBEHAVE_NONE = 0, DL_MISBEHAVE_NAN, DL_MISBEHAVE_WRONG_SIZE, DL_MISBEHAVE_WRONG_PART,
    DL_MISBEHAVE_GARBAGE, DL_MISBEHAVE_WEIGHT_NAN, DL_MISBEHAVE_WEIGHT_NEGATIVE, DL_MISBEHAVE_WEIGHT_HUGE,
    /* test-hook builds only: */
    DL_MISBEHAVE_HUGE_VALUES, /* chunks of finite values near FLT_MAX (3e38), past the codec */
    DL_MISBEHAVE_DICTATE,     /* as a leader, writes other settings than the run's into the group record */
    DL_MISBEHAVE_STALL_LEADER, /* leading its first round, and every round after: takes joins, never answers */
    /* test-hook builds only: an aggregator whose results are -1000 times the
     * average; a sender whose published projections are not its chunks' */
    DL_MISBEHAVE_RESULT_SCALE, DL_MISBEHAVE_PROJECTION_LIE,
    /* test-hook builds only: an aggregator that signs its last result after
     * holding every other, and grinds it (swapped elements) until the
     * directions it can foresee hide the swap */
    DL_MISBEHAVE_GRIND,
    /* test-hook builds only: an aggregator that sends its true results to
     * the members of even index and signed wrong ones to the others */
    DL_MISBEHAVE_TWO_FACED,
    /* test-hook builds only: a re-reducer whose generation-1 results are
     * -1000 times the average */
    DL_MISBEHAVE_REREDUCE_SCALE,
    /* test-hook builds only, honest: a joining member that takes the group
     * record 1 s after it arrives, while the others' chunks come in */
    DL_MISBEHAVE_SLOW_RECORD,
    /* test-hook builds only: a member that skips the audit phase (neither
     * checks nor answers), to measure the audit's cost when every member of
     * the round does so (bench allreduce --no-audit) */
    DL_MISBEHAVE_SKIP_AUDIT,
    /* test-hook builds only, honest in every other way: an aggregator that
     * never sends its attestation (members check its part from the senders'
     * projections alone, the fast check) */
    DL_MISBEHAVE_NO_ATTESTATION,
    /* test-hook builds only, honest: a member that never uses the fast
     * check and waits for every attestation, to measure what the fast
     * check saves (bench allreduce --attest-only) */
    DL_MISBEHAVE_ATTEST_ONLY,
    /* test-hook builds only: an aggregator whose results are -1000 times
     * the average and whose signed measures of its own chunk of its part
     * (which no one else holds) claim an L1 norm of 1e300, which would widen
     * the equation's rounding tolerance past any lie, and a distance of 0
     * to the result (under centered clip, with the clip weights the scaled
     * result gives the others: only the equation could tell) */
    DL_MISBEHAVE_OWN_CLAIM,
    /* test-hook builds only, under centered clip: an aggregator that keeps
     * its own contribution in its part (dl_round_reducer_sits_out says it
     * may not), signs v / 2 + R (v the average, R orthogonal to it, |R| =
     * |v| / 2: a lie the alignment check cannot see) with the clip weights
     * that gives the others, and after the seed signs measures of its own
     * chunk that are possible (dl_audit_claim_possible) and make the
     * equation and the alignment hold: the own-claim gap the rule above
     * closes */
    DL_MISBEHAVE_OWN_PULL,
    /* test-hook builds only: an aggregator whose results are -1000 times
     * the average, that sends the first of them to every member and then
     * goes silent for the rest of the round (no result, nonce, projection
     * or attestation): members count it as failed, recovery re-reduces the
     * rest of its part, and the one wrong result it delivered has no
     * attestation to be checked against */
    DL_MISBEHAVE_SCALE_THEN_SILENT,
    /* test-hook builds only: the same silence after honest results (a peer
     * that hangs mid-round): what it delivered is checked and applied */
    DL_MISBEHAVE_THEN_SILENT,
    /* test-hook builds only: a sender whose published projections lie
     * about part 1 alone (test_collab_round_memory's failing aggregator's
     * part), so that only a check of that part can catch it */
    DL_MISBEHAVE_PROJECTION_LIE_PART1,
    /* test-hook builds only, a colluding pair under centered clip: an
     * aggregator whose results are v / 2 + R (as DL_MISBEHAVE_OWN_PULL's),
     * with the clip weights that gives its senders, and that never accuses its
     * accomplice; and the accomplice, a sender whose signed projections of
     * that aggregator's part (`accomplice` in the round) are the measures
     * that make each chunk's equation hold (possible claims, its true
     * distance: only a look at its chunk shows them false). The gap that
     * spot disclosure (3d) closes. */
    DL_MISBEHAVE_COLLUDE, DL_MISBEHAVE_COLLUDE_SEND,
    /* test-hook builds only: the same accomplice, refusing to disclose */
    DL_MISBEHAVE_COLLUDE_SILENT,
    /* test-hook builds only: the same accomplice, two-faced: its true
     * projections of that part to the part's two checkers (which the seed
     * names before projections are sent), the covering ones to everyone
     * else */
    DL_MISBEHAVE_COLLUDE_TWO_FACED,
    /* test-hook builds only: a sender that covers for any aggregator whose
     * result is wrong, over real connections: it holds its projections
     * back until the other senders' have come, then signs for each chunk
     * whose equation fails the projection that makes it hold (at its true
     * distance). With DL_MISBEHAVE_COLLUDE as the aggregator: the colluding
     * pair of collab/round_audit_colluding_pair_clip. */
    DL_MISBEHAVE_COVER,
    /* test-hook builds only, honest: a member that runs no spot checks and
     * waits for none (bench allreduce --no-spot, every member alike) */
    DL_MISBEHAVE_SKIP_SPOT,
    /* test-hook builds only: a sender whose signed projections of the
     * others' parts claim the smallest L1 norm their projection allows
     * (a = |s|), which pulls the mean's norm bound below an honest result
     * where the chunks share a sign: its aggregators' attestations must
     * convict it, not the other way round */
    DL_MISBEHAVE_NORM_LIE,
    /* as an aggregator, signs the negated average: a lie that keeps the
     * result's norm, which the norm bound cannot see and one projection lets
     * through about one chunk in two with uint8 or int8; the alignment check
     * (q.(q - v), collab/audit.h) refuses it */
    DL_MISBEHAVE_RESULT_FLIP,
};

/* One chunk slot at the aggregator: contributions as they arrived. */
struct dl_agg_chunk {
    uint8_t **contrib;            /* per member, encoded bytes (NULL: not yet) */
    uint64_t *ack_token;          /* per member, the delayed answer to its chunk request */
    uint8_t (*hash)[32];          /* per member, BLAKE2b-256 of its chunk's data (checked signature) */
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
    /* What the round runs on, set by its owner before it starts. */
    struct dl_round_transport tp;
    struct dl_bans *bans;         /* whom a misbehaving member goes to */
    pthread_mutex_t *lock;        /* the owner's lock: guards *handoff and has_group */
    struct dl_round *accomplice;  /* tests only (DL_MISBEHAVE_COLLUDE_SEND): the colluding aggregator's round */
    uint64_t serial;
    int misbehaviour;             /* tests only: enum dl_misbehaviour */
    bool has_group;
    bool cover_wait;              /* tests only (DL_MISBEHAVE_COVER): our projections held back */
    /* Chunks that reached us during matchmaking, before we knew the group
     * they belong to (a member can learn the group record before we do):
     * held, newest first, and taken or refused once the group is known
     * (dl_round_hold_early). Without them the sender would send each such
     * chunk twice. */
    struct dl_avg_event *early;
    size_t early_count, early_bytes;
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
    /* Times on the transport's clock. */
    double start, group_time, deadline, stall_s, agg_timeout, last_loop;
    _Atomic double heartbeat;     /* last_loop, for the network thread's avg.alive */
    bool i_send, i_receive, i_aggregate;
    bool audit_started, attest_sent, audit_done; /* accountable aggregation (below) */
    bool rosters_checked, rr_sent;                /* rosters compared, our re-reductions attested */
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
    uint64_t bytes_sent, bytes_received, bytes_resent;
    double reduce_s;
    uint64_t reduced_elems;
    uint8_t *group_record;        /* leader: the signed record, for a member that asks again */
    size_t group_record_size;
    float *tmp;                   /* one chunk, decoded */
    double *acc;                  /* one chunk, the weighted sum */
    /* accountable aggregation (audit_round.c) */
    uint8_t **kept;               /* aggregator: per (chunk k, member j) at k n + j, j's signed chunk */
    double audit_start;
    uint8_t audit_seed[32];
    uint8_t **proj_in;            /* aggregator: per member, its signed projections of our part */
    size_t *proj_in_size;
    /* The fast check: per (part p, member j) at p n + j, j's signed
     * projections of p as j sent them to us (ours too); per part, whether
     * it was tried (once they were all in). */
    uint8_t **fast_proj;
    bool *fast_tried;
    /* Disclosure (docs/protocol.md, accountable aggregation, 3c): per part,
     * the first chunk whose equation failed the fast check (SIZE_MAX: none)
     * and when we asked its contributors for their signed chunks; per
     * (part p, member j) at p n + j, j's answer and whether it came (or
     * failed); per (member j, part p) at j n + p, whether we answered j. */
    size_t *fast_failed_k;
    double *disclose_at;
    uint8_t **disclosed;
    size_t *disclosed_size;
    bool *disclose_done;
    uint32_t *disclose_k;         /* per (part, sender) slot: the chunk asked for + 1 (other replies are stale) */
    uint32_t *disclosed_to;       /* per asker and part: the chunks (k + 1) we disclosed (DL_AUDIT_DISCLOSURES) */
    /* Spot disclosure (3d): per part p we check, the claim drawn (chunk,
     * member) and how far we are (0 not yet, 1 asked, 2 verdict sent), when
     * we asked; per (part p, checker m) at p n + m, m's verdict and whether
     * we took it (0 not yet, 1 asked its sender ourselves, 2 done); when our
     * own checks and verdicts were done (0: not yet). A checker asks the
     * part's aggregator first (state 1), the sender when that fails (3). */
    size_t *spot_k, *spot_j;
    uint8_t **spot_chunk;         /* per part we check: the drawn chunk as its aggregator or sender sent it */
    size_t *spot_chunk_size;
    bool *spot_chunk_done;        /* its answer (or failure) came, or the request could not be sent */
    uint8_t *spot_state;
    double *spot_asked_at;
    uint8_t *spot_escalation;     /* per part: a sender of it convicted, its chunk's contributors asked (1), judged (2) */
    uint8_t **verdict_in;
    size_t *verdict_in_size;
    uint8_t *verdict_state;
    double *verdict_asked_at;
    uint8_t **verdict_chunk;      /* per (part, checker): the drawn sender's chunk when we asked it ourselves */
    size_t *verdict_chunk_size;
    bool *verdict_chunk_done;
    double spot_done_at;
    /* Per global chunk, its result's measures under our seed (s, l1, l2,
     * lowest, highest), once a pass over that result made them (the pass
     * of our own projections makes them on the way). */
    double (*res_meas)[5];
    bool *res_meas_valid;
    struct dl_audit_scratch *audit_scratch; /* one chunk's decode and direction room, made once a round */
    uint8_t **attest_in;          /* per part, its aggregator's signed attestation */
    size_t *attest_in_size;
    bool *attest_checked;
    bool *accused;                /* members banned on this round's evidence */
    /* The seed's nonces: ours (audit_nonce, below: committed in every
     * result we sign, revealed once we hold every result), the others' as
     * revealed to us; when we drew the seed (0: not yet). */
    uint8_t (*reveal_in)[32];     /* per member */
    bool *reveal_got;
    double seed_at;
    /* Rosters: every receiver tells every other what each result it holds
     * is signed over, so that two results its reducer signed differently
     * meet at every honest member (evidence of a two-faced reducer). */
    uint8_t (*store_hash)[32];    /* per global chunk: BLAKE2b-256 its signature covers */
    uint8_t **roster_in;          /* per member, its roster */
    size_t *roster_in_size;
    bool *audit_gone;             /* per member: an audit message to it found no connection (not waited for) */
    /* Generation-1 results: per (global chunk, member) at gi n + j, the
     * re-reducer's signed record of j's contribution; per global chunk,
     * whether we checked it. */
    uint8_t **rr_attest_in;
    size_t *rr_attest_in_size;
    bool *rr_checked;
    uint8_t **proj1_in;           /* re-reducer: per (global chunk, member), its signed generation-1 projection */
    uint32_t audit_chunks;        /* chunks whose equation we checked and found right */
    enum dl_avg_status audit_status;
    char audit_reason[256];       /* why the round is not applied, once every part is checked */
    uint8_t audit_nonce[32];
};

/* ---- round.c: the round's state -------------------------------------------------- */

/* A round with nothing set but its transport and ban table (calloc'd; NULL
 * when out of memory). The owner fills in the rest: the vector and its
 * weight, times, and (before dl_round_begin) the group and our index. */
struct dl_round *dl_round_new(const struct dl_round_transport *tp, struct dl_bans *bans);
void dl_round_free(struct dl_round *r);
int dl_round_fail(struct dl_round *r, enum dl_avg_status status, const char *fmt, ...) DL_PRINTF(3, 4);
double dl_round_now(const struct dl_round *r);
/* Sends a request whose answer comes back as an event of `kind` for round r. */
int dl_round_request(struct dl_round *r, const char *peer_id, const char *method, const void *payload,
                     size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member);
void dl_round_respond(struct dl_round *r, uint64_t token, int status, const void *payload, size_t size);
void dl_round_respond_text(struct dl_round *r, uint64_t token, const char *text);
/* Takes queued events (waits until one arrives or `until`). */
struct dl_avg_event *dl_round_wait_events(struct dl_round *r, double until);
/* Refuses a member that misbehaved (the round's ban table). */
void dl_round_ban(struct dl_round *r, const char *peer_id, const char *why);
/* Refuses peer_id for the rest of the run (a liar caught on signed evidence). */
void dl_round_ban_for_run(struct dl_round *r, const char *peer_id, const char *why);
/* chunk geometry */
size_t dl_round_chunks_of(const struct dl_round *r, size_t part);
void dl_round_chunk_range(const struct dl_round *r, size_t part, size_t k, uint64_t *offset, uint64_t *length);
/* Global chunk index from a message's reference header; -1 when out of range. */
long dl_round_ref_chunk(const struct dl_round *r, const uint8_t *msg, size_t size, size_t *part, size_t *k);
void dl_round_write_ref(uint8_t *out, const struct dl_round *r, size_t part, size_t k);
/* The one member that may re-reduce chunks of `part`: the first trainer
 * after it in member order. -1 when there is none. */
long dl_round_rereducer(const struct dl_round *r, size_t part);
void dl_round_mark_failed(struct dl_round *r, size_t member, const char *why);
/* Whether a chunk header's weight can be taken: finite, >= 0, at most
 * DL_AVG_MAX_WEIGHT. */
bool dl_round_weight_ok(double weight);
/* Whether a reducer leaves its own contribution out of the chunks it
 * reduces: under centered clip, once the group has three members or more
 * that send gradients. Its own chunk is the one contribution no one else
 * holds, so its signed claims about it can be checked by no one, and
 * under centered clip one such claim can hold a result anywhere against
 * up to about nine honest contributors (docs/protocol.md, "Accountable
 * aggregation"). With fewer senders there is no honest majority to
 * protect and every gradient counts. */
bool dl_round_reducer_sits_out(const struct dl_group *g);
/* Whether this reducer counts its own contribution: as the rule above
 * says, or (test hooks) as a liar that breaks it. */
bool dl_round_counts_itself(const struct dl_round *r);
/* Our own chunk of part p, encoded with our weight in its header
 * (misbehaviour applied). malloc'd; NULL before our vector is handed over. */
uint8_t *dl_round_encode_own(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size);
/* The same bytes without the signature (zeros in its place): what we sent,
 * for our own measures (the audit), without a hash and a signature per chunk. */
uint8_t *dl_round_encode_own_unsigned(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size);
/* Reduces one chunk from the given per-member encoded contributions (NULL =
 * absent) in member order; stores the signed result. 0, or -1 (no contributor). */
int dl_round_reduce(struct dl_round *r, size_t part, size_t k, uint8_t generation, uint8_t **contrib, bool *bad);
/* Whether a result message's contributor mask counts member j. */
static inline bool dl_round_result_counts(const uint8_t *result, size_t j) {
    return (result[28 + j / 8] >> (j % 8)) & 1;
}
/* Validates and stores a signed result message; 1 stored, 0 duplicate, -1 bad. */
int dl_round_accept_result(struct dl_round *r, const uint8_t *msg, size_t size, bool from_reducer,
                           const char *sender);
/* Called at every step of the round thread (fails the round after a stall). */
void dl_round_progress(struct dl_round *r);
/* Matchmaking: keeps an incoming chunk for the group about to form (true:
 * the round owns ev now) within the DL_AVG_EARLY_* bounds; false: the
 * caller answers and frees it as before. */
bool dl_round_hold_early(struct dl_round *r, struct dl_avg_event *ev);
/* Answers the held chunks "unknown round" and frees them. */
void dl_round_drop_early(struct dl_round *r);
/* Allocates the per-member and per-chunk state once the group is known. */
int dl_round_setup(struct dl_round *r);
/* Whether this round answers avg.alive for the round id in payload at `now`:
 * it runs with that group and its thread moved within stall_s. */
bool dl_round_alive_for(struct dl_round *r, const uint8_t *payload, size_t size, double now);
/* The answer of a finished round to a late request of `kind`: DL_NET_OK
 * with the stored result (*answer borrowed from the store; NULL and 0 for an
 * empty acknowledgement), or DL_NET_REMOTE_ERROR with a text. */
int dl_round_answer_finished(const struct dl_round *r, int kind, const uint8_t *payload, size_t size,
                             const uint8_t **answer, size_t *answer_size);
/* What a finished round tells of chunk (part, k): range, generation,
 * reducer, contributors, weight. */
void dl_round_chunk_info(const struct dl_round *r, size_t part, size_t k, struct dl_avg_chunk_info *ci);
/* Decodes every stored result into vec (n elements) after a round that
 * completed with DL_AVG_OK at a receiving member. */
void dl_round_copy_out(const struct dl_round *r, float *vec);
/* What the aggregators decoded from our chunks (options->sent of
 * dl_collab_average) after a round that completed with DL_AVG_OK: per chunk
 * our encoded input decoded again where the result's mask names us, 0
 * where it does not; all 0 for a member that sends nothing. -1 (dl_fail)
 * when out of memory. */
int dl_round_copy_sent(const struct dl_round *r, float *sent);
/* Bytes of the encoded data of a stored result of len elements (a topk
 * round's results differ in size). */
size_t dl_round_result_data_size(const struct dl_round *r, const uint8_t *res, uint64_t len);

/* Size of a chunk message of `len` elements (header, data, signature). */
size_t dl_round_chunk_msg_size(const struct dl_round *r, uint64_t len);
/* Whether msg (chunk_msg_size bytes) carries member j's valid signature;
 * writes BLAKE2b-256 of its data to hash. */
bool dl_round_chunk_signed(const struct dl_round *r, size_t j, const uint8_t *msg, size_t size, uint8_t hash[32]);
/* Contributors named in a result's mask (bits beyond the group: -1). */
int dl_round_mask_count(const struct dl_round *r, const uint8_t *result);
/* Whom the results we hold clipped, as every member holding them judges
 * alike: per member, seen (some result names it) and clipped (its
 * committed clip weight is below 1 in more than half of those results). */
void dl_round_clip_verdicts(const struct dl_round *r, bool *seen, bool *clipped);

/* ---- audit_round.c: accountable aggregation ------------------------------------------ */

int dl_audit_setup(struct dl_round *r);
void dl_audit_free(struct dl_round *r);
/* Once every result is in: projections out, attestations out and checked.
 * true when the audit is over (r->status says how it ended). */
bool dl_audit_pump(struct dl_round *r, double now);
/* A verdict on signed evidence against member j: refused for the rest of
 * the run, in this round's `accused`, and the round is not applied. */
void dl_audit_accuse(struct dl_round *r, size_t j, const char *why);
void dl_audit_on_event(struct dl_round *r, struct dl_avg_event *ev);
#ifdef DEDLOC_TEST_HOOKS
/* DL_MISBEHAVE_TWO_FACED: a signed copy of our stored result gi with other
 * data (malloc'd; NULL when out of memory). */
uint8_t *dl_audit_two_faced_copy(struct dl_round *r, size_t gi);
/* DL_MISBEHAVE_GRIND: rewrites our stored result of (part, k), swapping
 * pairs of elements, until the seed we can compute now draws directions
 * that do not see the swap (test builds only). */
void dl_audit_grind(struct dl_round *r, size_t part, size_t k);
#endif

/* ---- recovery.c ------------------------------------------------------------------- */

void dl_recovery_on_event(struct dl_round *r, struct dl_avg_event *ev);
void dl_recovery_pump(struct dl_round *r, double now);

/* ---- allreduce.c: the loop ---------------------------------------------------------- */

/* Runs the round to its end over its transport (blocking); 0 or -1 with
 * r->status set. The same as begin, then advance/wait/handle until advance
 * says the round is over, then end. */
int dl_round_run(struct dl_round *r);
/* Sets the round up once its group is known; -1 when it already failed
 * (then call dl_round_end). */
int dl_round_begin(struct dl_round *r);
/* Does everything there is to do now (sending, reducing, results, timeouts,
 * recovery). true when the round is over; otherwise *wake_at is when to call
 * again at the latest, if no event comes first. */
bool dl_round_advance(struct dl_round *r, double *wake_at);
/* Handles a list of events from the transport and frees them. */
void dl_round_handle(struct dl_round *r, struct dl_avg_event *events);
/* Answers what the round still holds; returns 0 for DL_AVG_OK, else -1. */
int dl_round_end(struct dl_round *r);

#endif
