/* The shard server behind `dedloc serve-data`: evhttp on its own thread and
 * event loop. Files go out with evbuffer_add_file (sendfile or mmap), so a
 * large shard is never copied into memory and a slow client simply slows its
 * own connection. Ranges make resuming after a failure cheap. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>

#include "data/data_internal.h"

enum { MAX_INDEX_NAMES = 1 << 20 };

struct dl_data_server {
    char dir[PATH_MAX];
    struct event_base *base;
    struct evhttp *http;
    struct event *wake;
    int wake_fds[2];
    int port;
    pthread_t thread;
    bool thread_started;
};

static bool servable_name(const char *name) {
    if (!*name || name[0] == '.' || strlen(name) > 255) return false;
    for (const char *p = name; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20) return false;
    return true;
}

static void reply_error(struct evhttp_request *req, int code, const char *reason) {
    struct evbuffer *body = evbuffer_new();
    if (body) evbuffer_add_printf(body, "%d %s\n", code, reason);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, code, reason, body);
    if (body) evbuffer_free(body);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names of the regular files (what a client reads as index.txt). */
static void send_listing(dl_data_server *srv, struct evhttp_request *req, bool head) {
    DIR *d = opendir(srv->dir);
    if (!d) {
        reply_error(req, 500, "Internal Server Error");
        return;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < MAX_INDEX_NAMES) {
        if (!servable_name(e->d_name) || !strcmp(e->d_name, "index.txt")) continue;
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", srv->dir, e->d_name);
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *grown);
            if (!grown) break;
            names = grown;
        }
        names[count] = strdup(e->d_name);
        if (names[count]) count++;
    }
    closedir(d);
    if (count) qsort(names, count, sizeof *names, cmp_str); /* names is NULL when empty */
    struct evbuffer *body = evbuffer_new();
    for (size_t i = 0; i < count; i++) {
        if (body) evbuffer_add_printf(body, "%s\n", names[i]);
        free(names[i]);
    }
    free(names);
    if (!body) {
        reply_error(req, 500, "Internal Server Error");
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    if (head) evbuffer_drain(body, evbuffer_get_length(body));
    evhttp_send_reply(req, 200, "OK", body);
    evbuffer_free(body);
}

/* Parses a single range "bytes=a-b", "bytes=a-" or "bytes=-n" against size.
 * 1: range set, 0: no (usable) range, serve everything, -1: unsatisfiable. */
static int parse_range(const char *hdr, uint64_t size, uint64_t *first, uint64_t *last) {
    if (!hdr || strncmp(hdr, "bytes=", 6) || strchr(hdr, ',')) return 0;
    const char *p = hdr + 6;
    char *end;
    if (*p == '-') {
        errno = 0;
        unsigned long long n = strtoull(p + 1, &end, 10);
        if (errno || end == p + 1 || *end) return 0;
        if (n == 0 || size == 0) return -1;
        *first = n >= size ? 0 : size - n;
        *last = size - 1;
        return 1;
    }
    errno = 0;
    unsigned long long a = strtoull(p, &end, 10);
    if (errno || end == p || *end != '-') return 0;
    p = end + 1;
    unsigned long long b = size ? size - 1 : 0;
    if (*p) {
        b = strtoull(p, &end, 10);
        if (errno || *end || b < a) return 0;
        if (b >= size) b = size - 1;
    }
    if (a >= size) return -1;
    *first = a;
    *last = b;
    return 1;
}

static void send_file(dl_data_server *srv, struct evhttp_request *req, const char *name, bool head) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", srv->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        reply_error(req, 404, "Not Found");
        return;
    }
    uint64_t size = (uint64_t)st.st_size, first = 0, last = size ? size - 1 : 0;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    const char *range = evhttp_find_header(evhttp_request_get_input_headers(req), "Range");
    int r = parse_range(range, size, &first, &last);
    char value[96];
    if (r < 0) {
        close(fd);
        snprintf(value, sizeof value, "bytes */%" PRIu64, size);
        evhttp_add_header(h, "Content-Range", value);
        reply_error(req, 416, "Range Not Satisfiable");
        return;
    }
    uint64_t length = size ? last - first + 1 : 0;
    evhttp_add_header(h, "Accept-Ranges", "bytes");
    size_t nl = strlen(name);
    evhttp_add_header(h, "Content-Type", nl > 3 && !strcmp(name + nl - 3, ".gz")
                                             ? "application/gzip"
                                             : "text/plain; charset=utf-8");
    snprintf(value, sizeof value, "%" PRIu64, length);
    evhttp_add_header(h, "Content-Length", value);
    if (r > 0) {
        snprintf(value, sizeof value, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
        evhttp_add_header(h, "Content-Range", value);
    }
    struct evbuffer *body = evbuffer_new();
    if (!body) {
        close(fd);
        reply_error(req, 500, "Internal Server Error");
        return;
    }
    if (head || length == 0) {
        close(fd);
    } else if (evbuffer_add_file(body, fd, (ev_off_t)first, (ev_off_t)length)) {
        /* evbuffer_add_file closes fd on failure too */
        evbuffer_free(body);
        reply_error(req, 500, "Internal Server Error");
        return;
    }
    DL_DEBUG("data", "serve %s bytes %" PRIu64 "-%" PRIu64 "%s", name, first, first + length,
             head ? " (HEAD)" : "");
    evhttp_send_reply(req, r > 0 ? 206 : 200, r > 0 ? "Partial Content" : "OK", body);
    evbuffer_free(body);
}

static void handle(struct evhttp_request *req, void *arg) {
    dl_data_server *srv = arg;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        reply_error(req, 405, "Method Not Allowed");
        return;
    }
    bool head = cmd == EVHTTP_REQ_HEAD;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path || path[0] != '/') {
        reply_error(req, 400, "Bad Request");
        return;
    }
    size_t decoded_len = 0;
    char *name = evhttp_uridecode(path + 1, 0, &decoded_len);
    if (!name || strlen(name) != decoded_len) {
        free(name);
        reply_error(req, 400, "Bad Request");
        return;
    }
    char own_index[PATH_MAX];
    snprintf(own_index, sizeof own_index, "%s/index.txt", srv->dir);
    if (!*name || (!strcmp(name, "index.txt") && !dl_file_exists(own_index)))
        send_listing(srv, req, head);
    else if (!servable_name(name))
        reply_error(req, 404, "Not Found");
    else
        send_file(srv, req, name, head);
    free(name);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    dl_data_server *srv = arg;
    event_base_loopbreak(srv->base);
}

static void *server_main(void *arg) {
    dl_data_server *srv = arg;
    /* A client that disconnects mid-reply must not kill the process. */
    dl_data_block_sigpipe();
    event_base_dispatch(srv->base);
    return NULL;
}

int dl_data_server_port(const dl_data_server *srv) { return srv ? srv->port : -1; }

void dl_data_server_stop(dl_data_server *srv) {
    if (!srv) return;
    if (srv->thread_started) {
        char byte = 1;
        ssize_t w = write(srv->wake_fds[1], &byte, 1);
        (void)w;
        pthread_join(srv->thread, NULL);
    }
    if (srv->wake) event_free(srv->wake);
    if (srv->http) evhttp_free(srv->http);
    if (srv->base) event_base_free(srv->base);
    if (srv->wake_fds[0] >= 0) close(srv->wake_fds[0]);
    if (srv->wake_fds[1] >= 0) close(srv->wake_fds[1]);
    free(srv);
}

int dl_data_server_start(const char *dir, const char *host, int port, dl_data_server **out) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return dl_fail("%s is not a directory", dir);
    if (port < 0 || port > 65535) return dl_fail("port %d is out of range", port);
    dl_data_server *srv = dl_calloc(1, sizeof *srv);
    if (!srv) return -1;
    srv->wake_fds[0] = srv->wake_fds[1] = -1;
    if (!realpath(dir, srv->dir)) snprintf(srv->dir, sizeof srv->dir, "%s", dir);
    if (pipe2(srv->wake_fds, O_CLOEXEC)) {
        dl_fail("pipe: %s", strerror(errno));
        goto fail;
    }
    srv->base = event_base_new();
    srv->http = srv->base ? evhttp_new(srv->base) : NULL;
    srv->wake = srv->base ? event_new(srv->base, srv->wake_fds[0], EV_READ, on_wake, srv) : NULL;
    if (!srv->http || !srv->wake || event_add(srv->wake, NULL)) {
        dl_fail("cannot create the HTTP server");
        goto fail;
    }
    evhttp_set_allowed_methods(srv->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    /* Clients read with back-pressure and may pause between reads for as
     * long as a training step takes; they resume with Range if we drop them. */
    evhttp_set_timeout(srv->http, 600);
    evhttp_set_max_headers_size(srv->http, 16 * 1024);
    evhttp_set_max_body_size(srv->http, 0);
    evhttp_set_gencb(srv->http, handle, srv);
    struct evhttp_bound_socket *sock =
        evhttp_bind_socket_with_handle(srv->http, host, (ev_uint16_t)port);
    if (!sock) {
        dl_fail("cannot listen on %s port %d: %s", host, port, strerror(errno));
        goto fail;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl)) {
        dl_fail("getsockname: %s", strerror(errno));
        goto fail;
    }
    srv->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (pthread_create(&srv->thread, NULL, server_main, srv)) {
        dl_fail("cannot start the server thread");
        goto fail;
    }
    srv->thread_started = true;
    *out = srv;
    return 0;
fail:
    dl_data_server_stop(srv);
    return -1;
}
