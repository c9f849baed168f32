/* Helpers for tests that run real `dedloc peer` processes on loopback: spawn
 * with a stdout pipe, read their JSON lines without blocking, wait (bounded)
 * for a condition over every view, and make sure no child outlives the test. */
#ifndef DEDLOC_TEST_PEER_PROCS_H
#define DEDLOC_TEST_PEER_PROCS_H

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 16

struct peer_proc {
    pid_t pid;
    int out_fd;
    char buf[1 << 16];
    size_t len;
    cJSON *last;          /* newest JSON line */
    char peer_id[40];
    char listen[64];
    int dht_port;
    int lines;
};

static struct peer_proc *all_procs[64];
static int num_all_procs;

static void procs_kill_all(void) {
    for (int i = 0; i < num_all_procs; i++)
        if (all_procs[i]->pid > 0) {
            kill(all_procs[i]->pid, SIGKILL);
            waitpid(all_procs[i]->pid, NULL, 0);
            all_procs[i]->pid = 0;
        }
}

static void on_fatal_signal(int sig) {
    procs_kill_all();
    _exit(128 + sig);
}

static void procs_init(void) {
    atexit(procs_kill_all);
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGALRM, on_fatal_signal);
    signal(SIGPIPE, SIG_IGN);
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts DEDLOC_BINARY peer <args...> (NULL-terminated); stderr goes to
 * log_path. */
static int proc_spawn(struct peer_proc *p, const char *log_path, ...) {
    const char *argv[64];
    int argc = 0;
    argv[argc++] = DEDLOC_BINARY;
    argv[argc++] = "peer";
    va_list ap;
    va_start(ap, log_path);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 62) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    int fds[2];
    if (pipe(fds)) return -1;
    cJSON_Delete(p->last);
    memset(p, 0, sizeof *p);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        int err = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (err >= 0) dup2(err, 2);
        close(fds[0]);
        close(fds[1]);
        setenv("DEDLOC_LOG", "info", 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    p->pid = pid;
    p->out_fd = fds[0];
    all_procs[num_all_procs++] = p;
    return 0;
}

/* Reads whatever the process printed; keeps the newest complete line. */
static void proc_pump(struct peer_proc *p) {
    if (p->out_fd <= 0) return;
    for (;;) {
        if (p->len == sizeof p->buf) p->len = 0; /* a line that long is garbage */
        ssize_t k = read(p->out_fd, p->buf + p->len, sizeof p->buf - p->len);
        if (k <= 0) break;
        p->len += (size_t)k;
    }
    char *nl;
    while ((nl = memchr(p->buf, '\n', p->len))) {
        *nl = 0;
        cJSON *j = cJSON_Parse(p->buf);
        if (j) {
            cJSON_Delete(p->last);
            p->last = j;
            p->lines++;
            const cJSON *id = cJSON_GetObjectItem(j, "peer_id");
            const cJSON *listen = cJSON_GetObjectItem(j, "listen");
            const cJSON *dht = cJSON_GetObjectItem(j, "dht_port");
            if (cJSON_IsString(id)) snprintf(p->peer_id, sizeof p->peer_id, "%s", id->valuestring);
            if (cJSON_IsString(listen)) snprintf(p->listen, sizeof p->listen, "%s", listen->valuestring);
            if (cJSON_IsNumber(dht)) p->dht_port = dht->valueint;
        }
        size_t used = (size_t)(nl - p->buf) + 1;
        memmove(p->buf, nl + 1, p->len - used);
        p->len -= used;
    }
}

/* Waits (at most timeout_s) for the first JSON line: the chosen ports. */
static bool proc_wait_first_line(struct peer_proc *p, double timeout_s) {
    double end = mono_now() + timeout_s;
    while (mono_now() < end) {
        proc_pump(p);
        if (p->lines > 0) return true;
        struct pollfd pfd = {p->out_fd, POLLIN, 0};
        poll(&pfd, 1, 50);
    }
    return false;
}

static void proc_stop(struct peer_proc *p, int sig) {
    if (p->pid <= 0) return;
    kill(p->pid, sig);
    double end = mono_now() + 10;
    int status;
    while (waitpid(p->pid, &status, WNOHANG) == 0 && mono_now() < end) usleep(20000);
    if (waitpid(p->pid, &status, WNOHANG) == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &status, 0);
    }
    p->pid = 0;
    close(p->out_fd);
    p->out_fd = 0;
}

static double json_num(const cJSON *j, const char *key) {
    const cJSON *v = j ? cJSON_GetObjectItem(j, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static bool json_peers_contain(const cJSON *j, const char *peer_id) {
    const cJSON *arr = j ? cJSON_GetObjectItem(j, "peers") : NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if (cJSON_IsString(e) && !strcmp(e->valuestring, peer_id)) return true;
    return false;
}

/* What every running peer must eventually report. */
struct expect_view {
    int num_peers;
    double global_epoch;
    double collective_samples;
};

static bool view_matches(const struct peer_proc *p, const struct expect_view *e) {
    return p->last && json_num(p->last, "num_peers") == e->num_peers &&
           json_num(p->last, "global_epoch") == e->global_epoch &&
           json_num(p->last, "collective_samples") == e->collective_samples;
}

/* Pumps every running process until all views match, or timeout_s passes.
 * Prints the last views on failure. */
static bool procs_wait_views(struct peer_proc *procs, int n, const struct expect_view *e, double timeout_s) {
    double end = mono_now() + timeout_s;
    for (;;) {
        bool all = true;
        for (int i = 0; i < n; i++) {
            if (procs[i].pid <= 0) continue;
            proc_pump(&procs[i]);
            if (!view_matches(&procs[i], e)) all = false;
        }
        if (all) return true;
        if (mono_now() > end) break;
        usleep(50000);
    }
    for (int i = 0; i < n; i++) {
        if (procs[i].pid <= 0) continue;
        char *s = procs[i].last ? cJSON_PrintUnformatted(procs[i].last) : NULL;
        fprintf(stderr, "peer %d view: %s\n", i, s ? s : "(none)");
        free(s);
    }
    fprintf(stderr, "expected num_peers %d, global_epoch %g, collective_samples %g\n", e->num_peers,
            e->global_epoch, e->collective_samples);
    return false;
}

#endif
