/* Matchmaking: peers ready for one epoch form one group within a deadline.
 *
 * The leader is the first, in the epoch's leader order, of the non-client
 * peers of the swarm view that published this epoch. The order sorts peers
 * by BLAKE2b(run id, epoch, peer id) (leader_before): nobody can grind a key
 * that leads every epoch, and each epoch has another first peer. A leader
 * whose group did not complete at an epoch (it never answered, or sent a
 * record we refused) is passed over when that epoch is retried. Everyone
 * else sends the leader a join request; it collects joins until everyone it
 * expects has joined or its window ends, then answers every join with the
 * same signed group record. The window adapts to the arrival spread it
 * observed in past rounds (docs/protocol.md).
 *
 * Views differ for a moment while a peer arrives, so two peers may both
 * believe they lead one epoch. A leader that sees a peer earlier in the order
 * at its epoch before it has answered anyone hands its joiners over
 * ("redirect"), and a peer that is itself joining redirects the joins it
 * receives: leaders only ever move earlier in the order along redirects, so
 * the groups merge into the first one. */
#include <math.h>
#include <stdint.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/collab_internal.h"
#include "collab/wirecodec.h"

#define JOIN_VERSION 2 /* 2: weights travel in chunk and result headers */
/* An undeclared, unmeasured bandwidth counts as this (Mbit/s). */
#define DEFAULT_BANDWIDTH_MBIT 100.0
/* How often a collecting leader looks at its view for an earlier leader. */
#define LEADER_RECHECK_S 0.05
/* How often a joiner looks at its leader's record while it waits for an answer. */
#define LEADER_LOOK_S 0.25
/* Redirects a joiner follows in one round (ids strictly decrease anyway). */
#define MAX_REDIRECTS 8
#define REDIRECT_PREFIX "redirect "

struct join_info {
    char peer_id[DL_PEER_ID_HEX];
    uint64_t token;               /* 0 for ourselves */
    enum dl_member_role role;
    enum dl_codec codec;
    uint64_t epoch, elements;
    double weight, bandwidth_mbit;
    uint8_t pk[DL_NET_PUBLIC_KEY];
    double arrived;
};

static enum dl_member_role my_role(const struct dl_collab *c) {
    return c->cfg.aux ? DL_MEMBER_AUX : c->cfg.client_mode ? DL_MEMBER_CLIENT : DL_MEMBER_TRAINER;
}

static double my_bandwidth(const struct dl_collab *c) {
    return c->cfg.bandwidth_mbit > 0 ? c->cfg.bandwidth_mbit : c->measured_mbit;
}

static void write_join(uint8_t *p, const struct join_info *j) {
    memset(p, 0, DL_AVG_JOIN_SIZE);
    p[0] = JOIN_VERSION;
    p[1] = (uint8_t)j->role;
    p[2] = (uint8_t)j->codec;
    dl_put_u64(p + 8, j->epoch);
    dl_put_u64(p + 16, j->elements);
    dl_put_f64(p + 24, j->weight);
    dl_put_f64(p + 32, j->bandwidth_mbit);
    memcpy(p + 40, j->pk, DL_NET_PUBLIC_KEY);
}

static int read_join(const uint8_t *p, size_t size, const char *peer_id, struct join_info *j) {
    if (size != DL_AVG_JOIN_SIZE || p[0] != JOIN_VERSION) return dl_fail("malformed join request");
    memset(j, 0, sizeof *j);
    snprintf(j->peer_id, sizeof j->peer_id, "%s", peer_id);
    j->role = p[1];
    j->codec = p[2];
    j->epoch = dl_get_u64(p + 8);
    j->elements = dl_get_u64(p + 16);
    j->weight = dl_get_f64(p + 24);
    j->bandwidth_mbit = dl_get_f64(p + 32);
    memcpy(j->pk, p + 40, DL_NET_PUBLIC_KEY);
    if (j->role >= DL_MEMBER_ROLE_COUNT) return dl_fail("join: unknown role %d", j->role);
    if (!isfinite(j->weight) || j->weight < 0 || j->weight > 1e15) return dl_fail("join: weight out of range");
    if (j->role == DL_MEMBER_AUX) j->weight = 0;
    if (!isfinite(j->bandwidth_mbit) || j->bandwidth_mbit < 0 || j->bandwidth_mbit > 1e7)
        return dl_fail("join: bandwidth out of range");
    return 0;
}

/* Whether peer a comes before peer b in the leader order of `epoch`:
 * BLAKE2b-128 of (run id, NUL, epoch as u64 little-endian, peer id hex),
 * compared as bytes; equal digests (never expected) fall back to the ids.
 * Every peer of the run computes the same order from public values. */
static void leader_rank(const struct dl_collab *c, uint64_t epoch, const char *peer_id, uint8_t rank[16]) {
    crypto_generichash_state st;
    uint8_t e[8];
    const char *run = dl_net_run_id(c->net);
    dl_put_u64(e, epoch);
    crypto_generichash_init(&st, NULL, 0, 16);
    crypto_generichash_update(&st, (const uint8_t *)run, strlen(run) + 1);
    crypto_generichash_update(&st, e, sizeof e);
    crypto_generichash_update(&st, (const uint8_t *)peer_id, strlen(peer_id));
    crypto_generichash_final(&st, rank, 16);
}

static bool leader_before(const struct dl_collab *c, uint64_t epoch, const char *a, const char *b) {
    uint8_t ra[16], rb[16];
    leader_rank(c, epoch, a, ra);
    leader_rank(c, epoch, b, rb);
    int cmp = memcmp(ra, rb, sizeof ra);
    return cmp ? cmp < 0 : strcmp(a, b) < 0;
}

static bool passed_over(const struct dl_collab *c, uint64_t epoch, const char *peer_id) {
    if (c->passed_over_epoch != epoch) return false;
    for (size_t i = 0; i < c->num_passed_over; i++)
        if (!strcmp(c->passed_over[i], peer_id)) return true;
    return false;
}

/* The leader of `epoch` gave us no group (see the header comment). */
static void pass_over(struct dl_collab *c, uint64_t epoch, const char *peer_id) {
    if (c->passed_over_epoch != epoch) {
        c->passed_over_epoch = epoch;
        c->num_passed_over = 0;
    }
    if (passed_over(c, epoch, peer_id) || c->num_passed_over >= DL_PASSED_OVER_MAX) return;
    snprintf(c->passed_over[c->num_passed_over++], DL_PEER_ID_HEX, "%s", peer_id);
    DL_INFO("collab", "epoch %llu: %.8s formed no group for us; passing it over while this epoch is retried",
            (unsigned long long)epoch, peer_id);
}

/* The key must be the one behind the peer id the connection authenticated. */
static bool key_matches(const char *peer_id, const uint8_t pk[DL_NET_PUBLIC_KEY]) {
    char derived[DL_PEER_ID_HEX];
    dl_net_peer_id_from_key(pk, derived);
    return !strcmp(derived, peer_id);
}

/* Who leads this epoch, and how many peers the view expects in it. */
static int find_leader(struct dl_collab *c, uint64_t epoch, char leader[DL_PEER_ID_HEX], size_t *expected) {
    struct dl_swarm_view view;
    if (dl_net_swarm_view(c->net, &view)) return -1;
    dl_collab_drop_gone(c, &view);
    /* We are at the epoch we matchmake for, whatever our own record in the
     * view says yet (a round started right after a step may look before it
     * arrives): a peer that left itself out could join a higher id that
     * joins it back, and neither would lead. */
    const char *self = dl_net_peer_id(c->net);
    leader[0] = 0;
    *expected = 1;
    if (!c->cfg.client_mode) snprintf(leader, DL_PEER_ID_HEX, "%s", self);
    for (size_t i = 0; i < view.num_peers; i++) {
        const struct dl_swarm_peer *p = &view.peers[i];
        if (p->is_self || !strcmp(p->peer_id, self)) continue;
        if (p->epoch != epoch || dl_bans_is_banned(&c->bans, p->peer_id)) continue;
        (*expected)++;
        if (p->client_mode || passed_over(c, epoch, p->peer_id)) continue;
        if (!leader[0] || leader_before(c, epoch, p->peer_id, leader))
            snprintf(leader, DL_PEER_ID_HEX, "%s", p->peer_id);
    }
    dl_swarm_view_free(&view);
    return leader[0] ? 0 : dl_fail("no non-client peer has published epoch %llu", (unsigned long long)epoch);
}

/* The epoch that `leader`'s latest record claims, if our view holds it
 * (else returns false). */
static bool leader_epoch(struct dl_collab *c, const char *leader, uint64_t *epoch) {
    struct dl_swarm_view view;
    if (dl_net_swarm_view(c->net, &view)) return false;
    bool found = false;
    for (size_t i = 0; i < view.num_peers && !found; i++)
        if (!strcmp(view.peers[i].peer_id, leader)) {
            *epoch = view.peers[i].epoch;
            found = true;
        }
    dl_swarm_view_free(&view);
    return found;
}

/* Peers of the view (us included) that this peer has not banned: the most
 * that can join our group, whatever the caller expects. */
static size_t eligible_peers(struct dl_collab *c) {
    struct dl_swarm_view view;
    if (dl_net_swarm_view(c->net, &view)) return SIZE_MAX;
    size_t n = 0;
    for (size_t i = 0; i < view.num_peers; i++)
        n += view.peers[i].is_self || !dl_bans_is_banned(&c->bans, view.peers[i].peer_id);
    dl_swarm_view_free(&view);
    return n;
}

/* The answer that sends a joiner on to `leader`. */
static void respond_redirect(struct dl_round *r, uint64_t token, const char *leader) {
    char text[sizeof REDIRECT_PREFIX + DL_PEER_ID_HEX];
    snprintf(text, sizeof text, REDIRECT_PREFIX "%s", leader);
    dl_round_respond_text(r, token, text);
}

/* Whether an error answer is a redirect; the id it names goes to `to`. */
static bool redirect_target(const uint8_t *data, size_t size, char to[DL_PEER_ID_HEX]) {
    size_t prefix = sizeof REDIRECT_PREFIX - 1;
    if (!data || size != prefix + DL_PEER_ID_HEX - 1 || memcmp(data, REDIRECT_PREFIX, prefix)) return false;
    for (size_t i = 0; i < DL_PEER_ID_HEX - 1; i++) {
        char ch = (char)data[prefix + i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
        to[i] = ch;
    }
    to[DL_PEER_ID_HEX - 1] = 0;
    return true;
}

/* Whether an error answer is a redirect to a peer before `leader` in the
 * order of `epoch` (and not passed over); the id goes to `to`. Anything else
 * (or a redirect backwards) is a refusal. */
static bool parse_redirect(const struct dl_collab *c, uint64_t epoch, const uint8_t *data, size_t size,
                           const char *leader, char to[DL_PEER_ID_HEX]) {
    return redirect_target(data, size, to) && leader_before(c, epoch, to, leader) && !passed_over(c, epoch, to);
}

/* Whether our view shows a peer past `epoch` whose word a quorum backs (a
 * non-client peer that claims it alone proves no group completed), and how
 * many others are at `epoch`. */
static bool peer_past_epoch(struct dl_collab *c, uint64_t epoch, size_t *others_at_epoch) {
    struct dl_swarm_view view;
    *others_at_epoch = 0;
    if (dl_net_swarm_view(c->net, &view)) return false;
    dl_collab_drop_gone(c, &view);
    bool ahead = false;
    for (size_t i = 0; i < view.num_peers; i++) {
        const struct dl_swarm_peer *p = &view.peers[i];
        if (p->is_self || dl_bans_is_banned(&c->bans, p->peer_id)) continue;
        if (p->epoch > epoch && !p->client_mode && !p->epoch_unbacked) ahead = true;
        if (p->epoch == epoch) (*others_at_epoch)++;
    }
    dl_swarm_view_free(&view);
    return ahead;
}

static void why_past_epoch(uint64_t epoch, char *why, size_t why_size) {
    snprintf(why, why_size, "a peer is already past epoch %llu: keep the gradient and take the swarm's state",
             (unsigned long long)epoch);
}

/* Why a leader whose window has ended must not complete its group, or NULL.
 * A step taken at `epoch` by a group that misses peers which completed the
 * same epoch elsewhere would split the swarm's weights: so a leader whose
 * view shows a non-client peer already past the epoch does not close, and a
 * leader that nobody joined does not step alone while its view shows other
 * peers at its epoch (they are in another group, or it will form again). */
static const char *must_not_close(struct dl_collab *c, uint64_t epoch, size_t count, char *why, size_t why_size) {
    size_t others = 0;
    if (peer_past_epoch(c, epoch, &others))
        why_past_epoch(epoch, why, why_size);
    else if (count == 1 && others > 0)
        snprintf(why, why_size, "nobody joined although %zu other peer(s) are at epoch %llu: keep the gradient for "
                 "the next round", others, (unsigned long long)epoch);
    else
        return NULL;
    return why;
}

static int form_group(struct dl_collab *c, struct dl_round *r, struct join_info *joins, size_t count,
                      const struct dl_avg_options *opt) {
    struct dl_group *g = &r->g;
    memset(g, 0, sizeof *g);
    randombytes_buf(g->round_id, sizeof g->round_id);
    g->epoch = opt->epoch;
    g->elements = r->n;
    g->codec = opt->compression;
    g->stall_s = opt->stall_s;
    g->aggregation = opt->aggregation;
    g->clip_tau = opt->aggregation == DL_AGG_CENTERED_CLIP ? opt->clip_tau : 0;
    g->clip_iterations = opt->aggregation == DL_AGG_CENTERED_CLIP ? opt->clip_iterations : 0;
    g->n = count;
    /* An undeclared, unmeasured bandwidth counts as the median declared one
     * (not the mean, which a single liar would move). */
    double known[DL_AVG_MAX_MEMBERS];
    size_t num_known = 0;
    for (size_t i = 0; i < count; i++)
        if (joins[i].bandwidth_mbit > 0) known[num_known++] = joins[i].bandwidth_mbit;
    double fallback = num_known ? dl_balance_lower_median(num_known, known) : DEFAULT_BANDWIDTH_MBIT;
    for (size_t i = 0; i < count; i++) {
        struct dl_group_member *m = &g->members[i];
        snprintf(m->peer_id, sizeof m->peer_id, "%s", joins[i].peer_id);
        memcpy(m->pk, joins[i].pk, DL_NET_PUBLIC_KEY);
        m->weight = joins[i].weight;
        m->bandwidth_mbit = joins[i].bandwidth_mbit > 0 ? joins[i].bandwidth_mbit : fallback;
        m->role = joins[i].role;
    }
#ifdef DEDLOC_TEST_HOOKS
    if (c->misbehaviour == DL_MISBEHAVE_DICTATE) {
        /* A leader that dictates: another rule, a long stall time. */
        g->stall_s = fmin(3600, opt->stall_s * 50);
        g->aggregation = opt->aggregation == DL_AGG_MEAN ? DL_AGG_CENTERED_CLIP : DL_AGG_MEAN;
        g->clip_tau = g->aggregation == DL_AGG_CENTERED_CLIP ? 1e6 : 0;
        g->clip_iterations = g->aggregation == DL_AGG_CENTERED_CLIP ? 1 : 0;
    }
#endif
    if (dl_group_sort(g, dl_net_peer_id(c->net))) return -1;
    return dl_group_plan(g);
}

static int join(struct dl_collab *c, struct dl_round *r, const struct dl_avg_options *opt, const char *first_leader);

/* Whether our caller has yet to hand its vector over. */
static bool handoff_waiting(struct dl_collab *c, const struct dl_round *r) {
    pthread_mutex_lock(&c->lock);
    bool waiting = r->handoff->state == 0;
    pthread_mutex_unlock(&c->lock);
    return waiting;
}

static int lead(struct dl_collab *c, struct dl_round *r, const struct dl_avg_options *opt, size_t expected) {
    struct join_info *joins = dl_calloc(DL_AVG_MAX_MEMBERS, sizeof *joins);
    if (!joins) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
    size_t count = 1;
    struct join_info *self = &joins[0];
    snprintf(self->peer_id, sizeof self->peer_id, "%s", dl_net_peer_id(c->net));
    self->role = my_role(c);
    self->codec = opt->compression;
    self->epoch = opt->epoch;
    self->elements = r->n;
    self->weight = opt->weight;
    self->bandwidth_mbit = my_bandwidth(c);
    memcpy(self->pk, dl_net_public_key(c->net), DL_NET_PUBLIC_KEY);
    double t0 = dl_now();
    self->arrived = t0;
    /* A count the caller gives (--min-peers) may include peers we banned:
     * they are refused, so waiting out the window for them would only cost
     * every later round its full length. */
    if (opt->expected_peers) {
        size_t eligible = eligible_peers(c);
        expected = opt->expected_peers < eligible ? opt->expected_peers : eligible;
    }
    double window = fmin(fmax(2 * c->spread_ema + 0.3, c->cfg.matchmaking_floor_s), c->cfg.matchmaking_ceiling_s);
    double close_at = t0 + fmin(window, (r->deadline - t0) / 3);
    double last_arrival = t0;
    const bool expected_given = opt->expected_peers > 0;
    /* A leader matchmaking ahead of its vector has nothing to send before
     * the handoff: it keeps waiting for missing joiners until then (within
     * the ceiling), since they start ahead of their own ETAs, which differ. */
    double hard_close = t0 + fmin(c->cfg.matchmaking_ceiling_s, (r->deadline - t0) / 3);
    while (expected <= 1 || count < expected) {
        if (dl_now() >= close_at && !(r->handoff && handoff_waiting(c, r) && dl_now() < hard_close)) break;
        /* A peer before us in the order at our epoch that our view did not
         * show when we chose ourselves leads instead: nobody has our record yet, so hand
         * the joiners over and join it. Peers that appear at our epoch are
         * waited for too. */
        char lowest[DL_PEER_ID_HEX];
        size_t now_expected = 0;
        if (!find_leader(c, opt->epoch, lowest, &now_expected)) {
            if (leader_before(c, opt->epoch, lowest, self->peer_id)) {
                DL_INFO("collab", "epoch %llu: %.8s leads (seen after we started leading): handing over %zu joiner(s)",
                        (unsigned long long)opt->epoch, lowest, count - 1);
                for (size_t i = 1; i < count; i++) respond_redirect(r, joins[i].token, lowest);
                free(joins);
                return join(c, r, opt, lowest);
            }
            if (!expected_given && now_expected > expected) expected = now_expected;
        }
        /* A peer already past our epoch means this group can never close
         * (must_not_close below refuses it): waiting out the window would
         * only keep us from taking the swarm's state, and keep the peers
         * ahead waiting for us at the previous epoch. */
        size_t others_now = 0;
        if (peer_past_epoch(c, opt->epoch, &others_now)) {
            char ahead_why[200];
            why_past_epoch(opt->epoch, ahead_why, sizeof ahead_why);
            for (size_t i = 1; i < count; i++) dl_round_respond_text(r, joins[i].token, ahead_why);
            free(joins);
            return dl_round_fail(r, DL_AVG_NO_GROUP, "%s", ahead_why);
        }
        struct dl_avg_event *ev = dl_round_wait_events(r, fmin(close_at, dl_now() + LEADER_RECHECK_S));
        while (ev) {
            struct dl_avg_event *next = ev->next;
            if (ev->kind == EV_JOIN) {
                struct join_info j;
                const char *refuse = NULL;
                char why[200];
                if (read_join(ev->data, ev->size, ev->peer_id, &j)) {
                    snprintf(why, sizeof why, "refused: %s", dl_error());
                    refuse = why;
                } else if (j.epoch < opt->epoch) {
                    snprintf(why, sizeof why, "the group of epoch %llu is closed: keep the gradient for the next round",
                             (unsigned long long)j.epoch);
                    refuse = why;
                } else if (j.epoch != opt->epoch) {
                    snprintf(why, sizeof why, "the group of this peer is for epoch %llu, not %llu",
                             (unsigned long long)opt->epoch, (unsigned long long)j.epoch);
                    refuse = why;
                } else if (j.elements != r->n || j.codec != opt->compression) {
                    snprintf(why, sizeof why, "refused: this group averages %zu elements with %s", r->n,
                             dl_codec_name(opt->compression));
                    refuse = why;
                } else if (count >= DL_AVG_MAX_MEMBERS) {
                    snprintf(why, sizeof why, "the group is full (%d members at most): keep the gradient for the next round",
                             DL_AVG_MAX_MEMBERS);
                    refuse = why;
                } else if (!key_matches(ev->peer_id, j.pk)) {
                    refuse = "refused: the public key is not the peer's";
                } else {
                    for (size_t i = 0; i < count && !refuse; i++)
                        if (!strcmp(joins[i].peer_id, j.peer_id)) {
                            /* Asked again (its first request's connection
                             * closed): answer the newest request. */
                            if (i) joins[i].token = ev->token;
                            else dl_round_respond_text(r, ev->token, "refused: that is the leader's own id");
                            refuse = "";
                        }
                }
                if (refuse && !*refuse) {
                    /* handled above */
                } else if (refuse) {
                    dl_round_respond_text(r, ev->token, refuse);
                } else {
                    j.token = ev->token;
                    j.arrived = dl_now();
                    last_arrival = j.arrived;
                    joins[count++] = j;
                }
            } else if (ev->token) {
                dl_round_respond_text(r, ev->token, "unknown round");
            }
            dl_avg_event_free(ev);
            ev = next;
        }
    }
#ifdef DEDLOC_TEST_HOOKS
    if (c->misbehaviour == DL_MISBEHAVE_STALL_LEADER) {
        pthread_mutex_lock(&c->lock);
        if (!c->rounds_done) c->test_stalling = true;
        pthread_mutex_unlock(&c->lock);
    }
    if (c->test_stalling) {
        /* A stalling leader: holds every join unanswered until the deadline
         * (it stays connected and alive, so nobody drops it). */
        while (dl_now() < r->deadline) {
            struct dl_avg_event *ev = dl_round_wait_events(r, r->deadline);
            while (ev) {
                struct dl_avg_event *next = ev->next;
                dl_avg_event_free(ev);
                ev = next;
            }
        }
        free(joins);
        return dl_round_fail(r, DL_AVG_NO_GROUP, "test: a stalling leader");
    }
#endif
    c->spread_ema = c->spread_ema > 0 ? 0.7 * c->spread_ema + 0.3 * (last_arrival - t0) : last_arrival - t0;
    char no_close[200];
    if (must_not_close(c, opt->epoch, count, no_close, sizeof no_close)) {
        for (size_t i = 1; i < count; i++) dl_round_respond_text(r, joins[i].token, no_close);
        free(joins);
        return dl_round_fail(r, DL_AVG_NO_GROUP, "%s", no_close);
    }
    int rc = form_group(c, r, joins, count, opt);
    size_t record_size = 0;
    uint8_t *record = rc ? NULL : dl_group_sign(&r->g, c->net, &record_size);
    if (!record) {
        char why[200];
        snprintf(why, sizeof why, "the leader could not form the group: %s", dl_error());
        for (size_t i = 1; i < count; i++) dl_round_respond_text(r, joins[i].token, why);
        free(joins);
        return dl_round_fail(r, DL_AVG_NO_GROUP, "%s", why);
    }
    for (size_t i = 1; i < count; i++) dl_round_respond(r, joins[i].token, DL_NET_OK, record, record_size);
    DL_INFO("collab", "formed a group of %zu for epoch %llu in %.2f s", count, (unsigned long long)opt->epoch,
            dl_now() - t0);
    r->group_record = record;
    r->group_record_size = record_size;
    free(joins);
    r->me = (size_t)dl_group_find(&r->g, dl_net_peer_id(c->net));
    return 0;
}

#ifdef DEDLOC_TEST_HOOKS
/* DL_MISBEHAVE_SLOW_RECORD: the group record reached us a second after it
 * reached the others, whose chunks come in meanwhile. */
static void slow_record(struct dl_round *r) {
    double until = dl_now() + 1.0;
    while (dl_now() < until) {
        struct dl_avg_event *ev = dl_round_wait_events(r, until);
        while (ev) {
            struct dl_avg_event *next = ev->next;
            if (!dl_round_hold_early(r, ev)) {
                if (ev->token) dl_round_respond_text(r, ev->token, "unknown round");
                dl_avg_event_free(ev);
            }
            ev = next;
        }
    }
}
#endif

/* Reads the group record of the leader's answer into r->g. */
static int take_record(struct dl_round *r, const struct dl_avg_event *ev) {
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_SLOW_RECORD) slow_record(r);
#endif
    return dl_group_parse(ev->data, ev->size, &r->g);
}

static int join(struct dl_collab *c, struct dl_round *r, const struct dl_avg_options *opt,
                const char *first_leader) {
    char leader[DL_PEER_ID_HEX];
    snprintf(leader, sizeof leader, "%s", first_leader);
    int redirects = 0;
    struct join_info self;
    memset(&self, 0, sizeof self);
    self.role = my_role(c);
    self.codec = opt->compression;
    self.epoch = opt->epoch;
    self.elements = r->n;
    self.weight = opt->weight;
    self.bandwidth_mbit = my_bandwidth(c);
    memcpy(self.pk, dl_net_public_key(c->net), DL_NET_PUBLIC_KEY);
    uint8_t msg[DL_AVG_JOIN_SIZE];
    write_join(msg, &self);
    /* The leader may be known from its records before we are connected to
     * it: a join that finds no connection is sent again until this time. */
    double give_up = fmin(dl_now() + c->cfg.matchmaking_ceiling_s, r->deadline);
    double timeout = fmin(c->cfg.matchmaking_ceiling_s + 5, r->deadline - dl_now());
    /* Ahead of our vector, a leader that starts its own round later (its
     * ETA came later than ours) answers as soon as it does: our join waits
     * in its inbox meanwhile, up to the deadline. */
    if (r->handoff) timeout = r->deadline - dl_now();
    if (dl_round_request(r, leader, "avg.join", msg, sizeof msg, timeout, EV_JOIN_REPLY, 0, 0, 0))
        return dl_round_fail(r, DL_AVG_NO_GROUP, "cannot ask the leader %s: %s", leader, dl_error());
    double resend_at = 0;
    for (;;) {
        if (dl_now() >= r->deadline) {
            pass_over(c, opt->epoch, leader);
            return dl_round_fail(r, DL_AVG_NO_GROUP, "no group before the deadline");
        }
        /* A leader whose record now claims two epochs or more past ours will
         * form no group at ours (an honest one that took us would not have
         * finished the next round before our answer), and waiting out the
         * join's timeout for it let the others train on without us: a peer
         * that claims an epoch far ahead the moment after it was chosen
         * could hold a joiner for 15 s a round. Its answer is not awaited. */
        uint64_t claimed = 0;
        if (leader_epoch(c, leader, &claimed) && claimed > opt->epoch + 1) {
            pass_over(c, opt->epoch, leader);
            return dl_round_fail(r, DL_AVG_NO_GROUP,
                                 "the leader %s now claims epoch %llu: the epoch is retried with another leader",
                                 leader, (unsigned long long)claimed);
        }
        if (resend_at > 0 && dl_now() >= resend_at) {
            resend_at = 0;
            if (dl_round_request(r, leader, "avg.join", msg, sizeof msg, timeout, EV_JOIN_REPLY, 0, 0, 0))
                return dl_round_fail(r, DL_AVG_NO_GROUP, "cannot ask the leader %s: %s", leader, dl_error());
        }
        double wake = fmin(resend_at > 0 ? resend_at : r->deadline, dl_now() + LEADER_LOOK_S);
        struct dl_avg_event *ev = dl_round_wait_events(r, wake);
        int rc = 1;
        while (ev) {
            struct dl_avg_event *next = ev->next;
            if (ev->kind == EV_JOIN_REPLY && rc == 1 && ev->status == DL_NET_DISCONNECTED && dl_now() < give_up) {
                resend_at = dl_now() + 0.1;
            } else if (ev->kind == EV_JOIN_REPLY && rc == 1) {
                char to[DL_PEER_ID_HEX];
                if (ev->status == DL_NET_REMOTE_ERROR && redirects < MAX_REDIRECTS &&
                    parse_redirect(c, opt->epoch, ev->data, ev->size, leader, to) &&
                    strcmp(to, dl_net_peer_id(c->net))) {
                    /* The peer we asked learned of an earlier leader (or is
                     * joining one): ask that one instead. */
                    redirects++;
                    snprintf(leader, sizeof leader, "%s", to);
                    resend_at = dl_now();
                    give_up = fmin(dl_now() + c->cfg.matchmaking_ceiling_s, r->deadline);
                } else if (ev->status == DL_NET_REMOTE_ERROR && dl_now() < give_up &&
                           redirect_target(ev->data, ev->size, to) && passed_over(c, opt->epoch, to)) {
                    /* The peer we asked still waits on a leader we passed
                     * over (its memory of the failed round differs from
                     * ours): it leads once that wait fails, so ask it again
                     * shortly rather than give up the round. */
                    resend_at = dl_now() + 0.2;
                } else if (ev->status != DL_NET_OK) {
                    /* Whatever its reason, this leader formed no group for
                     * us at this epoch: a retry asks the next one. */
                    pass_over(c, opt->epoch, leader);
                    rc = dl_round_fail(r, DL_AVG_NO_GROUP, "the leader %s did not take us: %s%s%.*s", leader,
                                       dl_net_status_name(ev->status), ev->size ? ": " : "", (int)ev->size,
                                       ev->data ? (const char *)ev->data : "");
                } else if (take_record(r, ev)) {
                    pass_over(c, opt->epoch, leader);
                    rc = dl_round_fail(r, DL_AVG_NO_GROUP, "%s", dl_error());
                } else {
                    size_t me = 0;
                    const char *refused = NULL;
                    if (dl_group_check_join(&r->g, leader, dl_net_peer_id(c->net), self.role, r->n, opt->compression,
                                            opt->epoch, &me))
                        rc = dl_round_fail(r, DL_AVG_NO_GROUP, "the group record from %s does not match our join: %s",
                                           leader, dl_error());
                    else if (dl_group_check_settings(&r->g, opt) || dl_group_check_plan(&r->g))
                        rc = dl_round_fail(r, DL_AVG_NO_GROUP, "the group record from %s: %s", leader, dl_error());
                    else if ((refused = dl_bans_first_in_group(&c->bans, &r->g, me)))
                        rc = dl_round_fail(r, DL_AVG_NO_GROUP,
                                           "the group record from %s names %.8s, a peer we refuse: the epoch is "
                                           "retried with another leader",
                                           leader, refused);
                    if (rc != 1) pass_over(c, opt->epoch, leader);
                    else {
                        r->me = me;
                        rc = 0;
                    }
                }
            } else if (ev->token) {
                /* Joins for us while we are joining: send them on to the
                 * peer we joined (before us in the order, so they follow). */
                if (ev->kind == EV_JOIN) respond_redirect(r, ev->token, leader);
                else if (dl_round_hold_early(r, ev)) {
                    ev = next; /* a chunk for the group we are joining: kept */
                    continue;
                } else
                    dl_round_respond_text(r, ev->token, "unknown round");
            }
            dl_avg_event_free(ev);
            ev = next;
        }
        if (rc != 1) return rc;
    }
}

int dl_matchmake(struct dl_collab *c, struct dl_round *r, const struct dl_avg_options *opt) {
    char leader[DL_PEER_ID_HEX];
    size_t expected = 0;
    if (find_leader(c, opt->epoch, leader, &expected))
        return dl_round_fail(r, DL_AVG_NO_GROUP, "%s (publish progress at this epoch first)", dl_error());
    int rc = strcmp(leader, dl_net_peer_id(c->net)) ? join(c, r, opt, leader) : lead(c, r, opt, expected);
    if (rc) return rc;
    pthread_mutex_lock(&c->lock);
    r->has_group = true;
    pthread_mutex_unlock(&c->lock);
    return 0;
}
