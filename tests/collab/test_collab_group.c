/* The signed group record: members in ascending peer id order, the leader's
 * signature over every byte, and the checks a member makes before trusting
 * it (order, tiling of the vector, roles, key ownership). */
#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/group.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

static dl_net *start_net(void) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "group-test";
    cfg.listen = "";
    cfg.use_dht = false;
    dl_net *net = NULL;
    if (dl_net_start(&cfg, &net)) return NULL;
    return net;
}

/* A member with a fresh key (its peer id derived from it). */
static void fresh_member(struct dl_group_member *m, double weight, int role) {
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(m->pk, sk);
    dl_net_peer_id_from_key(m->pk, m->peer_id);
    m->weight = weight;
    m->bandwidth_mbit = 100;
    m->role = role;
}

int main(void) {
    if (sodium_init() < 0) return 1;
    dl_net *leader = start_net(), *other = start_net();
    CHECK(leader && other);
    if (!leader || !other) return 1;

    struct dl_group *g = calloc(1, sizeof *g);
    struct dl_group *parsed = calloc(1, sizeof *parsed);
    randombytes_buf(g->round_id, sizeof g->round_id);
    g->epoch = 7;
    g->elements = 1000;
    g->codec = DL_CODEC_FP16;
    g->stall_s = 2.5;
    g->aggregation = DL_AGG_CENTERED_CLIP;
    g->clip_tau = 0.75;
    g->clip_iterations = 20;
    g->n = 5;
    for (size_t i = 0; i < 4; i++) fresh_member(&g->members[i], (double)(i + 1), i == 3 ? DL_MEMBER_CLIENT : DL_MEMBER_TRAINER);
    /* the leader, with its real key, joins last */
    memcpy(g->members[4].pk, dl_net_public_key(leader), 32);
    snprintf(g->members[4].peer_id, sizeof g->members[4].peer_id, "%s", dl_net_peer_id(leader));
    g->members[4].weight = 0;
    g->members[4].role = DL_MEMBER_AUX;
    g->members[4].bandwidth_mbit = 50;

    /* Sorting puts the members in ascending peer id order and finds the leader. */
    CHECK_OK(dl_group_sort(g, dl_net_peer_id(leader)));
    for (size_t i = 1; i < g->n; i++) CHECK(strcmp(g->members[i - 1].peer_id, g->members[i].peer_id) < 0);
    CHECK(!strcmp(g->members[g->leader].peer_id, dl_net_peer_id(leader)));
    /* parts: every non-client aggregates 250 elements, in member order */
    uint64_t off = 0;
    for (size_t i = 0; i < g->n; i++) {
        g->members[i].part_offset = off;
        g->members[i].part_elems = g->members[i].role == DL_MEMBER_CLIENT ? 0 : 250;
        off += g->members[i].part_elems;
    }
    CHECK(off == 1000);

    size_t size;
    uint8_t *rec = dl_group_sign(g, leader, &size);
    CHECK(rec && size == dl_group_record_size(5) + DL_NET_SIGNATURE);
    CHECK_OK(dl_group_parse(rec, size, parsed));
    CHECK(parsed->n == 5 && parsed->epoch == 7 && parsed->elements == 1000 && parsed->codec == 1);
    CHECK(parsed->leader == g->leader && !memcmp(parsed->round_id, g->round_id, 16));
    CHECK(parsed->stall_s == 2.5);
    CHECK(parsed->aggregation == DL_AGG_CENTERED_CLIP && parsed->clip_tau == 0.75 && parsed->clip_iterations == 20);
    for (size_t i = 0; i < 5; i++) {
        CHECK(!strcmp(parsed->members[i].peer_id, g->members[i].peer_id));
        CHECK(parsed->members[i].weight == g->members[i].weight);
        CHECK(parsed->members[i].role == g->members[i].role);
        CHECK(parsed->members[i].part_offset == g->members[i].part_offset);
        CHECK(parsed->members[i].part_elems == g->members[i].part_elems);
        CHECK(!memcmp(parsed->members[i].pk, g->members[i].pk, 32));
    }
    CHECK(dl_group_find(parsed, g->members[2].peer_id) == 2);
    CHECK(dl_group_find(parsed, "00000000000000000000000000000000") == -1);

    /* The record answers our join only when it is for what we joined: a
     * leader that answers an epoch-8 join with its record of epoch 7 (a
     * replay of a round already applied) is refused, as are another vector
     * size, codec, role or leader. */
    {
        /* a trainer other than the leader (the sort put the roles in peer id order) */
        size_t at = 0;
        while (at < parsed->n && (at == parsed->leader || parsed->members[at].role != DL_MEMBER_TRAINER)) at++;
        CHECK(at < parsed->n);
        const char *lead_id = dl_net_peer_id(leader), *me_id = g->members[at].peer_id;
        size_t me = 99;
        CHECK_OK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_TRAINER, 1000, DL_CODEC_FP16, 7, &me));
        CHECK(me == at);
        CHECK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_TRAINER, 1000, DL_CODEC_FP16, 8, &me) != 0 &&
              strstr(dl_error(), "epoch 7"));
        CHECK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_TRAINER, 1000, DL_CODEC_FP16, 6, &me) != 0);
        CHECK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_TRAINER, 999, DL_CODEC_FP16, 7, &me) != 0);
        CHECK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_TRAINER, 1000, DL_CODEC_NONE, 7, &me) != 0);
        CHECK(dl_group_check_join(parsed, lead_id, me_id, DL_MEMBER_CLIENT, 1000, DL_CODEC_FP16, 7, &me) != 0);
        CHECK(dl_group_check_join(parsed, me_id, me_id, DL_MEMBER_TRAINER, 1000, DL_CODEC_FP16, 7, &me) != 0);
        CHECK(dl_group_check_join(parsed, lead_id, dl_net_peer_id(other), DL_MEMBER_TRAINER, 1000, DL_CODEC_FP16, 7,
                                  &me) != 0);
    }

    /* Any flipped bit is refused (a field check or the signature). */
    int refused = 0;
    for (size_t i = 0; i < size; i++) {
        rec[i] ^= 0x01;
        refused += dl_group_parse(rec, size, parsed) != 0;
        rec[i] ^= 0x01;
    }
    CHECK_MSG(refused == (int)size, "%d of %zu tampered records refused", refused, size);
    CHECK(dl_group_parse(rec, size - 1, parsed) != 0);

    /* A version 1 record (no aggregation tail) still parses, as a mean round. */
    size_t v1_body = size - DL_NET_SIGNATURE - DL_GROUP_TAIL;
    uint8_t *v1 = malloc(v1_body + DL_NET_SIGNATURE);
    CHECK(v1 != NULL);
    if (v1) {
        memcpy(v1, rec, v1_body);
        v1[4] = 1;
        dl_net_sign(leader, v1, v1_body, v1 + v1_body);
        CHECK_OK(dl_group_parse(v1, v1_body + DL_NET_SIGNATURE, parsed));
        CHECK(parsed->n == 5 && parsed->aggregation == DL_AGG_MEAN);
        free(v1);
    }
    /* A signed record with a centered clip the others could not run. */
    struct dl_group *odd = calloc(1, sizeof *odd);
    const double bad_tau[] = {0, -1, NAN, INFINITY, 1};
    const int bad_iters[] = {20, 20, 20, 20, DL_CLIP_MAX_ITERATIONS + 1};
    for (size_t t = 0; odd && t < 5; t++) {
        *odd = *g;
        odd->clip_tau = bad_tau[t];
        odd->clip_iterations = bad_iters[t];
        size_t odd_size;
        uint8_t *odd_rec = dl_group_sign(odd, leader, &odd_size);
        CHECK(odd_rec && dl_group_parse(odd_rec, odd_size, parsed) != 0 && strstr(dl_error(), "centered clip"));
        free(odd_rec);
    }
    free(odd);

    /* Signed by another peer than the one it names as leader. */
    size_t forged_size;
    uint8_t *forged = dl_group_sign(g, other, &forged_size);
    CHECK(dl_group_parse(forged, forged_size, parsed) != 0 && strstr(dl_error(), "signature"));
    free(forged);

    /* Members out of order are refused even when correctly signed. */
    struct dl_group *swapped = calloc(1, sizeof *swapped);
    *swapped = *g;
    swapped->members[0] = g->members[1];
    swapped->members[1] = g->members[0];
    swapped->members[0].part_offset = 0;
    swapped->members[1].part_offset = swapped->members[0].part_elems;
    if (g->leader == 0) swapped->leader = 1;
    else if (g->leader == 1) swapped->leader = 0;
    uint8_t *bad = dl_group_sign(swapped, leader, &forged_size);
    CHECK(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "order"));
    free(bad);

    /* A client that aggregates, parts that do not tile, an aux with weight. */
    *swapped = *g;
    for (size_t i = 0; i < g->n; i++)
        if (swapped->members[i].role == DL_MEMBER_CLIENT) {
            swapped->members[i].part_elems = 1;
            break;
        }
    bad = dl_group_sign(swapped, leader, &forged_size);
    CHECK(dl_group_parse(bad, forged_size, parsed) != 0);
    free(bad);
    *swapped = *g;
    size_t grower = 0;
    while (g->members[grower].role == DL_MEMBER_CLIENT) grower++;
    swapped->members[grower].part_elems += 1;
    bad = dl_group_sign(swapped, leader, &forged_size);
    CHECK(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "tile"));
    free(bad);
    /* Parts whose sizes still sum to the length, but one of them moved by
     * 10 elements: a gap before it and an overlap with the next (or the
     * other way round). Two aggregators would reduce the overlap and nobody
     * the gap; only the offsets show it. */
    size_t aggs[DL_AVG_MAX_MEMBERS], num_aggs = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->members[i].part_elems) aggs[num_aggs++] = i;
    CHECK(num_aggs >= 3);
    for (int shift = -10; shift <= 10 && num_aggs >= 3; shift += 20) {
        *swapped = *g;
        struct dl_group_member *moved = &swapped->members[aggs[1]];
        moved->part_offset = (uint64_t)((int64_t)moved->part_offset + shift);
        bad = dl_group_sign(swapped, leader, &forged_size);
        CHECK_MSG(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "tile"),
                  "a part moved by %d elements was accepted", shift);
        free(bad);
    }
    *swapped = *g;
    swapped->members[g->leader].weight = 3; /* the aux member */
    bad = dl_group_sign(swapped, leader, &forged_size);
    CHECK(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "weight"));
    free(bad);
    /* A key that does not belong to the peer id next to it. */
    *swapped = *g;
    swapped->members[g->leader == 0 ? 1 : 0].pk[0] ^= 1;
    bad = dl_group_sign(swapped, leader, &forged_size);
    CHECK(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "does not belong"));
    free(bad);

    /* Sorting refuses duplicates and more than 256 members. */
    *swapped = *g;
    swapped->members[1] = swapped->members[0];
    CHECK(dl_group_sort(swapped, dl_net_peer_id(leader)) != 0 && strstr(dl_error(), "twice"));
    swapped->n = DL_AVG_MAX_MEMBERS + 1;
    CHECK(dl_group_sort(swapped, dl_net_peer_id(leader)) != 0 && strstr(dl_error(), "256"));

    /* Bounded claims: the share cap holds in the parser whatever signed the
     * record. Four members able to aggregate: at most 2 / 5 of 1000. */
    *swapped = *g;
    {
        size_t first = 0, second;
        while (swapped->members[first].role == DL_MEMBER_CLIENT) first++;
        second = first + 1;
        while (swapped->members[second].role == DL_MEMBER_CLIENT) second++;
        swapped->members[first].part_elems = 402; /* 250 + 152: above 400 + 1 */
        swapped->members[second].part_elems = 98;
        uint64_t at = 0;
        for (size_t i = 0; i < swapped->n; i++) {
            swapped->members[i].part_offset = at;
            at += swapped->members[i].part_elems;
        }
        bad = dl_group_sign(swapped, leader, &forged_size);
        CHECK_MSG(dl_group_parse(bad, forged_size, parsed) != 0 && strstr(dl_error(), "cap"),
                  "a part above the share cap: %s", dl_error());
        free(bad);
    }
    /* The plan: recomputed by every member from the record's bandwidths
     * and roles. One declaring 1e6 Mbit/s is capped at 4 x the median and
     * aggregates no more than the cap; a leader that writes the declared
     * bandwidth, or other parts, is refused. */
    *swapped = *g;
    for (size_t i = 0; i < swapped->n; i++) swapped->members[i].bandwidth_mbit = 100;
    size_t liar = 0;
    while (swapped->members[liar].role == DL_MEMBER_CLIENT) liar++;
    swapped->members[liar].bandwidth_mbit = 1e6;
    CHECK_OK(dl_group_plan(swapped));
    CHECK_MSG(swapped->members[liar].bandwidth_mbit == 400 && swapped->members[liar].part_elems <= 401,
              "the liar: %g Mbit/s, %llu elements", swapped->members[liar].bandwidth_mbit,
              (unsigned long long)swapped->members[liar].part_elems);
    *parsed = *swapped;
    CHECK_OK(dl_group_check_plan(parsed));
    CHECK(parsed->lp_bound_s > 0);
    *parsed = *swapped;
    parsed->members[liar].bandwidth_mbit = 1e6;
    CHECK(dl_group_check_plan(parsed) != 0 && strstr(dl_error(), "median"));
    *parsed = *swapped;
    size_t next = liar + 1;
    while (parsed->members[next].role == DL_MEMBER_CLIENT) next++;
    parsed->members[liar].part_elems += 1;
    parsed->members[next].part_elems -= 1;
    CHECK(dl_group_check_plan(parsed) != 0 && strstr(dl_error(), "give"));

    /* Leader-chosen settings must be the run's own. */
    struct dl_avg_options run;
    dl_avg_options_default(&run);
    run.compression = g->codec;
    run.stall_s = g->stall_s;
    run.aggregation = g->aggregation;
    run.clip_tau = g->clip_tau;
    run.clip_iterations = g->clip_iterations;
    CHECK_OK(dl_group_check_settings(g, &run));
    struct dl_avg_options other_run = run;
    other_run.aggregation = DL_AGG_MEAN;
    CHECK(dl_group_check_settings(g, &other_run) != 0 && strstr(dl_error(), "aggregation"));
    other_run = run;
    other_run.stall_s = 2.0;
    CHECK(dl_group_check_settings(g, &other_run) != 0 && strstr(dl_error(), "stall"));
    other_run = run;
    other_run.clip_tau = 0.5;
    CHECK(dl_group_check_settings(g, &other_run) != 0 && strstr(dl_error(), "tau"));
    other_run = run;
    other_run.clip_iterations = 5;
    CHECK(dl_group_check_settings(g, &other_run) != 0 && strstr(dl_error(), "iterations"));
    other_run = run;
    other_run.compression = DL_CODEC_NONE;
    CHECK(dl_group_check_settings(g, &other_run) != 0 && strstr(dl_error(), "codec"));

    free(rec);
    free(swapped);
    free(g);
    free(parsed);
    dl_net_stop(leader);
    dl_net_stop(other);
    return dl_test_finish("collab group record");
}
