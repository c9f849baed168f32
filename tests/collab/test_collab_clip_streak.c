/* Clipped streaks (src/collab/bans.c): a member clipped in
 * consecutive centered-clip rounds is banned for the run once the streak
 * reaches clip_ban_rounds; a round in which it is seen and not clipped
 * resets the streak; a round in which it is not seen changes nothing; mean
 * rounds do not count. A refused member is dropped from the swarm view the
 * step loop reads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/bytes.h"
#include "collab/collab_internal.h"
#include "collab/round.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void round_of(struct dl_round *r, int aggregation, bool seen, bool clipped) {
    r->g.aggregation = aggregation;
    r->reduced_from[1] = seen;
    r->clipped[1] = seen && clipped;
    r->reduced_from[2] = true; /* member 2 is always seen, never clipped */
    r->clipped[2] = false;
}

int main(void) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "clip-streak-test";
    cfg.listen = "";
    cfg.use_dht = false;
    dl_net *net = NULL;
    CHECK_OK(dl_net_start(&cfg, &net));
    if (!net) return 1;
    struct dl_collab_config ccfg;
    dl_collab_config_default(&ccfg);
    CHECK(ccfg.clip_warn_rounds == 3 && ccfg.clip_ban_rounds == 10);
    ccfg.clip_warn_rounds = 1;
    ccfg.clip_ban_rounds = 3;
    dl_collab *c = NULL;
    CHECK_OK(dl_collab_start(net, &ccfg, &c));
    if (!c) return 1;

    struct dl_avg_result ignored = {0};
    struct dl_round *r = calloc(1, sizeof *r);
    bool reduced_from[3] = {false}, clipped[3] = {false};
    r->has_group = true;
    r->g.n = 3;
    r->me = 0;
    r->reduced_from = reduced_from;
    r->clipped = clipped;
    const char *ids[3] = {"00000000000000000000000000000000", "11111111111111111111111111111111",
                          "22222222222222222222222222222222"};
    for (int i = 0; i < 3; i++) snprintf(r->g.members[i].peer_id, sizeof r->g.members[i].peer_id, "%s", ids[i]);

    /* clipped, clipped, not seen (no change), mean round (no change), then
     * seen unclipped: the streak restarts */
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r, &ignored);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r, &ignored);
    round_of(r, DL_AGG_CENTERED_CLIP, false, false);
    dl_collab_count_clipped(c, r, &ignored);
    round_of(r, DL_AGG_MEAN, true, true);
    dl_collab_count_clipped(c, r, &ignored);
    CHECK(!dl_bans_is_banned(&c->bans, ids[1]));
    round_of(r, DL_AGG_CENTERED_CLIP, true, false);
    dl_collab_count_clipped(c, r, &ignored);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r, &ignored);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r, &ignored);
    CHECK_MSG(!dl_bans_is_banned(&c->bans, ids[1]), "banned after 2 consecutive clipped rounds (limit 3)");
    CHECK_MSG(ignored.clip_refused == 0, "a round that banned nobody reports %u refused", ignored.clip_refused);
    /* the third in a row: banned, for the run (far beyond ban_s), and the
     * round's result says so (the training loop restores its moments on it) */
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    struct dl_avg_result third = {0};
    dl_collab_count_clipped(c, r, &third);
    CHECK(dl_bans_is_banned(&c->bans, ids[1]));
    CHECK_MSG(third.clip_refused == 1, "the banning round reports %u refused, expected 1", third.clip_refused);
    CHECK(!dl_bans_is_banned(&c->bans, ids[2]) && !dl_bans_is_banned(&c->bans, ids[0]));
    bool forever = dl_bans_until(&c->bans, ids[1]) > dl_now() + 1e9;
    CHECK_MSG(forever, "the ban is not for the run");
    /* a later short ban (e.g. a NaN) does not shorten it */
    dl_bans_add(&c->bans, ids[1], "test");
    forever = dl_bans_until(&c->bans, ids[1]) > dl_now() + 1e9;
    CHECK(forever);

    /* A refused member leaves the step loop's view of the swarm: its
     * record no longer counts toward the reference hash or the epoch
     * (collab/bans.h, dl_bans_drop_from_view). */
    struct dl_swarm_peer peers[3];
    memset(peers, 0, sizeof peers);
    for (int i = 0; i < 3; i++) snprintf(peers[i].peer_id, sizeof peers[i].peer_id, "%s", ids[i]);
    peers[0].is_self = true;
    struct dl_swarm_view view = {.peers = peers, .num_peers = 3};
    dl_collab_drop_gone(c, &view);
    CHECK_MSG(view.num_peers == 2 && !strcmp(view.peers[0].peer_id, ids[0]) && !strcmp(view.peers[1].peer_id, ids[2]),
              "the view still holds the refused member (%zu peers)", view.num_peers);

    /* ...and we join no group that names it (the others' messages come,
     * its would not): as ourselves, a group record naming us is fine */
    const char *named = dl_bans_first_in_group(&c->bans, &r->g, 0);
    CHECK_MSG(named && !strcmp(named, ids[1]), "a group naming the refused member is taken");
    CHECK(dl_bans_first_in_group(&c->bans, &r->g, 1) == NULL);

    /* A member that receives judges from the results it applied: the clip
     * weights they commit to, the same at every member that applied them,
     * whatever it reduced itself. Three parts of one fp32 element; member
     * 2 is clipped (weight < 1) in two of the three results that name it
     * (more than half: clipped), member 0 in one of two (not). What the
     * member reduced itself says the opposite and must not count. */
    struct dl_round *q = calloc(1, sizeof *q);
    uint8_t *results[3] = {NULL};
    size_t first_chunk[4] = {0, 1, 2, 3};
    uint8_t *store[3];
    bool own_reduced[3] = {true, true, true}, own_clipped[3] = {true, false, false};
    q->has_group = true;
    q->i_receive = true;
    q->status = DL_AVG_OK;
    q->g.n = 3;
    q->g.codec = DL_CODEC_NONE;
    q->g.aggregation = DL_AGG_CENTERED_CLIP;
    q->me = 1;
    q->first_chunk = first_chunk;
    q->num_chunks = 3;
    q->store = store;
    q->reduced_from = own_reduced;
    q->clipped = own_clipped;
    const char *qids[3] = {"33333333333333333333333333333333", "44444444444444444444444444444444",
                           "55555555555555555555555555555555"};
    for (int i = 0; i < 3; i++) {
        snprintf(q->g.members[i].peer_id, sizeof q->g.members[i].peer_id, "%s", qids[i]);
        q->g.members[i].part_offset = (uint64_t)i;
        q->g.members[i].part_elems = 1;
    }
    /* per part: the contributors (mask order) and their clip weights */
    const int contributors[3][2] = {{1, 2}, {0, 2}, {0, 2}};
    const double clip[3][2] = {{1.0, 0.25}, {0.5, 1.0}, {1.0, 0.125}};
    size_t size = DL_AVG_RESULT_HEADER + 4 + DL_AVG_COMMIT_HEAD + 2 * DL_AVG_COMMIT_ENTRY;
    for (int p = 0; p < 3; p++) {
        results[p] = calloc(1, size);
        store[p] = results[p];
        for (int i = 0; i < 2; i++) {
            int j = contributors[p][i];
            results[p][28 + j / 8] |= (uint8_t)(1u << (j % 8));
            uint8_t *entry = results[p] + DL_AVG_RESULT_HEADER + 4 + DL_AVG_COMMIT_HEAD + DL_AVG_COMMIT_ENTRY * i;
            dl_put_f64(entry + 32, clip[p][i]);
        }
    }
    bool seen[3], judged[3];
    dl_round_clip_verdicts(q, seen, judged);
    CHECK(seen[0] && seen[1] && seen[2]);
    CHECK_MSG(!judged[0] && !judged[1] && judged[2], "clipped verdicts %d %d %d, expected 0 0 1", judged[0],
              judged[1], judged[2]);
    struct dl_avg_result qres[3];
    memset(qres, 0, sizeof qres);
    for (int round = 0; round < 3; round++) dl_collab_count_clipped(c, q, &qres[round]);
    CHECK_MSG(dl_bans_is_banned(&c->bans, qids[2]), "member 2, clipped in the results of 3 rounds, is not banned");
    CHECK_MSG(qres[0].clip_judged[0] == 4 && qres[2].clip_judged[0] == 4,
              "the results' verdicts reach the round's result as %#x, expected member 2 alone (0x4)",
              qres[0].clip_judged[0]);
    CHECK_MSG(qres[0].clip_refused == 0 && qres[1].clip_refused == 0 && qres[2].clip_refused == 1,
              "refused per round %u %u %u, expected 0 0 1", qres[0].clip_refused, qres[1].clip_refused,
              qres[2].clip_refused);
    CHECK_MSG(!dl_bans_is_banned(&c->bans, qids[0]), "member 0, clipped in our own reduction only, is banned");
    /* a round not applied counts for nothing */
    q->status = DL_AVG_UNSURE;
    snprintf(q->g.members[0].peer_id, sizeof q->g.members[0].peer_id, "%s", "66666666666666666666666666666666");
    snprintf(q->g.members[2].peer_id, sizeof q->g.members[2].peer_id, "%s", "77777777777777777777777777777777");
    memset(qres, 0, sizeof qres);
    for (int round = 0; round < 3; round++) dl_collab_count_clipped(c, q, &qres[round]);
    CHECK_MSG(qres[2].clip_refused == 0 && qres[2].clip_judged[0] == 0, "a round not applied reports verdicts");
    CHECK_MSG(!dl_bans_is_banned(&c->bans, "77777777777777777777777777777777"),
              "clipped in rounds that were not applied, and banned");
    for (int p = 0; p < 3; p++) free(results[p]);
    free(q);

    /* A peer that leaves a spot check's chunk undisclosed: refused for
     * ban_s the first time, for the run the second. */
    const char *silent = "88888888888888888888888888888888", *other = "99999999999999999999999999999999";
    dl_bans_add_silent(&c->bans, silent, "did not disclose");
    double first = dl_bans_until(&c->bans, silent);
    CHECK_MSG(first > 0 && isfinite(first), "a first silence refuses until %g, not for ban_s", first);
    dl_bans_add_silent(&c->bans, other, "did not disclose");
    dl_bans_add_silent(&c->bans, silent, "did not disclose");
    CHECK_MSG(isinf(dl_bans_until(&c->bans, silent)), "a second silence is not refused for the run");
    CHECK_MSG(isfinite(dl_bans_until(&c->bans, other)), "another peer's first silence counted as its second");

    free(r);
    dl_collab_stop(c);
    dl_net_stop(net);
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
