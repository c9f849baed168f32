/* Delayed update (--delay-update; the step loop, train_loop_internal.h):
 * the round of step E runs on a thread of its own, the optimizer step after
 * it too, while the loop draws the micro-batches of step E+1 from the weights
 * before that step. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

/* Delayed update, on the round's thread once the average is in: the
 * optimizer step, the new hash and the state snapshot, so that none of it
 * stands in the way of the micro-batches. It touches only what the main
 * thread leaves alone while a round runs (params, opt, hash, rvec, the
 * donor, progress.samples); the main thread uploads the weights and
 * publishes the record when it joins. */
static int step_in_background(void *user, const struct dl_avg_result *r) {
    loop_state *st = user;
    memset(&st->delayed.info, 0, sizeof st->delayed.info);
    if (dl_optimizer_step(&st->model.opt, st->model.params, st->accum.rvec, &st->delayed.info)) goto fail;
    loop_corrupt_hook(st);
    dl_collab_param_hash(st->model.params, st->model.n, st->model.hash);
    int64_t samples = st->count.progress.samples + llround(r->total_weight);
    if (dl_train_state_publish(st->donor, &st->model.opt, st->model.params, samples, &st->delayed.ls))
        goto fail;
    return 0;
fail:
    snprintf(st->delayed.error, sizeof st->delayed.error, "%s", dl_error());
    return -1;
}

/* Delayed update: the round of our epoch starts on its own thread over our
 * gradient so far, and the micro-batches go on for the next step. */
int loop_start_delayed_round(loop_state *st, size_t expected) {
    int64_t local = loop_round_vector(st, st->accum.rvec);
    if (local < 0) return -1;
    struct dl_avg_options ao;
    loop_round_options(st, local, expected, &ao);
    st->delayed.ls = st->accum.ls;
    st->delayed.epoch = st->model.opt.step;
    st->delayed.micro = st->count.progress.micro_batches;
    if (loop_mark_data(st)) return -1; /* ahead of what is applied until the round succeeds */
    loop_clear_accumulation(st);
    st->delayed.local = local;
    st->count.micro_since_round = 0;
    return dl_async_round_start(&st->delayed.round, st->collab, st->accum.rvec, st->model.n + LOSS_ELEMS, &ao,
                                step_in_background, st);
}

/* The delayed round has returned: take its step (or keep its gradient) now. */
int loop_finish_delayed_round(loop_state *st) {
    struct dl_avg_result r;
    int status = dl_async_round_join(&st->delayed.round, &r);
    if (status == DL_AVG_OK && st->delayed.round.after_rc) {
        dl_avg_result_free(&r);
        return dl_fail("the step after the round of epoch %" PRId64 ": %s", st->delayed.epoch, st->delayed.error);
    }
    /* The round ran beside compute: only the time since it returned was waiting. */
    return loop_finish_round(st, &r, st->accum.rvec, st->delayed.local, dl_now(), false);
}
