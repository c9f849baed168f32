/* What a member takes as the result of a chunk (dl_round_accept_result,
 * src/collab/round.c), one crafted message at a time: the reducer's
 * signature over the header and the BLAKE2b-256 of the data, and who may
 * reduce which part. A result whose data changed after it was signed, and a
 * generation-0 result that the member who signed it does not own (its
 * signature valid, its part someone else's), are refused and leave the
 * chunk empty, so the genuine result is still taken when it comes. The
 * round is member 2 of three, over a transport that sends nothing.
 * dl_round_accept_result: 1 stored, 0 a duplicate, -1 refused. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/bytes.h"
#include "collab/round.h"
#include "collab/wirecodec.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define MEMBERS 3
#define PART 100

static uint8_t pk[MEMBERS][DL_NET_PUBLIC_KEY], sk[MEMBERS][64];

static int quiet_request(void *ctx, uint64_t serial, const char *peer_id, const char *method, const void *payload,
                         size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member) {
    (void)ctx, (void)serial, (void)peer_id, (void)method, (void)payload, (void)size, (void)timeout_s, (void)kind;
    (void)part, (void)chunk, (void)member;
    return 0;
}
static int quiet_respond(void *ctx, uint64_t token, int status, const void *payload, size_t size) {
    (void)ctx, (void)token, (void)status, (void)payload, (void)size;
    return 0;
}
static void quiet_respond_text(void *ctx, uint64_t token, const char *text) { (void)ctx, (void)token, (void)text; }
static struct dl_avg_event *quiet_wait(void *ctx, double until) {
    (void)ctx, (void)until;
    return NULL;
}
static void sign_as_me(void *ctx, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]) {
    (void)ctx;
    crypto_sign_detached(sig, NULL, data, size, sk[2]);
}
static double fixed_now(void *ctx) {
    (void)ctx;
    return 1000;
}
static const struct dl_round_transport_ops quiet_ops = {
    .request = quiet_request,
    .respond = quiet_respond,
    .respond_text = quiet_respond_text,
    .wait = quiet_wait,
    .sign = sign_as_me,
    .now = fixed_now,
};

static struct dl_group group;
static float input[MEMBERS * PART];

static struct dl_round *round_as_member_2(struct dl_bans *bans) {
    const struct dl_round_transport tp = {&quiet_ops, NULL};
    struct dl_round *r = dl_round_new(&tp, bans);
    if (!r) abort();
    r->serial = 1;
    r->has_group = true;
    r->g = group;
    r->me = 2;
    r->input = input;
    r->n = MEMBERS * PART;
    r->weight = 1;
    r->input_ready = true;
    r->start = r->group_time = 1000;
    r->deadline_s = 60;
    r->deadline = 1060;
    r->stall_s = 10;
    CHECK_MSG(dl_round_begin(r) == 0, "cannot begin: %s", r->reason);
    return r;
}

#define EVERYONE 0x7

/* A result of `part`'s only chunk, generation `gen`, naming `reducer`,
 * with the contributors of `mask`, signed by `signer` over the header and
 * the hash of `value` x PART. */
static uint8_t *result_of(size_t part, uint8_t gen, size_t reducer, size_t signer, float value, uint8_t mask,
                          size_t *size) {
    size_t enc = dl_codec_size(DL_CODEC_NONE, PART), contributors = 0;
    for (size_t j = 0; j < MEMBERS; j++) contributors += (mask >> j) & 1;
    /* the data, then the audit's commitments (e2, delta, and a hash and a
     * clip weight per contributor: zeros here), all under the signature */
    *size = DL_AVG_RESULT_HEADER + enc + DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * contributors;
    uint8_t *msg = calloc(1, *size);
    if (!msg) abort();
    memcpy(msg, group.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(msg + 16, (uint16_t)part);
    msg[18] = gen;
    dl_put_u32(msg + 20, 0);
    dl_put_u16(msg + 24, (uint16_t)reducer);
    msg[28] = mask;
    dl_put_f64(msg + 60, (double)contributors);
    float values[PART];
    for (size_t i = 0; i < PART; i++) values[i] = value + (float)i * 1e-3f;
    CHECK_OK(dl_codec_encode(DL_CODEC_NONE, values, PART, msg + DL_AVG_RESULT_HEADER));
    uint8_t signed_part[DL_AVG_RESULT_SIGNED + 32];
    memcpy(signed_part, msg, DL_AVG_RESULT_SIGNED);
    crypto_generichash(signed_part + DL_AVG_RESULT_SIGNED, 32, msg + DL_AVG_RESULT_HEADER, *size - DL_AVG_RESULT_HEADER,
                       NULL, 0);
    crypto_sign_detached(msg + DL_AVG_RESULT_SIGNED, NULL, signed_part, sizeof signed_part, sk[signer]);
    return msg;
}

static uint8_t *result(size_t part, uint8_t gen, size_t reducer, size_t signer, float value, size_t *size) {
    return result_of(part, gen, reducer, signer, value, EVERYONE, size);
}

/* The stored result of part's chunk: its first value, NAN when none. */
static float stored(const struct dl_round *r, size_t part) {
    size_t p, k;
    uint8_t ref[24] = {0};
    memcpy(ref, group.round_id, DL_GROUP_ROUND_ID);
    dl_put_u16(ref + 16, (uint16_t)part);
    long gi = dl_round_ref_chunk(r, ref, sizeof ref, &p, &k);
    if (gi < 0 || !r->store[gi]) return NAN;
    float v;
    memcpy(&v, r->store[gi] + DL_AVG_RESULT_HEADER, sizeof v);
    return v;
}

int main(void) {
    if (sodium_init() < 0) return 1;
    for (size_t i = 0; i < DL_GROUP_ROUND_ID; i++) group.round_id[i] = (uint8_t)(0x30 + i);
    group.epoch = 4;
    group.elements = MEMBERS * PART;
    group.codec = DL_CODEC_NONE;
    group.stall_s = 10;
    group.aggregation = DL_AGG_MEAN;
    group.n = MEMBERS;
    for (size_t i = 0; i < MEMBERS; i++) {
        uint8_t seed[32];
        memset(seed, (int)(i + 11), sizeof seed);
        crypto_sign_seed_keypair(pk[i], sk[i], seed);
    }
    /* ascending peer id order, as a group record has it */
    for (size_t i = 0; i < MEMBERS; i++)
        for (size_t j = i + 1; j < MEMBERS; j++) {
            char a[DL_PEER_ID_HEX], b[DL_PEER_ID_HEX];
            dl_net_peer_id_from_key(pk[i], a);
            dl_net_peer_id_from_key(pk[j], b);
            if (strcmp(a, b) > 0) {
                uint8_t t[64];
                memcpy(t, pk[i], 32), memcpy(pk[i], pk[j], 32), memcpy(pk[j], t, 32);
                memcpy(t, sk[i], 64), memcpy(sk[i], sk[j], 64), memcpy(sk[j], t, 64);
            }
        }
    for (size_t i = 0; i < MEMBERS; i++) {
        struct dl_group_member *m = &group.members[i];
        memcpy(m->pk, pk[i], 32);
        dl_net_peer_id_from_key(pk[i], m->peer_id);
        m->role = DL_MEMBER_TRAINER;
        m->weight = 1;
        m->bandwidth_mbit = 100;
        m->part_offset = i * PART;
        m->part_elems = PART;
    }
    for (size_t i = 0; i < MEMBERS * PART; i++) input[i] = (float)i;
    struct dl_bans bans;
    dl_bans_init(&bans, 60, 3, 10);
    size_t size;

    /* the owner's result, untouched: taken */
    struct dl_round *r = round_as_member_2(&bans);
    uint8_t *msg = result(0, 0, 0, 0, 5.0f, &size);
    CHECK(dl_round_accept_result(r, msg, size, true, group.members[0].peer_id) > 0 && stored(r, 0) == 5.0f);
    free(msg);
    dl_round_free(r);

    /* the owner's result with one data bit changed after signing: refused,
     * the chunk stays empty, the genuine one is then taken */
    r = round_as_member_2(&bans);
    msg = result(1, 0, 1, 1, 7.0f, &size);
    msg[DL_AVG_RESULT_HEADER] ^= 1;
    CHECK_MSG(dl_round_accept_result(r, msg, size, true, group.members[1].peer_id) < 0,
              "a result altered after its signature was taken");
    CHECK_MSG(isnan(stored(r, 1)), "the altered result was stored");
    free(msg);
    msg = result(1, 0, 1, 1, 7.0f, &size);
    CHECK(dl_round_accept_result(r, msg, size, true, group.members[1].peer_id) > 0 && stored(r, 1) == 7.0f);
    free(msg);
    dl_round_free(r);

    /* signed by member 0 as the reducer of part 1, which member 1 owns:
     * its signature is valid, its claim is not; also when relayed */
    r = round_as_member_2(&bans);
    msg = result(1, 0, 0, 0, 9.0f, &size);
    CHECK_MSG(dl_round_accept_result(r, msg, size, true, group.members[0].peer_id) < 0,
              "a generation-0 result from a member that does not own the part was taken");
    CHECK_MSG(dl_round_accept_result(r, msg, size, false, group.members[0].peer_id) < 0,
              "a relayed generation-0 result from a member that does not own the part was taken");
    CHECK_MSG(isnan(stored(r, 1)), "the non-owner's result was stored");
    free(msg);
    msg = result(1, 0, 1, 1, 7.0f, &size);
    CHECK(dl_round_accept_result(r, msg, size, true, group.members[1].peer_id) > 0 && stored(r, 1) == 7.0f);
    free(msg);
    dl_round_free(r);

    /* Centered clip with three senders: a reducer leaves its own chunk out
     * (dl_round_reducer_sits_out). A result of member 1's part without
     * member 1 is taken; one that counts member 1, however well signed,
     * convicts it: refused, the round fails, member 1 is accused and
     * refused for the run. */
    group.aggregation = DL_AGG_CENTERED_CLIP;
    CHECK(dl_round_reducer_sits_out(&group));
    r = round_as_member_2(&bans);
    msg = result_of(1, 0, 1, 1, 7.0f, EVERYONE & ~2u, &size);
    CHECK_MSG(dl_round_accept_result(r, msg, size, true, group.members[1].peer_id) > 0 && stored(r, 1) == 7.0f,
              "a centered-clip result without its reducer's own chunk was refused");
    free(msg);
    msg = result_of(0, 0, 0, 0, 5.0f, EVERYONE, &size);
    CHECK_MSG(dl_round_accept_result(r, msg, size, false, group.members[1].peer_id) < 0,
              "a centered-clip result counting its reducer's own chunk was taken");
    CHECK_MSG(isnan(stored(r, 0)), "the result counting its reducer was stored");
    CHECK_MSG(r->status == DL_AVG_FAILED && strstr(r->reason, "counts its own contribution"),
              "the round went on (%d: %s)", (int)r->status, r->reason);
    CHECK_MSG(r->accused && r->accused[0] && !r->accused[1], "member 0 is not the one accused");
    CHECK_MSG(dl_bans_is_banned(&bans, group.members[0].peer_id), "member 0 is not refused");
    free(msg);
    dl_round_free(r);

    /* With only two senders (member 0 aux) there is no honest majority to
     * protect: a reducer counts itself, and the result is taken. */
    group.members[0].role = DL_MEMBER_AUX;
    CHECK(!dl_round_reducer_sits_out(&group));
    r = round_as_member_2(&bans);
    msg = result_of(1, 0, 1, 1, 7.0f, EVERYONE & ~1u, &size);
    CHECK_MSG(dl_round_accept_result(r, msg, size, true, group.members[1].peer_id) > 0 && stored(r, 1) == 7.0f,
              "with two senders, a centered-clip result counting its reducer was refused");
    free(msg);
    dl_round_free(r);
    group.members[0].role = DL_MEMBER_TRAINER;
    group.aggregation = DL_AGG_MEAN;
    CHECK(!dl_round_reducer_sits_out(&group));

    dl_bans_destroy(&bans);
    return dl_test_finish("collab result acceptance");
}
