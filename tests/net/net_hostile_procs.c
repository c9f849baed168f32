/* The swarm view and gossip against a hostile peer: real `dedloc peer`
 * processes on loopback and the test-only attacker (net_attacker.c), one
 * scenario per ctest (net/hostile_<case>). Each shows the attack failing
 * and the honest peers keeping their view; the figures go to stderr.
 *
 *   sybil         2000 made-up identities at a third party's address
 *   sybil_closed  the same from a peer with a token, in a run with a run key
 *   epoch         one record at epoch 2^64-1 (and 1e300 samples); then a real step
 *   replay        a departed peer's last record, resent after it expired
 *   cpu           20000 copies of one valid record
 *   memory        huge PINGs and 16 MiB garbage requests from 40 connections
 *   bans          fresh keys, each banned, from one address
 *   fetchflood    12 fetch-only connections from one address that never read,
 *                 then 20 newcomers in a row from that address asking for the manifest
 *   refused       a peer that is not admitted redials with backoff and says so once
 *   joinflood     before an averaging round, 2 identities each send 64 joins of
 *                 4 MiB to a member of `dedloc bench allreduce-member`; then the
 *                 round of 3 honest members */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dl_test.h"
#include "net/peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_hostile_XXXXXX";
static struct peer_proc procs[6];
static char log_path[6][300];
static pid_t attacker_pid;
static char attacker_out[300];

/* Starts peer i; the variadic tail (NULL-terminated) is passed on. */
static void spawn(int i, const char *run, const char *initial, const char *epoch, const char *samples, ...) {
    snprintf(log_path[i], sizeof log_path[i], "%s/peer%d.log", tmpdir, i);
    const char *a[32];
    int n = 0;
    a[n++] = "--run-id"; a[n++] = run;
    a[n++] = "--listen"; a[n++] = "127.0.0.1:0";
    a[n++] = "--no-dht";
    a[n++] = "--status-every"; a[n++] = "0.2";
    a[n++] = "--expiry"; a[n++] = "4";
    a[n++] = "--fake-epoch"; a[n++] = epoch;
    a[n++] = "--fake-samples"; a[n++] = samples;
    if (initial) { a[n++] = "--initial-peers"; a[n++] = initial; }
    va_list ap;
    va_start(ap, samples);
    const char *x;
    while ((x = va_arg(ap, const char *)) && n < 30) a[n++] = x;
    va_end(ap);
    while (n < 32) a[n++] = NULL;
    proc_spawn(&procs[i], log_path[i], a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
               a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25],
               NULL);
}

static int port_of(int i) { return atoi(strrchr(procs[i].listen, ':') + 1); }

static void attacker_start(const char *fmt, ...) {
    char args[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(attacker_out, sizeof attacker_out, "%s/attacker.out", tmpdir);
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "exec %s %s > %s 2>> %s/attacker.err", NET_ATTACKER, args, attacker_out, tmpdir);
    attacker_pid = fork();
    if (attacker_pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* Waits for the attacker (pumping the peers); returns its JSON line. */
static cJSON *attacker_wait(int npeers, double timeout_s) {
    double end = mono_now() + timeout_s;
    int status = 0;
    while (waitpid(attacker_pid, &status, WNOHANG) == 0) {
        if (mono_now() > end) {
            kill(attacker_pid, SIGKILL);
            waitpid(attacker_pid, &status, 0);
            break;
        }
        for (int i = 0; i < npeers; i++) proc_pump(&procs[i]);
        usleep(50000);
    }
    attacker_pid = 0;
    char *text = NULL;
    size_t size = 0;
    FILE *f = fopen(attacker_out, "r");
    if (f) {
        text = calloc(1, 4096);
        if (text) size = fread(text, 1, 4095, f);
        fclose(f);
    }
    cJSON *j = size ? cJSON_Parse(text) : NULL;
    if (!j) fprintf(stderr, "attacker said: %s\n", text ? text : "(nothing)");
    free(text);
    return j;
}

static long rss_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

static bool log_contains(int i, const char *needle) {
    FILE *f = fopen(log_path[i], "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    if (f) fclose(f);
    return found;
}

/* Waits until every peer 0..n-1 lists every id of ids (and global epoch). */
static bool wait_know(int n, int nids, const int *ids, double epoch, double timeout_s) {
    double end = mono_now() + timeout_s;
    while (mono_now() < end) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            proc_pump(&procs[i]);
            if (!procs[i].last || json_num(procs[i].last, "global_epoch") != epoch) all = false;
            for (int k = 0; k < nids && all; k++)
                if (!json_peers_contain(procs[i].last, procs[ids[k]].peer_id)) all = false;
        }
        if (all) return true;
        usleep(50000);
    }
    for (int i = 0; i < n; i++) {
        char *s = procs[i].last ? cJSON_PrintUnformatted(procs[i].last) : NULL;
        fprintf(stderr, "peer %d view: %.600s\n", i, s ? s : "(none)");
        free(s);
    }
    return false;
}

/* A listening socket standing for someone else's server; counts the
 * connections our peers make to it. */
static int third_party_fd;
static int third_party_hits;

static int third_party_open(void) {
    third_party_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    if (bind(third_party_fd, (struct sockaddr *)&a, sizeof a) || listen(third_party_fd, 64) ||
        getsockname(third_party_fd, (struct sockaddr *)&a, &len))
        return -1;
    fcntl(third_party_fd, F_SETFL, O_NONBLOCK);
    return ntohs(a.sin_port);
}

static void third_party_pump(void) {
    int fd;
    while ((fd = accept(third_party_fd, NULL, NULL)) >= 0) {
        third_party_hits++;
        close(fd);
    }
}

static void run_sybil(bool closed) {
    const char *run = closed ? "sybil-closed" : "sybil";
    char key[400], pub[400], ids[3][400], tokens[3][400], run_key[80] = "", cmd[2000];
    if (closed) {
        snprintf(key, sizeof key, "%s/run.key", tmpdir);
        snprintf(pub, sizeof pub, "%s/run.pub", tmpdir);
        snprintf(cmd, sizeof cmd, "%s authority init --run-id %s --out %s > %s 2>/dev/null", DEDLOC_BINARY, run, key, pub);
        CHECK(system(cmd) == 0);
        FILE *f = fopen(pub, "r");
        CHECK(f && fscanf(f, "%64s", run_key) == 1);
        if (f) fclose(f);
        for (int i = 0; i < 3; i++) {
            snprintf(ids[i], sizeof ids[i], "%s/id%d.key", tmpdir, i);
            snprintf(tokens[i], sizeof tokens[i], "%s/id%d.token", tmpdir, i);
            snprintf(cmd, sizeof cmd, "%s authority issue --key %s --peer $(%s id %s) > %s 2>/dev/null", DEDLOC_BINARY,
                     key, NET_ATTACKER, ids[i], tokens[i]);
            CHECK(system(cmd) == 0);
        }
        spawn(0, run, NULL, "3", "10", "--identity", ids[0], "--run-key", run_key, "--token", tokens[0], NULL);
    } else {
        spawn(0, run, NULL, "3", "10", NULL);
    }
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    if (closed) spawn(1, run, initial, "3", "20", "--identity", ids[1], "--run-key", run_key, "--token", tokens[1], NULL);
    else spawn(1, run, initial, "3", "20", NULL);
    const int both[2] = {0, 1};
    CHECK_MSG(wait_know(2, 2, both, 3, 30), "the honest peers did not meet");
    int third = third_party_open();
    CHECK(third > 0);
    if (closed) {
        setenv("NET_ATTACKER_IDENTITY", ids[2], 1);
        attacker_start("sybil %d %s 2000 127.0.0.1:%d 8 %s", port_of(0), run, third, tokens[2]);
    } else {
        attacker_start("sybil %d %s 2000 127.0.0.1:%d 8", port_of(0), run, third);
    }
    double max_peers[2] = {0, 0};
    double end = mono_now() + 10;
    while (attacker_pid && mono_now() < end) {
        third_party_pump();
        for (int i = 0; i < 2; i++) {
            proc_pump(&procs[i]);
            double n = json_num(procs[i].last, "num_peers");
            if (n > max_peers[i]) max_peers[i] = n;
        }
        int status;
        if (waitpid(attacker_pid, &status, WNOHANG) != 0) break;
        usleep(50000);
    }
    cJSON *a = attacker_wait(2, 10);
    third_party_pump();
    CHECK_MSG(a && json_num(a, "sent") == 2000, "the attacker did not send its records");
    if (closed) {
        /* the attacker holds a token, its made-up crowd does not: none gets in */
        CHECK_MSG(max_peers[0] <= 3 && max_peers[1] <= 3, "views grew to %g and %g peers", max_peers[0], max_peers[1]);
        CHECK_MSG(third_party_hits == 0, "%d dials to the third party", third_party_hits);
        CHECK(log_contains(0, "unadmitted peer"));
    } else {
        /* one connection introduces at most 256 identities (plus a few per second) */
        CHECK_MSG(max_peers[0] <= 2 + 1 + 256 + 60 && max_peers[1] <= 2 + 1 + 256 + 60, "views grew to %g and %g peers",
                  max_peers[0], max_peers[1]);
        /* one target per address, given up after 3 failed dials, on each of the two peers */
        CHECK_MSG(third_party_hits <= 2 * 3, "%d dials to the third party", third_party_hits);
        CHECK(log_contains(0, "more new peers than one connection may introduce"));
    }
    /* the honest peers keep their view, and a newcomer still gets in */
    if (closed) spawn(2, run, initial, "3", "30", "--identity", ids[2], "--run-key", run_key, "--token", tokens[2], NULL);
    else spawn(2, run, initial, "3", "30", NULL);
    const int three[3] = {0, 1, 2};
    /* (in the closed run peer 2 takes the attacker's identity file: it holds a token) */
    CHECK_MSG(wait_know(3, 3, three, 3, 30), "a newcomer was not admitted after the attack");
    fprintf(stderr, "%s: 2000 sybil records sent; largest views %g and %g peers; %d dials to the third party\n", run,
            max_peers[0], max_peers[1], third_party_hits);
    cJSON_Delete(a);
    close(third_party_fd);
}

static void run_epoch(void) {
    spawn(0, "epoch", NULL, "3", "10", NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    spawn(1, "epoch", initial, "3", "20", NULL);
    spawn(2, "epoch", initial, "3", "30", NULL);
    const int all3[3] = {0, 1, 2};
    CHECK_MSG(wait_know(3, 3, all3, 3, 30), "the honest peers did not meet");
    attacker_start("epoch %d epoch 18446744073709551615 6", port_of(0));
    /* while it lies: every honest view stays at epoch 3 with 60 samples, the liar flagged */
    double end = mono_now() + 5, worst_epoch = 0;
    int seen_liar = 0;
    while (mono_now() < end) {
        for (int i = 0; i < 3; i++) {
            proc_pump(&procs[i]);
            double e = json_num(procs[i].last, "global_epoch");
            if (e > worst_epoch) worst_epoch = e;
            if (json_num(procs[i].last, "num_peers") == 4 && json_num(procs[i].last, "unbacked") == 1) seen_liar |= 1 << i;
            CHECK(json_num(procs[i].last, "collective_samples") == 60);
        }
        usleep(100000);
    }
    CHECK_MSG(worst_epoch == 3, "an honest view went to epoch %g", worst_epoch);
    CHECK_MSG(seen_liar == 7, "not every honest peer saw the liar as unbacked (mask %d)", seen_liar);
    cJSON *a = attacker_wait(3, 10);
    CHECK(a && json_num(a, "sent") >= 5);
    /* a real step: peers 1 and 2 come back at epoch 4; peer 0 (still at 3) and
     * a newcomer at 0 follow the quorum */
    proc_stop(&procs[1], SIGTERM);
    proc_stop(&procs[2], SIGTERM);
    spawn(1, "epoch", initial, "4", "5", NULL);
    spawn(2, "epoch", initial, "4", "6", NULL);
    spawn(3, "epoch", initial, "0", "0", NULL);
    const int all4[4] = {0, 1, 2, 3};
    CHECK_MSG(wait_know(4, 4, all4, 4, 30), "a real step to epoch 4 was not followed");
    fprintf(stderr, "epoch: a record at 2^64-1 sent %g times; honest views stayed at epoch %g; the step to 4 was "
            "followed by all 4 peers\n", json_num(a, "sent"), worst_epoch);
    cJSON_Delete(a);
}

static void run_replay(void) {
    spawn(0, "replay", NULL, "3", "10", NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    spawn(1, "replay", initial, "3", "20", NULL);
    const int both[2] = {0, 1};
    CHECK_MSG(wait_know(2, 2, both, 3, 30), "the honest peers did not meet");
    char victim_id[40];
    snprintf(victim_id, sizeof victim_id, "%s", procs[1].peer_id);
    attacker_start("replay %d replay %s 20", port_of(0), victim_id);
    usleep(2000000); /* it captures peer 1's records */
    proc_stop(&procs[1], SIGKILL); /* gone without a goodbye */
    double killed = mono_now();
    /* expiry 4 s: gone by 6 s; after that never back, through the tombstone
     * (records up to 16 s after) and the time check (older than 4 + 4 s) */
    bool gone = false;
    int back = 0;
    double gone_at = 0;
    while (mono_now() - killed < 18) {
        proc_pump(&procs[0]);
        bool listed = json_peers_contain(procs[0].last, victim_id);
        if (!gone && !listed) {
            gone = true;
            gone_at = mono_now() - killed;
        } else if (gone && listed) {
            back++;
        }
        usleep(100000);
    }
    cJSON *a = attacker_wait(1, 10);
    CHECK_MSG(a && cJSON_IsTrue(cJSON_GetObjectItem(a, "captured")), "the attacker captured no record");
    CHECK_MSG(gone, "the departed peer never left the view");
    CHECK_MSG(back == 0, "the departed peer came back %d times", back);
    fprintf(stderr, "replay: %g replays of the departed peer's last record over 18 s; it left the view %.1f s after "
            "it died and came back %d times\n", json_num(a, "replays"), gone_at, back);
    cJSON_Delete(a);
}

static void run_cpu(void) {
    spawn(0, "cpu", NULL, "3", "10", NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    usleep(500000);
    proc_pump(&procs[0]);
    double checked0 = json_num(procs[0].last, "records_checked"), verified0 = json_num(procs[0].last, "records_verified");
    attacker_start("dup %d cpu 20000", port_of(0));
    cJSON *a = attacker_wait(1, 60);
    usleep(600000);
    proc_pump(&procs[0]);
    double checked = json_num(procs[0].last, "records_checked") - checked0;
    double verified = json_num(procs[0].last, "records_verified") - verified0;
    CHECK_MSG(a && json_num(a, "sent") == 20000, "the attacker did not send its copies");
    CHECK_MSG(checked >= 20000, "only %g records reached the peer", checked);
    CHECK_MSG(verified <= 2, "%g signatures checked for one record", verified);
    fprintf(stderr, "cpu: 20000 copies of one record: %g received, %g signature check(s)\n", checked, verified);
    cJSON_Delete(a);
}

static void run_memory(void) {
    spawn(0, "memory", NULL, "3", "10", "--max-buffered", "64", NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    spawn(1, "memory", initial, "3", "20", NULL);
    const int both[2] = {0, 1};
    CHECK_MSG(wait_know(2, 2, both, 3, 30), "the honest peers did not meet");
    long base = rss_kb(procs[0].pid), peak = base;
    double max_buffered = 0;
    attacker_start("memory %d memory 40 6", port_of(0));
    double end = mono_now() + 30;
    int status;
    while (attacker_pid && waitpid(attacker_pid, &status, WNOHANG) == 0 && mono_now() < end) {
        long kb = rss_kb(procs[0].pid);
        if (kb > peak) peak = kb;
        proc_pump(&procs[0]);
        proc_pump(&procs[1]);
        double b = json_num(procs[0].last, "buffered_bytes");
        if (b > max_buffered) max_buffered = b;
        usleep(50000);
    }
    /* attacker_wait still reads its line (the process has been reaped) */
    FILE *f = fopen(attacker_out, "r");
    char line[512] = "";
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
    }
    attacker_pid = 0;
    cJSON *a = cJSON_Parse(line);
    CHECK_MSG(a && json_num(a, "opened") >= 30, "the attacker opened too few connections: %s", line);
    /* 30 garbage requests of 16 MiB would be 480 MiB: the budget is 64 */
    CHECK_MSG(peak - base < 160 * 1024, "RSS grew from %ld to %ld kB", base, peak);
    CHECK(kill(procs[0].pid, 0) == 0);
    CHECK(log_contains(0, "exceeds the limit"));
    /* the honest pair still sees itself */
    CHECK_MSG(wait_know(2, 2, both, 3, 20), "the honest peers lost each other");
    fprintf(stderr, "memory: %g connections, %g MiB of garbage pushed; RSS %ld kB before, at most %ld kB during; "
            "at most %.1f MiB buffered\n", json_num(a, "opened"), json_num(a, "pushed_mib"), base, peak,
            max_buffered / (1 << 20));
    cJSON_Delete(a);
}

static void run_bans(void) {
    spawn(0, "bans", NULL, "3", "10", NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    spawn(1, "bans", initial, "3", "20", NULL);
    const int both[2] = {0, 1};
    CHECK_MSG(wait_know(2, 2, both, 3, 30), "the honest peers did not meet");
    attacker_start("keyban %d bans 8", port_of(0));
    cJSON *a = attacker_wait(2, 60);
    CHECK_MSG(a && json_num(a, "banned_keys") >= 4, "the attacker got too few keys banned");
    CHECK_MSG(a && cJSON_IsFalse(cJSON_GetObjectItem(a, "fresh_key_admitted")), "a fresh key from a banned address got in");
    CHECK(log_contains(0, "banning address 127.0.0.1"));
    CHECK_MSG(wait_know(2, 2, both, 3, 10), "the honest peers lost each other");
    CHECK(json_num(procs[0].last, "connections") == 1);
    fprintf(stderr, "bans: %g keys banned from one address, then a fresh key was %s\n", json_num(a, "banned_keys"),
            cJSON_IsTrue(cJSON_GetObjectItem(a, "fresh_key_admitted")) ? "admitted" : "refused");
    cJSON_Delete(a);
}

/* Fetch-only connections (docs/protocol.md, "Limits against floods"): the
 * flooder gets a few slots, no records, a few answers, then is closed;
 * newcomers from one address asking for the run files over and over are
 * slowed down; the honest pair keeps its connection and its view. */
static void run_fetchflood(void) {
    char manifest[300], cmd[1200];
    snprintf(manifest, sizeof manifest, "%s/run.json", tmpdir);
    snprintf(cmd, sizeof cmd,
             "%s run init --model tiny --tokenizer %s/assets/tokenizer_bn_demo.json "
             "--data %s/tests/fixtures/text/corpus_bn_sample.txt --data-shared --run-id ff --seq 32 --batch 4 --out %s "
             "--identity %s/owner.id >/dev/null 2>%s/init.err",
             DEDLOC_BINARY, DEDLOC_SOURCE_DIR, DEDLOC_SOURCE_DIR, manifest, tmpdir, tmpdir);
    int init_rc = system(cmd);
    CHECK_MSG(init_rc == 0, "run init failed (see %s/init.err)", tmpdir);
    if (init_rc) return;
    for (int i = 0; i < 2; i++) {
        snprintf(log_path[i], sizeof log_path[i], "%s/peer%d.log", tmpdir, i);
        if (i == 0)
            proc_spawn(&procs[0], log_path[0], "--manifest", manifest, "--listen", "127.0.0.1:0", "--no-dht",
                       "--status-every", "0.2", "--expiry", "4", "--fake-epoch", "3", "--fake-samples", "10", NULL);
        else
            proc_spawn(&procs[1], log_path[1], "--manifest", manifest, "--listen", "127.0.0.1:0", "--no-dht",
                       "--status-every", "0.2", "--expiry", "4", "--fake-epoch", "3", "--fake-samples", "20",
                       "--initial-peers", procs[0].listen, NULL);
        CHECK(proc_wait_first_line(&procs[i], 20));
    }
    const int both[2] = {0, 1};
    bool met = wait_know(2, 2, both, 3, 30);
    CHECK_MSG(met, "the honest peers did not meet");
    if (!met) return;
    attacker_start("fetchflood %d ff 12 6 3", port_of(0));
    cJSON *a = attacker_wait(2, 60);
    CHECK_MSG(a != NULL, "no report from the attacker");
    if (!a) return;
    /* two at a time from one address; records are for peers of the run */
    CHECK_MSG(json_num(a, "admitted") == 2, "%g fetch-only connections admitted from one address",
              json_num(a, "admitted"));
    CHECK_MSG(json_num(a, "records") == 0, "the flooder received %g RECORDS messages", json_num(a, "records"));
    CHECK_MSG(json_num(a, "answered") >= 1, "the run files were not served at all");
    /* each asked 6 times: closed after its 4 */
    CHECK_MSG(json_num(a, "closed") == json_num(a, "admitted") && json_num(a, "still_open") == 0,
              "fetch-only connections not closed after their requests: %g closed, %g still open",
              json_num(a, "closed"), json_num(a, "still_open"));
    /* 20 requests in a row from one address: the burst (8, less what the
     * flood took), then about one per 2 s (about 3 s pass) */
    CHECK_MSG(json_num(a, "peer_answered") <= 10 && json_num(a, "peer_refused") >= 10,
              "run-file requests not rate-limited: %g answered, %g refused", json_num(a, "peer_answered"),
              json_num(a, "peer_refused"));
    CHECK_MSG(wait_know(2, 2, both, 3, 10), "the honest peers lost each other");
    CHECK_MSG(json_num(procs[0].last, "connections") >= 1 && json_peers_contain(procs[0].last, procs[1].peer_id),
              "the honest peer lost its connection");
    fprintf(stderr,
            "fetchflood: 12 fetch-only connections from one address: %g admitted, %g records sent to them, "
            "%g answers, %g refusals, %g closed; 20 newcomers in a row: %g answered, %g refused\n",
            json_num(a, "admitted"), json_num(a, "records"), json_num(a, "answered"), json_num(a, "refused"),
            json_num(a, "closed"), json_num(a, "peer_answered"), json_num(a, "peer_refused"));
    cJSON_Delete(a);
}

static int log_count(int i, const char *needle) {
    FILE *f = fopen(log_path[i], "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    if (f) fclose(f);
    return n;
}

/* A peer refused by another's allowlist dials it again after 2, 4, 8 ...
 * s (not every second) and warns once per minute, not once per dial. */
static void run_refused(void) {
    char allow[300];
    snprintf(allow, sizeof allow, "%s/allow", tmpdir);
    FILE *f = fopen(allow, "w");
    if (f) {
        fputs("# nobody\n", f);
        fclose(f);
    }
    spawn(0, "refused", NULL, "3", "10", "--allow", allow, NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    spawn(1, "refused", initial, "3", "20", NULL);
    CHECK(proc_wait_first_line(&procs[1], 20));
    double end = mono_now() + 9;
    while (mono_now() < end) {
        proc_pump(&procs[0]);
        proc_pump(&procs[1]);
        usleep(100000);
    }
    int refusals = log_count(0, "is not on the allowlist"), warnings = log_count(1, "refused us");
    /* dials at about 0, 2, 6 s (then 14): 3, where every second made 9 */
    CHECK_MSG(refusals >= 1 && refusals <= 4, "the refused peer dialled %d times in 9 s", refusals);
    CHECK_MSG(warnings == 1, "the refused peer logged %d refusals at warning level", warnings);
    fprintf(stderr, "refused: %d dials in 9 s, %d warning(s) in the refused peer's log\n", refusals, warnings);
}

/* `dedloc bench allreduce-member` processes: their JSON lines go to a file. */
static pid_t member_pid[3];

static void member_start(int i, const char *initial) {
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "DEDLOC_LOG=info exec %s bench allreduce-member --size 100003 --seed %d --weight 1 --peers 3 "
             "--deadline 40 --stall 2 --linger 5 %s%s > %s/m%d.out 2> %s/m%d.err",
             DEDLOC_BINARY, 101 + i, initial ? "--initial-peers " : "", initial ? initial : "", tmpdir, i, tmpdir, i);
    member_pid[i] = fork();
    if (member_pid[i] == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* The first JSON line of member i whose "event" is event, or NULL. */
static cJSON *member_event(int i, const char *event) {
    char path[320], line[8192];
    snprintf(path, sizeof path, "%s/m%d.out", tmpdir, i);
    FILE *f = fopen(path, "r");
    cJSON *found = NULL;
    while (f && !found && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const char *ev = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")) : NULL;
        if (ev && !strcmp(ev, event)) found = j;
        else cJSON_Delete(j);
    }
    if (f) fclose(f);
    return found;
}

static cJSON *member_wait(int i, const char *event, double timeout_s) {
    double end = mono_now() + timeout_s;
    cJSON *j;
    while (!(j = member_event(i, event)) && mono_now() < end) usleep(50000);
    return j;
}

/* Averaging inbox (docs/protocol.md, "Limits against floods"): a member
 * waiting for its first round takes joins from anyone; a flood of large
 * joins is refused on the network thread, memory stays bounded, and the
 * honest round completes with the same bits everywhere. */
static void run_joinflood(void) {
    member_start(0, NULL);
    cJSON *ready = member_wait(0, "ready", 30);
    CHECK_MSG(ready != NULL, "member 0 did not start");
    if (!ready) return;
    char listen[64];
    snprintf(listen, sizeof listen, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(ready, "listen")));
    cJSON_Delete(ready);
    member_start(1, listen);
    cJSON_Delete(member_wait(1, "ready", 30));
    long base = rss_kb(member_pid[0]), peak = base;
    attacker_start("joinflood %d dedloc-bench-allreduce 2 64 %u 2", atoi(strrchr(listen, ':') + 1),
                   (4u << 20) - 4096);
    int status;
    double end = mono_now() + 60;
    while (attacker_pid && waitpid(attacker_pid, &status, WNOHANG) == 0 && mono_now() < end) {
        long kb = rss_kb(member_pid[0]);
        if (kb > peak) peak = kb;
        usleep(20000);
    }
    cJSON *a = attacker_wait(0, 5);
    member_start(2, listen);
    cJSON *rounds[3];
    for (int i = 0; i < 3; i++) rounds[i] = member_wait(i, "round", 60);
    CHECK_MSG(a && json_num(a, "opened") == 2 && json_num(a, "sent") == 128, "the attacker did not send its joins");
    CHECK_MSG(a && json_num(a, "refused") >= 120, "only %g of 128 oversized joins refused", a ? json_num(a, "refused") : 0);
    /* 128 joins of 4 MiB would be 512 MiB */
    CHECK_MSG(peak - base < 96 * 1024, "RSS grew from %ld to %ld kB under the join flood", base, peak);
    const char *hash0 = rounds[0] ? cJSON_GetStringValue(cJSON_GetObjectItem(rounds[0], "hash")) : NULL;
    for (int i = 0; i < 3; i++) {
        const char *st = rounds[i] ? cJSON_GetStringValue(cJSON_GetObjectItem(rounds[i], "status")) : NULL;
        const char *hash = rounds[i] ? cJSON_GetStringValue(cJSON_GetObjectItem(rounds[i], "hash")) : NULL;
        CHECK_MSG(st && !strcmp(st, "ok"), "member %d: round %s", i, st ? st : "(no report)");
        CHECK_MSG(hash && hash0 && !strcmp(hash, hash0), "member %d holds other bits", i);
        cJSON *g = rounds[i] ? cJSON_GetObjectItem(rounds[i], "members") : NULL;
        CHECK_MSG(g && cJSON_GetArraySize(g) == 3, "member %d: a group of %d, not the 3 honest members", i,
                  g ? cJSON_GetArraySize(g) : 0);
    }
    fprintf(stderr, "joinflood: %g joins of 4 MiB sent before the round, %g refused; RSS %ld kB before, at most "
            "%ld kB during; the round of 3 honest members: %s\n", a ? json_num(a, "sent") : 0,
            a ? json_num(a, "refused") : 0, base, peak,
            rounds[0] ? cJSON_GetStringValue(cJSON_GetObjectItem(rounds[0], "status")) : "none");
    for (int i = 0; i < 3; i++) cJSON_Delete(rounds[i]);
    cJSON_Delete(a);
}

int main(int argc, char **argv) {
    procs_init();
    (void)procs_wait_views; /* views here hold attackers too: wait_know checks ids instead */
    alarm(110);
    if (argc < 2) return 2;
    if (!mkdtemp(tmpdir)) return 1;
    const char *c = argv[1];
    if (!strcmp(c, "sybil")) run_sybil(false);
    else if (!strcmp(c, "sybil_closed")) run_sybil(true);
    else if (!strcmp(c, "epoch")) run_epoch();
    else if (!strcmp(c, "replay")) run_replay();
    else if (!strcmp(c, "cpu")) run_cpu();
    else if (!strcmp(c, "memory")) run_memory();
    else if (!strcmp(c, "bans")) run_bans();
    else if (!strcmp(c, "fetchflood")) run_fetchflood();
    else if (!strcmp(c, "joinflood")) run_joinflood();
    else if (!strcmp(c, "refused")) run_refused();
    else return 2;
    if (attacker_pid > 0) {
        kill(attacker_pid, SIGKILL);
        waitpid(attacker_pid, NULL, 0);
    }
    for (int i = 0; i < 6; i++) proc_stop(&procs[i], SIGTERM);
    for (int i = 0; i < 3; i++)
        if (member_pid[i] > 0) {
            kill(member_pid[i], SIGKILL);
            waitpid(member_pid[i], NULL, 0);
        }
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    } else {
        fprintf(stderr, "logs kept in %s\n", tmpdir);
    }
    char name[64];
    snprintf(name, sizeof name, "hostile_%s", c);
    return dl_test_finish(name);
}
