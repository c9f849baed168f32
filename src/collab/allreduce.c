/* The load-balanced butterfly all-reduce of one group.
 *
 * Member p aggregates part p (its size comes from the load-balancing LP).
 * Every member that has a vector sends each other aggregator its chunks of
 * that aggregator's part; the aggregator reduces each chunk once, in member
 * order, in double, encodes it, signs it and returns the same bytes to every
 * member. Every member (the aggregator included) decodes its result from
 * those bytes, so all of them hold the same bits. Senders that die, stall or
 * misbehave are left out of the chunks they had not delivered; the chunk's
 * contributor mask travels with it. */
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/centered_clip.h"
#include "collab/collab_internal.h"
#include "collab/wirecodec.h"

int dl_round_fail(struct dl_round *r, enum dl_avg_status status, const char *fmt, ...) {
    if (r->status == DL_AVG_OK) {
        r->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->reason, sizeof r->reason, fmt, ap);
        va_end(ap);
    }
    return -1;
}

size_t dl_round_chunks_of(const struct dl_round *r, size_t part) {
    uint64_t e = r->g.members[part].part_elems;
    return (size_t)((e + DL_AVG_CHUNK_ELEMS - 1) / DL_AVG_CHUNK_ELEMS);
}

void dl_round_chunk_range(const struct dl_round *r, size_t part, size_t k, uint64_t *offset, uint64_t *length) {
    const struct dl_group_member *m = &r->g.members[part];
    uint64_t start = (uint64_t)k * DL_AVG_CHUNK_ELEMS;
    *offset = m->part_offset + start;
    *length = m->part_elems - start < DL_AVG_CHUNK_ELEMS ? m->part_elems - start : DL_AVG_CHUNK_ELEMS;
}

void dl_round_write_ref(uint8_t *out, const struct dl_round *r, size_t part, size_t k) {
    memset(out, 0, DL_AVG_REF_HEADER);
    memcpy(out, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(out + 16, (uint16_t)part);
    dl_put_u32(out + 20, (uint32_t)k);
}

long dl_round_ref_chunk(const struct dl_round *r, const uint8_t *msg, size_t size, size_t *part, size_t *k) {
    if (size < DL_AVG_REF_HEADER || memcmp(msg, r->g.round_id, DL_GROUP_ROUND_ID)) return -1;
    *part = dl_get_u16(msg + 16);
    *k = dl_get_u32(msg + 20);
    if (*part >= r->g.n || *k >= dl_round_chunks_of(r, *part)) return -1;
    return (long)(r->first_chunk[*part] + *k);
}

void dl_round_mark_failed(struct dl_round *r, size_t member, const char *why) {
    if (member == r->me || r->failed[member]) return;
    r->failed[member] = true;
    DL_INFO("collab", "member %zu (%s) counts as failed: %s", member, r->g.members[member].peer_id, why);
}

bool dl_round_weight_ok(double weight) { return isfinite(weight) && weight >= 0 && weight <= DL_AVG_MAX_WEIGHT; }

uint8_t *dl_round_encode_own(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size) {
    if (!r->input_ready || !r->input) return NULL;
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t enc = dl_codec_size(r->g.codec, (size_t)len);
    int mode = misbehave ? r->c->misbehaviour : DL_MISBEHAVE_NONE;
    size_t extra = mode == DL_MISBEHAVE_WRONG_SIZE ? 4 : 0;
    uint8_t *msg = dl_malloc(DL_AVG_CHUNK_HEADER + enc + extra);
    if (!msg) return NULL;
    dl_round_write_ref(msg, r, part, k);
    double weight = mode == DL_MISBEHAVE_WEIGHT_NAN        ? NAN
                    : mode == DL_MISBEHAVE_WEIGHT_NEGATIVE ? -r->weight - 1
                    : mode == DL_MISBEHAVE_WEIGHT_HUGE     ? 1e30
                                                           : r->weight;
    dl_put_f64(msg + DL_AVG_REF_HEADER, weight);
    if (dl_codec_encode(r->g.codec, r->input + off, (size_t)len, msg + DL_AVG_CHUNK_HEADER)) {
        free(msg);
        return NULL;
    }
    uint8_t *data = msg + DL_AVG_CHUNK_HEADER;
    if (mode == DL_MISBEHAVE_NAN) {
        if (r->g.codec == DL_CODEC_NONE) {
            float nan = NAN;
            memcpy(data, &nan, 4);
        } else if (r->g.codec == DL_CODEC_FP16) {
            dl_put_u16(data, 0x7E00);
        } else {
            float nan = NAN;
            memcpy(data, &nan, 4); /* the codebook's first entry */
        }
    } else if (mode == DL_MISBEHAVE_WRONG_PART) {
        dl_put_u16(msg + 16, (uint16_t)((part + 1) % r->g.n));
    } else if (mode == DL_MISBEHAVE_GARBAGE) {
        randombytes_buf(data, enc);
        if (r->g.codec == DL_CODEC_NONE) memset(data, 0xFF, 4); /* a NaN, so that it cannot pass as data */
    } else if (extra) {
        memset(data + enc, 0, extra);
    }
    *size = DL_AVG_CHUNK_HEADER + enc + extra;
    return msg;
}

static void sign_result(struct dl_round *r, uint8_t *msg, size_t data_size) {
    uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
    memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
    crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER, data_size, NULL, 0);
    dl_net_sign(r->c->net, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED);
}

static int store_result(struct dl_round *r, size_t gi, uint8_t *msg, size_t size) {
    r->store[gi] = msg;
    r->store_size[gi] = size;
    if (r->i_receive) r->have++;
    return 1;
}

/* CenteredClip over the decoded contributions (all of them at once: the
 * iterations revisit each), then into r->tmp. Marks whom it clipped. */
static int reduce_clipped(struct dl_round *r, const float *decoded, const size_t *who, const double *w, size_t count,
                          size_t len) {
    const float *x[DL_AVG_MAX_MEMBERS];
    bool clipped[DL_AVG_MAX_MEMBERS] = {false};
    for (size_t i = 0; i < count; i++) x[i] = decoded + i * len;
    if (dl_centered_clip(x, w, count, len, r->g.clip_tau, r->g.clip_iterations, r->acc, clipped)) return -1;
    for (size_t i = 0; i < count; i++) {
        r->reduced_from[who[i]] = true;
        if (clipped[i]) r->clipped[who[i]] = true;
    }
    for (size_t e = 0; e < len; e++) r->tmp[e] = (float)r->acc[e];
    return 0;
}

int dl_round_reduce(struct dl_round *r, size_t part, size_t k, uint8_t generation, uint8_t **contrib, bool *bad) {
    double t0 = dl_now();
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t enc = dl_codec_size(r->g.codec, (size_t)len);
    memset(r->acc, 0, sizeof(double) * len);
    /* Each contribution counts with the weight its own chunk header carries
     * (the group record's is only the join's estimate); one that is not a
     * weight is refused like data that does not decode. */
    double header_weight[DL_AVG_MAX_MEMBERS];
    bool usable[DL_AVG_MAX_MEMBERS] = {false};
    double present_weight = 0;
    size_t present = 0;
    for (size_t j = 0; j < r->g.n; j++) {
        if (!contrib[j]) continue;
        header_weight[j] = dl_get_f64(contrib[j] + DL_AVG_REF_HEADER);
        if (!dl_round_weight_ok(header_weight[j]) || r->g.members[j].role == DL_MEMBER_AUX) {
            bad[j] = true;
            continue;
        }
        usable[j] = true;
        present_weight += header_weight[j];
        present++;
    }
    bool equal = !(present_weight > 0);
    bool clip = r->g.aggregation == DL_AGG_CENTERED_CLIP;
    float *decoded = NULL;
    size_t who[DL_AVG_MAX_MEMBERS];
    double weights[DL_AVG_MAX_MEMBERS];
    if (clip) {
        decoded = dl_malloc(sizeof(float) * (size_t)len * (present ? present : 1));
        if (!decoded) return -1;
    }
    double total = 0, samples = 0;
    size_t count = 0;
    uint8_t mask[32] = {0};
    for (size_t j = 0; j < r->g.n; j++) {
        if (!usable[j]) continue;
        float *into = clip ? decoded + count * (size_t)len : r->tmp;
        if (dl_codec_decode(r->g.codec, contrib[j] + DL_AVG_CHUNK_HEADER, enc, (size_t)len, into)) {
            bad[j] = true;
            continue;
        }
        double w = equal ? 1.0 : header_weight[j];
        if (clip) {
            who[count] = j;
            weights[count] = w;
        } else {
            for (size_t e = 0; e < len; e++) r->acc[e] += w * (double)into[e];
        }
        total += w;
        samples += header_weight[j];
        count++;
        mask[j / 8] |= (uint8_t)(1u << (j % 8));
    }
    if (!count || !(total > 0)) {
        free(decoded);
        return -1;
    }
    if (clip) {
        int rc = reduce_clipped(r, decoded, who, weights, count, (size_t)len);
        free(decoded);
        if (rc) return -1;
    } else {
        for (size_t e = 0; e < len; e++) r->tmp[e] = (float)(r->acc[e] / total);
    }
    uint8_t *msg = dl_malloc(DL_AVG_RESULT_HEADER + enc);
    if (!msg) return -1;
    memset(msg, 0, DL_AVG_RESULT_HEADER);
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)part);
    msg[18] = generation;
    dl_put_u32(msg + 20, (uint32_t)k);
    dl_put_u16(msg + 24, (uint16_t)r->me);
    memcpy(msg + 28, mask, 32);
    dl_put_f64(msg + 60, samples);
    if (dl_codec_encode(r->g.codec, r->tmp, (size_t)len, msg + DL_AVG_RESULT_HEADER)) {
        free(msg);
        return -1;
    }
    sign_result(r, msg, enc);
    store_result(r, r->first_chunk[part] + k, msg, DL_AVG_RESULT_HEADER + enc);
    r->reduce_s += dl_now() - t0;
    r->reduced_elems += len * count;
    return 0;
}

int dl_round_accept_result(struct dl_round *r, const uint8_t *msg, size_t size, bool from_reducer,
                           const char *sender) {
    size_t part, k;
    long gi = dl_round_ref_chunk(r, msg, size, &part, &k);
    if (gi < 0 || size < DL_AVG_RESULT_HEADER) return dl_fail("result for no chunk of this round");
    uint8_t gen = msg[18];
    size_t reducer = dl_get_u16(msg + 24);
    if (reducer >= r->g.n || gen > 1 || (gen == 0 && reducer != part) ||
        (gen == 1 && dl_round_rereducer(r, part) != (long)reducer))
        return dl_fail("result with an impossible reducer or generation");
    if (from_reducer && strcmp(sender, r->g.members[reducer].peer_id))
        return dl_fail("result sent by someone other than its reducer");
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t enc = dl_codec_size(r->g.codec, (size_t)len);
    if (size != DL_AVG_RESULT_HEADER + enc) return dl_fail("result of %zu bytes, expected %zu", size, DL_AVG_RESULT_HEADER + enc);
    if (r->store[gi]) return 0;
    uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
    memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
    crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER, enc, NULL, 0);
    const struct dl_group_member *m = &r->g.members[reducer];
    if (dl_net_verify(m->peer_id, m->pk, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED))
        return dl_fail_context("result of part %zu chunk %zu", part, k);
    double samples = dl_get_f64(msg + 60);
    if (!(dl_round_weight_ok(samples / (double)r->g.n)) ||
        dl_codec_decode(r->g.codec, msg + DL_AVG_RESULT_HEADER, enc, (size_t)len, r->tmp)) {
        /* Signed by its reducer, so every member got these same bytes:
         * every member fails alike. */
        dl_round_fail(r, DL_AVG_FAILED, "the result of part %zu chunk %zu from %s does not decode or carries "
                      "an impossible weight (%g)", part, k, m->peer_id, samples);
        return -1;
    }
    uint8_t *copy = dl_malloc(size);
    if (!copy) return -1;
    memcpy(copy, msg, size);
    r->last_heard[reducer] = dl_now();
    r->heard[reducer] = true;
    return store_result(r, (size_t)gi, copy, size);
}

/* Called at every step of the round thread. A gap longer than stall_s
 * between two steps means we were stopped long enough for others to count
 * us out: they may have re-reduced our part, so our bits could differ. */
void dl_round_progress(struct dl_round *r) {
    double now = dl_now();
    if (now - r->last_loop > r->stall_s)
        dl_round_fail(r, DL_AVG_UNSURE,
                      "this peer stood still for %.1f s mid-round; applying nothing (catch up by state download)",
                      now - r->last_loop);
    r->last_loop = now;
    atomic_store(&r->heartbeat, now);
}

/* ---- setup and teardown ------------------------------------------------------- */

static int setup(struct dl_round *r) {
    struct dl_group *g = &r->g;
    size_t n = g->n;
    int role = g->members[r->me].role;
    r->i_send = role != DL_MEMBER_AUX;
    r->i_receive = role != DL_MEMBER_AUX;
    r->i_aggregate = g->members[r->me].part_elems > 0;
    r->stall_s = g->stall_s;
    r->agg_timeout = 2 * r->stall_s + 2;
    r->first_chunk = dl_calloc(n + 1, sizeof *r->first_chunk);
    r->dropped = dl_calloc(n, sizeof *r->dropped);
    r->failed = dl_calloc(n, sizeof *r->failed);
    r->last_from = dl_calloc(n, sizeof *r->last_from);
    r->last_heard = dl_calloc(n, sizeof *r->last_heard);
    r->heard = dl_calloc(n, sizeof *r->heard);
    r->clipped = dl_calloc(n, sizeof *r->clipped);
    r->reduced_from = dl_calloc(n, sizeof *r->reduced_from);
    r->send = dl_calloc(n, sizeof *r->send);
    r->out = dl_calloc(n, sizeof *r->out);
    r->tmp = dl_malloc(sizeof(float) * DL_AVG_CHUNK_ELEMS);
    r->acc = dl_malloc(sizeof(double) * DL_AVG_CHUNK_ELEMS);
    if (!r->first_chunk || !r->dropped || !r->failed || !r->last_from || !r->last_heard || !r->heard || !r->clipped || !r->reduced_from || !r->send || !r->out ||
        !r->tmp || !r->acc)
        return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
    for (size_t p = 0; p < n; p++) r->first_chunk[p + 1] = r->first_chunk[p] + dl_round_chunks_of(r, p);
    r->num_chunks = r->first_chunk[n];
    r->need = r->i_receive ? r->num_chunks : 0;
    r->store = dl_calloc(r->num_chunks + 1, sizeof *r->store);
    r->store_size = dl_calloc(r->num_chunks + 1, sizeof *r->store_size);
    r->rec = dl_calloc(r->num_chunks + 1, sizeof *r->rec);
    r->rr = dl_calloc(r->num_chunks + 1, sizeof *r->rr);
    if (!r->store || !r->store_size || !r->rec || !r->rr) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
    double now = dl_now();
    for (size_t p = 0; p < n; p++) {
        r->last_from[p] = r->last_heard[p] = now;
        r->send[p].total = (uint32_t)dl_round_chunks_of(r, p);
        r->send[p].resend = dl_calloc(DL_AVG_SEND_WINDOW + 1, sizeof(uint32_t));
        if (!r->send[p].resend) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
    }
    if (r->i_aggregate) {
        r->agg_chunks = (uint32_t)dl_round_chunks_of(r, r->me);
        r->agg = dl_calloc(r->agg_chunks, sizeof *r->agg);
        if (!r->agg) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
        for (uint32_t k = 0; k < r->agg_chunks; k++) {
            r->agg[k].contrib = dl_calloc(n, sizeof(uint8_t *));
            r->agg[k].ack_token = dl_calloc(n, sizeof(uint64_t));
            if (!r->agg[k].contrib || !r->agg[k].ack_token) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
        }
    }
    return 0;
}

void dl_round_free(struct dl_round *r) {
    if (!r) return;
    if (r->agg)
        for (uint32_t k = 0; k < r->agg_chunks; k++) {
            if (r->agg[k].contrib)
                for (size_t j = 0; j < r->g.n; j++) free(r->agg[k].contrib[j]);
            free(r->agg[k].contrib);
            free(r->agg[k].ack_token);
        }
    free(r->agg);
    if (r->store)
        for (size_t i = 0; i < r->num_chunks; i++) free(r->store[i]);
    if (r->rr)
        for (size_t i = 0; i < r->num_chunks; i++) {
            free(r->rr[i].waiters);
            if (r->rr[i].contrib)
                for (size_t j = 0; j < r->g.n; j++) free(r->rr[i].contrib[j]);
            free(r->rr[i].contrib);
        }
    if (r->send)
        for (size_t p = 0; p < r->g.n; p++) free(r->send[p].resend);
    free(r->store);
    free(r->store_size);
    free(r->rec);
    free(r->rr);
    free(r->send);
    free(r->out);
    free(r->first_chunk);
    free(r->dropped);
    free(r->failed);
    free(r->last_from);
    free(r->last_heard);
    free(r->heard);
    free(r->clipped);
    free(r->reduced_from);
    free(r->tmp);
    free(r->acc);
    free(r->group_record);
    free(r);
}

/* Serves a late request from a finished round's store (network thread). */
void dl_round_serve_finished(struct dl_collab *c, struct dl_round *r, int kind, const struct dl_net_incoming *in) {
    size_t part, k;
    long gi = dl_round_ref_chunk(r, in->payload, in->size, &part, &k);
    if (kind == EV_RESULT) {
        dl_net_respond(c->net, in->token, DL_NET_OK, NULL, 0);
    } else if ((kind == EV_FETCH || kind == EV_REREDUCE) && gi >= 0 && r->store[gi]) {
        dl_net_respond_ex(c->net, in->token, DL_NET_OK, r->store[gi], r->store_size[gi], DL_NET_RAW);
    } else {
        static const char msg[] = "round finished";
        dl_net_respond(c->net, in->token, DL_NET_REMOTE_ERROR, msg, sizeof msg - 1);
    }
}

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
    dl_collab_ban(r->c, peer_id, why);
    if (j >= 0) {
        drop_sender(r, (size_t)j, why);
        dl_round_mark_failed(r, (size_t)j, why);
    }
}

static void on_chunk(struct dl_round *r, struct dl_avg_event *ev) {
    char why[160];
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
    size_t want = DL_AVG_CHUNK_HEADER + dl_codec_size(r->g.codec, (size_t)len);
    if (ev->size != want) {
        snprintf(why, sizeof why, "sent a chunk of %zu bytes where %zu were due", ev->size, want);
        misbehaved(r, j, ev->token, ev->peer_id, why);
        return;
    }
    r->bytes_received += ev->size;
    r->last_from[j] = r->last_heard[j] = dl_now();
    r->heard[j] = true;
    struct dl_agg_chunk *a = &r->agg[k];
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
    /* Our own contribution goes into every chunk of our part. */
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
        uint8_t *own = NULL;
        if (r->i_send) {
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
            free(a->contrib[j]);
            a->contrib[j] = NULL;
            if (bad[j])
                misbehaved(r, (long)j, a->ack_token[j], r->g.members[j].peer_id,
                           "sent data that does not decode (NaN, Inf or garbage) or an impossible weight");
            else
                dl_round_respond(r, a->ack_token[j], DL_NET_OK, NULL, 0);
            /* It may send again from now on: its silence counts from here. */
            r->last_from[j] = dl_now();
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

static void pump_results(struct dl_round *r, double now) {
    if (!r->i_aggregate) return;
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX || r->failed[m]) continue;
        struct dl_result_out *o = &r->out[m];
        while (o->inflight < DL_AVG_RESULT_WINDOW && o->next < r->next_reduce) {
            size_t gi = r->first_chunk[r->me] + o->next;
            if (dl_round_request(r, r->g.members[m].peer_id, "avg.result", r->store[gi], r->store_size[gi],
                                 r->deadline - now, EV_RESULT_ACK, (uint32_t)r->me, o->next, (uint32_t)m)) {
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
            /* Chunks to send again go first: the aggregator acknowledges in
             * order, so later chunks would only fill the window behind them. */
            if (s->num_resend && now < s->resend_at) break;
            if (s->num_resend) k = s->resend[--s->num_resend];
            else if (s->next < s->total) k = s->next++;
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
            s->inflight++;
        }
    }
}

static void on_chunk_ack(struct dl_round *r, struct dl_avg_event *ev) {
    size_t p = ev->part;
    struct dl_send_part *s = &r->send[p];
    if (s->inflight) s->inflight--;
    if (ev->status == DL_NET_OK) {
        r->last_heard[p] = dl_now();
        r->heard[p] = true;
        if (++s->acked >= s->total) s->done_or_failed = true;
        return;
    }
    const char *text = ev->size ? (const char *)ev->data : "";
    int tl = (int)ev->size;
    bool unknown = ev->status == DL_NET_REMOTE_ERROR && tl >= 13 && !strncmp(text, "unknown round", 13);
    /* Right after matchmaking a connection to a member we only know from
     * its records may still be on its way: not a failure yet. */
    bool connecting = ev->status == DL_NET_DISCONNECTED && !r->heard[p] &&
                      dl_now() - r->group_time < DL_AVG_CONNECT_GRACE_S;
    if (unknown || connecting) {
        /* The aggregator has not seen the group record yet: try again soon. */
        if (s->num_resend <= DL_AVG_SEND_WINDOW) s->resend[s->num_resend++] = ev->chunk;
        s->resend_at = dl_now() + 0.05;
    } else if (ev->status == DL_NET_REMOTE_ERROR && tl >= 9 && !strncmp(text, "left out:", 9)) {
        r->last_heard[p] = dl_now();
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
    pthread_mutex_lock(&r->c->lock);
    int state = r->handoff->state;
    double weight = r->handoff->weight;
    pthread_mutex_unlock(&r->c->lock);
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
        else r->last_heard[ev->member] = dl_now();
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

int dl_round_run(struct dl_round *r) {
    if (setup(r)) {
        answer_leftovers(r);
        return -1;
    }
    DL_INFO("collab", "round: %zu members, we are %zu (%s), part of %llu elements, %zu chunks, codec %s", r->g.n,
            r->me, r->i_aggregate ? "aggregator" : "no part", (unsigned long long)r->g.members[r->me].part_elems,
            r->num_chunks, dl_codec_name(r->g.codec));
    r->last_loop = dl_now();
    atomic_store(&r->heartbeat, r->last_loop);
    for (;;) {
        double now = dl_now();
        dl_round_progress(r);
        check_handoff(r, now);
        if (r->status != DL_AVG_OK) break;
        pump_send(r, now);
        pump_aggregate(r, now);
        pump_results(r, now);
        check_aggregators(r, now);
        dl_recovery_pump(r, now);
        if (r->status != DL_AVG_OK) break;
        if (r->input_ready && r->have == r->need && aggregation_done(r)) break;
        if (now >= r->deadline) {
            dl_round_fail(r, DL_AVG_DEADLINE, "the round did not complete within its deadline (%zu of %zu chunks)",
                          r->have, r->need);
            break;
        }
        struct dl_avg_event *ev = dl_round_wait_events(r, fmin(now + 0.05, r->deadline));
        while (ev) {
            struct dl_avg_event *next = ev->next;
            if (r->status == DL_AVG_OK) on_event(r, ev);
            else if (ev->token) dl_round_respond_text(r, ev->token, "round failed");
            dl_round_progress(r);
            dl_avg_event_free(ev);
            ev = next;
        }
    }
    answer_leftovers(r);
    return r->status == DL_AVG_OK ? 0 : -1;
}
