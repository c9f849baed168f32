/* Spot disclosure (docs/protocol.md, accountable aggregation, 3d): under
 * centered clip a sender colluding with its aggregator could sign
 * projections that make a wrong result's equation hold, as only the
 * aggregator holds its chunk. Two checkers per part, drawn from the seed,
 * fetch the chunk behind the part's hardest-pulling claim (from the
 * aggregator, which kept it; from the sender when that fails) and tell
 * every member, with the evidence when it lied and their copies of every
 * sender's projections of the part (a sender that signed two different
 * ones is convicted by them); a conviction escalates to every contributor
 * of the chunk disclosing theirs (3c), which convicts the aggregator. */
#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/audit_internal.h"
#include "collab/bytes.h"
#include "collab/round.h"

bool dl_audit_spot_active(const struct dl_round *r) {
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_SKIP_SPOT) return false;
#endif
    return dl_round_reducer_sits_out(&r->g);
}

/* Part p's checkers under our seed: two distinct members that receive,
 * neither p (SIZE_MAX where there are fewer). */
void dl_audit_spot_checkers(const struct dl_round *r, size_t p, size_t out[2]) {
    size_t cand[DL_AVG_MAX_MEMBERS], count = 0;
    for (size_t m = 0; m < r->g.n; m++)
        if (m != p && r->g.members[m].role != DL_MEMBER_AUX) cand[count++] = m;
    out[0] = out[1] = SIZE_MAX;
    if (!count) return;
    static const char tag[] = "dedloc spot checkers";
    uint8_t h[16], at[2];
    dl_put_u16(at, (uint16_t)p);
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof h);
    crypto_generichash_update(&st, (const uint8_t *)tag, sizeof tag);
    crypto_generichash_update(&st, r->audit_seed, 32);
    crypto_generichash_update(&st, at, sizeof at);
    crypto_generichash_final(&st, h, sizeof h);
    size_t first = (size_t)(dl_get_u64(h) % count);
    out[0] = cand[first];
    if (count < 2) return;
    size_t second = (size_t)(dl_get_u64(h + 8) % (count - 1));
    out[1] = cand[second + (second >= first)];
}

static bool spot_checks(const struct dl_round *r, size_t p, size_t m) {
    size_t c[2];
    dl_audit_spot_checkers(r, p, c);
    return c[0] == m || c[1] == m;
}

/* Member j's projections of part p under our seed as we hold them: as j
 * sent them to us (signature not checked yet), or in p's attestation
 * (checked); NULL when neither. */
static const uint8_t *held_projections(const struct dl_round *r, size_t p, size_t j) {
    size_t n = r->g.n, psz = dl_audit_proj_size(r, p);
    const uint8_t *pr = r->fast_proj[p * n + j];
    if (pr && !memcmp(pr + 24, r->audit_seed, 32)) return pr;
    const uint8_t *msg = r->attest_in[p];
    size_t size = r->attest_in_size[p];
    if (!msg || size < DL_AUDIT_ATTEST_HEAD) return NULL;
    size_t count = dl_get_u16(msg + 20), at = DL_AUDIT_ATTEST_HEAD;
    for (size_t i = 0; i < count && at + psz <= size; i++, at += psz)
        if (dl_get_u16(msg + at + 16) == p && dl_get_u16(msg + at + 20) == j && !memcmp(msg + at + 24, r->audit_seed, 32))
            return msg + at;
    return NULL;
}

/* z.q of the result we hold of (p, k), measured once. */
static bool result_zq(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k, double *zq) {
    size_t gi = r->first_chunk[p] + k;
    if (!r->res_meas_valid[gi]) {
        uint64_t off, len;
        dl_round_chunk_range(r, p, k, &off, &len);
        if (!r->store[gi] || !dl_audit_decode_result(r, r->store[gi], (size_t)len, sc->q)) return false;
        dl_audit_direction(r->audit_seed, gi, (size_t)len, sc->z);
        struct dl_audit_measure qm;
        struct dl_audit_extremes ext;
        dl_audit_measure_result(sc->z, sc->q, (size_t)len, &qm, &ext);
        double *keep = r->res_meas[gi];
        keep[0] = qm.s, keep[1] = qm.a, keep[2] = qm.d, keep[3] = ext.lo, keep[4] = ext.hi;
        r->res_meas_valid[gi] = true;
    }
    *zq = r->res_meas[gi][0];
    return true;
}

/* The claim of part p that pulls hardest for its distance: the chunk k
 * and contributor j (not us) with the largest |s_j - z.q| / d_j. Under
 * centered clip a claim's pull c_j |s_j - z.q| is at most that ratio times
 * tau; an honest one's ratio is |z.u| for the unit vector u from the
 * result to its chunk (about 0.9), and a claim that holds a result away
 * from h honest contributors needs about h times that. */
static bool spot_draw(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t *k_out, size_t *j_out) {
    double best = -1;
    for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        double zq;
        if (!res || !result_zq(r, sc, p, k, &zq)) continue;
        for (size_t j = 0; j < r->g.n; j++) {
            const uint8_t *pr = j == r->me || !in_mask(res, j) ? NULL : held_projections(r, p, j);
            if (!pr) continue;
            double weight;
            struct dl_audit_measure m;
            dl_audit_read_projection(pr, k, &weight, &m);
            double ratio = m.d > 0 ? fabs(m.s - zq) / m.d : 0;
            if (ratio > best) best = ratio, *k_out = k, *j_out = j;
        }
    }
    return best >= 0;
}

/* Member j's disclosed chunk of (p, k) against its projections pr of part
 * p: DL_SPOT_OK, DL_SPOT_LIE, or DL_SPOT_SILENT when it is not j's signed
 * chunk that the result committed to (which shows nothing). */
static int spot_judge(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k, size_t j,
                      const uint8_t *pr, const uint8_t *chunk, size_t chunk_size) {
    const uint8_t *res = dl_audit_audited_result(r, p, k);
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    struct dl_audit_measure facts, theirs;
    if (!res || !chunk || !pr || !dl_audit_committed_chunk(r, p, k, j, chunk, chunk_size, res, len) ||
        !dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, chunk, res, &facts))
        return DL_SPOT_SILENT;
    double weight;
    dl_audit_read_projection(pr, k, &weight, &theirs);
    return dl_audit_measure_agrees(&theirs, &facts) && weight == dl_get_f64(chunk + DL_AVG_REF_HEADER) ? DL_SPOT_OK
                                                                                                        : DL_SPOT_LIE;
}

/* A convicting chunk of sender j stands for its answer in the escalation
 * that follows, unless the disclosure slot holds a chunk already (a reply
 * still on its way is then dropped as come). */
static void stand_in(struct dl_round *r, size_t p, size_t j, const uint8_t *chunk, size_t size) {
    size_t slot = p * r->g.n + j;
    if (r->disclosed[slot] || !(r->disclosed[slot] = dl_malloc(size))) return;
    memcpy(r->disclosed[slot], chunk, size);
    r->disclosed_size[slot] = size;
    r->disclose_done[slot] = true;
}

/* Asks sender j for its chunk (p, k) (3c's request), the reply coming as
 * EV_AUDIT_SPOT_CHUNK with `tag` as its member: j for our own spot check's
 * draw, n + m for the sender checker m found silent. False when it could
 * not be sent. */
static bool ask_spot_chunk(struct dl_round *r, size_t p, size_t k, size_t j, size_t tag, double now) {
    uint8_t msg[DL_AUDIT_DISCLOSE_SIZE] = {0};
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)p);
    msg[18] = DL_AUDIT_DISCLOSE;
    dl_put_u32(msg + 20, (uint32_t)k);
    return !dl_round_request(r, r->g.members[j].peer_id, "avg.audit", msg, sizeof msg, r->deadline - now,
                             EV_AUDIT_SPOT_CHUNK, (uint32_t)p, (uint32_t)k, (uint32_t)tag);
}

/* A spot check's chunk from part p's aggregator, which kept every chunk
 * its result committed to: the aggregators share the load (two chunks
 * each a round) where the drawn senders would each serve every checker
 * that drew them. */
static void ask_kept_chunk(struct dl_round *r, size_t p, size_t k, size_t j, double now) {
    uint8_t msg[DL_AUDIT_DISCLOSE_KEPT_SIZE] = {0};
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)p);
    msg[18] = DL_AUDIT_DISCLOSE_KEPT;
    dl_put_u32(msg + 20, (uint32_t)k);
    dl_put_u16(msg + 24, (uint16_t)j);
    if (dl_round_request(r, r->g.members[p].peer_id, "avg.audit", msg, sizeof msg, r->deadline - now,
                         EV_AUDIT_SPOT_CHUNK, (uint32_t)p, (uint32_t)k, (uint32_t)j))
        r->spot_chunk_done[p] = true;
}

/* Member i's projections of part p as i sent them to us, drawn for our seed (NULL: none). */
static const uint8_t *own_block(const struct dl_round *r, size_t p, size_t i) {
    const uint8_t *b = r->fast_proj[p * r->g.n + i];
    return b && !memcmp(b + 24, r->audit_seed, 32) ? b : NULL;
}

/* A checker's copies of part p's projections against ours: a sender that
 * signed two different ones is convicted (both signatures checked). */
static void spot_compare(struct dl_round *r, size_t p, const uint8_t *blocks, size_t count, size_t m, double now) {
    size_t n = r->g.n, psz = dl_audit_proj_size(r, p);
    for (size_t i = 0; i < count; i++) {
        const uint8_t *b = blocks + i * psz;
        size_t j = dl_get_u16(b + 20);
        if (j >= n || j == r->me || memcmp(b, r->g.round_id, DL_GROUP_ROUND_ID) || dl_get_u16(b + 16) != p ||
            b[18] != DL_AUDIT_PROJECTIONS || memcmp(b + 24, r->audit_seed, 32) || r->accused[j])
            continue;
        const uint8_t *ours = own_block(r, p, j);
        if (!ours || !memcmp(ours, b, psz) || !dl_audit_projections_signed(r, b, psz, j) || !dl_audit_projections_signed(r, ours, psz, j))
            continue;
        char why[300];
        snprintf(why, sizeof why, "it signed two different projections of part %zu (one relayed by member %zu's spot "
                 "check)", p, m);
        dl_audit_accuse(r, j, why);
        dl_audit_spot_escalate(r, p, dl_audit_projections_differ_at(r, p, ours, b), now);
    }
}

static void send_verdict(struct dl_round *r, size_t p, int outcome, size_t k, size_t j, const uint8_t *pr,
                         double now) {
    size_t n = r->g.n, psz = dl_audit_proj_size(r, p), chunk_size = outcome == DL_SPOT_LIE ? r->spot_chunk_size[p] : 0;
    size_t evidence = outcome == DL_SPOT_LIE ? psz + chunk_size : 0, blocks = 0;
    /* Every sender's projections of p as it sent them to us: a sender that
     * signs different ones for different members (honest ones for the
     * checkers it can foresee from the seed) meets its other signature at
     * every member. */
    for (size_t i = 0; i < n; i++) blocks += i != r->me && own_block(r, p, i) != NULL;
    size_t size = DL_AUDIT_VERDICT_HEAD + evidence + blocks * psz;
    uint8_t *msg = dl_calloc(1, size);
    if (!msg) return;
    dl_put_u16(msg + 26, (uint16_t)blocks);
    uint8_t *at = msg + DL_AUDIT_VERDICT_HEAD + evidence;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = i == r->me ? NULL : own_block(r, p, i);
        if (!b) continue;
        memcpy(at, b, psz);
        at += psz;
    }
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)p);
    msg[18] = DL_AUDIT_VERDICT;
    msg[19] = (uint8_t)outcome;
    dl_put_u32(msg + 20, (uint32_t)k);
    dl_put_u16(msg + 24, (uint16_t)j);
    if (outcome == DL_SPOT_LIE) {
        memcpy(msg + DL_AUDIT_VERDICT_HEAD, pr, psz);
        memcpy(msg + DL_AUDIT_VERDICT_HEAD + psz, r->spot_chunk[p], chunk_size);
    }
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX) continue;
        if (dl_round_request(r, r->g.members[m].peer_id, "avg.audit", msg, size, r->deadline - now, EV_AUDIT_ACK,
                             (uint32_t)p, 0, (uint32_t)m))
            DL_WARN("collab", "cannot send our spot check to %s: %s", r->g.members[m].peer_id, dl_error());
    }
    free(msg);
}

static bool gone(const struct dl_round *r, size_t m) {
    return r->failed[m] || r->audit_gone[m] || r->accused[m] || dl_bans_is_banned(r->bans, r->g.members[m].peer_id);
}

/* Member j's claim on (p, k) is a lie: its signed projections pr (from
 * `whom`) against its signed chunk. Unsigned projections prove nothing. */
static bool spot_convict(struct dl_round *r, size_t p, size_t k, size_t j, const uint8_t *pr, const char *whom) {
    if (!dl_audit_projections_signed(r, pr, dl_audit_proj_size(r, p), j)) return false;
    char why[300];
    snprintf(why, sizeof why, "its signed projections of part %zu chunk %zu contradict the chunk it signed (%s)", p,
             k, whom);
    dl_audit_accuse(r, j, why);
    return true;
}

/* Member j lied about (p, k): every contributor of that chunk is asked
 * for its signed chunk (3c), and the equation with their facts shows
 * whether p took the false claim over the chunk it held (p's signed result
 * and commitments, their signed chunks): the colluding aggregator is
 * banned with its accomplice. */
void dl_audit_spot_escalate(struct dl_round *r, size_t p, size_t k, double now) {
    if (r->spot_escalation[p] || !dl_audit_spot_active(r) || !r->i_receive) return;
    r->spot_escalation[p] = 1;
    r->fast_failed_k[p] = k;
    dl_audit_ask_disclosure(r, p, now);
}

/* The sender of a drawn claim did not show its chunk: nothing is applied,
 * and it is refused for ban_s (no evidence: it may be dead), for the run
 * the second time (dl_bans_add_silent). Not once we convicted p: the
 * part's lie is then settled on evidence, and an honest sender that
 * convicted p before us has ended its round and answers nobody (drawn
 * when no claim of the part pulls harder than an honest one, as for a lie
 * its accomplice covered only towards the others). */
static void spot_silent(struct dl_round *r, size_t p, size_t k, size_t j) {
    char why[300];
    snprintf(why, sizeof why, "member %zu did not disclose its chunk %zu of part %zu, drawn for a spot check", j, k, p);
    dl_audit_unsure(r, why);
    if (!r->accused[j] && !r->accused[p]) dl_bans_add_silent(r->bans, r->g.members[j].peer_id, why);
}

/* Whether a member that receives, not gone, has yet to get our chunk of
 * part p's disputed chunk, which we contributed to. */
static bool spot_owed(const struct dl_round *r, size_t p) {
    const uint8_t *res = r->fast_failed_k[p] == SIZE_MAX ? NULL : dl_audit_audited_result(r, p, r->fast_failed_k[p]);
    if (!res || !in_mask(res, r->me)) return false;
    for (size_t m = 0; m < r->g.n; m++)
        if (m != r->me && m != p && r->g.members[m].role != DL_MEMBER_AUX && !gone(r, m) &&
            !dl_audit_disclosed(r, m, p, r->fast_failed_k[p]))
            return true;
    return false;
}

/* Our own spot checks, then the verdicts of every other part's checkers:
 * true while we wait. */
bool dl_audit_spot_pump(struct dl_round *r, struct dl_audit_scratch *sc, double now) {
    size_t n = r->g.n;
    bool mine_done = true, waiting = false;
    for (size_t p = 0; p < n; p++) {
        if (p == r->me || !r->g.members[p].part_elems || !spot_checks(r, p, r->me) || r->spot_state[p] == 2)
            continue;
        mine_done = false;
        if (r->spot_state[p] == 0) {
            /* Even when our own round already failed (we caught someone
             * elsewhere): the others may have nothing but our check of p. */
            if (!r->attest_checked[p]) {
                waiting = true;
                continue;
            }
            if (!spot_draw(r, sc, p, &r->spot_k[p], &r->spot_j[p])) {
                send_verdict(r, p, DL_SPOT_NONE, 0, 0, NULL, now);
                r->spot_state[p] = 2;
                continue;
            }
            ask_kept_chunk(r, p, r->spot_k[p], r->spot_j[p], now);
            r->spot_asked_at[p] = now;
            r->spot_state[p] = 1;
        }
        size_t k = r->spot_k[p], j = r->spot_j[p];
        if (!r->spot_chunk_done[p] && now - r->spot_asked_at[p] <= r->stall_s) {
            waiting = true;
            continue;
        }
        if (r->spot_state[p] == 1 &&
            (!r->spot_chunk[p] || spot_judge(r, sc, p, k, j, held_projections(r, p, j), r->spot_chunk[p],
                                             r->spot_chunk_size[p]) == DL_SPOT_SILENT)) {
            /* The aggregator did not bring it (dead, refusing, or not the
             * committed chunk): the sender holds it too. */
            free(r->spot_chunk[p]);
            r->spot_chunk[p] = NULL;
            r->spot_chunk_done[p] = false;
            if (!ask_spot_chunk(r, p, k, j, j, now)) r->spot_chunk_done[p] = true;
            r->spot_asked_at[p] = now;
            r->spot_state[p] = 3;
            waiting = true;
            continue;
        }
        const uint8_t *pr = held_projections(r, p, j);
        int outcome = spot_judge(r, sc, p, k, j, pr, r->spot_chunk[p], r->spot_chunk_size[p]);
        if (outcome == DL_SPOT_LIE && !spot_convict(r, p, k, j, pr, "our spot check")) outcome = DL_SPOT_SILENT;
        if (outcome == DL_SPOT_LIE) {
            stand_in(r, p, j, r->spot_chunk[p], r->spot_chunk_size[p]);
            dl_audit_spot_escalate(r, p, k, now);
        }
        if (outcome == DL_SPOT_SILENT) {
            /* Neither the aggregator (when asked) nor the sender showed
             * the chunk it holds: both refused for ban_s. */
            spot_silent(r, p, k, j);
            if (r->spot_state[p] == 3 && !r->accused[p])
                dl_bans_add_silent(r->bans, r->g.members[p].peer_id, "did not disclose a chunk it committed to");
        }
        send_verdict(r, p, outcome, k, j, pr, now);
        r->spot_state[p] = 2;
    }
    /* The wait for the others' verdicts runs from the end of our own checks. */
    for (size_t p = 0; p < n && mine_done; p++)
        if (p != r->me && r->g.members[p].part_elems && !r->attest_checked[p]) mine_done = false;
    if (mine_done && !(r->spot_done_at > 0)) r->spot_done_at = now;
    for (size_t p = 0; p < n; p++) {
        if (p == r->me || !r->g.members[p].part_elems) continue;
        size_t c[2];
        dl_audit_spot_checkers(r, p, c);
        for (int i = 0; i < 2; i++) {
            size_t m = c[i], slot = p * n + m;
            if (m == SIZE_MAX || m == r->me || r->verdict_state[slot] == 2) continue;
            const uint8_t *msg = r->verdict_in[slot];
            if (!msg) {
                /* Not for ever: a checker that died, or lost its round,
                 * sends nothing (the other checker still does). */
                if (gone(r, m) || (r->spot_done_at > 0 && now - r->spot_done_at > 2 * r->stall_s)) {
                    DL_INFO("collab", "accountable aggregation: no spot check of part %zu came from member %zu", p, m);
                    r->verdict_state[slot] = 2;
                } else {
                    waiting = true;
                }
                continue;
            }
            size_t size = r->verdict_in_size[slot], k = dl_get_u32(msg + 20), j = dl_get_u16(msg + 24);
            size_t blocks = dl_get_u16(msg + 26), psz = dl_audit_proj_size(r, p), evidence = 0;
            int outcome = msg[19];
            bool whole = k < dl_round_chunks_of(r, p) && j < n && j != p && outcome <= DL_SPOT_NONE &&
                         blocks <= n;
            if (whole && outcome == DL_SPOT_LIE) {
                uint64_t off, len;
                dl_round_chunk_range(r, p, k, &off, &len);
                evidence = psz + dl_round_chunk_msg_size(r, len);
            }
            whole = whole && size == DL_AUDIT_VERDICT_HEAD + evidence + blocks * psz;
            if (whole && r->verdict_state[slot] == 0)
                spot_compare(r, p, msg + DL_AUDIT_VERDICT_HEAD + evidence, blocks, m, now);
            /* About our own chunk: we know what we sent (a lie about it
             * cannot hold against our signed projections). */
            if (!whole || outcome == DL_SPOT_OK || outcome == DL_SPOT_NONE || j == r->me) {
                r->verdict_state[slot] = 2;
                continue;
            }
            char whom[64];
            snprintf(whom, sizeof whom, "spot check by member %zu", m);
            if (outcome == DL_SPOT_LIE) {
                /* Its evidence, checked here: the sender's signed
                 * projections and signed chunk, the result we hold. */
                uint64_t off, len;
                dl_round_chunk_range(r, p, k, &off, &len);
                size_t chunk_size = dl_round_chunk_msg_size(r, len);
                const uint8_t *pr = msg + DL_AUDIT_VERDICT_HEAD;
                r->verdict_state[slot] = 2;
                if (memcmp(pr, r->g.round_id, DL_GROUP_ROUND_ID) ||
                    dl_get_u16(pr + 16) != p || pr[18] != DL_AUDIT_PROJECTIONS || dl_get_u16(pr + 20) != j ||
                    memcmp(pr + 24, r->audit_seed, 32) ||
                    spot_judge(r, sc, p, k, j, pr, pr + psz, chunk_size) != DL_SPOT_LIE ||
                    !spot_convict(r, p, k, j, pr, whom))
                    DL_INFO("collab", "accountable aggregation: member %zu's evidence against member %zu does not "
                            "hold", m, j);
                else {
                    stand_in(r, p, j, pr + psz, chunk_size);
                    dl_audit_spot_escalate(r, p, k, now);
                }
                continue;
            }
            /* DL_SPOT_SILENT: we ask the sender ourselves, into a slot of
             * this verdict's own (a disclosure of another chunk of the part
             * may hold the shared one). */
            if (r->verdict_state[slot] == 0) {
                if (!ask_spot_chunk(r, p, k, j, n + m, now)) r->verdict_chunk_done[slot] = true;
                r->verdict_asked_at[slot] = now;
                r->verdict_state[slot] = 1;
            }
            if (!r->verdict_chunk_done[slot] && now - r->verdict_asked_at[slot] <= r->stall_s) {
                waiting = true;
                continue;
            }
            r->verdict_state[slot] = 2;
            const uint8_t *pr = held_projections(r, p, j);
            int mine = spot_judge(r, sc, p, k, j, pr, r->verdict_chunk[slot], r->verdict_chunk_size[slot]);
            if (mine == DL_SPOT_LIE && !spot_convict(r, p, k, j, pr, whom)) mine = DL_SPOT_SILENT;
            if (mine == DL_SPOT_LIE) {
                stand_in(r, p, j, r->verdict_chunk[slot], r->verdict_chunk_size[slot]);
                dl_audit_spot_escalate(r, p, k, now);
            }
            if (mine == DL_SPOT_SILENT) spot_silent(r, p, k, j);
        }
    }
    for (size_t p = 0; p < n; p++) {
        if (!r->spot_escalation[p]) continue;
        if (r->spot_escalation[p] == 1) {
            if (!dl_audit_disclosure_ready(r, p, now)) {
                waiting = true;
                continue;
            }
            dl_audit_check_disclosed(r, sc, p);
            r->spot_escalation[p] = 2;
        }
        /* Members learn of the conviction at different times (their own
         * check, a verdict): we stay while one may still ask us for our
         * chunk (a round that ended answers nobody), 2 stall_s at most. */
        if (spot_owed(r, p) && now - r->disclose_at[p] <= 2 * r->stall_s) waiting = true;
    }
    return waiting;
}

bool dl_audit_spot_on_event(struct dl_round *r, struct dl_avg_event *ev, size_t j, size_t part) {
    int type = ev->data[18];
    if (type == DL_AUDIT_DISCLOSE_KEPT) {
        /* A sender's signed chunk of our part, which our result committed
         * to, DL_AUDIT_DISCLOSURES at most per asking member: a spot
         * checker's draw (3d). */
        size_t k = dl_get_u32(ev->data + 20), sender = ev->size >= DL_AUDIT_DISCLOSE_KEPT_SIZE
                                                           ? dl_get_u16(ev->data + 24) : r->g.n, n = r->g.n;
        const uint8_t *chunk = ev->size == DL_AUDIT_DISCLOSE_KEPT_SIZE && part == r->me && r->i_aggregate &&
                                       k < r->agg_chunks && sender < n && r->kept
                                   ? r->kept[k * n + sender]
                                   : NULL;
#ifdef DEDLOC_TEST_HOOKS
        if (r->misbehaviour == DL_MISBEHAVE_COLLUDE) chunk = NULL; /* shields its accomplice */
#endif
        if (!chunk || !dl_audit_note_disclosed(r, j, r->me, k)) {
            dl_round_respond_text(r, ev->token, "refused: no such chunk of ours, or asked too often");
            return true;
        }
        uint64_t off, len;
        dl_round_chunk_range(r, r->me, k, &off, &len);
        dl_round_respond(r, ev->token, DL_NET_OK, chunk, dl_round_chunk_msg_size(r, len));
        return true;
    }
    /* A verdict, kept as it came (one per checker and part): whether its
     * sender checks that part, and its evidence, are judged once our seed
     * is drawn. */
    size_t slot = part * r->g.n + j;
    if (ev->size < DL_AUDIT_VERDICT_HEAD || part >= r->g.n || part == j) {
        dl_round_respond_text(r, ev->token, "refused: a spot check of no part or of its sender's own");
        return true;
    }
    if (!r->verdict_in[slot] && r->i_receive) {
        r->verdict_in[slot] = ev->data;
        r->verdict_in_size[slot] = ev->size;
        ev->data = NULL;
    }
    return false;
}
