/* https:// data and redirects, against scripted servers on 127.0.0.1 that this
 * test runs itself (TLS through OpenSSL, plain HTTP beside it). The test makes
 * its own CA and server certificates with OpenSSL at start: a good one (the
 * test CA, IP 127.0.0.1), one for another name, an expired one and a
 * self-signed one. What must hold:
 *   - with the test CA (ca_file) the bytes that arrive are the file's bytes,
 *     also when the first response is cut mid-body (resumed with Range);
 *   - a wrong name, an expired or a self-signed certificate fails at once,
 *     with the reason, without retries; insecure_tls accepts all of them; no
 *     SNI is sent for an IP address;
 *   - redirect chains (301/302/303/307/308, absolute and relative Locations)
 *     are followed up to 5 hops, http->http and https->https; a 6th hop and
 *     https->http are refused with a clear message;
 *   - by host name (where "localhost" resolves to 127.0.0.1 first): the
 *     name is sent (SNI) and checked against the certificate's DNS names;
 *   - `dedloc data` takes --ca-file and --insecure-tls (warned once). */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "data_test_util.h"
#include "dl_test.h"

/* ---- certificates ------------------------------------------------------------- */
typedef struct {
    X509 *cert;
    EVP_PKEY *key;
} test_cert;

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (!ext || !X509_add_ext(x, ext, -1)) {
        fprintf(stderr, "cannot add certificate extension %s\n", value);
        exit(1);
    }
    X509_EXTENSION_free(ext);
}

/* A certificate valid from/until days relative to now, signed by issuer (NULL:
 * self-signed). san: subjectAltName, e.g. "IP:127.0.0.1". */
static test_cert make_cert(const char *cn, const char *san, const test_cert *issuer, long from_days,
                           long until_days, bool ca) {
    static long serial = 1;
    test_cert c = {X509_new(), EVP_EC_gen("P-256")};
    if (!c.cert || !c.key) {
        fprintf(stderr, "cannot make a test key\n");
        exit(1);
    }
    X509_set_version(c.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c.cert), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c.cert), from_days * 86400);
    X509_gmtime_adj(X509_getm_notAfter(c.cert), until_days * 86400);
    X509_set_pubkey(c.cert, c.key);
    X509_NAME *name = X509_get_subject_name(c.cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c.cert, issuer ? X509_get_subject_name(issuer->cert) : name);
    add_ext(c.cert, issuer ? issuer->cert : NULL, NID_basic_constraints,
            ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (ca) add_ext(c.cert, NULL, NID_key_usage, "critical,keyCertSign,cRLSign");
    add_ext(c.cert, NULL, NID_subject_key_identifier, "hash");
    if (issuer) add_ext(c.cert, issuer->cert, NID_authority_key_identifier, "keyid:always");
    if (san) add_ext(c.cert, NULL, NID_subject_alt_name, san);
    if (!X509_sign(c.cert, issuer ? issuer->key : c.key, EVP_sha256())) {
        fprintf(stderr, "cannot sign a test certificate\n");
        exit(1);
    }
    return c;
}

static void free_cert(test_cert *c) {
    X509_free(c->cert);
    EVP_PKEY_free(c->key);
}

static void write_pem(const char *path, X509 *cert) {
    FILE *f = fopen(path, "w");
    if (!f || !PEM_write_X509(f, cert)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* ---- a scripted server: TLS (ctx set) or plain HTTP ------------------------------
 * Routes:
 *   /file.txt       the data, Range answered with 206
 *   /cut.txt        the first answer promises the whole file and stops after
 *                   `cut` bytes (the connection drops); later ones as /file.txt
 *   /hop/N          N > 0: a redirect to /hop/N-1 (status and Location form vary
 *                   with N); /hop/0 is the data
 *   /to-http        301 to http://127.0.0.1:<other_port or its own>/file.txt
 *   /d/index.txt    "a.txt\nb.txt\n"; /d/a.txt and /d/b.txt the two halves */
typedef struct {
    SSL_CTX *ctx;
    const char *data;
    size_t len, cut;
    int other_port;
    int listen_fd, port;
    atomic_int requests, handshake_failures;
    char sni[64];              /* server name the last TLS client sent, "" if none */
    long range_starts[64];
    bool cut_done;
    atomic_int stop;
    pthread_t thread;
} test_server;

typedef struct {
    int fd;
    SSL *ssl;
} server_conn;

static void conn_write(server_conn *c, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        long w = c->ssl ? SSL_write(c->ssl, b, (int)n) : (long)send(c->fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        b += w;
        n -= (size_t)w;
    }
}

static void conn_printf(server_conn *c, const char *fmt, ...) DL_PRINTF(2, 3);
static void conn_printf(server_conn *c, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    conn_write(c, text, (size_t)n);
}

static void serve_body(server_conn *c, const char *body, size_t len, long from, size_t stop_after) {
    size_t first = from > 0 ? (size_t)from : 0;
    if (first > len) first = len;
    if (from > 0)
        conn_printf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %zu\r\nContent-Range: bytes "
                       "%zu-%zu/%zu\r\nConnection: close\r\n\r\n",
                    len - first, first, len - 1, len);
    else
        conn_printf(c, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", len);
    size_t n = len - first;
    if (stop_after < n) n = stop_after;
    conn_write(c, body + first, n);
}

static void redirect(server_conn *c, int status, const char *location) {
    conn_printf(c, "HTTP/1.1 %d Moved\r\nLocation: %s\r\nContent-Length: 6\r\nConnection: close\r\n\r\nmoved\n",
                status, location);
}

static void route(test_server *ts, server_conn *c, const char *path, long from) {
    const char *scheme = ts->ctx ? "https" : "http";
    int hop;
    if (!strcmp(path, "/file.txt")) {
        serve_body(c, ts->data, ts->len, from, SIZE_MAX);
    } else if (!strcmp(path, "/cut.txt")) {
        bool first = !ts->cut_done;
        ts->cut_done = true;
        serve_body(c, ts->data, ts->len, from, first ? ts->cut : SIZE_MAX);
    } else if (sscanf(path, "/hop/%d", &hop) == 1 && hop > 0) {
        static const int codes[] = {301, 302, 303, 307, 308};
        char loc[256];
        if (hop % 3 == 0)
            snprintf(loc, sizeof loc, "%s://127.0.0.1:%d/hop/%d", scheme, ts->port, hop - 1);
        else if (hop % 3 == 1)
            snprintf(loc, sizeof loc, "/hop/%d", hop - 1);
        else
            snprintf(loc, sizeof loc, "%d", hop - 1); /* relative to /hop/ */
        redirect(c, codes[hop % 5], loc);
    } else if (!strcmp(path, "/hop/0")) {
        serve_body(c, ts->data, ts->len, from, SIZE_MAX);
    } else if (!strcmp(path, "/to-http")) {
        char loc[256];
        snprintf(loc, sizeof loc, "http://127.0.0.1:%d/file.txt",
                 ts->other_port ? ts->other_port : ts->port);
        redirect(c, 301, loc);
    } else if (!strcmp(path, "/d/index.txt")) {
        serve_body(c, "a.txt\nb.txt\n", 12, from, SIZE_MAX);
    } else if (!strcmp(path, "/d/a.txt")) {
        serve_body(c, ts->data, ts->len / 2, from, SIZE_MAX);
    } else if (!strcmp(path, "/d/b.txt")) {
        serve_body(c, ts->data + ts->len / 2, ts->len - ts->len / 2, from, SIZE_MAX);
    } else {
        conn_printf(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
}

static void *server_main(void *arg) {
    test_server *ts = arg;
    while (!atomic_load(&ts->stop)) {
        struct pollfd p = {ts->listen_fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        server_conn c = {accept(ts->listen_fd, NULL, NULL), NULL};
        if (c.fd < 0) continue;
        struct timeval tv = {3, 0}; /* a client that goes silent cannot hang the server */
        setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (ts->ctx) {
            c.ssl = SSL_new(ts->ctx);
            SSL_set_fd(c.ssl, c.fd);
            if (SSL_accept(c.ssl) != 1) {
                atomic_fetch_add(&ts->handshake_failures, 1);
                ERR_clear_error();
                SSL_free(c.ssl);
                close(c.fd);
                continue;
            }
            const char *sni = SSL_get_servername(c.ssl, TLSEXT_NAMETYPE_host_name);
            snprintf(ts->sni, sizeof ts->sni, "%s", sni ? sni : "");
        }
        char req[8192] = {0};
        size_t got = 0;
        while (got < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
            long r = c.ssl ? SSL_read(c.ssl, req + got, (int)(sizeof req - 1 - got))
                           : (long)recv(c.fd, req + got, sizeof req - 1 - got, 0);
            if (r <= 0) break;
            got += (size_t)r;
            req[got] = 0;
        }
        char path[256] = "";
        sscanf(req, "GET %255s", path);
        const char *range = strstr(req, "Range: bytes=");
        long from = range ? atol(range + 13) : -1;
        int k = atomic_fetch_add(&ts->requests, 1);
        if (k < 64) ts->range_starts[k] = from;
        route(ts, &c, path, from);
        if (c.ssl) {
            SSL_shutdown(c.ssl);
            SSL_free(c.ssl);
        }
        close(c.fd);
    }
    return NULL;
}

static void server_start(test_server *ts) {
    ts->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ts->listen_fd < 0 || bind(ts->listen_fd, (struct sockaddr *)&a, sizeof a) ||
        listen(ts->listen_fd, 16)) {
        perror("test server");
        exit(1);
    }
    socklen_t l = sizeof a;
    getsockname(ts->listen_fd, (struct sockaddr *)&a, &l);
    ts->port = ntohs(a.sin_port);
    pthread_create(&ts->thread, NULL, server_main, ts);
}

static void server_stop(test_server *ts) {
    atomic_store(&ts->stop, 1);
    pthread_join(ts->thread, NULL);
    close(ts->listen_fd);
}

static SSL_CTX *server_ctx(const test_cert *leaf, const test_cert *chain) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx || SSL_CTX_use_certificate(ctx, leaf->cert) != 1 ||
        SSL_CTX_use_PrivateKey(ctx, leaf->key) != 1) {
        fprintf(stderr, "cannot set up the test server's TLS context\n");
        exit(1);
    }
    if (chain) {
        X509_up_ref(chain->cert);
        SSL_CTX_add_extra_chain_cert(ctx, chain->cert);
    }
    return ctx;
}

/* ---- helpers --------------------------------------------------------------------- */
static char *make_text(size_t *len) {
    size_t cap = 4000 * 64 + 1, n = 0;
    char *t = malloc(cap);
    for (int i = 0; i < 4000; i++)
        n += (size_t)snprintf(t + n, cap - n, "line %d of the https corpus: %d %d. এবং %d।\n", i,
                              i % 7, i % 13, i % 17);
    *len = n;
    return t;
}

/* Reads url whole; 0 when it equals the data. */
static int fetch(const char *url, const dl_data_io *io, const char *data, size_t len) {
    char *got;
    size_t got_len;
    if (dl_bytesrc_slurp(url, io, 1 << 24, &got, &got_len)) return -1;
    int same = got_len == len && !memcmp(got, data, len);
    free(got);
    if (!same) return dl_fail("%s: %zu bytes arrived, not the file's %zu", url, got_len, len);
    return 0;
}

static dl_data_io make_io(dl_data_stats *st, const char *ca_file, bool insecure) {
    return (dl_data_io){.timeout_s = 10, .max_retries = 3, .retry_base_s = 0.01, .retry_max_s = 0.05,
                        .counters = st, .ca_file = ca_file, .insecure_tls = insecure};
}

/* ---- the cases --------------------------------------------------------------------- */
static void test_certificates(const char *dir, const test_cert *ca, const char *ca_pem,
                              const char *data, size_t len) {
    test_cert good = make_cert("good", "IP:127.0.0.1", ca, -1, 30, false);
    test_cert wrong = make_cert("wrong", "DNS:wrong.example", ca, -1, 30, false);
    test_cert expired = make_cert("expired", "IP:127.0.0.1", ca, -30, -1, false);
    test_cert self = make_cert("self", "IP:127.0.0.1", NULL, -1, 30, false);
    struct {
        const char *name;
        const test_cert *leaf;
        const char *reason; /* expected in the error with the test CA; NULL: accepted */
    } cases[] = {{"good", &good, NULL},
                 {"wrong name", &wrong, "IP address mismatch"},
                 {"expired", &expired, "certificate has expired"},
                 {"self-signed", &self, "self-signed certificate"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_server ts = {.ctx = server_ctx(cases[i].leaf, NULL), .data = data, .len = len, .cut = len};
        server_start(&ts);
        char url[128];
        snprintf(url, sizeof url, "https://127.0.0.1:%d/file.txt", ts.port);
        dl_data_stats st = {0};
        dl_data_io io = make_io(&st, ca_pem, false);
        int rc = fetch(url, &io, data, len);
        if (!cases[i].reason) {
            CHECK_MSG(rc == 0, "%s: %s", cases[i].name, dl_error());
            CHECK_MSG(ts.sni[0] == 0, "SNI '%s' sent for an IP address", ts.sni);
        } else {
            CHECK_MSG(rc == -1 && strstr(dl_error(), cases[i].reason) &&
                          strstr(dl_error(), "certificate of 127.0.0.1 was refused"),
                      "%s: rc %d, %s", cases[i].name, rc, rc ? dl_error() : "accepted");
            /* a refused certificate is final: no retries */
            CHECK_MSG(st.retries == 0, "%s: %llu retries", cases[i].name,
                      (unsigned long long)st.retries);
            /* the checks can be switched off */
            memset(&st, 0, sizeof st);
            io = make_io(&st, ca_pem, true);
            CHECK_MSG(fetch(url, &io, data, len) == 0, "%s with insecure_tls: %s", cases[i].name,
                      dl_error());
            /* The server takes connections in turn, so it has seen the refused
             * handshake by now: exactly one attempt was made. */
            CHECK_MSG(atomic_load(&ts.handshake_failures) == 1, "%s: %d handshakes failed",
                      cases[i].name, atomic_load(&ts.handshake_failures));
        }
        server_stop(&ts);
        SSL_CTX_free(ts.ctx);
    }
    /* The good certificate without the test CA: the system's CAs do not know it. */
    test_server ts = {.ctx = server_ctx(&good, NULL), .data = data, .len = len, .cut = len};
    server_start(&ts);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/file.txt", ts.port);
    dl_data_stats st = {0};
    dl_data_io io = make_io(&st, NULL, false);
    CHECK_MSG(fetch(url, &io, data, len) == -1 && strstr(dl_error(), "unable to get local issuer"),
              "system CAs: %s", dl_error());
    /* A CA file that is not one. */
    char bad_ca[400];
    snprintf(bad_ca, sizeof bad_ca, "%s/not-a-ca.pem", dir);
    write_bytes(bad_ca, "not a certificate\n", 18, "wb");
    io = make_io(&st, bad_ca, false);
    CHECK_MSG(fetch(url, &io, data, len) == -1 && strstr(dl_error(), "cannot load CA certificates"),
              "bad CA file: %s", dl_error());
    server_stop(&ts);
    SSL_CTX_free(ts.ctx);
    free_cert(&good);
    free_cert(&wrong);
    free_cert(&expired);
    free_cert(&self);
}

/* insecure: the server's certificate is self-signed and not checked; a cut
 * must still be an ordinary retry, not a refused certificate. */
/* By name: only where "localhost" means 127.0.0.1 first (the client dials
 * the first address; the servers listen on 127.0.0.1 only). */
static void test_host_names(const test_cert *ca, const char *ca_pem, const char *data, size_t len) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *found = NULL;
    bool v4_first = getaddrinfo("localhost", NULL, &hints, &found) == 0 && found &&
                    found->ai_family == AF_INET &&
                    ((struct sockaddr_in *)found->ai_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    if (found) freeaddrinfo(found);
    if (!v4_first) {
        printf("test_data_https: 'localhost' is not 127.0.0.1 first here; host name checks not run\n");
        return;
    }
    test_cert named = make_cert("localhost", "DNS:localhost", ca, -1, 30, false);
    test_cert other = make_cert("other", "DNS:other.example, IP:127.0.0.1", ca, -1, 30, false);
    const test_cert *leaves[] = {&named, &other};
    for (int i = 0; i < 2; i++) {
        test_server ts = {.ctx = server_ctx(leaves[i], NULL), .data = data, .len = len};
        server_start(&ts);
        char url[128];
        snprintf(url, sizeof url, "https://localhost:%d/file.txt", ts.port);
        dl_data_stats st = {0};
        dl_data_io io = make_io(&st, ca_pem, false);
        int rc = fetch(url, &io, data, len);
        if (i == 0) {
            CHECK_MSG(rc == 0, "by name: %s", dl_error());
            CHECK_MSG(!strcmp(ts.sni, "localhost"), "SNI '%s'", ts.sni);
        } else {
            /* the certificate names 127.0.0.1, but the URL asked for localhost */
            CHECK_MSG(rc == -1 && strstr(dl_error(), "hostname mismatch"), "other name: %s",
                      rc ? dl_error() : "accepted");
        }
        server_stop(&ts);
        SSL_CTX_free(ts.ctx);
    }
    free_cert(&named);
    free_cert(&other);
}

static void test_cut_and_resume(SSL_CTX *ctx, const char *ca_pem, bool insecure, const char *data,
                                size_t len) {
    test_server ts = {.ctx = ctx, .data = data, .len = len, .cut = len / 3};
    server_start(&ts);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/cut.txt", ts.port);
    dl_data_stats st = {0};
    dl_data_io io = make_io(&st, ca_pem, insecure);
    CHECK_MSG(fetch(url, &io, data, len) == 0, "cut (insecure %d): %s", insecure, dl_error());
    server_stop(&ts);
    /* the second request resumes at the byte where the first was cut */
    CHECK_MSG(atomic_load(&ts.requests) == 2 && st.retries == 1 && ts.range_starts[0] == -1 &&
                  ts.range_starts[1] == (long)(len / 3),
              "%d requests, %llu retries, second from %ld", atomic_load(&ts.requests),
              (unsigned long long)st.retries, ts.range_starts[1]);
}

static void test_redirects(SSL_CTX *ctx, const char *ca_pem, const char *data, size_t len) {
    test_server plain = {.data = data, .len = len};
    server_start(&plain);
    test_server tls = {.ctx = ctx, .data = data, .len = len, .other_port = plain.port};
    server_start(&tls);
    dl_data_stats st = {0};
    dl_data_io io = make_io(&st, ca_pem, false);
    char url[128];
    for (int s = 0; s < 2; s++) {
        test_server *ts = s ? &tls : &plain;
        const char *scheme = s ? "https" : "http";
        /* 5 hops: every status and Location form, then the data */
        int before = atomic_load(&ts->requests);
        snprintf(url, sizeof url, "%s://127.0.0.1:%d/hop/5", scheme, ts->port);
        CHECK_MSG(fetch(url, &io, data, len) == 0, "%s 5 hops: %s", scheme, dl_error());
        CHECK(atomic_load(&ts->requests) - before == 6);
        /* 6 hops: refused after the 5th, with no retries */
        before = atomic_load(&ts->requests);
        st.retries = 0;
        snprintf(url, sizeof url, "%s://127.0.0.1:%d/hop/6", scheme, ts->port);
        CHECK_MSG(fetch(url, &io, data, len) == -1 && strstr(dl_error(), "more than 5 redirects"),
                  "%s 6 hops: %s", scheme, dl_error());
        CHECK(atomic_load(&ts->requests) - before == 6 && st.retries == 0);
    }
    /* https -> http is refused before anything is asked of the http server */
    int plain_before = atomic_load(&plain.requests);
    snprintf(url, sizeof url, "https://127.0.0.1:%d/to-http", tls.port);
    CHECK_MSG(fetch(url, &io, data, len) == -1 &&
                  strstr(dl_error(), "refusing the redirect from https to plain http"),
              "https->http: %s", dl_error());
    CHECK(atomic_load(&plain.requests) == plain_before);
    /* http -> http is fine */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/to-http", plain.port);
    CHECK_MSG(fetch(url, &io, data, len) == 0, "http->http: %s", dl_error());
    server_stop(&plain);
    server_stop(&tls);
}

/* The stream ends with the certificate's reason instead of skipping the shard
 * and waiting for it to come back. */
static void test_stream_stops(const char *data, size_t len) {
    test_cert self = make_cert("self", "IP:127.0.0.1", NULL, -1, 30, false);
    test_server ts = {.ctx = server_ctx(&self, NULL), .data = data, .len = len};
    server_start(&ts);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/file.txt", ts.port);
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = url;
    cfg.batch_size = 4;
    cfg.max_seq_len = 64;
    cfg.shuffle_buffer = 10;
    cfg.retry_base_s = cfg.retry_max_s = 0.01;
    dl_data_text text = fake_text();
    dl_data_stream *s = NULL;
    CHECK_OK(dl_data_open_text(&cfg, &text, &s));
    if (s) {
        dl_batch b = {0};
        CHECK(dl_data_next_batch(s, &b, 20) == -1);
        CHECK_MSG(strstr(dl_error(), "self-signed certificate") != NULL, "%s", dl_error());
        dl_batch_free(&b);
        dl_data_close(s);
    }
    server_stop(&ts);
    SSL_CTX_free(ts.ctx);
    free_cert(&self);
}

/* Runs a shell command; its exit status. */
static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp_file(const char *path) {
    char *text;
    size_t n;
    dl_data_io io = {0};
    return dl_bytesrc_slurp(path, &io, 1 << 20, &text, &n) ? NULL : text;
}

static void test_cli(const char *dir, SSL_CTX *ctx, const char *ca_pem, const char *data, size_t len) {
    test_server ts = {.ctx = ctx, .data = data, .len = len};
    server_start(&ts);
    char cmd[2048], err[400];
    snprintf(err, sizeof err, "%s/cli.err", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' data --data https://127.0.0.1:%d/d/ --ca-file '%s' --once --batches 1 --show 0 "
             "--json > /dev/null 2> '%s'",
             DEDLOC_BINARY, ts.port, ca_pem, err);
    CHECK(run(cmd) == 0);
    /* without the CA: the index cannot be read, and the reason is given */
    snprintf(cmd, sizeof cmd,
             "'%s' data --data https://127.0.0.1:%d/d/ --once --batches 1 --show 0 > /dev/null 2> '%s'",
             DEDLOC_BINARY, ts.port, err);
    CHECK(run(cmd) == 1);
    char *text = slurp_file(err);
    CHECK_MSG(text && strstr(text, "certificate of 127.0.0.1 was refused"), "%s", text ? text : "");
    free(text);
    /* --insecure-tls: three https sources (index and two shards), one warning */
    snprintf(cmd, sizeof cmd,
             "'%s' data --data https://127.0.0.1:%d/d/ --insecure-tls --once --batches 1 --show 0 "
             "> /dev/null 2> '%s'",
             DEDLOC_BINARY, ts.port, err);
    CHECK(run(cmd) == 0);
    text = slurp_file(err);
    const char *first = text ? strstr(text, "--insecure-tls: certificates") : NULL;
    CHECK_MSG(first && !strstr(first + 1, "--insecure-tls: certificates"), "%s", text ? text : "");
    free(text);
    server_stop(&ts);
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    char *dir = test_tmpdir();
    size_t len;
    char *data = make_text(&len);
    test_cert ca = make_cert("dedloc test CA", NULL, NULL, -1, 30, true);
    test_cert good = make_cert("good", "IP:127.0.0.1", &ca, -1, 30, false);
    char ca_pem[400];
    snprintf(ca_pem, sizeof ca_pem, "%s/ca.pem", dir);
    write_pem(ca_pem, ca.cert);
    SSL_CTX *good_ctx = server_ctx(&good, NULL);

    test_certificates(dir, &ca, ca_pem, data, len);
    test_host_names(&ca, ca_pem, data, len);
    test_cut_and_resume(good_ctx, ca_pem, false, data, len);
    test_cert self = make_cert("self", "IP:127.0.0.1", NULL, -1, 30, false);
    SSL_CTX *self_ctx = server_ctx(&self, NULL);
    test_cut_and_resume(self_ctx, NULL, true, data, len);
    SSL_CTX_free(self_ctx);
    free_cert(&self);
    test_redirects(good_ctx, ca_pem, data, len);
    test_stream_stops(data, len);
    test_cli(dir, good_ctx, ca_pem, data, len);

    SSL_CTX_free(good_ctx);
    free_cert(&good);
    free_cert(&ca);
    free(data);
    rm_rf(dir);
    return dl_test_finish("test_data_https");
}
