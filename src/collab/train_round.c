/* A round at our epoch and the step after it (the step loop,
 * train_loop_internal.h): the vector we send (our mean gradient and
 * losses), the round's options, and its outcome: the optimizer step, the new
 * record and the log lines when it succeeded, the gradient kept when it
 * failed. The delayed and early rounds end here too. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

/* Test hook (only the test builds' CLI sets it): replaces the gradient
 * elements of our contribution with an attack; the loss elements after them
 * stay honest. The noise is drawn from the epoch and our peer id, so a rerun
 * repeats it. */
static void attack_gradient(const loop_state *st, float *vec) {
    if (st->o->test_attack == DL_TEST_ATTACK_SIGN_FLIP) {
        for (size_t i = 0; i < st->model.n; i++) vec[i] *= -1000.0f;
        return;
    }
    uint64_t x = dl_hash64(dl_net_peer_id(st->net), strlen(dl_net_peer_id(st->net)), (uint64_t)st->model.opt.step);
    for (size_t i = 0; i < st->model.n; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        vec[i] = (float)((double)(z >> 11) * 0x1p-53 * 200.0 - 100.0);
    }
}

/* Centered clip bounds how far each clipped contribution pulls a round,
 * and the ban how many rounds; but LAMB's moments (the second's memory is
 * hundreds of steps) keep the attacked rounds before the ban, and what that
 * does to the rest of the run is the attackers' to aim (collab/swarm_attack:
 * the end loss followed the identities, from within 1% of the clean run's
 * to 34% of its drop; docs/collab_training.md, "The attacked rounds'
 * memory"). So once a round's results make us refuse a peer for its
 * clipped contributions, the moments go back to what they were after the
 * last round whose results clipped nobody. Every member that applied the
 * same rounds judged them from the same results, holds the same snapshot
 * and refuses in the same round, so the swarm's steps stay bit-identical;
 * the weights keep what the attacked steps did. A member whose snapshot
 * does not come from its own rounds (it downloaded the state or resumed
 * since) keeps its moments: its next step differs from the others', its
 * param_hash disagrees and it takes the swarm's state (loop_heal). */
void loop_guard_moments(loop_state *st, const struct dl_avg_result *r) {
    struct loop_model *m = &st->model;
    if (!m->clean_m || !m->clean_v) return;
    size_t bytes = m->n * sizeof(float);
    if (r->clip_refused) {
        if (!m->clean_valid) {
            DL_WARN("collab", "refused %u peer(s) for clipped contributions; the optimizer's moments stay as they are "
                    "(none of our own from before their rounds: we took the state since)", (unsigned)r->clip_refused);
            return;
        }
        memcpy(m->opt.exp_avg, m->clean_m, bytes);
        memcpy(m->opt.exp_avg_sq, m->clean_v, bytes);
        DL_WARN("collab", "refused %u peer(s) for clipped contributions: the optimizer's moments go back to step %" PRId64
                " (the last round that clipped nobody), dropping what %" PRId64 " clipped round(s) left in them",
                (unsigned)r->clip_refused, m->clean_step, m->opt.step - m->clean_step);
        return;
    }
    for (size_t i = 0; i < sizeof r->clip_judged; i++)
        if (r->clip_judged[i]) return;
    memcpy(m->clean_m, m->opt.exp_avg, bytes);
    memcpy(m->clean_v, m->opt.exp_avg_sq, bytes);
    m->clean_valid = true;
    m->clean_step = m->opt.step;
}

/* Our mean gradient at this epoch and our mean losses into vec (n +
 * LOSS_ELEMS); returns the samples behind them (0 for an aux peer), -1 on
 * an error. The accumulation itself is left as it is. */
int64_t loop_round_vector(loop_state *st, float *vec) {
    size_t n = st->model.n;
    if (!st->be) {
        memset(vec, 0, (n + LOSS_ELEMS) * sizeof(float));
        return 0;
    }
    if (st->local.on) {
        int64_t samples = loop_local_round_vector(st, vec);
        if (samples > 0 && st->o->test_attack != DL_TEST_ATTACK_NONE) attack_gradient(st, vec);
        if (samples > 0) loop_local_prefill_sent(st, vec);
        return samples;
    }
    int64_t cur = st->accum.acc.samples, total = cur + st->delayed.carry.samples;
    if (total <= 0) return dl_fail("no samples accumulated: nothing to average");
    if (cur > 0) {
        if (st->accum.on_device) {
            if (st->be->collect(st->be->ctx, st->accum.ls.scale, cur, vec))
                return dl_fail_context("collecting the gradient");
            if (!dl_all_finite(vec, n))
                return dl_fail("the step's gradient is not finite without loss scaling: the run diverged (lower --lr?)");
        } else if (dl_grad_accum_mean(&st->accum.acc, vec)) {
            return -1;
        }
    }
    if (st->delayed.carry.samples > 0) {
        /* (our new mean x its samples + the kept sum) / all samples */
        const float wc = (float)cur, all = (float)total;
        for (size_t i = 0; i < n; i++) vec[i] = ((cur > 0 ? vec[i] * wc : 0.0f) + st->delayed.carry.sum[i]) / all;
    }
    for (int k = 0; k < LOSS_ELEMS; k++)
        vec[n + k] = (float)((st->accum.loss_sum[k] + st->delayed.carry_loss[k]) / (double)total);
    if (st->o->test_attack != DL_TEST_ATTACK_NONE) attack_gradient(st, vec);
    return total;
}

/* Everything accumulated at this epoch went into a round. */
void loop_clear_accumulation(loop_state *st) {
    dl_grad_accum_reset(&st->accum.acc);
    if (st->delayed.carry.sum) dl_grad_accum_reset(&st->delayed.carry);
    st->accum.device_fresh = true;
    memset(st->accum.loss_sum, 0, sizeof st->accum.loss_sum);
    memset(st->delayed.carry_loss, 0, sizeof st->delayed.carry_loss);
}

void loop_round_options(const loop_state *st, int64_t local, size_t expected, struct dl_avg_options *ao) {
    dl_avg_options_default(ao);
    ao->epoch = (uint64_t)st->model.opt.step;
    ao->weight = (double)local;
    /* Local-steps mode, aux peers too: the pseudo-gradient's codec. */
    ao->compression = st->o->local_steps > 0 ? st->o->outer_compression : st->o->compression;
    ao->sent = st->local.on ? st->local.sent : NULL;
    ao->aggregation = st->o->aggregation;
    ao->clip_tau = st->o->clip_tau;
    ao->clip_iterations = st->o->clip_iterations;
    ao->deadline_s = st->o->round_deadline_s;
    ao->expected_peers = expected;
}

/* Test hook (only the test builds' CLI sets it): self-healing on purpose. */
void loop_corrupt_hook(loop_state *st) {
    if (st->o->corrupt_at_step > 0 && st->model.opt.step == st->o->corrupt_at_step && st->model.has_state) {
        st->model.params[0] += 1e-3f;
        DL_WARN("collab", "test hook: weights perturbed after step %" PRId64, st->model.opt.step);
    }
}

/* The outcome of a round over vec (local samples of ours, started at t0):
 * the step when it succeeded, nothing when it failed. clear: the
 * accumulation went into the round (synchronous rounds); a delayed round
 * cleared it when it started, and the samples drawn since belong to the next
 * step; its optimizer step, hash and snapshot were taken on the round's
 * thread (step_in_background). Takes r. Returns 1 when the step was taken,
 * 0 when the round failed, -1 on a local error. */
int loop_finish_round(loop_state *st, struct dl_avg_result *r, float *vec, int64_t local, double t0, bool clear) {
    const bool stepped = !clear && st->be; /* delayed: already stepped on the round's thread */
    size_t n = st->model.n;
    st->report.bytes_sent += (double)r->bytes_sent;
    if (r->status != DL_AVG_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "round of epoch %" PRId64 " failed (%s: %s): nothing applied, %" PRId64
                 " samples kept for the next round", st->model.opt.step, dl_avg_status_name(r->status), r->reason,
                 local);
        DL_WARN("collab", "%s", detail);
        loop_log_event(st, DL_TRAIN_EVENT_ROUND_FAILED, detail);
        st->res->rounds_failed++;
        /* Its group record, which we verified, says who may have completed
         * the epoch without us: evidence a head count of records is not. */
        dl_group_evidence_note(&st->swarm.group, (uint64_t)st->model.opt.step, r);
        /* Peers killed at our epoch would hold up every round until their
         * records expire: leave out those that cannot be reached. */
        size_t gone = dl_collab_probe_peers(st->collab, (uint64_t)st->model.opt.step);
        if (gone) {
            snprintf(detail, sizeof detail, "%zu peer(s) at epoch %" PRId64 " unreachable: left out of the view", gone,
                     st->model.opt.step);
            loop_log_event(st, DL_TRAIN_EVENT_PEERS_GONE, detail);
        }
        st->res->wait_s += dl_now() - t0;
        st->report.round_s += dl_now() - t0;
        if (!clear && st->be) {
            /* The delayed round's gradient waits for the next round, beside the new micro-batches. */
            dl_grad_accum_add(&st->delayed.carry, vec, local);
            for (int k = 0; k < LOSS_ELEMS; k++) st->delayed.carry_loss[k] = (double)vec[n + k] * (double)local;
            if (dl_net_publish_progress(st->net, (uint64_t)st->model.opt.step, (double)loop_local_samples(st), 0)) {
                dl_avg_result_free(r);
                return -1;
            }
        }
        dl_avg_result_free(r);
        return 0;
    }
    /* The samples the chunk headers carried (what counted), the same on every member. */
    double group = r->total_weight;
    float losses[LOSS_ELEMS];
    memcpy(losses, vec + n, sizeof losses);
    dl_opt_step_info info = {0};
    if (stepped) {
        info = st->delayed.info;
        if (st->be->set_params(st->be->ctx, st->model.params)) {
            dl_avg_result_free(r);
            return dl_fail_context("uploading the weights after step %" PRId64, st->model.opt.step);
        }
    } else if (st->be) {
        if (st->local.on) loop_local_before_outer_step(st);
        if (dl_optimizer_step(&st->model.opt, st->model.params, vec, &info)) {
            dl_avg_result_free(r);
            return -1;
        }
        if (st->local.on) loop_local_after_outer_step(st);
        else loop_guard_moments(st, r);
        loop_corrupt_hook(st);
        if (st->be->set_params(st->be->ctx, st->model.params)) {
            dl_avg_result_free(r);
            return dl_fail_context("uploading the weights after step %" PRId64, st->model.opt.step);
        }
    } else {
        /* An aux peer does not receive the average: it moves to the next
         * epoch without weights until it downloads them. */
        st->model.opt.step++;
        st->model.has_state = false;
    }
    st->count.progress.samples += (int64_t)llround(group);
    if (clear) loop_clear_accumulation(st);
    st->count.ls_at_step = stepped ? st->delayed.ls : st->accum.ls;
    st->count.progress_at_step = st->count.progress;
    if (stepped) {
        /* Applied: the micro-batches up to the round's start, where the
         * stream was marked; those drawn since belong to the next step. */
        st->count.progress_at_step.micro_batches = st->delayed.micro;
    } else if (loop_mark_data(st)) {
        dl_avg_result_free(r);
        return -1;
    }
    st->res->rounds_ok++;
    /* Our state now comes from a round we verified: it votes on the epoch. */
    if (st->model.has_state) dl_net_vouch_epoch(st->net, (uint64_t)st->model.opt.step);
    double now = dl_now(), wall = now - st->report.step_start;
    st->res->wait_s += now - t0;
    st->report.round_s += now - t0;
    if (stepped ? loop_publish_record(st) : loop_publish_state(st)) {
        dl_avg_result_free(r);
        return -1;
    }
    bool has_losses = st->be && group > 0 && isfinite(losses[0]); /* aux peers do not receive the average */
    loop_log_step(st, r, st->model.has_state ? &info : NULL, has_losses ? losses : NULL, group, local, wall);
    loop_publish_metrics(st, has_losses ? losses : NULL, local, wall);
    loop_progress_line(st, has_losses ? losses : NULL, wall > 0 ? group / wall : 0, r->num_members);
    if (has_losses) {
        if (st->res->base.steps_this_run == 0) st->res->base.first_loss = losses[0];
        st->res->base.last_loss = losses[0];
    }
    st->res->base.steps_this_run++;
    st->report.step_start = now;
    st->report.compute_s = 0;
    st->swarm.prev_wait_until = now + 3;
    dl_avg_result_free(r);
    const dl_trainer_options *o = &st->o->base;
    if (o->save_every > 0 && st->model.opt.step % o->save_every == 0 && st->model.opt.step < o->max_steps &&
        loop_save_checkpoint(st))
        return -1;
    return 1;
}

/* One averaging round at our epoch and, when it succeeds, the step (see
 * loop_finish_round for the result). */
int loop_round_and_step(loop_state *st, size_t expected, bool alone) {
    int64_t local = loop_round_vector(st, st->accum.grad);
    if (local < 0) return -1;
    struct dl_avg_options ao;
    loop_round_options(st, local, expected, &ao);
    struct dl_avg_result r;
    double t0 = dl_now();
    if (alone) {
        /* Nobody else in the swarm: the average is our own gradient, and
         * matchmaking would only wait out its window for joiners. */
        memset(&r, 0, sizeof r);
        r.members = dl_calloc(1, sizeof *r.members);
        if (!r.members) return -1;
        r.num_members = 1;
        snprintf(r.members[0].peer_id, sizeof r.members[0].peer_id, "%s", dl_net_peer_id(st->net));
        r.members[0].weight = ao.weight;
        r.members[0].role = st->be ? DL_MEMBER_TRAINER : DL_MEMBER_AUX;
        r.total_weight = ao.weight;
        r.status = DL_AVG_OK;
    } else {
        dl_collab_average(st->collab, st->accum.grad, st->model.n + LOSS_ELEMS, &ao, &r);
        if (r.status == DL_AVG_OK) dl_mm_history_note(&st->swarm.mm, r.matchmaking_s);
    }
    st->count.micro_since_round = 0;
    return loop_finish_round(st, &r, st->accum.grad, local, t0, true);
}
