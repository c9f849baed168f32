/* A running peer: the network thread, its command queue, the periodic tick
 * (publishing, keepalives, dialling, expiry), peer exchange and the view. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/thread.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/net_internal.h"

void dl_net_config_default(struct dl_net_config *c) {
    memset(c, 0, sizeof *c);
    c->target_batch = 4096;
    c->expiry_s = 60;
    c->min_refresh_s = 0.5;
    c->max_refresh_s = 10;
    c->keepalive_s = 5;
    c->handshake_timeout_s = 10;
    c->ban_s = 60;
    c->max_frame = 16u << 20;
    c->max_pending_out = (size_t)64 << 20;
#ifdef DEDLOC_HAVE_OPENDHT
    c->use_dht = true;
#endif
    c->dht_port = -1;
    c->dht_refresh_s = 60;
}

static char *dup_or_null(const char *s) { return s ? dl_strdup(s) : NULL; }

/* ---- addresses -------------------------------------------------------------- */

static void sockaddr_to_string(const struct sockaddr *sa, char *out, size_t cap) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
        snprintf(out, cap, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
        snprintf(out, cap, "[%s]:%d", host, port);
    } else {
        snprintf(out, cap, "?");
    }
}

/* "ip:port", "[v6]:port" or "host:port" (resolved, blocking: only used for
 * configuration, never for addresses received from the network). */
/* The port of "host:port" / "[v6]:port" must be all digits and at most 65535:
 * libevent's parser reads "12x" as port 12 and getaddrinfo takes a numeric
 * service modulo 65536 ("99999" -> 34463), both silently. */
static int check_port(const char *text) {
    const char *port = NULL;
    if (text[0] == '[') {
        const char *close = strstr(text, "]:");
        port = close ? close + 2 : NULL;
    } else if (strchr(text, ':') && strchr(text, ':') == strrchr(text, ':')) {
        port = strchr(text, ':') + 1;
    }
    if (!port) return 0; /* a bare address: the parsers below decide */
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || port[digits] != 0 || digits > 5 || atol(port) > 65535)
        return dl_fail("'%s': the port must be a number in 0..65535", text);
    return 0;
}

static int resolve_address(const char *text, struct sockaddr_storage *ss, int *len, bool allow_dns) {
    if (check_port(text)) return -1;
    *len = (int)sizeof *ss;
    memset(ss, 0, sizeof *ss);
    if (evutil_parse_sockaddr_port(text, (struct sockaddr *)ss, len) == 0) return 0;
    if (!allow_dns) return dl_fail("'%s' is not an IP address with a port", text);
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text) return dl_fail("'%s' has no port (expected host:port)", text);
    char host[256];
    size_t hl = (size_t)(colon - text);
    if (hl >= sizeof host) return dl_fail("host name too long in '%s'", text);
    memcpy(host, text, hl);
    host[hl] = 0;
    /* libevent's parser refuses port 0 ("any"), so "[::1]:0" arrives here. */
    char *h = host;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(h, colon + 1, &hints, &res);
    if (rc || !res) return dl_fail("cannot resolve '%s': %s", text, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (int)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* ---- bans and dial targets ---------------------------------------------------- */

bool dl_net_is_banned(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]) {
    double now = dl_now();
    for (size_t i = 0; i < net->num_bans; i++)
        if (net->bans[i].until > now && !memcmp(net->bans[i].pk, pk, DL_WIRE_PK)) return true;
    return false;
}

void dl_net_ban(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]) {
    double now = dl_now();
    size_t slot = net->num_bans;
    for (size_t i = 0; i < net->num_bans; i++)
        if (net->bans[i].until <= now || !memcmp(net->bans[i].pk, pk, DL_WIRE_PK)) {
            slot = i;
            break;
        }
    if (slot == net->num_bans) {
        if (net->num_bans == sizeof net->bans / sizeof net->bans[0]) slot = 0; /* oldest-ish */
        else net->num_bans++;
    }
    memcpy(net->bans[slot].pk, pk, DL_WIRE_PK);
    net->bans[slot].until = now + net->cfg.ban_s;
}

static struct dl_target *find_target(struct dl_net *net, const uint8_t *pk, const char *address) {
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (pk && t->has_pk && !memcmp(t->pk, pk, DL_WIRE_PK)) return t;
    }
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (address && !strcmp(t->address, address) && (!pk || !t->has_pk)) return t;
    }
    return NULL;
}

void dl_net_note_target(struct dl_net *net, const uint8_t *pk, const char *address, bool from_dht) {
    if (!address || !*address) return;
    if (pk && !memcmp(pk, net->id.pk, DL_WIRE_PK)) return;
    if (!strcmp(address, net->announce_addr)) return;
    struct sockaddr_storage ss;
    int len;
    if (resolve_address(address, &ss, &len, false)) return; /* only literal addresses from peers */
    struct dl_target *t = find_target(net, pk, address);
    if (!t) {
        if (net->num_targets == DL_NET_MAX_TARGETS) return;
        t = &net->targets[net->num_targets++];
        memset(t, 0, sizeof *t);
        t->backoff = 1;
        t->next_attempt = dl_now();
        if (from_dht) DL_INFO("net", "DHT: found a peer at %s", address);
    }
    snprintf(t->address, sizeof t->address, "%s", address);
    if (pk) {
        memcpy(t->pk, pk, DL_WIRE_PK);
        t->has_pk = true;
    }
    t->last_seen = dl_now();
}

bool dl_net_target_accepts(struct dl_net *net, const char *address, const uint8_t pk[DL_WIRE_PK]) {
    bool known = false;
    for (size_t i = 0; i < net->num_targets; i++) {
        const struct dl_target *t = &net->targets[i];
        if (strcmp(t->address, address)) continue;
        known = true;
        if (t->initial || !t->has_pk || !memcmp(t->pk, pk, DL_WIRE_PK)) return true;
    }
    return !known;
}

static void dial(struct dl_net *net, struct dl_target *t) {
    struct sockaddr_storage ss;
    int len;
    if (resolve_address(t->address, &ss, &len, t->initial)) {
        DL_WARN("net", "cannot dial %s: %s", t->address, dl_error());
        return;
    }
    if (net->num_conns >= DL_NET_MAX_CONNS) return;
    struct bufferevent *bev = bufferevent_socket_new(net->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return;
    struct dl_conn *c = dl_conn_new(net, bev, true, t->address, t->address);
    if (!c) {
        bufferevent_free(bev);
        return;
    }
    struct timeval tv = {(time_t)net->cfg.handshake_timeout_s, 0};
    bufferevent_set_timeouts(bev, NULL, &tv); /* connect timeout; cleared once ready */
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&ss, len)) {
        dl_conn_close(c, "connect failed");
        return;
    }
    DL_DEBUG("net", "dialling %s", t->address);
}

/* ---- records ------------------------------------------------------------------ */

void dl_net_send_records(struct dl_net *net, struct dl_conn *only, struct dl_conn *except,
                         const uint8_t *blob, size_t size) {
    const uint8_t *blobs[1] = {blob};
    size_t sizes[1] = {size};
    size_t n;
    uint8_t *body = dl_msg_records_encode(blobs, sizes, 1, &n);
    if (!body) return;
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        if (c->state != CONN_READY || c == except || (only && c != only)) continue;
        if (dl_conn_send(c, DL_MSG_RECORDS, body, n, true)) DL_DEBUG("net", "%s", dl_error());
    }
    free(body);
}

/* Peer exchange on connect: every record we hold, in one message. */
static void send_all_records(struct dl_net *net, struct dl_conn *c) {
    pthread_mutex_lock(&net->lock);
    size_t count = net->swarm.count < DL_WIRE_MAX_RECORDS ? net->swarm.count : DL_WIRE_MAX_RECORDS;
    const uint8_t **blobs = dl_calloc(count + 1, sizeof *blobs);
    size_t *sizes = dl_calloc(count + 1, sizeof *sizes);
    uint8_t *body = NULL;
    size_t n = 0;
    if (blobs && sizes) {
        for (size_t i = 0; i < count; i++) {
            blobs[i] = net->swarm.entries[i].blob;
            sizes[i] = net->swarm.entries[i].blob_size;
        }
        body = dl_msg_records_encode(blobs, sizes, count, &n);
    }
    pthread_mutex_unlock(&net->lock);
    if (body) dl_conn_send(c, DL_MSG_RECORDS, body, n, false);
    free(body);
    free(blobs);
    free(sizes);
}

struct records_ctx {
    struct dl_net *net;
    struct dl_conn *from;
    int bad;
};

/* A peer listening on a wildcard address without --announce tells us
 * "0.0.0.0:PORT"; when the record comes straight from its owner we dial the
 * address its connection comes from, with that port. */
static void dial_address_of(const struct dl_record *r, const struct dl_conn *from, char out[DL_NET_ADDR_MAX]) {
    snprintf(out, DL_NET_ADDR_MAX, "%s", r->address);
    bool wildcard = !strncmp(r->address, "0.0.0.0:", 8) || !strncmp(r->address, "[::]:", 5);
    if (!wildcard) return;
    out[0] = 0;
    if (!from || memcmp(from->peer_pk, r->pk, DL_WIRE_PK)) return;
    const char *port = strrchr(r->address, ':');
    const char *host_end = strrchr(from->remote, ':');
    if (!port || !host_end) return;
    snprintf(out, DL_NET_ADDR_MAX, "%.*s%s", (int)(host_end - from->remote), from->remote, port);
}

static int on_one_record(void *user, const uint8_t *blob, size_t size) {
    struct records_ctx *ctx = user;
    struct dl_net *net = ctx->net;
    struct dl_record r;
    if (dl_record_verify(blob, size, net->run_id, &r)) {
        ctx->bad = 1;
        return -1;
    }
    if (!memcmp(r.pk, net->id.pk, DL_WIRE_PK)) return 0; /* an echo of us, maybe a past run of ours */
    if (dl_net_is_banned(net, r.pk)) return 0;
    pthread_mutex_lock(&net->lock);
    int fresh = dl_swarm_apply(&net->swarm, &r, blob, size, dl_now());
    pthread_mutex_unlock(&net->lock);
    if (fresh == 1) {
        /* Flood newer records once to everyone else: no peer needs to be
         * connected to all others for the view to converge. */
        dl_net_send_records(net, NULL, ctx->from, blob, size);
        if (r.goodbye) {
            struct dl_target *t = find_target(net, r.pk, NULL);
            if (t && !t->initial) *t = net->targets[--net->num_targets];
            DL_INFO("net", "peer %s said goodbye", r.peer_id);
        } else if (!r.client_mode) {
            char address[DL_NET_ADDR_MAX];
            dial_address_of(&r, ctx->from, address);
            dl_net_note_target(net, r.pk, address, false);
        }
    }
    return 0;
}

void dl_net_on_records(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    struct records_ctx ctx = {net, c, 0};
    if (dl_msg_records_decode(body, size, on_one_record, &ctx)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
    }
}

static void publish(struct dl_net *net, bool goodbye) {
    struct dl_record r;
    memset(&r, 0, sizeof r);
    double wall = dl_wall_time();
    uint64_t seq = (uint64_t)(wall * 1e6);
    if (seq <= net->last_seq) seq = net->last_seq + 1;
    net->last_seq = seq;
    r.seq = seq;
    r.epoch = net->my_epoch;
    r.time = wall;
    /* Samples accumulated by now, extrapolated from the last report. */
    r.samples = net->my_samples;
    r.samples_per_second = net->my_sps;
    r.client_mode = net->cfg.client_mode;
    r.goodbye = goodbye;
    r.bandwidth_mbit = net->cfg.bandwidth_mbit;
    snprintf(r.address, sizeof r.address, "%s", net->announce_addr);
    memcpy(r.pk, net->id.pk, DL_WIRE_PK);
    memcpy(r.peer_id, net->id.peer_id, sizeof r.peer_id);
    size_t n;
    uint8_t *blob = dl_record_sign(&r, net->run_id, &net->id, &n);
    if (!blob) return;
    pthread_mutex_lock(&net->lock);
    dl_swarm_apply(&net->swarm, &r, blob, n, dl_now());
    pthread_mutex_unlock(&net->lock);
    dl_net_send_records(net, NULL, NULL, blob, n);
    free(blob);
    net->published_epoch = net->my_epoch;
}

void dl_net_on_ready(struct dl_net *net, struct dl_conn *c) {
    pthread_mutex_lock(&net->lock);
    net->num_ready++;
    pthread_mutex_unlock(&net->lock);
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    if (c->outbound) {
        struct dl_target *t = find_target(net, NULL, c->dialled);
        if (t) {
            /* An initial peer may come back with another identity. */
            memcpy(t->pk, c->peer_pk, DL_WIRE_PK);
            t->has_pk = true;
            t->backoff = 1;
        }
    }
    send_all_records(net, c);
}

void dl_net_on_closed(struct dl_net *net, struct dl_conn *c) {
    pthread_mutex_lock(&net->lock);
    net->num_ready--;
    pthread_mutex_unlock(&net->lock);
}

/* ---- commands from other threads ------------------------------------------------ */

int dl_net_post(struct dl_net *net, struct dl_cmd *cmd) {
    cmd->next = NULL;
    pthread_mutex_lock(&net->lock);
    if (net->cmd_tail) net->cmd_tail->next = cmd;
    else net->cmd_head = cmd;
    net->cmd_tail = cmd;
    pthread_mutex_unlock(&net->lock);
    event_active(net->cmd_ev, EV_READ, 0);
    return 0;
}

static void cmd_cb(evutil_socket_t fd, short what, void *arg) {
    struct dl_net *net = arg;
    pthread_mutex_lock(&net->lock);
    struct dl_cmd *list = net->cmd_head;
    net->cmd_head = net->cmd_tail = NULL;
    pthread_mutex_unlock(&net->lock);
    while (list) {
        struct dl_cmd *cmd = list;
        list = list->next;
        switch (cmd->type) {
        case CMD_PUBLISH: {
            bool new_epoch = cmd->id != net->my_epoch;
            net->my_epoch = cmd->id;
            net->my_samples = cmd->samples;
            net->my_sps = cmd->samples_per_second;
            /* A new epoch is news the round depends on: send it now, not at the next tick. */
            if (new_epoch && !net->stopping) publish(net, false);
            break;
        }
        case CMD_DIAL: dl_net_note_target(net, cmd->pk, cmd->address, true); break;
        case CMD_STOP:
            if (!net->stopping) {
                net->stopping = true;
                net->stop_deadline = dl_now() + 1.0;
                publish(net, true);
                if (net->listener) evconnlistener_disable(net->listener);
            }
            break;
        default: dl_rpc_run_cmd(net, cmd); break;
        }
        free(cmd->payload);
        free(cmd);
    }
}

/* ---- the tick ------------------------------------------------------------------- */

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    struct dl_net *net = arg;
    double now = dl_now();
    if (net->stopping) {
        bool drained = true;
        for (struct dl_conn *c = net->conns; c; c = c->next)
            if (evbuffer_get_length(bufferevent_get_output(c->bev))) drained = false;
        if (drained || now > net->stop_deadline) event_base_loopexit(net->base, NULL);
        return;
    }
    /* Connections: handshake deadline, keepalive, dead peers, lingering closes. */
    for (struct dl_conn *c = net->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_CLOSING) {
            if (now - c->closing_since > 2) dl_conn_close(c, "close timed out");
        } else if (c->state != CONN_READY) {
            if (now - c->created > net->cfg.handshake_timeout_s) dl_conn_reject(c, 0, "handshake timed out", false);
        } else if (now - c->last_rx > 3 * net->cfg.keepalive_s) {
            dl_conn_close(c, "silent for too long");
        } else if (now - c->last_ping > net->cfg.keepalive_s) {
            c->last_ping = now;
            size_t n;
            uint8_t *ping = dl_msg_ping_encode((uint64_t)(now * 1e6), &n);
            if (ping) dl_conn_send(c, DL_MSG_PING, ping, n, true);
            free(ping);
        }
    }
    /* Our record: on epoch change at once, otherwise at the adaptive period. */
    if (net->force_publish || now >= net->next_publish) {
        net->force_publish = false;
        publish(net, false);
        struct dl_swarm_view v;
        pthread_mutex_lock(&net->lock);
        int rc = dl_swarm_compute(&net->swarm, dl_wall_time(), net->cfg.target_batch, NULL, &v);
        pthread_mutex_unlock(&net->lock);
        double period = net->cfg.max_refresh_s;
        if (rc == 0) {
            period = dl_swarm_refresh_period(v.eta_s, v.num_peers, net->cfg.min_refresh_s, net->cfg.max_refresh_s);
            dl_swarm_view_free(&v);
        }
        /* Never let our own record get close to expiring elsewhere. */
        if (period > net->cfg.expiry_s / 4) period = net->cfg.expiry_s / 4;
        pthread_mutex_lock(&net->lock);
        net->refresh_s = period;
        pthread_mutex_unlock(&net->lock);
        net->next_publish = now + period;
    }
    pthread_mutex_lock(&net->lock);
    size_t expired = dl_swarm_expire(&net->swarm, now, net->cfg.expiry_s, net->id.pk);
    pthread_mutex_unlock(&net->lock);
    if (expired) DL_INFO("net", "%zu peer record(s) expired", expired);
    /* Dial targets: forget peers whose records are gone; dial the others. */
    for (size_t i = 0; i < net->num_targets;) {
        struct dl_target *t = &net->targets[i];
        bool connected = t->has_pk && dl_net_conn_by_pk(net, t->pk, false);
        bool dialling = false;
        for (struct dl_conn *c = net->conns; c && !dialling; c = c->next)
            if (c->outbound && c->state < CONN_AUTH && !strcmp(c->dialled, t->address)) dialling = true;
        if (connected) t->last_seen = now;
        if (!t->initial && !connected && now - t->last_seen > net->cfg.expiry_s) {
            pthread_mutex_lock(&net->lock);
            bool has_record = t->has_pk && dl_swarm_find(&net->swarm, t->pk);
            pthread_mutex_unlock(&net->lock);
            if (!has_record) {
                *t = net->targets[--net->num_targets];
                continue;
            }
        }
        if (!t->is_self && !connected && !dialling && now >= t->next_attempt &&
            !(t->has_pk && dl_net_is_banned(net, t->pk))) {
            t->next_attempt = now + t->backoff;
            t->backoff = t->backoff * 2 > 30 ? 30 : t->backoff * 2;
            dial(net, t);
        }
        i++;
    }
    dl_rpc_tick(net, now);
    dl_dht_tick(net, now);
}

/* ---- listener --------------------------------------------------------------------- */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg) {
    struct dl_net *net = arg;
    /* Unauthenticated connections cost memory and crypto before they prove
     * anything: at most DL_NET_MAX_PREAUTH of them at a time. */
    size_t preauth = 0;
    for (struct dl_conn *c = net->conns; c; c = c->next) preauth += c->state < CONN_READY;
    if (net->num_conns >= DL_NET_MAX_CONNS || preauth >= DL_NET_MAX_PREAUTH || net->stopping) {
        DL_DEBUG("net", "refusing a connection (%zu connections, %zu unauthenticated)", net->num_conns, preauth);
        evutil_closesocket(fd);
        return;
    }
    struct bufferevent *bev = bufferevent_socket_new(net->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        evutil_closesocket(fd);
        return;
    }
    char remote[DL_NET_ADDR_MAX];
    sockaddr_to_string(sa, remote, sizeof remote);
    if (!dl_conn_new(net, bev, false, remote, NULL)) bufferevent_free(bev);
}

static int start_listener(struct dl_net *net) {
    const char *spec = net->cfg.listen ? net->cfg.listen : "0.0.0.0:0";
    if (!*spec || net->cfg.client_mode) return 0;
    struct sockaddr_storage ss;
    int len;
    if (resolve_address(spec, &ss, &len, true)) return dl_fail_context("--listen");
    net->listener = evconnlistener_new_bind(net->base, accept_cb, net,
                                            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                            (struct sockaddr *)&ss, len);
    if (!net->listener) return dl_fail("cannot listen on %s: %s", spec, strerror(errno));
    struct sockaddr_storage bound;
    memset(&bound, 0, sizeof bound);
    socklen_t bl = sizeof bound;
    if (getsockname(evconnlistener_get_fd(net->listener), (struct sockaddr *)&bound, &bl))
        return dl_fail("cannot read the address bound for %s: %s", spec, strerror(errno));
    sockaddr_to_string((struct sockaddr *)&bound, net->listen_addr, sizeof net->listen_addr);
    net->listen_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (net->cfg.announce && *net->cfg.announce) {
        snprintf(net->announce_addr, sizeof net->announce_addr, "%s", net->cfg.announce);
    } else {
        snprintf(net->announce_addr, sizeof net->announce_addr, "%s", net->listen_addr);
        if (!strncmp(net->listen_addr, "0.0.0.0:", 8) || !strncmp(net->listen_addr, "[::]:", 5))
            DL_WARN("net", "listening on %s without --announce: peers will dial the address they "
                    "see our connections come from; pass --announce ADDR:PORT if that is wrong",
                    net->listen_addr);
    }
    return 0;
}

/* ---- lifecycle ---------------------------------------------------------------------- */

static void *thread_main(void *arg) {
    struct dl_net *net = arg;
    event_base_dispatch(net->base);
    return NULL;
}

static pthread_once_t evthread_once = PTHREAD_ONCE_INIT;
static int evthread_ok;
static void init_evthread(void) { evthread_ok = evthread_use_pthreads() == 0; }

static void free_net(struct dl_net *net) {
    while (net->conns) dl_conn_close(net->conns, "stopping");
    dl_rpc_fail_all(net);
    while (net->cmd_head) {
        struct dl_cmd *cmd = net->cmd_head;
        net->cmd_head = cmd->next;
        if ((cmd->type == CMD_REQUEST) && cmd->callback)
            cmd->callback(cmd->user, cmd->id, DL_NET_DISCONNECTED, NULL, 0);
        free(cmd->payload);
        free(cmd);
    }
    if (net->listener) evconnlistener_free(net->listener);
    if (net->tick_ev) event_free(net->tick_ev);
    if (net->cmd_ev) event_free(net->cmd_ev);
    if (net->rate_group) bufferevent_rate_limit_group_free(net->rate_group);
    if (net->bucket_cfg) ev_token_bucket_cfg_free(net->bucket_cfg);
    if (net->base) event_base_free(net->base);
    dl_swarm_free(&net->swarm);
    pthread_mutex_destroy(&net->lock);
    sodium_memzero(&net->id, sizeof net->id);
    free(net->run_id);
    free(net->listen_cfg);
    free(net->announce_cfg);
    free(net->initial_cfg);
    free(net->identity_cfg);
    free(net->dht_bootstrap_cfg);
    free(net);
}

int dl_net_start(const struct dl_net_config *config, dl_net **out) {
    *out = NULL;
    if (!config->run_id || !*config->run_id || strlen(config->run_id) >= DL_WIRE_RUN_ID_MAX)
        return dl_fail("a run id of 1 to %d bytes is required", DL_WIRE_RUN_ID_MAX - 1);
    if (config->expiry_s <= 0 || config->keepalive_s <= 0 || config->max_frame < 4096 ||
        config->min_refresh_s <= 0 || config->max_refresh_s < config->min_refresh_s)
        return dl_fail("network configuration out of range (expiry, keepalive, refresh, max frame)");
    pthread_once(&evthread_once, init_evthread);
    if (!evthread_ok) return dl_fail("libevent: evthread_use_pthreads failed");
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    struct dl_net *net = dl_calloc(1, sizeof *net);
    if (!net) return -1;
    pthread_mutex_init(&net->lock, NULL);
    dl_swarm_init(&net->swarm, 4096);
    net->cfg = *config;
    net->run_id = dl_strdup(config->run_id);
    net->listen_cfg = dup_or_null(config->listen);
    net->announce_cfg = dup_or_null(config->announce);
    net->initial_cfg = dup_or_null(config->initial_peers);
    net->identity_cfg = dup_or_null(config->identity_path);
    net->dht_bootstrap_cfg = dup_or_null(config->dht_bootstrap);
    net->cfg.run_id = net->run_id;
    net->cfg.listen = net->listen_cfg;
    net->cfg.announce = net->announce_cfg;
    net->cfg.initial_peers = net->initial_cfg;
    net->cfg.identity_path = net->identity_cfg;
    net->cfg.dht_bootstrap = net->dht_bootstrap_cfg;
    net->refresh_s = config->min_refresh_s;
    if (dl_identity_load(net->cfg.identity_path, &net->id)) goto fail;
    net->base = event_base_new();
    if (!net->base) {
        dl_fail("libevent: event_base_new failed");
        goto fail;
    }
    if (start_listener(net)) goto fail;
    if (config->max_upload_mbit > 0) {
        /* Refilled every 20 ms (rates are per tick), with 100 ms of burst:
         * smooth enough that a home link stays usable. */
        struct timeval tick = {0, 20000};
        size_t per_tick = (size_t)(config->max_upload_mbit * 1e6 / 8 * 0.02);
        if (per_tick < 64) per_tick = 64;
        net->bucket_cfg = ev_token_bucket_cfg_new(EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, per_tick, 5 * per_tick, &tick);
        if (net->bucket_cfg) net->rate_group = bufferevent_rate_limit_group_new(net->base, net->bucket_cfg);
        if (!net->rate_group) {
            dl_fail("libevent: cannot create the upload rate limit");
            goto fail;
        }
    }
    if (net->cfg.initial_peers) {
        char *list = dl_strdup(net->cfg.initial_peers), *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ') tok++;
            if (!*tok || net->num_targets == DL_NET_MAX_TARGETS) continue;
            struct sockaddr_storage ss;
            int len;
            if (resolve_address(tok, &ss, &len, true)) {
                free(list);
                dl_fail_context("--initial-peers");
                goto fail;
            }
            struct dl_target *t = &net->targets[net->num_targets++];
            memset(t, 0, sizeof *t);
            snprintf(t->address, sizeof t->address, "%s", tok);
            t->initial = true;
            t->backoff = 1;
        }
        free(list);
    }
    net->tick_ev = event_new(net->base, -1, EV_PERSIST, tick_cb, net);
    net->cmd_ev = event_new(net->base, -1, EV_READ, cmd_cb, net);
    if (!net->tick_ev || !net->cmd_ev) {
        dl_fail("libevent: event_new failed");
        goto fail;
    }
    struct timeval tick = {0, (suseconds_t)(DL_NET_TICK_S * 1e6)};
    event_add(net->tick_ev, &tick);
    if (net->cfg.use_dht && dl_dht_start(net)) goto fail;
    publish(net, false);
    net->next_publish = dl_now() + net->cfg.min_refresh_s;
    if (pthread_create(&net->thread, NULL, thread_main, net)) {
        dl_fail("cannot start the network thread");
        dl_dht_stop(net);
        goto fail;
    }
    net->thread_started = true;
    DL_INFO("net", "peer %s listening on %s (run '%s')", net->id.peer_id,
            net->listen_addr[0] ? net->listen_addr : "nothing (client mode)", net->run_id);
    *out = net;
    return 0;
fail:
    free_net(net);
    return -1;
}

void dl_net_stop(dl_net *net) {
    if (!net) return;
    if (net->thread_started) {
        struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
        if (cmd) {
            cmd->type = CMD_STOP;
            dl_net_post(net, cmd);
        } else {
            event_base_loopexit(net->base, NULL);
        }
        pthread_join(net->thread, NULL);
    }
    dl_dht_stop(net);
    free_net(net);
}

const char *dl_net_peer_id(const dl_net *net) { return net->id.peer_id; }
const char *dl_net_listen_address(const dl_net *net) { return net->listen_addr; }
const char *dl_net_announce_address(const dl_net *net) { return net->announce_addr; }
int dl_net_dht_port(const dl_net *net) { return net->dht_port; }

int dl_net_publish_progress(dl_net *net, uint64_t epoch, double samples_accumulated,
                            double samples_per_second) {
    if (!(samples_accumulated >= 0) || !(samples_per_second >= 0) || samples_accumulated > 1e18 ||
        samples_per_second > 1e12)
        return dl_fail("progress out of range: samples %g, samples/s %g", samples_accumulated, samples_per_second);
    struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
    if (!cmd) return -1;
    cmd->type = CMD_PUBLISH;
    cmd->id = epoch;
    cmd->samples = samples_accumulated;
    cmd->samples_per_second = samples_per_second;
    return dl_net_post(net, cmd);
}

int dl_net_swarm_view(dl_net *net, struct dl_swarm_view *view) {
    pthread_mutex_lock(&net->lock);
    int rc = dl_swarm_compute(&net->swarm, dl_wall_time(), net->cfg.target_batch, net->id.pk, view);
    view->num_connections = net->num_ready;
    view->refresh_s = net->refresh_s;
    pthread_mutex_unlock(&net->lock);
    return rc;
}
