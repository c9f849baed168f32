/* The averaging service on one peer, the top of the averaging layers
 * (collab_internal.h): net handlers that route incoming requests to the
 * running round's inbox, and dl_collab_average's outer frame. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/bytes.h"
#include "collab/collab_internal.h"
#include "collab/wirecodec.h"

void dl_collab_config_default(struct dl_collab_config *config) {
    memset(config, 0, sizeof *config);
    config->matchmaking_floor_s = 0.5;
    config->matchmaking_ceiling_s = 10.0;
    config->ban_s = 60.0;
    config->clip_warn_rounds = 3;
    config->clip_ban_rounds = 10;
}

void dl_avg_options_default(struct dl_avg_options *options) {
    memset(options, 0, sizeof *options);
    options->weight = 1.0;
    options->compression = DL_CODEC_NONE;
    options->deadline_s = 60.0;
    options->aggregation = DL_AGG_MEAN;
    options->clip_tau = DL_CLIP_DEFAULT_TAU;
    options->clip_iterations = DL_CLIP_DEFAULT_ITERATIONS;
}

void dl_avg_result_free(struct dl_avg_result *result) {
    if (!result) return;
    free(result->members);
    free(result->chunks);
    result->members = NULL;
    result->chunks = NULL;
}

static void respond_text(dl_net *net, uint64_t token, const char *text) {
    dl_net_respond(net, token, DL_NET_REMOTE_ERROR, text, strlen(text));
}

/* Network thread: one handler for every averaging method. The methods are
 * told apart by the user pointer's slot. */
struct method_slot {
    struct dl_collab *c;
    int kind;
};
static struct method_slot method_slots[64][DL_AVG_NUM_METHODS];
static pthread_mutex_t method_slots_lock = PTHREAD_MUTEX_INITIALIZER;

/* Answers a late request from a finished round's store (lock held). */
static void serve_finished(dl_net *net, const struct dl_round *r, int kind, const struct dl_net_incoming *in) {
    const uint8_t *answer;
    size_t size;
    int status = dl_round_answer_finished(r, kind, in->payload, in->size, &answer, &size);
    if (status == DL_NET_OK && size) dl_net_respond_ex(net, in->token, DL_NET_OK, answer, size, DL_NET_RAW);
    else dl_net_respond(net, in->token, status, answer, size);
}

static void on_request(void *user, dl_net *net, const struct dl_net_incoming *in) {
    struct method_slot *slot = user;
    struct dl_collab *c = slot->c;
    /* Roles first: the cheapest check, and it needs no state. */
    const char *role_refusal = dl_collab_role_refusal(in->peer_role, slot->kind, in->payload, in->size);
    if (role_refusal) {
        respond_text(net, in->token, role_refusal);
        return;
    }
    pthread_mutex_lock(&c->lock);
    bool banned = dl_bans_is_banned(&c->bans, in->peer_id);
    struct dl_round *cur = c->cur;
    bool for_cur = false;
    if (slot->kind == EV_ALIVE) {
        /* Answered here, on the network thread: it proves the process runs
         * this round even while its round thread is busy. */
        bool alive = !banned && cur && dl_round_alive_for(cur, in->payload, in->size, dl_now());
        pthread_mutex_unlock(&c->lock);
        if (alive) dl_net_respond(net, in->token, DL_NET_OK, NULL, 0);
        else respond_text(net, in->token, "unknown round");
        return;
    }
    if (slot->kind == EV_JOIN) {
        /* Joins wait in the inbox for the round of their epoch, unless that
         * round is over already. */
        uint64_t epoch = in->size == DL_AVG_JOIN_SIZE ? dl_get_u64(in->payload + 8) : 0;
        if (!cur && c->rounds_done && epoch <= c->last_epoch) {
            pthread_mutex_unlock(&c->lock);
            respond_text(net, in->token, "the group of this epoch is closed: keep the gradient for the next round");
            return;
        }
        for_cur = true;
    } else if (in->size >= DL_GROUP_ROUND_ID) {
        bool ours = cur && cur->has_group && !memcmp(in->payload, cur->g.round_id, DL_GROUP_ROUND_ID);
        if (!ours && c->last && !memcmp(in->payload, c->last->g.round_id, DL_GROUP_ROUND_ID)) {
            if (!banned) serve_finished(net, c->last, slot->kind, in);
            else respond_text(net, in->token, "refused: banned");
            pthread_mutex_unlock(&c->lock);
            return;
        }
        /* During our matchmaking a member of the group that is forming may
         * know the group before we do: its chunks wait for the record
         * (dl_round_hold_early) instead of crossing the link twice. */
        for_cur = ours || (cur && !cur->has_group && slot->kind == EV_CHUNK);
    }
    if (banned) {
        pthread_mutex_unlock(&c->lock);
        respond_text(net, in->token, "refused: banned for misbehaving in an averaging round");
        return;
    }
    if (!for_cur) {
        pthread_mutex_unlock(&c->lock);
        respond_text(net, in->token, "unknown round");
        return;
    }
    /* Bounded per peer and in all (inbox.h): before our first round
     * nothing takes joins, and a flood must not grow without end. */
    const char *refused = dl_inbox_offer(&c->inbox, slot->kind, in);
    pthread_mutex_unlock(&c->lock);
    if (refused) respond_text(net, in->token, refused);
}

int dl_collab_start(dl_net *net, const struct dl_collab_config *config, dl_collab **out) {
    *out = NULL;
    struct dl_collab *c = dl_calloc(1, sizeof *c);
    if (!c) return -1;
    c->net = net;
    if (config) c->cfg = *config;
    else dl_collab_config_default(&c->cfg);
    if (!(c->cfg.matchmaking_floor_s > 0)) c->cfg.matchmaking_floor_s = 0.5;
    if (!(c->cfg.matchmaking_ceiling_s >= c->cfg.matchmaking_floor_s)) c->cfg.matchmaking_ceiling_s = 10.0;
    if (!(c->cfg.ban_s > 0)) c->cfg.ban_s = 60.0;
    c->misbehaviour = c->cfg.test_misbehaviour;
    /* Before any round, assume peers arrive within a quarter of the ceiling. */
    c->spread_ema = c->cfg.matchmaking_ceiling_s / 4;
    if (c->cfg.client_mode && c->cfg.aux) {
        free(c);
        return dl_fail("collab: a peer is either a client or an auxiliary peer, not both");
    }
    pthread_mutex_init(&c->lock, NULL);
    if (dl_inbox_init(&c->inbox, &c->lock)) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return -1;
    }
    c->transport.net = net;
    c->transport.inbox = &c->inbox;
    dl_bans_init(&c->bans, c->cfg.ban_s, c->cfg.clip_warn_rounds, c->cfg.clip_ban_rounds);
    pthread_mutex_lock(&method_slots_lock);
    size_t idx = 0;
    while (idx < 64 && method_slots[idx][0].c) idx++;
    if (idx == 64) {
        pthread_mutex_unlock(&method_slots_lock);
        dl_bans_destroy(&c->bans);
        dl_inbox_destroy(&c->inbox);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return dl_fail("collab: more than 64 services in one process");
    }
    for (size_t i = 0; i < DL_AVG_NUM_METHODS; i++) {
        method_slots[idx][i].c = c;
        method_slots[idx][i].kind = dl_avg_methods[i].kind;
    }
    pthread_mutex_unlock(&method_slots_lock);
    for (size_t i = 0; i < DL_AVG_NUM_METHODS; i++)
        if (dl_net_set_handler(net, dl_avg_methods[i].method, on_request, &method_slots[idx][i])) {
            dl_collab_stop(c);
            return dl_fail_context("collab: registering %s", dl_avg_methods[i].method);
        }
    *out = c;
    return 0;
}

void dl_collab_stop(dl_collab *c) {
    if (!c) return;
    for (size_t i = 0; i < DL_AVG_NUM_METHODS; i++) dl_net_set_handler(c->net, dl_avg_methods[i].method, NULL, NULL);
    /* A handler that read its pointer just before removal may still run:
     * give it time to finish before the memory goes. */
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&c->lock);
    dl_inbox_destroy(&c->inbox);
    struct dl_round *last = c->last;
    c->last = NULL;
    pthread_mutex_unlock(&c->lock);
    dl_round_free(last);
    pthread_mutex_lock(&method_slots_lock);
    for (size_t idx = 0; idx < 64; idx++)
        if (method_slots[idx][0].c == c)
            for (size_t i = 0; i < DL_AVG_NUM_METHODS; i++) method_slots[idx][i].c = NULL;
    pthread_mutex_unlock(&method_slots_lock);
    dl_bans_destroy(&c->bans);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

double dl_collab_measured_bandwidth(const dl_collab *c) { return c->measured_mbit; }

bool dl_collab_bans_clipped(const dl_collab *c) { return c->cfg.clip_ban_rounds > 0; }

void dl_avg_handoff_init(struct dl_avg_handoff *h) { memset(h, 0, sizeof *h); }

int dl_collab_hand_over(dl_collab *c, struct dl_avg_handoff *h, double weight) {
    if (!(isfinite(weight) && weight >= 0 && weight <= DL_AVG_MAX_WEIGHT))
        return dl_fail("cannot hand over a weight of %g (0 .. 2^40 samples)", weight);
    pthread_mutex_lock(&c->lock);
    int rc = -1;
    if (h->state == 0) {
        h->state = 1;
        h->weight = weight;
        dl_inbox_poke(&c->inbox);
        rc = 0;
    }
    pthread_mutex_unlock(&c->lock);
    return rc ? dl_fail("the round no longer waits for a vector") : 0;
}

void dl_collab_withdraw(dl_collab *c, struct dl_avg_handoff *h) {
    pthread_mutex_lock(&c->lock);
    if (h->state == 0) {
        h->state = 2;
        dl_inbox_poke(&c->inbox);
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- the outer frame ------------------------------------------------------------ */

/* The round no longer waits for a vector: a later handoff is refused. */
static void end_handoff(struct dl_collab *c, struct dl_avg_handoff *h) {
    if (!h) return;
    pthread_mutex_lock(&c->lock);
    h->state = 3;
    pthread_mutex_unlock(&c->lock);
}

static bool all_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return false;
    return true;
}

static void fill_result(struct dl_round *r, struct dl_avg_result *res, double t0, double t_group, double t_end) {
    res->status = r->status;
    snprintf(res->reason, sizeof res->reason, "%s", r->reason);
    res->bytes_sent = r->bytes_sent;
    res->bytes_resent = r->bytes_resent;
    res->bytes_received = r->bytes_received;
    res->total_s = t_end - t0;
    res->matchmaking_s = (r->has_group ? t_group : t_end) - t0;
    res->allreduce_s = r->has_group ? t_end - t_group : 0;
    res->reduce_s = r->reduce_s;
    res->reduced_elems = r->reduced_elems;
    if (r->handoff && r->handed_at > 0 && r->has_group) res->handoff_wait_s = r->handed_at - t_group;
    if (!r->has_group) return;
    res->compression = r->g.codec;
    res->aggregation = r->g.aggregation;
    res->num_members = r->g.n;
    res->my_index = r->me;
    res->lp_bound_s = r->g.lp_bound_s;
    res->members = calloc(r->g.n, sizeof *res->members);
    if (res->members)
        for (size_t i = 0; i < r->g.n; i++) {
            const struct dl_group_member *m = &r->g.members[i];
            struct dl_avg_member *o = &res->members[i];
            snprintf(o->peer_id, sizeof o->peer_id, "%s", m->peer_id);
            o->weight = m->weight;
            o->bandwidth_mbit = m->bandwidth_mbit;
            o->role = m->role;
            o->part_offset = m->part_offset;
            o->part_elems = m->part_elems;
            res->total_weight += m->weight;
        }
    if (r->clipped)
        for (size_t i = 0; i < r->g.n; i++)
            if (r->clipped[i]) res->clipped[i / 8] |= (uint8_t)(1u << (i % 8));
    res->audit_chunks = r->audit_chunks;
    if (r->accused)
        for (size_t i = 0; i < r->g.n; i++)
            if (r->accused[i]) res->accused[i / 8] |= (uint8_t)(1u << (i % 8));
    if (r->status != DL_AVG_OK || !r->i_receive) return;
    res->chunks = calloc(r->num_chunks ? r->num_chunks : 1, sizeof *res->chunks);
    if (!res->chunks) return;
    res->num_chunks = r->num_chunks;
    res->total_weight = 0;
    for (size_t p = 0; p < r->g.n; p++)
        for (size_t k = 0; k < r->first_chunk[p + 1] - r->first_chunk[p]; k++) {
            size_t gi = r->first_chunk[p] + k;
            struct dl_avg_chunk_info *ci = &res->chunks[gi];
            dl_round_chunk_info(r, p, k, ci);
            if (ci->weight > res->total_weight) res->total_weight = ci->weight;
        }
}

/* Clip streaks (--clip-ban-rounds). A member that receives judges from
 * the results it applied, whose clip weights the audit checked: every
 * member that applied the round holds the same results, so all of them
 * count the same streaks and refuse an attacker in the same round (when
 * each counted only what it reduced itself, honest peers refused at
 * different rounds, passed over each other's leaders and split). A round
 * not applied counts for nothing; a member that does not receive (aux)
 * counts what it reduced. */
void dl_collab_count_clipped(struct dl_collab *c, const struct dl_round *r, struct dl_avg_result *result) {
    if (!r->has_group) return;
    if (!r->i_receive) {
        result->clip_refused = (uint32_t)dl_bans_count_clipped(&c->bans, &r->g, r->me, r->reduced_from, r->clipped);
        return;
    }
    if (r->status != DL_AVG_OK) return;
    bool seen[DL_AVG_MAX_MEMBERS], clipped[DL_AVG_MAX_MEMBERS];
    dl_round_clip_verdicts(r, seen, clipped);
    for (size_t j = 0; j < r->g.n; j++)
        if (seen[j] && clipped[j]) result->clip_judged[j / 8] |= (uint8_t)(1u << (j % 8));
    result->clip_refused = (uint32_t)dl_bans_count_clipped(&c->bans, &r->g, r->me, seen, clipped);
}

enum dl_avg_status dl_collab_average(dl_collab *c, float *vec, size_t n, const struct dl_avg_options *options,
                                     struct dl_avg_result *result) {
    memset(result, 0, sizeof *result);
    double t0 = dl_now();
    struct dl_avg_options opt;
    if (options) opt = *options;
    else dl_avg_options_default(&opt);
    if (!(opt.deadline_s > 0)) opt.deadline_s = 60;
    if (!(opt.stall_s > 0)) opt.stall_s = fmax(1.0, opt.deadline_s / 6);
    if (c->cfg.aux) opt.weight = 0;
    bool later = opt.handoff && !c->cfg.aux; /* the vector comes after matchmaking */
    const char *bad = NULL;
    if (n == 0 || !vec) bad = "an empty vector";
    else if (n > ((uint64_t)1 << 40)) bad = "a vector too large";
    else if (!isfinite(opt.weight) || opt.weight < 0 || opt.weight > DL_AVG_MAX_WEIGHT)
        bad = "a weight that is negative, not finite or beyond 2^40";
    else if ((unsigned)opt.compression >= DL_CODEC_COUNT) bad = "an unknown compression";
    else if (opt.sent && opt.sent == vec) bad = "with options->sent on the vector itself (it receives the average)";
    else if ((unsigned)opt.aggregation >= DL_AGG_COUNT) bad = "an unknown aggregation";
    else if (opt.aggregation == DL_AGG_CENTERED_CLIP && (!(opt.clip_tau > 0) || !isfinite(opt.clip_tau) ||
                                                         opt.clip_iterations < 0 ||
                                                         opt.clip_iterations > DL_CLIP_MAX_ITERATIONS))
        bad = "with centered clip: tau must be positive and finite, iterations 0..1000";
    else if (!c->cfg.aux && !later && !all_finite(vec, n))
        bad = "a vector holding NaN or Inf (it must not leave this peer)";
    if (bad) {
        result->status = DL_AVG_FAILED;
        snprintf(result->reason, sizeof result->reason, "cannot average %s", bad);
        end_handoff(c, opt.handoff);
        return result->status;
    }
    const struct dl_round_transport tp = {&dl_net_transport_ops, &c->transport};
    struct dl_round *r = dl_round_new(&tp, &c->bans);
    if (!r) {
        result->status = DL_AVG_FAILED;
        snprintf(result->reason, sizeof result->reason, "out of memory");
        end_handoff(c, opt.handoff);
        return result->status;
    }
    r->lock = &c->lock;
    r->misbehaviour = c->misbehaviour;
    r->input = vec;
    r->n = n;
    r->weight = opt.weight;
    r->input_ready = !later;
    r->handoff = later ? opt.handoff : NULL;
    r->start = t0;
    r->deadline_s = opt.deadline_s;
    r->deadline = t0 + opt.deadline_s;
    r->stall_s = opt.stall_s;
    pthread_mutex_lock(&c->lock);
    struct dl_round *last = c->last;
    c->last = NULL;
    r->serial = ++c->next_serial;
    c->cur = r;
    c->inbox.serial = r->serial;
    pthread_mutex_unlock(&c->lock);
    dl_round_free(last);

    if (!dl_matchmake(c, r, &opt)) {
        r->group_time = dl_now();
        dl_round_run(r);
    }
    double t_end = dl_now();
    end_handoff(c, opt.handoff);
    if (r->status == DL_AVG_OK && opt.sent && dl_round_copy_sent(r, opt.sent))
        dl_round_fail(r, DL_AVG_FAILED, "cannot give what we sent: %s", dl_error());
    if (r->status == DL_AVG_OK && r->i_receive) dl_round_copy_out(r, vec);
    if (r->status == DL_AVG_OK && r->group_time < t_end) {
        double mbit = (double)r->bytes_sent * 8e-6 / (t_end - r->group_time);
        c->measured_mbit = c->measured_mbit > 0 ? 0.7 * c->measured_mbit + 0.3 * mbit : mbit;
        /* A lower bound of the upload capacity (the round may not have
         * saturated it); published in our progress record. */
        if (!(c->cfg.bandwidth_mbit > 0)) dl_net_set_measured_bandwidth(c->net, c->measured_mbit);
    }
    fill_result(r, result, t0, r->group_time, t_end);
    dl_collab_count_clipped(c, r, result);
    if (r->status != DL_AVG_OK)
        DL_INFO("collab", "round of epoch %llu: %s (%s)", (unsigned long long)opt.epoch,
                dl_avg_status_name(r->status), r->reason);
    pthread_mutex_lock(&c->lock);
    c->cur = NULL;
    c->inbox.serial = 0;
    c->rounds_done++;
    /* Only a completed round closes its epoch: a failed one is retried at
     * the same epoch, and joins for that retry must wait for it. */
    if (r->status == DL_AVG_OK && opt.epoch > c->last_epoch) c->last_epoch = opt.epoch;
    bool keep = r->has_group && r->status == DL_AVG_OK && r->i_receive;
    if (keep) c->last = r;
    pthread_mutex_unlock(&c->lock);
    if (!keep) dl_round_free(r);
    return result->status;
}
