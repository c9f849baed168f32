/* The step loop's decisions (collab/train_decide.h): what the loop does next
 * follows from the settings, one look at the swarm and the loop's counters. */
#include <math.h>
#include <string.h>

#include "collab/train_decide.h"

void dl_loop_policy_init(struct dl_loop_policy *p, const struct dl_collab_train_options *o, bool has_backend) {
    memset(p, 0, sizeof *p);
    p->aux = !has_backend;
    p->local_steps = o->local_steps > 0 ? o->local_steps : 0;
    p->sync_micro_batch = o->sync_micro_batch;
    /* Local-steps mode syncs rarely: neither overlap pays for its complexity there. */
    p->delayed = o->delay_update && has_backend && !p->local_steps;
    p->early_on = has_backend && !p->delayed && !p->local_steps;
    p->target_batch = o->base.target_batch;
    p->local_batch = o->local_batch;
    p->min_peers = o->min_peers;
    p->round_deadline_s = o->round_deadline_s;
    p->state_every = o->state_every;
}

double dl_loop_sync_target(const struct dl_loop_policy *p, const struct dl_loop_counters *c,
                           const struct dl_swarm_look *look) {
    if (!p->local_steps) return (double)p->target_batch;
    double micro = p->sync_micro_batch > 0 ? (double)p->sync_micro_batch : (double)c->micro_samples;
    /* An aux peer that was not told the micro-batch has no inner step of its own to measure. */
    if (!(micro > 0)) return (double)p->target_batch;
    return (double)p->local_steps * micro * (double)(look->peers > 1 ? look->peers : 1);
}

static bool accumulation_done(const struct dl_loop_policy *p, const struct dl_loop_counters *c,
                              const struct dl_swarm_look *look) {
    if (p->aux) return c->micro_since_round > 0 && look->collective >= dl_loop_sync_target(p, c, look);
    if (c->local_samples <= 0 || c->micro_since_round == 0) return false;
    if (p->local_batch > 0) return c->local_samples >= p->local_batch;
    return look->collective >= dl_loop_sync_target(p, c, look);
}

enum dl_loop_readiness dl_loop_ready(const struct dl_loop_policy *p, const struct dl_loop_counters *c,
                                     const struct dl_swarm_look *look) {
    if (!accumulation_done(p, c, look)) return DL_LOOP_NOT_READY;
    if (look->at_previous > 0 && c->now < c->prev_wait_until) return DL_LOOP_WAIT_PREVIOUS;
    return DL_LOOP_READY;
}

size_t dl_loop_expected_members(const struct dl_loop_policy *p) {
    return p->local_batch > 0 && p->min_peers > 1 ? p->min_peers : 0;
}

enum dl_loop_round_kind dl_loop_round_kind(const struct dl_loop_policy *p, bool early_running, bool alone) {
    if (early_running) return DL_LOOP_ROUND_HAND_OVER;
    if (p->delayed && !alone) return DL_LOOP_ROUND_DELAYED;
    return DL_LOOP_ROUND_PLAIN;
}

void dl_mm_history_note(struct dl_mm_history *h, double seconds) {
    if (!(seconds >= 0) || !isfinite(seconds)) return;
    h->recent[h->count % DL_LOOP_MM_RECENT] = seconds;
    h->count++;
}

double dl_loop_early_lead(const struct dl_mm_history *h) {
    size_t k = h->count < DL_LOOP_MM_RECENT ? h->count : DL_LOOP_MM_RECENT;
    if (!k) return 1.5;
    double v[DL_LOOP_MM_RECENT];
    memcpy(v, h->recent, k * sizeof *v);
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    double median = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
    return fmax(1.0, median + 0.5);
}

bool dl_loop_early_due(const struct dl_loop_policy *p, const struct dl_loop_counters *c,
                       const struct dl_swarm_look *look, double lead, double *estimate) {
    if (!p->early_on || c->early_running || c->early_refused_epoch == c->epoch || !(c->micro_s > 0) ||
        c->micro_samples <= 0 || look->peers <= 1)
        return false;
    if (look->at_previous > 0 && c->now < c->prev_wait_until) return false;
    double local = (double)c->local_samples, my_rate = c->micro_samples / c->micro_s, eta;
    if (p->local_batch > 0) {
        if (p->min_peers > 1 && look->at_epoch + look->refused < p->min_peers) return false;
        eta = ((double)p->local_batch - local) / my_rate;
    } else {
        if (!(look->samples_per_second > 0)) return false;
        eta = ((double)p->target_batch - look->collective) / look->samples_per_second;
    }
    double stall = fmax(1.0, p->round_deadline_s / 6);
    double reach = fmin(lead + c->micro_s, 0.8 * stall);
    if (!(eta < reach)) return false;
    *estimate = fmax(local, local + fmax(eta, 0) * my_rate);
    return true;
}

bool dl_loop_heal_due(const struct dl_swarm_look *look) {
    if (!look->i_disagree || look->at_previous > 0) return false;
    /* dl_swarm_look names a reference only when a strict majority holds it;
     * checked again here because a heal is where a wrong reference costs:
     * a tie or a plurality never moves a peer off its own weights. */
    return 2 * look->ref_holders > look->hashes_at_ref && look->ref_holders > look->my_holders;
}

enum dl_loop_sync_action dl_loop_sync_decide(const struct dl_loop_policy *p, const struct dl_loop_counters *c,
                                             const struct dl_swarm_look *look) {
    if (look->ahead_epoch > (uint64_t)c->epoch)
        return !p->aux || look->ahead_epoch >= c->last_state_epoch + (uint64_t)p->state_every
                   ? DL_LOOP_SYNC_CATCH_UP
                   : DL_LOOP_SYNC_FOLLOW_EPOCH;
    if (p->aux && !c->has_state && look->has_ref &&
        (uint64_t)c->epoch >= c->last_state_epoch + (uint64_t)p->state_every)
        return DL_LOOP_SYNC_REFRESH_AUX;
    return dl_loop_heal_due(look) ? DL_LOOP_SYNC_HEAL : DL_LOOP_SYNC_NONE;
}
