/* Streaming over HTTP on 127.0.0.1: the shard server (in process and as a
 * `dedloc serve-data` child that is killed mid-stream and restarted), and a
 * scripted faulty server that cuts connections, answers 500, stalls, or
 * ignores Range. Whatever happens, the bytes that arrive are the file's bytes
 * and the batches are those of the local file. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "data_test_util.h"
#include "dl_test.h"

/* ---- a scripted faulty HTTP server ------------------------------------------- */
/* 404 and 403 are outages too: dataset hosts answer them while a file is
 * being replaced or a signed storage URL is renewed. */
enum fault_mode {
    FAULT_CUT_THEN_500, FAULT_STALL, FAULT_IGNORE_RANGE, FAULT_RESET, FAULT_ALWAYS_500, FAULT_404_THEN_403,
    FAULT_ALWAYS_404
};

typedef struct {
    enum fault_mode mode;
    const char *data;
    size_t len, cut;           /* first response stops after cut bytes */
    int listen_fd, port;
    int requests;
    long range_starts[16];     /* -1: no Range header */
    int held_fds[16], held;
    atomic_int stop;
    pthread_t thread;
} fault_server;

static void send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        c += w;
        n -= (size_t)w;
    }
}

static void send_headers(int fd, int code, size_t first, size_t length, size_t total) {
    char h[256];
    int n;
    if (code == 206)
        n = snprintf(h, sizeof h,
                     "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: bytes "
                     "%zu-%zu/%zu\r\nConnection: close\r\n\r\n",
                     length, first, first + length - 1, total);
    else
        n = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     length);
    send_all(fd, h, (size_t)n);
}

static void *fault_main(void *arg) {
    fault_server *fs = arg;
    while (!atomic_load(&fs->stop)) {
        struct pollfd p = {fs->listen_fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(fs->listen_fd, NULL, NULL);
        if (fd < 0) continue;
        char req[8192] = {0};
        size_t got = 0;
        while (got < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
            ssize_t r = recv(fd, req + got, sizeof req - 1 - got, 0);
            if (r <= 0) break;
            got += (size_t)r;
            req[got] = 0;
        }
        req[got] = 0;
        long start = -1;
        const char *range = strstr(req, "Range: bytes=");
        if (range) start = atol(range + 13);
        int k = fs->requests++;
        if (k < 16) fs->range_starts[k] = start;
        size_t from = start > 0 ? (size_t)start : 0;
        bool hold = false;
        if (fs->mode == FAULT_RESET && k < 3) {
            /* Reset the connection (RST) before answering, three times. */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(fd);
            continue;
        }
        if (fs->mode == FAULT_ALWAYS_404 || (fs->mode == FAULT_404_THEN_403 && k < 2)) {
            const char *r4 = k == 1 && fs->mode == FAULT_404_THEN_403
                                 ? "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                 : "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            send_all(fd, r4, strlen(r4));
        } else if (fs->mode == FAULT_ALWAYS_500 || (fs->mode == FAULT_CUT_THEN_500 && k == 1)) {
            const char *r500 = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 6\r\n"
                               "Connection: close\r\n\r\nerror\n";
            send_all(fd, r500, strlen(r500));
        } else if (k == 0) {
            /* Promise the whole file, deliver a part. */
            send_headers(fd, 200, 0, fs->len, fs->len);
            send_all(fd, fs->data, fs->cut);
            hold = fs->mode == FAULT_STALL;
        } else if (fs->mode == FAULT_IGNORE_RANGE) {
            send_headers(fd, 200, 0, fs->len, fs->len);
            send_all(fd, fs->data, fs->len);
        } else {
            send_headers(fd, from ? 206 : 200, from, fs->len - from, fs->len);
            send_all(fd, fs->data + from, fs->len - from);
        }
        if (hold && fs->held < 16)
            fs->held_fds[fs->held++] = fd;
        else
            close(fd);
    }
    for (int i = 0; i < fs->held; i++) close(fs->held_fds[i]);
    return NULL;
}

static void fault_start(fault_server *fs) {
    fs->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fs->listen_fd, (struct sockaddr *)&a, sizeof a);
    listen(fs->listen_fd, 16);
    socklen_t l = sizeof a;
    getsockname(fs->listen_fd, (struct sockaddr *)&a, &l);
    fs->port = ntohs(a.sin_port);
    pthread_create(&fs->thread, NULL, fault_main, fs);
}

static void fault_stop(fault_server *fs) {
    atomic_store(&fs->stop, 1);
    pthread_join(fs->thread, NULL);
    close(fs->listen_fd);
}

static char *make_text(size_t *len, int lines) {
    size_t cap = (size_t)lines * 64 + 1;
    char *t = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < lines; i++)
        n += (size_t)snprintf(t + n, cap - n, "document %d: %d %d %d. এবং %d।\n", i, i % 7, i % 11,
                              i % 13, i % 17);
    *len = n;
    return t;
}

static void test_faults(void) {
    size_t len;
    char *text = make_text(&len, 6000);
    const enum fault_mode modes[] = {FAULT_CUT_THEN_500, FAULT_STALL, FAULT_IGNORE_RANGE,
                                     FAULT_RESET, FAULT_404_THEN_403};
    const char *names[] = {"cut then 500", "stall", "ignore range", "reset", "404 then 403"};
    for (int m = 0; m < 5; m++) {
        fault_server fs = {.mode = modes[m], .data = text, .len = len, .cut = len / 3};
        fault_start(&fs);
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/shard.txt", fs.port);
        dl_data_stats st = {0};
        /* Only the stall case needs a short timeout; elsewhere a busy machine must
         * not make a healthy connection look stalled. */
        dl_data_io io = {.timeout_s = modes[m] == FAULT_STALL ? 0.5 : 10, .max_retries = 5,
                         .retry_base_s = 0.01, .retry_max_s = 0.05, .counters = &st};
        char *got;
        size_t got_len;
        int rc = dl_bytesrc_slurp(url, &io, 1 << 26, &got, &got_len);
        CHECK_MSG(rc == 0, "%s: %s", names[m], dl_error());
        CHECK_MSG(rc == 0 && got_len == len && !memcmp(got, text, len), "%s: %zu of %zu bytes",
                  names[m], rc == 0 ? got_len : 0, len);
        if (!rc) free(got);
        fault_stop(&fs);
        if (modes[m] == FAULT_CUT_THEN_500) {
            CHECK(fs.requests == 3 && st.retries == 2);
            /* the retries resume where the first response broke off */
            CHECK(fs.range_starts[0] == -1 && fs.range_starts[1] == (long)fs.cut &&
                  fs.range_starts[2] == (long)fs.cut);
        } else if (modes[m] == FAULT_STALL) {
            CHECK(fs.requests == 2 && st.retries == 1 && fs.range_starts[1] == (long)fs.cut);
        } else if (modes[m] == FAULT_IGNORE_RANGE) {
            CHECK(fs.requests == 2 && st.retries == 1);
        } else if (modes[m] == FAULT_404_THEN_403) {
            /* retried like an outage: 404, 403, then the file */
            CHECK(fs.requests == 3 && st.retries == 2);
        } else {
            CHECK(fs.requests == 4 && st.retries == 3);
        }
    }
    /* A source that never recovers: given up after max_retries, with the reason. */
    fault_server fs = {.mode = FAULT_ALWAYS_500, .data = text, .len = len};
    fault_start(&fs);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/shard.txt", fs.port);
    dl_data_stats st = {0};
    dl_data_io io = {.timeout_s = 10, .max_retries = 3, .retry_base_s = 0.01, .retry_max_s = 0.02,
                     .counters = &st};
    char *got;
    size_t got_len;
    CHECK(dl_bytesrc_slurp(url, &io, 1 << 26, &got, &got_len) == -1);
    CHECK(strstr(dl_error(), "HTTP 500") != NULL);
    CHECK(st.retries == 4 && fs.requests == 4);
    fault_stop(&fs);
    /* A file that stays missing: retried with backoff, given up after
     * max_retries like any outage, with the status in the reason. */
    fault_server gone = {.mode = FAULT_ALWAYS_404, .data = text, .len = len};
    fault_start(&gone);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/shard.txt", gone.port);
    memset(&st, 0, sizeof st);
    CHECK(dl_bytesrc_slurp(url, &io, 1 << 26, &got, &got_len) == -1);
    CHECK_MSG(strstr(dl_error(), "HTTP 404") != NULL, "%s", dl_error());
    CHECK(st.retries == 4 && gone.requests == 4);
    fault_stop(&gone);
    /* Nobody listening: connection refused, retried, given up. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/shard.txt", fs.port);
    memset(&st, 0, sizeof st);
    CHECK(dl_bytesrc_slurp(url, &io, 1 << 26, &got, &got_len) == -1);
    CHECK(st.retries == 4);
    CHECK_MSG(strstr(dl_error(), "cannot connect to 127.0.0.1 port") != NULL, "%s", dl_error());
    free(text);
}

/* ---- the shard server ---------------------------------------------------------- */

static uint64_t batches_hash(const char *source, int n, dl_data_stats *st) {
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = source;
    cfg.batch_size = 8;
    cfg.max_seq_len = 64;
    cfg.shuffle_buffer = 50;
    cfg.seed = 99;
    cfg.loop = false;
    cfg.io_timeout_s = 5;
    cfg.max_retries = 2;
    cfg.retry_base_s = 0.01;
    dl_data_text text = fake_text();
    dl_data_stream *s;
    if (dl_data_open_text(&cfg, &text, &s)) {
        fprintf(stderr, "open %s: %s\n", source, dl_error());
        return 0;
    }
    dl_batch b = {0};
    uint64_t h = 0;
    int i = 0;
    for (; i < n && dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH; i++) {
        h = dl_hash64(b.input_ids, 8 * 64 * sizeof(int32_t), h);
        h = dl_hash64(b.labels, 8 * 64 * sizeof(int32_t), h);
        h = dl_hash64(b.sentence_order_label, 8 * sizeof(int32_t), h);
    }
    dl_data_get_stats(s, st);
    dl_data_close(s);
    dl_batch_free(&b);
    return i == n ? h : 0;
}

static void test_server(const char *dir) {
    char shards[300], path[400];
    snprintf(shards, sizeof shards, "%s/shards", dir);
    dl_mkdirs(shards);
    size_t len;
    char *text = make_text(&len, 3000);
    snprintf(path, sizeof path, "%s/a.txt", shards);
    write_bytes(path, text, len / 2, "wb");
    size_t gl;
    unsigned char *g1 = gzip_member(text + len / 2, len / 4, &gl);
    snprintf(path, sizeof path, "%s/b.txt.gz", shards);
    write_bytes(path, g1, gl, "wb");
    free(g1);
    g1 = gzip_member(text + len / 2 + len / 4, len - len / 2 - len / 4, &gl);
    write_bytes(path, g1, gl, "ab");
    free(g1);
    free(text);
    dl_data_server *srv;
    CHECK_OK(dl_data_server_start(shards, "127.0.0.1", 0, &srv));
    if (!srv) return;
    int port = dl_data_server_port(srv);
    CHECK(port > 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    dl_data_stats local_st = {0}, http_st = {0};
    char *local = read_all_documents(shards, DL_DATA_AUTO, &local_st, NULL);
    char *remote = read_all_documents(url, DL_DATA_AUTO, &http_st, NULL);
    CHECK(local && remote && strlen(local) > 1000 && !strcmp(local, remote));
    CHECK(http_st.shards == 2 && http_st.retries == 0);
    free(local);
    free(remote);
    /* Same batches from the directory and from the server. */
    dl_data_stats s1, s2;
    uint64_t h_local = batches_hash(shards, 20, &s1), h_http = batches_hash(url, 20, &s2);
    CHECK(h_local != 0 && h_local == h_http);
    /* An index naming a missing shard: that shard is retried, skipped and counted. */
    snprintf(path, sizeof path, "%s/index.txt", shards);
    write_bytes(path, "a.txt\nmissing.txt\n# comment\n../etc/passwd\nb.txt.gz\n", 52, "wb");
    dl_data_stats st = {0};
    dl_data_io io = {.timeout_s = 5, .max_retries = 1, .retry_base_s = 0.01, .retry_max_s = 0.02,
                     .counters = &st};
    remote = read_all_documents(url, DL_DATA_AUTO, &st, &io);
    CHECK(remote && strlen(remote) > 1000);
    CHECK(st.failed_shards == 1 && st.shards == 3);
    free(remote);
    /* Range edge cases straight from the server. */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/a.txt", port);
    char *got;
    size_t got_len;
    CHECK_OK(dl_bytesrc_slurp(url, NULL, 1 << 26, &got, &got_len));
    CHECK(got_len == len / 2);
    free(got);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/..%%2Findex.txt", port);
    io.max_retries = 0;
    CHECK(dl_bytesrc_slurp(url, &io, 1 << 20, &got, &got_len) == -1);
    CHECK(strstr(dl_error(), "404") != NULL);
    dl_data_server_stop(srv);
}

/* `dedloc serve-data` as a child; returns its pid and fills *port. */
static pid_t spawn_server(const char *dir, int want_port, int *port) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        char listen[64];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", want_port);
        execl(DEDLOC_BINARY, DEDLOC_BINARY, "serve-data", dir, "--listen", listen, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[512] = {0};
    size_t n = 0;
    while (n < sizeof line - 1) {
        ssize_t r = read(fds[0], line + n, 1);
        if (r <= 0 || line[n] == '\n') break;
        n++;
    }
    close(fds[0]);
    const char *colon = strrchr(line, ':');
    *port = colon ? atoi(colon + 1) : -1;
    return pid;
}

static void test_killed_server(const char *dir) {
    char shards[300], path[400];
    snprintf(shards, sizeof shards, "%s/big", dir);
    dl_mkdirs(shards);
    /* Larger than the loopback socket buffers, so the kill lands mid-stream. */
    size_t len;
    char *text = make_text(&len, 400000);
    snprintf(path, sizeof path, "%s/big.txt", shards);
    write_bytes(path, text, len, "wb");
    int port;
    pid_t pid = spawn_server(shards, 0, &port);
    CHECK(pid > 0 && port > 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/big.txt", port);
    dl_data_stats st = {0};
    dl_data_io io = {.timeout_s = 5, .max_retries = 50, .retry_base_s = 0.02, .retry_max_s = 0.1,
                     .counters = &st};
    dl_bytesrc *src;
    CHECK_OK(dl_bytesrc_open(url, &io, &src));
    char *got = malloc(len + 1);
    size_t got_len = 0;
    bool restarted = false;
    while (src) {
        long r = src->read(src, got + got_len, 4096 < len + 1 - got_len ? 4096 : len + 1 - got_len);
        if (r <= 0) {
            CHECK_MSG(r == 0, "read failed: %s", dl_error());
            break;
        }
        got_len += (size_t)r;
        if (!restarted && got_len > len / 4) {
            /* The client has read a quarter; most of the file is still on the server. */
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            int again;
            pid = spawn_server(shards, port, &again);
            CHECK(again == port);
            restarted = true;
        }
    }
    dl_bytesrc_close(src);
    CHECK(restarted);
    CHECK_MSG(got_len == len && !memcmp(got, text, len), "%zu of %zu bytes after the restart",
              got_len, len);
    CHECK_MSG(st.retries >= 1, "retries %llu", (unsigned long long)st.retries);
    /* The bytes transferred stay near the file size: the stream resumed, it
     * did not start over. */
    CHECK_MSG(st.bytes < len + len / 2, "%llu bytes for a %zu byte file",
              (unsigned long long)st.bytes, len);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(got);
    free(text);
}

/* A port that was free a moment ago. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

/* The server is down when training starts: the consumer sees timeouts, the
 * producer keeps retrying passes, and batches flow once the server is up. */
static void test_outage_at_start(const char *dir) {
    char shards[300], path[400];
    snprintf(shards, sizeof shards, "%s/outage", dir);
    dl_mkdirs(shards);
    size_t len;
    char *text = make_text(&len, 500);
    snprintf(path, sizeof path, "%s/s.txt", shards);
    write_bytes(path, text, len, "wb");
    free(text);
    int port = free_port();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/s.txt", port);
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = url;
    cfg.batch_size = 4;
    cfg.max_seq_len = 32;
    cfg.shuffle_buffer = 8;
    cfg.max_retries = 1;
    cfg.retry_base_s = 0.01;
    cfg.retry_max_s = 0.05;
    dl_data_text model = fake_text();
    dl_data_stream *s;
    CHECK_OK(dl_data_open_text(&cfg, &model, &s));
    if (!s) return;
    dl_batch b = {0};
    CHECK(dl_data_next_batch(s, &b, 0.3) == DL_DATA_TIMEOUT);
    dl_data_server *srv;
    CHECK_OK(dl_data_server_start(shards, "127.0.0.1", port, &srv));
    CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH);
    dl_data_stats st;
    dl_data_get_stats(s, &st);
    CHECK(st.retries >= 2 && st.failed_shards >= 1 && st.documents > 0);
    dl_data_close(s);
    dl_batch_free(&b);
    dl_data_server_stop(srv);
}

/* A host name that cannot be resolved is a mistake in the URL: opening the
 * stream fails at once with the resolver's reason instead of retrying. The
 * label is longer than DNS allows, so no query leaves the machine. */
static void test_unresolvable_host(void) {
    char url[256];
    snprintf(url, sizeof url, "http://%s.invalid/s.txt",
             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = url;
    cfg.batch_size = 4;
    cfg.max_seq_len = 32;
    cfg.shuffle_buffer = 8;
    dl_data_text model = fake_text();
    dl_data_stream *s = NULL;
    CHECK(dl_data_open_text(&cfg, &model, &s) == -1);
    CHECK(s == NULL);
    CHECK_MSG(strstr(dl_error(), "cannot resolve host") != NULL, "%s", dl_error());
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    /* SIGPIPE keeps its default action: the sources and the server must not
     * die of a peer that resets a connection. */
    char *dir = test_tmpdir();
    test_faults();
    test_server(dir);
    test_killed_server(dir);
    test_outage_at_start(dir);
    test_unresolvable_host();
    rm_rf(dir);
    return dl_test_finish("test_data_http");
}
