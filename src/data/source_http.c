/* HTTP(S) byte source: streams one file with libevent's evhttp client, driven
 * synchronously from the reading thread. The socket is only read while the
 * consumer waits for bytes, so a slow consumer throttles the download through
 * TCP flow control instead of buffering the corpus. Any failure (connection
 * refused or closed, HTTP error, no data for io->timeout_s) drops the
 * connection and, after an exponential backoff, asks again with
 * "Range: bytes=<offset>-" from the byte reached; a server that ignores Range
 * (200) has its first <offset> bytes skipped. Only time spent waiting counts
 * towards the stall timeout: a consumer that pauses for minutes does not make
 * the source look stalled.
 *
 * https:// runs the same requests over OpenSSL bufferevents; the certificate
 * is checked against the system's CAs (or dl_data_io.ca_file) and the URL's
 * host name. Redirects (301/302/303/307/308) are followed, at most
 * DL_HTTP_MAX_REDIRECTS hops, never from https to plain http. Each retry starts
 * again at the URL given, so a storage URL that expired meanwhile is asked for
 * anew. A certificate that is refused or a redirect that is refused is not an
 * outage: the source fails for good (dl_bytesrc.failed_for_good) at once. */
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>
#include <stdatomic.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "data/data_internal.h"

enum req_state { REQ_NONE, REQ_ACTIVE, REQ_COMPLETE, REQ_FAILED, REQ_REDIRECT };

/* Where one request goes: the URL given, or where a redirect pointed. */
typedef struct http_target {
    char url[2048];
    bool tls;
    char host[256];      /* for connecting and certificate checks (no brackets) */
    char host_hdr[300];  /* for the Host header and relative redirects */
    int port;
    char target[2048];   /* path and query */
} http_target;

typedef struct http_src {
    dl_bytesrc base;
    const dl_data_io *io;
    char url[2048];      /* as given: every new attempt starts here */
    http_target at;      /* the current request's target */
    int redirects;       /* hops followed since the attempt started */
    char location[2048]; /* Location of a redirect answer */
    SSL_CTX *tls;        /* made on the first https connection */
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
    bool permanent;           /* the failure in why is not worth a retry */
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

/* Fills *t from an absolute http:// or https:// URL. */
static int parse_target(const char *url, http_target *t) {
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    if (!uri) return dl_fail("cannot parse URL %s", url);
    const char *scheme = evhttp_uri_get_scheme(uri), *host = evhttp_uri_get_host(uri);
    bool http = scheme && !strcasecmp(scheme, "http"), https = scheme && !strcasecmp(scheme, "https");
    if (!(http || https) || !host || !*host) {
        evhttp_uri_free(uri);
        return dl_fail("%s: expected http(s)://host[:port]/path", url);
    }
    *t = (http_target){.tls = https};
    snprintf(t->url, sizeof t->url, "%s", url);
    size_t hl = strlen(host);
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']')
        snprintf(t->host, sizeof t->host, "%.*s", (int)(hl - 2), host + 1);
    else
        snprintf(t->host, sizeof t->host, "%s", host);
    int default_port = https ? 443 : 80;
    t->port = evhttp_uri_get_port(uri) > 0 ? evhttp_uri_get_port(uri) : default_port;
    if (t->port == default_port)
        snprintf(t->host_hdr, sizeof t->host_hdr, "%s", host);
    else
        snprintf(t->host_hdr, sizeof t->host_hdr, "%s:%d", host, t->port);
    const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
    snprintf(t->target, sizeof t->target, "%s%s%s", path && *path ? path : "/", query ? "?" : "",
             query ? query : "");
    evhttp_uri_free(uri);
    return 0;
}

/* A Location header made absolute against the URL that answered with it:
 * absolute URLs, "//host/path", "/path" and "path" relative to the folder. */
static void resolve_location(const http_target *from, const char *loc, char *out, size_t cap) {
    const char *scheme = from->tls ? "https" : "http";
    size_t s = strspn(loc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
    if (s > 0 && loc[s] == ':') {
        snprintf(out, cap, "%s", loc);
    } else if (loc[0] == '/' && loc[1] == '/') {
        snprintf(out, cap, "%s:%s", scheme, loc);
    } else if (loc[0] == '/') {
        snprintf(out, cap, "%s://%s%s", scheme, from->host_hdr, loc);
    } else {
        size_t dir = strcspn(from->target, "?#");
        while (dir > 0 && from->target[dir - 1] != '/') dir--;
        snprintf(out, cap, "%s://%s%.*s%s", scheme, from->host_hdr, (int)dir, from->target, loc);
    }
}

static bool is_redirect(int status) {
    return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

static int on_headers(struct evhttp_request *req, void *arg) {
    http_src *h = arg;
    h->answered = true;
    h->status = evhttp_request_get_response_code(req);
    struct evkeyvalq *hdrs = evhttp_request_get_input_headers(req);
    h->body_usable = false;
    if (is_redirect(h->status)) {
        const char *loc = evhttp_find_header(hdrs, "Location");
        if (loc && *loc)
            snprintf(h->location, sizeof h->location, "%s", loc);
        else
            set_why(h, "HTTP %d without a Location header", h->status);
        return 0;
    }
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

/* After a failed connection: if TLS was the reason, say so (a refused
 * certificate is final) and return true. */
static bool explain_tls_failure(http_src *h) {
    if (!h->at.tls || !h->conn) return false;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(h->conn);
    SSL *ssl = bev ? bufferevent_openssl_get_ssl(bev) : NULL;
    if (!ssl) return false;
    /* Without checks the result is still recorded, but refused nothing. */
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK && !(h->io && h->io->insecure_tls)) {
        set_why(h, "the TLS certificate of %s was refused: %s (a private CA: --ca-file FILE)",
                h->at.host, X509_verify_cert_error_string(verify));
        h->permanent = true;
        return true;
    }
    unsigned long err = bev ? bufferevent_get_openssl_error(bev) : 0;
    if (err && !h->answered) {
        char text[160];
        ERR_error_string_n(err, text, sizeof text);
        set_why(h, "TLS handshake with %s port %d failed: %s", h->at.host, h->at.port, text);
        return true;
    }
    return false;
}

static void on_error(enum evhttp_request_error err, void *arg) {
    http_src *h = arg;
    if (explain_tls_failure(h)) {
        h->state = REQ_FAILED;
        return;
    }
    static const char *names[] = {"timeout", "connection closed early", "invalid header",
                                  "read/write error", "cancelled", "body too long"};
    set_why(h, "%s", (unsigned)err < 6 ? names[err] : "request failed");
    h->state = REQ_FAILED;
}

static void on_done(struct evhttp_request *req, void *arg) {
    http_src *h = arg;
    if (h->state == REQ_FAILED) return;
    if (!req || evhttp_request_get_response_code(req) == 0) {
        if (explain_tls_failure(h))
            ;
        else if (h->answered)
            set_why(h, "connection failed");
        else
            set_why(h, "cannot connect to %s port %d (connection refused, or the server is not up yet)",
                    h->at.host, h->at.port);
        h->state = REQ_FAILED;
        return;
    }
    if (!h->why[0] && h->location[0]) {
        h->state = REQ_REDIRECT;
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

static atomic_flag insecure_warned = ATOMIC_FLAG_INIT;

static int make_tls_context(http_src *h) {
    const char *ca_file = h->io ? h->io->ca_file : NULL;
    bool insecure = h->io && h->io->insecure_tls;
    h->tls = SSL_CTX_new(TLS_client_method());
    if (!h->tls) return dl_fail("%s: cannot create a TLS context", h->url);
    SSL_CTX_set_min_proto_version(h->tls, TLS1_2_VERSION);
    SSL_CTX_set_verify(h->tls, insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    if (insecure && !atomic_flag_test_and_set(&insecure_warned))
        DL_WARN("data", "--insecure-tls: certificates of https data sources are not checked; "
                        "anyone on the path can read or change the data");
    if (ca_file && *ca_file) {
        if (SSL_CTX_load_verify_locations(h->tls, ca_file, NULL) != 1) {
            char text[160];
            ERR_error_string_n(ERR_get_error(), text, sizeof text);
            ERR_clear_error();
            h->base.failed_for_good = true;
            return dl_fail("cannot load CA certificates from %s (PEM expected): %s", ca_file, text);
        }
    } else if (SSL_CTX_set_default_verify_paths(h->tls) != 1) {
        ERR_clear_error();
        DL_WARN("data", "cannot load the system's CA certificates (Debian: ca-certificates); "
                        "https sources will fail unless --ca-file is given");
    }
    return 0;
}

/* A TLS bufferevent for the current target, host name checked. */
static struct bufferevent *tls_bufferevent(http_src *h) {
    if (!h->tls && make_tls_context(h)) return NULL;
    SSL *ssl = SSL_new(h->tls);
    if (!ssl) {
        dl_fail("%s: cannot create a TLS session", h->url);
        return NULL;
    }
    unsigned char addr[16];
    bool ip_literal = inet_pton(AF_INET, h->at.host, addr) == 1 ||
                      inet_pton(AF_INET6, h->at.host, addr) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    int ok = 1;
    if (!ip_literal) ok = SSL_set_tlsext_host_name(ssl, h->at.host); /* SNI takes names only */
    if (ok && !(h->io && h->io->insecure_tls)) {
        if (ip_literal) {
            ok = X509_VERIFY_PARAM_set1_ip_asc(param, h->at.host);
        } else {
            X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = X509_VERIFY_PARAM_set1_host(param, h->at.host, 0);
        }
    }
    if (!ok) {
        SSL_free(ssl);
        dl_fail("%s: cannot set the TLS host name %s", h->url, h->at.host);
        return NULL;
    }
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        h->evbase, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (!bev) {
        SSL_free(ssl);
        dl_fail("%s: cannot create a TLS connection", h->url);
        return NULL;
    }
    /* Many servers close without a TLS close_notify; Content-Length still
     * tells a complete body from a cut one. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

/* Sends GET for h->at from the byte reached. */
static int send_request(http_src *h) {
    drop_connection(h);
    h->why[0] = 0;
    h->location[0] = 0;
    h->status = 0;
    h->body_usable = false;
    h->skip = 0;
    h->requested_from = h->received_end;
    if (h->at.tls) {
        struct bufferevent *bev = tls_bufferevent(h);
        if (!bev) return -1;
        h->conn = evhttp_connection_base_bufferevent_new(h->evbase, NULL, bev, h->at.host,
                                                         (unsigned short)h->at.port);
        if (!h->conn) bufferevent_free(bev);
    } else {
        h->conn = evhttp_connection_base_new(h->evbase, NULL, h->at.host, (unsigned short)h->at.port);
    }
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
    evhttp_add_header(out, "Host", h->at.host_hdr);
    evhttp_add_header(out, "Accept-Encoding", "identity");
    if (h->requested_from > 0) {
        char range[64];
        snprintf(range, sizeof range, "bytes=%" PRIu64 "-", h->requested_from);
        evhttp_add_header(out, "Range", range);
    }
    h->state = REQ_ACTIVE;
    h->last_progress = dl_now();
    DL_DEBUG("data", "GET %s from byte %" PRIu64, h->at.url, h->requested_from);
    if (evhttp_make_request(h->conn, req, EVHTTP_REQ_GET, h->at.target)) {
        h->state = REQ_FAILED;
        set_why(h, "cannot send the request");
    }
    return 0;
}

/* A new attempt: back to the URL given. */
static int start_request(http_src *h) {
    h->redirects = 0;
    h->permanent = false;
    if (parse_target(h->url, &h->at)) return -1;
    return send_request(h);
}

/* Follows the Location of a redirect answer; -1 (for good) when refused. */
static int follow_redirect(http_src *h) {
    char next[2048];
    resolve_location(&h->at, h->location, next, sizeof next);
    drop_connection(h);
    h->base.failed_for_good = true; /* for the refusals below */
    if (++h->redirects > DL_HTTP_MAX_REDIRECTS)
        return dl_fail("%s: more than %d redirects (the last to %s)", h->url, DL_HTTP_MAX_REDIRECTS,
                       next);
    http_target to;
    if (parse_target(next, &to))
        return dl_fail("%s: redirected to %s, which is not an http(s) URL", h->url, next);
    if (h->at.tls && !to.tls)
        return dl_fail("%s: refusing the redirect from https to plain http (%s): the data would "
                       "travel unprotected; give that URL as --data if this is acceptable",
                       h->url, next);
    h->base.failed_for_good = false;
    DL_DEBUG("data", "%s: redirected (%d) to %s", h->at.url, h->status, next);
    h->at = to;
    return send_request(h);
}

/* Handles a failed request: log, count, back off. -1 when the budget is spent. */
static int after_failure(http_src *h) {
    drop_connection(h);
    if (h->permanent) {
        h->base.failed_for_good = true;
        return dl_fail("%s: %s", h->url, h->why);
    }
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
    if (h->failures == 1 && max > 0) {
        /* Said once, up front: how long a mistyped address will keep us waiting. */
        double budget = 0, w = base;
        for (int i = 0; i < max; i++, w = w * 2 > cap ? cap : w * 2) budget += w;
        DL_WARN("data", "%s: %s at byte %" PRIu64 "; retrying %d times over about %.0f s before giving up "
                "(check the address in --data if this persists)", h->url, h->why, h->received_end, max, budget);
    }
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
        case REQ_REDIRECT:
            if (follow_redirect(h)) return -1;
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
    if (h->tls) SSL_CTX_free(h->tls);
    if (h->evbase) event_base_free(h->evbase);
    free(h);
}

int dl_http_check_host(const char *url) {
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    const char *host = uri ? evhttp_uri_get_host(uri) : NULL;
    if (!host || !*host) {
        if (uri) evhttp_uri_free(uri);
        return dl_fail("%s: expected http(s)://host[:port]/path", url);
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
    http_target first;
    if (parse_target(url, &first)) return -1;
    http_src *h = dl_calloc(1, sizeof *h);
    if (!h) return -1;
    h->base.read = http_read;
    h->base.close = http_close;
    h->io = io;
    h->total = -1;
    h->at = first;
    snprintf(h->url, sizeof h->url, "%s", url);
    h->evbase = event_base_new();
    h->pending = evbuffer_new();
    if (h->evbase) h->tick = event_new(h->evbase, -1, EV_PERSIST, on_tick, h);
    if (!h->evbase || !h->pending || !h->tick) {
        http_close(&h->base);
        return dl_fail("%s: cannot create the event loop", url);
    }
    struct timeval tv = {0, 100 * 1000};
    if (event_add(h->tick, &tv)) {
        http_close(&h->base);
        return dl_fail("%s: cannot start the event loop's timer", url);
    }
    *out = &h->base;
    return 0;
}

int dl_bytesrc_open_http_at(const char *url, const dl_data_io *io, uint64_t offset,
                            dl_bytesrc **out) {
    if (dl_bytesrc_open_http(url, io, out)) return -1;
    /* The first request asks from here, as a retry after a failure does. */
    http_src *h = (http_src *)*out;
    h->offset = offset;
    h->received_end = offset;
    return 0;
}
