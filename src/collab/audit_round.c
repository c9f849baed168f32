/* Accountable aggregation within a round (round.h; docs/protocol.md,
 * "Accountable aggregation"). Once a member holds every result of the round:
 *
 *   1. The seed is BLAKE2b-256 of every result's signature, in chunk order,
 *      and of the nonces the aggregators revealed. Each aggregator commits
 *      to its nonce in every result it signs and reveals it only once it
 *      holds every result of the round: an aggregator signing its last
 *      result cannot know the others' nonces, so it cannot try variants of
 *      that result until the directions favour it (grinding).
 *   2. Each sender signs its projections of each part it contributed to (s,
 *      a, d of each chunk, audit.h) and sends them, in one bundle, to every
 *      member that receives (and to each part's aggregator). A member that
 *      holds every contributor's projections of a part checks its results
 *      with them at once (the fast check): if the equation holds for every
 *      chunk, the part is right unless a sender colluded with its
 *      aggregator (which the attestation cannot show either), and the
 *      member need not wait for the attestation. Anything else waits for
 *      it: a failed fast check proves nothing, as a sender may have lied.
 *   3. Each aggregator recomputes every sender's numbers from the signed
 *      chunk it kept and signs an attestation: the senders' signed
 *      projections, plus a chunk record (the sender's signed chunk) for any
 *      sender whose projections contradict its chunk (an accusation) or who
 *      sent none (the aggregator's numbers stand in, checkable from the
 *      chunk). It sends the attestation to every member that receives.
 *   4. Each member checks each other part's attestation against the signed
 *      results it holds. Every verdict rests on signed messages only: a
 *      chunk record that contradicts its sender's projections bans the
 *      sender; one that does not, or a forged projection, or a result whose
 *      equation fails in projection, bans the aggregator. A round with a
 *      verdict, or one it could not check, is not applied.
 *   5. Under centered clip two checkers drawn from the seed per part ask
 *      the sender of its hardest-pulling claim for the chunk behind it (the
 *      one check a sender colluding with its aggregator cannot pass), and
 *      tell every member, with the evidence when it lied (spot disclosure).
 */
#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/audit_internal.h"
#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/round.h"
#include "collab/wirecodec.h"

#define MEASURE_BYTES 32 /* s a d r, f64 each */
#define DL_AUDIT_MAX_STAND_IN (12u << 20)


static void scratch_free(struct dl_audit_scratch *s) {
    if (!s) return;
    free(s->x);
    free(s->q);
    free(s->z);
    free(s);
}

static struct dl_audit_scratch *scratch_of(struct dl_round *r) {
    if (r->audit_scratch) return r->audit_scratch;
    struct dl_audit_scratch *s = dl_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->x = dl_malloc(sizeof(float) * DL_AVG_CHUNK_ELEMS);
    s->q = dl_malloc(sizeof(float) * DL_AVG_CHUNK_ELEMS);
    s->z = dl_malloc(sizeof(int16_t) * DL_AVG_CHUNK_ELEMS);
    if (!s->x || !s->q || !s->z) {
        scratch_free(s);
        return NULL;
    }
    r->audit_scratch = s;
    return s;
}

int dl_audit_setup(struct dl_round *r) {
    size_t n = r->g.n;
    r->proj_in = dl_calloc(n, sizeof *r->proj_in);
    r->proj_in_size = dl_calloc(n, sizeof *r->proj_in_size);
    r->attest_in = dl_calloc(n, sizeof *r->attest_in);
    r->attest_in_size = dl_calloc(n, sizeof *r->attest_in_size);
    r->attest_checked = dl_calloc(n, sizeof *r->attest_checked);
    r->accused = dl_calloc(n, sizeof *r->accused);
    r->reveal_in = dl_calloc(n, sizeof *r->reveal_in);
    r->reveal_got = dl_calloc(n, sizeof *r->reveal_got);
    r->store_hash = dl_calloc(r->num_chunks + 1, sizeof *r->store_hash);
    r->roster_in = dl_calloc(n, sizeof *r->roster_in);
    r->roster_in_size = dl_calloc(n, sizeof *r->roster_in_size);
    r->rr_attest_in = dl_calloc(r->num_chunks * n + 1, sizeof *r->rr_attest_in);
    r->rr_attest_in_size = dl_calloc(r->num_chunks * n + 1, sizeof *r->rr_attest_in_size);
    r->rr_checked = dl_calloc(r->num_chunks + 1, sizeof *r->rr_checked);
    r->audit_gone = dl_calloc(n, sizeof *r->audit_gone);
    r->proj1_in = dl_calloc(r->num_chunks * n + 1, sizeof *r->proj1_in);
    r->fast_proj = dl_calloc(n * n, sizeof *r->fast_proj);
    r->fast_tried = dl_calloc(n, sizeof *r->fast_tried);
    r->res_meas = dl_calloc(r->num_chunks + 1, sizeof *r->res_meas);
    r->res_meas_valid = dl_calloc(r->num_chunks + 1, sizeof *r->res_meas_valid);
    r->fast_failed_k = dl_calloc(n, sizeof *r->fast_failed_k);
    r->disclose_at = dl_calloc(n, sizeof *r->disclose_at);
    r->disclosed = dl_calloc(n * n, sizeof *r->disclosed);
    r->disclosed_size = dl_calloc(n * n, sizeof *r->disclosed_size);
    r->disclose_done = dl_calloc(n * n, sizeof *r->disclose_done);
    r->disclose_k = dl_calloc(n * n, sizeof *r->disclose_k);
    r->disclosed_to = dl_calloc(n * n * DL_AUDIT_DISCLOSURES, sizeof *r->disclosed_to);
    r->spot_k = dl_calloc(n, sizeof *r->spot_k);
    r->spot_j = dl_calloc(n, sizeof *r->spot_j);
    r->spot_chunk = dl_calloc(n, sizeof *r->spot_chunk);
    r->spot_chunk_size = dl_calloc(n, sizeof *r->spot_chunk_size);
    r->spot_chunk_done = dl_calloc(n, sizeof *r->spot_chunk_done);
    r->spot_state = dl_calloc(n, sizeof *r->spot_state);
    r->spot_asked_at = dl_calloc(n, sizeof *r->spot_asked_at);
    r->spot_escalation = dl_calloc(n, sizeof *r->spot_escalation);
    r->verdict_in = dl_calloc(n * n, sizeof *r->verdict_in);
    r->verdict_in_size = dl_calloc(n * n, sizeof *r->verdict_in_size);
    r->verdict_state = dl_calloc(n * n, sizeof *r->verdict_state);
    r->verdict_asked_at = dl_calloc(n * n, sizeof *r->verdict_asked_at);
    r->verdict_chunk = dl_calloc(n * n, sizeof *r->verdict_chunk);
    r->verdict_chunk_size = dl_calloc(n * n, sizeof *r->verdict_chunk_size);
    r->verdict_chunk_done = dl_calloc(n * n, sizeof *r->verdict_chunk_done);
    if (r->fast_failed_k)
        for (size_t p = 0; p < n; p++) r->fast_failed_k[p] = SIZE_MAX;
    randombytes_buf(r->audit_nonce, sizeof r->audit_nonce);
    if (r->i_aggregate) r->kept = dl_calloc((size_t)r->agg_chunks * n + 1, sizeof *r->kept);
    if (!r->proj_in || !r->proj_in_size || !r->attest_in || !r->attest_in_size || !r->attest_checked ||
        !r->accused || !r->reveal_in || !r->reveal_got || !r->store_hash || !r->roster_in || !r->roster_in_size ||
        !r->rr_attest_in || !r->rr_attest_in_size || !r->rr_checked || !r->audit_gone || !r->proj1_in ||
        !r->fast_proj || !r->fast_tried || !r->res_meas || !r->res_meas_valid || !r->fast_failed_k ||
        !r->disclose_at || !r->disclosed || !r->disclosed_size || !r->disclose_done || !r->disclose_k ||
        !r->disclosed_to || !r->spot_k || !r->spot_j || !r->spot_chunk || !r->spot_chunk_size ||
        !r->spot_chunk_done || !r->spot_state || !r->spot_asked_at || !r->spot_escalation || !r->verdict_in ||
        !r->verdict_in_size ||
        !r->verdict_state || !r->verdict_asked_at || !r->verdict_chunk || !r->verdict_chunk_size ||
        !r->verdict_chunk_done || (r->i_aggregate && !r->kept))
        return -1;
    return 0;
}

void dl_audit_free(struct dl_round *r) {
    size_t n = r->g.n;
    if (r->kept)
        for (size_t i = 0; i < (size_t)r->agg_chunks * n; i++) free(r->kept[i]);
    if (r->proj_in)
        for (size_t j = 0; j < n; j++) free(r->proj_in[j]);
    if (r->attest_in)
        for (size_t j = 0; j < n; j++) free(r->attest_in[j]);
    free(r->kept);
    free(r->proj_in);
    free(r->proj_in_size);
    free(r->attest_in);
    free(r->attest_in_size);
    free(r->attest_checked);
    free(r->accused);
    free(r->reveal_in);
    free(r->reveal_got);
    if (r->roster_in)
        for (size_t j = 0; j < n; j++) free(r->roster_in[j]);
    free(r->roster_in);
    free(r->roster_in_size);
    if (r->rr_attest_in)
        for (size_t i = 0; i < r->num_chunks * n; i++) free(r->rr_attest_in[i]);
    free(r->rr_attest_in);
    free(r->rr_attest_in_size);
    free(r->rr_checked);
    free(r->audit_gone);
    if (r->proj1_in)
        for (size_t i = 0; i < r->num_chunks * n; i++) free(r->proj1_in[i]);
    free(r->proj1_in);
    if (r->fast_proj)
        for (size_t i = 0; i < n * n; i++) free(r->fast_proj[i]);
    free(r->fast_proj);
    free(r->fast_tried);
    if (r->disclosed)
        for (size_t i = 0; i < n * n; i++) free(r->disclosed[i]);
    free(r->disclosed);
    free(r->disclosed_size);
    free(r->disclose_done);
    free(r->disclose_k);
    free(r->disclosed_to);
    free(r->disclose_at);
    if (r->verdict_in)
        for (size_t i = 0; i < n * n; i++) free(r->verdict_in[i]);
    free(r->verdict_in);
    free(r->verdict_in_size);
    free(r->verdict_state);
    free(r->verdict_asked_at);
    if (r->verdict_chunk)
        for (size_t i = 0; i < n * n; i++) free(r->verdict_chunk[i]);
    free(r->verdict_chunk);
    free(r->verdict_chunk_size);
    free(r->verdict_chunk_done);
    free(r->spot_k);
    free(r->spot_j);
    if (r->spot_chunk)
        for (size_t i = 0; i < n; i++) free(r->spot_chunk[i]);
    free(r->spot_chunk);
    free(r->spot_chunk_size);
    free(r->spot_chunk_done);
    free(r->spot_state);
    free(r->spot_asked_at);
    free(r->spot_escalation);
    free(r->fast_failed_k);
    free(r->res_meas);
    free(r->res_meas_valid);
    free(r->store_hash);
    scratch_free(r->audit_scratch);
    r->audit_scratch = NULL;
}

/* ---- helpers ---------------------------------------------------------------------- */


bool dl_audit_disclosed(const struct dl_round *r, size_t m, size_t p, size_t k) {
    const uint32_t *slots = r->disclosed_to + (m * r->g.n + p) * DL_AUDIT_DISCLOSURES;
    for (size_t i = 0; i < DL_AUDIT_DISCLOSURES; i++)
        if (slots[i] == k + 1) return true;
    return false;
}

bool dl_audit_note_disclosed(struct dl_round *r, size_t m, size_t p, size_t k) {
    uint32_t *slots = r->disclosed_to + (m * r->g.n + p) * DL_AUDIT_DISCLOSURES;
    for (size_t i = 0; i < DL_AUDIT_DISCLOSURES; i++)
        if (!slots[i]) {
            slots[i] = (uint32_t)(k + 1);
            return true;
        }
    return false;
}

size_t dl_audit_proj_size(const struct dl_round *r, size_t part) {
    return DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * dl_round_chunks_of(r, part) + DL_NET_SIGNATURE;
}

/* The result of (part, k) if it is generation 0 from the part's aggregator
 * (the only ones audited; see docs/protocol.md for re-reduced chunks). */
const uint8_t *dl_audit_audited_result(const struct dl_round *r, size_t part, size_t k) {
    const uint8_t *res = r->store[r->first_chunk[part] + k];
    return res && res[18] == 0 && dl_get_u16(res + 24) == part ? res : NULL;
}

/* Contributor i's (mask order) commitment: chunk hash, clip weight. */
static const uint8_t *commitment_of(const struct dl_round *r, const uint8_t *res, size_t len, size_t j) {
    size_t i = 0;
    for (size_t m = 0; m < j; m++) i += in_mask(res, m);
    return res + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, res, len) + DL_AVG_COMMIT_HEAD +
           DL_AVG_COMMIT_ENTRY * i;
}

bool dl_audit_decode_result(const struct dl_round *r, const uint8_t *res, size_t len, float *q) {
    return !dl_codec_result_decode(r->g.codec, res + DL_AVG_RESULT_HEADER, dl_round_result_data_size(r, res, len),
                                   len, q);
}

static bool decode_chunk(const struct dl_round *r, const uint8_t *chunk, size_t len, float *x) {
    return !dl_codec_decode(r->g.codec, chunk + DL_AVG_CHUNK_HEADER, dl_codec_size(r->g.codec, len), len, x);
}

static void read_measure(const uint8_t *p, struct dl_audit_measure *m) {
    m->s = dl_get_f64(p);
    m->a = dl_get_f64(p + 8);
    m->d = dl_get_f64(p + 16);
    m->r = dl_get_f64(p + 24);
}

/* From a sender's signed projections of a part (type 1): its weight and
 * its measures of chunk k. */
void dl_audit_read_projection(const uint8_t *proj, size_t k, double *weight, struct dl_audit_measure *m) {
    *weight = dl_get_f64(proj + 56);
    read_measure(proj + DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * k, m);
}

/* Measures of a signed chunk against the result of (part, k), under seed;
 * under our seed the result's own measures come out of the same sweep and
 * are kept for its check (chunk_verdict). */
bool dl_audit_measure_chunk(struct dl_round *r, struct dl_audit_scratch *sc, const uint8_t *seed, size_t part, size_t k,
                          const uint8_t *chunk, const uint8_t *res, struct dl_audit_measure *m) {
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    if (!decode_chunk(r, chunk, len, sc->x) || !dl_audit_decode_result(r, res, len, sc->q)) return false;
    size_t gi = r->first_chunk[part] + k;
    dl_audit_direction(seed, gi, len, sc->z);
    if (seed != r->audit_seed && memcmp(seed, r->audit_seed, 32)) {
        dl_audit_measure(sc->z, sc->x, sc->q, len, m);
        return true;
    }
    struct dl_audit_measure qm;
    struct dl_audit_extremes ext;
    dl_audit_measure_both(sc->z, sc->x, sc->q, len, m, &qm, &ext);
    if (res == r->store[gi]) { /* the result we hold, not one an attestation names */
        double *keep = r->res_meas[gi];
        keep[0] = qm.s, keep[1] = qm.a, keep[2] = qm.d, keep[3] = ext.lo, keep[4] = ext.hi;
        r->res_meas_valid[gi] = true;
    }
    return true;
}

/* A verdict backed by signed messages: member j is refused by us for the
 * rest of the run, and the round is not applied. Not for ban_s like a
 * malformed chunk: its own signatures show it computed or claimed what no
 * honest peer does, and one back after a minute spoils another round (the
 * attacked run of bench/attack_curve.sh lost a round that way). */
void dl_audit_accuse(struct dl_round *r, size_t j, const char *why) {
    if (!r->accused || r->accused[j]) return;
    r->accused[j] = true;
    char text[300];
    snprintf(text, sizeof text, "accountable aggregation: %s", why);
    DL_WARN("collab", "member %zu (%s) caught lying: %s", j, r->g.members[j].peer_id, why);
    dl_round_ban_for_run(r, r->g.members[j].peer_id, text);
    if (r->audit_status != DL_AVG_FAILED) {
        r->audit_status = DL_AVG_FAILED;
        snprintf(r->audit_reason, sizeof r->audit_reason, "accountable aggregation caught member %zu (%s): %s", j,
                 r->g.members[j].peer_id, why);
    }
}

/* Not checkable, with nobody to blame: not applied either. */
void dl_audit_unsure(struct dl_round *r, const char *why) {
    DL_INFO("collab", "accountable aggregation: %s", why);
    if (r->audit_status == DL_AVG_OK) {
        r->audit_status = DL_AVG_UNSURE;
        snprintf(r->audit_reason, sizeof r->audit_reason, "accountable aggregation could not check: %s", why);
    }
}

/* ---- 1 and 2: the seed, our projections ----------------------------------------------- */

/* The nonce commitment member m signed into the first result it reduced
 * (in chunk order; every member holds the same results); NULL when it
 * reduced none of them. */
static const uint8_t *nonce_commitment(const struct dl_round *r, size_t m) {
    for (size_t p = 0; p < r->g.n; p++)
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            const uint8_t *res = r->store[r->first_chunk[p] + k];
            if (!res || dl_get_u16(res + 24) != m) continue;
            uint64_t off, len;
            dl_round_chunk_range(r, p, k, &off, &len);
            return res + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, res, len) + DL_AVG_COMMIT_NONCE;
        }
    return NULL;
}

/* Whether member m's nonce goes into the seed: it reduced a result we hold
 * and revealed the nonce that result committed to (ours: always). */
static bool nonce_counts(const struct dl_round *r, size_t m) {
    const uint8_t *commit = nonce_commitment(r, m);
    if (!commit) return false;
    if (m == r->me) return true;
    return r->reveal_got[m] && dl_audit_reveal_matches(r->g.round_id, r->reveal_in[m], commit);
}

/* The seed from what we hold now: every result's signature in chunk order,
 * then each reducer's revealed nonce in member order. (The grinding test
 * hook calls it before the others revealed: what a liar can foresee.) */
static void compute_seed(const struct dl_round *r, uint8_t seed[32]) {
    /* "4": projections carry r = x.q (32 bytes a chunk; "3" had 24, "2"
     * drew +-1 signs). A member of another version draws another seed, so
     * its projections count as drawn for other results (not checkable);
     * but "3"'s are of another size as well, and an attestation holding
     * them would read as unsigned projections, which counts against its
     * aggregator: with "4" the wire protocol went to version 2, and builds
     * of the two refuse each other at the handshake (net/wire.h). */
    static const char tag[] = "dedloc audit seed 4";
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)tag, sizeof tag);
    for (size_t gi = 0; gi < r->num_chunks; gi++)
        crypto_generichash_update(&st, r->store[gi] + DL_AVG_RESULT_SIGNED, DL_NET_SIGNATURE);
    for (size_t m = 0; m < r->g.n; m++) {
        if (!nonce_counts(r, m)) continue;
        uint8_t index[2];
        dl_put_u16(index, (uint16_t)m);
        crypto_generichash_update(&st, index, sizeof index);
        crypto_generichash_update(&st, m == r->me ? r->audit_nonce : r->reveal_in[m], DL_AUDIT_NONCE);
    }
    crypto_generichash_final(&st, seed, 32);
}

/* Our nonce, once every result we sign is signed (and, if we receive, once
 * we hold every result): to every member that receives. */
static void send_reveal(struct dl_round *r, double now) {
    if (!nonce_commitment(r, r->me)) return;
    uint8_t msg[DL_AUDIT_REVEAL_SIZE] = {0};
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)r->me);
    msg[18] = DL_AUDIT_REVEAL;
    memcpy(msg + 24, r->audit_nonce, DL_AUDIT_NONCE);
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX) continue;
        if (dl_round_request(r, r->g.members[m].peer_id, "avg.audit", msg, sizeof msg, r->deadline - now,
                             EV_AUDIT_ACK, (uint32_t)r->me, 0, (uint32_t)m))
            DL_WARN("collab", "cannot send our audit nonce to %s: %s", r->g.members[m].peer_id, dl_error());
    }
}

/* Whether to draw the seed now: every reducer of a result we hold that we
 * do not count as failed has revealed, or the wait is over. The wait is
 * long enough for an honest member that still had to recover a part (it
 * reveals only once it holds every result), and bounded, so that a reducer
 * that keeps its nonce delays the round but cannot stall it. */
static bool seed_due(const struct dl_round *r, double now) {
    double until = fmax(r->audit_start + r->stall_s, fmin(r->audit_start + r->agg_timeout + r->stall_s,
                                                          r->deadline - 2 * r->stall_s));
    if (now >= until) return true;
    for (size_t m = 0; m < r->g.n; m++)
        if (m != r->me && !r->failed[m] && !r->audit_gone[m] && !r->reveal_got[m] && nonce_commitment(r, m))
            return false;
    return true;
}

#ifdef DEDLOC_TEST_HOOKS
/* DL_MISBEHAVE_OWN_PULL: measures of our own chunk of our part that make
 * chunk k's equation hold for whatever we signed, given the others' true
 * measures (we hold their chunks) and the clip weights we committed, and
 * that pass every bound a possible claim must meet: |s - z.q| within 8
 * claimed distances, that distance within tau of the result (our clip
 * weight 1 stays possible), the L1 norm as large as the distance allows
 * (it widens the tolerance). */
static void own_pull_claim(struct dl_round *r, struct dl_audit_scratch *sc, size_t k, const uint8_t *res,
                           struct dl_audit_measure *m) {
    uint64_t off, len;
    dl_round_chunk_range(r, r->me, k, &off, &len);
    size_t gi = r->first_chunk[r->me] + k;
    if (!r->res_meas_valid[gi]) return;
    double zq = r->res_meas[gi][0], q2 = r->res_meas[gi][2], total = 0, others = 0, others_r = 0, own_clip = 1;
    for (size_t j = 0; j < r->g.n; j++) {
        if (!in_mask(res, j)) continue;
        double c = dl_get_f64(commitment_of(r, res, len, j) + 32);
        total += c;
        if (j == r->me) {
            own_clip = c;
            continue;
        }
        struct dl_audit_measure mj;
        const uint8_t *chunk = r->kept[k * r->g.n + j];
        if (!chunk || !dl_audit_measure_chunk(r, sc, r->audit_seed, r->me, k, chunk, res, &mj)) return;
        others += c * mj.s;
        others_r += c * mj.r;
    }
    m->s = (zq * total - others) / own_clip;
    m->r = (q2 * q2 * total - others_r) / own_clip;
    m->d = fabs(m->s - zq) / 7.5;
    m->a = 0.999 * sqrt((double)len) * (m->d + q2);
}

/* DL_MISBEHAVE_COLLUDE_SEND: our measures of chunk k of our accomplice's
 * part p (m holds the true ones) made to balance its wrong result: the
 * projection that makes the equation hold given the others' true measures
 * (our accomplice holds their chunks), our true distance (the clip weight
 * it committed for us), the largest L1 norm that distance allows. */
static void collude_claim(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k, const uint8_t *res,
                          struct dl_audit_measure *m) {
    const struct dl_round *a = r->accomplice;
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    size_t gi = r->first_chunk[p] + k;
    if (!r->res_meas_valid[gi]) return;
    double zq = r->res_meas[gi][0], q2 = r->res_meas[gi][2], pull = 0, rpull = 0, own_clip = 1;
    struct dl_audit_measure mine = *m;
    for (size_t j = 0; j < r->g.n; j++) {
        if (!in_mask(res, j)) continue;
        double c = dl_get_f64(commitment_of(r, res, len, j) + 32);
        if (j == r->me) {
            own_clip = c;
            continue;
        }
        struct dl_audit_measure mj;
        const uint8_t *chunk = a->kept[k * r->g.n + j];
        if (!chunk || !dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, chunk, res, &mj)) return;
        pull += c * (mj.s - zq);
        rpull += c * (mj.r - q2 * q2);
    }
    m->s = zq - pull / own_clip;
    m->r = q2 * q2 - rpull / own_clip;
    m->d = mine.d;
    m->a = 0.999 * sqrt((double)len) * (m->d + q2);
}

/* DL_MISBEHAVE_COVER: as collude_claim, from the other senders' signed
 * projections of part p (every member that receives gets them), for a
 * chunk whose equation fails with our true measures m; else m stays. */
static void cover_claim(struct dl_round *r, size_t p, size_t k, const uint8_t *res, struct dl_audit_measure *m) {
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    size_t gi = r->first_chunk[p] + k;
    if (!r->res_meas_valid[gi]) return;
    double zq = r->res_meas[gi][0], q2 = r->res_meas[gi][2], total = 0, sum = 0, pull = 0, rpull = 0, spread = 0,
           own_clip = 1;
    for (size_t j = 0; j < r->g.n; j++) {
        if (!in_mask(res, j)) continue;
        double c = dl_get_f64(commitment_of(r, res, len, j) + 32), weight;
        struct dl_audit_measure mj = *m;
        if (j == r->me) {
            own_clip = c;
        } else {
            const uint8_t *pr = r->fast_proj[p * r->g.n + j];
            if (!pr || memcmp(pr + 24, r->audit_seed, 32)) return;
            dl_audit_read_projection(pr, k, &weight, &mj);
            pull += c * (mj.s - zq);
            rpull += c * (mj.r - q2 * q2);
        }
        total += c;
        sum += c * mj.s;
        spread += c * mj.a;
    }
    /* Only a result far off (our accomplice's lie): not an honest one's
     * rounding, which stays within 8 e2 of it (and double rounding far
     * below 1e-9 of the contributors' L1 norms). */
    double miss = fabs(sum / total - zq);
    double e2 = dl_get_f64(res + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, res, len));
    if (!(total > 0) || miss <= 2 * DL_AUDIT_SIGMAS * e2 + 1e-9 * spread / total) return;
    m->s = zq - pull / own_clip;
    m->r = q2 * q2 - rpull / own_clip;
    m->a = 0.999 * sqrt((double)len) * (m->d + q2);
}

/* Whether every other sender's projections of every part not ours have come. */
static bool cover_ready(const struct dl_round *r) {
    for (size_t p = 0; p < r->g.n; p++) {
        if (p == r->me) continue;
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            const uint8_t *res = dl_audit_audited_result(r, p, k);
            for (size_t j = 0; res && j < r->g.n; j++)
                if (j != r->me && in_mask(res, j) && !r->fast_proj[p * r->g.n + j]) return false;
        }
    }
    return true;
}
#endif

/* Our signed projections of part p; NULL when we are in none of its results. */
static uint8_t *build_projections(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, bool lie, size_t *size) {
    size_t chunks = dl_round_chunks_of(r, p), total = dl_audit_proj_size(r, p);
    bool any = false;
    for (size_t k = 0; k < chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        any |= res && in_mask(res, r->me);
    }
    if (!any) return NULL;
    uint8_t *msg = dl_calloc(1, total);
    if (!msg) return NULL;
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)p);
    msg[18] = DL_AUDIT_PROJECTIONS;
    dl_put_u16(msg + 20, (uint16_t)r->me);
    memcpy(msg + 24, r->audit_seed, 32);
    dl_put_f64(msg + 56, r->weight);
    for (size_t k = 0; k < chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        if (!res || !in_mask(res, r->me)) continue;
        size_t chunk_size;
        uint8_t *own = dl_round_encode_own_unsigned(r, p, k, true, &chunk_size);
        /* Projections and weight of the chunks as we sent them (the same
         * weight in each): the aggregator compares them with what it got. */
        if (own) dl_put_f64(msg + 56, dl_get_f64(own + DL_AVG_REF_HEADER));
        struct dl_audit_measure m;
        bool ok = own && dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, own, res, &m);
        free(own);
        if (!ok) {
            free(msg);
            return NULL;
        }
#ifdef DEDLOC_TEST_HOOKS
        if (lie) m.s += 1000.0 * (fabs(m.s) + 1.0);
        if (p != r->me && r->misbehaviour == DL_MISBEHAVE_NORM_LIE) m.a = fabs(m.s);
        if (p == r->me && r->misbehaviour == DL_MISBEHAVE_OWN_CLAIM) m.a = 1e300, m.d = 0;
        if (p == r->me && r->misbehaviour == DL_MISBEHAVE_OWN_PULL) own_pull_claim(r, sc, k, res, &m);
        if ((r->misbehaviour == DL_MISBEHAVE_COLLUDE_SEND || r->misbehaviour == DL_MISBEHAVE_COLLUDE_SILENT ||
             r->misbehaviour == DL_MISBEHAVE_COLLUDE_TWO_FACED) &&
            r->accomplice && p == r->accomplice->me)
            collude_claim(r, sc, p, k, res, &m);
        if (r->misbehaviour == DL_MISBEHAVE_COVER && p != r->me) cover_claim(r, p, k, res, &m);
#else
        (void)lie;
#endif
        uint8_t *e = msg + DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * k;
        dl_put_f64(e, m.s);
        dl_put_f64(e + 8, m.a);
        dl_put_f64(e + 16, m.d);
        dl_put_f64(e + 24, m.r);
    }
    r->tp.ops->sign(r->tp.ctx, msg, total - DL_NET_SIGNATURE, msg + total - DL_NET_SIGNATURE);
    *size = total;
    return msg;
}

/* Our projections of every part we contributed to: kept (for our own
 * attestation and fast checks), and one bundle per member: every part's
 * (ours too, which the others' fast checks need) to a member that
 * receives, its own part's to an aggregator that does not. */
static void send_projections(struct dl_round *r, struct dl_audit_scratch *sc, double now) {
    size_t n = r->g.n, total = DL_AUDIT_BUNDLE_HEAD;
    uint8_t *block[DL_AVG_MAX_MEMBERS] = {NULL};
    size_t block_size[DL_AVG_MAX_MEMBERS] = {0};
    /* A failed aggregator's part too where it sat out of its own chunks:
     * the senders' projections are then all its delivered results have. */
    bool sits_out = dl_round_reducer_sits_out(&r->g);
    for (size_t p = 0; p < n; p++) {
        if (!r->g.members[p].part_elems || (r->failed[p] && !sits_out)) continue;
        bool lie = p != r->me && (r->misbehaviour == DL_MISBEHAVE_PROJECTION_LIE ||
                                  (r->misbehaviour == DL_MISBEHAVE_PROJECTION_LIE_PART1 && p == 1));
        block[p] = build_projections(r, sc, p, lie, &block_size[p]);
        dl_round_progress(r);
        if (!block[p]) continue;
        total += block_size[p];
        uint8_t *copy = dl_malloc(block_size[p]);
        if (copy) memcpy(copy, block[p], block_size[p]);
        free(r->fast_proj[p * n + r->me]);
        r->fast_proj[p * n + r->me] = copy;
    }
    if (block[r->me]) {
        r->proj_in[r->me] = block[r->me];
        r->proj_in_size[r->me] = block_size[r->me];
    }
    size_t faced = SIZE_MAX, honest_size = 0, checkers[2] = {SIZE_MAX, SIZE_MAX};
    uint8_t *honest = NULL;
#ifdef DEDLOC_TEST_HOOKS
    if (r->misbehaviour == DL_MISBEHAVE_COLLUDE_TWO_FACED && r->accomplice) {
        faced = r->accomplice->me;
        r->misbehaviour = DL_MISBEHAVE_NONE;
        honest = build_projections(r, sc, faced, false, &honest_size);
        r->misbehaviour = DL_MISBEHAVE_COLLUDE_TWO_FACED;
        dl_audit_spot_checkers(r, faced, checkers);
    }
#endif
    uint8_t *msg = dl_malloc(total);
    for (size_t m = 0; msg && m < n; m++) {
        if (m == r->me || r->failed[m]) continue;
        const struct dl_group_member *gm = &r->g.members[m];
        bool receives = gm->role != DL_MEMBER_AUX;
        size_t used = DL_AUDIT_BUNDLE_HEAD, count = 0;
        for (size_t p = 0; p < n; p++) {
            if (!block[p] || !(receives || p == m)) continue;
            bool two_faced = p == faced && honest && honest_size == block_size[p] && (m == checkers[0] || m == checkers[1]);
            memcpy(msg + used, two_faced ? honest : block[p], block_size[p]);
            used += block_size[p];
            count++;
        }
        if (!count) continue;
        memset(msg, 0, DL_AUDIT_BUNDLE_HEAD);
        memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
        dl_put_u16(msg + 16, (uint16_t)r->me);
        msg[18] = DL_AUDIT_BUNDLE;
        dl_put_u16(msg + 20, (uint16_t)count);
        if (dl_round_request(r, gm->peer_id, "avg.audit", msg, used, r->deadline - now, EV_AUDIT_ACK, (uint32_t)m,
                             0, (uint32_t)m))
            DL_WARN("collab", "cannot send our projections to %s: %s", gm->peer_id, dl_error());
    }
    if (!msg && total > DL_AUDIT_BUNDLE_HEAD) DL_WARN("collab", "cannot send our projections: out of memory");
    free(msg);
    for (size_t p = 0; p < n; p++)
        if (p != r->me) free(block[p]);
    free(honest);
}

/* ---- 3: the attestation of our part ----------------------------------------------------- */

static bool expects_projections(const struct dl_round *r, size_t j) {
    for (size_t k = 0; k < r->agg_chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, r->me, k);
        if (res && in_mask(res, j)) return true;
    }
    return false;
}

/* Appends the record (k, j, j's signed chunk) to buf at *used. */
static bool append_record(uint8_t **buf, size_t *used, size_t *cap, size_t k, size_t j, const uint8_t *chunk,
                          size_t chunk_size) {
    size_t need = *used + DL_AUDIT_ACCUSE_HEAD + chunk_size;
    if (!*buf || need > *cap) {
        size_t cap2 = need * 2;
        uint8_t *b = realloc(*buf, cap2);
        if (!b) return false;
        *buf = b;
        *cap = cap2;
    }
    uint8_t *p = *buf + *used;
    memset(p, 0, DL_AUDIT_ACCUSE_HEAD);
    dl_put_u32(p, (uint32_t)k);
    dl_put_u16(p + 4, (uint16_t)j);
    memcpy(p + DL_AUDIT_ACCUSE_HEAD, chunk, chunk_size);
    *used = need;
    return true;
}

/* Which senders' signed projections of our part contradict the chunks they
 * signed: per (chunk k, sender j) at k n + j, 1 agrees, 2 contradicts, 0
 * not compared (no projections, or drawn for another seed). Chunk by chunk,
 * so that each chunk's direction and result are made once for all its
 * senders. */
static uint8_t *compare_projections(struct dl_round *r, struct dl_audit_scratch *sc, const uint8_t *seed) {
    size_t n = r->g.n;
    uint8_t *state = dl_calloc((size_t)r->agg_chunks * n + 1, 1);
    if (!state) return NULL;
    for (size_t k = 0; k < r->agg_chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, r->me, k);
        uint64_t off, len;
        dl_round_chunk_range(r, r->me, k, &off, &len);
        bool ready = false, decoded = false;
        for (size_t j = 0; res && seed && j < n; j++) {
            const uint8_t *proj = r->proj_in[j], *chunk = r->kept[k * n + j];
            if (j == r->me || !proj || !chunk || !in_mask(res, j) || memcmp(proj + 24, seed, 32)) continue;
            if (!ready) {
                decoded = dl_audit_decode_result(r, res, len, sc->q);
                dl_audit_direction(seed, r->first_chunk[r->me] + k, len, sc->z);
                ready = true;
            }
            struct dl_audit_measure mine, theirs;
            double weight;
            dl_audit_read_projection(proj, k, &weight, &theirs);
            bool ok = decoded && decode_chunk(r, chunk, len, sc->x);
            if (ok) dl_audit_measure(sc->z, sc->x, sc->q, len, &mine);
            dl_round_progress(r);
            state[k * n + j] = ok && dl_audit_measure_agrees(&theirs, &mine) &&
                                       dl_get_f64(chunk + DL_AVG_REF_HEADER) == weight
                                   ? 1
                                   : 2;
#ifdef DEDLOC_TEST_HOOKS
            if (r->misbehaviour == DL_MISBEHAVE_COLLUDE) state[k * n + j] = 1; /* never accuses its accomplice */
#endif
        }
    }
    return state;
}

static int send_attestation(struct dl_round *r, struct dl_audit_scratch *sc, double now) {
    size_t n = r->g.n, psz = dl_audit_proj_size(r, r->me);
    /* An aux aggregator holds no other results and so no seed: it takes the
     * one the first projections carry, and holds the rest to it. */
    const uint8_t *seed = r->i_receive ? r->audit_seed : NULL;
    for (size_t j = 0; j < n && !seed; j++)
        if (r->proj_in[j]) seed = r->proj_in[j] + 24;
    size_t cap = DL_AUDIT_ATTEST_HEAD + n * psz + DL_NET_SIGNATURE, used = DL_AUDIT_ATTEST_HEAD;
    uint8_t *msg = dl_calloc(1, cap);
    uint8_t *records = NULL;
    size_t rec_used = 0, rec_cap = 0, num_proj = 0, num_records = 0;
    uint8_t *state = msg ? compare_projections(r, sc, seed) : NULL;
    if (!msg || !state) {
        free(msg);
        return -1;
    }
    for (size_t j = 0; j < n; j++) {
        if (!expects_projections(r, j)) continue;
        const uint8_t *proj = r->proj_in[j];
        if (proj && seed && memcmp(proj + 24, seed, 32)) {
            DL_WARN("collab", "projections from %s were drawn for other results: left out", r->g.members[j].peer_id);
            proj = NULL;
        }
        if (proj) {
            memcpy(msg + used, proj, psz);
            used += psz;
            num_proj++;
        }
        if (j == r->me) continue;
        /* Its chunks stand in for missing projections; one that contradicts
         * them is the evidence against it. */
        for (size_t k = 0; k < r->agg_chunks; k++) {
            const uint8_t *res = dl_audit_audited_result(r, r->me, k);
            const uint8_t *chunk = r->kept[k * n + j];
            if (!res || !in_mask(res, j) || !chunk) continue;
            uint64_t off, len;
            dl_round_chunk_range(r, r->me, k, &off, &len);
            size_t chunk_size = dl_round_chunk_msg_size(r, len);
            /* Stand-ins stay within a frame (16 MiB): beyond that the
             * members cannot check this sender and apply nothing. */
            bool record = !proj && rec_used + chunk_size <= DL_AUDIT_MAX_STAND_IN;
            if (proj && state[k * n + j] == 2) {
                record = true;
                dl_audit_accuse(r, j, "its signed projections contradict the chunk it signed");
            }
            if (record) {
                if (!append_record(&records, &rec_used, &rec_cap, k, j, chunk, chunk_size)) {
                    free(msg);
                    free(records);
                    free(state);
                    return -1;
                }
                num_records++;
                if (proj) break; /* one contradiction is enough */
            }
        }
    }
    free(state);
    uint8_t *full = realloc(msg, used + rec_used + DL_NET_SIGNATURE);
    if (!full) {
        free(msg);
        free(records);
        return -1;
    }
    msg = full;
    if (rec_used) memcpy(msg + used, records, rec_used);
    free(records);
    used += rec_used;
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)r->me);
    msg[18] = DL_AUDIT_ATTESTATION;
    dl_put_u16(msg + 20, (uint16_t)num_proj);
    dl_put_u16(msg + 22, (uint16_t)num_records);
    r->tp.ops->sign(r->tp.ctx, msg, used, msg + used);
    used += DL_NET_SIGNATURE;
    /* To every receiver, even one we count as failed: it may hold our
     * results all the same (relayed), and waits for this to apply them. */
    for (size_t m = 0; m < n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX) continue;
        if (dl_round_request(r, r->g.members[m].peer_id, "avg.audit", msg, used, r->deadline - now, EV_AUDIT_ACK,
                             (uint32_t)r->me, 0, (uint32_t)m))
            DL_WARN("collab", "cannot send our attestation to %s: %s", r->g.members[m].peer_id, dl_error());
    }
    free(msg);
    return 0;
}

/* ---- 4: checking another part's attestation --------------------------------------------- */

bool dl_audit_projections_signed(const struct dl_round *r, const uint8_t *proj, size_t psz, size_t j) {
    const struct dl_group_member *m = &r->g.members[j];
    return !dl_net_verify(m->peer_id, m->pk, proj, psz - DL_NET_SIGNATURE, proj + psz - DL_NET_SIGNATURE);
}

/* What the chunk record (k, j, chunk) of part p's attestation shows: its
 * measures in *m; false when the record itself is bogus (then the
 * aggregator who signed it is to blame). */
/* Whether chunk (a chunk message of chunk_size bytes) is member j's signed
 * chunk k of part p, the one result res committed to for j. */
bool dl_audit_committed_chunk(const struct dl_round *r, size_t p, size_t k, size_t j, const uint8_t *chunk,
                            size_t chunk_size, const uint8_t *res, uint64_t len) {
    uint8_t hash[32];
    return chunk_size == dl_round_chunk_msg_size(r, len) && !memcmp(chunk, r->g.round_id, DL_GROUP_ROUND_ID) &&
           dl_get_u16(chunk + 16) == p && dl_get_u32(chunk + 20) == k &&
           dl_round_chunk_signed(r, j, chunk, chunk_size, hash) && !memcmp(hash, commitment_of(r, res, len, j), 32);
}

static bool read_record(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k, size_t j,
                        const uint8_t *chunk, const uint8_t *res, struct dl_audit_measure *m, char *why,
                        size_t why_size) {
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    if (!res || j >= r->g.n || !in_mask(res, j)) {
        snprintf(why, why_size, "its attestation holds a chunk record of chunk %zu for member %zu, not in its result",
                 k, j);
        return false;
    }
    if (!dl_audit_committed_chunk(r, p, k, j, chunk, dl_round_chunk_msg_size(r, len), res, len)) {
        snprintf(why, why_size, "its attestation holds a chunk of member %zu that member did not sign or that is "
                 "not the one its result committed to", j);
        return false;
    }
    if (!dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, chunk, res, m)) {
        /* Signed by j, and it does not decode: j's own doing, but the
         * aggregator took it into its result. */
        snprintf(why, why_size, "its result holds a chunk of member %zu that does not decode", j);
        return false;
    }
    return true;
}

/* The equation of chunk (part p, k) for the result res, given each
 * contributor's claim (mask order): the verdict, why in `why`. */
static enum dl_audit_verdict chunk_verdict(const struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k,
                                           const uint8_t *res, struct dl_audit_claim *claims, size_t count_k,
                                           size_t *false_claim, char *why, size_t why_size) {
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    /* The weights the aggregator had to use (round.c): centered clip
     * counts every contribution once; the mean caps each claimed weight
     * at a multiple of the chunk's median, or counts all alike when
     * none is positive. */
    double w[DL_AVG_MAX_MEMBERS], w_total = 0;
    for (size_t j = 0; j < count_k; j++) w[j] = claims[j].weight > 0 ? claims[j].weight : 0;
    dl_balance_cap_weights(count_k, w);
    for (size_t j = 0; j < count_k; j++) w_total += w[j];
    bool equal = r->g.aggregation == DL_AGG_CENTERED_CLIP || !(w_total > 0);
    for (size_t j = 0; j < count_k; j++) claims[j].weight = equal ? 1.0 : w[j];
    struct dl_audit_result rs = {.len = (size_t)len, .codec = r->g.codec};
    const uint8_t *commit = res + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, res, len);
    rs.e2 = dl_get_f64(commit);
    rs.delta = dl_get_f64(commit + 8);
    struct dl_audit_measure qm;
    struct dl_audit_extremes ext;
    size_t gi = r->first_chunk[p] + k;
    if (res == r->store[gi] && r->res_meas_valid[gi]) {
        const double *kept = r->res_meas[gi];
        qm = (struct dl_audit_measure){.s = kept[0], .a = kept[1], .d = kept[2]};
        ext = (struct dl_audit_extremes){.lo = kept[3], .hi = kept[4]};
    } else {
        dl_audit_decode_result(r, res, (size_t)len, sc->q);
        dl_audit_direction(r->audit_seed, gi, (size_t)len, sc->z);
        dl_audit_measure_result(sc->z, sc->q, (size_t)len, &qm, &ext);
    }
    rs.linf = fmax(fabs(ext.lo), fabs(ext.hi));
    rs.range = ext.hi - ext.lo;
    rs.s = qm.s;
    rs.l1 = qm.a;
    rs.l2 = qm.d;
    /* Claims first: one that no chunk can make true convicts its signer,
     * whatever the result (an aggregator's false claim for its own chunk, a
     * sender's that its aggregator let through). */
    for (size_t j = 0; j < count_k; j++) {
        char what[200];
        if (claims[j].fact || dl_audit_claim_possible(&claims[j].m, &rs, what, sizeof what)) continue;
        snprintf(why, why_size, "its signed measures of part %zu chunk %zu are impossible: %s", p, k, what);
        *false_claim = j;
        return DL_AUDIT_FALSE_CLAIM;
    }
    return dl_audit_check(claims, count_k, &rs, r->g.aggregation == DL_AGG_CENTERED_CLIP, r->g.clip_tau, why,
                          why_size);
}

/* The first chunk whose measures two projections of part p give differently (0 if none). */
size_t dl_audit_projections_differ_at(const struct dl_round *r, size_t p, const uint8_t *a, const uint8_t *b) {
    for (size_t k = 0; k < dl_round_chunks_of(r, p); k++)
        if (memcmp(a + DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * k, b + DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * k,
                   MEASURE_BYTES))
            return k;
    return 0;
}

static void check_attestation(struct dl_round *r, struct dl_audit_scratch *sc, size_t p) {
    const uint8_t *msg = r->attest_in[p];
    size_t size = r->attest_in_size[p], n = r->g.n, psz = dl_audit_proj_size(r, p);
    const struct dl_group_member *agg = &r->g.members[p];
    char why[300];
    r->attest_checked[p] = true;
    if (size < DL_AUDIT_ATTEST_HEAD + DL_NET_SIGNATURE ||
        dl_net_verify(agg->peer_id, agg->pk, msg, size - DL_NET_SIGNATURE, msg + size - DL_NET_SIGNATURE)) {
        /* Unsigned: nothing it says counts, and nothing proves who sent it. */
        snprintf(why, sizeof why, "the attestation of part %zu is not signed by its aggregator", p);
        dl_audit_unsure(r, why);
        return;
    }
    size_t count = dl_get_u16(msg + 20), records = dl_get_u16(msg + 22), at = DL_AUDIT_ATTEST_HEAD;
    const uint8_t *proj[DL_AVG_MAX_MEMBERS] = {NULL};
    for (size_t i = 0; i < count; i++) {
        const uint8_t *pr = msg + at;
        size_t j = at + psz <= size - DL_NET_SIGNATURE ? dl_get_u16(pr + 20) : n;
        if (j >= n || proj[j] || memcmp(pr, r->g.round_id, DL_GROUP_ROUND_ID) || dl_get_u16(pr + 16) != p ||
            pr[18] != DL_AUDIT_PROJECTIONS || !dl_audit_projections_signed(r, pr, psz, j)) {
            dl_audit_accuse(r, p, "it signed an attestation holding projections their sender did not sign");
            return;
        }
        if (memcmp(pr + 24, r->audit_seed, 32)) {
            snprintf(why, sizeof why, "the projections of part %zu were drawn for other results than ours", p);
            dl_audit_unsure(r, why);
            return;
        }
        proj[j] = pr;
        at += psz;
        /* Two projections of one part that j signed differently (one to
         * us, one to its aggregator) are evidence against j by themselves:
         * an honest sender signs one (3d, "Equivocation"). */
        const uint8_t *ours = j == r->me ? NULL : r->fast_proj[p * n + j];
        if (ours && !memcmp(ours + 24, r->audit_seed, 32) && memcmp(ours, pr, psz) &&
            dl_audit_projections_signed(r, ours, psz, j)) {
            snprintf(why, sizeof why, "it signed two different projections of part %zu (one in its aggregator's "
                     "attestation)", p);
            dl_audit_accuse(r, j, why);
            dl_audit_spot_escalate(r, p, dl_audit_projections_differ_at(r, p, ours, pr), dl_round_now(r));
        }
    }
    /* Chunk records: an accusation where the sender's projections are
     * there, a stand-in where they are not. */
    struct dl_audit_measure *stand_in = dl_calloc(dl_round_chunks_of(r, p) * n, sizeof *stand_in);
    bool *has_stand_in = dl_calloc(dl_round_chunks_of(r, p) * n, sizeof *has_stand_in);
    double weight_of[DL_AVG_MAX_MEMBERS] = {0};
    bool caught = false;
    if (!stand_in || !has_stand_in) {
        free(stand_in);
        free(has_stand_in);
        dl_audit_unsure(r, "out of memory");
        return;
    }
    for (size_t i = 0; i < records && !caught; i++) {
        if (at + DL_AUDIT_ACCUSE_HEAD > size - DL_NET_SIGNATURE) break;
        size_t k = dl_get_u32(msg + at), j = dl_get_u16(msg + at + 4);
        if (k >= dl_round_chunks_of(r, p) || j >= n) break;
        uint64_t off, len;
        dl_round_chunk_range(r, p, k, &off, &len);
        size_t chunk_size = dl_round_chunk_msg_size(r, len);
        if (at + DL_AUDIT_ACCUSE_HEAD + chunk_size > size - DL_NET_SIGNATURE) break;
        const uint8_t *chunk = msg + at + DL_AUDIT_ACCUSE_HEAD;
        at += DL_AUDIT_ACCUSE_HEAD + chunk_size;
        struct dl_audit_measure m;
        if (!read_record(r, sc, p, k, j, chunk, dl_audit_audited_result(r, p, k), &m, why, sizeof why)) {
            dl_audit_accuse(r, p, why);
            caught = true;
            break;
        }
        double weight = dl_get_f64(chunk + DL_AVG_REF_HEADER);
        if (!proj[j]) {
            stand_in[k * n + j] = m;
            has_stand_in[k * n + j] = true;
            weight_of[j] = weight;
            continue;
        }
        struct dl_audit_measure theirs;
        read_measure(proj[j] + DL_AUDIT_PROJ_HEAD + MEASURE_BYTES * k, &theirs);
        if (!dl_audit_measure_agrees(&theirs, &m) || weight != dl_get_f64(proj[j] + 56)) {
            snprintf(why, sizeof why, "its signed projections of part %zu chunk %zu contradict the chunk it signed",
                     p, k);
            dl_audit_accuse(r, j, why);
        } else {
            snprintf(why, sizeof why, "it accused member %zu of a contradiction its own evidence does not show", j);
            dl_audit_accuse(r, p, why);
        }
        caught = true;
    }
    if (!caught && at != size - DL_NET_SIGNATURE) {
        dl_audit_accuse(r, p, "it signed a malformed attestation");
        caught = true;
    }
    for (size_t k = 0; k < dl_round_chunks_of(r, p) && !caught; k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        if (!res) continue;
        uint64_t off, len;
        dl_round_chunk_range(r, p, k, &off, &len);
        struct dl_audit_claim claims[DL_AVG_MAX_MEMBERS];
        size_t count_k = 0, member_of[DL_AVG_MAX_MEMBERS] = {0};
        bool complete = true;
        for (size_t j = 0; j < n && complete; j++) {
            if (!in_mask(res, j)) continue;
            member_of[count_k] = j;
            struct dl_audit_claim *c = &claims[count_k++];
            c->clip = dl_get_f64(commitment_of(r, res, len, j) + 32);
            c->fact = false;
            if (proj[j]) {
                dl_audit_read_projection(proj[j], k, &c->weight, &c->m);
            } else if (has_stand_in[k * n + j]) {
                c->weight = weight_of[j];
                c->m = stand_in[k * n + j];
                c->fact = true;
            } else {
                complete = false;
            }
        }
        if (!complete) {
            snprintf(why, sizeof why, "part %zu chunk %zu: a contributor's projections are missing", p, k);
            dl_audit_unsure(r, why);
            break;
        }
        size_t false_claim = 0;
        enum dl_audit_verdict v = chunk_verdict(r, sc, p, k, res, claims, count_k, &false_claim, why, sizeof why);
        char text[400];
        snprintf(text, sizeof text, "its result of part %zu chunk %zu is wrong: %s", p, k, why);
        if (v == DL_AUDIT_FALSE_CLAIM) {
            /* proj[j] is signed by j (checked above): its own words. */
            dl_audit_accuse(r, member_of[false_claim], why);
            break;
        }
        if (v == DL_AUDIT_WRONG) {
            dl_audit_accuse(r, p, text);
            break;
        }
        if (v == DL_AUDIT_UNCHECKABLE) {
            dl_audit_unsure(r, text);
            break;
        }
        r->audit_chunks++;
        dl_round_progress(r);
    }
    free(stand_in);
    free(has_stand_in);
}

/* ---- generation-1 results: the re-reducer attests ------------------------------------------ */

/* Whether chunk gi holds a generation-1 result, and its re-reducer. */
static bool rereduced(const struct dl_round *r, size_t gi, size_t *reducer) {
    const uint8_t *res = r->store[gi];
    if (!res || res[18] != 1) return false;
    *reducer = dl_get_u16(res + 24);
    return true;
}

/* Our signed projection of generation-1 chunk (p, k), for its re-reducer
 * (DL_AUDIT_PROJ1_SIZE bytes into msg); false when we cannot make it. */
static bool build_proj1(struct dl_round *r, struct dl_audit_scratch *sc, size_t p, size_t k, uint8_t *msg) {
    size_t size;
    uint8_t *own = dl_round_encode_own_unsigned(r, p, k, true, &size);
    struct dl_audit_measure m;
    bool ok = own && dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, own, r->store[r->first_chunk[p] + k], &m);
    if (ok) {
#ifdef DEDLOC_TEST_HOOKS
        if (r->misbehaviour == DL_MISBEHAVE_PROJECTION_LIE) m.s += 1000.0 * (fabs(m.s) + 1.0);
#endif
        memset(msg, 0, DL_AUDIT_PROJ1_SIZE);
        dl_round_write_ref(msg, r, p, k);
        msg[18] = DL_AUDIT_PROJ1;
        dl_put_u16(msg + 24, (uint16_t)r->me);
        memcpy(msg + 32, r->audit_seed, 32);
        dl_put_f64(msg + 64, dl_get_f64(own + DL_AVG_REF_HEADER));
        dl_put_f64(msg + 72, m.s);
        dl_put_f64(msg + 80, m.a);
        dl_put_f64(msg + 88, m.d);
        dl_put_f64(msg + 96, m.r);
        r->tp.ops->sign(r->tp.ctx, msg, DL_AUDIT_PROJ1_SIZE - DL_NET_SIGNATURE,
                        msg + DL_AUDIT_PROJ1_SIZE - DL_NET_SIGNATURE);
    }
    free(own);
    return ok;
}

/* Once our seed is drawn: our projection of every generation-1 chunk we
 * contributed to, to its re-reducer (ours kept here when we are it). */
static void send_proj1(struct dl_round *r, struct dl_audit_scratch *sc, double now) {
    for (size_t p = 0; p < r->g.n; p++)
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            size_t gi = r->first_chunk[p] + k, reducer;
            if (!rereduced(r, gi, &reducer) || !in_mask(r->store[gi], r->me)) continue;
            uint8_t *msg = dl_malloc(DL_AUDIT_PROJ1_SIZE);
            if (!msg || !build_proj1(r, sc, p, k, msg)) {
                free(msg);
                continue;
            }
            if (reducer == r->me) {
                free(r->proj1_in[gi * r->g.n + r->me]);
                r->proj1_in[gi * r->g.n + r->me] = msg;
                continue;
            }
            if (dl_round_request(r, r->g.members[reducer].peer_id, "avg.audit", msg, DL_AUDIT_PROJ1_SIZE,
                                 r->deadline - now, EV_AUDIT_ACK, (uint32_t)p, (uint32_t)k, (uint32_t)reducer))
                DL_WARN("collab", "cannot send our projection to re-reducer %s: %s", r->g.members[reducer].peer_id,
                        dl_error());
            free(msg);
        }
}

static void read_proj1(const uint8_t *msg, double *weight, struct dl_audit_measure *m) {
    *weight = dl_get_f64(msg + 64);
    m->s = dl_get_f64(msg + 72);
    m->a = dl_get_f64(msg + 80);
    m->d = dl_get_f64(msg + 88);
    m->r = dl_get_f64(msg + 96);
}

/* Whether the re-reducer has every projection of the chunks it
 * re-reduced (or waited stall_s for them since its seed). */
static bool rr_due(const struct dl_round *r, double now) {
    if (now - r->seed_at > r->stall_s) return true;
    for (size_t gi = 0; gi < r->num_chunks; gi++) {
        size_t reducer;
        if (!rereduced(r, gi, &reducer) || reducer != r->me) continue;
        for (size_t j = 0; j < r->g.n; j++)
            if (in_mask(r->store[gi], j) && !r->proj1_in[gi * r->g.n + j] && !r->failed[j] && !r->audit_gone[j])
                return false;
    }
    return true;
}

/* Per chunk we re-reduced, per contribution, one record under our
 * signature to every member that receives: the sender's signed projection
 * when it agrees with the contribution it gave us (kind 1, 160 bytes), else
 * the contribution itself as its sender signed it (kind 0: a stand-in the
 * members measure themselves; a sender whose projection contradicts it is
 * banned here). A re-reduction happens only after an aggregator failed;
 * each record is its own message so that it fits a frame. */
static void send_rereduced(struct dl_round *r, struct dl_audit_scratch *sc, double now) {
    for (size_t p = 0; p < r->g.n; p++)
        for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
            size_t gi = r->first_chunk[p] + k, reducer;
            if (!rereduced(r, gi, &reducer) || reducer != r->me || !r->rr[gi].contrib) continue;
            const uint8_t *res = r->store[gi];
            uint64_t off, len;
            dl_round_chunk_range(r, p, k, &off, &len);
            size_t chunk_size = dl_round_chunk_msg_size(r, len);
            uint8_t *msg = dl_calloc(1, DL_AUDIT_REREDUCED_HEAD + chunk_size + DL_NET_SIGNATURE);
            if (!msg) continue;
            for (size_t j = 0; j < r->g.n; j++) {
                const uint8_t *chunk = r->rr[gi].contrib[j], *proj = r->proj1_in[gi * r->g.n + j];
                if (!in_mask(res, j) || !chunk) continue;
                bool agrees = false;
                if (proj && !memcmp(proj + 32, r->audit_seed, 32)) {
                    struct dl_audit_measure mine, theirs;
                    double weight;
                    read_proj1(proj, &weight, &theirs);
                    agrees = dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, chunk, res, &mine) &&
                             dl_audit_measure_agrees(&theirs, &mine) && weight == dl_get_f64(chunk + DL_AVG_REF_HEADER);
                    if (!agrees && j != r->me)
                        dl_audit_accuse(r, j, "its signed projection of a re-reduced chunk contradicts the chunk it signed");
                }
                size_t body = agrees ? DL_AUDIT_PROJ1_SIZE : chunk_size;
                size_t size = DL_AUDIT_REREDUCED_HEAD + body + DL_NET_SIGNATURE;
                memset(msg, 0, DL_AUDIT_REREDUCED_HEAD);
                dl_round_write_ref(msg, r, p, k);
                msg[18] = DL_AUDIT_REREDUCED;
                dl_put_u16(msg + 24, (uint16_t)j);
                msg[26] = agrees ? 1 : 0;
                memcpy(msg + DL_AUDIT_REREDUCED_HEAD, agrees ? proj : chunk, body);
                r->tp.ops->sign(r->tp.ctx, msg, size - DL_NET_SIGNATURE, msg + size - DL_NET_SIGNATURE);
                for (size_t m = 0; m < r->g.n; m++) {
                    if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX) continue;
                    if (dl_round_request(r, r->g.members[m].peer_id, "avg.audit", msg, size, r->deadline - now,
                                         EV_AUDIT_ACK, (uint32_t)p, (uint32_t)k, (uint32_t)m))
                        DL_WARN("collab", "cannot send our re-reduction's attestation to %s: %s",
                                r->g.members[m].peer_id, dl_error());
                }
                dl_round_progress(r);
            }
            free(msg);
        }
}

/* Whether every contributor of re-reduced chunk gi has its record. */
static bool rereduced_complete(const struct dl_round *r, size_t gi) {
    for (size_t j = 0; j < r->g.n; j++)
        if (in_mask(r->store[gi], j) && !r->rr_attest_in[gi * r->g.n + j]) return false;
    return true;
}

/* Checks the re-reducer's records of chunk gi against its signed
 * generation-1 result: every contributor its mask names, signed by its
 * sender and committed to by the result, and the result must satisfy the
 * aggregation's equation over them, as for any other part. */
static void check_rereduced(struct dl_round *r, struct dl_audit_scratch *sc, size_t gi, size_t reducer) {
    const uint8_t *res = r->store[gi];
    size_t n = r->g.n, part = 0, k = gi;
    while (part + 1 < n && r->first_chunk[part + 1] <= gi) part++;
    k = gi - r->first_chunk[part];
    const struct dl_group_member *rm = &r->g.members[reducer];
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    size_t chunk_size = DL_AUDIT_REREDUCED_HEAD + dl_round_chunk_msg_size(r, len) + DL_NET_SIGNATURE;
    size_t proj_size1 = DL_AUDIT_REREDUCED_HEAD + DL_AUDIT_PROJ1_SIZE + DL_NET_SIGNATURE;
    char why[300];
    r->rr_checked[gi] = true;
    struct dl_audit_claim claims[DL_AVG_MAX_MEMBERS];
    size_t count = 0, member_of[DL_AVG_MAX_MEMBERS] = {0};
    for (size_t j = 0; j < n; j++) {
        if (!in_mask(res, j)) continue;
        const uint8_t *msg = r->rr_attest_in[gi * n + j];
        size_t size = r->rr_attest_in_size[gi * n + j];
        if (size < DL_AUDIT_REREDUCED_HEAD + DL_NET_SIGNATURE ||
            dl_net_verify(rm->peer_id, rm->pk, msg, size - DL_NET_SIGNATURE, msg + size - DL_NET_SIGNATURE)) {
            dl_audit_unsure(r, "a re-reduction's attestation is not signed by its re-reducer");
            return;
        }
        const uint8_t *body = msg + DL_AUDIT_REREDUCED_HEAD;
        struct dl_audit_measure m;
        double weight;
        if (msg[26] == 1 && size == proj_size1) {
            /* The sender's own signed numbers, passed on. */
            const struct dl_group_member *sm = &r->g.members[j];
            if (dl_net_verify(sm->peer_id, sm->pk, body, DL_AUDIT_PROJ1_SIZE - DL_NET_SIGNATURE,
                              body + DL_AUDIT_PROJ1_SIZE - DL_NET_SIGNATURE) ||
                memcmp(body, msg, 18) || memcmp(body + 20, msg + 20, 4) || body[18] != DL_AUDIT_PROJ1 ||
                dl_get_u16(body + 24) != j) {
                snprintf(why, sizeof why, "it passed on a projection of member %zu that member did not sign", j);
                dl_audit_accuse(r, reducer, why);
                return;
            }
            if (memcmp(body + 32, r->audit_seed, 32)) {
                dl_audit_unsure(r, "a re-reduced chunk's projections were drawn for other results than ours");
                return;
            }
            read_proj1(body, &weight, &m);
        } else if (msg[26] == 0 && size == chunk_size) {
            if (!read_record(r, sc, part, k, j, body, res, &m, why, sizeof why)) {
                dl_audit_accuse(r, reducer, why);
                return;
            }
            weight = dl_get_f64(body + DL_AVG_REF_HEADER);
        } else {
            snprintf(why, sizeof why, "it signed a malformed record of its re-reduction of part %zu chunk %zu", part,
                     k);
            dl_audit_accuse(r, reducer, why);
            return;
        }
        member_of[count] = j;
        claims[count++] = (struct dl_audit_claim){.weight = weight,
                                                  .clip = dl_get_f64(commitment_of(r, res, len, j) + 32),
                                                  .m = m,
                                                  .fact = msg[26] == 0};
    }
    size_t false_claim = 0;
    enum dl_audit_verdict v = chunk_verdict(r, sc, part, k, res, claims, count, &false_claim, why, sizeof why);
    char text[400];
    snprintf(text, sizeof text, "its re-reduction of part %zu chunk %zu is wrong: %s", part, k, why);
    if (v == DL_AUDIT_FALSE_CLAIM) dl_audit_accuse(r, member_of[false_claim], why); /* signed by it (checked above) */
    else if (v == DL_AUDIT_WRONG) dl_audit_accuse(r, reducer, text);
    else if (v == DL_AUDIT_UNCHECKABLE) dl_audit_unsure(r, text);
    else r->audit_chunks++;
    dl_round_progress(r);
}

/* ---- rosters: what each result we hold is signed over ---------------------------------------- */

/* Our roster: per chunk, the signed header, the hash the signature covers
 * and the signature, to every other member that receives. Two members
 * holding different results that one reducer signed for one chunk thus
 * both hold the proof of it, whoever lied to whom. */
static void send_roster(struct dl_round *r, double now) {
    size_t size = DL_AUDIT_ROSTER_HEAD + DL_AUDIT_ROSTER_ENTRY * r->num_chunks;
    uint8_t *msg = dl_calloc(1, size);
    if (!msg) return;
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)r->me);
    msg[18] = DL_AUDIT_ROSTER;
    dl_put_u32(msg + 20, (uint32_t)r->num_chunks);
    for (size_t gi = 0; gi < r->num_chunks; gi++) {
        uint8_t *e = msg + DL_AUDIT_ROSTER_HEAD + DL_AUDIT_ROSTER_ENTRY * gi;
        memcpy(e, r->store[gi], DL_AVG_RESULT_SIGNED);
        memcpy(e + DL_AVG_RESULT_SIGNED, r->store_hash[gi], 32);
        memcpy(e + DL_AVG_RESULT_SIGNED + 32, r->store[gi] + DL_AVG_RESULT_SIGNED, DL_NET_SIGNATURE);
    }
    for (size_t m = 0; m < r->g.n; m++) {
        if (m == r->me || r->g.members[m].role == DL_MEMBER_AUX) continue;
        if (dl_round_request(r, r->g.members[m].peer_id, "avg.audit", msg, size, r->deadline - now, EV_AUDIT_ACK,
                             (uint32_t)r->me, 0, (uint32_t)m))
            DL_WARN("collab", "cannot send our roster to %s: %s", r->g.members[m].peer_id, dl_error());
    }
    free(msg);
}

/* Compares member j's roster with the results we hold. An entry that
 * differs from ours for the same chunk, generation and reducer, and that
 * the reducer did sign, is a second signed result: the reducer is caught.
 * Entries that do not verify prove nothing against anyone and are skipped
 * (the roster itself is unsigned: j could not be held to it). */
static void check_roster(struct dl_round *r, size_t j) {
    const uint8_t *msg = r->roster_in[j];
    if (r->roster_in_size[j] != DL_AUDIT_ROSTER_HEAD + DL_AUDIT_ROSTER_ENTRY * r->num_chunks) return;
    for (size_t gi = 0; gi < r->num_chunks; gi++) {
        const uint8_t *theirs = msg + DL_AUDIT_ROSTER_HEAD + DL_AUDIT_ROSTER_ENTRY * gi, *ours = r->store[gi];
        if (!memcmp(theirs, ours, DL_AVG_RESULT_SIGNED) &&
            !memcmp(theirs + DL_AVG_RESULT_SIGNED, r->store_hash[gi], 32))
            continue;
        size_t part, k;
        size_t reducer = dl_get_u16(ours + 24);
        /* Another generation (a re-reduction some members got instead of
         * the aggregator's relayed result) is no contradiction. */
        if (dl_round_ref_chunk(r, theirs, DL_AVG_RESULT_SIGNED, &part, &k) != (long)gi || theirs[18] != ours[18] ||
            dl_get_u16(theirs + 24) != reducer || reducer >= r->g.n)
            continue;
        const struct dl_group_member *m = &r->g.members[reducer];
        if (dl_net_verify(m->peer_id, m->pk, theirs, DL_AVG_RESULT_SIGNED + 32, theirs + DL_AVG_RESULT_SIGNED + 32))
            continue;
        char why[160];
        snprintf(why, sizeof why, "it signed two different results of part %zu chunk %zu (one reached member %zu)",
                 part, k, j);
        dl_audit_accuse(r, reducer, why);
    }
}

/* Rosters from every receiver we do not count as failed, or stall_s after
 * our seed; then checked. */
static bool rosters_due(const struct dl_round *r, double now) {
    if (now - r->seed_at > r->stall_s) return true;
    for (size_t m = 0; m < r->g.n; m++)
        if (m != r->me && r->g.members[m].role != DL_MEMBER_AUX && !r->failed[m] && !r->audit_gone[m] &&
            !r->roster_in[m])
            return false;
    return true;
}

/* ---- test hooks: a grinding aggregator ------------------------------------------------------ */

#ifdef DEDLOC_TEST_HOOKS
/* The grinder's lie is +delta on one element and -delta on another, with
 * delta GRIND_ODDS times the slack every member's check allows it: a
 * direction hides it when |z_a - z_b| delta stays within half that slack,
 * about one direction in GRIND_ODDS / 2 (collab/audit.h). The alignment
 * check (q.(q - v) within |q| e2) would see the pair's square, 2 delta^2:
 * the grinder shrinks the whole result to take it off, and picks the two
 * among neighbours in the result's sorted values, so that their product
 * with q stays small too. Each try moves the pair (so each try is a new
 * signature, and a new seed), up to GRIND_TRIES. */
#define GRIND_ODDS 4096.0
#define GRIND_TRIES 32768
struct grind_slot {
    float value;
    size_t at;
};
static int grind_by_value(const void *x, const void *y) {
    float a = ((const struct grind_slot *)x)->value, b = ((const struct grind_slot *)y)->value;
    return (a > b) - (a < b);
}
uint8_t *dl_audit_two_faced_copy(struct dl_round *r, size_t gi) {
    uint8_t *msg = dl_malloc(r->store_size[gi]);
    if (!msg) return NULL;
    memcpy(msg, r->store[gi], r->store_size[gi]);
    size_t part = dl_get_u16(msg + 16), k = dl_get_u32(msg + 20);
    uint64_t off, len;
    dl_round_chunk_range(r, part, k, &off, &len);
    float *q = dl_malloc(sizeof(float) * (size_t)len);
    if (q && dl_audit_decode_result(r, msg, (size_t)len, q)) {
        for (size_t e = 0; e < len; e++) q[e] *= -1000.0f;
        if (!dl_codec_encode(r->g.codec, q, (size_t)len, msg + DL_AVG_RESULT_HEADER)) {
            uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
            memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
            crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER,
                               r->store_size[gi] - DL_AVG_RESULT_HEADER, NULL, 0);
            r->tp.ops->sign(r->tp.ctx, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED);
        }
    }
    free(q);
    return msg;
}

void dl_audit_grind(struct dl_round *r, size_t part, size_t k) {
    size_t gi = r->first_chunk[part] + k;
    uint8_t *msg = r->store[gi];
    uint64_t off, len64;
    dl_round_chunk_range(r, part, k, &off, &len64);
    size_t len = (size_t)len64;
    float *q = dl_malloc(sizeof(float) * len), *lie = dl_malloc(sizeof(float) * len);
    int16_t *z = dl_malloc(sizeof(int16_t) * len);
    if (!q || !lie || !z || len < 2 || dl_codec_result_max(r->g.codec, len) != dl_codec_size(r->g.codec, len) ||
        !dl_audit_decode_result(r, msg, len, q)) {
        free(q);
        free(lie);
        free(z);
        return;
    }
    /* The slack: the tolerance without its (positive) spread and member
     * count terms, from the committed e2 as members hold it and the l1 of
     * the honest result. */
    const uint8_t *commit = msg + DL_AVG_RESULT_HEADER + dl_round_result_data_size(r, msg, len64);
    memset(z, 0, sizeof(int16_t) * len);
    struct dl_audit_measure qm;
    struct dl_audit_extremes ext;
    dl_audit_measure_result(z, q, len, &qm, &ext);
    double bound = dl_audit_e2_bound(r->g.codec, qm.d, fmax(fabs(ext.lo), fabs(ext.hi)), ext.hi - ext.lo, len);
    double slack = DL_AUDIT_SIGMAS * fmin(dl_get_f64(commit), bound) + 2.0 * (double)(len + 8) * 0x1p-53 * qm.a;
    double q_l2 = qm.d, aligned_slack = q_l2 * fmin(dl_get_f64(commit), bound);
    size_t pairs = len / 2;
    struct grind_slot *order = dl_malloc(sizeof *order * len);
    if (!order) pairs = 0;
    for (size_t e = 0; order && e < len; e++) order[e] = (struct grind_slot){q[e], e};
    if (order) qsort(order, len, sizeof *order, grind_by_value);
    for (size_t t = 0; t < GRIND_TRIES && pairs; t++) {
        /* each sweep over the pairs a larger delta */
        size_t a = order[2 * (t % pairs)].at, b = order[2 * (t % pairs) + 1].at, sweep = t / pairs;
        double delta = GRIND_ODDS * slack * (1 + (double)sweep / 64);
        /* and the whole result shrunk by mu, which takes the lie's own
         * square (and its product with q) off q.(q - v): without it the
         * alignment check sees 2 delta^2 */
        double mu = (2 * delta * delta + delta * ((double)q[a] - (double)q[b])) / (q_l2 * q_l2);
        for (size_t e = 0; e < len; e++) lie[e] = (float)((1 - mu) * (double)q[e]);
        lie[a] = (float)(lie[a] + delta);
        lie[b] = (float)(lie[b] - delta);
        if (dl_codec_encode(r->g.codec, lie, len, msg + DL_AVG_RESULT_HEADER)) break;
        uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
        memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
        crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER,
                           r->store_size[gi] - DL_AVG_RESULT_HEADER, NULL, 0);
        r->tp.ops->sign(r->tp.ctx, signed_part, sizeof signed_part, msg + DL_AVG_RESULT_SIGNED);
        memcpy(r->store_hash[gi], signed_part + DL_AVG_RESULT_SIGNED, 32);
        dl_round_progress(r); /* it stays a live member while it grinds */
        /* What it can foresee of the directions: the seed from every
         * signature (it holds every other result) and the nonces it knows;
         * then the members' check as they will run it, on the lie as they
         * will decode it, against its true average (r->acc). */
        uint8_t seed[32];
        compute_seed(r, seed);
        dl_audit_direction(seed, gi, len, z);
        if (!dl_audit_decode_result(r, msg, len, lie)) break;
        dl_audit_measure_result(z, lie, len, &qm, NULL);
        double want = 0, product = 0;
        for (size_t e = 0; e < len; e++) {
            want += dl_audit_z(z[e]) * r->acc[e];
            product += (double)lie[e] * r->acc[e];
        }
        if (fabs(qm.s - want) <= slack / 2 && fabs(qm.r - product) <= aligned_slack / 2) {
            DL_INFO("collab", "grinding: try %zu hides +-%g at elements %zu and %zu from the directions we foresee",
                    t, delta, a, b);
            break;
        }
    }
    free(order);
    free(q);
    free(lie);
    free(z);
}
#endif

/* ---- the pump and the events ------------------------------------------------------------ */

/* ---- 2b: the fast check ---------------------------------------------------------------- */

/* A bundle from member j: every block a whole type-1 message of j for a
 * part of this round, and our part's block signed by j, or nothing is
 * taken. Our part's goes to our attestation (if we aggregate and have not
 * attested yet), where it is evidence that must bind j. Every other
 * part's goes to the fast check (if we receive) with its signature
 * unchecked: the connection already says it comes from j, and a fast
 * check only ever concludes for a part, never against anyone, so j's
 * signature would add nothing to what j's word is worth there. That
 * spares each member 7 of every 8 signature checks of a round (49 of 56
 * with 8 members), a third of the audit's CPU at the tiny model's size. */
static bool take_bundle(struct dl_round *r, const uint8_t *msg, size_t size, size_t j) {
    size_t n = r->g.n, count = dl_get_u16(msg + 20), at = DL_AUDIT_BUNDLE_HEAD;
    if (dl_get_u16(msg + 16) != j || count > n) return false;
    for (size_t i = 0; i < count; i++) {
        if (at + DL_AUDIT_PROJ_HEAD > size) return false;
        const uint8_t *b = msg + at;
        size_t p = dl_get_u16(b + 16);
        if (p >= n || !r->g.members[p].part_elems || at + dl_audit_proj_size(r, p) > size) return false;
        size_t psz = dl_audit_proj_size(r, p);
        if (memcmp(b, r->g.round_id, DL_GROUP_ROUND_ID) || b[18] != DL_AUDIT_PROJECTIONS || dl_get_u16(b + 20) != j ||
            (p == r->me && !dl_audit_projections_signed(r, b, psz, j)))
            return false;
        at += psz;
    }
    if (at != size) return false;
    at = DL_AUDIT_BUNDLE_HEAD;
    for (size_t i = 0; i < count; i++) {
        const uint8_t *b = msg + at;
        size_t p = dl_get_u16(b + 16), psz = dl_audit_proj_size(r, p);
        at += psz;
        uint8_t **slot = p == r->me ? (r->i_aggregate && !r->attest_sent ? &r->proj_in[j] : NULL)
                                    : (r->i_receive ? &r->fast_proj[p * n + j] : NULL);
        if (!slot || *slot) continue;
        uint8_t *copy = dl_malloc(psz);
        if (!copy) continue;
        memcpy(copy, b, psz);
        *slot = copy;
        if (p == r->me) r->proj_in_size[j] = psz;
    }
    return true;
}

/* Whether to stop waiting for the projections of part p's delivered
 * results: stall_s after our seed, or at once when a contributor that has
 * not sent them failed or cannot be reached. */
static bool projections_overdue(const struct dl_round *r, size_t p, double now) {
    if (now - r->seed_at > r->stall_s) return true;
    size_t n = r->g.n;
    for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        for (size_t j = 0; res && j < n; j++)
            if (in_mask(res, j) && !r->fast_proj[p * n + j] && j != r->me && (r->failed[j] || r->audit_gone[j]))
                return true;
    }
    return false;
}

/* Part p's results against the projections its contributors sent us, once
 * all are in: true when every chunk's equation holds (the part is checked,
 * no attestation needed). False says nothing against anyone: a sender may
 * have lied to us, which only the attestation can show. */
static bool fast_check(struct dl_round *r, struct dl_audit_scratch *sc, size_t p) {
    size_t n = r->g.n, chunks = dl_round_chunks_of(r, p), checked = 0;
    for (size_t k = 0; k < chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        if (!res) continue;
        for (size_t j = 0; j < n; j++)
            if (in_mask(res, j) && !r->fast_proj[p * n + j]) return false;
    }
    r->fast_tried[p] = true;
    for (size_t k = 0; k < chunks; k++) {
        const uint8_t *res = dl_audit_audited_result(r, p, k);
        if (!res) continue;
        uint64_t off, len;
        dl_round_chunk_range(r, p, k, &off, &len);
        struct dl_audit_claim claims[DL_AVG_MAX_MEMBERS];
        size_t count_k = 0;
        for (size_t j = 0; j < n; j++) {
            if (!in_mask(res, j)) continue;
            const uint8_t *pr = r->fast_proj[p * n + j];
            if (memcmp(pr + 24, r->audit_seed, 32)) return false;
            struct dl_audit_claim *c = &claims[count_k++];
            c->clip = dl_get_f64(commitment_of(r, res, len, j) + 32);
            c->fact = false;
            dl_audit_read_projection(pr, k, &c->weight, &c->m);
        }
        /* Any failure, an impossible claim too, concludes nothing here
         * (these projections' signatures were not checked): the
         * attestation, which carries them signed, decides. */
        char why[300];
        size_t false_claim;
        if (chunk_verdict(r, sc, p, k, res, claims, count_k, &false_claim, why, sizeof why) != DL_AUDIT_PASS) {
            r->fast_failed_k[p] = k;
            return false;
        }
        checked++;
        dl_round_progress(r);
    }
    r->audit_chunks += checked;
    return true;
}

/* ---- 3c: disclosure, for a failed aggregator's part ------------------------------------ */

/* Part p's aggregator failed, and its delivered result of chunk k =
 * fast_failed_k[p] fails the equation against the senders' projections:
 * either it lied or a sender did, and no attestation will come to say
 * which. We ask each contributor of that chunk for the chunk it signed (our
 * own we have), which settles it as an attestation's stand-ins would. */
void dl_audit_ask_disclosure(struct dl_round *r, size_t p, double now) {
    size_t n = r->g.n, k = r->fast_failed_k[p];
    const uint8_t *res = dl_audit_audited_result(r, p, k);
    r->disclose_at[p] = now;
    uint8_t msg[DL_AUDIT_DISCLOSE_SIZE] = {0};
    memcpy(msg, r->g.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)p);
    msg[18] = DL_AUDIT_DISCLOSE;
    dl_put_u32(msg + 20, (uint32_t)k);
    for (size_t j = 0; res && j < n; j++) {
        size_t slot = p * n + j, size = 0;
        if (!in_mask(res, j)) continue;
        if (r->disclosed[slot] || !r->disclose_done[slot]) {
            /* One held or asked for already (a spot check's evidence, a
             * checker's silent sender): kept when it is of this chunk. */
            const uint8_t *held = r->disclosed[slot];
            if (held ? r->disclosed_size[slot] >= DL_AVG_CHUNK_HEADER && dl_get_u32(held + 20) == k
                     : r->disclose_k[slot] == k + 1)
                continue;
            free(r->disclosed[slot]);
            r->disclosed[slot] = NULL;
        }
        r->disclose_done[slot] = false;
        r->disclose_k[slot] = (uint32_t)(k + 1);
        if (j == r->me) {
            r->disclosed[slot] = dl_round_encode_own(r, p, k, true, &size);
            r->disclosed_size[slot] = size;
            r->disclose_done[slot] = true;
        } else if (dl_round_request(r, r->g.members[j].peer_id, "avg.audit", msg, sizeof msg, r->deadline - now,
                                    EV_AUDIT_DISCLOSED, (uint32_t)p, (uint32_t)k, (uint32_t)j)) {
            r->disclose_done[slot] = true;
        }
    }
    DL_INFO("collab", "accountable aggregation: part %zu's aggregator failed and its result of chunk %zu fails the "
            "senders' projections: asking its contributors for their signed chunks", p, k);
}

/* Whether every contributor of the disputed chunk answered (or cannot),
 * or stall_s passed since we asked. */
bool dl_audit_disclosure_ready(const struct dl_round *r, size_t p, double now) {
    if (now - r->disclose_at[p] > r->stall_s) return true;
    const uint8_t *res = dl_audit_audited_result(r, p, r->fast_failed_k[p]);
    for (size_t j = 0; res && j < r->g.n; j++)
        if (in_mask(res, j) && !r->disclose_done[p * r->g.n + j]) return false;
    return true;
}

/* The disputed chunk against its contributors' signed chunks: the
 * equation with every contributor's numbers computed by us (facts, as an
 * attestation's stand-ins). A wrong result is the aggregator's lie (its
 * signed result, their signed chunks whose hashes it committed to); a
 * sender whose signed projections contradict the chunk it signed lied to
 * us. A chunk that does not come, or that its sender did not sign, or not
 * the one committed to, shows nobody lied: not applied, nobody banned. */
void dl_audit_check_disclosed(struct dl_round *r, struct dl_audit_scratch *sc, size_t p) {
    size_t n = r->g.n, k = r->fast_failed_k[p];
    const uint8_t *res = dl_audit_audited_result(r, p, k);
    char why[300], text[400];
    if (!res) {
        dl_audit_unsure(r, "a disputed result is gone");
        return;
    }
    uint64_t off, len;
    dl_round_chunk_range(r, p, k, &off, &len);
    struct dl_audit_claim claims[DL_AVG_MAX_MEMBERS];
    size_t count_k = 0;
    for (size_t j = 0; j < n; j++) {
        if (!in_mask(res, j)) continue;
        const uint8_t *chunk = r->disclosed[p * n + j];
        if (!chunk) {
            snprintf(text, sizeof text, "part %zu's aggregator failed, its result of chunk %zu fails the senders' "
                     "projections, and member %zu did not disclose its chunk", p, k, j);
            dl_audit_unsure(r, text);
            return;
        }
        if (!dl_audit_committed_chunk(r, p, k, j, chunk, r->disclosed_size[p * n + j], res, len)) {
            /* Unsigned proves nothing; signed but not the committed one
             * could be either side's doing, and only the silent aggregator
             * could show the chunk it took. */
            snprintf(text, sizeof text, "part %zu's aggregator failed, and member %zu disclosed a chunk %zu that it "
                     "did not sign or that is not the one the result committed to", p, j, k);
            dl_audit_unsure(r, text);
            return;
        }
        struct dl_audit_claim *c = &claims[count_k++];
        if (!dl_audit_measure_chunk(r, sc, r->audit_seed, p, k, chunk, res, &c->m)) {
            snprintf(why, sizeof why, "its result holds a chunk of member %zu that does not decode", j);
            dl_audit_accuse(r, p, why);
            return;
        }
        c->weight = dl_get_f64(chunk + DL_AVG_REF_HEADER);
        c->clip = dl_get_f64(commitment_of(r, res, len, j) + 32);
        c->fact = true;
        const uint8_t *pr = r->fast_proj[p * n + j];
        if (pr && j != r->me && !memcmp(pr + 24, r->audit_seed, 32)) {
            double weight;
            struct dl_audit_measure theirs;
            dl_audit_read_projection(pr, k, &weight, &theirs);
            if ((!dl_audit_measure_agrees(&theirs, &c->m) || weight != c->weight) &&
                dl_audit_projections_signed(r, pr, dl_audit_proj_size(r, p), j)) {
                snprintf(why, sizeof why, "its signed projections of part %zu chunk %zu contradict the chunk it "
                         "signed (disclosed)", p, k);
                /* And on to the equation with every chunk's facts: an
                 * aggregator that took this claim over the chunk it holds
                 * is shown wrong there. */
                dl_audit_accuse(r, j, why);
            }
        }
    }
    size_t false_claim = 0;
    enum dl_audit_verdict v = chunk_verdict(r, sc, p, k, res, claims, count_k, &false_claim, why, sizeof why);
    if (v == DL_AUDIT_WRONG) {
        snprintf(text, sizeof text, "its result of part %zu chunk %zu is wrong against the chunks its senders "
                 "disclosed: %s", p, k, why);
        dl_audit_accuse(r, p, text);
    } else {
        snprintf(text, sizeof text, "the disputed result of part %zu chunk %zu fails the senders' projections "
                 "but %s their disclosed chunks%s%s", p, k,
                 v == DL_AUDIT_PASS ? "agrees with" : "cannot be checked against", v == DL_AUDIT_PASS ? "" : ": ",
                 v == DL_AUDIT_PASS ? "" : why);
        dl_audit_unsure(r, text);
    }
}

bool dl_audit_pump(struct dl_round *r, double now) {
    if (r->audit_done) return true;
    struct dl_audit_scratch *sc = scratch_of(r);
    if (!sc) {
        dl_round_fail(r, DL_AVG_FAILED, "out of memory");
        return true;
    }
    if (!r->audit_started) {
        r->audit_started = true;
        r->audit_start = now;
        send_reveal(r, now);
        if (r->i_receive) send_roster(r, now);
    }
    bool waiting = false;
    if (r->i_receive && !(r->seed_at > 0)) {
        if (seed_due(r, now)) {
            for (size_t m = 0; m < r->g.n; m++)
                if (m != r->me && nonce_commitment(r, m) && !nonce_counts(r, m))
                    DL_INFO("collab", "accountable aggregation: member %zu's nonce is missing or not the one it "
                            "committed to: the seed goes without it", m);
            compute_seed(r, r->audit_seed);
            r->seed_at = now;
#ifdef DEDLOC_TEST_HOOKS
            if (r->i_send && r->misbehaviour == DL_MISBEHAVE_COVER) r->cover_wait = true;
            else
#endif
            if (r->i_send) send_projections(r, sc, now);
            if (r->i_send) send_proj1(r, sc, now);
        } else {
            waiting = true;
        }
    }
#ifdef DEDLOC_TEST_HOOKS
    if (r->cover_wait) {
        if (cover_ready(r) || now - r->seed_at > r->stall_s / 2) {
            r->cover_wait = false;
            send_projections(r, sc, now);
        } else {
            waiting = true;
        }
    }
#endif
    if (r->seed_at > 0 && !r->rr_sent) {
        if (rr_due(r, now)) {
            r->rr_sent = true;
            send_rereduced(r, sc, now);
        } else {
            waiting = true;
        }
    }
    /* Senders draw their projections once their seed is ready: an
     * aggregator that receives waits for them from then on. */
    double proj_since = r->i_receive ? r->seed_at : r->audit_start;
    if (r->i_aggregate && !r->attest_sent && (!r->i_receive || r->seed_at > 0)) {
        bool all = true;
        for (size_t j = 0; j < r->g.n && all; j++)
            if (!r->proj_in[j] && !r->failed[j] && expects_projections(r, j)) all = false;
        /* A sender that sends none within stall_s: its chunks stand in. */
        if (all || now - proj_since > r->stall_s) {
            r->attest_sent = true;
#ifdef DEDLOC_TEST_HOOKS
            bool silent = r->misbehaviour == DL_MISBEHAVE_NO_ATTESTATION;
#else
            bool silent = false;
#endif
            if (!silent && send_attestation(r, sc, now)) dl_round_fail(r, DL_AVG_FAILED, "out of memory");
        } else {
            waiting = true;
        }
    }
    if (r->i_aggregate && !r->attest_sent) waiting = true;
    if (r->i_receive && r->seed_at > 0 && !r->rosters_checked) {
        if (rosters_due(r, now)) {
            r->rosters_checked = true;
            for (size_t m = 0; m < r->g.n; m++)
                if (r->roster_in[m]) check_roster(r, m);
            dl_round_progress(r);
        } else {
            waiting = true;
        }
    }
    if (r->i_receive && r->seed_at > 0)
        for (size_t gi = 0; gi < r->num_chunks; gi++) {
            size_t reducer;
            if (r->rr_checked[gi] || !rereduced(r, gi, &reducer) || reducer == r->me) continue;
            if (rereduced_complete(r, gi)) {
                check_rereduced(r, sc, gi, reducer);
            } else if (r->failed[reducer] || r->accused[reducer] ||
                       dl_bans_is_banned(r->bans, r->g.members[reducer].peer_id)) {
                /* Its re-reducer is gone too: nothing can show that the
                 * result is right, so it is not applied. */
                r->rr_checked[gi] = true;
                dl_audit_unsure(r, "a re-reduced chunk's re-reducer failed before it attested it");
            } else {
                waiting = true;
            }
        }
    if (r->i_receive && r->seed_at > 0)
        for (size_t p = 0; p < r->g.n; p++) {
            if (p == r->me || r->attest_checked[p] || !r->g.members[p].part_elems) continue;
            bool any = false;
            for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) any |= dl_audit_audited_result(r, p, k) != NULL;
            if (!any) {
                r->attest_checked[p] = true; /* every chunk of it was re-reduced */
                continue;
            }
            /* Not for a failed aggregator: its chunks may have reached
             * some members as its results and others re-reduced, so a
             * sender's projections may not cover what we hold. */
#ifdef DEDLOC_TEST_HOOKS
            bool fast = r->misbehaviour != DL_MISBEHAVE_ATTEST_ONLY;
#else
            bool fast = true;
#endif
            bool sits_out = dl_round_reducer_sits_out(&r->g);
            if (fast && !r->attest_in[p] && !r->fast_tried[p] && (!r->failed[p] || sits_out) &&
                fast_check(r, sc, p)) {
                r->attest_checked[p] = true;
            } else if (r->attest_in[p]) {
                check_attestation(r, sc, p);
            } else if (r->accused[p] || dl_bans_is_banned(r->bans, r->g.members[p].peer_id)) {
                /* Caught already (its messages are refused from now on):
                 * the round will not be applied, nothing more to learn. */
                dl_audit_unsure(r, "an aggregator was banned before its attestation came");
                r->attest_checked[p] = true;
            } else if (r->failed[p] && sits_out) {
                /* It failed mid-round, and its own chunk is in none of its
                 * results: the senders' projections cover every chunk it
                 * delivered, and the fast check above is their only check
                 * (no attestation will come). A chunk that fails it, or
                 * projections that do not all come, show no one lied (a
                 * sender may have lied to us): nothing applied. */
                if (r->fast_failed_k[p] != SIZE_MAX) {
                    /* Its equation failed: the contributors' chunks decide (3c). */
                    if (!(r->disclose_at[p] > 0)) {
                        dl_audit_ask_disclosure(r, p, now);
                        waiting = true;
                    } else if (dl_audit_disclosure_ready(r, p, now)) {
                        dl_audit_check_disclosed(r, sc, p);
                        r->attest_checked[p] = true;
                    } else {
                        waiting = true;
                    }
                } else if (r->fast_tried[p] || projections_overdue(r, p, now)) {
                    char text[200];
                    snprintf(text, sizeof text, "part %zu's aggregator failed and its delivered results %s", p,
                             r->fast_tried[p] ? "do not agree with the senders' projections"
                                              : "came without every sender's projections");
                    dl_audit_unsure(r, text);
                    r->attest_checked[p] = true;
                } else {
                    waiting = true;
                }
            } else if (r->failed[p]) {
                /* It failed mid-round (recovery took over its part): what
                 * it delivered before is applied unchecked, as before this
                 * audit existed, so that a dead aggregator costs no round
                 * (docs/protocol.md, what the audit does not cover). */
                DL_INFO("collab", "accountable aggregation: part %zu's aggregator failed; its delivered results "
                        "go unchecked", p);
                r->attest_checked[p] = true;
            } else {
                /* Until the round's deadline: its aggregator may still be
                 * recovering another part before it can attest. */
                waiting = true;
            }
        }
    if (r->i_receive && r->seed_at > 0 && dl_audit_spot_active(r) && dl_audit_spot_pump(r, sc, now)) waiting = true;
    if (waiting || r->status != DL_AVG_OK) return r->status != DL_AVG_OK;
    r->audit_done = true;
    if (r->audit_status != DL_AVG_OK) dl_round_fail(r, r->audit_status, "%s", r->audit_reason);
    return true;
}

void dl_audit_on_event_(struct dl_round *r, struct dl_avg_event *ev);
void dl_audit_on_event(struct dl_round *r, struct dl_avg_event *ev) {
    if (ev->kind == EV_AUDIT_DISCLOSED) {
        size_t p = ev->part, j = ev->member, n = r->g.n;
        if (p >= n || j >= n || r->disclose_done[p * n + j] || r->disclose_k[p * n + j] != ev->chunk + 1) return;
        r->disclose_done[p * n + j] = true;
        if (ev->status == DL_NET_OK && ev->size) {
            r->disclosed[p * n + j] = ev->data;
            r->disclosed_size[p * n + j] = ev->size;
            ev->data = NULL;
        } else {
            DL_INFO("collab", "%s did not disclose its chunk of part %zu (%s)", ev->peer_id, p,
                    dl_net_status_name(ev->status));
        }
        return;
    }
    if (ev->kind == EV_AUDIT_SPOT_CHUNK) {
        /* member < n: our own spot check's draw; n + m: the sender checker
         * m found silent, asked by us (dl_audit_spot_pump) */
        size_t p = ev->part, n = r->g.n, m = ev->member >= n ? ev->member - n : n;
        uint8_t **into;
        size_t *into_size;
        if (p >= n) return;
        if (m < n) {
            size_t slot = p * n + m;
            if (r->verdict_chunk_done[slot]) return;
            r->verdict_chunk_done[slot] = true;
            into = &r->verdict_chunk[slot], into_size = &r->verdict_chunk_size[slot];
        } else {
            if (r->spot_chunk_done[p] || ev->chunk != r->spot_k[p] || ev->member != r->spot_j[p]) return;
            r->spot_chunk_done[p] = true;
            into = &r->spot_chunk[p], into_size = &r->spot_chunk_size[p];
        }
        if (ev->status == DL_NET_OK && ev->size) {
            *into = ev->data;
            *into_size = ev->size;
            ev->data = NULL;
        } else {
            DL_INFO("collab", "%s did not disclose the chunk of part %zu our spot check drew (%s)", ev->peer_id, p,
                    dl_net_status_name(ev->status));
        }
        return;
    }
    if (ev->kind == EV_AUDIT_ACK) {
        /* A member we cannot reach will send no nonce or roster either: not
         * waited for. (Not counted as failed: that would spare an
         * aggregator that hangs up on us the check of its part.) */
        if (ev->status == DL_NET_DISCONNECTED && ev->member < r->g.n) r->audit_gone[ev->member] = true;
        if (ev->status != DL_NET_OK)
            DL_INFO("collab", "%s did not take our audit message (%s)", ev->peer_id, dl_net_status_name(ev->status));
        return;
    }
    r->bytes_received += ev->size;
    long j = dl_group_find(&r->g, ev->peer_id);
    if (j < 0 || ev->size < DL_AUDIT_ATTEST_HEAD || memcmp(ev->data, r->g.round_id, DL_GROUP_ROUND_ID)) {
        dl_round_respond_text(r, ev->token, "refused: not an audit message of this round");
        return;
    }
    size_t part = dl_get_u16(ev->data + 16);
    int type = ev->data[18];
    if (type == DL_AUDIT_BUNDLE) {
        if (!take_bundle(r, ev->data, ev->size, (size_t)j)) {
            dl_round_respond_text(r, ev->token,
                                  "refused: a bundle of projections not all whole and its own, or our part's unsigned");
            return;
        }
    } else if (type == DL_AUDIT_PROJECTIONS) {
        /* Kept only when it is whole and signed: an attestation must hold
         * nothing its sender could disown. */
        if (!r->i_aggregate || part != r->me || ev->size != dl_audit_proj_size(r, part) ||
            dl_get_u16(ev->data + 20) != (size_t)j || !dl_audit_projections_signed(r, ev->data, ev->size, (size_t)j)) {
            dl_round_respond_text(r, ev->token, "refused: projections not for our part or not signed");
            return;
        }
        if (!r->proj_in[j] && !r->attest_sent) {
            r->proj_in[j] = ev->data;
            r->proj_in_size[j] = ev->size;
            ev->data = NULL;
        }
    } else if (type == DL_AUDIT_REVEAL) {
        /* Checked against its commitment when the seed is drawn; one that
         * comes after that is of no use. */
        if (part != (size_t)j || ev->size != DL_AUDIT_REVEAL_SIZE) {
            dl_round_respond_text(r, ev->token, "refused: a nonce that is not its sender's own");
            return;
        }
        if (!r->reveal_got[j] && !(r->seed_at > 0)) {
            memcpy(r->reveal_in[j], ev->data + 24, DL_AUDIT_NONCE);
            r->reveal_got[j] = true;
        }
    } else if (type == DL_AUDIT_PROJ1) {
        size_t p, k;
        long gi = dl_round_ref_chunk(r, ev->data, ev->size, &p, &k);
        const struct dl_group_member *sm = &r->g.members[j];
        if (gi < 0 || dl_round_rereducer(r, p) != (long)r->me || ev->size != DL_AUDIT_PROJ1_SIZE ||
            dl_get_u16(ev->data + 24) != (size_t)j ||
            dl_net_verify(sm->peer_id, sm->pk, ev->data, ev->size - DL_NET_SIGNATURE,
                          ev->data + ev->size - DL_NET_SIGNATURE)) {
            dl_round_respond_text(r, ev->token, "refused: a projection not for a chunk we re-reduced, or not signed");
            return;
        }
        if (!r->proj1_in[(size_t)gi * r->g.n + (size_t)j] && !r->rr_sent) {
            r->proj1_in[(size_t)gi * r->g.n + (size_t)j] = ev->data;
            ev->data = NULL;
        }
    } else if (type == DL_AUDIT_REREDUCED) {
        size_t p, k;
        long gi = dl_round_ref_chunk(r, ev->data, ev->size, &p, &k);
        size_t sender = ev->size >= DL_AUDIT_REREDUCED_HEAD ? dl_get_u16(ev->data + 24) : r->g.n;
        if (gi < 0 || dl_round_rereducer(r, p) != j || sender >= r->g.n ||
            ev->size < DL_AUDIT_REREDUCED_HEAD + DL_NET_SIGNATURE) {
            dl_round_respond_text(r, ev->token, "refused: an attestation of a re-reduction that is not its own");
            return;
        }
        size_t slot = (size_t)gi * r->g.n + sender;
        if (!r->rr_attest_in[slot] && r->i_receive) {
            r->rr_attest_in[slot] = ev->data;
            r->rr_attest_in_size[slot] = ev->size;
            ev->data = NULL;
        }
    } else if (type == DL_AUDIT_ROSTER) {
        if (part != (size_t)j || ev->size != DL_AUDIT_ROSTER_HEAD + DL_AUDIT_ROSTER_ENTRY * r->num_chunks ||
            r->g.members[j].role == DL_MEMBER_AUX) {
            dl_round_respond_text(r, ev->token, "refused: a roster that is not its sender's or not of this round");
            return;
        }
        if (!r->roster_in[j] && r->i_receive && !r->rosters_checked) {
            r->roster_in[j] = ev->data;
            r->roster_in_size[j] = ev->size;
            ev->data = NULL;
        }
    } else if (type == DL_AUDIT_DISCLOSE) {
        /* Our signed chunk of another's part, DL_AUDIT_DISCLOSURES
         * chunks at most per asking member and part (a disputed chunk, a
         * spot check's, an escalation's: one asker may need all three):
         * what we sent its aggregator, which the asker may hold against it
         * (or against our projections). */
        size_t k = dl_get_u32(ev->data + 20), n = r->g.n, size = 0;
        if (ev->size != DL_AUDIT_DISCLOSE_SIZE || part >= n || part == r->me || !r->i_send ||
            !r->g.members[part].part_elems || k >= dl_round_chunks_of(r, part) ||
            !dl_audit_note_disclosed(r, (size_t)j, part, k)) {
            dl_round_respond_text(r, ev->token, "refused: not a chunk we sent, or asked too often");
            return;
        }
#ifdef DEDLOC_TEST_HOOKS
        if (r->misbehaviour == DL_MISBEHAVE_COLLUDE_SILENT) {
            dl_round_respond_text(r, ev->token, "refused: not today");
            return;
        }
#endif
        uint8_t *chunk = dl_round_encode_own(r, part, k, true, &size);
        if (!chunk) {
            dl_round_respond_text(r, ev->token, "refused: our chunk cannot be made again");
            return;
        }
        dl_round_respond(r, ev->token, DL_NET_OK, chunk, size);
        free(chunk);
        return;
    } else if (type == DL_AUDIT_DISCLOSE_KEPT || type == DL_AUDIT_VERDICT) {
        if (dl_audit_spot_on_event(r, ev, (size_t)j, part)) return;
    } else if (type == DL_AUDIT_ATTESTATION) {
        if (part != (size_t)j || !r->g.members[part].part_elems) {
            dl_round_respond_text(r, ev->token, "refused: an attestation of a part that is not its own");
            return;
        }
        if (!r->attest_in[part] && r->i_receive) {
            r->attest_in[part] = ev->data;
            r->attest_in_size[part] = ev->size;
            ev->data = NULL;
        }
    } else {
        dl_round_respond_text(r, ev->token, "refused: unknown audit message");
        return;
    }
    dl_round_respond(r, ev->token, DL_NET_OK, NULL, 0);
}
