/* Clipped streaks (src/collab/bans.c): a member clipped in
 * consecutive centered-clip rounds is banned for the run once the streak
 * reaches clip_ban_rounds; a round in which it is seen and not clipped
 * resets the streak; a round in which it is not seen changes nothing; mean
 * rounds do not count. A refused member is dropped from the swarm view the
 * step loop reads. */
#include <stdlib.h>
#include <string.h>

#include "collab/collab_internal.h"
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
    dl_collab_count_clipped(c, r);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r);
    round_of(r, DL_AGG_CENTERED_CLIP, false, false);
    dl_collab_count_clipped(c, r);
    round_of(r, DL_AGG_MEAN, true, true);
    dl_collab_count_clipped(c, r);
    CHECK(!dl_bans_is_banned(&c->bans, ids[1]));
    round_of(r, DL_AGG_CENTERED_CLIP, true, false);
    dl_collab_count_clipped(c, r);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r);
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r);
    CHECK_MSG(!dl_bans_is_banned(&c->bans, ids[1]), "banned after 2 consecutive clipped rounds (limit 3)");
    /* the third in a row: banned, for the run (far beyond ban_s) */
    round_of(r, DL_AGG_CENTERED_CLIP, true, true);
    dl_collab_count_clipped(c, r);
    CHECK(dl_bans_is_banned(&c->bans, ids[1]));
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

    free(r);
    dl_collab_stop(c);
    dl_net_stop(net);
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
