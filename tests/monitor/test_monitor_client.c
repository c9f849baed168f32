/* dedloc monitor with a volunteer behind NAT: one listening peer ("sam"),
 * one client-mode peer ("carol", which nobody can dial, the monitor
 * included) and a monitor started without --history or --target-batch.
 *  - carol is listed with her device and name and is on the board: her
 *    record reaches the monitor through the peer she dialled (the relay);
 *  - the header's target is the one the peers announce (48), not 4096;
 *  - carol restarts with the same identity: her count on the board goes
 *    on from what she brought before instead of starting over;
 *  - the history is in the run id's folder of XDG_STATE_HOME, and nothing
 *    lands in the folder the monitor was started in. */
#include <dirent.h>
#include <sys/stat.h>

#include "dl_test.h"
#include "monitor/monitor_swarm.h"

static char tmpdir[] = "/tmp/dl_monitor_client_XXXXXX";
static const char *RUN = "client-test";

/* The monitor, from tmpdir, with the defaults for its files and target. */
static bool start_default_monitor(const char *initial_peer) {
    char *const argv[] = {"dedloc", "monitor", "--run-id", (char *)RUN, "--initial-peers", (char *)initial_peer,
                          "--no-dht", "--listen-http", "127.0.0.1:0", "--sample-every", "0.5", "--expiry", "6",
                          "--duration", "100", NULL};
    return spawn_monitor(argv);
}

static int start_carol(void) {
    if (proc_spawn(&peers[1], peer_logs[1], "--run-id", RUN, "--client-mode", "--initial-peers", peers[0].listen,
                   "--no-dht", "--json", "--status-every", "0.5", "--expiry", "6", "--identity", "carol.id",
                   "--target-batch", "48", "--fake-epoch", "3", "--fake-samples-per-second", "50", "--fake-loss",
                   "3.0", "--name", "carol", NULL) ||
        !proc_wait_first_line(&peers[1], 20))
        return -1;
    return 0;
}

static const cJSON *board_entry(const cJSON *status, const char *peer_id) {
    const cJSON *e;
    cJSON_ArrayForEach(e, item(status, "leaderboard")) {
        const cJSON *id = item(e, "peer_id");
        if (cJSON_IsString(id) && !strcmp(id->valuestring, peer_id)) return e;
    }
    return NULL;
}

static bool is_string(const cJSON *o, const char *key, const char *want) {
    const cJSON *v = item(o, key);
    return cJSON_IsString(v) && !strcmp(v->valuestring, want);
}

/* Until carol is listed with her metrics (uptime in the range: which
 * session) and on the board, and sam with his (at most 20 s). */
static cJSON *wait_for_carol(double min_uptime, double max_uptime) {
    double end = mono_now() + 20;
    while (mono_now() < end) {
        cJSON *s = get_json("/api/status");
        const cJSON *p = find_peer(s, peers[1].peer_id);
        const cJSON *m = item(p, "metrics");
        bool sam = cJSON_IsObject(item(find_peer(s, peers[0].peer_id), "metrics"));
        if (sam && cJSON_IsObject(m) && board_entry(s, peers[1].peer_id) && json_num(m, "uptime_s") >= min_uptime &&
            json_num(m, "uptime_s") <= max_uptime)
            return s;
        cJSON_Delete(s);
        usleep(200000);
    }
    return NULL;
}

static bool history_in_cwd(void) {
    DIR *d = opendir(".");
    bool found = false;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, "history")) found = true;
    if (d) closedir(d);
    return found;
}

int main(void) {
    if (!mkdtemp(tmpdir) || chdir(tmpdir)) return 1;
    setenv("XDG_STATE_HOME", tmpdir, 1);
    swarm_names("client");
    procs_init();
    atexit(kill_monitor);
    alarm(150);
    (void)start_monitor; /* monitor_swarm.h's, with --history: not this test's */
    (void)start_swarm;
    (void)wait_for_full_status;
    if (proc_spawn(&peers[0], peer_logs[0], "--run-id", RUN, "--listen", "127.0.0.1:0", "--no-dht", "--json",
                   "--status-every", "0.5", "--expiry", "6", "--target-batch", "48", "--fake-epoch", "3",
                   "--fake-samples-per-second", "10", "--fake-loss", "2.5", "--name", "sam", NULL) ||
        !proc_wait_first_line(&peers[0], 20)) {
        fprintf(stderr, "sam did not start (see %s/%s)\n", tmpdir, peer_logs[0]);
        return 1;
    }
    if (start_carol()) {
        fprintf(stderr, "carol did not start (see %s/%s)\n", tmpdir, peer_logs[1]);
        return 1;
    }
    if (!start_default_monitor(peers[0].listen)) {
        fprintf(stderr, "the monitor did not start (see %s/%s)\n", tmpdir, monitor_log);
        return 1;
    }

    /* Carol, behind her NAT, with her device, her name and her samples. */
    cJSON *s = wait_for_carol(3, 1e9);
    CHECK_MSG(s != NULL, "carol (client mode) never showed with her metrics and on the board");
    double before = 0, before_uptime = 0;
    if (s) {
        const cJSON *p = find_peer(s, peers[1].peer_id), *m = item(p, "metrics");
        CHECK(cJSON_IsTrue(item(p, "client_mode")));
        CHECK(is_string(m, "device", "fake") && is_string(m, "name", "carol") && is_string(m, "precision", "fp32"));
        const cJSON *e = board_entry(s, peers[1].peer_id);
        CHECK(is_string(e, "name", "carol") && is_string(e, "device", "fake"));
        before = json_num(e, "samples_total");
        before_uptime = json_num(m, "uptime_s");
        CHECK(before >= 50 * 3 - 1e-6);
        /* sam, listening, as before. */
        CHECK(is_string(item(find_peer(s, peers[0].peer_id), "metrics"), "name", "sam"));
        /* The target both peers announce; the monitor was given none. */
        CHECK_MSG(json_num(s, "target_batch") == 48 && is_string(s, "target_source", "peers"), "target %g",
                  json_num(s, "target_batch"));
        CHECK(json_num(s, "samples_per_second") == 60);
    }
    cJSON_Delete(s);

    /* Carol restarts with the same identity: her count starts over at 0. */
    proc_stop(&peers[1], SIGKILL);
    CHECK_MSG(start_carol() == 0, "carol did not restart");
    s = wait_for_carol(1, before_uptime - 1);
    CHECK_MSG(s != NULL, "the monitor never saw carol's new session");
    if (s) {
        const cJSON *m = item(find_peer(s, peers[1].peer_id), "metrics");
        double now_total = json_num(m, "samples_total"), board = json_num(board_entry(s, peers[1].peer_id),
                                                                           "samples_total");
        CHECK_MSG(board >= before + now_total - 1e-6, "carol's board count %g after a restart (had %g, now %g)",
                  board, before, now_total);
    }
    cJSON_Delete(s);

    /* The history: in the run's own folder, not here. */
    char path[512];
    snprintf(path, sizeof path, "%s/dedloc/monitor/%s/history.jsonl", tmpdir, RUN);
    struct stat st;
    CHECK_MSG(stat(path, &st) == 0 && st.st_size > 0, "no history at %s", path);
    CHECK_MSG(!history_in_cwd(), "a history file in the monitor's working folder");

    stop_swarm();
    procs_kill_all();
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "logs kept in %s\n", tmpdir);
    }
    return dl_test_finish("test_monitor_client");
}
