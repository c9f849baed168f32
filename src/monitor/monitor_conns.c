/* The monitor's HTTP connection budget (docs/monitor.md, "Limits"): at
 * most so many connections at once, so many from one address, and a
 * deadline for each request's head.
 *
 * libevent 2.1's evhttp accepts on its own and exports no per-connection
 * accept hook; what it offers is evhttp_set_bevcb, called once for every
 * connection it accepts to make that connection's bufferevent. We make it
 * and keep a reference to it (bufferevent_incref), so that it outlives
 * evhttp's bufferevent_free. That gives us, with public calls only:
 *  - the connection's socket, once evhttp has set it (bufferevent_getfd),
 *    and so the client's address (getpeername);
 *  - its end: bufferevent_free clears the callbacks evhttp had set, which
 *    bufferevent_getcb shows; we then drop our reference, which frees the
 *    bufferevent and closes the socket (BEV_OPT_CLOSE_ON_FREE; evhttp has
 *    already shut down its sending side, so the client sees the end);
 *  - a way to close it: shutdown(2) of the socket, after which evhttp reads
 *    the end of the stream and frees the connection by its own rules.
 * A sweep, run right after every accept and a few times a second, does
 * all three. The total is kept by pausing the listener
 * (evhttp_bound_socket_get_listener, evconnlistener_disable): connections
 * beyond it wait in the kernel's backlog, costing us nothing. */
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dedloc/util.h"
#include "monitor/monitor_internal.h"

/* How often the sweep runs besides after each accept: closes and deadlines
 * are seen within this much. */
#define SWEEP_PERIOD_S 0.1

struct conn_slot {
    struct bufferevent *bev;   /* ours: one reference held */
    bool known;                /* its socket and address were read */
    bool doomed;               /* shut down by us, waiting for evhttp to free it */
    struct sockaddr_storage addr;
    uint64_t since;            /* order of its accept or its last request head (ties of time broken) */
    double deadline;           /* dl_now() by which its next request head must have come */
};

struct dl_monitor_conns {
    struct dl_monitor_http_limits limits;
    struct evconnlistener *listener;
    struct event *sweep_now, *sweep_timer;
    struct conn_slot *slots;
    size_t count, cap;
    uint64_t order;            /* accepts and request heads so far */
    bool paused;
    struct dl_monitor_conns_stats stats;
};

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return false;
    if (a->ss_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr,
                       sizeof(struct in_addr));
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return false;
}

/* Shuts a connection down; evhttp sees the end of the stream and frees it. */
static void doom(struct conn_slot *s) {
    evutil_socket_t fd = bufferevent_getfd(s->bev);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
    s->doomed = true;
}

/* The connections of addr's host still open (not shut down by us), and
 * the one of them whose last head (or accept) is the oldest. */
static size_t live_from(const struct dl_monitor_conns *c, const struct sockaddr_storage *addr,
                        struct conn_slot **oldest) {
    size_t n = 0;
    *oldest = NULL;
    for (size_t i = 0; i < c->count; i++) {
        struct conn_slot *s = &c->slots[i];
        if (!s->known || s->doomed || !same_host(&s->addr, addr)) continue;
        n++;
        if (!*oldest || s->since < (*oldest)->since) *oldest = s;
    }
    return n;
}

static void sweep(struct dl_monitor_conns *c) {
    /* First the ends: evhttp freed the connection (or never took it), ours
     * is the last reference. */
    for (size_t i = 0; i < c->count;) {
        bufferevent_data_cb readcb = NULL;
        bufferevent_event_cb eventcb = NULL;
        bufferevent_getcb(c->slots[i].bev, &readcb, NULL, &eventcb, NULL);
        if (readcb || eventcb) {
            i++;
            continue;
        }
        bufferevent_decref(c->slots[i].bev);
        c->slots[i] = c->slots[--c->count];
    }
    double now = dl_now();
    for (size_t i = 0; i < c->count; i++) {
        struct conn_slot *s = &c->slots[i];
        if (!s->known) {
            s->known = true;
            s->deadline = now + c->limits.header_deadline_s;
            socklen_t len = sizeof s->addr;
            evutil_socket_t fd = bufferevent_getfd(s->bev);
            if (fd < 0 || getpeername(fd, (struct sockaddr *)&s->addr, &len)) memset(&s->addr, 0, sizeof s->addr);
            /* Past its address's share: that address's oldest connection
             * goes (one that is silent, or done with its last request, the
             * longest), so a flood from an address churns its own
             * connections and a client beside it on the same machine still
             * gets its turn. Accepted past the total in one burst of the
             * listener: closed before it costs more. */
            struct conn_slot *oldest;
            if (c->limits.max_per_address && live_from(c, &s->addr, &oldest) > c->limits.max_per_address) {
                c->stats.closed_address++;
                doom(oldest);
            } else if (c->limits.max_connections && c->count > c->limits.max_connections) {
                c->stats.refused_total++;
                doom(s);
            }
        }
        if (!s->doomed && c->limits.header_deadline_s > 0 && now > s->deadline) {
            c->stats.closed_slow++;
            doom(s);
        }
    }
    if (c->paused && c->count < c->limits.max_connections) {
        evconnlistener_enable(c->listener);
        c->paused = false;
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    sweep(arg);
}

/* evhttp_set_bevcb: one call per accepted connection, before evhttp sets
 * the socket and its callbacks on what we return. */
static struct bufferevent *make_bev(struct event_base *base, void *arg) {
    struct dl_monitor_conns *c = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return NULL; /* evhttp makes its own: one connection we do not see, for want of memory */
    if (c->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct conn_slot *grown = dl_realloc(c->slots, cap * sizeof *grown);
        if (!grown) return bev;
        c->slots = grown;
        c->cap = cap;
    }
    bufferevent_incref(bev);
    c->slots[c->count++] = (struct conn_slot){.bev = bev, .since = ++c->order};
    c->stats.accepted++;
    if (c->count > c->stats.peak) c->stats.peak = c->count;
    if (c->limits.max_connections && c->count >= c->limits.max_connections && !c->paused) {
        evconnlistener_disable(c->listener);
        c->paused = true;
        c->stats.pauses++;
    }
    /* Runs once evhttp is done with this accept, before any more I/O. */
    event_active(c->sweep_now, EV_TIMEOUT, 1);
    return bev;
}

struct dl_monitor_conns *dl_monitor_conns_attach(struct event_base *base, struct evhttp *http,
                                                 struct evhttp_bound_socket *sock,
                                                 const struct dl_monitor_http_limits *limits) {
    struct dl_monitor_conns *c = dl_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->limits = *limits;
    c->listener = evhttp_bound_socket_get_listener(sock);
    c->sweep_now = event_new(base, -1, 0, on_sweep, c);
    c->sweep_timer = event_new(base, -1, EV_PERSIST, on_sweep, c);
    struct timeval period = {0, (int)(SWEEP_PERIOD_S * 1e6)};
    if (!c->listener || !c->sweep_now || !c->sweep_timer || event_add(c->sweep_timer, &period)) {
        dl_fail("cannot set up the HTTP connection limits (libevent)");
        dl_monitor_conns_free(c);
        return NULL;
    }
    evhttp_set_bevcb(http, make_bev, c);
    return c;
}

void dl_monitor_conns_note_request(struct dl_monitor_conns *c, struct evhttp_request *req) {
    if (!c) return;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    for (size_t i = 0; i < c->count && bev; i++)
        if (c->slots[i].bev == bev && !c->slots[i].doomed) {
            c->slots[i].since = ++c->order;
            c->slots[i].deadline = dl_now() + c->limits.header_deadline_s;
        }
}

void dl_monitor_conns_get_stats(const struct dl_monitor_conns *c, struct dl_monitor_conns_stats *out) {
    *out = c->stats;
    out->open = c->count;
}

void dl_monitor_conns_free(struct dl_monitor_conns *c) {
    if (!c) return;
    /* After evhttp_free: every connection's callbacks are cleared, ours is
     * the last reference to each. */
    for (size_t i = 0; i < c->count; i++) bufferevent_decref(c->slots[i].bev);
    free(c->slots);
    if (c->sweep_now) event_free(c->sweep_now);
    if (c->sweep_timer) event_free(c->sweep_timer);
    free(c);
}
