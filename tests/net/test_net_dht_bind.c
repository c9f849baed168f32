/* Which addresses the DHT node binds, and what the peer says about it.
 * OpenDHT's C API cannot bind one host (docs/protocol.md, "DHT discovery"),
 * so a peer told --listen 127.0.0.1:0 has its DHT socket on 0.0.0.0 and must
 * warn that it does; a peer on a wildcard --listen must not. The sockets are
 * read from /proc/net/udp (as `ss -lun` shows them), so the warning is held
 * against what the kernel says, not against the code that prints it: if a
 * later OpenDHT binds the host, this test fails until the warning goes. */
#include "dl_test.h"
#include "peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_dht_bind_XXXXXX";
static struct peer_proc proc;

/* Local addresses (hex, as /proc prints them) of the IPv4 UDP sockets on port. */
static int sockets_on_port(int port, char addrs[][40], int max) {
    FILE *f = fopen("/proc/net/udp", "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof line, f)) {
        char local[64];
        if (sscanf(line, " %*d: %63s", local) != 1) continue;
        char *colon = strrchr(local, ':');
        if (!colon || (int)strtol(colon + 1, NULL, 16) != port) continue;
        *colon = 0;
        if (n < max) snprintf(addrs[n], 40, "%s", local);
        n++;
    }
    fclose(f);
    return n;
}

/* The peer's stderr (its log), read whole. */
static char *read_log(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    return text;
}

/* Starts a peer on listen with a DHT node on a free port; checks its
 * socket and its warning, then stops it. */
static void check_peer(const char *listen, const char *tag, bool names_host) {
    char log[300];
    snprintf(log, sizeof log, "%s/%s.log", tmpdir, tag);
    bool started = proc_spawn(&proc, log, "--run-id", "dht-bind-test", "--listen", listen, "--dht-port", "0",
                              NULL) == 0 &&
                   proc_wait_first_line(&proc, 20) && proc.dht_port > 0;
    CHECK_MSG(started, "the peer on %s did not start with a DHT node (log in %s)", listen, log);
    if (!started) return;
    char v4[16][40];
    int n4 = sockets_on_port(proc.dht_port, v4, 16);
    bool wildcard = n4 >= 1 && !strcmp(v4[0], "00000000");
    CHECK_MSG(n4 == 1, "DHT port %d: %d IPv4 sockets", proc.dht_port, n4);
    proc_stop(&proc, SIGTERM);
    const char *text = read_log(log);
    bool warned = text && strstr(text, "names one host, but the DHT node is open on every address") &&
                  strstr(text, "--no-dht");
    /* The warning is there exactly when the DHT is open beyond the host named. */
    CHECK_MSG(warned == (names_host && wildcard), "--listen %s: DHT socket on %s, warning %s", listen,
              n4 >= 1 ? v4[0] : "-", warned ? "given" : "absent");
    if (names_host) CHECK_MSG(wildcard, "--listen %s: the DHT socket is on %s, not 0.0.0.0 (docs/protocol.md "
                                        "says every address)", listen, n4 >= 1 ? v4[0] : "-");
}

int main(void) {
#ifndef DEDLOC_HAVE_OPENDHT
    printf("test_net_dht_bind: skipped (built without OpenDHT)\n");
    return 77;
#endif
    (void)procs_wait_views; /* peer_procs.h helpers this test has no use for */
    (void)json_peers_contain;
    procs_init();
    alarm(100);
    if (!mkdtemp(tmpdir)) return 1;
    check_peer("127.0.0.1:0", "loopback", true);
    check_peer("0.0.0.0:0", "wildcard", false);
    procs_kill_all();
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) {}
    } else {
        fprintf(stderr, "peer logs kept in %s\n", tmpdir);
    }
    return dl_test_finish("test_net_dht_bind");
}
