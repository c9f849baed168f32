/* dedloc collaboration: the averaging round (matchmaking and the
 * load-balanced butterfly all-reduce over net's requests) and state transfer.
 * The protocol and its fault handling are described in docs/protocol.md. */
#ifndef DEDLOC_COLLAB_H
#define DEDLOC_COLLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/net.h"
#include "dedloc/train.h"

/* ==== averaging round ==== */

/* Most members one group may hold; more joiners are refused. */
#define DL_AVG_MAX_MEMBERS 256
/* Elements per chunk: parts travel in chunks of 1 MiB of fp32. */
#define DL_AVG_CHUNK_ELEMS 262144
/* Largest weight (samples) a chunk header may carry: far beyond any batch,
 * and small enough that weight x value sums stay exact in double. */
#define DL_AVG_MAX_WEIGHT 1099511627776.0 /* 2^40 */

typedef struct dl_collab dl_collab;

struct dl_collab_config {
    double bandwidth_mbit;       /* declared upload bandwidth; 0 = measured from past rounds */
    bool client_mode;            /* cannot be dialled: never aggregates */
    bool aux;                    /* auxiliary peer: aggregates only, has no gradient (weight 0) */
    double matchmaking_floor_s;  /* bounds of the adaptive matchmaking window (default 0.5 .. 10) */
    double matchmaking_ceiling_s;
    double ban_s;                /* how long a misbehaving member is refused (default 60) */
    /* Centered-clip rounds: a member whose contribution this peer clipped
     * (as an aggregator) in this many consecutive rounds is reported at
     * warning level (default 3), and refused for the rest of the run from
     * this many on (default 10); 0 = never. */
    int clip_warn_rounds;
    int clip_ban_rounds;
    /* Test-hook builds' CLI only (--test-misbehave): a round misbehaviour
     * this peer commits on purpose (enum dl_misbehaviour, src/collab/round.h);
     * 0: none. */
    int test_misbehaviour;
};
void dl_collab_config_default(struct dl_collab_config *config);

/* Registers the averaging methods on net (which must outlive it). */
int dl_collab_start(dl_net *net, const struct dl_collab_config *config, dl_collab **collab);
void dl_collab_stop(dl_collab *collab);

/* ---- closed sets of protocol values ------------------------------------------
 * Each enum ends in a _COUNT sentinel and has a name table beside it
 * (src/collab/names.c) whose size is checked against the sentinel at compile
 * time, so a value added without its name fails the build. The names are
 * what the command line accepts and what logs, JSON lines and the manifest
 * say; the numbers are what travels on the wire. dl_X_name gives "unknown"
 * for a value outside the set; dl_X_from_name returns 0 with *out set, or
 * -1 with dl_fail naming the accepted names. */

/* What a member does in a round (the signed group record and the join
 * carry it as one byte). */
enum dl_member_role {
    DL_MEMBER_TRAINER = 0,       /* sends its gradient and aggregates a part */
    DL_MEMBER_CLIENT = 1,        /* cannot be dialled: sends, never aggregates */
    DL_MEMBER_AUX = 2,           /* has no gradient (weight 0): aggregates only */
    DL_MEMBER_ROLE_COUNT
};
/* "trainer" "client" "aux" */
const char *dl_member_role_name(enum dl_member_role role);
int dl_member_role_from_name(const char *name, enum dl_member_role *role);

/* Wire codec of averaged vectors (layouts in src/collab/wirecodec.h). */
enum dl_codec {
    DL_CODEC_NONE = 0,
    DL_CODEC_FP16 = 1,
    DL_CODEC_UINT8 = 2,
    DL_CODEC_INT8 = 3,           /* symmetric 8-bit, one fp32 scale per chunk */
    DL_CODEC_TOPK = 4,           /* 1 value in 64 per block of 4096 at 2 bits; results come back as
                                  * sparse fp16 (docs/protocol.md, "Wire codecs") */
    DL_CODEC_COUNT
};
/* "none" "fp16" "uint8" "int8" "topk" */
const char *dl_codec_name(enum dl_codec codec);
int dl_codec_from_name(const char *name, enum dl_codec *codec);

/* How an aggregator combines the contributions to one chunk. */
enum dl_aggregation {
    DL_AGG_MEAN = 0,             /* the weighted mean */
    DL_AGG_CENTERED_CLIP = 1,    /* CenteredClip (BTARD): robust to a minority of bad contributions */
    DL_AGG_COUNT
};
/* "mean" "centered-clip" */
const char *dl_aggregation_name(enum dl_aggregation aggregation);
int dl_aggregation_from_name(const char *name, enum dl_aggregation *aggregation);
/* BTARD's defaults (Gorbunov et al. 2021). */
#define DL_CLIP_DEFAULT_TAU 1.0
#define DL_CLIP_DEFAULT_ITERATIONS 20
#define DL_CLIP_MAX_ITERATIONS 1000

struct dl_avg_handoff;

struct dl_avg_options {
    uint64_t epoch;              /* round key: members of one round use the same epoch */
    double weight;               /* samples behind this vector (0 for aux), at most DL_AVG_MAX_WEIGHT;
                                  * with a handoff only the estimate written in the join */
    enum dl_codec compression;   /* wire codec (default none) */
    float *sent;                 /* NULL, or n floats: on DL_AVG_OK the values our contribution carried after the wire codec (what the aggregators decoded from us), for error feedback */
    double deadline_s;           /* whole round, matchmaking included (default 60) */
    double stall_s;              /* silence after which a sender is left out (0 = deadline / 6, >= 1) */
    size_t expected_peers;       /* leader: close matchmaking once this many joined (0 = the swarm view's count) */
    /* Aggregation, per run: the leader writes its own into the signed group
     * record and every aggregator of the round follows the record. */
    enum dl_aggregation aggregation; /* default mean */
    double clip_tau;             /* centered clip: radius, per chunk (default 1) */
    int clip_iterations;         /* centered clip: iterations (default 20, at most 1000) */
    /* Matchmaking ahead of the vector (see dl_collab_hand_over); NULL: the
     * vector and weight are there when the round starts. */
    struct dl_avg_handoff *handoff;
};
void dl_avg_options_default(struct dl_avg_options *options);

enum dl_avg_status {
    DL_AVG_OK = 0,
    DL_AVG_NO_GROUP = 1,         /* matchmaking failed or missed the group: keep the gradient */
    DL_AVG_DEADLINE = 2,         /* the round did not complete in time: nothing applied */
    DL_AVG_DROPPED = 3,          /* another member refused our data */
    DL_AVG_UNSURE = 4,           /* could not be sure to hold the others' bits: apply nothing,
                                    catch up by state download */
    DL_AVG_FAILED = 5,           /* bad arguments, no memory, group invalid */
    DL_AVG_STATUS_COUNT
};
/* "ok" "no group" "deadline" "dropped" "unsure" "failed": the "status" of
 * `dedloc allreduce` lines and the reason of a round_failed event. */
const char *dl_avg_status_name(enum dl_avg_status status);
int dl_avg_status_from_name(const char *name, enum dl_avg_status *status);

/* What one chunk of the result was made of. */
struct dl_avg_chunk_info {
    uint64_t offset, length;     /* elements */
    uint16_t part, reducer;      /* member indices: whose part, who reduced it */
    uint8_t generation;          /* 0: reduced by the part's aggregator; 1: re-reduced by a survivor */
    double weight;               /* the contributors' weights as their chunk headers said, summed */
    uint8_t contributors[DL_AVG_MAX_MEMBERS / 8]; /* bit i = member i's vector is in it */
};

struct dl_avg_member {
    char peer_id[DL_PEER_ID_HEX];
    double weight;               /* what its join said: an estimate when it matchmade ahead of its
                                  * vector; the weight that counts travels in its chunks */
    double bandwidth_mbit;
    enum dl_member_role role;
    uint64_t part_offset, part_elems;
};

struct dl_avg_result {
    enum dl_avg_status status;
    char reason[256];            /* why it failed ("" when OK) */
    size_t num_members, my_index;
    struct dl_avg_member *members;  /* group order */
    size_t num_chunks;
    struct dl_avg_chunk_info *chunks;
    enum dl_codec compression;
    uint64_t bytes_sent, bytes_received;  /* payload bytes of this round's requests */
    uint64_t bytes_resent;       /* of bytes_sent: chunks sent again because their aggregator
                                  * had not seen the group record yet ("unknown round") */
    double matchmaking_s, allreduce_s, total_s;
    double handoff_wait_s;       /* with a handoff: from the group forming to the vector (in allreduce_s) */
    double total_weight;         /* samples behind the average: the most any result chunk's header
                                  * carries (every member reads the same); a member that receives no
                                  * result (aux) or a failed round: the join weights summed */
    double lp_bound_s;           /* the load-balancing optimum for these bandwidths */
    double reduce_s;             /* time spent decoding, reducing and encoding */
    uint64_t reduced_elems;      /* elements of contributions decoded and reduced */
    enum dl_aggregation aggregation; /* what the group record said */
    uint8_t clipped[DL_AVG_MAX_MEMBERS / 8]; /* bit i: we clipped member i's contribution in a
                                                chunk we reduced (centered clip) */
    /* Accountable aggregation (docs/protocol.md): chunks of other parts whose
     * result we checked in projection and found right; members we banned on
     * this round's signed evidence (bit i: member i). */
    uint32_t audit_chunks;
    uint8_t accused[DL_AVG_MAX_MEMBERS / 8];
    /* Centered clip, as the results applied judge it (the clip streaks'
     * count, the same on every member that applied the round): bit i,
     * member i's contribution was clipped; and how many members this
     * round's count refused for the run (--clip-ban-rounds). */
    uint8_t clip_judged[DL_AVG_MAX_MEMBERS / 8];
    uint32_t clip_refused;
};
void dl_avg_result_free(struct dl_avg_result *result);

/* Averages vec (n floats, finite) with the peers that join the same epoch,
 * weighted by options->weight. On DL_AVG_OK vec holds the average, the same
 * bits as every other member's; on any other status vec is unchanged and the
 * caller keeps its contribution for the next round. Returns the status.
 * options->sent (error feedback): on DL_AVG_OK, for every chunk of every
 * part, what the chunk's aggregator decoded from our encoded chunk (the
 * same decoder on the same bytes), or 0 where the result's mask says our
 * chunk is not in it (we were left out of that chunk: nothing of ours
 * arrived); all 0 for an aux peer (it contributes nothing). On any other
 * status it is not written. It may not alias vec. */
enum dl_avg_status dl_collab_average(dl_collab *collab, float *vec, size_t n, const struct dl_avg_options *options,
                      struct dl_avg_result *result);

/* Matchmaking ahead of the vector. A round started (on a thread of the
 * caller's) with options->handoff matchmakes at once, writing
 * options->weight in its join as an estimate, then serves the round without
 * sending, reducing or answering for its own vector until another thread
 * calls dl_collab_hand_over: vec is read only from then on, and the weight
 * given there is the one that counts (it travels in every chunk header).
 * A round whose vector has not come stall_s after the group formed (the
 * others leave a silent sender out then) ends as DL_AVG_NO_GROUP, as does
 * one withdrawn; a round that fails before the handoff never read vec.
 * The struct is the caller's; its fields are guarded by the collab's lock. */
struct dl_avg_handoff {
    int state;                   /* 0 waiting for the vector, 1 handed over, 2 withdrawn, 3 round over */
    double weight;
};
void dl_avg_handoff_init(struct dl_avg_handoff *handoff);
/* vec is complete and `weight` samples are behind it (finite, 0 ..
 * DL_AVG_MAX_WEIGHT). Returns 0, or -1 when the round no longer waits for it
 * (it ended or failed: the caller's vector was never read). */
int dl_collab_hand_over(dl_collab *collab, struct dl_avg_handoff *handoff, double weight);
/* Leaves a round that waits for its vector: it ends as DL_AVG_NO_GROUP. */
void dl_collab_withdraw(dl_collab *collab, struct dl_avg_handoff *handoff);

/* Liveness beyond record expiry. A peer killed without a goodbye keeps its
 * last record in every view until the record expires (--expiry, 60 s), and
 * a survivor would wait that long for it. After a failed round the step loop
 * asks the peers at its epoch whether they are reachable (one avg.alive
 * request each): one whose connection is closed or refused counts as gone
 * (matchmaking and the step loop leave it out of the view) until a record of
 * it newer than the one we saw arrives, which proves it alive again.
 * Returns how many peers were found gone. */
size_t dl_collab_probe_peers(dl_collab *collab, uint64_t epoch);
/* Removes the peers found gone, and the peers this peer refuses (caught
 * misbehaving), from a view (in place). Returns how many refused peers it
 * removed: present, but never in our groups. */
size_t dl_collab_drop_gone(dl_collab *collab, struct dl_swarm_view *view);

/* The measured upload bandwidth (Mbit/s) from past rounds; 0 before any. */
double dl_collab_measured_bandwidth(const dl_collab *collab);

/* Whether a round's clip counts can refuse a peer here (clip_ban_rounds >
 * 0): only then does the train loop keep the optimizer's moments of the
 * last round that clipped nobody, to restore when one does. */
bool dl_collab_bans_clipped(const dl_collab *collab);

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
    size_t max_queued_per_peer; /* of those, from one peer (default 16; 0 = the default): a fetcher
                              * keeps max_in_flight_per_donor (4) outstanding, so one peer cannot
                              * take the queue from the others */
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
    /* Non-zero (set from a signal handler, say): give up at once, keeping
     * nothing; NULL: never. Checked at least every 0.25 s. */
    const volatile sig_atomic_t *stop;
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

/* ==== collaborative training ==== */
/* The DeDLOC step loop of one peer (src/collab/train_loop.c): accumulate
 * micro-batches and publish progress; when the swarm's samples at our epoch
 * reach the target batch, average the gradients of the ready peers weighted
 * by their samples (dl_collab_average), run the host optimizer step on the
 * average and move to the next epoch. The epoch is the number of optimizer
 * steps the swarm took; the learning-rate schedule follows it.
 *
 * After every step each peer publishes BLAKE2b-256 of its fp32 master
 * weights with its progress and serves its state (weights, optimizer
 * moments, epoch) through a dl_state_donor. A peer behind the swarm, or one
 * whose hash disagrees with the other peers at its epoch, downloads the
 * state from the peers holding the most common hash. A failed round applies
 * nothing: the gradient is kept for the next one. An auxiliary peer (no
 * backend) joins every round with weight 0, aggregates and serves the state
 * it downloads. */

/* Test-hook builds only (the CLI sets it nowhere else): a trainer that takes
 * part in every round with a well-formed but bad gradient, to test robust
 * aggregation in a training swarm. The loss elements stay honest, so the
 * logged collective loss still measures the model. */
enum dl_test_attack {
    DL_TEST_ATTACK_NONE,
    DL_TEST_ATTACK_SIGN_FLIP, /* its mean gradient times -1000 */
    DL_TEST_ATTACK_NOISE,     /* uniform noise in [-100, 100) instead of the gradient */
    DL_TEST_ATTACK_EPOCH_SYBIL, /* after joining: claims DL_TEST_SYBIL_EPOCH_LEAD epochs more than it
                                 * holds, with weights of its own (perturbed the same way by every
                                 * such peer, so a pair agrees) that its donor serves and its records
                                 * sign, then only gossips: one of a colluding pair */
    DL_TEST_ATTACK_COUNT
};
#define DL_TEST_SYBIL_EPOCH_LEAD 20
/* "none" "sign-flip" "noise" "epoch-sybil" (--test-attack) */
const char *dl_test_attack_name(enum dl_test_attack attack);
int dl_test_attack_from_name(const char *name, enum dl_test_attack *attack);
/* Test-hook builds' --test-misbehave: a round misbehaviour a training peer
 * commits with well-formed data, by name ("result-scale", "projection-lie",
 * "huge-values", "dictate", "stall-leader", "skip-audit", "attest-only",
 * "own-claim"), as dl_collab_config's
 * test_misbehaviour takes it. */
int dl_test_misbehaviour_from_name(const char *name, int *mode);

/* The settings of one peer's step loop (dl_collab_train_run). */
struct dl_collab_train_options {
    dl_trainer_options base;     /* target_batch is the collective batch; max_steps the last epoch */
    int64_t local_batch;         /* > 0: this peer is ready after exactly this many samples
                                  * (deterministic shares, tests); 0: when the swarm reaches the target */
    int64_t shard_index, shard_count; /* > 1: micro-batch k of the data stream is peer (k mod count)'s;
                                  * with local_batch, peers that together feed every global batch */
    size_t min_peers;            /* wait for this many peers (us included) before the first step, and
                                  * let the leader wait for that many members in each round */
    double join_wait_s;          /* at start, look this long for a swarm before training alone (5) */
    double round_deadline_s;     /* whole round, matchmaking included (60) */
    enum dl_codec compression;   /* wire codec of the gradient (default none) */
    enum dl_aggregation aggregation; /* mean (default) or centered clip */
    double clip_tau;             /* centered clip: radius per chunk (default 1) */
    int clip_iterations;         /* centered clip: iterations (default 20) */
    int64_t state_every;         /* aux: download the state every this many epochs (1) */
    bool delay_update;           /* run each round beside the next step's micro-batches, which then
                                  * start from the weights before that round's step (one step
                                  * stale; docs/collab_training.md). false: exact, the default */
    /* Local steps (DiLoCo; docs/collab_training.md, "Low-communication
     * mode"). 0: DeDLOC's exact mode, the default. H > 0: each peer steps
     * its own inner optimizer (opt_config) on its own weights after every
     * micro-batch; the swarm syncs when its samples since the last sync
     * reach H x sync_micro_batch x the peers seen (or, with local_batch,
     * when ours reach local_batch), averaging the pseudo-gradients (outer
     * minus local weights, plus what error feedback kept) weighted by
     * samples; every peer then takes the same outer Nesterov step on the
     * outer weights (what the swarm hashes, serves and checkpoints) and
     * restarts its local weights from them. The epoch counts syncs. */
    int64_t local_steps;
    int64_t sync_micro_batch;    /* local mode: samples of one inner step (0: our last micro-batch's) */
    double outer_lr;             /* local mode: the outer step's rate (0.7) */
    double outer_momentum;       /* local mode: its Nesterov momentum (0.9) */
    enum dl_codec outer_compression; /* local mode: codec of the pseudo-gradient (none) */
    /* What the signed metrics record (monitors read it) says of this peer;
     * NULL = "" (none published by aux peers). */
    const char *device_name, *device_vendor, *precision_name, *display_name;
    double linger_s;             /* after the last step, keep serving the state this long (2) */
    int64_t corrupt_at_step;     /* tests: after this step perturb our weights (0: never) */
    enum dl_test_attack test_attack; /* tests: a trainer that sends bad gradients */
    bool test_log_batches;       /* tests: log a "batch" event (index, fingerprint) per micro-batch */
    FILE *status;                /* NULL: none; else one JSON object per step (the log line) */
};
void dl_collab_train_options_default(struct dl_collab_train_options *options);

/* The "event" of the lines in the training log that are not steps
 * (docs/collab_training.md, "The log"). A round that fails shows as
 * round_failed (or early_round_failed: a round matchmade ahead of its
 * gradient), one that succeeds as a step line. */
enum dl_train_event {
    DL_TRAIN_EVENT_START,              /* the first line: the state we start from */
    DL_TRAIN_EVENT_BATCH,              /* tests: one micro-batch drawn */
    DL_TRAIN_EVENT_DOWNLOAD,           /* the swarm's state downloaded */
    DL_TRAIN_EVENT_DOWNLOAD_FAILED,
    DL_TRAIN_EVENT_ROUND_FAILED,       /* nothing applied; the samples are kept */
    DL_TRAIN_EVENT_PEERS_GONE,         /* peers found unreachable after a failed round */
    DL_TRAIN_EVENT_EARLY_ROUND_FAILED, /* the round matchmade ahead failed: the plain round follows */
    DL_TRAIN_EVENT_DISAGREE,           /* our param hash differs from the others' at our epoch */
    DL_TRAIN_EVENT_COUNT
};
/* "start" "batch" "download" "download_failed" "round_failed" "peers_gone"
 * "early_round_failed" "disagree" */
const char *dl_train_event_name(enum dl_train_event event);
int dl_train_event_from_name(const char *name, enum dl_train_event *event);

struct dl_collab_train_result {
    dl_trainer_result base;
    int64_t rounds_ok, rounds_failed, state_downloads, heals;
    double compute_s, wait_s;    /* time in micro-batches vs everything else */
    char param_hash[65];         /* BLAKE2b-256 of the final weights, hex */
    bool stopped_joining;        /* stopped before the swarm's state arrived: no checkpoint written */
};

/* Runs the loop on net/collab/donor (started by the caller; the collab
 * config's aux flag must match backend == NULL). params holds the initial
 * weights (layout->total floats) and is updated in place; resume (may be
 * NULL) continues our own checkpoint, replaced by the swarm's state when
 * the swarm is ahead; our data position stays ours either way: the backend's
 * stream opened at the checkpoint's recorded position (data_resumed), or
 * else re-read up to it. Checkpoints record the stream's position after the
 * micro-batches of the steps we applied (backend mark_data/save_data).
 * Returns 0 (done, stopped or time limit) or -1. */
int dl_collab_train_run(dl_net *net, dl_collab *collab, dl_state_donor *donor,
                        const struct dl_collab_train_options *options, const dl_opt_config *opt_config,
                        const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                        const dl_trainer_backend *backend, struct dl_collab_train_result *result);

/* Hex of a 32-byte param hash (65 bytes with the NUL). */
void dl_collab_hash_hex(const uint8_t hash[32], char out[65]);

/* ---- observers ---------------------------------------------------------------
 * A peer that trains nothing (a monitor keeping checkpoints of the run) takes
 * the swarm's state as a newcomer does: the param hash most peers at the
 * newest epoch signed in their records, downloaded from its holders and
 * verified chunk by chunk and against that hash. */
struct dl_collab_swarm_state {
    uint64_t epoch;               /* optimizer steps the swarm took */
    int64_t samples;              /* samples in those steps, the whole swarm's */
    uint8_t param_hash[32];       /* the signed hash the download was checked against */
    size_t holders;               /* peers that held it */
    double seconds;               /* the download */
};

/* Downloads the state into params (layout.total floats) and opt (initialized
 * on the model's layout; its settings stay, its moments and step are
 * replaced). Returns 0 with *state filled; 1 (nothing fetched) when no peer
 * holds a state at an epoch >= min_epoch; -1 with dl_fail() when the
 * download fails. Blocks up to about timeout_s; not from a net callback. */
int dl_collab_fetch_swarm_state(dl_net *net, uint64_t min_epoch, double timeout_s, dl_optimizer *opt, float *params,
                                struct dl_collab_swarm_state *state);

/* ==== the run manifest ====
 * One signed JSON file that holds every setting peers of a run must share
 * (docs/manifest.md): model, tokenizer (by BLAKE2b-256), data sources,
 * optimizer and schedule, batch sizes, wire compression, aggregation rule,
 * the precisions allowed, the run id and the run authority's key. It is
 * signed over its canonical bytes by the authority, or for an open run by a
 * peer identity; its hash goes into every handshake, so peers of one run id
 * with different manifests refuse each other. */
#define DL_MANIFEST_MAX_BYTES (64 * 1024)
/* Largest tokenizer file a manifest may name: it travels in one response. */
#define DL_MANIFEST_TOKENIZER_MAX (8u * 1024 * 1024)
#define DL_MANIFEST_MAX_DATA 16
#define DL_MANIFEST_FORMAT "dedloc-manifest-1"
/* Request methods of the run files (answered to anyone who asks, also on a
 * fetch-only connection: see dl_net_config.fetch_only). */
#define DL_NET_METHOD_MANIFEST DL_NET_PUBLIC_PREFIX "manifest"
#define DL_NET_METHOD_TOKENIZER DL_NET_PUBLIC_PREFIX "tokenizer"

struct dl_manifest {
    char *text;                       /* the file as read (what peers serve) */
    size_t size;
    uint8_t hash[32];                 /* BLAKE2b-256 of the canonical bytes (what is signed) */
    char hash_hex[65];
    char run_id[DL_TOKEN_RUN_ID_MAX];
    char model_preset[32];            /* a preset name, or "" when model_config_json is set */
    char *model_config_json;          /* the model's full config.json text, or NULL */
    char tokenizer_file[256];         /* the path given at `run init` */
    uint8_t tokenizer_hash[32];       /* BLAKE2b-256 of the tokenizer file */
    uint64_t tokenizer_size;
    size_t num_data;
    char *data[DL_MANIFEST_MAX_DATA]; /* text sources: paths (as given) or URLs */
    int64_t seq, micro_batch, target_batch, max_steps, seed, shuffle_buffer;
    char optimizer[16];               /* "lamb" or "adamw" */
    double lr, weight_decay, max_grad_norm;
    int64_t warmup_steps, total_steps;
    enum dl_codec compression;        /* wire codec */
    enum dl_aggregation aggregation;
    double clip_tau;
    int clip_iterations, clip_ban_rounds;
    int64_t local_steps;              /* "local_steps" (optional): H, or 0 for DeDLOC's exact mode */
    double outer_lr, outer_momentum;  /* its outer Nesterov step (0.7, 0.9 when not said) */
    enum dl_codec outer_compression;  /* its pseudo-gradient codec (none when not said) */
    unsigned precisions;              /* bit p set: dl_precision p allowed */
    char precision_default[8];        /* the first one listed */
    bool has_authority;
    uint8_t authority[DL_AUTHORITY_PK];
    uint8_t signer[DL_NET_PUBLIC_KEY];
    char signer_peer_id[DL_PEER_ID_HEX]; /* the signer's key as a peer id (open runs) */
};

/* Parses and verifies a manifest (untrusted text of size bytes): the JSON,
 * every field's type and range, no unknown field, and the signature over
 * the canonical bytes (by the authority when the manifest names one). 0 with
 * *m filled (free with dl_manifest_free), or -1 with the reason. */
int dl_manifest_parse(const char *text, size_t size, struct dl_manifest *m);
int dl_manifest_load(const char *path, struct dl_manifest *m);
void dl_manifest_free(struct dl_manifest *m);
/* The canonical bytes of a JSON object (docs/manifest.md): keys sorted,
 * no white space, its top-level "signature" left out. *out malloc'd. */
int dl_manifest_canonical(const char *json, size_t size, char **out, size_t *out_size);
/* Signs the manifest body (JSON text without "signer"/"signature") with the
 * ed25519 secret key sk (libsodium's 64-byte form): sets "signer" and
 * "signature" and returns the signed file's text in *signed_text (malloc'd),
 * already checked by dl_manifest_parse. */
int dl_manifest_sign(const char *body_json, const uint8_t sk[64], char **signed_text);
/* BLAKE2b-256 of a file of at most max_size bytes. */
int dl_file_blake2b(const char *path, size_t max_size, uint8_t hash[32], uint64_t *size);

/* Serves the manifest text and the tokenizer bytes (copied) under
 * DL_NET_METHOD_MANIFEST and DL_NET_METHOD_TOKENIZER for the net's life.
 * dl_run_files_stop frees them: call it after dl_net_stop (the handlers run
 * on the network thread until then). *out is set even on failure. */
typedef struct dl_run_files dl_run_files;
int dl_run_files_serve(dl_net *net, const struct dl_manifest *m, const void *tokenizer, size_t tokenizer_size,
                       dl_run_files **out);
void dl_run_files_stop(dl_run_files *rf);

#endif
