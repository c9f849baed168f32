/* Real `dedloc peer` processes on loopback form one swarm from a single
 * initial peer (2, 4 and 8 peers): every view converges to the same global
 * epoch and collective sample count; a client-mode peer ahead does not lead;
 * a peer behind does not count; a killed peer disappears after the expiry; a
 * restarted peer with the same identity rejoins; a clean exit is seen at once
 * (goodbye). Fake progress (--fake-*) has a zero rate, so the expected sums
 * are exact. */
#include "dl_test.h"
#include "peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_swarm_XXXXXX";

struct peer_spec {
    int epoch;
    int samples;
    bool client;
};

static void spawn_peer(struct peer_proc *p, int index, const char *run_id, const char *initial,
                       const struct peer_spec *s, const char *expiry) {
    char log[256], ident[256], epoch[32], samples[32];
    snprintf(log, sizeof log, "%s/%s-%d.log", tmpdir, run_id, index);
    snprintf(ident, sizeof ident, "%s/%s-%d.key", tmpdir, run_id, index);
    snprintf(epoch, sizeof epoch, "%d", s->epoch);
    snprintf(samples, sizeof samples, "%d", s->samples);
    const char *a[24];
    int n = 0;
    a[n++] = "--run-id"; a[n++] = run_id;
    a[n++] = "--listen"; a[n++] = "127.0.0.1:0";
    a[n++] = "--no-dht";
    a[n++] = "--status-every"; a[n++] = "0.2";
    a[n++] = "--expiry"; a[n++] = expiry;
    a[n++] = "--identity"; a[n++] = ident;
    a[n++] = "--fake-epoch"; a[n++] = epoch;
    a[n++] = "--fake-samples"; a[n++] = samples;
    if (initial) { a[n++] = "--initial-peers"; a[n++] = initial; }
    if (s->client) a[n++] = "--client-mode";
    while (n < 24) a[n++] = NULL;
    proc_spawn(p, log, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12],
               a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], NULL);
}

static struct peer_proc procs[8];

static void run_swarm(int n) {
    char run_id[32];
    snprintf(run_id, sizeof run_id, "swarm-%d", n);
    const char *expiry = n == 2 ? "60" : "6";
    struct peer_spec spec[8];
    double collective = 0;
    for (int i = 0; i < n; i++) {
        spec[i] = (struct peer_spec){3, 10 * (i + 1), false};
        if (n >= 4 && i == n - 1) spec[i].epoch = 2;               /* behind: not counted */
        if (n >= 4 && i == n - 2) spec[i] = (struct peer_spec){5, 7, true}; /* client ahead: no lead */
        if (spec[i].epoch == 3) collective += spec[i].samples;
    }
    spawn_peer(&procs[0], 0, run_id, NULL, &spec[0], expiry);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    for (int i = 1; i < n; i++) spawn_peer(&procs[i], i, run_id, initial, &spec[i], expiry);
    struct expect_view e = {n, 3, collective};
    CHECK_MSG(procs_wait_views(procs, n, &e, 40), "%d peers did not converge", n);
    /* every view lists every peer id */
    for (int i = 0; i < n; i++) {
        proc_pump(&procs[i]);
        for (int j = 0; j < n; j++) CHECK(json_peers_contain(procs[i].last, procs[j].peer_id));
    }

    if (n == 2) {
        /* clean exit: the goodbye record removes it long before the 60 s expiry */
        proc_stop(&procs[1], SIGTERM);
        struct expect_view e1 = {1, 3, spec[0].samples};
        CHECK_MSG(procs_wait_views(procs, 1, &e1, 15), "goodbye not seen");
    }
    if (n == 4) {
        /* killed (no goodbye): gone after the 6 s expiry. The peer behind
         * is the one killed: with one trainer at 3 and one at 2 left, a third
         * peer's view would take neither's word alone (the global epoch is
         * what a quorum of two claims, docs/protocol.md). */
        char old_id[40];
        snprintf(old_id, sizeof old_id, "%s", procs[3].peer_id);
        proc_stop(&procs[3], SIGKILL);
        struct expect_view e3 = {3, 3, collective};
        CHECK_MSG(procs_wait_views(procs, 3, &e3, 30), "killed peer did not expire");
        /* restarted with the same identity: rejoins under the same id */
        spawn_peer(&procs[3], 3, run_id, initial, &spec[3], expiry);
        CHECK(proc_wait_first_line(&procs[3], 20));
        CHECK(!strcmp(procs[3].peer_id, old_id));
        CHECK_MSG(procs_wait_views(procs, 4, &e, 30), "restarted peer did not rejoin");
        for (int i = 0; i < 4; i++) CHECK(json_peers_contain(procs[i].last, old_id));
    }
    for (int i = 0; i < n; i++) proc_stop(&procs[i], SIGTERM);
}

int main(void) {
    procs_init();
    alarm(110); /* a hung test never outlives ctest's patience; children are killed */
    if (!mkdtemp(tmpdir)) return 1;
    run_swarm(2);
    run_swarm(4);
    run_swarm(8);
    procs_kill_all();
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "peer logs kept in %s\n", tmpdir);
    }
    return dl_test_finish("test_net_swarm");
}
