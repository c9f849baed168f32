/* HTTP byte source: streams one file with libevent's evhttp client, driven
 * synchronously from the reading thread. The socket is only read while the
 * consumer waits for bytes, so a slow consumer throttles the download through
 * TCP flow control instead of buffering the corpus. Any failure (connection
 * refused or closed, HTTP error, no data for io->timeout_s) drops the
 * connection and, after an exponential backoff, asks again with
 * "Range: bytes=<offset>-" from the byte reached; a server that ignores Range
 * (200) has its first <offset> bytes skipped. Only time spent waiting counts
 * towards the stall timeout: a consumer that pauses for minutes does not make
 * the source look stalled. */
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "data/data_internal.h"

enum req_state { REQ_NONE, REQ_ACTIVE, REQ_COMPLETE, REQ_FAILED };

typedef struct http_src {
    dl_bytesrc base;
    const dl_data_io *io;
    char url[2048];
    char host[256];      /* for connecting (no brackets) */
    char host_hdr[300];  /* for the Host header */
    int port;
    char target[2048];   /* path and query */
    struct event_base *evbase;
    struct event *tick;  /* wakes the loop so stalls and stop requests are noticed */
    struct evhttp_connection *conn;
    struct evbuffer *pending; /* body bytes received, not yet handed out */
    uint64_t offset;          /* file bytes handed out */
    uint64_t requested_from;  /* file offset the active request asked for */
    uint64_t received_end;    /* file offset just past the last received byte */
    uint64_t skip;            /* body bytes to drop (server ignored our Range) */
    int64_t total;            /* file size once known, else -1 */
    enum req_state state;
    int status;               /* HTTP status of the active request */
    bool body_usable;         /* status and Content-Range are what we asked for */
    bool eof;
    bool answered;            /* the server has sent a response head at least once */
    int failures;             /* consecutive failures without progress */
    double last_progress;
    char why[256];
} http_src;

static void set_why(http_src *h, const char *fmt, ...) DL_PRINTF(2, 3);
static void set_why(http_src *h, const char *fmt, ...) {
    if (h->why[0]) return; /* keep the first reason */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->why, sizeof h->why, fmt, ap);
    va_end(ap);
}

static int on_headers(struct evhttp_request *req, void *arg) {
    http_src *h = arg;
    h->answered = true;
    h->status = evhttp_request_get_response_code(req);
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    dl_http_head head;
    dl_http_read_head(h->status, evhttp_find_header(hdrs, "Content-Range"),
                      evhttp_find_header(hdrs, "Content-Length"), h->requested_from, &head);
    h->body_usable = head.body_usable;
    if (head.total >= 0) h->total = head.total;
    if (head.body_usable) h->skip = head.skip;
    if (head.why[0]) {
        const char *line = evhttp_request_get_response_code_line(req);
        if (h->status != 200 && h->status != 206 && line && *line) set_why(h, "%s %s", head.why, line);
        else set_why(h, "%s", head.why);
    }
    return 0;
}

static void on_chunk(struct evhttp_request *req, void *arg) {
    http_src *h = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (!h->body_usable) {
        evbuffer_drain(in, n);
        return;
    }
    if (h->io && h->io->counters) h->io->counters->bytes += n;
    if (h->skip) {
        size_t drop = h->skip < n ? (size_t)h->skip : n;
        evbuffer_drain(in, drop);
        h->skip -= drop;
        n -= drop;
    }
    if (n) {
        evbuffer_remove_buffer(in, h->pending, n);
        h->received_end += n;
        h->failures = 0; /* progress: the retry budget starts over */
    }
    h->last_progress = dl_now();
}

static void on_error(enum evhttp_request_error err, void *arg) {
    http_src *h = arg;
    static const char *names[] = {"timeout", "connection closed early", "invalid header",
                                  "read/write error", "cancelled", "body too long"};
    set_why(h, "%s", (unsigned)err < 6 ? names[err] : "request failed");
    h->state = REQ_FAILED;
}

static void on_done(struct evhttp_request *req, void *arg) {
    http_src *h = arg;
    if (h->state == REQ_FAILED) return;
    if (!req || evhttp_request_get_response_code(req) == 0) {
        if (h->answered)
            set_why(h, "connection failed");
        else
            set_why(h, "cannot connect to %s port %d (connection refused, or the server is not up yet)",
                    h->host, h->port);
        h->state = REQ_FAILED;
        return;
    }
    if (h->why[0] || (!h->body_usable && h->status != 416)) {
        set_why(h, "HTTP %d", h->status);
        h->state = REQ_FAILED;
        return;
    }
    if (h->total >= 0 && h->received_end < (uint64_t)h->total) {
        set_why(h, "response ended at byte %" PRIu64 " of %" PRId64, h->received_end, h->total);
        h->state = REQ_FAILED;
        return;
    }
    h->state = REQ_COMPLETE;
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {}

static void drop_connection(http_src *h) {
    if (h->conn) evhttp_connection_free(h->conn);
    h->conn = NULL;
}

static int start_request(http_src *h) {
    drop_connection(h);
    h->why[0] = 0;
    h->status = 0;
    h->body_usable = false;
    h->skip = 0;
    h->requested_from = h->received_end;
    h->conn = evhttp_connection_base_new(h->evbase, NULL, h->host, (unsigned short)h->port);
    if (!h->conn) return dl_fail("%s: cannot create an HTTP connection", h->url);
    /* Stalls are detected by our own clock (waiting time only), so evhttp's
     * timer must not fire while the consumer is busy elsewhere. */
    evhttp_connection_set_timeout(h->conn, 24 * 3600);
    evhttp_connection_set_max_headers_size(h->conn, 64 * 1024);
    struct evhttp_request *req = evhttp_request_new(on_done, h);
    if (!req) return dl_fail("%s: cannot create an HTTP request", h->url);
    evhttp_request_set_header_cb(req, on_headers);
    evhttp_request_set_chunked_cb(req, on_chunk);
    evhttp_request_set_error_cb(req, on_error);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    evhttp_add_header(out, "Host", h->host_hdr);
    evhttp_add_header(out, "Accept-Encoding", "identity");
    if (h->requested_from > 0) {
        char range[64];
        snprintf(range, sizeof range, "bytes=%" PRIu64 "-", h->requested_from);
        evhttp_add_header(out, "Range", range);
    }
    h->state = REQ_ACTIVE;
    h->last_progress = dl_now();
    DL_DEBUG("data", "GET %s from byte %" PRIu64, h->url, h->requested_from);
    if (evhttp_make_request(h->conn, req, EVHTTP_REQ_GET, h->target)) {
        h->state = REQ_FAILED;
        set_why(h, "cannot send the request");
    }
    return 0;
}

/* Handles a failed request: log, count, back off. -1 when the budget is spent. */
static int after_failure(http_src *h) {
    drop_connection(h);
    h->failures++;
    if (h->io && h->io->counters) h->io->counters->retries++;
    int max = h->io ? h->io->max_retries : 3;
    if (max >= 0 && h->failures > max)
        return dl_fail("%s: giving up after %d failures at byte %" PRIu64 " (last: %s)", h->url,
                       h->failures, h->received_end, h->why);
    double base = h->io ? h->io->retry_base_s : 0.5, cap = h->io ? h->io->retry_max_s : 30;
    double wait = base;
    for (int i = 1; i < h->failures && wait < cap; i++) wait *= 2;
    if (wait > cap) wait = cap;
    DL_WARN("data", "%s: %s at byte %" PRIu64 "; retry %d/%d in %.2f s", h->url, h->why,
            h->received_end, h->failures, max, wait);
    h->state = REQ_NONE;
    if (dl_data_io_sleep(h->io, wait)) return dl_fail("%s: stopped", h->url);
    return 0;
}

static long http_read_guarded(http_src *h, void *buf, size_t cap);

static long http_read(dl_bytesrc *s, void *buf, size_t cap) {
    dl_sigpipe_guard guard;
    dl_sigpipe_guard_enter(&guard);
    long n = http_read_guarded((http_src *)s, buf, cap);
    dl_sigpipe_guard_leave(&guard);
    return n;
}

static long http_read_guarded(http_src *h, void *buf, size_t cap) {
    double wait_start = dl_now();
    double timeout = h->io && h->io->timeout_s > 0 ? h->io->timeout_s : 30;
    for (;;) {
        size_t avail = evbuffer_get_length(h->pending);
        if (avail) {
            int n = evbuffer_remove(h->pending, buf, cap < avail ? cap : avail);
            if (n < 0) return dl_fail("%s: buffer error", h->url);
            h->offset += (uint64_t)n;
            return n;
        }
        if (h->eof) return 0;
        if (dl_data_io_stopped(h->io)) return dl_fail("%s: stopped", h->url);
        switch (h->state) {
        case REQ_COMPLETE:
            drop_connection(h);
            h->eof = true;
            continue;
        case REQ_FAILED:
            if (after_failure(h)) return -1;
            wait_start = dl_now();
            continue;
        case REQ_NONE:
            if (start_request(h)) return -1;
            continue;
        case REQ_ACTIVE:
            break;
        }
        double since = dl_now() - (h->last_progress > wait_start ? h->last_progress : wait_start);
        if (since > timeout) {
            set_why(h, "no data for %.1f s", since);
            h->state = REQ_FAILED;
            continue;
        }
        event_base_loop(h->evbase, EVLOOP_ONCE);
    }
}

static void http_close(dl_bytesrc *s) {
    http_src *h = (http_src *)s;
    drop_connection(h);
    if (h->tick) event_free(h->tick);
    if (h->pending) evbuffer_free(h->pending);
    if (h->evbase) event_base_free(h->evbase);
    free(h);
}

int dl_http_check_host(const char *url) {
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    const char *host = uri ? evhttp_uri_get_host(uri) : NULL;
    if (!host || !*host) {
        if (uri) evhttp_uri_free(uri);
        return dl_fail("%s: expected http://host[:port]/path", url);
    }
    char name[256];
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']')
        snprintf(name, sizeof name, "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(name, sizeof name, "%s", host);
    evhttp_uri_free(uri);
    struct addrinfo hints = {0}, *found = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int err = getaddrinfo(name, NULL, &hints, &found);
    if (err) return dl_fail("%s: cannot resolve host '%s': %s", url, name, gai_strerror(err));
    freeaddrinfo(found);
    return 0;
}

int dl_bytesrc_open_http(const char *url, const dl_data_io *io, dl_bytesrc **out) {
    *out = NULL;
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    if (!uri) return dl_fail("cannot parse URL %s", url);
    const char *scheme = evhttp_uri_get_scheme(uri), *host = evhttp_uri_get_host(uri);
    if (!scheme || strcmp(scheme, "http") || !host || !*host) {
        evhttp_uri_free(uri);
        return dl_fail("%s: expected http://host[:port]/path", url);
    }
    http_src *h = dl_calloc(1, sizeof *h);
    if (!h) {
        evhttp_uri_free(uri);
        return -1;
    }
    h->base.read = http_read;
    h->base.close = http_close;
    h->io = io;
    h->total = -1;
    snprintf(h->url, sizeof h->url, "%s", url);
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']')
        snprintf(h->host, sizeof h->host, "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(h->host, sizeof h->host, "%s", host);
    h->port = evhttp_uri_get_port(uri) > 0 ? evhttp_uri_get_port(uri) : 80;
    snprintf(h->host_hdr, sizeof h->host_hdr, "%s:%d", host, h->port);
    const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
    snprintf(h->target, sizeof h->target, "%s%s%s", path && *path ? path : "/", query ? "?" : "",
             query ? query : "");
    evhttp_uri_free(uri);
    h->evbase = event_base_new();
    h->pending = evbuffer_new();
    if (h->evbase) h->tick = event_new(h->evbase, -1, EV_PERSIST, on_tick, h);
    if (!h->evbase || !h->pending || !h->tick) {
        http_close(&h->base);
        return dl_fail("%s: cannot create the event loop", url);
    }
    struct timeval tv = {0, 100 * 1000};
    event_add(h->tick, &tv);
    *out = &h->base;
    return 0;
}
