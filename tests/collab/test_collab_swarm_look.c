/* The step loop's reading of the swarm (dl_swarm_look_at): which epoch it
 * follows and which param hash it takes for the reference, from hand-made
 * views. Colluding identities are the point (docs/collab_training.md, "The
 * epoch and the reference state"): a pair that claims an epoch ahead, or
 * another hash at ours, must neither move an honest peer's epoch nor become
 * the state it downloads or heals to. The epoch_unbacked flags are set as
 * the swarm view computes them (net/swarm.c; its own cases are in
 * tests/net/test_net_codec.c). */
#include <string.h>

#include "collab/bans.h"
#include "collab/train_decide.h"
#include "collab/train_sync.h"
#include "dl_test.h"

#define MAX_PEERS 8

struct view {
    struct dl_swarm_peer peers[MAX_PEERS];
    struct dl_swarm_view v;
};

static void view_init(struct view *w) {
    memset(w, 0, sizeof *w);
    w->v.peers = w->peers;
}

/* A peer with id `id` (hex, sorted order is the caller's), at `epoch`,
 * holding the hash whose bytes are all `hash` (0: none). */
static struct dl_swarm_peer *peer(struct view *w, const char *id, uint64_t epoch, uint8_t hash, bool unbacked) {
    struct dl_swarm_peer *p = &w->peers[w->v.num_peers++];
    snprintf(p->peer_id, sizeof p->peer_id, "%s", id);
    p->epoch = epoch;
    p->has_param_hash = hash != 0;
    memset(p->param_hash, hash, sizeof p->param_hash);
    p->epoch_unbacked = unbacked;
    p->time = 1000;
    return p;
}

static void self_at(struct view *w, const char *id, uint64_t epoch, uint8_t hash) {
    peer(w, id, epoch, hash, false)->is_self = true;
}

static bool ref_is(const struct dl_swarm_look *l, uint8_t hash) {
    uint8_t want[32];
    memset(want, hash, sizeof want);
    return l->has_ref && !memcmp(l->ref_hash, want, 32);
}

static const uint8_t HONEST = 0xa1, LIAR = 0x5b, OLD = 0x77;

/* The reference is the majority's hash, not the hash of the first (lowest
 * id) holder: a peer whose id sorts first holds another hash alone. */
static void test_reference_is_the_majority(void) {
    uint8_t mine[32];
    memset(mine, HONEST, sizeof mine);
    struct view w;
    view_init(&w);
    peer(&w, "10", 5, LIAR, false);
    peer(&w, "20", 5, HONEST, false);
    peer(&w, "30", 5, HONEST, false);
    self_at(&w, "40", 5, HONEST);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 5, mine, 0, 1000, NULL, &l);
    CHECK_MSG(ref_is(&l, HONEST), "the reference is not the hash three of four hold");
    CHECK(l.ref_holders == 3 && l.hashes_at_ref == 4);
    CHECK_MSG(!l.i_disagree, "we hold the majority's hash and still disagree");
    CHECK(l.num_donors == 2 && !strcmp(l.donors[0], "20") && !strcmp(l.donors[1], "30"));
    /* the lone holder sees that it disagrees with three */
    memset(mine, LIAR, sizeof mine);
    view_init(&w);
    self_at(&w, "10", 5, LIAR);
    peer(&w, "20", 5, HONEST, false);
    peer(&w, "30", 5, HONEST, false);
    peer(&w, "40", 5, HONEST, false);
    dl_swarm_look_at(&w.v, 5, mine, 0, 1000, NULL, &l);
    CHECK(ref_is(&l, HONEST) && l.i_disagree && l.my_holders == 1 && l.ref_holders == 3);
}

/* A pair of liars at our epoch with ids below ours: against us and one
 * honest peer it is a tie, which names no reference (the lowest id used to
 * win it); against us and two honest peers it is a minority. */
static void test_pair_at_our_epoch(void) {
    uint8_t mine[32];
    memset(mine, HONEST, sizeof mine);
    struct view w;
    view_init(&w);
    peer(&w, "01", 5, LIAR, false);
    peer(&w, "02", 5, LIAR, false);
    peer(&w, "50", 5, HONEST, false);
    self_at(&w, "60", 5, HONEST);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 5, mine, 0, 1000, NULL, &l);
    CHECK_MSG(!l.has_ref, "a tie named a reference");
    CHECK_MSG(!l.i_disagree, "a tie made us disagree");
    CHECK(l.num_donors == 0);
    peer(&w, "70", 5, HONEST, false);
    dl_swarm_look_at(&w.v, 5, mine, 0, 1000, NULL, &l);
    CHECK(ref_is(&l, HONEST) && !l.i_disagree && l.ref_holders == 3 && l.hashes_at_ref == 5);
}

/* A pair claiming an epoch far ahead, beside two honest peers at ours:
 * two of four others are no majority (the view flags them unbacked), so we
 * neither catch up to them nor take their hash for the reference. */
static void test_pair_ahead(void) {
    uint8_t mine[32];
    memset(mine, HONEST, sizeof mine);
    struct view w;
    view_init(&w);
    peer(&w, "01", 25, LIAR, true);
    peer(&w, "02", 25, LIAR, true);
    peer(&w, "50", 5, HONEST, false);
    peer(&w, "60", 5, HONEST, false);
    self_at(&w, "70", 5, HONEST);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 5, mine, 0, 1000, NULL, &l);
    CHECK_MSG(l.ahead_epoch == 0, "followed the pair to epoch %llu", (unsigned long long)l.ahead_epoch);
    CHECK(l.ref_epoch == 5 && ref_is(&l, HONEST) && !l.i_disagree);
    for (size_t i = 0; i < l.num_donors; i++) CHECK(strcmp(l.donors[i], "01") && strcmp(l.donors[i], "02"));
}

/* Catching up: the epoch a majority reached, its majority hash, and its
 * holders as donors; the same pair copying that epoch with its own hash
 * makes a tie there, and then nobody is a donor (no download of their state). */
static void test_catch_up(void) {
    uint8_t mine[32];
    memset(mine, OLD, sizeof mine);
    struct view w;
    view_init(&w);
    peer(&w, "01", 25, LIAR, true);
    peer(&w, "50", 5, HONEST, false);
    peer(&w, "60", 5, HONEST, false);
    self_at(&w, "70", 4, OLD);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, NULL, &l);
    CHECK(l.ahead_epoch == 5 && l.ref_epoch == 5 && ref_is(&l, HONEST));
    CHECK(l.num_donors == 2 && !strcmp(l.donors[0], "50") && !strcmp(l.donors[1], "60"));
    view_init(&w);
    peer(&w, "01", 5, LIAR, false);
    peer(&w, "02", 5, LIAR, false);
    peer(&w, "50", 5, HONEST, false);
    peer(&w, "60", 5, HONEST, false);
    self_at(&w, "70", 4, OLD);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, NULL, &l);
    CHECK(l.ahead_epoch == 5);
    CHECK_MSG(!l.has_ref && l.num_donors == 0, "a tie at the epoch ahead gave a reference and %zu donors",
              l.num_donors);
    /* a newcomer without a state follows its others as before */
    view_init(&w);
    peer(&w, "50", 7, HONEST, false);
    self_at(&w, "70", 0, 0);
    dl_swarm_look_at(&w.v, 0, NULL, 0, 1000, NULL, &l);
    CHECK(l.ahead_epoch == 7 && ref_is(&l, HONEST) && l.num_donors == 1);
}

/* Our round at epoch 4 failed, in a group (its record verified) with
 * "50", "60" and "65", most of the swarm. "50" and "60" went on to 5
 * without us; "65", "80" and "90" stay at 4. Two of five others are no
 * majority of the view, but two of the three other members of our group
 * are: we follow them. A pair copying their epoch with its own hash ties
 * the head count there; among the members of our group the honest hash is
 * the majority. A group record of another epoch, none, or one of a group
 * that is not most of the swarm (a leader's pair of liars and us) changes
 * nothing. */
static struct dl_group_evidence evidence;

static void group_of(uint64_t epoch, const char *a, const char *b, const char *c) {
    evidence.epoch = epoch;
    evidence.n = 0;
    const char *ids[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (ids[i]) snprintf(evidence.members[evidence.n++], DL_PEER_ID_HEX, "%s", ids[i]);
}

static void test_group_evidence(void) {
    uint8_t mine[32];
    memset(mine, OLD, sizeof mine);
    group_of(4, "50", "60", "65");
    struct view w;
    view_init(&w);
    peer(&w, "50", 5, HONEST, true);
    peer(&w, "60", 5, HONEST, true);
    peer(&w, "65", 4, OLD, false);
    self_at(&w, "70", 4, OLD);
    peer(&w, "80", 4, OLD, false);
    peer(&w, "90", 4, OLD, false);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, NULL, &l);
    CHECK(l.ahead_epoch == 0 && !l.i_disagree);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK_MSG(l.ahead_epoch == 5, "the group we were in is at 5, we follow %llu", (unsigned long long)l.ahead_epoch);
    CHECK(ref_is(&l, HONEST) && l.num_donors == 2);
    evidence.epoch = 3;
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK_MSG(l.ahead_epoch == 0, "a group record of another epoch moved us");

    /* the pair at the members' epoch with its own hash: a tie in the view */
    group_of(4, "50", "60", NULL);
    view_init(&w);
    peer(&w, "01", 5, LIAR, false);
    peer(&w, "02", 5, LIAR, false);
    peer(&w, "50", 5, HONEST, false);
    peer(&w, "60", 5, HONEST, false);
    peer(&w, "65", 4, OLD, false);
    self_at(&w, "70", 4, OLD);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, NULL, &l);
    CHECK(l.ahead_epoch == 5 && !l.has_ref);
    group_of(4, "50", "60", "65");
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK_MSG(ref_is(&l, HONEST), "the group's members did not settle the tie");
    CHECK(l.num_donors == 2 && !strcmp(l.donors[0], "50") && !strcmp(l.donors[1], "60"));

    /* a group of a pair of liars and us, three honest peers outside it */
    group_of(4, "01", "02", NULL);
    view_init(&w);
    peer(&w, "01", 5, LIAR, true);
    peer(&w, "02", 5, LIAR, true);
    peer(&w, "50", 4, OLD, false);
    peer(&w, "60", 4, OLD, false);
    peer(&w, "65", 4, OLD, false);
    self_at(&w, "70", 4, OLD);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK_MSG(l.ahead_epoch == 0, "a small group of liars moved us to %llu", (unsigned long long)l.ahead_epoch);

    /* only one of the three members went on: no majority of the group */
    group_of(4, "50", "60", "65");
    view_init(&w);
    peer(&w, "50", 5, HONEST, true);
    peer(&w, "60", 4, OLD, false);
    peer(&w, "65", 4, OLD, false);
    self_at(&w, "70", 4, OLD);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK(l.ahead_epoch == 0);
}

/* A pair of liars that joined our group at epoch 4 (most of the swarm:
 * it and one honest peer) and made the round fail, then claim 25 with a
 * hash of their own: the group's round makes epoch 5, no further. Nobody
 * holds a state at 5, so the group proves nothing and we stay, keeping our
 * reference (the group's majority would have made the pair our donors). */
static void test_group_makes_one_epoch(void) {
    uint8_t mine[32];
    memset(mine, OLD, sizeof mine);
    group_of(4, "01", "02", "50");
    struct view w;
    view_init(&w);
    peer(&w, "01", 25, LIAR, true);
    peer(&w, "02", 25, LIAR, true);
    peer(&w, "50", 4, OLD, false);
    self_at(&w, "70", 4, OLD);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK_MSG(l.ahead_epoch == 0, "a group of epoch 4 moved us to %llu", (unsigned long long)l.ahead_epoch);
    CHECK(!ref_is(&l, LIAR) && ref_is(&l, OLD));
    for (size_t i = 0; i < l.num_donors; i++) CHECK(strcmp(l.donors[i], "01") && strcmp(l.donors[i], "02"));
    /* the honest member completed the round: 5 is where we go, its hash the reference */
    view_init(&w);
    peer(&w, "01", 25, LIAR, true);
    peer(&w, "02", 25, LIAR, true);
    peer(&w, "50", 5, HONEST, true);
    self_at(&w, "70", 4, OLD);
    dl_swarm_look_at(&w.v, 4, mine, 0, 1000, &evidence, &l);
    CHECK(l.ahead_epoch == 5 && ref_is(&l, HONEST) && l.num_donors == 1 && !strcmp(l.donors[0], "50"));
}

/* Two honest sides of one epoch (3 and 2 peers, a round failed for some)
 * beside two attackers we refused, each with a hash of its own: counted,
 * the attackers leave the larger side at 3 of 7 holders, no majority, and
 * the sides never heal (seen in bench/attack_curve.sh's attacked swarm:
 * two honest halves training apart to the end). Refused peers are dropped
 * from the view (dl_collab_drop_gone does it for the step loop): 3 of 5,
 * and we, on the smaller side, heal to it. */
static const uint8_t OTHER = 0x3c;

/* The swarm of the refused-peer cases: attackers 10 and 60 (a hash each) at
 * `attackers_at`, an honest side of three (20, 30, 40) at `side_at`, and
 * the side of two, 50 and us (70), at 9 holding OTHER. */
static void split_view(struct view *w, uint64_t attackers_at, uint64_t side_at, bool side_unbacked) {
    view_init(w);
    peer(w, "10", attackers_at, 0xe1, false);
    peer(w, "20", side_at, HONEST, side_unbacked);
    peer(w, "30", side_at, HONEST, side_unbacked);
    peer(w, "40", side_at, HONEST, side_unbacked);
    peer(w, "50", 9, OTHER, false);
    peer(w, "60", attackers_at, 0xe2, false);
    self_at(w, "70", 9, OTHER);
}

static void test_refused_peers_do_not_count(void) {
    uint8_t mine[32];
    memset(mine, OTHER, sizeof mine);
    struct view w;
    split_view(&w, 9, 9, false);
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 9, mine, 0, 1000, NULL, &l);
    CHECK_MSG(!l.has_ref && !l.i_disagree, "3 of 7 named a reference");
    struct dl_bans bans;
    dl_bans_init(&bans, 60, 0, 3);
    dl_bans_add_for_run(&bans, "10", "test: clipped in 3 rounds");
    dl_bans_add(&bans, "60", "test: a chunk that does not decode");
    dl_bans_add(&bans, "70", "test: we never drop ourselves");
    CHECK(dl_bans_drop_from_view(&bans, &w.v) == 2);
    CHECK(w.v.num_peers == 5);
    dl_swarm_look_at(&w.v, 9, mine, 0, 1000, NULL, &l);
    CHECK_MSG(ref_is(&l, HONEST) && l.ref_holders == 3 && l.hashes_at_ref == 5, "refused peers still count");
    CHECK_MSG(l.i_disagree && dl_loop_heal_due(&l), "the smaller side does not heal");
    for (size_t i = 0; i < l.num_donors; i++) CHECK(strcmp(l.donors[i], "10") && strcmp(l.donors[i], "60"));
    dl_bans_destroy(&bans);
}

/* The same attackers, one step behind the honest side of 3 that moved on:
 * the swarm view counted them (3 of 6 other voters at 10, no majority) and
 * flagged the side of 3 unbacked, so we (on the side of 2, at 9) would
 * neither follow it nor heal. Without the refused peers' votes, 3 of 4
 * others and us (a strict majority of 5) back epoch 10: we take its state. */
static void test_refused_peers_do_not_vote(void) {
    uint8_t mine[32];
    memset(mine, OTHER, sizeof mine);
    struct view w;
    split_view(&w, 8, 10, true);
    w.v.global_epoch = 9;
    struct dl_swarm_look l;
    dl_swarm_look_at(&w.v, 9, mine, 0, 1000, NULL, &l);
    CHECK_MSG(l.ahead_epoch == 0, "an unbacked epoch was followed");
    /* backing again with nobody dropped changes nothing */
    dl_swarm_view_back_epochs(&w.v);
    CHECK(w.peers[1].epoch_unbacked && w.v.global_epoch == 9);
    struct dl_bans bans;
    dl_bans_init(&bans, 60, 0, 3);
    dl_bans_add_for_run(&bans, "10", "test: clipped in 3 rounds");
    dl_bans_add_for_run(&bans, "60", "test: clipped in 3 rounds");
    CHECK(dl_bans_drop_from_view(&bans, &w.v) == 2); /* ahead of us, still present */
    dl_swarm_view_back_epochs(&w.v);
    CHECK_MSG(w.v.global_epoch == 10, "global epoch %llu, not 10", (unsigned long long)w.v.global_epoch);
    dl_swarm_look_at(&w.v, 9, mine, 0, 1000, NULL, &l);
    CHECK_MSG(l.ahead_epoch == 10 && ref_is(&l, HONEST) && l.num_donors == 3, "the side ahead is not followed");
    /* two of the three alone are no majority of 4 (us, 50 and them) plus
     * one: a pair ahead still moves nothing */
    view_init(&w);
    peer(&w, "20", 10, LIAR, true);
    peer(&w, "30", 10, LIAR, true);
    peer(&w, "50", 9, OTHER, false);
    self_at(&w, "70", 9, OTHER);
    w.v.global_epoch = 9;
    dl_swarm_view_back_epochs(&w.v);
    CHECK(w.peers[0].epoch_unbacked && w.peers[1].epoch_unbacked && w.v.global_epoch == 9);
    dl_bans_destroy(&bans);
}

int main(void) {
    test_refused_peers_do_not_count();
    test_refused_peers_do_not_vote();
    test_reference_is_the_majority();
    test_pair_at_our_epoch();
    test_pair_ahead();
    test_catch_up();
    test_group_evidence();
    test_group_makes_one_epoch();
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
