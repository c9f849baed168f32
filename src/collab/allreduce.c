/* The load-balanced butterfly all-reduce of one group: the round's loop
 * (round.h). Each step sends our chunks to the other aggregators, reduces
 * the chunks of our part that are complete, sends their results to every
 * member, counts silent aggregators as failed and lets recovery.c replace
 * them. Senders that die, stall or misbehave are left out of the chunks
 * they had not delivered; the chunk's contributor mask travels with it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/round.h"
#include "collab/wirecodec.h"

/* ---- aggregating our part ------------------------------------------------------ */

static void drop_sender(struct dl_round *r, size_t j, const char *why) {
    if (r->dropped[j]) return;
    r->dropped[j] = true;
    DL_INFO("collab", "leaving %s out of the rest of our part: %s", r->g.members[j].peer_id, why);
    for (uint32_t k = r->next_reduce; k < r->agg_chunks; k++) {
        struct dl_agg_chunk *a = &r->agg[k];
        if (a->contrib[j]) {
            free(a->contrib[j]);
            a->contrib[j] = NULL;
            dl_round_respond_text(r, a->ack_token[j], "left out: too slow for this round");
        }
    }
}

static void misbehaved(struct dl_round *r, long j, uint64_t token, const char *peer_id, const char *why) {
    char text[256];
    snprintf(text, sizeof text, "refused: %s", why);
    if (token) dl_round_respond_text(r, token, text);
    dl_round_ban(r, peer_id, why);
    if (j >= 0) {
        drop_sender(r, (size_t)j, why);
        dl_round_mark_failed(r, (size_t)j, why);
    }
}

static void on_chunk(struct dl_round *r, struct dl_avg_event *ev) {
    char why[160];
    /* Chunks that came during matchmaking were let in for whatever group
     * would form (service.c): one for another group is refused, not blamed. */
    if (ev->size < DL_GROUP_ROUND_ID || memcmp(ev->data, r->g.round_id, DL_GROUP_ROUND_ID)) {
        dl_round_respond_text(r, ev->token, "unknown round");
        return;
    }
    long j = dl_group_find(&r->g, ev->peer_id);
    if (j < 0) {
        misbehaved(r, -1, ev->token, ev->peer_id, "sent a chunk to a round it is not a member of");
        return;
    }
    if (ev->size < DL_AVG_REF_HEADER || r->g.members[j].role == DL_MEMBER_AUX || (size_t)j == r->me) {
        misbehaved(r, j, ev->token, ev->peer_id, "sent a malformed chunk");
        return;
    }
    size_t part = dl_get_u16(ev->data + 16), k = dl_get_u32(ev->data + 20);
    if (!r->i_aggregate || part != r->me) {
        snprintf(why, sizeof why, "sent a chunk of part %zu to the aggregator of part %zu", part, r->me);
        misbehaved(r, j, ev->token, ev->peer_id, why);
        return;
    }
    if (k >= r->agg_chunks) {
        misbehaved(r, j, ev->token, ev->peer_id, "sent a chunk index beyond the part");
        return;
    }
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t want = dl_round_chunk_msg_size(r, len);
    if (ev->size != want) {
        snprintf(why, sizeof why, "sent a chunk of %zu bytes where %zu were due", ev->size, want);
        misbehaved(r, j, ev->token, ev->peer_id, why);
        return;
    }
    struct dl_agg_chunk *a = &r->agg[k];
    /* Checked before it counts: an unsigned chunk could not back an
     * accusation, and its sender could then lie about it at no risk. */
    if (!a->reduced && !a->contrib[j] && !dl_round_chunk_signed(r, (size_t)j, ev->data, ev->size, a->hash[j])) {
        misbehaved(r, j, ev->token, ev->peer_id, "sent a chunk without its valid signature");
        return;
    }
    r->bytes_received += ev->size;
    r->last_from[j] = r->last_heard[j] = dl_round_now(r);
    r->heard[j] = true;
    if (r->dropped[j]) {
        dl_round_respond_text(r, ev->token, "left out: too slow for this round");
        return;
    }
    if (a->reduced || a->contrib[j]) {
        dl_round_respond(r, ev->token, DL_NET_OK, NULL, 0);
        return;
    }
    a->contrib[j] = ev->data;
    a->ack_token[j] = ev->token;
    ev->data = NULL;
}

static size_t min_result_next(const struct dl_round *r) {
    size_t lowest = r->next_reduce;
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX || r->failed[m]) continue;
        if (r->out[m].next < lowest) lowest = r->out[m].next;
    }
    return lowest;
}

static void pump_aggregate(struct dl_round *r, double now) {
    /* Our own contribution goes into every chunk of our part, unless we sit
     * out of our own part (dl_round_counts_itself): then it is not even
     * encoded. */
    if (!r->i_aggregate || (r->i_send && !r->input_ready)) return;
    while (r->next_reduce < r->agg_chunks && r->next_reduce - min_result_next(r) < DL_AVG_REDUCE_AHEAD) {
        uint32_t k = r->next_reduce;
        struct dl_agg_chunk *a = &r->agg[k];
        bool ready = true;
        for (size_t j = 0; j < r->g.n; j++) {
            if (j == r->me || r->g.members[j].role == DL_MEMBER_AUX || r->dropped[j] || a->contrib[j]) continue;
            /* A sender whose window we hold (chunks we have not acknowledged)
             * is waiting for us, not stalled. */
            uint32_t held = 0;
            for (uint32_t later = k + 1; later < r->agg_chunks; later++) held += r->agg[later].contrib[j] != NULL;
            if (r->failed[j]) drop_sender(r, j, "it failed");
            else if (held < DL_AVG_SEND_WINDOW && now - r->last_from[j] > r->stall_s)
                drop_sender(r, j, "nothing arrived from it in time");
            else ready = false;
        }
        if (!ready) return;
#ifdef DEDLOC_TEST_HOOKS
        /* The grinder signs its last result only once it holds every other. */
        if (r->misbehaviour == DL_MISBEHAVE_GRIND && k + 1 == r->agg_chunks && r->have + 1 < r->need) return;
#endif
        uint8_t *own = NULL;
        if (r->i_send && dl_round_counts_itself(r)) {
            size_t size;
            own = dl_round_encode_own(r, r->me, k, false, &size);
            if (!own) {
                dl_round_fail(r, DL_AVG_FAILED, "cannot encode our own chunk: %s", dl_error());
                return;
            }
            a->contrib[r->me] = own;
        }
        bool bad[DL_AVG_MAX_MEMBERS] = {false};
        int rc = dl_round_reduce(r, r->me, k, 0, a->contrib, bad);
        dl_round_progress(r);
        for (size_t j = 0; j < r->g.n; j++) {
            if (j == r->me || !a->contrib[j]) continue;
            /* Kept until the audit: the evidence should its sender's
             * projections contradict it. */
            if (bad[j]) free(a->contrib[j]);
            else r->kept[(size_t)k * r->g.n + j] = a->contrib[j];
            a->contrib[j] = NULL;
            if (bad[j])
                misbehaved(r, (long)j, a->ack_token[j], r->g.members[j].peer_id,
                           "sent data that does not decode (NaN, Inf or garbage) or an impossible weight");
            else
                dl_round_respond(r, a->ack_token[j], DL_NET_OK, NULL, 0);
            /* It may send again from now on: its silence counts from here. */
            r->last_from[j] = dl_round_now(r);
        }
        free(own);
        a->contrib[r->me] = NULL;
        if (rc) {
            dl_round_fail(r, DL_AVG_FAILED, "no contribution reached chunk %u of our part", k);
            return;
        }
        a->reduced = true;
        r->next_reduce++;
    }
}

#ifdef DEDLOC_TEST_HOOKS
/* The test hooks of an aggregator that stops after its first result. */
static bool goes_silent(const struct dl_round *r) {
    return r->misbehaviour == DL_MISBEHAVE_SCALE_THEN_SILENT || r->misbehaviour == DL_MISBEHAVE_THEN_SILENT;
}
#endif

static void pump_results(struct dl_round *r, double now) {
    if (!r->i_aggregate) return;
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX || r->failed[m]) continue;
        struct dl_result_out *o = &r->out[m];
        while (o->inflight < DL_AVG_RESULT_WINDOW && o->next < r->next_reduce) {
#ifdef DEDLOC_TEST_HOOKS
            if (goes_silent(r) && o->next >= 1) break;
#endif
            size_t gi = r->first_chunk[r->me] + o->next;
            const uint8_t *result = r->store[gi];
            uint8_t *other_face = NULL;
#ifdef DEDLOC_TEST_HOOKS
            if (r->misbehaviour == DL_MISBEHAVE_TWO_FACED && m % 2) result = other_face = dl_audit_two_faced_copy(r, gi);
#endif
            int rc = result ? dl_round_request(r, r->g.members[m].peer_id, "avg.result", result, r->store_size[gi],
                                               r->deadline - now, EV_RESULT_ACK, (uint32_t)r->me, o->next,
                                               (uint32_t)m)
                            : -1;
            free(other_face);
            if (rc) {
                dl_round_mark_failed(r, m, "cannot send it results");
                break;
            }
            o->next++;
            o->inflight++;
        }
    }
}

static bool aggregation_done(const struct dl_round *r) {
    if (!r->i_aggregate) return true;
    if (r->next_reduce < r->agg_chunks) return false;
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX || r->failed[m]) continue;
        if (r->out[m].next < r->agg_chunks || r->out[m].inflight) return false;
    }
    return true;
}

/* ---- sending our vector -------------------------------------------------------- */

static void pump_send(struct dl_round *r, double now) {
    if (!r->i_send || !r->input_ready) return;
    for (size_t p = 0; p < r->g.n; p++) {
        struct dl_send_part *s = &r->send[p];
        if (p == r->me || !s->total || r->failed[p] || s->done_or_failed) continue;
        while (s->inflight < DL_AVG_SEND_WINDOW) {
            uint32_t k;
            bool again = false;
            /* Chunks to send again go first: the aggregator acknowledges in
             * order, so later chunks would only fill the window behind them. */
            if (s->num_resend && now < s->resend_at) break;
            if (s->num_resend) {
                k = s->resend[--s->num_resend];
                again = true;
            } else if (s->next < s->total) k = s->next++;
            else break;
            size_t size;
            uint8_t *msg = dl_round_encode_own(r, p, k, true, &size);
            if (!msg) {
                dl_round_fail(r, DL_AVG_FAILED, "cannot encode our chunk: %s", dl_error());
                return;
            }
            int rc = dl_round_request(r, r->g.members[p].peer_id, "avg.chunk", msg, size, r->deadline - now,
                                      EV_CHUNK_ACK, (uint32_t)p, k, (uint32_t)p);
            free(msg);
            if (rc) {
                dl_round_mark_failed(r, p, "cannot send it our chunks");
                break;
            }
            if (again) r->bytes_resent += size;
            s->inflight++;
        }
    }
}

static void on_chunk_ack(struct dl_round *r, struct dl_avg_event *ev) {
    size_t p = ev->part;
    struct dl_send_part *s = &r->send[p];
    if (s->inflight) s->inflight--;
    if (ev->status == DL_NET_OK) {
        r->last_heard[p] = dl_round_now(r);
        r->heard[p] = true;
        if (++s->acked >= s->total) s->done_or_failed = true;
        return;
    }
    const char *text = ev->size ? (const char *)ev->data : "";
    int tl = (int)ev->size;
    /* A member still matchmaking holds our chunks until it has the group
     * record (dl_round_hold_early); "unknown round" means it is in no round
     * now or in another one. Asked again for a short while, as a peer's
     * network thread may run ahead of its round thread. */
    bool unknown = ev->status == DL_NET_REMOTE_ERROR && tl >= 13 && !strncmp(text, "unknown round", 13) &&
                   dl_round_now(r) - r->group_time < DL_AVG_CONNECT_GRACE_S;
    /* Right after matchmaking a connection to a member we only know from
     * its records may still be on its way: not a failure yet. */
    bool connecting = ev->status == DL_NET_DISCONNECTED && !r->heard[p] &&
                      dl_round_now(r) - r->group_time < DL_AVG_CONNECT_GRACE_S;
    if (unknown || connecting) {
        /* The aggregator has not seen the group record yet: try again soon. */
        if (s->num_resend <= DL_AVG_SEND_WINDOW) s->resend[s->num_resend++] = ev->chunk;
        s->resend_at = dl_round_now(r) + 0.05;
    } else if (ev->status == DL_NET_REMOTE_ERROR && tl >= 9 && !strncmp(text, "left out:", 9)) {
        r->last_heard[p] = dl_round_now(r);
        s->done_or_failed = true;
    } else if (ev->status == DL_NET_REMOTE_ERROR && tl >= 8 && !strncmp(text, "refused:", 8)) {
        dl_round_fail(r, DL_AVG_DROPPED, "%s dropped us: %.*s", r->g.members[p].peer_id, tl, text);
    } else {
        char why[200];
        snprintf(why, sizeof why, "a chunk request ended with %s%s%.*s", dl_net_status_name(ev->status),
                 tl ? ": " : "", tl, text);
        dl_round_mark_failed(r, p, why);
    }
}

/* An aggregator silent for too long while we wait for it counts as failed;
 * recovery then takes over its missing chunks. */
static void check_aggregators(struct dl_round *r, double now) {
    for (size_t p = 0; p < r->g.n; p++) {
        if (p == r->me || !r->g.members[p].part_elems || r->failed[p]) continue;
        bool waiting = r->i_send && !r->send[p].done_or_failed;
        if (r->i_receive)
            for (size_t gi = r->first_chunk[p]; gi < r->first_chunk[p + 1] && !waiting; gi++)
                if (!r->store[gi]) waiting = true;
        if (waiting && now - r->last_heard[p] > r->agg_timeout) dl_round_mark_failed(r, p, "silent for too long");
    }
}

/* ---- the loop ------------------------------------------------------------------ */

/* Matchmaking ahead of the vector: takes it once the caller hands it over.
 * The others leave a sender silent for stall_s out of their parts, so a
 * vector later than that after the group formed could only be half in the
 * average: the round ends then, and the caller keeps its gradient. */
static void check_handoff(struct dl_round *r, double now) {
    if (r->input_ready || r->status != DL_AVG_OK) return;
    pthread_mutex_lock(r->lock);
    int state = r->handoff->state;
    double weight = r->handoff->weight;
    pthread_mutex_unlock(r->lock);
    if (state == 1) {
        if (!dl_all_finite(r->input, r->n)) {
            dl_round_fail(r, DL_AVG_FAILED, "cannot average a vector holding NaN or Inf (it must not leave this peer)");
            return;
        }
        r->weight = weight;
        r->input_ready = true;
        r->handed_at = now;
        /* The exchange keeps the time it would have had right after
         * matchmaking (at least two thirds of the deadline, as a leader's
         * window is at most a third). */
        double budget = r->deadline_s - fmin(r->group_time - r->start, r->deadline_s / 3);
        if (now + budget > r->deadline) r->deadline = now + budget;
    } else if (state == 2) {
        dl_round_fail(r, DL_AVG_NO_GROUP, "withdrawn before our vector was ready: keep the gradient for the next round");
    } else if (now - r->group_time > r->stall_s) {
        dl_round_fail(r, DL_AVG_NO_GROUP, "our vector was not ready %.1f s after the group formed (the others "
                      "leave us out after %.1f s): keep the gradient for the next round", now - r->group_time,
                      r->stall_s);
    }
}

static void on_event(struct dl_round *r, struct dl_avg_event *ev) {
    switch (ev->kind) {
    case EV_CHUNK: on_chunk(r, ev); break;
    case EV_CHUNK_ACK: on_chunk_ack(r, ev); break;
    case EV_RESULT: {
        r->bytes_received += ev->size;
        size_t part, k;
        if (dl_round_ref_chunk(r, ev->data, ev->size, &part, &k) >= 0 && r->failed[part] && ev->size > 18 &&
            ev->data[18] == 0) {
            /* Its aggregator counts as failed here: this chunk may be being
             * re-reduced, and a member must not hold the aggregator's bits
             * where others hold the re-reducer's. It comes from the
             * re-reducer, or relayed by a member, or from the aggregator
             * once it has shown it is alive. */
            dl_round_respond(r, ev->token, DL_NET_OK, NULL, 0);
            break;
        }
        int rc = dl_round_accept_result(r, ev->data, ev->size, true, ev->peer_id);
        if (rc < 0 && r->status == DL_AVG_OK) {
            long j = dl_group_find(&r->g, ev->peer_id);
            misbehaved(r, j, ev->token, ev->peer_id, dl_error());
        } else {
            dl_round_respond(r, ev->token, DL_NET_OK, NULL, 0);
        }
        break;
    }
    case EV_RESULT_ACK: {
        struct dl_result_out *o = &r->out[ev->member];
        if (o->inflight) o->inflight--;
        if (ev->status != DL_NET_OK) dl_round_mark_failed(r, ev->member, "it did not take our result");
        else r->last_heard[ev->member] = dl_round_now(r);
        break;
    }
    case EV_JOIN:
        /* A member whose first join was answered on a connection that then
         * closed asks again: it gets the same record. */
        if (r->group_record && dl_group_find(&r->g, ev->peer_id) >= 0)
            dl_round_respond(r, ev->token, DL_NET_OK, r->group_record, r->group_record_size);
        else
            dl_round_respond_text(r, ev->token, "the group of this epoch is closed: keep the gradient for the next round");
        break;
    case EV_AUDIT:
    case EV_AUDIT_ACK:
    case EV_AUDIT_DISCLOSED:
    case EV_AUDIT_SPOT_CHUNK: dl_audit_on_event(r, ev); break;
    default: dl_recovery_on_event(r, ev); break;
    }
}

static void answer_leftovers(struct dl_round *r) {
    if (r->agg)
        for (uint32_t k = 0; k < r->agg_chunks; k++)
            for (size_t j = 0; j < r->g.n; j++)
                if (r->agg[k].contrib[j] && j != r->me) {
                    dl_round_respond_text(r, r->agg[k].ack_token[j], "round failed at this aggregator");
                    free(r->agg[k].contrib[j]);
                    r->agg[k].contrib[j] = NULL;
                }
    for (size_t gi = 0; gi < r->num_chunks; gi++) {
        struct dl_rereduce *rr = &r->rr[gi];
        for (size_t w = 0; w < rr->num_waiters; w++) {
            if (r->store[gi]) dl_round_respond(r, rr->waiters[w], DL_NET_OK, r->store[gi], r->store_size[gi]);
            else dl_round_respond_text(r, rr->waiters[w], "round failed at the re-reducer");
        }
        rr->num_waiters = 0;
    }
}

/* The chunks held during matchmaking: those for our group go to the round
 * in the order they came, the others are refused as they would have been. */
static void take_early(struct dl_round *r) {
    struct dl_avg_event *mine = NULL, *ev = r->early;
    r->early = NULL;
    while (ev) {
        struct dl_avg_event *next = ev->next;
        if (ev->size >= DL_GROUP_ROUND_ID && !memcmp(ev->data, r->g.round_id, DL_GROUP_ROUND_ID)) {
            ev->next = mine; /* reverses the newest-first list */
            mine = ev;
        } else {
            ev->next = r->early;
            r->early = ev;
        }
        ev = next;
    }
    dl_round_drop_early(r);
    dl_round_handle(r, mine);
}

int dl_round_begin(struct dl_round *r) {
    if (dl_round_setup(r)) return -1;
    DL_INFO("collab", "round: %zu members, we are %zu (%s), part of %llu elements, %zu chunks, codec %s", r->g.n,
            r->me, r->i_aggregate ? "aggregator" : "no part", (unsigned long long)r->g.members[r->me].part_elems,
            r->num_chunks, dl_codec_name(r->g.codec));
    r->last_loop = dl_round_now(r);
    atomic_store(&r->heartbeat, r->last_loop);
    take_early(r);
    return 0;
}

#ifdef DEDLOC_TEST_HOOKS
/* DL_MISBEHAVE_SCALE_THEN_SILENT, DL_MISBEHAVE_THEN_SILENT: once every receiver has our first
 * result, the round thread stops answering until the deadline, as a hung
 * peer would (requests queue unanswered, the heartbeat goes stale). */
static bool silent_now(struct dl_round *r) {
    if (!goes_silent(r) || !r->i_aggregate || !r->agg_chunks)
        return false;
    for (size_t m = 0; m < r->g.n; m++)
        if (m != r->me && r->g.members[m].role != DL_MEMBER_AUX && !r->failed[m] &&
            (r->out[m].next < 1 || r->out[m].inflight))
            return false;
    DL_WARN("collab", "test misbehaviour: going silent after our first result");
    while (dl_now() < r->deadline) nanosleep(&(struct timespec){0, 50000000L}, NULL);
    dl_round_fail(r, DL_AVG_FAILED, "went silent after its first result (test misbehaviour)");
    return true;
}
#endif

bool dl_round_advance(struct dl_round *r, double *wake_at) {
#ifdef DEDLOC_TEST_HOOKS
    if (silent_now(r)) return true;
#endif
    double now = dl_round_now(r);
    dl_round_progress(r);
    check_handoff(r, now);
    if (r->status != DL_AVG_OK) return true;
    pump_send(r, now);
    pump_aggregate(r, now);
    pump_results(r, now);
    check_aggregators(r, now);
    dl_recovery_pump(r, now);
    if (r->status != DL_AVG_OK) return true;
    /* The audit starts once every result is in and our part is delivered. */
    if (r->input_ready && r->have == r->need && aggregation_done(r) &&
        (r->misbehaviour == DL_MISBEHAVE_SKIP_AUDIT || dl_audit_pump(r, now)))
        return true;
    if (r->status != DL_AVG_OK) return true;
    if (now >= r->deadline) {
        dl_round_fail(r, DL_AVG_DEADLINE, "the round did not complete within its deadline (%zu of %zu chunks)",
                      r->have, r->need);
        return true;
    }
    *wake_at = fmin(now + 0.05, r->deadline);
    return false;
}

void dl_round_handle(struct dl_round *r, struct dl_avg_event *ev) {
    while (ev) {
        struct dl_avg_event *next = ev->next;
        if (r->status == DL_AVG_OK) on_event(r, ev);
        else if (ev->token) dl_round_respond_text(r, ev->token, "round failed");
        dl_round_progress(r);
        dl_avg_event_free(ev);
        ev = next;
    }
}

int dl_round_end(struct dl_round *r) {
    answer_leftovers(r);
    return r->status == DL_AVG_OK ? 0 : -1;
}

int dl_round_run(struct dl_round *r) {
    if (dl_round_begin(r)) {
        dl_round_end(r);
        return -1;
    }
    double wake_at;
    while (!dl_round_advance(r, &wake_at)) dl_round_handle(r, dl_round_wait_events(r, wake_at));
    return dl_round_end(r);
}
