/* The step loop's decisions, one table per rule: when a peer is ready for
 * the round of its epoch, which round it runs, the lead and the start of
 * matchmaking ahead of the ETA, and when it downloads the swarm's state
 * (catching up, an aux peer's refresh, healing a disagreement). Each row
 * names its case; a failing row prints that name. */
#include <math.h>
#include <string.h>

#include "collab/train_decide.h"
#include "dl_test.h"

/* A trainer of an exact-mode run: the collective batch 4096, a 60 s round. */
static struct dl_loop_policy trainer(void) {
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    struct dl_loop_policy p;
    dl_loop_policy_init(&p, &o, true);
    return p;
}

static struct dl_loop_policy aux_peer(int64_t state_every) {
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    o.state_every = state_every;
    struct dl_loop_policy p;
    dl_loop_policy_init(&p, &o, false);
    return p;
}

/* Epoch 5, 100 samples of ours, a micro-batch of 8 samples in 0.5 s, at
 * dl_now() = 100 with nobody to wait for. */
static struct dl_loop_counters counters(void) {
    return (struct dl_loop_counters){.epoch = 5, .local_samples = 100, .micro_since_round = 3, .micro_s = 0.5,
                                     .micro_samples = 8, .has_state = true, .last_state_epoch = 5,
                                     .early_refused_epoch = -1, .now = 100, .prev_wait_until = 0};
}

/* Three peers at our epoch, 4000 of the 4096 samples, 100 samples/s. */
static struct dl_swarm_look look3(void) {
    struct dl_swarm_look l;
    memset(&l, 0, sizeof l);
    l.peers = 3;
    l.at_epoch = 3;
    l.collective = 4000;
    l.samples_per_second = 100;
    l.ref_epoch = 5;
    l.has_ref = true;
    l.ref_holders = 3;
    l.hashes_at_ref = 3;
    l.my_holders = 3;
    return l;
}

static void test_policy(void) {
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    struct dl_loop_policy p;
    dl_loop_policy_init(&p, &o, true);
    CHECK(!p.aux && !p.delayed && p.early_on && p.target_batch == 4096 && p.round_deadline_s == 60);
    o.delay_update = true;
    dl_loop_policy_init(&p, &o, true);
    CHECK_MSG(p.delayed && !p.early_on, "delayed update leaves no room for an early round");
    dl_loop_policy_init(&p, &o, false);
    CHECK_MSG(p.aux && !p.delayed && !p.early_on, "an aux peer runs plain rounds only");
}

static const char *readiness_name(enum dl_loop_readiness r) {
    return r == DL_LOOP_READY ? "ready" : r == DL_LOOP_WAIT_PREVIOUS ? "wait for the previous round" : "not ready";
}

static void test_ready(void) {
    struct row {
        const char *name;
        bool aux;
        int64_t local_batch, local_samples, micro_since_round;
        double collective;
        size_t at_previous;
        double prev_wait_until;
        enum dl_loop_readiness want;
    } rows[] = {
        {"collective reaches the target", false, 0, 100, 3, 4096, 0, 0, DL_LOOP_READY},
        {"collective one sample short", false, 0, 100, 3, 4095, 0, 0, DL_LOOP_NOT_READY},
        {"no samples of ours", false, 0, 0, 3, 5000, 0, 0, DL_LOOP_NOT_READY},
        {"no micro-batch since the last attempt", false, 0, 100, 0, 5000, 0, 0, DL_LOOP_NOT_READY},
        {"local batch reached, swarm short", false, 100, 100, 3, 10, 0, 0, DL_LOOP_READY},
        {"local batch one short, swarm past the target", false, 101, 100, 3, 5000, 0, 0, DL_LOOP_NOT_READY},
        {"peers finishing the previous round", false, 0, 100, 3, 4096, 2, 101, DL_LOOP_WAIT_PREVIOUS},
        {"previous round waited out", false, 0, 100, 3, 4096, 2, 100, DL_LOOP_READY},
        {"not ready: the previous round does not matter", false, 0, 100, 3, 10, 2, 101, DL_LOOP_NOT_READY},
        {"aux: the trainers reach the target", true, 0, 0, 1, 4096, 0, 0, DL_LOOP_READY},
        {"aux: the trainers short of the target", true, 0, 0, 1, 4000, 0, 0, DL_LOOP_NOT_READY},
        {"aux: before its first pass", true, 0, 0, 0, 4096, 0, 0, DL_LOOP_NOT_READY},
        {"aux waits for the previous round too", true, 0, 0, 1, 4096, 1, 100.5, DL_LOOP_WAIT_PREVIOUS},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *r = &rows[i];
        struct dl_loop_policy p = r->aux ? aux_peer(1) : trainer();
        p.local_batch = r->local_batch;
        struct dl_loop_counters c = counters();
        c.local_samples = r->local_samples;
        c.micro_since_round = r->micro_since_round;
        c.prev_wait_until = r->prev_wait_until;
        struct dl_swarm_look l = look3();
        l.collective = r->collective;
        l.at_previous = r->at_previous;
        enum dl_loop_readiness got = dl_loop_ready(&p, &c, &l);
        CHECK_MSG(got == r->want, "%s: %s, expected %s", r->name, readiness_name(got), readiness_name(r->want));
    }
}

static void test_round_kind(void) {
    struct row {
        const char *name;
        bool delayed, early_running, alone;
        enum dl_loop_round_kind want;
    } rows[] = {
        {"exact mode", false, false, false, DL_LOOP_ROUND_PLAIN},
        {"exact mode, an early round matchmaking", false, true, false, DL_LOOP_ROUND_HAND_OVER},
        {"exact mode alone", false, false, true, DL_LOOP_ROUND_PLAIN},
        {"delayed update", true, false, false, DL_LOOP_ROUND_DELAYED},
        {"delayed update alone", true, false, true, DL_LOOP_ROUND_PLAIN},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct dl_loop_policy p = trainer();
        p.delayed = rows[i].delayed;
        p.early_on = !rows[i].delayed;
        enum dl_loop_round_kind got = dl_loop_round_kind(&p, rows[i].early_running, rows[i].alone);
        CHECK_MSG(got == rows[i].want, "%s: round kind %d, expected %d", rows[i].name, (int)got, (int)rows[i].want);
    }

    struct {
        const char *name;
        int64_t local_batch;
        size_t min_peers, want;
    } members[] = {
        {"local batch and min peers", 64, 3, 3},
        {"local batch, one peer asked", 64, 1, 0},
        {"collective batch ignores min peers", 0, 3, 0},
    };
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        struct dl_loop_policy p = trainer();
        p.local_batch = members[i].local_batch;
        p.min_peers = members[i].min_peers;
        size_t got = dl_loop_expected_members(&p);
        CHECK_MSG(got == members[i].want, "%s: %zu expected members, expected %zu", members[i].name, got,
                  members[i].want);
    }
}

static void test_early_lead(void) {
    struct row {
        const char *name;
        double noted[12];
        size_t count;
        double want;
    } rows[] = {
        {"no round yet", {0}, 0, 1.5},
        {"one fast round: at least 1 s", {0.2}, 1, 1.0},
        {"one round", {2.0}, 1, 2.5},
        {"odd count: the middle one", {3, 1, 2}, 3, 2.5},
        {"even count: the mean of the middle two", {4, 1, 3, 2}, 4, 3.0},
        {"only the last 8 count", {100, 100, 1, 1, 1, 1, 1, 1, 1, 1}, 10, 1.5},
        {"past rounds roll out", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10, 7.0},
        {"negative and non-finite times are ignored", {-1, NAN, INFINITY, 2}, 4, 2.5},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct dl_mm_history h;
        memset(&h, 0, sizeof h);
        for (size_t k = 0; k < rows[i].count; k++) dl_mm_history_note(&h, rows[i].noted[k]);
        double got = dl_loop_early_lead(&h);
        CHECK_MSG(fabs(got - rows[i].want) < 1e-12, "%s: lead %.6f s, expected %.6f s", rows[i].name, got,
                  rows[i].want);
    }
    struct dl_mm_history h;
    memset(&h, 0, sizeof h);
    dl_mm_history_note(&h, -0.5);
    dl_mm_history_note(&h, NAN);
    CHECK_MSG(h.count == 0, "ignored times are not counted");
}

static void test_early_due(void) {
    /* The base case: eta = (4096 - 4000) / 100 = 0.96 s; reach = lead 1.5 +
     * one micro-batch 0.5 = 2 s (under 0.8 x stall_s = 0.8 x 10 s); our rate
     * 8 / 0.5 = 16 samples/s, so we expect 100 + 0.96 x 16 samples. */
    struct early_case {
        const char *name;
        bool early_on, early_running;
        int64_t refused, local_batch;
        size_t min_peers, peers, at_epoch, at_previous;
        double micro_s, collective, sps, deadline, lead, prev_wait_until;
        bool want;
        double want_estimate;
    } rows[] = {
        {"ETA within the lead and one micro-batch", true, false, -1, 0, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0,
         true, 100 + 0.96 * 16},
        {"ETA just past the reach", true, false, -1, 0, 0, 3, 3, 0, 0.5, 3895, 100, 60, 1.5, 0, false, 0},
        {"ETA exactly at the reach", true, false, -1, 0, 0, 3, 3, 0, 0.5, 3896, 100, 60, 1.5, 0, false, 0},
        {"a longer lead reaches further", true, false, -1, 0, 0, 3, 3, 0, 0.5, 3700, 100, 60, 4.0, 0, true,
         100 + 3.96 * 16},
        {"the reach stops at 0.8 x stall_s", true, false, -1, 0, 0, 3, 3, 0, 0.5, 4000, 100, 6, 1.5, 0, false, 0},
        {"under 0.8 x stall_s", true, false, -1, 0, 0, 3, 3, 0, 0.5, 4020, 100, 6, 1.5, 0, true, 100 + 0.76 * 16},
        {"target already reached: our samples as they are", true, false, -1, 0, 0, 3, 3, 0, 0.5, 4200, 100, 60, 1.5,
         0, true, 100},
        {"delayed update or aux: never", false, false, -1, 0, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0, false, 0},
        {"one already running", true, true, -1, 0, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0, false, 0},
        {"one failed at this epoch", true, false, 5, 0, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0, false, 0},
        {"one failed at the previous epoch", true, false, 4, 0, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0, true,
         100 + 0.96 * 16},
        {"no micro-batch timed yet", true, false, -1, 0, 0, 3, 3, 0, 0, 4000, 100, 60, 1.5, 0, false, 0},
        {"alone in the swarm", true, false, -1, 0, 0, 1, 1, 0, 0.5, 4000, 100, 60, 1.5, 0, false, 0},
        {"peers finishing the previous round", true, false, -1, 0, 0, 3, 2, 1, 0.5, 4000, 100, 60, 1.5, 101, false,
         0},
        {"previous round waited out", true, false, -1, 0, 0, 3, 2, 1, 0.5, 4000, 100, 60, 1.5, 99, true,
         100 + 0.96 * 16},
        {"the swarm shows no rate", true, false, -1, 0, 0, 3, 3, 0, 0.5, 4000, 0, 60, 1.5, 0, false, 0},
        {"local batch at our own rate", true, false, -1, 120, 0, 3, 3, 0, 0.5, 0, 0, 60, 1.5, 0, true, 120},
        {"local batch far off", true, false, -1, 200, 0, 3, 3, 0, 0.5, 4000, 100, 60, 1.5, 0, false, 0},
        {"local batch, min peers not at our epoch", true, false, -1, 120, 3, 3, 2, 0, 0.5, 0, 0, 60, 1.5, 0, false,
         0},
        {"local batch, min peers at our epoch", true, false, -1, 120, 3, 3, 3, 0, 0.5, 0, 0, 60, 1.5, 0, true, 120},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct early_case *r = &rows[i];
        struct dl_loop_policy p = trainer();
        p.early_on = r->early_on;
        p.local_batch = r->local_batch;
        p.min_peers = r->min_peers;
        p.round_deadline_s = r->deadline;
        struct dl_loop_counters c = counters();
        c.early_running = r->early_running;
        c.early_refused_epoch = r->refused;
        c.micro_s = r->micro_s;
        c.prev_wait_until = r->prev_wait_until;
        struct dl_swarm_look l = look3();
        l.peers = r->peers;
        l.at_epoch = r->at_epoch;
        l.at_previous = r->at_previous;
        l.collective = r->collective;
        l.samples_per_second = r->sps;
        double estimate = -1;
        bool got = dl_loop_early_due(&p, &c, &l, r->lead, &estimate);
        CHECK_MSG(got == r->want, "%s: %s, expected %s", r->name, got ? "due" : "not due", r->want ? "due" : "not due");
        if (got && r->want)
            CHECK_MSG(fabs(estimate - r->want_estimate) < 1e-9, "%s: estimate %.6f samples, expected %.6f", r->name,
                      estimate, r->want_estimate);
        if (!got) CHECK_MSG(estimate == -1, "%s: the estimate is left alone when not due", r->name);
    }
    /* --min-peers 3 with two peers at our epoch and a third we refuse: it
     * is there (it never joins our groups, so waiting for it is waiting
     * for nothing) */
    struct dl_loop_policy p = trainer();
    p.early_on = true;
    p.local_batch = 120;
    p.min_peers = 3;
    p.round_deadline_s = 60;
    struct dl_loop_counters c = counters();
    c.micro_s = 0.5;
    struct dl_swarm_look l = look3();
    l.at_epoch = 2;
    l.refused = 1;
    double estimate = -1;
    CHECK_MSG(dl_loop_early_due(&p, &c, &l, 1.5, &estimate) && estimate == 120,
              "a refused peer does not count toward --min-peers");
}

static const char *action_name(enum dl_loop_sync_action a) {
    switch (a) {
    case DL_LOOP_SYNC_NONE: return "none";
    case DL_LOOP_SYNC_CATCH_UP: return "catch up";
    case DL_LOOP_SYNC_FOLLOW_EPOCH: return "follow the epoch";
    case DL_LOOP_SYNC_REFRESH_AUX: return "aux refresh";
    case DL_LOOP_SYNC_HEAL: return "heal";
    }
    return "?";
}

static void test_sync(void) {
    /* Our epoch 5. hashes: peers holding a hash at the reference epoch. */
    struct row {
        const char *name;
        bool aux, has_state;
        int64_t epoch, state_every;
        uint64_t last_state_epoch, ahead_epoch;
        bool has_ref, i_disagree;
        size_t ref_holders, my_holders, hashes, at_previous;
        enum dl_loop_sync_action want;
    } rows[] = {
        {"in agreement", false, true, 5, 1, 5, 0, true, false, 3, 3, 3, 0, DL_LOOP_SYNC_NONE},
        {"the swarm moved on", false, true, 5, 1, 5, 7, true, false, 3, 3, 3, 0, DL_LOOP_SYNC_CATCH_UP},
        {"the swarm moved on while we disagree", false, true, 5, 1, 5, 6, true, true, 3, 1, 4, 0,
         DL_LOOP_SYNC_CATCH_UP},
        {"aux: the swarm moved on within state_every", true, true, 5, 4, 5, 6, true, false, 3, 0, 3, 0,
         DL_LOOP_SYNC_FOLLOW_EPOCH},
        {"aux: the swarm moved on past state_every", true, true, 5, 4, 5, 9, true, false, 3, 0, 3, 0,
         DL_LOOP_SYNC_CATCH_UP},
        {"aux without weights, its download due", true, false, 9, 4, 5, 0, true, false, 3, 0, 3, 0,
         DL_LOOP_SYNC_REFRESH_AUX},
        {"aux without weights, its download not due", true, false, 8, 4, 5, 0, true, false, 3, 0, 3, 0,
         DL_LOOP_SYNC_NONE},
        {"aux without weights, nobody holds a state", true, false, 9, 4, 5, 0, false, false, 0, 0, 0, 0,
         DL_LOOP_SYNC_NONE},
        {"a majority holds another hash", false, true, 5, 1, 5, 0, true, true, 3, 1, 4, 0, DL_LOOP_SYNC_HEAL},
        {"a tie never settles it", false, true, 5, 1, 5, 0, true, true, 1, 1, 2, 0, DL_LOOP_SYNC_NONE},
        {"a plurality never settles it", false, true, 5, 1, 5, 0, true, true, 2, 1, 5, 0, DL_LOOP_SYNC_NONE},
        {"two liars against two honest peers and us", false, true, 5, 1, 5, 0, true, true, 2, 3, 5, 0,
         DL_LOOP_SYNC_NONE},
        {"peers finishing the previous round have not voted", false, true, 5, 1, 5, 0, true, true, 3, 1, 4, 2,
         DL_LOOP_SYNC_NONE},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *r = &rows[i];
        struct dl_loop_policy p = r->aux ? aux_peer(r->state_every) : trainer();
        p.state_every = r->state_every;
        struct dl_loop_counters c = counters();
        c.has_state = r->has_state;
        c.epoch = r->epoch;
        c.last_state_epoch = r->last_state_epoch;
        struct dl_swarm_look l = look3();
        l.ahead_epoch = r->ahead_epoch;
        l.has_ref = r->has_ref;
        l.i_disagree = r->i_disagree;
        l.ref_holders = r->ref_holders;
        l.my_holders = r->my_holders;
        l.hashes_at_ref = r->hashes;
        l.at_previous = r->at_previous;
        enum dl_loop_sync_action got = dl_loop_sync_decide(&p, &c, &l);
        CHECK_MSG(got == r->want, "%s: %s, expected %s", r->name, action_name(got), action_name(r->want));
    }
}

/* Local-steps mode: neither overlap, and the sync comes at H inner steps of
 * the run's micro-batch per peer seen, not at the target batch. */
static void test_local_sync(void) {
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    o.local_steps = 50;
    o.sync_micro_batch = 8;
    o.delay_update = true;
    struct dl_loop_policy p;
    dl_loop_policy_init(&p, &o, true);
    CHECK_MSG(!p.delayed && !p.early_on, "local-steps mode keeps --delay-update and early rounds off");
    struct dl_loop_counters c = counters();
    struct dl_swarm_look l = look3();
    CHECK(dl_loop_sync_target(&p, &c, &l) == 50.0 * 8 * 3);
    l.collective = 50.0 * 8 * 3 - 1;
    CHECK_MSG(dl_loop_ready(&p, &c, &l) == DL_LOOP_NOT_READY, "one sample short of H x 8 x 3");
    l.collective = 50.0 * 8 * 3;
    CHECK_MSG(dl_loop_ready(&p, &c, &l) == DL_LOOP_READY, "H inner steps per peer on average: ready");
    /* Alone: H of our own inner steps; without sync_micro_batch our last micro-batch's size. */
    l.peers = 1;
    o.sync_micro_batch = 0;
    dl_loop_policy_init(&p, &o, true);
    c.micro_samples = 4;
    CHECK(dl_loop_sync_target(&p, &c, &l) == 50.0 * 4);
    /* Exact mode: the target batch. */
    struct dl_loop_policy exact = trainer();
    CHECK(dl_loop_sync_target(&exact, &c, &l) == 4096.0);
}

int main(void) {
    test_policy();
    test_local_sync();
    test_ready();
    test_round_kind();
    test_early_lead();
    test_early_due();
    test_sync();
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
