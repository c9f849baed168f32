/* The collaborative step loop's state and the functions its files share
 * (private to src/collab). The loop is spread over:
 *   train_loop.c          the loop itself: join the swarm, micro-batches, what comes next
 *   train_decide.c        its decisions, pure functions (train_decide.h)
 *   train_round.c         a round at our epoch and the step that follows it
 *   train_round_delayed.c --delay-update: the round beside the next step's micro-batches
 *   train_round_early.c   exact mode: matchmaking ahead of the ETA
 *   train_state.c         our state against the swarm's and on disk: publish, download, heal, checkpoint
 *   train_local.c         local-steps mode (DiLoCo): local weights, inner optimizer, pseudo-gradient, residual
 *   train_report.c        events, log lines, metrics records, the progress line */
#ifndef DEDLOC_COLLAB_TRAIN_LOOP_INTERNAL_H
#define DEDLOC_COLLAB_TRAIN_LOOP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "collab/round_async.h"
#include "collab/train_decide.h"
#include "collab/train_sync.h"
#include "dedloc/collab.h"

/* Extra elements averaged with the gradient: the peers' mean losses, so that
 * every member logs the same collective loss. */
#define LOSS_ELEMS 3
/* Stream batches drawn since the data mark beyond which the mark moves on
 * (the stream keeps each: 4096 batches of 8 x 512 tokens are about 270 MB). */
#define MARK_RETAIN_LIMIT 4096

/* The weights, their optimizer, and what the swarm knows of them. */
struct loop_model {
    size_t n;                      /* parameters */
    float *params;
    dl_optimizer opt;              /* opt.step is our epoch */
    uint8_t hash[32];              /* of params, as our record publishes it */
    bool has_state;                /* aux: holds the weights of its epoch */
    uint64_t last_state_epoch;     /* aux: epoch of the last weights it held */
    /* Centered clip, exact mode (train_round.c, loop_guard_moments): the
     * optimizer's moments after the last round whose results clipped
     * nobody, and whether they follow from our own history of rounds. */
    float *clean_m, *clean_v;
    bool clean_valid;
    int64_t clean_step;
};

/* The gradient of our epoch not yet averaged. */
struct loop_accum {
    dl_grad_accum acc;             /* host path: the sum; device path: only .samples (the sum is on the device) */
    bool on_device;                /* the gradient sums on the device, one download per round */
    bool device_fresh;             /* the device's sum starts from zero at the next micro-batch */
    float *grad;                   /* micro-batch gradient, then the round's vector (n + LOSS_ELEMS) */
    float *rvec;                   /* the vector of a round on a thread, delayed or early (n + LOSS_ELEMS) */
    double loss_sum[LOSS_ELEMS];   /* sample-weighted, over the accumulation */
    dl_loss_scale ls;
};

/* Our progress through the run and the data stream. The data stream's mark
 * (what a checkpoint records) follows the micro-batches whose gradient was
 * applied. A delayed round marks where its micro-batches end when it starts;
 * until it succeeds the mark lies past micro-batches not yet applied, and a
 * checkpoint then goes without the position (resuming re-reads the stream:
 * exact, slower). So does one after MARK_RETAIN_LIMIT batches without a step
 * (see micro_batch in train_loop.c). What the decisions read of these is
 * copied into a struct dl_loop_counters at each look (counters_now). */
struct loop_counters {
    dl_train_progress progress;
    dl_train_progress progress_at_step; /* micro_batches: those applied (the data mark) */
    dl_loss_scale ls_at_step;
    int64_t mark_micro;            /* our micro-batches drawn when the stream was marked */
    int64_t micro_since_round;     /* micro-batches since the last attempt */
    double micro_s;                /* a micro-batch's seconds (moving average) */
    int micro_samples;             /* the last micro-batch's samples */
};

/* What the loop remembers of the swarm between looks. */
struct loop_swarm {
    double prev_wait_until;        /* how long to wait for peers finishing the previous round */
    struct dl_mm_history mm;       /* matchmaking seconds of the last successful plain rounds */
    struct dl_group_evidence group; /* the group of our last failed round (dl_swarm_look) */
};

/* Delayed update: the round of our epoch runs on a thread (round) over rvec
 * while micro-batches of the next step go into the accumulation; a failed
 * round's gradient waits in carry (sum weighted by samples) for the next. */
struct loop_delayed {
    dl_async_round round;
    int64_t local;                 /* our samples in the running round */
    int64_t epoch;                 /* the epoch the running round is for */
    int64_t micro;                 /* our micro-batches drawn when it started */
    dl_loss_scale ls;              /* our loss scale when it started */
    dl_opt_step_info info;         /* the step taken on the round's thread */
    char error[256];               /* why that step failed */
    dl_grad_accum carry;
    double carry_loss[LOSS_ELEMS];
};

/* Exact mode, train_round_early.c: the round of our epoch matchmakes on a
 * thread (round) while micro-batches go on; when the accumulation ends our
 * vector (in rvec) and weight are handed over and the loop waits for the
 * average as before. */
struct loop_early {
    dl_async_round round;
    struct dl_avg_handoff handoff;
    int64_t refused_epoch;         /* an early round failed here: the plain round follows (-1: none) */
    double compute_s;              /* compute_s and micro-batches when it started */
    int64_t micro;
    double overlap_s;              /* the step being logged: compute beside its matchmaking */
    int64_t overlap_micro;
};

/* What the log lines and metrics records say of the run. */
struct loop_report {
    FILE *log;
    double run_start;
    double step_start;
    double compute_s;              /* in micro-batches since the step started */
    double samples_contributed;    /* our samples that went into completed rounds */
    dl_loss_watch loss_watch;      /* our loss, for the warning of a run that diverges */
    int64_t samples_computed;      /* this run's micro-batches that counted, in samples */
    double round_s;                /* this run's time in averaging rounds, failed ones too */
    double bytes_sent;             /* payload bytes this run sent in averaging rounds, failed ones too */
    bool joined;                   /* the start's look for the swarm ended (not stopped): the weights we
                                      hold are the run's, worth a checkpoint */
};

/* Local-steps mode (train_local.c): st->model is the outer state; these
 * are this peer's own. The samples and losses since the last sync are
 * st->accum's (acc.samples, loss_sum; acc.sum is unused). */
struct loop_local {
    bool on;
    float *params;                 /* our local weights (what the device trains on) */
    dl_optimizer inner;            /* the run's LAMB/AdamW at our own schedule position */
    float *residual;               /* error feedback: what our syncs have not sent yet (n) */
    float *sent;                   /* our last contribution after the wire codec (n + LOSS_ELEMS) */
    int64_t syncs;                 /* syncs this run took part in */
    float inner_loss;              /* the last inner step's loss (ours alone) */
};

typedef struct loop_state {
    const struct dl_collab_train_options *o;
    struct dl_loop_policy policy;
    dl_net *net;
    dl_collab *collab;
    dl_state_donor *donor;
    const dl_trainer_backend *be;  /* NULL: auxiliary peer */
    struct dl_collab_train_result *res;
    struct loop_model model;
    struct loop_accum accum;
    struct loop_counters count;
    struct loop_swarm swarm;
    struct loop_delayed delayed;
    struct loop_early early;
    struct loop_report report;
    struct loop_local local;
} loop_state;

static inline bool loop_stopping(const loop_state *st) { return st->o->base.stop && *st->o->base.stop; }

/* Our samples at this epoch not yet averaged: the accumulation, and a failed
 * delayed round's gradient kept for the next round. */
static inline int64_t loop_local_samples(const loop_state *st) {
    return st->accum.acc.samples + st->delayed.carry.samples;
}

static inline void loop_nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- train_round.c ---- */
int64_t loop_round_vector(loop_state *st, float *vec);
void loop_clear_accumulation(loop_state *st);
void loop_round_options(const loop_state *st, int64_t local, size_t expected, struct dl_avg_options *ao);
void loop_corrupt_hook(loop_state *st);
int loop_finish_round(loop_state *st, struct dl_avg_result *r, float *vec, int64_t local, double t0, bool clear);
void loop_guard_moments(loop_state *st, const struct dl_avg_result *r);
int loop_round_and_step(loop_state *st, size_t expected, bool alone);

/* ---- train_round_delayed.c ---- */
int loop_start_delayed_round(loop_state *st, size_t expected);
int loop_finish_delayed_round(loop_state *st);

/* ---- train_round_early.c ---- */
int loop_start_early_round(loop_state *st, double estimate);
void loop_early_round_gone(loop_state *st);
void loop_abandon_early(loop_state *st);
int loop_hand_over_early(loop_state *st, size_t expected, bool alone);

/* ---- train_state.c ---- */
int loop_publish_record(loop_state *st);
int loop_publish_state(loop_state *st);
int loop_save_checkpoint(loop_state *st);
int loop_mark_data(loop_state *st);
int loop_download(loop_state *st, const struct dl_swarm_look *look, const char *why);
void loop_heal(loop_state *st, const struct dl_swarm_look *look);
int loop_epoch_sybil(loop_state *st);

/* ---- train_local.c ---- */
/* out = (outer - local) + residual: what a sync sends uncompressed. */
void dl_local_pseudo_gradient(size_t n, const float *outer, const float *local, const float *residual, float *out);
/* residual = ((outer - local) + residual) - sent: what the codec did not
 * carry, for the next sync (call before the outer weights move). */
void dl_local_residual_update(size_t n, const float *outer, const float *local, float *residual, const float *sent);
int loop_local_init(loop_state *st, const dl_opt_config *inner_config, const dl_checkpoint *resume);
void loop_local_free(loop_state *st);
int loop_local_inner_step(loop_state *st, float *grad, const dl_losses *losses);
int64_t loop_local_round_vector(loop_state *st, float *vec);
void loop_local_prefill_sent(loop_state *st, const float *vec);
void loop_local_before_outer_step(loop_state *st);
void loop_local_after_outer_step(loop_state *st);
int loop_local_restart(loop_state *st);
void loop_local_checkpoint(const loop_state *st, dl_checkpoint *ck);
struct cJSON;
void loop_local_report(const loop_state *st, struct cJSON *o);

/* ---- train_report.c ---- */
void loop_log_batch(loop_state *st);
void loop_log_event(loop_state *st, enum dl_train_event event, const char *detail);
void loop_log_start(loop_state *st, bool resumed, const char *data, int64_t data_skipped);
void loop_log_step(loop_state *st, const struct dl_avg_result *r, const dl_opt_step_info *info, const float *losses,
                   double group_samples, int64_t local_samples, double wall_s);
void loop_publish_metrics(loop_state *st, const float *losses, int64_t local_samples, double wall_s);
void loop_progress_line(loop_state *st, const float *losses, double sps, size_t members);

#endif
