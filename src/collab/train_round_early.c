/* Matchmaking ahead of the ETA, in exact mode (the step loop,
 * train_loop_internal.h).
 *
 * Matchmaking takes seconds in which a peer that waits for it computes
 * nothing. So in exact mode the round of our epoch starts on its own thread
 * once the swarm's ETA to the target is within reach (dl_loop_early_due),
 * its join carrying an estimate of our samples; the micro-batches go on, and when the
 * accumulation ends (dl_loop_ready) our vector and its real weight are handed
 * over and the loop waits for the average and steps exactly as a plain
 * round would: the weight that counts travels in the chunk headers, so the
 * step's bits are those of a round started at that moment with the same
 * members. An early round that fails before the handoff never read our
 * vector: the plain round follows at once (and no second early one at that
 * epoch). One that fails after it keeps the gradient, as any failed round. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

/* Starts the round of our epoch on its thread, joining with the samples we
 * expect to hold when the accumulation ends. */
int loop_start_early_round(loop_state *st, double estimate) {
    size_t expected = dl_loop_expected_members(&st->policy);
    struct dl_avg_options ao;
    loop_round_options(st, llround(estimate), expected, &ao);
    dl_avg_handoff_init(&st->early.handoff);
    ao.handoff = &st->early.handoff;
    st->early.compute_s = st->report.compute_s;
    st->early.micro = st->count.progress.micro_batches;
    return dl_async_round_start(&st->early.round, st->collab, st->accum.rvec, st->model.n + LOSS_ELEMS, &ao, NULL,
                                NULL);
}

/* The early round ended without our vector (it never read it). */
void loop_early_round_gone(loop_state *st) {
    struct dl_avg_result r;
    int status = dl_async_round_join(&st->early.round, &r);
    char detail[400];
    snprintf(detail, sizeof detail, "matchmaking ahead of the ETA at epoch %" PRId64 " ended without our vector "
             "(%s: %s): the plain round follows", st->model.opt.step, dl_avg_status_name(status), r.reason);
    DL_INFO("collab", "%s", detail);
    loop_log_event(st, DL_TRAIN_EVENT_EARLY_ROUND_FAILED, detail);
    dl_avg_result_free(&r);
    st->early.refused_epoch = st->model.opt.step;
}

/* Leaves a running early round (the swarm moved on, we heal, we stop). */
void loop_abandon_early(loop_state *st) {
    if (!st->early.round.running) return;
    dl_collab_withdraw(st->collab, &st->early.handoff);
    loop_early_round_gone(st);
}

/* The accumulation ended with an early round on: hand our vector over and
 * take its outcome, or run the plain round when it is gone already. */
int loop_hand_over_early(loop_state *st, size_t expected, bool alone) {
    if (!dl_async_round_done(&st->early.round)) {
        int64_t local = loop_round_vector(st, st->accum.rvec);
        if (local < 0) {
            loop_abandon_early(st);
            return -1;
        }
        double t0 = dl_now();
        double overlap = st->report.compute_s - st->early.compute_s;
        int64_t micro = st->count.progress.micro_batches - st->early.micro;
        if (!dl_collab_hand_over(st->collab, &st->early.handoff, (double)local)) {
            struct dl_avg_result r;
            dl_async_round_join(&st->early.round, &r);
            st->count.micro_since_round = 0;
            st->early.overlap_s = overlap;
            st->early.overlap_micro = micro;
            int rc = loop_finish_round(st, &r, st->accum.rvec, local, t0, true);
            st->early.overlap_s = 0;
            st->early.overlap_micro = 0;
            if (rc == 0) st->early.refused_epoch = st->model.opt.step;
            return rc < 0 ? -1 : 0;
        }
    }
    loop_early_round_gone(st);
    return loop_round_and_step(st, expected, alone) < 0 ? -1 : 0;
}
