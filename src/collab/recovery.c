/* Recovery from an aggregator that failed mid-round.
 *
 * A member missing chunks of a failed aggregator's part first asks the
 * other members for them: whoever holds the aggregator's signed result
 * passes those bytes on, identical for everyone. When nobody answers with
 * them, the chunk goes to a re-reducer chosen deterministically (the first
 * trainer after the failed aggregator in member order that has not failed):
 * it makes sure the aggregator is unreachable, gathers the chunk's
 * contributions from the surviving senders (each still holds its vector),
 * reduces them in member order and signs the result as generation 1. Every
 * member that asks gets those same bytes.
 *
 * It sits on the round's state (round.c) and under its loop (allreduce.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/round.h"
#include "collab/wirecodec.h"

static const char alive_text[] = "aggregator alive";

static void answer_waiters(struct dl_round *r, size_t gi, const char *error) {
    struct dl_rereduce *rr = &r->rr[gi];
    for (size_t w = 0; w < rr->num_waiters; w++) {
        if (!error && r->store[gi]) dl_round_respond(r, rr->waiters[w], DL_NET_OK, r->store[gi], r->store_size[gi]);
        else dl_round_respond_text(r, rr->waiters[w], error ? error : "no result");
    }
    rr->num_waiters = 0;
}

static void finish_rereduce(struct dl_round *r, size_t part, size_t k) {
    size_t gi = r->first_chunk[part] + k;
    struct dl_rereduce *rr = &r->rr[gi];
    bool reduced_here = false;
    if (!r->store[gi]) {
        bool bad[DL_AVG_MAX_MEMBERS] = {false};
        if (dl_round_reduce(r, part, k, 1, rr->contrib, bad))
            DL_WARN("collab", "cannot re-reduce part %zu chunk %zu: no contribution", part, k);
        else
            reduced_here = true;
        for (size_t j = 0; j < r->g.n; j++)
            if (bad[j])
                dl_round_ban(r, r->g.members[j].peer_id,
                             "sent a contribution that does not decode or an impossible weight");
    }
    /* The signed contributions of a result we signed are kept: its
     * attestation shows them to every member (audit_round.c). */
    for (size_t j = 0; j < r->g.n && !reduced_here; j++) {
        free(rr->contrib[j]);
        rr->contrib[j] = NULL;
    }
    rr->state = RR_IDLE;
    answer_waiters(r, gi, r->store[gi] ? NULL : "re-reduction failed");
}

static void gather(struct dl_round *r, size_t part, size_t k) {
    size_t gi = r->first_chunk[part] + k;
    struct dl_rereduce *rr = &r->rr[gi];
    if (!rr->contrib && !(rr->contrib = dl_calloc(r->g.n, sizeof(uint8_t *)))) {
        answer_waiters(r, gi, "out of memory");
        return;
    }
    rr->state = RR_GATHERING;
    rr->outstanding = 0;
    rr->started = dl_round_now(r);
    uint8_t ref[DL_AVG_REF_HEADER];
    dl_round_write_ref(ref, r, part, k);
    for (size_t j = 0; j < r->g.n; j++) {
        if (j == part || r->g.members[j].role == DL_MEMBER_AUX || r->failed[j]) continue;
        if (j == r->me) {
            size_t size;
            /* not even encoded where we sit out of the parts we reduce */
            if (r->i_send && dl_round_counts_itself(r))
                rr->contrib[j] = dl_round_encode_own(r, part, k, false, &size);
            continue;
        }
        if (!dl_round_request(r, r->g.members[j].peer_id, "avg.contrib", ref, sizeof ref, r->stall_s, EV_CONTRIB_REPLY,
                              (uint32_t)part, (uint32_t)k, (uint32_t)j))
            rr->outstanding++;
    }
    if (!rr->outstanding) finish_rereduce(r, part, k);
}

/* Only an aggregator we cannot reach is replaced: ask it first, twice (a
 * connection that closed under a first request, a duplicate being torn
 * down, must not make a live aggregator look dead). */
static void ping(struct dl_round *r, size_t part, size_t k) {
    struct dl_rereduce *rr = &r->rr[r->first_chunk[part] + k];
    uint8_t ref[DL_AVG_REF_HEADER];
    dl_round_write_ref(ref, r, part, k);
    rr->state = RR_PINGING;
    rr->pings++;
    if (dl_round_request(r, r->g.members[part].peer_id, "avg.alive", ref, sizeof ref, fmin(r->stall_s, 3.0),
                         EV_PING_REPLY, (uint32_t)part, (uint32_t)k, (uint32_t)part)) {
        dl_round_mark_failed(r, part, "unreachable");
        gather(r, part, k);
    }
}

/* Re-reduces (part, k) here, for a waiter or for ourselves. */
static void begin_rereduce(struct dl_round *r, size_t part, size_t k) {
    size_t gi = r->first_chunk[part] + k;
    struct dl_rereduce *rr = &r->rr[gi];
    if (rr->state != RR_IDLE) return;
    /* Even when we count it as failed ourselves: a request that ended
     * with a closed connection is no proof that it is gone. */
    rr->pings = 0;
    ping(r, part, k);
}

static void start_rereduce_request(struct dl_round *r, size_t part, size_t k) {
    size_t gi = r->first_chunk[part] + k;
    struct dl_recovery *rec = &r->rec[gi];
    long m = dl_round_rereducer(r, part);
    if (m < 0) {
        dl_round_fail(r, DL_AVG_FAILED, "no trainer can re-reduce part %zu", part);
        return;
    }
    rec->state = REC_REREDUCE_WAIT;
    if ((size_t)m == r->me) {
        r->rr[gi].local_need = true;
        begin_rereduce(r, part, k);
        if (r->rr[gi].state == RR_IDLE && !r->store[gi]) {
            rec->state = REC_IDLE;
            rec->retry_at = dl_round_now(r) + 0.2;
        }
        return;
    }
    uint8_t ref[DL_AVG_REF_HEADER];
    dl_round_write_ref(ref, r, part, k);
    if (dl_round_request(r, r->g.members[m].peer_id, "avg.rereduce", ref, sizeof ref, 2 * r->stall_s + 4,
                         EV_REREDUCE_REPLY, (uint32_t)part, (uint32_t)k, (uint32_t)m)) {
        rec->state = REC_IDLE;
        rec->retry_at = dl_round_now(r) + 0.5;
    }
}

void dl_recovery_pump(struct dl_round *r, double now) {
    if (!r->i_receive) return;
    for (size_t p = 0; p < r->g.n; p++) {
        if (p == r->me || !r->failed[p] || !r->g.members[p].part_elems) continue;
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            size_t gi = r->first_chunk[p] + k;
            struct dl_recovery *rec = &r->rec[gi];
            if (r->store[gi] || rec->state != REC_IDLE || now < rec->retry_at) continue;
            uint8_t ref[DL_AVG_REF_HEADER];
            dl_round_write_ref(ref, r, p, k);
            rec->outstanding = rec->got_negative = 0;
            for (size_t m = 0; m < r->g.n; m++) {
                if (m == r->me || m == p || r->g.members[m].role == DL_MEMBER_AUX || r->failed[m]) continue;
                if (!dl_round_request(r, r->g.members[m].peer_id, "avg.fetch", ref, sizeof ref, fmin(r->stall_s, 5.0),
                                      EV_FETCH_REPLY, (uint32_t)p, (uint32_t)k, (uint32_t)m))
                    rec->outstanding++;
            }
            if (rec->outstanding) rec->state = REC_FETCHING;
            else start_rereduce_request(r, p, k);
            if (r->status != DL_AVG_OK) return;
        }
    }
}

static bool text_is(const struct dl_avg_event *ev, const char *text) {
    size_t n = strlen(text);
    return ev->size >= n && !memcmp(ev->data, text, n);
}

void dl_recovery_on_event(struct dl_round *r, struct dl_avg_event *ev) {
    size_t part = ev->part, k = ev->chunk;
    switch (ev->kind) {
    case EV_FETCH: {
        long gi = dl_round_ref_chunk(r, ev->data, ev->size, &part, &k);
        if (gi >= 0 && r->store[gi]) dl_round_respond(r, ev->token, DL_NET_OK, r->store[gi], r->store_size[gi]);
        else dl_round_respond_text(r, ev->token, "none");
        break;
    }
    case EV_CONTRIB: {
        long gi = dl_round_ref_chunk(r, ev->data, ev->size, &part, &k);
        size_t size;
        uint8_t *msg = gi >= 0 && r->i_send ? dl_round_encode_own(r, part, k, true, &size) : NULL;
        if (msg) dl_round_respond(r, ev->token, DL_NET_OK, msg, size);
        else dl_round_respond_text(r, ev->token, "no contribution");
        free(msg);
        break;
    }
    case EV_REREDUCE: {
        long gi = dl_round_ref_chunk(r, ev->data, ev->size, &part, &k);
        if (gi < 0 || dl_round_rereducer(r, part) != (long)r->me) {
            dl_round_respond_text(r, ev->token, "not the re-reducer of that part");
            break;
        }
        if (r->store[gi]) {
            dl_round_respond(r, ev->token, DL_NET_OK, r->store[gi], r->store_size[gi]);
            break;
        }
        struct dl_rereduce *rr = &r->rr[gi];
        uint64_t *w = realloc(rr->waiters, (rr->num_waiters + 1) * sizeof *w);
        if (!w) {
            dl_round_respond_text(r, ev->token, "out of memory");
            break;
        }
        rr->waiters = w;
        rr->waiters[rr->num_waiters++] = ev->token;
        begin_rereduce(r, part, k);
        break;
    }
    case EV_PING_REPLY: {
        size_t gi = r->first_chunk[part] + k;
        struct dl_rereduce *rr = &r->rr[gi];
        if (rr->state != RR_PINGING) break;
        if (ev->status == DL_NET_OK) {
            /* It still runs this round and will deliver. */
            rr->state = RR_IDLE;
            r->failed[part] = false;
            r->last_heard[part] = dl_round_now(r);
            answer_waiters(r, gi, alive_text);
            if (rr->local_need) {
                r->rec[gi].state = REC_IDLE;
                r->rec[gi].retry_at = dl_round_now(r) + 0.5;
            }
        } else if (rr->pings < 2 && ev->status != DL_NET_REMOTE_ERROR) {
            ping(r, part, k);
        } else {
            dl_round_mark_failed(r, part, "does not answer for its part");
            gather(r, part, k);
        }
        break;
    }
    case EV_CONTRIB_REPLY: {
        size_t gi = r->first_chunk[part] + k;
        struct dl_rereduce *rr = &r->rr[gi];
        if (rr->state != RR_GATHERING) break;
        if (rr->outstanding) rr->outstanding--;
        uint64_t off, len;
        dl_round_chunk_range(r, part, k, &off, &len);
        if (ev->status == DL_NET_OK && ev->size == dl_round_chunk_msg_size(r, len) &&
            !rr->contrib[ev->member]) {
            r->bytes_received += ev->size;
            rr->contrib[ev->member] = ev->data;
            ev->data = NULL;
        } else if (ev->status == DL_NET_TIMEOUT || ev->status == DL_NET_DISCONNECTED) {
            dl_round_mark_failed(r, ev->member, "did not answer for its contribution");
        }
        if (!rr->outstanding) finish_rereduce(r, part, k);
        break;
    }
    case EV_FETCH_REPLY: {
        size_t gi = r->first_chunk[part] + k;
        struct dl_recovery *rec = &r->rec[gi];
        if (rec->state != REC_FETCHING) break;
        if (rec->outstanding) rec->outstanding--;
        if (ev->status == DL_NET_OK) {
            r->bytes_received += ev->size;
            if (dl_round_accept_result(r, ev->data, ev->size, false, NULL) < 0)
                DL_WARN("collab", "a relayed result from %s was refused: %s", ev->peer_id, dl_error());
        }
        if (!rec->outstanding && !r->store[gi]) start_rereduce_request(r, part, k);
        else if (!rec->outstanding) rec->state = REC_IDLE;
        break;
    }
    case EV_REREDUCE_REPLY: {
        size_t gi = r->first_chunk[part] + k;
        struct dl_recovery *rec = &r->rec[gi];
        if (rec->state != REC_REREDUCE_WAIT) break;
        rec->state = REC_IDLE;
        if (ev->status == DL_NET_OK) {
            r->bytes_received += ev->size;
            if (dl_round_accept_result(r, ev->data, ev->size, false, NULL) < 0)
                DL_WARN("collab", "a re-reduced result from %s was refused: %s", ev->peer_id, dl_error());
        } else if (ev->status == DL_NET_REMOTE_ERROR && text_is(ev, alive_text)) {
            /* The aggregator answered the re-reducer: wait for it after all. */
            r->failed[part] = false;
            r->last_heard[part] = dl_round_now(r);
        } else if (ev->member < r->g.n &&
                   (r->failed[ev->member] || (ev->status == DL_NET_REMOTE_ERROR && text_is(ev, "round failed")))) {
            /* Only this member may re-reduce the part, and it failed too or
             * left the round: nobody will ever bring this chunk, so the
             * round ends now instead of at its deadline (an attacked swarm
             * waited out 60 s that way). Nothing is applied; the gradient
             * waits for the next round. */
            dl_round_fail(r, DL_AVG_FAILED, "part %zu cannot be recovered: its re-reducer, member %u (%s), %s", part,
                          ev->member, r->g.members[ev->member].peer_id,
                          r->failed[ev->member] ? "failed too" : "left the round");
        } else {
            /* Only this member may re-reduce the part: ask it again (the
             * round's deadline bounds the wait). */
            rec->retry_at = dl_round_now(r) + 0.5;
        }
        break;
    }
    default:
        if (ev->token) dl_round_respond_text(r, ev->token, "unexpected");
        break;
    }
}
