/* The monitor's HTTP connection budget (src/monitor/monitor_conns.c,
 * docs/monitor.md "Limits") against real sockets on loopback: clients that
 * open connections and never finish a request's head, one that sends its
 * head a byte at a time, and a well-behaved client beside them. Each
 * client binds its own loopback address (127.0.0.N), so the per-address
 * share is seen as the server sees it. evhttp's own idle timeout is set far
 * beyond the test, so every close seen here is the budget's doing. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dl_test.h"
#include "monitor/monitor_internal.h"

struct server {
    struct event_base *base;
    struct evhttp *http;
    struct dl_monitor_conns *conns;
    struct event *poll;
    int port;
    atomic_bool stop;
    pthread_t thread;
};

/* /stats answers with the budget's counters, read on the loop's thread. */
static void on_request(struct evhttp_request *req, void *arg) {
    struct server *s = arg;
    dl_monitor_conns_note_request(s->conns, req);
    struct dl_monitor_conns_stats st;
    dl_monitor_conns_get_stats(s->conns, &st);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "open %zu peak %zu accepted %llu address %llu total %llu slow %llu pauses %llu\n", st.open,
                        st.peak, (unsigned long long)st.accepted, (unsigned long long)st.closed_address,
                        (unsigned long long)st.refused_total, (unsigned long long)st.closed_slow,
                        (unsigned long long)st.pauses);
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void on_poll(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct server *s = arg;
    if (atomic_load(&s->stop)) event_base_loopbreak(s->base);
}

static void *serve(void *arg) {
    struct server *s = arg;
    event_base_dispatch(s->base);
    return NULL;
}

static void server_start(struct server *s, const struct dl_monitor_http_limits *limits) {
    memset(s, 0, sizeof *s);
    s->base = event_base_new();
    s->http = evhttp_new(s->base);
    evhttp_set_timeout(s->http, 600);
    evhttp_set_gencb(s->http, on_request, s);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(s->http, "127.0.0.1", 0);
    CHECK(sock != NULL);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    s->conns = dl_monitor_conns_attach(s->base, s->http, sock, limits);
    CHECK(s->conns != NULL);
    s->poll = event_new(s->base, -1, EV_PERSIST, on_poll, s);
    struct timeval t = {0, 20000};
    event_add(s->poll, &t);
    pthread_create(&s->thread, NULL, serve, s);
}

static void server_stop(struct server *s) {
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    event_free(s->poll);
    evhttp_free(s->http);
    dl_monitor_conns_free(s->conns);
    event_base_free(s->base);
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A connection from 127.0.0.<host> that sends `head` (maybe incomplete);
 * non-blocking afterwards. Connecting completes in the kernel's backlog even
 * while the server does not accept. */
static int open_from(int host, int port, const char *head) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)host);
    dst.sin_addr.s_addr = htonl(0x7f000001u);
    dst.sin_port = htons((uint16_t)port);
    CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&src, sizeof src));
    CHECK_MSG(!connect(fd, (struct sockaddr *)&dst, sizeof dst), "connect: %s", strerror(errno));
    if (head && *head) CHECK(send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t)strlen(head));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Whether the server closed this connection (end of stream or reset). */
static bool closed(int fd) {
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static size_t count_closed(const int *fds, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += closed(fds[i]);
    return k;
}

/* A well-behaved client from 127.0.0.<host>: GET /stats, the whole answer. */
static bool get_stats(int host, int port, char *out, size_t cap) {
    int fd = open_from(host, port, "GET /stats HTTP/1.0\r\n\r\n");
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < cap && (n = recv(fd, out + got, cap - 1 - got, 0)) > 0) got += (size_t)n;
    out[got] = 0;
    close(fd);
    return !strncmp(out, "HTTP/1.0 200", 12) || !strncmp(out, "HTTP/1.1 200", 12);
}

static unsigned long long stat_of(const char *text, const char *name) {
    const char *p = strstr(text, name);
    return p ? strtoull(p + strlen(name) + 1, NULL, 10) : ~0ull;
}

/* One address opens ten connections and sends half a request on each: it
 * keeps its share of three (its newest), the other seven are closed as the
 * newer ones come, and a client from another address is answered while the
 * three are held. */
static void test_per_address(void) {
    struct server s;
    const struct dl_monitor_http_limits limits = {64, 3, 300};
    server_start(&s, &limits);
    int fds[10];
    for (int i = 0; i < 10; i++) fds[i] = open_from(2, s.port, "GET / HTTP/1.1\r\nHost: t\r\n");
    size_t shut = 0;
    for (int t = 0; t < 500 && (shut = count_closed(fds, 10)) < 7; t++) nap_ms(20);
    CHECK_MSG(shut == 7, "%zu of 10 connections from one address closed, 7 expected", shut);
    char text[4096];
    /* open: the three held and this client's, once the seven are swept */
    bool answered = false;
    for (int t = 0; t < 50 && (answered = get_stats(3, s.port, text, sizeof text)) && stat_of(text, "open") != 4; t++)
        nap_ms(20);
    CHECK_MSG(answered, "the well-behaved client got: %.200s", text);
    CHECK_MSG(stat_of(text, "address") == 7 && stat_of(text, "open") == 4, "%s", text);
    size_t held = 0;
    for (int i = 7; i < 10; i++) held += !closed(fds[i]);
    CHECK_MSG(held == 3, "the address's newest three were not the ones kept (%zu of them open)", held);
    for (int i = 0; i < 10; i++) close(fds[i]);
    server_stop(&s);
}

/* Eight connections that never finish their head and one that sends it a
 * byte every 0.1 s (evhttp's idle timeout never fires for it), against a
 * total of four and a deadline of one second: at most four are ever held,
 * the rest wait in the backlog, every one of them is closed at its
 * deadline, and then a well-behaved client is answered. */
static void test_total_and_deadline(void) {
    struct server s;
    const struct dl_monitor_http_limits limits = {4, 0, 1.0};
    server_start(&s, &limits);
    int fds[9];
    for (int i = 0; i < 8; i++) fds[i] = open_from(4, s.port, "GET / HTTP/1.1\r\n");
    int dribbler = fds[8] = open_from(5, s.port, "GET / HTTP/1.1\r\nX-Slow: ");
    size_t shut = 0;
    for (int t = 0; t < 300 && (shut = count_closed(fds, 9)) < 9; t++) {
        send(dribbler, "a", 1, MSG_NOSIGNAL);
        nap_ms(100);
    }
    CHECK_MSG(shut == 9, "%zu of 9 slow connections closed", shut);
    CHECK_MSG(closed(dribbler), "a client sending its head a byte at a time was kept");
    char text[4096];
    CHECK_MSG(get_stats(6, s.port, text, sizeof text), "the well-behaved client got: %.200s", text);
    CHECK_MSG(stat_of(text, "peak") <= 4, "%llu connections held at once (at most 4): %s", stat_of(text, "peak"), text);
    CHECK_MSG(stat_of(text, "slow") >= 9 && stat_of(text, "pauses") >= 1, "%s", text);
    CHECK_MSG(stat_of(text, "open") <= 4, "%s", text);
    for (int i = 0; i < 9; i++) close(fds[i]);
    server_stop(&s);
}

int main(void) {
    test_per_address();
    test_total_and_deadline();
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
