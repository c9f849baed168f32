/* One TCP connection: framing, the handshake state machine and dispatch of
 * authenticated frames. Every limit is checked where bytes enter. What the
 * layers above must know (messages, readiness, closing, misdeeds) goes up
 * through the struct dl_conn_ops they registered. */
#include <string.h>
#include <stdlib.h>

#include "dedloc/util.h"
#include "net/net_internal.h"

void dl_conn_set_ops(struct dl_net *net, const struct dl_conn_ops *ops) { net->conn_ops = ops; }

static const char *conn_name(const struct dl_conn *c) {
    return c->state >= CONN_AUTH && c->peer_id[0] ? c->peer_id : c->remote;
}

struct dl_conn *dl_net_conn_by_serial(struct dl_net *net, uint64_t serial) {
    for (struct dl_conn *c = net->conns; c; c = c->next)
        if (c->serial == serial) return c;
    return NULL;
}

struct dl_conn *dl_net_conn_by_pk(struct dl_net *net, const uint8_t pk[DL_WIRE_PK], bool ready_only) {
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        if (c->state == CONN_CLOSING) continue;
        if (ready_only && c->state != CONN_READY) continue;
        if (c->state >= CONN_AUTH && !memcmp(c->peer_pk, pk, DL_WIRE_PK)) return c;
    }
    return NULL;
}

void dl_conn_close(struct dl_conn *c, const char *why) {
    struct dl_net *net = c->net;
    for (struct dl_conn **p = &net->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    net->num_conns--;
    if (c->state == CONN_READY) {
        DL_INFO("net", "disconnected from %s (%s)", conn_name(c), why);
    } else {
        DL_DEBUG("net", "closed connection %s (%s)", conn_name(c), why);
    }
    bool was_ready = c->state == CONN_READY;
    /* A dial that never reached a handshake counts against its address. */
    if (c->outbound && !c->was_ready && c->dialled[0]) net->conn_ops->handshake_missed(c);
    c->state = CONN_CLOSING;
    net->conn_ops->closing(c, was_ready);
    /* Leave the rate-limit group now: bufferevent_free may finish later,
     * after the group itself is gone. */
    if (net->rate_group) bufferevent_remove_from_rate_limit_group(c->bev);
    bufferevent_free(c->bev);
    dl_handshake_clear(&c->hs);
    sodium_memzero(&c->rx, sizeof c->rx);
    sodium_memzero(&c->tx, sizeof c->tx);
    free(c);
}

static void send_clear(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size) {
    uint8_t header[DL_WIRE_HEADER];
    dl_frame_write_header(header, type, (uint32_t)size);
    bufferevent_write(c->bev, header, sizeof header);
    bufferevent_write(c->bev, body, size);
}

static void flush_then_close_cb(struct bufferevent *bev, void *arg) {
    struct dl_conn *c = arg;
    if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) dl_conn_close(c, "closed after error");
}

void dl_conn_reject(struct dl_conn *c, uint32_t code, const char *why, bool ban) {
    struct dl_net *net = c->net;
    if (ban && c->state >= CONN_AUTH) {
        net->conn_ops->ban(c);
        DL_WARN("net", "peer %s (%s) misbehaved: %s; banned for %.0f s", c->peer_id, c->remote, why,
                net->cfg.ban_s);
        if (!c->outbound) net->conn_ops->strike(c, why);
    } else if (code == DL_ERR_DUPLICATE || code == DL_ERR_SELF) {
        DL_DEBUG("net", "closing %s: %s", conn_name(c), why);
    } else {
        DL_WARN("net", "closing connection %s: %s", conn_name(c), why);
    }
    if (!code || c->state == CONN_CONNECTING) {
        dl_conn_close(c, why);
        return;
    }
    struct dl_msg_error e;
    memset(&e, 0, sizeof e);
    e.code = code;
    e.version = DL_WIRE_VERSION;
    snprintf(e.text, sizeof e.text, "%s", why);
    size_t n;
    uint8_t *body = dl_msg_error_encode(&e, &n);
    if (body) send_clear(c, DL_MSG_ERROR, body, n);
    free(body);
    bool was_ready = c->state == CONN_READY;
    c->state = CONN_CLOSING;
    c->closing_since = dl_now();
    net->conn_ops->closing(c, was_ready);
    bufferevent_disable(c->bev, EV_READ);
    bufferevent_setcb(c->bev, NULL, flush_then_close_cb, NULL, c);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) dl_conn_close(c, why);
}

int dl_conn_send(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size, bool droppable) {
    if (c->state != CONN_READY && type != DL_MSG_AUTH) return dl_fail("connection not ready");
    size_t queued = evbuffer_get_length(bufferevent_get_output(c->bev));
    size_t bound = c->net->cfg.max_pending_out;
    /* Gossip and pings give way early so requests still fit. */
    if (droppable ? queued > bound / 4 : queued + size > bound)
        return dl_fail("output to %s is full (%zu bytes queued)", c->peer_id, queued);
    /* All connections' output together stays within max_buffered. */
    size_t all = dl_net_buffered(c->net, true);
    if (all + size > c->net->cfg.max_buffered && (droppable || queued > 0))
        return dl_fail("output to %s waits: %zu bytes buffered over all connections", c->peer_id, all);
    if (size + DL_WIRE_TAG > c->net->cfg.max_frame) return dl_fail("message of %zu bytes exceeds the frame limit", size);
    size_t total = DL_WIRE_HEADER + size + DL_WIRE_TAG;
    uint8_t *frame = dl_malloc(total);
    if (!frame) return -1;
    dl_frame_seal(&c->tx, type, body, size, frame);
    int rc = bufferevent_write(c->bev, frame, total);
    free(frame);
    return rc ? dl_fail("bufferevent_write failed") : 0;
}

/* Peers of one run must share its manifest: a different one (or none where
 * we have one) would train another model, or the same one differently.
 * Both sides say why (the reason goes into the ERROR message and our log). */
static bool manifest_mismatch(struct dl_conn *c, const struct dl_msg_hello *h) {
    struct dl_net *net = c->net;
    if (!net->has_manifest && !h->has_manifest) return false;
    if (net->has_manifest && h->has_manifest && !memcmp(net->manifest_hash, h->manifest_hash, 32)) return false;
    char mine[24] = "none", theirs[24] = "none", hex[17], why[128];
    if (net->has_manifest) {
        sodium_bin2hex(hex, sizeof hex, net->manifest_hash, 8);
        snprintf(mine, sizeof mine, "%s...", hex);
    }
    if (h->has_manifest) {
        sodium_bin2hex(hex, sizeof hex, h->manifest_hash, 8);
        snprintf(theirs, sizeof theirs, "%s...", hex);
    }
    snprintf(why, sizeof why, "different run manifest: %s (the refusing peer) vs %s (the refused one)", mine, theirs);
    dl_conn_reject(c, DL_ERR_MANIFEST, why, false);
    return true;
}

static void on_hello(struct dl_conn *c, const uint8_t *body, size_t size) {
    struct dl_net *net = c->net;
    if (dl_handshake_on_hello(&c->hs, body, size, &c->rx, &c->tx)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), false);
        return;
    }
    const struct dl_msg_hello *h = &c->hs.peer;
    if (h->version != DL_WIRE_VERSION) {
        dl_conn_reject(c, DL_ERR_VERSION, "unsupported protocol version", false);
        return;
    }
    /* A fetch-only newcomer does not know the run yet; a fetch-only net
     * (ours) learns it from the manifest it asks for. */
    bool fetching = h->fetch_only || net->cfg.fetch_only;
    if (!fetching && strcmp(h->run_id, net->run_id)) {
        /* Both ids, cut to fit the ERROR message: a typo shows at a glance. */
        char why[128];
        snprintf(why, sizeof why, "different run id: '%.40s' (the refusing peer) vs '%.40s' (the refused one)",
                 net->run_id, h->run_id);
        dl_conn_reject(c, DL_ERR_RUN, why, false);
        return;
    }
    if (!fetching && manifest_mismatch(c, h)) return;
    if (!memcmp(h->sign_pk, net->id.pk, DL_WIRE_PK)) {
        if (c->outbound) net->conn_ops->dialled_self(c);
        dl_conn_reject(c, DL_ERR_SELF, "connected to ourselves", false);
        return;
    }
    /* Known before refuse_key: fetch-only connections have limits of their own. */
    c->peer_fetch_only = h->fetch_only;
    const char *refused = NULL;
    uint32_t refusal = net->conn_ops->refuse_key(c, h->sign_pk, &refused);
    if (refusal) {
        dl_conn_reject(c, refusal, refused, false);
        return;
    }
    memcpy(c->peer_pk, h->sign_pk, DL_WIRE_PK);
    dl_peer_id_from_pk(c->peer_pk, c->peer_id);
    c->peer_client = h->client_mode;
    if (h->fetch_only) DL_DEBUG("net", "%s connects to fetch the run files", c->peer_id);
    c->state = CONN_AUTH;
    uint8_t sig[DL_WIRE_SIG];
    dl_handshake_sign(&c->hs, &net->id, sig);
    size_t n;
    uint8_t *auth = dl_msg_auth_encode(sig, net->trust.my_token, net->trust.my_token_size, &n);
    if (!auth || dl_conn_send(c, DL_MSG_AUTH, auth, n, false)) {
        free(auth);
        dl_conn_close(c, "cannot send AUTH");
        return;
    }
    free(auth);
}

static void on_auth(struct dl_conn *c, const uint8_t *body, size_t size) {
    struct dl_net *net = c->net;
    uint8_t sig[DL_WIRE_SIG];
    const uint8_t *token;
    size_t token_size;
    if (dl_msg_auth_decode(body, size, sig, &token, &token_size)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), false);
        return;
    }
    if (dl_handshake_verify(&c->hs, sig)) {
        /* The key was not proven, so it is not banned: anyone could claim
         * it. The address is: each failure cost us a verification. */
        if (!c->outbound) net->conn_ops->strike(c, "forged handshake signature");
        dl_conn_reject(c, DL_ERR_AUTH, "forged handshake signature", false);
        return;
    }
    /* A fetch-only peer is admitted to the run files alone (rpc.c). */
    if (!c->peer_fetch_only && !net->cfg.fetch_only && net->conn_ops->admit(c, token, token_size)) return;
    dl_handshake_clear(&c->hs);
    /* Two connections to one peer (both dialled at once): keep the one
     * dialled by the smaller key, or the newer if both were dialled by the
     * same side (the older is then likely dead). Both sides decide alike. */
    struct dl_conn *old = dl_net_conn_by_pk(net, c->peer_pk, true);
    if (old) {
        const uint8_t *dialler_new = c->outbound ? net->id.pk : c->peer_pk;
        const uint8_t *dialler_old = old->outbound ? net->id.pk : old->peer_pk;
        if (dialler_new != dialler_old && memcmp(dialler_old, dialler_new, DL_WIRE_PK) < 0) {
            dl_conn_reject(c, DL_ERR_DUPLICATE, "duplicate connection", false);
            return;
        }
        dl_conn_reject(old, DL_ERR_DUPLICATE, "duplicate connection (replaced)", false);
    }
    c->state = CONN_READY;
    c->was_ready = true;
    c->new_keys_tokens = DL_NET_NEW_KEYS_BURST;
    c->new_keys_last = dl_now();
    /* At most one frame plus its header waits in the buffer; libevent moves
     * 16 KiB per read by default, and gradient parts are megabytes. */
    bufferevent_setwatermark(c->bev, EV_READ, 0, DL_WIRE_HEADER + (size_t)net->cfg.max_frame + 4096);
    bufferevent_set_max_single_read(c->bev, 256 * 1024);
    DL_INFO("net", "authenticated %s %s at %s (handshake %.2f ms)", c->peer_client ? "client" : "peer",
            c->peer_id, c->remote, (dl_now() - c->created) * 1e3);
    net->conn_ops->ready(c);
}

static void on_sealed(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size) {
    switch (type) {
    case DL_MSG_PING: {
        uint64_t nonce;
        if (dl_msg_ping_decode(body, size, &nonce)) break;
        size_t n;
        uint8_t *pong = dl_msg_ping_encode(nonce, &n);
        if (pong) dl_conn_send(c, DL_MSG_PONG, pong, n, true);
        free(pong);
        return;
    }
    case DL_MSG_PONG: {
        uint64_t nonce;
        if (dl_msg_ping_decode(body, size, &nonce)) break;
        return;
    }
    default:
        if (c->net->conn_ops->message(c, type, body, size) == 0) return;
        dl_fail("unexpected message type 0x%02x after the handshake", type);
        break;
    }
    dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
}

/* A frame sent in clear: HELLO during the handshake, or ERROR at any time. */
static void on_clear_frame(struct dl_conn *c, const struct dl_frame_header *h, const uint8_t *body,
                           size_t size) {
    if (h->type == DL_MSG_ERROR) {
        struct dl_msg_error e;
        if (dl_msg_error_decode(body, size, &e) == 0 && (e.code == DL_ERR_DUPLICATE || e.code == DL_ERR_SELF))
            DL_DEBUG("net", "%s closed a redundant connection: %s", conn_name(c), e.text);
        else if (dl_msg_error_decode(body, size, &e) == 0 && c->outbound && c->dialled[0])
            c->net->conn_ops->refused(c, e.code, e.text, e.version);
        else if (dl_msg_error_decode(body, size, &e) == 0)
            DL_WARN("net", "%s refused us: %s (code %u, its protocol version %u)", conn_name(c), e.text,
                    e.code, e.version);
        dl_conn_close(c, "peer sent an error");
        return;
    }
    if (c->state != CONN_HELLO || h->type != DL_MSG_HELLO) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, "expected HELLO", false);
        return;
    }
    on_hello(c, body, size);
}

size_t dl_net_buffered(struct dl_net *net, bool output) {
    size_t in = 0, out = 0;
    for (const struct dl_conn *c = net->conns; c; c = c->next) {
        in += evbuffer_get_length(bufferevent_get_input(c->bev));
        out += evbuffer_get_length(bufferevent_get_output(c->bev));
    }
    net->buffered = in + out;
    return output ? out : in;
}

/* The largest body each message type may have once authenticated, checked
 * on the header, before the body is read (docs/protocol.md, "Messages"). */
static uint32_t max_body_of(const struct dl_net *net, uint8_t type) {
    uint32_t cap;
    switch (type) {
    case DL_MSG_PING: case DL_MSG_PONG: case DL_MSG_CANCEL: cap = 64; break;
    case DL_MSG_ERROR: cap = 512; break;
    case DL_MSG_RECORDS: cap = DL_WIRE_MAX_RECORDS * 1030u + 64; break;
    case DL_MSG_REVOCATIONS: cap = 2u << 20; break;
    case DL_MSG_REQUEST: case DL_MSG_RESPONSE: cap = net->cfg.max_frame; break;
    default: cap = DL_NET_PREAUTH_MAX_BODY; break;
    }
    return cap < net->cfg.max_frame ? cap : net->cfg.max_frame;
}

/* Over the global budget, a connection waiting for the rest of a large
 * frame stops reading (the kernel's socket buffer and TCP flow control hold
 * the sender back) until the tick sees room again. */
static bool pause_if_over_budget(struct dl_conn *c, size_t frame) {
    struct dl_net *net = c->net;
    if (frame < 65536 || dl_net_buffered(net, false) <= net->cfg.max_buffered) return false;
    bufferevent_disable(c->bev, EV_READ);
    c->read_paused = true;
    return true;
}

void dl_net_tick_budget(struct dl_net *net, double now) {
    struct dl_conn *largest = NULL;
    bool any_paused = false, any_reading = false;
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        if (c->state == CONN_CLOSING) continue;
        size_t in = evbuffer_get_length(bufferevent_get_input(c->bev));
        if (c->read_paused) {
            any_paused = true;
            c->last_rx = now; /* silent because we stopped reading, not dead */
            if (!largest || in > evbuffer_get_length(bufferevent_get_input(largest->bev))) largest = c;
        } else if (in > 0) {
            any_reading = true;
        }
    }
    if (!any_paused) return;
    bool room = dl_net_buffered(net, false) < net->cfg.max_buffered / 4 * 3;
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        /* With room every paused connection resumes; without, and nobody
         * else completing a frame, the one closest to done goes on alone. */
        if (!c->read_paused || c->state == CONN_CLOSING || !(room || (!any_reading && c == largest))) continue;
        c->read_paused = false;
        bufferevent_enable(c->bev, EV_READ);
    }
}

/* A peer we dialled answered in a way no retry changes (another protocol,
 * another version): kept for dl_net_dial_refused, so that a newcomer stops
 * at once instead of waiting out its timeout. */
static void note_refusal(struct dl_conn *c, const char *why) {
    if (!c->outbound || c->state == CONN_READY) return;
    struct dl_net *net = c->net;
    pthread_mutex_lock(&net->lock);
    snprintf(net->dial_refusal, sizeof net->dial_refusal, "%s: %s", c->dialled, why);
    pthread_mutex_unlock(&net->lock);
}

static void read_cb(struct bufferevent *bev, void *arg) {
    struct dl_conn *c = arg;
    struct dl_net *net = c->net;
    struct evbuffer *in = bufferevent_get_input(bev);
    uint64_t serial = c->serial;
    while (c->state != CONN_CLOSING && c->state != CONN_CONNECTING) {
        size_t avail = evbuffer_get_length(in);
        if (avail == 0) return;
        uint8_t header[DL_WIRE_HEADER];
        size_t hn = avail < DL_WIRE_HEADER ? avail : DL_WIRE_HEADER;
        evbuffer_copyout(in, header, hn);
        uint32_t max_body = c->state == CONN_READY ? net->cfg.max_frame : DL_NET_PREAUTH_MAX_BODY;
        struct dl_frame_header h;
        int rc = dl_frame_parse_header(header, hn, max_body, &h);
        if (rc == DL_FRAME_NEED_MORE) return;
        if (rc == DL_FRAME_BAD_MAGIC) {
            note_refusal(c, "not the dedloc protocol (bad magic)");
            dl_conn_reject(c, 0, "not the dedloc protocol (bad magic)", c->state == CONN_READY);
            return;
        }
        if (rc == DL_FRAME_BAD_VERSION) {
            char why[96];
            snprintf(why, sizeof why, "protocol version %u, we speak %u", (unsigned)h.version, (unsigned)DL_WIRE_VERSION);
            note_refusal(c, why);
            dl_conn_reject(c, DL_ERR_VERSION, why, false);
            return;
        }
        if (rc == DL_FRAME_OK && c->state == CONN_READY && h.length > max_body_of(net, h.type)) {
            max_body = max_body_of(net, h.type);
            rc = DL_FRAME_TOO_LARGE;
        }
        if (rc == DL_FRAME_TOO_LARGE) {
            char why[96];
            snprintf(why, sizeof why, "frame of %u bytes (type 0x%02x) exceeds the limit of %u", h.length,
                     (unsigned)h.type, max_body);
            dl_conn_reject(c, DL_ERR_PROTOCOL, why, c->state == CONN_READY);
            return;
        }
        if (avail < DL_WIRE_HEADER + (size_t)h.length) { /* wait for the rest */
            pause_if_over_budget(c, h.length);
            return;
        }
        uint8_t *body = dl_malloc(h.length ? h.length : 1);
        if (!body) {
            dl_conn_close(c, "out of memory");
            return;
        }
        evbuffer_drain(in, DL_WIRE_HEADER);
        evbuffer_remove(in, body, h.length);
        size_t size = h.length;
        c->last_rx = dl_now();
        bool sealed = c->state == CONN_AUTH || c->state == CONN_READY;
        if (sealed && h.type != DL_MSG_ERROR) {
            if (dl_frame_open(&c->rx, header, body, &size)) {
                free(body);
                dl_conn_reject(c, 0, "tampered or out-of-order frame (authentication failed)",
                               c->state == CONN_READY);
                return;
            }
            if (c->state == CONN_AUTH) {
                if (h.type != DL_MSG_AUTH) {
                    free(body);
                    dl_conn_reject(c, DL_ERR_PROTOCOL, "expected AUTH", false);
                    return;
                }
                on_auth(c, body, size);
            } else {
                on_sealed(c, h.type, body, size);
            }
        } else {
            on_clear_frame(c, &h, body, size);
        }
        free(body);
        if (!dl_net_conn_by_serial(net, serial)) return;
    }
}

static void event_cb(struct bufferevent *bev, short events, void *arg) {
    struct dl_conn *c = arg;
    if (events & BEV_EVENT_CONNECTED) {
        dl_net_socket_nodelay(bufferevent_getfd(bev));
        c->state = CONN_HELLO;
        c->created = dl_now();
        send_clear(c, DL_MSG_HELLO, c->hs.my_hello, c->hs.my_hello_size);
        return;
    }
    const char *why = NULL;
    if (events & BEV_EVENT_TIMEOUT) why = "timed out";
    else if (events & BEV_EVENT_EOF) why = "closed by peer";
    else if (events & BEV_EVENT_ERROR) why = evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR());
    if (!why) return;
    if (c->outbound && c->state < CONN_AUTH) c->net->conn_ops->dial_failed(c, why);
    dl_conn_close(c, why);
}

struct dl_conn *dl_conn_new(struct dl_net *net, struct bufferevent *bev, bool outbound,
                            const char *remote, const char *dialled) {
    struct dl_conn *c = dl_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->net = net;
    c->bev = bev;
    c->serial = ++net->next_serial;
    c->outbound = outbound;
    c->state = outbound ? CONN_CONNECTING : CONN_HELLO;
    c->created = c->last_rx = dl_now();
    snprintf(c->remote, sizeof c->remote, "%s", remote);
    if (dialled) snprintf(c->dialled, sizeof c->dialled, "%s", dialled);
    if (dl_handshake_begin_ex(&c->hs, outbound, &net->id, net->run_id, net->cfg.client_mode,
                              net->has_manifest ? net->manifest_hash : NULL, net->cfg.fetch_only)) {
        free(c);
        return NULL;
    }
    c->next = net->conns;
    net->conns = c;
    net->num_conns++;
    bufferevent_setcb(bev, read_cb, NULL, event_cb, c);
    /* Bounded input: before authentication only small frames are accepted,
     * so only a little is read ahead; on_auth widens it once the peer has
     * proved who it is. */
    bufferevent_setwatermark(bev, EV_READ, 0, 2 * (DL_WIRE_HEADER + DL_NET_PREAUTH_MAX_BODY));
    bufferevent_set_max_single_read(bev, 4096);
    bufferevent_set_max_single_write(bev, 256 * 1024);
    if (net->rate_group) bufferevent_add_to_rate_limit_group(bev, net->rate_group);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    if (!outbound) send_clear(c, DL_MSG_HELLO, c->hs.my_hello, c->hs.my_hello_size);
    return c;
}
