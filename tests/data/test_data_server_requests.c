/* The shard server against raw HTTP requests on 127.0.0.1: byte ranges as
 * RFC 7233 defines them (206 with Content-Range, 416 with "bytes * /size",
 * ignored and answered whole when malformed or multiple), HEAD, and the
 * requests it must refuse: other methods (405), names outside the folder or
 * hidden (404), undecodable paths (400). After garbage the server still
 * answers. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "dedloc/data.h"
#include "dedloc/util.h"
#include "dl_test.h"

static int port;
static char outside_name[64]; /* a file beside the served folder */

typedef struct reply {
    int status;
    char headers[2048];
    char body[4096];
    size_t body_len;
} reply;

/* Sends request as is, reads until the server closes (HTTP/1.0), splits the
 * reply. status -1: no HTTP reply at all. half_close: end the sending side
 * after the request, as a client that gave up would. */
static void send_raw_ex(const char *request, bool half_close, reply *r) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return;
    struct timeval tv = {10, 0}; /* bounded: a server that hangs fails the test */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return;
    }
    size_t len = strlen(request);
    if (write(fd, request, len) != (ssize_t)len) {
        close(fd);
        return;
    }
    if (half_close) shutdown(fd, SHUT_WR);
    char buf[8192];
    size_t used = 0;
    ssize_t got;
    while (used < sizeof buf - 1 && (got = read(fd, buf + used, sizeof buf - 1 - used)) > 0)
        used += (size_t)got;
    close(fd);
    buf[used] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) || !end) return;
    r->status = atoi(buf + 9);
    size_t hl = (size_t)(end - buf);
    if (hl >= sizeof r->headers) hl = sizeof r->headers - 1;
    memcpy(r->headers, buf, hl);
    r->body_len = used - (size_t)(end + 4 - buf);
    if (r->body_len >= sizeof r->body) r->body_len = sizeof r->body - 1;
    memcpy(r->body, end + 4, r->body_len);
}

static void send_raw(const char *request, reply *r) { send_raw_ex(request, false, r); }

static void get(const char *path, const char *range, reply *r) {
    char req[512];
    if (range)
        snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nRange: %s\r\n\r\n", path, range);
    else
        snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    send_raw(req, r);
}

/* Whether the headers hold "name: value" exactly (names compared without case). */
static bool has_header(const reply *r, const char *name, const char *value) {
    char want[256];
    snprintf(want, sizeof want, "\r\n%s: %s\r", name, value);
    char headers[2100];
    snprintf(headers, sizeof headers, "%s\r", r->headers);
    for (const char *p = headers; (p = strstr(p, "\r\n")); p += 2)
        if (!strncasecmp(p, want, strlen(want))) return true;
    return false;
}

static bool body_is(const reply *r, const char *text) {
    return r->body_len == strlen(text) && !memcmp(r->body, text, r->body_len);
}

static void put_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_OK(dl_write_file_atomic(path, text, strlen(text)));
}

static void test_ranges(void) {
    reply r;
    get("/digits.txt", NULL, &r);
    CHECK_MSG(r.status == 200 && body_is(&r, "0123456789"), "%d %s", r.status, r.body);
    CHECK(has_header(&r, "Content-Length", "10") && has_header(&r, "Accept-Ranges", "bytes"));

    static const struct {
        const char *range;
        int status;
        const char *body, *content_range;
    } cases[] = {
        {"bytes=2-5", 206, "2345", "bytes 2-5/10"},
        {"bytes=0-0", 206, "0", "bytes 0-0/10"},
        {"bytes=7-", 206, "789", "bytes 7-9/10"},
        {"bytes=-3", 206, "789", "bytes 7-9/10"},
        {"bytes=-30", 206, "0123456789", "bytes 0-9/10"}, /* suffix longer than the file */
        {"bytes=5-100", 206, "56789", "bytes 5-9/10"},    /* end past the file: clamped */
        {"bytes=10-", 416, NULL, "bytes */10"},           /* starts past the end */
        {"bytes=10-12", 416, NULL, "bytes */10"},
        {"bytes=-0", 416, NULL, "bytes */10"},            /* an empty suffix */
        /* malformed, unsupported or multiple: ignored, the whole file */
        {"bytes=5-2", 200, "0123456789", NULL},
        {"bytes=1-2,4-5", 200, "0123456789", NULL},
        {"bytes=abc", 200, "0123456789", NULL},
        {"bytes=-", 200, "0123456789", NULL},
        {"bytes=2-x", 200, "0123456789", NULL},
        {"bytes=99999999999999999999999-", 200, "0123456789", NULL},
        {"items=1-2", 200, "0123456789", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        get("/digits.txt", cases[i].range, &r);
        CHECK_MSG(r.status == cases[i].status, "Range %s: %d, expected %d", cases[i].range,
                  r.status, cases[i].status);
        if (cases[i].body)
            CHECK_MSG(body_is(&r, cases[i].body), "Range %s: body '%s'", cases[i].range, r.body);
        if (cases[i].content_range)
            CHECK_MSG(has_header(&r, "Content-Range", cases[i].content_range),
                      "Range %s: headers\n%s", cases[i].range, r.headers);
        else
            CHECK_MSG(!strcasestr(r.headers, "Content-Range"), "Range %s: headers\n%s",
                      cases[i].range, r.headers);
    }

    /* an empty file: whole is 0 bytes, any range is unsatisfiable */
    get("/empty.txt", NULL, &r);
    CHECK_MSG(r.status == 200 && r.body_len == 0 && has_header(&r, "Content-Length", "0"), "%d",
              r.status);
    get("/empty.txt", "bytes=0-", &r);
    CHECK_MSG(r.status == 416 && has_header(&r, "Content-Range", "bytes */0"), "%d\n%s", r.status,
              r.headers);
    get("/empty.txt", "bytes=-1", &r);
    CHECK(r.status == 416);
}

static void test_methods_and_types(void) {
    reply r;
    send_raw("HEAD /digits.txt HTTP/1.0\r\n\r\n", &r);
    CHECK_MSG(r.status == 200 && has_header(&r, "Content-Length", "10") && r.body_len == 0,
              "%d, %zu body bytes", r.status, r.body_len);
    send_raw("HEAD /digits.txt HTTP/1.0\r\nRange: bytes=1-2\r\n\r\n", &r);
    CHECK(r.status == 206 && has_header(&r, "Content-Length", "2") && r.body_len == 0);
    /* other methods are refused before any handler runs: libevent answers
     * 501 (RFC 7231: a method the server does not support), or 413 for a
     * body, since none is accepted; nothing changes on disk */
    send_raw("POST /digits.txt HTTP/1.0\r\nContent-Length: 0\r\n\r\n", &r);
    CHECK_MSG(r.status == 501 || r.status == 405, "POST: %d", r.status);
    send_raw("PUT /new.txt HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", &r);
    CHECK_MSG(r.status == 413 || r.status == 501 || r.status == 405, "PUT: %d", r.status);
    send_raw("DELETE /digits.txt HTTP/1.0\r\n\r\n", &r);
    CHECK_MSG(r.status == 501 || r.status == 405, "DELETE: %d", r.status);
    get("/new.txt", NULL, &r);
    CHECK(r.status == 404);
    get("/digits.txt", NULL, &r);
    CHECK(r.status == 200 && body_is(&r, "0123456789"));

    get("/shard.gz", NULL, &r);
    CHECK(r.status == 200 && has_header(&r, "Content-Type", "application/gzip"));
    get("/digits.txt", NULL, &r);
    CHECK(has_header(&r, "Content-Type", "text/plain; charset=utf-8"));

    /* the listing: regular, visible files only, sorted */
    get("/", NULL, &r);
    CHECK_MSG(r.status == 200 && body_is(&r, "digits.txt\nempty.txt\nshard.gz\n"), "%d '%s'",
              r.status, r.body);
    get("/index.txt", NULL, &r);
    CHECK(r.status == 200 && body_is(&r, "digits.txt\nempty.txt\nshard.gz\n"));
}

static void test_refused_names(void) {
    static const struct {
        const char *path;
        int status;
    } cases[] = {
        {"/missing.txt", 404},
        {"/.hidden", 404},          /* hidden files are never served */
        {"/sub", 404},              /* a folder */
        {"/sub/inner.txt", 404},    /* nothing below the folder itself */
        {"/%2e%2e/secret.txt", 404},
        {"/digits.txt%00.gz", 400}, /* a NUL would cut the name short */
        {"/a%5cb", 404},            /* backslash */
        {"/%0a", 404},              /* control character */
    };
    reply r;
    char way_out[128];
    snprintf(way_out, sizeof way_out, "/..%%2f%s", outside_name);
    get(way_out, NULL, &r);
    CHECK_MSG(r.status == 404 && !strstr(r.body, "top secret"), "GET %s: %d", way_out, r.status);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        get(cases[i].path, NULL, &r);
        CHECK_MSG(r.status == cases[i].status, "GET %s: %d, expected %d", cases[i].path, r.status,
                  cases[i].status);
        CHECK_MSG(!strstr(r.body, "top secret") && !strstr(r.body, "hidden"), "GET %s leaked '%s'",
                  cases[i].path, r.body);
    }
}

static void test_garbage(void) {
    reply r;
    send_raw_ex("HELLO\r\n\r\n", true, &r);
    CHECK_MSG(r.status == -1 || r.status == 400, "garbage: %d", r.status);
    send_raw_ex("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", true, &r); /* TLS */
    CHECK_MSG(r.status == -1 || r.status == 400, "TLS: %d", r.status);
    send_raw_ex("GET /digits.txt HTTP/1.0\r\nRange: bytes=1-1\r\n", true, &r); /* cut short */
    /* still answering */
    get("/digits.txt", "bytes=9-", &r);
    CHECK_MSG(r.status == 206 && body_is(&r, "9"), "after garbage: %d", r.status);
}

int main(void) {
    char dir[] = "/tmp/dedloc-test-server-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char outside[600], sub[600];
    put_file(dir, "digits.txt", "0123456789");
    put_file(dir, "empty.txt", "");
    put_file(dir, "shard.gz", "not really gzip");
    put_file(dir, ".hidden", "hidden text");
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK_OK(dl_mkdirs(sub));
    put_file(sub, "inner.txt", "inner");
    /* a file beside the served folder, which no request may reach */
    snprintf(outside, sizeof outside, "%s-secret.txt", dir);
    snprintf(outside_name, sizeof outside_name, "%s", strrchr(outside, '/') + 1);
    CHECK_OK(dl_write_file_atomic(outside, "top secret", 10));

    dl_data_server *srv = NULL;
    CHECK_OK(dl_data_server_start(dir, "127.0.0.1", 0, &srv));
    if (srv) {
        port = dl_data_server_port(srv);
        test_ranges();
        test_methods_and_types();
        test_refused_names();
        test_garbage();
        /* the port is taken */
        dl_data_server *second = NULL;
        CHECK(dl_data_server_start(dir, "127.0.0.1", port, &second) == -1 && second == NULL);
        CHECK_MSG(strstr(dl_error(), "cannot listen on 127.0.0.1 port"), "%s", dl_error());
        dl_data_server_stop(srv);
    }

    /* start-up refusals */
    CHECK(dl_data_server_start(outside, "127.0.0.1", 0, &srv) == -1 && srv == NULL);
    CHECK_MSG(strstr(dl_error(), "is not a directory"), "%s", dl_error());
    CHECK(dl_data_server_start(dir, "127.0.0.1", 70000, &srv) == -1);
    CHECK_MSG(strstr(dl_error(), "out of range"), "%s", dl_error());

    unlink(outside);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dl_test_finish("test_data_server_requests");
}
