/* The DeDLOC step loop of one peer (include/dedloc/collab.h, "collaborative
 * training"): accumulate, publish progress, average with the ready peers at
 * our epoch, step on the host, publish the new param hash and state. A peer
 * behind the swarm or disagreeing with it downloads the state. This file is
 * the loop itself (join the swarm, draw micro-batches, act on the decisions
 * of train_decide.c); train_loop_internal.h lists where the rest lives. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

void dl_collab_train_options_default(struct dl_collab_train_options *o) {
    memset(o, 0, sizeof *o);
    o->base.target_batch = 4096;
    o->base.max_steps = 125000;
    o->join_wait_s = 5;
    o->round_deadline_s = 60;
    o->state_every = 1;
    o->linger_s = 2;
    struct dl_avg_options avg;
    dl_avg_options_default(&avg);
    o->aggregation = avg.aggregation;
    o->clip_tau = avg.clip_tau;
    o->clip_iterations = avg.clip_iterations;
    o->outer_lr = 0.7;       /* DiLoCo's outer Nesterov step */
    o->outer_momentum = 0.9;
}

/* One micro-batch into the device's sum (no loss scaling: a non-finite loss
 * cannot be taken back out of the sum, and in fp32 it means divergence). */
static int micro_batch_on_device(loop_state *st, int *samples, dl_losses *losses) {
    if (st->be->accumulate(st->be->ctx, st->accum.device_fresh, st->accum.ls.scale, samples, losses))
        return dl_fail_context("micro-batch %" PRId64, st->count.progress.micro_batches);
    st->accum.device_fresh = false;
    if (!isfinite(losses->loss))
        return dl_fail("micro-batch %" PRId64 " gave a non-finite loss without loss scaling: the run diverged "
                       "(lower --lr?)", st->count.progress.micro_batches);
    dl_loss_scale_update(&st->accum.ls, true); /* counts the clean micro-batch, as the host path does */
    return 0;
}

/* One micro-batch into the accumulator (dropped when not finite). */
static int micro_batch(loop_state *st) {
    int samples = 0;
    dl_losses losses = {0};
    double t0 = dl_now();
    bool use;
    if (st->accum.on_device) {
        if (micro_batch_on_device(st, &samples, &losses)) return -1;
        use = true;
    } else {
        if (st->be->micro_batch(st->be->ctx, st->accum.ls.scale, st->accum.grad, &samples, &losses))
            return dl_fail_context("micro-batch %" PRId64, st->count.progress.micro_batches);
        bool finite = dl_all_finite(st->accum.grad, st->model.n) && isfinite(losses.loss);
        use = dl_loss_scale_update(&st->accum.ls, finite);
        /* Local-steps mode: every micro-batch is an inner step. */
        if (use && st->local.on && samples > 0 && loop_local_inner_step(st, st->accum.grad, &losses)) return -1;
    }
    loop_log_batch(st);
    st->count.progress.micro_batches++;
    st->count.micro_since_round++;
    if (use) {
        if (samples <= 0) return dl_fail("the backend returned a micro-batch of %d samples", samples);
        st->report.samples_computed += samples;
        if (st->accum.on_device || st->local.on) st->accum.acc.samples += samples;
        else dl_grad_accum_add(&st->accum.acc, st->accum.grad, samples);
        st->accum.loss_sum[0] += (double)losses.loss * samples;
        st->accum.loss_sum[1] += (double)losses.mlm_loss * samples;
        st->accum.loss_sum[2] += (double)losses.sop_loss * samples;
    }
    /* Deterministic shares: micro-batch k of the stream belongs to peer k mod count. */
    if (st->o->shard_count > 1 && st->be->skip(st->be->ctx, st->o->shard_count - 1))
        return dl_fail_context("skipping the other peers' micro-batches");
    /* The stream keeps a copy of every batch drawn since its mark (its
     * state at the mark is saved from them). Rounds that keep failing would
     * let that grow without end: past the limit the mark moves here, and
     * checkpoints go without a position until the next step. */
    int64_t drawn = (st->count.progress.micro_batches - st->count.mark_micro) *
                    (st->o->shard_count > 1 ? st->o->shard_count : 1);
    if (st->be->mark_data && drawn > MARK_RETAIN_LIMIT) {
        DL_WARN("collab", "%" PRId64 " micro-batches without a step: the data stream's position is no longer "
                "kept for checkpoints until the next one (a resume then re-reads the stream)",
                st->count.progress.micro_batches - st->count.progress_at_step.micro_batches);
        if (loop_mark_data(st)) return -1;
    }
    double dt = dl_now() - t0;
    st->count.micro_s = st->count.micro_s > 0 ? 0.7 * st->count.micro_s + 0.3 * dt : dt;
    st->count.micro_samples = samples;
    st->report.compute_s += dt;
    st->res->compute_s += dt;
    /* While a delayed round runs our record keeps saying what we brought to
     * it: these samples belong to the next epoch, published once we are there. */
    if (st->delayed.round.running) return 0;
    double rate = (double)loop_local_samples(st) / fmax(dl_now() - st->report.step_start, 1e-3);
    return dl_net_publish_progress(st->net, (uint64_t)st->model.opt.step, (double)loop_local_samples(st), rate);
}

/* Waits (bounded) until `want` peers are at our epoch. */
static void wait_for_peers(loop_state *st, size_t want, double timeout_s) {
    double until = dl_now() + timeout_s;
    while (dl_now() < until && !loop_stopping(st)) {
        struct dl_swarm_look look;
        if (!dl_swarm_look(st->net, st->collab, (uint64_t)st->model.opt.step, NULL, 0, NULL, &look) &&
            look.at_epoch + look.refused >= want)
            return;
        loop_nap(0.02);
    }
}

/* At start: find the swarm, then take its state when it is ahead of us.
 * 0 once that is done (or there is no swarm to find), 1 when stopped
 * before, -1 on an error. */
static int join_swarm(loop_state *st) {
    double until = dl_now() + st->o->join_wait_s;
    size_t want = st->o->min_peers > 1 ? st->o->min_peers : 2;
    double min_wait_until = st->o->min_peers > 1 ? dl_now() + 600 : until;
    for (;;) {
        if (loop_stopping(st)) return 1;
        struct dl_swarm_look look;
        if (dl_swarm_look(st->net, st->collab, (uint64_t)st->model.opt.step,
                          st->model.has_state ? st->model.hash : NULL, 0, NULL, &look))
            return -1;
        bool ahead = look.ahead_epoch > (uint64_t)st->model.opt.step;
        if (ahead || (look.peers >= want && look.has_ref && look.hashes_at_ref > (st->model.has_state ? 1u : 0u))) {
            if (ahead || look.i_disagree || !st->model.has_state)
                if (loop_download(st, &look, ahead ? "the swarm is ahead of us" : "joining the swarm")) {
                    loop_nap(0.5);
                    continue;
                }
            if (look.peers >= want) return 0;
        }
        double now = dl_now();
        if (now >= until && (st->o->min_peers <= 1 || now >= min_wait_until)) return 0;
        if (look.peers >= want && now >= until) return 0;
        loop_nap(0.05);
    }
}

/* The loop's counters as they stand now, for the decisions. */
static struct dl_loop_counters counters_now(const loop_state *st) {
    return (struct dl_loop_counters){
        .epoch = st->model.opt.step,
        .local_samples = loop_local_samples(st),
        .micro_since_round = st->count.micro_since_round,
        .micro_s = st->count.micro_s,
        .micro_samples = st->count.micro_samples,
        .has_state = st->model.has_state,
        .last_state_epoch = st->model.last_state_epoch,
        .early_running = st->early.round.running,
        .early_refused_epoch = st->early.refused_epoch,
        .now = dl_now(),
        .prev_wait_until = st->swarm.prev_wait_until,
    };
}

static int run_loop(loop_state *st) {
    const dl_trainer_options *o = &st->o->base;
    while (st->model.opt.step < o->max_steps) {
        if (loop_stopping(st)) {
            st->res->base.interrupted = true;
            break;
        }
        if (o->max_seconds > 0 && dl_now() - st->report.run_start >= o->max_seconds &&
            st->res->base.steps_this_run > 0) {
            st->res->base.time_limit = true;
            break;
        }
        if (st->delayed.round.running) {
            /* A delayed round is on: compute for the next step (none is
             * left after the last) and step once it returns. */
            if (dl_async_round_done(&st->delayed.round)) {
                if (loop_finish_delayed_round(st) < 0) return -1;
            } else if (st->delayed.epoch + 1 >= o->max_steps) {
                loop_nap(0.01);
            } else if (micro_batch(st)) {
                return -1;
            }
            continue;
        }
        struct dl_swarm_look look;
        if (dl_swarm_look(st->net, st->collab, (uint64_t)st->model.opt.step,
                          st->model.has_state ? st->model.hash : NULL, (double)loop_local_samples(st),
                          &st->swarm.group, &look))
            return -1;
        if (st->early.round.running && dl_async_round_done(&st->early.round)) {
            loop_early_round_gone(st);
            continue;
        }
        const struct dl_loop_counters counters = counters_now(st);
        switch (dl_loop_sync_decide(&st->policy, &counters, &look)) {
        case DL_LOOP_SYNC_CATCH_UP:
            loop_abandon_early(st);
            if (loop_download(st, &look, "the swarm moved on")) loop_nap(0.2);
            continue;
        case DL_LOOP_SYNC_FOLLOW_EPOCH:
            /* An aux peer between downloads follows the epoch only. */
            loop_abandon_early(st);
            st->model.opt.step = (int64_t)look.ahead_epoch;
            st->model.has_state = false;
            if (loop_publish_state(st)) return -1;
            continue;
        case DL_LOOP_SYNC_REFRESH_AUX:
            if (loop_download(st, &look, "aux peer refreshing its state")) loop_nap(0.2);
            continue;
        case DL_LOOP_SYNC_HEAL:
            loop_abandon_early(st);
            loop_heal(st, &look);
            continue;
        case DL_LOOP_SYNC_NONE:
            break;
        }
        enum dl_loop_readiness ready = dl_loop_ready(&st->policy, &counters, &look);
        if (ready == DL_LOOP_WAIT_PREVIOUS) {
            loop_nap(0.02);
            continue;
        }
        if (ready == DL_LOOP_READY) {
            size_t expected = dl_loop_expected_members(&st->policy);
            if (expected > 0) wait_for_peers(st, st->o->min_peers, fmin(10, st->o->round_deadline_s / 3));
            bool alone = look.peers <= 1 && expected <= 1;
            switch (dl_loop_round_kind(&st->policy, st->early.round.running, alone)) {
            case DL_LOOP_ROUND_HAND_OVER:
                if (loop_hand_over_early(st, expected, alone)) return -1;
                break;
            case DL_LOOP_ROUND_DELAYED:
                if (loop_start_delayed_round(st, expected)) return -1;
                break;
            case DL_LOOP_ROUND_PLAIN:
                if (loop_round_and_step(st, expected, alone) < 0) return -1;
                break;
            }
            continue;
        }
        if (st->be) {
            double estimate;
            if (dl_loop_early_due(&st->policy, &counters, &look, dl_loop_early_lead(&st->swarm.mm), &estimate) &&
                loop_start_early_round(st, estimate))
                return -1;
            if (micro_batch(st)) return -1;
        } else {
            if (st->count.micro_since_round == 0) st->count.micro_since_round = 1;
            loop_nap(0.05);
        }
    }
    loop_abandon_early(st);
    /* Stopped with a delayed round on: its step is the others' too. */
    if (st->delayed.round.running && loop_finish_delayed_round(st) < 0) return -1;
    return 0;
}

/* Brings the data stream to our position: micro-batch k of the stream is
 * ours when k mod shard_count is our shard index, so after m micro-batches
 * of ours the stream stands at m * shard_count + shard_index. A stream
 * opened at a checkpoint's recorded position is there already; otherwise
 * (a checkpoint without one, or one the CLI could not use) it is re-read.
 * Then marks it: the position a checkpoint records until the first step.
 * Returns the batches re-read, -1 on an error. */
static int64_t stream_start(const dl_trainer_backend *be, const struct dl_collab_train_options *o,
                            const dl_checkpoint *resume, const char **how) {
    int64_t ours = resume ? resume->progress.micro_batches : 0, skip = 0;
    if (resume && be->data_resumed) {
        *how = "seek";
        DL_INFO("collab", "data stream reopened at the checkpoint's position (after our micro-batch %" PRId64
                "): nothing re-read", ours);
    } else {
        int64_t count = o->shard_count > 1 ? o->shard_count : 1;
        skip = ours * count + (o->shard_count > 1 ? o->shard_index : 0);
        if (ours > 0)
            DL_WARN("collab", "the checkpoint's data position is not used (none recorded, --replay-data, or the "
                    "stream changed): re-reading %" PRId64 " batches of the stream to get back to ours (after our "
                    "micro-batch %" PRId64 ")", skip, ours);
        if (skip > 0 && be->skip(be->ctx, skip)) {
            dl_fail_context("bringing the data stream to this peer's position (%" PRId64 " batches)", skip);
            return -1;
        }
    }
    if (be->mark_data && be->mark_data(be->ctx)) {
        dl_fail_context("marking the data stream's position");
        return -1;
    }
    return ours > 0 ? skip : 0;
}

int dl_collab_train_run(dl_net *net, dl_collab *collab, dl_state_donor *donor,
                        const struct dl_collab_train_options *o, const dl_opt_config *opt_config,
                        const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                        const dl_trainer_backend *be, struct dl_collab_train_result *res) {
    memset(res, 0, sizeof *res);
    if (o->base.target_batch <= 0) return dl_fail("the target batch must be positive");
    loop_state st = {.o = o, .net = net, .collab = collab, .donor = donor, .be = be, .res = res,
                     .model = {.n = layout->total, .params = params, .has_state = true}};
    const bool local = o->local_steps > 0;
    if (resume && (resume->local.params != NULL) != local)
        return dl_fail("the checkpoint is of %s mode and this run of %s mode: resume it in its own mode (or start "
                       "a new checkpoint folder)", resume->local.params ? "local-steps" : "exact",
                       local ? "local-steps" : "exact");
    /* Local-steps mode: st.model.opt is the outer optimizer, opt_config the inner one's. */
    dl_opt_config outer = dl_opt_config_outer(o->outer_lr, o->outer_momentum);
    const dl_opt_config *cfg = resume ? &resume->opt_config : local ? &outer : opt_config;
    if (dl_optimizer_init(&st.model.opt, cfg, layout)) return -1;
    int rc = -1;
    st.accum.grad = dl_malloc(dl_mul_size(st.model.n + LOSS_ELEMS, sizeof(float)));
    if (!st.accum.grad || dl_grad_accum_init(&st.accum.acc, st.model.n)) goto done;
    /* One download per round where the backend sums on the device; not with
     * loss scaling, where an overflowing micro-batch must be dropped alone. */
    st.accum.on_device = be && be->accumulate && be->collect && !o->base.loss_scaling && !local;
    st.accum.device_fresh = true;
    dl_loop_policy_init(&st.policy, o, be != NULL);
    st.early.refused_epoch = -1;
    if (st.policy.delayed || st.policy.early_on) {
        st.accum.rvec = dl_malloc(dl_mul_size(st.model.n + LOSS_ELEMS, sizeof(float)));
        if (!st.accum.rvec || (st.policy.delayed && dl_grad_accum_init(&st.delayed.carry, st.model.n))) goto done;
    }
    dl_loss_scale_init(&st.accum.ls, o->base.loss_scaling);
    st.count.progress.data_seed = o->base.data_seed;
    st.count.progress.peer_seed = o->base.peer_seed;
    if (resume) {
        if (dl_checkpoint_restore_optimizer(resume, &st.model.opt)) goto done;
        memcpy(params, resume->params, st.model.n * sizeof(float));
        st.accum.ls = resume->loss_scale;
        st.count.progress = resume->progress;
    }
    if (local && be && loop_local_init(&st, resume ? &resume->local.inner_config : opt_config, resume)) goto done;
    if (be && !local && !st.policy.delayed && o->aggregation == DL_AGG_CENTERED_CLIP && collab &&
        dl_collab_bans_clipped(collab)) {
        /* Moments to go back to when a round refuses a clipped peer: a fresh
         * run's (zero) are every starter's; a resumed run has none of its own
         * history until its first round that clips nobody. Not with
         * --clip-ban-rounds 0: no round refuses anyone, and the copy after
         * each clean round (8 bytes a parameter) would serve nothing. */
        size_t bytes = dl_mul_size(st.model.n, sizeof(float));
        st.model.clean_m = dl_malloc(bytes);
        st.model.clean_v = dl_malloc(bytes);
        if (!st.model.clean_m || !st.model.clean_v) goto done;
        memcpy(st.model.clean_m, st.model.opt.exp_avg, bytes);
        memcpy(st.model.clean_v, st.model.opt.exp_avg_sq, bytes);
        st.model.clean_valid = !resume;
        st.model.clean_step = st.model.opt.step;
    }
    const char *data_how = resume ? "replay" : "fresh";
    int64_t skipped = 0;
    if (be && (skipped = stream_start(be, o, resume, &data_how)) < 0) goto done;
    st.count.mark_micro = st.count.progress.micro_batches;
    if (o->base.log_path && !(st.report.log = fopen(o->base.log_path, "a"))) {
        dl_fail("cannot open the log %s for appending", o->base.log_path);
        goto done;
    }
    if (be && be->set_params(be->ctx, st.local.on ? st.local.params : params)) {
        dl_fail_context("uploading the weights");
        goto done;
    }
    st.model.last_state_epoch = (uint64_t)st.model.opt.step;
    st.count.ls_at_step = st.accum.ls;
    if (loop_publish_state(&st)) goto done;
    loop_log_start(&st, resume != NULL, data_how, skipped);
    st.count.progress_at_step = st.count.progress;
    st.report.run_start = dl_now();
    int joined = join_swarm(&st);
    if (joined < 0) goto done;
    st.report.joined = joined == 0;
    if (joined == 0 && o->test_attack == DL_TEST_ATTACK_EPOCH_SYBIL) {
        rc = loop_epoch_sybil(&st);
        goto done;
    }
    st.report.step_start = dl_now();
    if (run_loop(&st)) goto done;
    /* The state after the last complete step (a partial accumulation is
     * dropped; it was never averaged). Stopped while still looking for the
     * swarm, we hold our initial weights (or the checkpoint we resumed):
     * nothing worth a checkpoint. */
    if (!st.report.joined) {
        res->stopped_joining = true;
        DL_INFO("collab", "stopped before the swarm's state arrived: no checkpoint written");
    } else if (loop_save_checkpoint(&st)) {
        goto done;
    }
    rc = 0;
    if (!loop_stopping(&st)) {
        /* Late members may still fetch our results or our state. */
        double until = dl_now() + o->linger_s;
        while (dl_now() < until && !loop_stopping(&st)) {
            struct dl_swarm_look look;
            if (st.model.has_state &&
                !dl_swarm_look(net, collab, (uint64_t)st.model.opt.step, st.model.hash, 0, NULL, &look) &&
                look.ref_epoch == (uint64_t)st.model.opt.step && dl_loop_heal_due(&look))
                loop_heal(&st, &look);
            loop_nap(0.05);
        }
    }
done:
    res->base.steps = st.model.opt.step;
    /* Our own samples over the time we were busy with them: computing and
     * averaging. progress.samples counts the whole swarm's (a state
     * download sets it to the donor's), and the time looking for the
     * swarm or downloading is not ours to rate. */
    double active_s = res->compute_s + st.report.round_s;
    res->base.samples_per_second = active_s > 0 ? (double)st.report.samples_computed / active_s : 0;
    dl_hash64_hex(dl_hash64(params, st.model.n * sizeof(float), 0), res->base.param_hash);
    uint8_t h[32];
    dl_collab_param_hash(params, st.model.n, h);
    dl_collab_hash_hex(h, res->param_hash);
    loop_abandon_early(&st);
    if (st.delayed.round.running) {
        /* Left on an error: the round still uses rvec until it returns. */
        struct dl_avg_result r;
        dl_async_round_join(&st.delayed.round, &r);
        dl_avg_result_free(&r);
    }
    if (st.report.log) fclose(st.report.log);
    dl_grad_accum_free(&st.accum.acc);
    dl_grad_accum_free(&st.delayed.carry);
    free(st.accum.rvec);
    free(st.accum.grad);
    dl_optimizer_free(&st.model.opt);
    free(st.model.clean_m);
    free(st.model.clean_v);
    loop_local_free(&st);
    return rc;
}
