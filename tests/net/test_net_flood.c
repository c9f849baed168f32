/* Limits before authentication: a peer flooded from one address with 500
 * idle sockets and 200 connections sending garbage keeps its memory bounded,
 * keeps serving the peer it is connected to, says in its log that it refuses
 * the flood, and admits a new real peer once the flood is over. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dl_test.h"
#include "peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_flood_XXXXXX";
static struct peer_proc procs[3];
static char log_path[3][300];

static void spawn(int i, const char *initial) {
    snprintf(log_path[i], sizeof log_path[i], "%s/peer%d.log", tmpdir, i);
    if (initial)
        proc_spawn(&procs[i], log_path[i], "--run-id", "flood", "--listen", "127.0.0.1:0", "--no-dht",
                   "--status-every", "0.2", "--expiry", "6", "--initial-peers", initial, NULL);
    else
        proc_spawn(&procs[i], log_path[i], "--run-id", "flood", "--listen", "127.0.0.1:0", "--no-dht",
                   "--status-every", "0.2", "--expiry", "6", NULL);
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

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static bool log_contains(int i, const char *needle) {
    FILE *f = fopen(log_path[i], "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    if (f) fclose(f);
    return found;
}

int main(void) {
    procs_init();
    alarm(120);
    if (!mkdtemp(tmpdir)) return 1;
    spawn(0, NULL);
    CHECK(proc_wait_first_line(&procs[0], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[0].listen);
    int port = atoi(strrchr(initial, ':') + 1);
    spawn(1, initial);
    struct expect_view two = {2, 0, 0};
    CHECK_MSG(procs_wait_views(procs, 2, &two, 30), "the two real peers did not meet");
    long base_kb = rss_kb(procs[0].pid), max_kb = base_kb;

    static int fds[700];
    int opened = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 700; i++) {
        int fd = dial(port);
        fds[i] = fd;
        if (fd < 0) continue;
        opened++;
        if (i >= 500) {
            /* garbage: random bytes, or a frame header announcing 4 GiB */
            uint8_t junk[4096];
            for (size_t k = 0; k < sizeof junk; k++) x = x * 6364136223846793005ull + 1, junk[k] = (uint8_t)(x >> 56);
            if (i % 2) memcpy(junk, "\xd1\x0c\x01\x01\xff\xff\xff\xff", 8);
            ssize_t w = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
            (void)w;
        }
        if (i % 50 == 0) {
            long kb = rss_kb(procs[0].pid);
            if (kb > max_kb) max_kb = kb;
            for (int k = 0; k < 2; k++) proc_pump(&procs[k]);
        }
    }
    /* Hold the flood while the real peers keep talking. */
    double end = mono_now() + 3;
    while (mono_now() < end) {
        long kb = rss_kb(procs[0].pid);
        if (kb > max_kb) max_kb = kb;
        for (int k = 0; k < 2; k++) proc_pump(&procs[k]);
        usleep(100000);
    }
    CHECK_MSG(opened > 600, "only %d of 700 flood connections opened", opened);
    CHECK_MSG(max_kb - base_kb < 32 * 1024, "RSS grew from %ld to %ld kB under the flood", base_kb, max_kb);
    CHECK(procs[0].pid > 0 && kill(procs[0].pid, 0) == 0);
    CHECK(json_num(procs[0].last, "num_peers") == 2 && json_num(procs[1].last, "num_peers") == 2);
    CHECK(json_num(procs[0].last, "connections") == 1 && json_peers_contain(procs[0].last, procs[1].peer_id));
    CHECK(log_contains(0, "refusing connections from 127.0.0.1"));
    for (int i = 0; i < 700; i++)
        if (fds[i] >= 0) close(fds[i]);

    /* After the flood a new real peer joins. */
    spawn(2, initial);
    struct expect_view three = {3, 0, 0};
    CHECK_MSG(procs_wait_views(procs, 3, &three, 30), "no new peer admitted after the flood");
    fprintf(stderr, "flood: %d connections opened, RSS %ld kB before, at most %ld kB during\n", opened, base_kb, max_kb);

    for (int i = 0; i < 3; i++) proc_stop(&procs[i], SIGTERM);
    if (!dl_test_failed) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    } else {
        fprintf(stderr, "logs kept in %s\n", tmpdir);
    }
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
