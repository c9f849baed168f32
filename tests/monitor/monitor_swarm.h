/* A small live swarm for the monitor tests: two `dedloc peer` processes with
 * fake progress and metrics (test builds), a `dedloc monitor` over them, and a
 * raw HTTP client for it. */
#ifndef DEDLOC_TEST_MONITOR_SWARM_H
#define DEDLOC_TEST_MONITOR_SWARM_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "net/peer_procs.h"

static struct peer_proc peers[2];
static pid_t monitor_pid;
static int monitor_port;
/* Files of this test in the build folder: TAG_history.jsonl, TAG_*.log
 * (each test its own, so tests can run in parallel). */
static char history_path[128], monitor_log[128], peer_logs[2][128];

static void swarm_names(const char *tag) {
    snprintf(history_path, sizeof history_path, "%s_history.jsonl", tag);
    snprintf(monitor_log, sizeof monitor_log, "%s_monitor.log", tag);
    for (int i = 0; i < 2; i++) snprintf(peer_logs[i], sizeof peer_logs[i], "%s_peer%d.log", tag, i);
}

static void kill_monitor(void) {
    if (monitor_pid > 0) {
        kill(monitor_pid, SIGKILL);
        waitpid(monitor_pid, NULL, 0);
        monitor_pid = 0;
    }
}

/* Starts `dedloc ARGS...` (argv[0] is "dedloc", NULL-terminated) as the
 * monitor and reads its first line (the HTTP port). */
static bool spawn_monitor(char *const argv[]) {
    int fds[2];
    if (pipe(fds)) return false;
    monitor_pid = fork();
    if (monitor_pid < 0) return false;
    if (monitor_pid == 0) {
        dup2(fds[1], 1);
        int err = open(monitor_log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0) dup2(err, 2);
        close(fds[0]);
        close(fds[1]);
        execv(DEDLOC_BINARY, argv);
        _exit(127);
    }
    close(fds[1]);
    char line[512];
    size_t n = 0;
    double end = mono_now() + 20;
    while (mono_now() < end && n < sizeof line - 1) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0) continue;
        ssize_t k = read(fds[0], line + n, 1);
        if (k <= 0 || line[n] == '\n') break;
        n++;
    }
    line[n] = 0;
    close(fds[0]);
    cJSON *j = cJSON_Parse(line);
    monitor_port = (int)json_num(j, "http_port");
    cJSON_Delete(j);
    return monitor_port > 0;
}

/* Starts the monitor of the test swarm, with its own history file. */
static bool start_monitor(const char *initial_peer) {
    char *const argv[] = {"dedloc", "monitor", "--run-id", "monitor-test", "--initial-peers", (char *)initial_peer,
                          "--no-dht", "--listen-http", "127.0.0.1:0", "--history", (char *)history_path,
                          "--history-points", "16", "--sample-every", "0.5", "--expiry", "6", "--duration", "60",
                          NULL};
    return spawn_monitor(argv);
}

static int connect_monitor(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)monitor_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

/* Sends raw bytes, reads the answer until the server closes (at most 10 s).
 * Returns the HTTP status (0: no answer); *body (malloc'd) holds the body. */
static int http_raw(const char *request, size_t size, char **body) {
    if (body) *body = NULL;
    int fd = connect_monitor();
    if (fd < 0) return 0;
    for (size_t sent = 0; sent < size;) {
        ssize_t k = send(fd, request + sent, size - sent, MSG_NOSIGNAL);
        if (k <= 0) break; /* the server may close on a huge request: read its answer */
        sent += (size_t)k;
    }
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    double end = mono_now() + 10;
    while (buf && mono_now() < end && len < cap) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0) continue;
        ssize_t k = recv(fd, buf + len, cap - len, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    if (!buf) return 0;
    buf[len] = 0;
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) status = 0;
    char *start = strstr(buf, "\r\n\r\n");
    if (body && start) *body = strdup(start + 4);
    free(buf);
    return status;
}

static int http_get(const char *path, char **body) {
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    return http_raw(req, (size_t)n, body);
}

static cJSON *get_json(const char *path) {
    char *body = NULL;
    cJSON *j = http_get(path, &body) == 200 && body ? cJSON_Parse(body) : NULL;
    free(body);
    return j;
}

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const cJSON *find_peer(const cJSON *status, const char *peer_id) {
    const cJSON *p;
    cJSON_ArrayForEach(p, item(status, "peers")) {
        const cJSON *id = item(p, "peer_id");
        if (cJSON_IsString(id) && !strcmp(id->valuestring, peer_id)) return p;
    }
    return NULL;
}

/* Until both peers are alive with their metrics, at most 20 s. */
static cJSON *wait_for_full_status(void) {
    double end = mono_now() + 20;
    while (mono_now() < end) {
        cJSON *s = get_json("/api/status");
        const cJSON *a = find_peer(s, peers[0].peer_id), *b = find_peer(s, peers[1].peer_id);
        if (a && b && cJSON_IsObject(item(a, "metrics")) && cJSON_IsObject(item(b, "metrics")) &&
            json_num(s, "peers_alive") == 2)
            return s;
        cJSON_Delete(s);
        usleep(200000);
    }
    return NULL;
}

/* Two peers (alice: epoch 3, 10 samples/s, loss 2.5; bob: epoch 3, 5
 * samples/s, loss 3.5) and the monitor; 0, or 1 with the reason printed. */
static int start_swarm(void) {
    procs_init();
    atexit(kill_monitor);
    alarm(120);
    if (proc_spawn(&peers[0], peer_logs[0], "--run-id", "monitor-test", "--listen", "127.0.0.1:0",
                   "--no-dht", "--json", "--status-every", "0.5", "--expiry", "6", "--fake-epoch", "3",
                   "--fake-samples-per-second", "10", "--fake-loss", "2.5", "--name", "alice", NULL) ||
        !proc_wait_first_line(&peers[0], 20)) {
        fprintf(stderr, "peer 0 did not start (see %s)\n", peer_logs[0]);
        return 1;
    }
    if (proc_spawn(&peers[1], peer_logs[1], "--run-id", "monitor-test", "--listen", "127.0.0.1:0",
                   "--no-dht", "--json", "--status-every", "0.5", "--expiry", "6", "--initial-peers",
                   peers[0].listen, "--fake-epoch", "3", "--fake-samples-per-second", "5", "--fake-loss", "3.5",
                   "--name", "bob", NULL) ||
        !proc_wait_first_line(&peers[1], 20)) {
        fprintf(stderr, "peer 1 did not start (see %s)\n", peer_logs[1]);
        return 1;
    }
    if (!start_monitor(peers[0].listen)) {
        fprintf(stderr, "the monitor did not start (see %s)\n", monitor_log);
        return 1;
    }
    return 0;
}

/* Stops everything; the helpers of peer_procs.h a test may not use. */
static void stop_swarm(void) {
    kill_monitor();
    for (int i = 0; i < 2; i++) proc_stop(&peers[i], SIGTERM);
    (void)procs_wait_views;
    (void)json_peers_contain;
}

#endif
