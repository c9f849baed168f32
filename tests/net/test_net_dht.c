/* Eight `dedloc peer` processes find each other through the DHT alone: no
 * --initial-peers, only the first peer's DHT node as bootstrap. Every view
 * must converge to all eight peers, the same global epoch and the same
 * collective sample count. */
#include "dl_test.h"
#include "peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_dht_XXXXXX";
static struct peer_proc procs[8];

static void spawn(int i, const char *bootstrap) {
    char log[256], samples[32];
    snprintf(log, sizeof log, "%s/peer-%d.log", tmpdir, i);
    snprintf(samples, sizeof samples, "%d", 100 + i);
    if (bootstrap)
        proc_spawn(&procs[i], log, "--run-id", "dht-test", "--listen", "127.0.0.1:0", "--dht-port", "0",
                   "--dht-bootstrap", bootstrap, "--status-every", "0.2", "--expiry", "10",
                   "--fake-epoch", "4", "--fake-samples", samples, NULL);
    else
        proc_spawn(&procs[i], log, "--run-id", "dht-test", "--listen", "127.0.0.1:0", "--dht-port", "0",
                   "--status-every", "0.2", "--expiry", "10", "--fake-epoch", "4", "--fake-samples", samples,
                   NULL);
}

int main(void) {
#ifndef DEDLOC_HAVE_OPENDHT
    printf("test_net_dht: skipped (built without OpenDHT)\n");
    return 77; /* ctest reports it as skipped, not passed */
#endif
    procs_init();
    alarm(110);
    if (!mkdtemp(tmpdir)) return 1;
    spawn(0, NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    CHECK(procs[0].dht_port > 0);
    char bootstrap[64];
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:%d", procs[0].dht_port);
    for (int i = 1; i < 8; i++) spawn(i, bootstrap);
    double collective = 0;
    for (int i = 0; i < 8; i++) collective += 100 + i;
    struct expect_view e = {8, 4, collective};
    CHECK_MSG(procs_wait_views(procs, 8, &e, 60), "the DHT did not bring the swarm together");
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) CHECK(json_peers_contain(procs[i].last, procs[j].peer_id));
    for (int i = 0; i < 8; i++) proc_stop(&procs[i], SIGTERM);
    procs_kill_all();
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "peer logs kept in %s\n", tmpdir);
    }
    return dl_test_finish("test_net_dht");
}
