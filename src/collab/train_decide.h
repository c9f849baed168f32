/* The step loop's decisions (private to src/collab): pure functions of the
 * run's settings, the swarm as one look saw it and what the loop counted.
 * They read no clock and touch no state, so a table of cases checks each
 * rule alone (tests/collab/test_collab_loop_decide.c). */
#ifndef DEDLOC_COLLAB_TRAIN_DECIDE_H
#define DEDLOC_COLLAB_TRAIN_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collab/train_sync.h"
#include "dedloc/collab.h"

/* Matchmaking times remembered for the early start's lead. */
#define DL_LOOP_MM_RECENT 8

/* The settings the decisions read, fixed for the whole run. */
struct dl_loop_policy {
    bool aux;                  /* no backend: joins rounds with weight 0, trains nothing */
    bool delayed;              /* --delay-update: a round runs beside the next step's micro-batches */
    bool early_on;             /* exact mode with a backend: matchmaking may start ahead of the ETA */
    int64_t target_batch;      /* the collective batch */
    int64_t local_batch;       /* > 0: ready after exactly this many samples of ours */
    size_t min_peers;          /* > 1: wait for that many peers, and the leader for that many members */
    double round_deadline_s;   /* whole round, matchmaking included */
    int64_t state_every;       /* aux: download the state every this many epochs */
    int64_t local_steps;       /* > 0: local-steps mode, H inner steps per peer between syncs */
    int64_t sync_micro_batch;  /* local-steps mode: samples of one inner step (0: the last micro-batch's) */
};

void dl_loop_policy_init(struct dl_loop_policy *policy, const struct dl_collab_train_options *options,
                         bool has_backend);

/* What the loop has counted, as it stood at the look. */
struct dl_loop_counters {
    int64_t epoch;             /* optimizer steps taken: our epoch */
    int64_t local_samples;     /* ours at this epoch not yet averaged (a failed delayed round's included) */
    int64_t micro_since_round; /* micro-batches since the last round attempt */
    double micro_s;            /* a micro-batch's seconds, moving average (0: none yet) */
    int micro_samples;         /* the last micro-batch's samples */
    bool has_state;            /* we hold the weights of our epoch */
    uint64_t last_state_epoch; /* aux: the epoch of the last weights it held */
    bool early_running;        /* an early round is matchmaking on its thread */
    int64_t early_refused_epoch; /* an early round failed at this epoch: none again there (-1: none) */
    double now;                /* dl_now() at the look */
    double prev_wait_until;    /* peers finishing the previous round are waited for until then */
};

/* ---- a round at our epoch ---- */

enum dl_loop_readiness {
    DL_LOOP_NOT_READY,         /* keep accumulating */
    DL_LOOP_WAIT_PREVIOUS,     /* ready, but peers still finishing the previous round come first */
    DL_LOOP_READY,             /* join the round of our epoch now */
};

/* A trainer is ready once it drew a micro-batch since the last attempt and
 * holds samples: --local-batch of its own, or else the swarm's collective
 * samples at our epoch reaching the target batch. An aux peer is ready once
 * the trainers' samples reach the target. Peers one epoch behind are about
 * to join this round and one may lead it (matchmaking picks the lowest peer
 * id at our epoch), so a ready peer waits for them until prev_wait_until,
 * or two groups would form. */
/* The swarm's samples at our epoch that end it: the target batch in exact
 * mode; in local-steps mode H x (samples of one inner step) x (peers seen,
 * us included), i.e. H inner steps per peer on average, whatever their
 * speeds (docs/collab_training.md, "Low-communication mode"). */
double dl_loop_sync_target(const struct dl_loop_policy *policy, const struct dl_loop_counters *counters,
                           const struct dl_swarm_look *look);

enum dl_loop_readiness dl_loop_ready(const struct dl_loop_policy *policy, const struct dl_loop_counters *counters,
                                     const struct dl_swarm_look *look);

/* Members the leader waits for: min_peers with --local-batch, else 0 (whoever comes). */
size_t dl_loop_expected_members(const struct dl_loop_policy *policy);

enum dl_loop_round_kind {
    DL_LOOP_ROUND_PLAIN,       /* average, then step, here and now */
    DL_LOOP_ROUND_HAND_OVER,   /* an early round is matchmaking: hand it our vector */
    DL_LOOP_ROUND_DELAYED,     /* start the round on its thread and go on computing */
};

/* Which round a ready peer runs. alone: nobody else in the swarm and no
 * member expected, where a delayed round would only step later for nothing. */
enum dl_loop_round_kind dl_loop_round_kind(const struct dl_loop_policy *policy, bool early_running, bool alone);

/* ---- matchmaking ahead of the ETA (exact mode) ---- */

/* Matchmaking seconds of the last successful plain rounds, oldest overwritten. */
struct dl_mm_history {
    double recent[DL_LOOP_MM_RECENT];
    size_t count;              /* rounds noted so far (may exceed DL_LOOP_MM_RECENT) */
};

/* Notes one round's matchmaking time (a negative or non-finite one is ignored). */
void dl_mm_history_note(struct dl_mm_history *history, double seconds);

/* The lead: the median of the remembered matchmaking times plus 0.5 s, at
 * least 1 s (1.5 s before any round). */
double dl_loop_early_lead(const struct dl_mm_history *history);

/* Whether to start matchmaking before the next micro-batch: our ETA to the
 * end of the accumulation (--local-batch at our own rate, else the swarm's
 * samples at its rate) is under the reach, the lead plus one micro-batch
 * (the next chance to start comes only after it), capped at 0.8 x stall_s
 * (stall_s = deadline / 6, at least 1 s): the others leave out a member whose
 * vector comes later than stall_s after the group formed. Never with one
 * running, after one failed at this epoch, before a micro-batch was timed,
 * alone, while peers finish the previous round, or before min_peers are at
 * our epoch with --local-batch. *estimate: our samples at the end, for the
 * join (set only when due). */
bool dl_loop_early_due(const struct dl_loop_policy *policy, const struct dl_loop_counters *counters,
                       const struct dl_swarm_look *look, double lead, double *estimate);

/* ---- the state we hold against the swarm's ---- */

/* Whether a disagreement (look->i_disagree) is settled enough to act on:
 * peers still finishing the previous round have not voted yet, and only a
 * strict majority of the hashes at our epoch against ours settles it. A tie
 * (e.g. two peers, or two honest peers against a pair of liars) never does:
 * whoever holds the most identities would win it (docs/collab_training.md,
 * "The epoch and the reference state"). */
bool dl_loop_heal_due(const struct dl_swarm_look *look);

enum dl_loop_sync_action {
    DL_LOOP_SYNC_NONE,         /* our state is the swarm's: go on */
    DL_LOOP_SYNC_CATCH_UP,     /* the swarm moved on: download its state */
    DL_LOOP_SYNC_FOLLOW_EPOCH, /* aux between downloads: take the newer epoch, without weights */
    DL_LOOP_SYNC_REFRESH_AUX,  /* aux without weights, due for its download every state_every epochs */
    DL_LOOP_SYNC_HEAL,         /* our weights disagree with the peers at our epoch: download theirs */
};

/* What to do about our state at this look, in this order: a swarm ahead of
 * us (a trainer downloads; an aux peer follows the epoch until state_every
 * epochs passed since its last weights), an aux peer's refresh, then a
 * disagreement at our epoch (dl_loop_heal_due). */
enum dl_loop_sync_action dl_loop_sync_decide(const struct dl_loop_policy *policy,
                                             const struct dl_loop_counters *counters, const struct dl_swarm_look *look);

#endif
