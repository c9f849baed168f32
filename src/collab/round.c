/* The state of one averaging round (round.h): chunk geometry, which
 * members count as failed, reduction into signed results and their checks,
 * and the round's calls into its transport and its ban table.
 *
 * Member p aggregates part p (its size comes from the load-balancing LP).
 * Every member that has a vector sends each other aggregator its chunks of
 * that aggregator's part; the aggregator reduces each chunk once, in member
 * order, in double, encodes it, signs it and returns the same bytes to every
 * member. Every member (the aggregator included) decodes its result from
 * those bytes, so all of them hold the same bits. */
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/centered_clip.h"
#include "collab/round.h"
#include "collab/wirecodec.h"

struct dl_round *dl_round_new(const struct dl_round_transport *tp, struct dl_bans *bans) {
    struct dl_round *r = dl_calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tp = *tp;
    r->bans = bans;
    return r;
}

double dl_round_now(const struct dl_round *r) { return r->tp.ops->now(r->tp.ctx); }

int dl_round_request(struct dl_round *r, const char *peer_id, const char *method, const void *payload,
                     size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member) {
    if (r->tp.ops->request(r->tp.ctx, r->serial, peer_id, method, payload, size, timeout_s, kind, part, chunk,
                           member))
        return -1;
    r->bytes_sent += size;
    return 0;
}

void dl_round_respond(struct dl_round *r, uint64_t token, int status, const void *payload, size_t size) {
    if (r->tp.ops->respond(r->tp.ctx, token, status, payload, size))
        DL_WARN("collab", "cannot answer a request: %s", dl_error());
    else
        r->bytes_sent += size;
}

void dl_round_respond_text(struct dl_round *r, uint64_t token, const char *text) {
    r->tp.ops->respond_text(r->tp.ctx, token, text);
}

struct dl_avg_event *dl_round_wait_events(struct dl_round *r, double until) {
    return r->tp.ops->wait(r->tp.ctx, until);
}

void dl_round_ban(struct dl_round *r, const char *peer_id, const char *why) { dl_bans_add(r->bans, peer_id, why); }

void dl_round_ban_for_run(struct dl_round *r, const char *peer_id, const char *why) {
    dl_bans_add_for_run(r->bans, peer_id, why);
}

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

long dl_round_rereducer(const struct dl_round *r, size_t part) {
    /* Fixed by the group record alone, never by anyone's view of who
     * failed: two members must never pick two re-reducers for one part. */
    for (size_t i = 1; i < r->g.n; i++) {
        size_t m = (part + i) % r->g.n;
        if (r->g.members[m].role == DL_MEMBER_TRAINER) return (long)m;
    }
    return -1;
}

void dl_round_mark_failed(struct dl_round *r, size_t member, const char *why) {
    if (member == r->me || r->failed[member]) return;
    r->failed[member] = true;
    DL_INFO("collab", "member %zu (%s) counts as failed: %s", member, r->g.members[member].peer_id, why);
}

bool dl_round_weight_ok(double weight) { return isfinite(weight) && weight >= 0 && weight <= DL_AVG_MAX_WEIGHT; }

bool dl_round_reducer_sits_out(const struct dl_group *g) {
    if (g->aggregation != DL_AGG_CENTERED_CLIP) return false;
    size_t senders = 0;
    for (size_t j = 0; j < g->n; j++) senders += g->members[j].role != DL_MEMBER_AUX;
    return senders >= 3;
}

bool dl_round_counts_itself(const struct dl_round *r) {
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_OWN_PULL || r->misbehaviour == DL_MISBEHAVE_OWN_CLAIM) return true;
#endif
    return !dl_round_reducer_sits_out(&r->g);
}

static uint8_t *encode_own(struct dl_round *r, size_t part, size_t k, bool misbehave, bool sign, size_t *size) {
    if (!r->input_ready || !r->input) return NULL;
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t enc = dl_codec_size(r->g.codec, (size_t)len);
    int mode = misbehave ? r->misbehaviour : DL_MISBEHAVE_NONE;
    size_t extra = mode == DL_MISBEHAVE_WRONG_SIZE ? 4 : 0;
    uint8_t *msg = dl_malloc(DL_AVG_CHUNK_HEADER + enc + extra + DL_AVG_CHUNK_SIG);
    if (!msg) return NULL;
    dl_round_write_ref(msg, r, part, k);
    double weight = mode == DL_MISBEHAVE_WEIGHT_NAN        ? NAN
                    : mode == DL_MISBEHAVE_WEIGHT_NEGATIVE ? -r->weight - 1
                    : mode == DL_MISBEHAVE_WEIGHT_HUGE     ? 1e12 /* valid (below 2^40), huge next to the group */
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
            memcpy(data, &nan, 4); /* uint8's first codebook entry, int8's scale, topk's low magnitude */
        }
#ifdef DEDLOC_TEST_HOOKS
    } else if (mode == DL_MISBEHAVE_HUGE_VALUES && r->g.codec == DL_CODEC_NONE) {
        /* Written past the encoder, which refuses them. */
        for (size_t i = 0; i < len; i += 7) {
            float huge = i % 2 ? 3e38f : -3e38f;
            memcpy(data + 4 * i, &huge, 4);
        }
#endif
    } else if (mode == DL_MISBEHAVE_WRONG_PART) {
        dl_put_u16(msg + 16, (uint16_t)((part + 1) % r->g.n));
    } else if (mode == DL_MISBEHAVE_GARBAGE) {
        randombytes_buf(data, enc);
        if (r->g.codec == DL_CODEC_NONE) memset(data, 0xFF, 4); /* a NaN, so that it cannot pass as data */
    } else if (extra) {
        memset(data + enc, 0, extra);
    }
    /* Signed, so that the aggregator holding it can show anyone what we
     * sent (an accusation when our projections contradict it). */
    if (sign) {
        uint8_t to_sign[DL_AVG_CHUNK_HEADER + 32];
        memcpy(to_sign, msg, DL_AVG_CHUNK_HEADER);
        crypto_generichash(to_sign + DL_AVG_CHUNK_HEADER, 32, data, enc + extra, NULL, 0);
        r->tp.ops->sign(r->tp.ctx, to_sign, sizeof to_sign, data + enc + extra);
    } else {
        memset(data + enc + extra, 0, DL_AVG_CHUNK_SIG);
    }
    *size = DL_AVG_CHUNK_HEADER + enc + extra + DL_AVG_CHUNK_SIG;
    return msg;
}

uint8_t *dl_round_encode_own(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size) {
    return encode_own(r, part, k, misbehave, true, size);
}

uint8_t *dl_round_encode_own_unsigned(struct dl_round *r, size_t part, size_t k, bool misbehave, size_t *size) {
    return encode_own(r, part, k, misbehave, false, size);
}

size_t dl_round_chunk_msg_size(const struct dl_round *r, uint64_t len) {
    return DL_AVG_CHUNK_HEADER + dl_codec_size(r->g.codec, (size_t)len) + DL_AVG_CHUNK_SIG;
}

bool dl_round_chunk_signed(const struct dl_round *r, size_t j, const uint8_t *msg, size_t size, uint8_t hash[32]) {
    if (size < DL_AVG_CHUNK_HEADER + DL_AVG_CHUNK_SIG) return false;
    uint8_t to_sign[DL_AVG_CHUNK_HEADER + 32];
    memcpy(to_sign, msg, DL_AVG_CHUNK_HEADER);
    crypto_generichash(to_sign + DL_AVG_CHUNK_HEADER, 32, msg + DL_AVG_CHUNK_HEADER,
                       size - DL_AVG_CHUNK_HEADER - DL_AVG_CHUNK_SIG, NULL, 0);
    memcpy(hash, to_sign + DL_AVG_CHUNK_HEADER, 32);
    const struct dl_group_member *m = &r->g.members[j];
    return !dl_net_verify(m->peer_id, m->pk, to_sign, sizeof to_sign, msg + size - DL_AVG_CHUNK_SIG);
}

void dl_round_clip_verdicts(const struct dl_round *r, bool *seen, bool *clipped) {
    size_t n = r->g.n;
    uint32_t named[DL_AVG_MAX_MEMBERS] = {0}, cut[DL_AVG_MAX_MEMBERS] = {0};
    for (size_t p = 0; p < n && r->store; p++)
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            const uint8_t *res = r->store[r->first_chunk[p] + k];
            if (!res) continue;
            uint64_t off, len;
            dl_round_chunk_range(r, p, k, &off, &len);
            /* commitments in mask order: chunk hash, then clip weight */
            const uint8_t *entry =
                res + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, res, len) + DL_AVG_COMMIT_HEAD;
            for (size_t j = 0; j < n; j++) {
                if (!dl_round_result_counts(res, j)) continue;
                named[j]++;
                if (dl_get_f64(entry + 32) < 1) cut[j]++;
                entry += DL_AVG_COMMIT_ENTRY;
            }
        }
    for (size_t j = 0; j < n; j++) {
        seen[j] = named[j] > 0;
        clipped[j] = 2 * cut[j] > named[j];
    }
}

int dl_round_mask_count(const struct dl_round *r, const uint8_t *result) {
    int count = 0;
    for (size_t j = 0; j < DL_AVG_MAX_MEMBERS; j++)
        if (dl_round_result_counts(result, j)) {
            if (j >= r->g.n) return -1;
            count++;
        }
    return count;
}

static void sign_result(struct dl_round *r, uint8_t *msg, size_t data_size, size_t gi) {
    uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
    memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
    crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER, data_size, NULL, 0);
    r->tp.ops->sign(r->tp.ctx, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED);
    memcpy(r->store_hash[gi], signed_part + DL_AVG_RESULT_SIGNED, 32); /* for our roster */
}

static int store_result(struct dl_round *r, size_t gi, uint8_t *msg, size_t size) {
    r->store[gi] = msg;
    if (r->res_meas_valid) r->res_meas_valid[gi] = false; /* measures of what was there before, if any */
    r->store_size[gi] = size;
    if (r->i_receive) r->have++;
    return 1;
}

/* CenteredClip over the decoded contributions (all of them at once: the
 * iterations revisit each), then into r->tmp. Marks whom it clipped. */
static int reduce_clipped(struct dl_round *r, const float *decoded, const size_t *who, const double *w, size_t count,
                          size_t len, double *clip, double *iterate, double *moved) {
    const float *x[DL_AVG_MAX_MEMBERS];
    bool clipped[DL_AVG_MAX_MEMBERS] = {false};
    for (size_t i = 0; i < count; i++) x[i] = decoded + i * len;
    if (dl_centered_clip(x, w, count, len, r->g.clip_tau, r->g.clip_iterations, iterate, clipped)) return -1;
    for (size_t i = 0; i < count; i++) {
        r->reduced_from[who[i]] = true;
        if (clipped[i]) r->clipped[who[i]] = true;
    }
    /* The result is the weighted mean with the clip weights of an iterate
     * v_c, c_j = min(1, tau / |x_j - v_c|): a step towards the same fixed
     * point whose equation, sum_j w_j c_j (x_j - v) = 0, every member can
     * check in projection (audit.h), given c_j within what |v_c - v| allows.
     * Such steps (reweighted means) repeat until they move less than tau / 4:
     * the distance committed (delta) is the last one's, within the members'
     * bound of tau / 2. */
    double tau = r->g.clip_tau;
    *moved = INFINITY;
    for (int step = 0; step < DL_AUDIT_REWEIGHT_STEPS && *moved > tau / 4; step++) {
        if (step) memcpy(iterate, r->acc, sizeof(double) * len);
        double total = 0;
        for (size_t i = 0; i < count; i++) {
            double d2 = 0;
            for (size_t e = 0; e < len; e++) {
                double diff = (double)x[i][e] - iterate[e];
                d2 += diff * diff;
            }
            double d = sqrt(d2);
            clip[i] = d > tau ? tau / d : 1.0;
            total += w[i] * clip[i];
        }
        memset(r->acc, 0, sizeof(double) * len);
        for (size_t i = 0; i < count; i++)
            for (size_t e = 0; e < len; e++) r->acc[e] += w[i] * clip[i] * (double)x[i][e];
        double moved2 = 0;
        for (size_t e = 0; e < len; e++) {
            r->acc[e] /= total;
            double diff = r->acc[e] - iterate[e];
            moved2 += diff * diff;
        }
        *moved = sqrt(moved2);
        /* Long work on the round thread: it still moves. */
        dl_round_progress(r);
    }
    return 0;
}

#ifdef DEDLOC_TEST_HOOKS
/* Whether this reduction carries our test hook's lie. */
static bool lies_now(const struct dl_round *r, uint8_t generation) {
    switch (r->misbehaviour) {
    case DL_MISBEHAVE_RESULT_SCALE:
    case DL_MISBEHAVE_RESULT_FLIP:
    case DL_MISBEHAVE_OWN_CLAIM:
    case DL_MISBEHAVE_OWN_PULL:
    case DL_MISBEHAVE_SCALE_THEN_SILENT:
    case DL_MISBEHAVE_COLLUDE: return generation == 0;
    case DL_MISBEHAVE_REREDUCE_SCALE: return generation == 1;
    default: return false;
    }
}

/* The lie a test-hook aggregator signs in place of its result v (acc):
 * -1000 v (-v for DL_MISBEHAVE_RESULT_FLIP), except for the colluding pair
 * and the own-pull hook, whose tests are about what catches a lie that a
 * claim nobody else checks can cover (spot disclosure, a reducer sitting
 * out). Those sign v / 2 + R, with R orthogonal to v and |R| = |v| / 2: a
 * result on the sphere through 0 and v, so q.(q - v) = 0 and the alignment
 * check (collab/audit.h) has nothing to see, while the projection still
 * does. */
static void lie_apply(const struct dl_round *r, double *v, size_t len) {
    if (r->misbehaviour != DL_MISBEHAVE_COLLUDE && r->misbehaviour != DL_MISBEHAVE_OWN_PULL) {
        double factor = r->misbehaviour == DL_MISBEHAVE_RESULT_FLIP ? -1.0 : -1000.0;
        for (size_t e = 0; e < len; e++) v[e] *= factor;
        return;
    }
    double vv = 0, uv = 0, uu = 0;
    for (size_t e = 0; e < len; e++) {
        vv += v[e] * v[e];
        uv += (e & 1 ? 1.0 : -1.0) * v[e];
    }
    if (!(vv > 0)) return;
    for (size_t e = 0; e < len; e++) {
        double u = (e & 1 ? 1.0 : -1.0) - uv / vv * v[e];
        uu += u * u;
    }
    double scale = uu > 0 ? 0.5 * sqrt(vv / uu) : 0;
    for (size_t e = 0; e < len; e++) v[e] = 0.5 * v[e] + scale * ((e & 1 ? 1.0 : -1.0) - uv / vv * v[e]);
}

/* DL_MISBEHAVE_OWN_CLAIM under centered clip: the lie (already in acc),
 * with the clip weights that it gives the others (min(1, tau /
 * distance)), so that only the equation, not the published clip weights,
 * could give the lie away; its own contribution keeps weight 1. */
static void own_claim_clip_weights(struct dl_round *r, const float *decoded, const size_t *who, size_t count,
                                   size_t len, double *clip) {
    double tau = r->g.clip_tau;
    for (size_t i = 0; i < count; i++) {
        if (who[i] == r->me) {
            clip[i] = 1.0;
            continue;
        }
        double d2 = 0;
        for (size_t e = 0; e < len; e++) {
            double diff = (double)decoded[i * len + e] - r->acc[e];
            d2 += diff * diff;
        }
        clip[i] = sqrt(d2) > tau ? tau / sqrt(d2) : 1.0;
    }
}
#endif

/* |v - q|_2 for the result v (double) and its decoded bytes q. */
static double distance_to(const double *v, const float *q, size_t len) {
    double d2 = 0;
    for (size_t e = 0; e < len; e++) {
        double diff = v[e] - (double)q[e];
        d2 += diff * diff;
    }
    return sqrt(d2);
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
    bool self = dl_round_counts_itself(r);
    for (size_t j = 0; j < r->g.n; j++) {
        if (!contrib[j] || (j == r->me && !self)) continue;
        header_weight[j] = dl_get_f64(contrib[j] + DL_AVG_REF_HEADER);
        if (!dl_round_weight_ok(header_weight[j]) || r->g.members[j].role == DL_MEMBER_AUX) {
            bad[j] = true;
            continue;
        }
        usable[j] = true;
        present++;
    }
    /* Each weight is a claim only its sender can see: it counts up to a
     * small multiple of the chunk's median (docs/protocol.md, "Bounded
     * claims"), the same cap for the mean, centered clip and the samples. */
    double capped[DL_AVG_MAX_MEMBERS];
    for (size_t j = 0; j < r->g.n; j++) capped[j] = usable[j] ? header_weight[j] : 0;
    dl_balance_cap_weights(r->g.n, capped);
    for (size_t j = 0; j < r->g.n; j++) {
        header_weight[j] = capped[j];
        present_weight += capped[j];
    }
    bool equal = !(present_weight > 0);
    bool clip = r->g.aggregation == DL_AGG_CENTERED_CLIP;
    float *decoded = NULL;
    double *iterate = NULL, moved = 0;
    size_t who[DL_AVG_MAX_MEMBERS];
    double weights[DL_AVG_MAX_MEMBERS];
    double clip_weight[DL_AVG_MAX_MEMBERS];
    uint8_t hash[DL_AVG_MAX_MEMBERS][32];
    if (clip) {
        decoded = dl_malloc(sizeof(float) * (size_t)len * (present ? present : 1));
        iterate = dl_malloc(sizeof(double) * (size_t)len);
        if (!decoded || !iterate) {
            free(decoded);
            free(iterate);
            return -1;
        }
    }
    double total = 0, samples = 0;
    size_t count = 0;
    uint8_t mask[32] = {0};
    for (size_t j = 0; j < r->g.n; j++) {
        if (!usable[j]) continue;
        double w = equal ? 1.0 : header_weight[j];
        const uint8_t *wire = contrib[j] + DL_AVG_CHUNK_HEADER;
        /* Without clipping each contribution goes from its wire bytes
         * straight into the double sum, in member order; a chunk that does
         * not decode leaves the sum untouched. */
        int rc = clip ? dl_codec_decode(r->g.codec, wire, enc, (size_t)len, decoded + count * (size_t)len)
                      : dl_codec_decode_accumulate(r->g.codec, wire, enc, (size_t)len, w, r->acc);
        if (rc) {
            bad[j] = true;
            continue;
        }
        if (clip) {
            /* Centered clip counts every contribution once (BTARD): its
             * guarantee is a bound on the share of bad contributors, which
             * claimed weights, even capped, would let a few liars exceed. */
            who[count] = j;
            weights[count] = 1.0;
        }
        clip_weight[count] = 1.0;
        /* The commitment to what we reduced: the hash the signature we
         * checked on arrival covers (computed here for a re-reduction). */
        if (generation == 0 && j != r->me && r->agg && r->agg[k].hash) memcpy(hash[count], r->agg[k].hash[j], 32);
        else crypto_generichash(hash[count], 32, wire, enc, NULL, 0);
        total += w;
        samples += header_weight[j];
        count++;
        mask[j / 8] |= (uint8_t)(1u << (j % 8));
    }
    if (!count || !(total > 0)) {
        free(decoded);
        free(iterate);
        return -1;
    }
    if (clip) {
        int rc = reduce_clipped(r, decoded, who, weights, count, (size_t)len, clip_weight, iterate, &moved);
#ifdef DEDLOC_TEST_HOOKS
        if (!rc && lies_now(r, generation)) lie_apply(r, r->acc, (size_t)len);
        if (!rc && (r->misbehaviour == DL_MISBEHAVE_OWN_CLAIM || r->misbehaviour == DL_MISBEHAVE_OWN_PULL ||
                    r->misbehaviour == DL_MISBEHAVE_COLLUDE) &&
            generation == 0)
            own_claim_clip_weights(r, decoded, who, count, (size_t)len, clip_weight);
#endif
        free(decoded);
        if (rc) {
            free(iterate);
            return -1;
        }
    } else {
        for (size_t e = 0; e < len; e++) r->acc[e] /= total;
#ifdef DEDLOC_TEST_HOOKS
        if (lies_now(r, generation)) lie_apply(r, r->acc, (size_t)len);
#endif
    }
    for (size_t e = 0; e < len; e++) r->tmp[e] = (float)r->acc[e];
    size_t trailer = DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * count;
    /* A topk round's result is sparse fp16, its size read from its bytes. */
    size_t res_max = dl_codec_result_max(r->g.codec, (size_t)len), res_size = 0;
    uint8_t *msg = dl_malloc(DL_AVG_RESULT_HEADER + res_max + trailer);
    float *q = dl_malloc(sizeof(float) * (size_t)len);
    if (!msg || !q) {
        free(msg);
        free(q);
        free(iterate);
        return -1;
    }
    memset(msg, 0, DL_AVG_RESULT_HEADER);
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)part);
    msg[18] = generation;
    dl_put_u32(msg + 20, (uint32_t)k);
    dl_put_u16(msg + 24, (uint16_t)r->me);
    memcpy(msg + 28, mask, 32);
    dl_put_f64(msg + 60, samples);
    uint8_t *data = msg + DL_AVG_RESULT_HEADER;
    if (dl_codec_result_encode(r->g.codec, r->tmp, (size_t)len, data, &res_size) ||
        dl_codec_result_decode(r->g.codec, data, res_size, (size_t)len, q)) {
        free(msg);
        free(q);
        free(iterate);
        return -1;
    }
    /* What the members' checks need from us, committed before anyone can
     * know the directions: how far rounding took the result (e2) and the
     * centered-clip iterate (delta) from the bytes sent, and per contributor
     * the chunk we reduced and its clip weight. */
    uint8_t *commit = data + res_size;
    dl_put_f64(commit, distance_to(r->acc, q, (size_t)len));
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_RESULT_FLIP && lies_now(r, generation)) {
        /* the widest tolerance it can buy: the most rounding an honest
         * result of these values may need */
        double l2 = 0, lo = len ? q[0] : 0, hi = lo;
        for (size_t e = 0; e < len; e++) {
            l2 += (double)q[e] * q[e];
            lo = fmin(lo, (double)q[e]);
            hi = fmax(hi, (double)q[e]);
        }
        l2 = sqrt(l2);
        dl_put_f64(commit, 0.999 * dl_audit_e2_bound(r->g.codec, l2, fmax(fabs(lo), fabs(hi)), hi - lo, (size_t)len));
    }
#endif
    dl_put_f64(commit + 8, moved);
    dl_audit_nonce_commit(r->g.round_id, r->audit_nonce, commit + DL_AVG_COMMIT_NONCE);
    for (size_t i = 0; i < count; i++) {
        memcpy(commit + DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * i, hash[i], 32);
        dl_put_f64(commit + DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * i + 32, clip_weight[i]);
    }
    free(q);
    free(iterate);
    sign_result(r, msg, res_size + trailer, r->first_chunk[part] + k);
    store_result(r, r->first_chunk[part] + k, msg, DL_AVG_RESULT_HEADER + res_size + trailer);
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_GRIND && generation == 0 && k + 1 == dl_round_chunks_of(r, part))
        dl_audit_grind(r, part, k);
#endif
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
    int count = dl_round_mask_count(r, msg);
    if (count <= 0) return dl_fail("result whose mask names no member or one beyond the group");
    size_t enc = dl_codec_result_size(r->g.codec, msg + DL_AVG_RESULT_HEADER, size - DL_AVG_RESULT_HEADER, (size_t)len);
    if (enc == SIZE_MAX) return dl_fail_context("result of part %zu chunk %zu", part, k);
    size_t want = DL_AVG_RESULT_HEADER + enc + DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * (size_t)count;
    if (size != want) return dl_fail("result of %zu bytes, expected %zu", size, want);
    if (r->store[gi]) return 0;
    uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
    memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
    crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER, size - DL_AVG_RESULT_HEADER,
                       NULL, 0);
    const struct dl_group_member *m = &r->g.members[reducer];
    if (dl_net_verify(m->peer_id, m->pk, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED))
        return dl_fail_context("result of part %zu chunk %zu", part, k);
    double samples = dl_get_f64(msg + 60);
    if (!(dl_round_weight_ok(samples / (double)r->g.n)) ||
        dl_codec_result_decode(r->g.codec, msg + DL_AVG_RESULT_HEADER, enc, (size_t)len, r->tmp)) {
        /* Signed by its reducer, so every member got these same bytes:
         * every member fails alike. */
        dl_round_fail(r, DL_AVG_FAILED, "the result of part %zu chunk %zu from %s does not decode or carries "
                      "an impossible weight (%g)", part, k, m->peer_id, samples);
        return -1;
    }
    if (dl_round_reducer_sits_out(&r->g) && dl_round_result_counts(msg, reducer)) {
        /* Its own signature shows it counted the one contribution whose
         * claims no one can check: refused for the run, by every member
         * that receives this result, relayed or not. */
        char why[200];
        snprintf(why, sizeof why, "under centered clip it signed a result of part %zu chunk %zu that counts its own "
                 "contribution", part, k);
        dl_audit_accuse(r, reducer, why);
        dl_round_fail(r, DL_AVG_FAILED, "accountable aggregation caught member %zu (%s): %s", reducer, m->peer_id,
                      why);
        return -1;
    }
    uint8_t *copy = dl_malloc(size);
    if (!copy) return -1;
    memcpy(copy, msg, size);
    memcpy(r->store_hash[gi], signed_part + DL_AVG_RESULT_SIGNED, 32); /* for our roster */
    r->last_heard[reducer] = dl_round_now(r);
    r->heard[reducer] = true;
    return store_result(r, (size_t)gi, copy, size);
}

/* Called at every step of the round thread. A gap longer than stall_s
 * between two steps means we were stopped long enough for others to count
 * us out: they may have re-reduced our part, so our bits could differ. */
void dl_round_progress(struct dl_round *r) {
    double now = dl_round_now(r);
    if (now - r->last_loop > r->stall_s)
        dl_round_fail(r, DL_AVG_UNSURE,
                      "this peer stood still for %.1f s mid-round; applying nothing (catch up by state download)",
                      now - r->last_loop);
    r->last_loop = now;
    atomic_store(&r->heartbeat, now);
}

bool dl_round_hold_early(struct dl_round *r, struct dl_avg_event *ev) {
    if (ev->kind != EV_CHUNK || !ev->token || r->early_count >= DL_AVG_EARLY_MAX ||
        r->early_bytes + ev->size > DL_AVG_EARLY_MAX_BYTES)
        return false;
    size_t from_peer = 0;
    for (const struct dl_avg_event *e = r->early; e; e = e->next) from_peer += !strcmp(e->peer_id, ev->peer_id);
    if (from_peer >= DL_AVG_SEND_WINDOW) return false;
    ev->next = r->early;
    r->early = ev;
    r->early_count++;
    r->early_bytes += ev->size;
    return true;
}

void dl_round_drop_early(struct dl_round *r) {
    while (r->early) {
        struct dl_avg_event *ev = r->early;
        r->early = ev->next;
        dl_round_respond_text(r, ev->token, "unknown round");
        dl_avg_event_free(ev);
    }
    r->early_count = r->early_bytes = 0;
}

int dl_round_setup(struct dl_round *r) {
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
    double now = dl_round_now(r);
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
            r->agg[k].hash = dl_calloc(n, 32);
            if (!r->agg[k].contrib || !r->agg[k].ack_token || !r->agg[k].hash)
                return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
        }
    }
    if (dl_audit_setup(r)) return dl_round_fail(r, DL_AVG_FAILED, "out of memory");
    return 0;
}

void dl_round_free(struct dl_round *r) {
    if (!r) return;
    dl_round_drop_early(r);
    if (r->agg)
        for (uint32_t k = 0; k < r->agg_chunks; k++) {
            if (r->agg[k].contrib)
                for (size_t j = 0; j < r->g.n; j++) free(r->agg[k].contrib[j]);
            free(r->agg[k].contrib);
            free(r->agg[k].ack_token);
            free(r->agg[k].hash);
        }
    dl_audit_free(r);
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

bool dl_round_alive_for(struct dl_round *r, const uint8_t *payload, size_t size, double now) {
    bool alive = size >= DL_GROUP_ROUND_ID && r->has_group && r->status == DL_AVG_OK &&
                 !memcmp(payload, r->g.round_id, DL_GROUP_ROUND_ID);
    /* ...and only while its round thread moves: one that stood still
     * longer than stall_s (a stopped process just resumed) is about to
     * give up the round, whatever this thread could say. */
    double beat = alive ? atomic_load(&r->heartbeat) : 0;
    if (alive && beat > 0 && now - beat > r->stall_s) alive = false;
    return alive;
}

int dl_round_answer_finished(const struct dl_round *r, int kind, const uint8_t *payload, size_t size,
                             const uint8_t **answer, size_t *answer_size) {
    static const char msg[] = "round finished";
    size_t part, k;
    long gi = dl_round_ref_chunk(r, payload, size, &part, &k);
    *answer = NULL;
    *answer_size = 0;
    if (kind == EV_RESULT || kind == EV_AUDIT) return DL_NET_OK;
    if ((kind == EV_FETCH || kind == EV_REREDUCE) && gi >= 0 && r->store[gi]) {
        *answer = r->store[gi];
        *answer_size = r->store_size[gi];
        return DL_NET_OK;
    }
    *answer = (const uint8_t *)msg;
    *answer_size = sizeof msg - 1;
    return DL_NET_REMOTE_ERROR;
}

void dl_round_chunk_info(const struct dl_round *r, size_t part, size_t k, struct dl_avg_chunk_info *ci) {
    const uint8_t *msg = r->store[r->first_chunk[part] + k];
    dl_round_chunk_range(r, part, k, &ci->offset, &ci->length);
    ci->part = (uint16_t)part;
    ci->generation = msg[18];
    ci->reducer = dl_get_u16(msg + 24);
    memcpy(ci->contributors, msg + 28, sizeof ci->contributors);
    ci->weight = dl_get_f64(msg + 60);
}

size_t dl_round_result_data_size(const struct dl_round *r, const uint8_t *res, uint64_t len) {
    /* Stored results were checked on arrival: their size reads back. */
    return dl_codec_result_size(r->g.codec, res + DL_AVG_RESULT_HEADER, SIZE_MAX, (size_t)len);
}

void dl_round_copy_out(const struct dl_round *r, float *vec) {
    /* Every chunk was checked to decode when it arrived. */
    for (size_t p = 0; p < r->g.n; p++)
        for (size_t k = 0; k < r->first_chunk[p + 1] - r->first_chunk[p]; k++) {
            size_t gi = r->first_chunk[p] + k;
            uint64_t off, len;
            dl_round_chunk_range(r, p, k, &off, &len);
            dl_codec_result_decode(r->g.codec, r->store[gi] + DL_AVG_RESULT_HEADER,
                                   dl_round_result_data_size(r, r->store[gi], len), len, vec + off);
        }
}

int dl_round_copy_sent(const struct dl_round *r, float *sent) {
    if (!r->i_send || !r->input) {
        memset(sent, 0, sizeof(float) * r->n);
        return 0;
    }
    uint8_t *enc = dl_malloc(dl_codec_size(r->g.codec, DL_AVG_CHUNK_ELEMS));
    if (!enc) return -1;
    int rc = 0;
    for (size_t p = 0; p < r->g.n && !rc; p++)
        for (size_t k = 0; k < r->first_chunk[p + 1] - r->first_chunk[p] && !rc; k++) {
            const uint8_t *res = r->store[r->first_chunk[p] + k];
            uint64_t off, len;
            dl_round_chunk_range(r, p, k, &off, &len);
            /* Our chunk counts where the result's mask names us: there the
             * aggregator decoded exactly these bytes (encoding is a pure
             * function of the input). Elsewhere nothing of ours arrived. */
            if (!res || !dl_round_result_counts(res, r->me)) {
                memset(sent + off, 0, sizeof(float) * len);
                continue;
            }
            size_t size = dl_codec_size(r->g.codec, (size_t)len);
            rc = dl_codec_encode(r->g.codec, r->input + off, (size_t)len, enc) ||
                 dl_codec_decode(r->g.codec, enc, size, (size_t)len, sent + off);
        }
    free(enc);
    return rc ? -1 : 0;
}
