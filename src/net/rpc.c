/* Requests and responses: ids, deadlines, cancellation, compression. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

static const char *const NET_STATUS_NAMES[] = {
    [DL_NET_OK] = "ok",
    [DL_NET_REMOTE_ERROR] = "remote error",
    [DL_NET_TIMEOUT] = "timeout",
    [DL_NET_CANCELLED] = "cancelled",
    [DL_NET_DISCONNECTED] = "disconnected",
    [DL_NET_NO_HANDLER] = "no handler",
};
_Static_assert(sizeof NET_STATUS_NAMES / sizeof NET_STATUS_NAMES[0] == DL_NET_STATUS_COUNT,
               "a request status without its name");

const char *dl_net_status_name(enum dl_net_status status) {
    /* unsigned: callbacks carry the status as an int; a negative one is out of range too */
    return (unsigned)status < DL_NET_STATUS_COUNT ? NET_STATUS_NAMES[status] : "unknown";
}

static void finish_pending(struct dl_pending *p, int status, const uint8_t *payload, size_t size) {
    if (p->callback) p->callback(p->user, p->id, status, payload, size);
    free(p);
}

static struct dl_pending *take_pending(struct dl_net *net, uint64_t id) {
    for (struct dl_pending **pp = &net->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct dl_pending *p = *pp;
            *pp = p->next;
            return p;
        }
    return NULL;
}

static void send_cancel(struct dl_net *net, uint64_t serial, uint64_t id) {
    struct dl_conn *c = dl_net_conn_by_serial(net, serial);
    if (!c || c->state != CONN_READY) return;
    size_t n;
    uint8_t *body = dl_msg_cancel_encode(id, &n);
    if (body) dl_conn_send(c, DL_MSG_CANCEL, body, n, true);
    free(body);
}

static void send_response(struct dl_conn *c, uint64_t id, int status, const uint8_t *payload,
                          size_t size, bool compressed, uint64_t raw_size) {
    struct dl_msg_response m = {id, (uint32_t)status, compressed, raw_size, payload, size};
    size_t n;
    uint8_t *body = dl_msg_response_encode(&m, &n);
    if (body && dl_conn_send(c, DL_MSG_RESPONSE, body, n, false))
        DL_WARN("net", "cannot answer %s: %s", c->peer_id, dl_error());
    free(body);
}

/* A target (known address) whose key belongs to peer_id, or NULL. */
static struct dl_target *target_of(struct dl_net *net, const char *peer_id) {
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (!t->has_pk || t->is_self) continue;
        char id[DL_PEER_ID_HEX];
        dl_peer_id_from_pk(t->pk, id);
        if (!strcmp(id, peer_id)) return t;
    }
    return NULL;
}

static struct dl_conn *ready_conn(struct dl_net *net, const char *peer_id) {
    struct dl_conn *c = NULL;
    for (struct dl_conn *x = net->conns; x; x = x->next)
        if (x->state == CONN_READY && !strcmp(x->peer_id, peer_id)) c = x;
    return c;
}

static bool dialling(struct dl_net *net, const struct dl_target *t) {
    for (struct dl_conn *c = net->conns; c; c = c->next)
        if (c->outbound && c->state < CONN_READY && !strcmp(c->dialled, t->address)) return true;
    return false;
}

/* Returns true when the command was parked (it runs once connected). */
static bool park_request(struct dl_net *net, struct dl_cmd *cmd) {
    double now = dl_now();
    struct dl_target *t = target_of(net, cmd->peer_id);
    if (cmd->park_until > 0) {
        /* Give up at the deadline, or as soon as a dial made since we
         * parked has ended without a connection (refused, reset). */
        bool dialled_since = t && t->last_dial > cmd->park_start;
        return now < cmd->park_until && t && !(dialled_since && !dialling(net, t));
    }
    if (!t || dl_net_is_banned(net, t->pk) || dl_net_target_refusing(t, now)) return false;
    /* Dial it now rather than at its backoff time. */
    t->next_attempt = now;
    t->backoff = 1;
    cmd->park_start = now;
    cmd->park_until = now + fmin(cmd->timeout_s, net->cfg.handshake_timeout_s);
    return true;
}

/* Each tick: parked requests whose peer is now connected go out; the others
 * wait until their time is up. */
static void tick_parked(struct dl_net *net) {
    struct dl_cmd *list = net->parked;
    net->parked = NULL;
    while (list) {
        struct dl_cmd *cmd = list;
        list = cmd->next;
        cmd->next = NULL;
        dl_rpc_run_cmd(net, cmd);
        if (cmd->next == cmd) {
            cmd->next = net->parked; /* parked again */
            net->parked = cmd;
        } else {
            free(cmd->payload);
            free(cmd);
        }
    }
}

void dl_rpc_run_cmd(struct dl_net *net, struct dl_cmd *cmd) {
    if (cmd->type == CMD_REQUEST) {
        struct dl_conn *c = ready_conn(net, cmd->peer_id);
        if (!c && !net->stopping && park_request(net, cmd)) {
            cmd->next = cmd; /* tells the caller to keep it */
            return;
        }
        if (!c || net->stopping) {
            if (cmd->callback) cmd->callback(cmd->user, cmd->id, DL_NET_DISCONNECTED, NULL, 0);
            return;
        }
        struct dl_msg_request m;
        memset(&m, 0, sizeof m);
        m.id = cmd->id;
        snprintf(m.method, sizeof m.method, "%s", cmd->method);
        m.timeout_s = cmd->timeout_s;
        m.compressed = cmd->compressed;
        m.raw_size = cmd->raw_size;
        m.payload = cmd->payload;
        m.size = cmd->size;
        size_t n;
        uint8_t *body = dl_msg_request_encode(&m, &n);
        if (!body || dl_conn_send(c, DL_MSG_REQUEST, body, n, false)) {
            DL_WARN("net", "request to %s not sent: %s", c->peer_id, dl_error());
            free(body);
            if (cmd->callback) cmd->callback(cmd->user, cmd->id, DL_NET_DISCONNECTED, NULL, 0);
            return;
        }
        free(body);
        struct dl_pending *p = dl_calloc(1, sizeof *p);
        if (!p) {
            if (cmd->callback) cmd->callback(cmd->user, cmd->id, DL_NET_DISCONNECTED, NULL, 0);
            return;
        }
        p->id = cmd->id;
        p->conn_serial = c->serial;
        p->deadline = dl_now() + cmd->timeout_s;
        p->callback = cmd->callback;
        p->user = cmd->user;
        p->next = net->pending;
        net->pending = p;
    } else if (cmd->type == CMD_CANCEL) {
        struct dl_pending *p = take_pending(net, cmd->id);
        if (!p) return;
        send_cancel(net, p->conn_serial, p->id);
        finish_pending(p, DL_NET_CANCELLED, NULL, 0);
    } else if (cmd->type == CMD_RESPOND) {
        for (struct dl_incoming_entry **pp = &net->incoming; *pp; pp = &(*pp)->next) {
            struct dl_incoming_entry *e = *pp;
            if (e->token != cmd->id) continue;
            *pp = e->next;
            struct dl_conn *c = dl_net_conn_by_serial(net, e->conn_serial);
            if (c && c->state == CONN_READY) {
                c->incoming_requests--;
                send_response(c, e->request_id, cmd->status, cmd->payload, cmd->size, cmd->compressed,
                              cmd->raw_size);
            }
            free(e);
            return;
        }
    }
}

/* Bytes queued to every fetch-only connection. */
static size_t fetch_only_output(const struct dl_net *net) {
    size_t out = 0;
    for (const struct dl_conn *c = net->conns; c; c = c->next)
        if (c->peer_fetch_only) out += evbuffer_get_length(bufferevent_get_output(c->bev));
    return out;
}

void dl_rpc_on_request(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    struct dl_msg_request m;
    if (dl_msg_request_decode(body, size, &m)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
        return;
    }
    if (!(m.timeout_s > 0) || m.timeout_s > 86400) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, "request timeout out of range", true);
        return;
    }
    bool run_file = !strncmp(m.method, DL_NET_PUBLIC_PREFIX, strlen(DL_NET_PUBLIC_PREFIX));
    const char *refusal = NULL;
    if (c->peer_fetch_only) {
        /* A few requests, one at a time, and only while what every
         * fetch-only connection has not read yet stays small: newcomers
         * cannot hold our output budget by never reading. */
        if (++c->requests_served > DL_NET_FETCH_ONLY_REQUESTS) {
            dl_conn_reject(c, DL_ERR_BUSY, "fetch-only connection used up its requests", false);
            return;
        }
        if (!run_file) refusal = "refused: a fetch-only connection may only ask for the run files";
        else if (c->incoming_requests > 0) refusal = "busy: one request at a time on a fetch-only connection";
        else if (fetch_only_output(net) > net->cfg.max_buffered / 8)
            refusal = "busy: the run files are on their way to other newcomers, retry later";
    }
    /* Run files are public and large: each host gets a few, then one every
     * DL_NET_RUN_FILES_EVERY_S, whoever asks. */
    if (!refusal && run_file && !dl_net_door_run_files_allowed(net, c->remote))
        refusal = "busy: too many run-file requests from this address, retry in a few seconds";
    if (refusal) {
        send_response(c, m.id, DL_NET_REMOTE_ERROR, (const uint8_t *)refusal, strlen(refusal), false, strlen(refusal));
        return;
    }
    dl_net_handler_fn fn = NULL;
    void *user = NULL;
    pthread_mutex_lock(&net->lock);
    for (int i = 0; i < DL_NET_MAX_HANDLERS; i++)
        if (net->handlers[i].fn && !strcmp(net->handlers[i].method, m.method)) {
            fn = net->handlers[i].fn;
            user = net->handlers[i].user;
        }
    pthread_mutex_unlock(&net->lock);
    if (!fn) {
        static const char msg[] = "no such method";
        send_response(c, m.id, DL_NET_NO_HANDLER, (const uint8_t *)msg, sizeof msg - 1, false, sizeof msg - 1);
        return;
    }
    if (c->incoming_requests >= DL_NET_MAX_INCOMING_PER_CONN) {
        static const char msg[] = "too many requests in flight";
        send_response(c, m.id, DL_NET_REMOTE_ERROR, (const uint8_t *)msg, sizeof msg - 1, false, sizeof msg - 1);
        return;
    }
    uint8_t *inflated = NULL;
    const uint8_t *payload = m.payload;
    size_t psize = m.size;
    if (m.compressed) {
        if (dl_wire_inflate(m.payload, m.size, m.raw_size, net->cfg.max_frame, &inflated)) {
            dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
            return;
        }
        payload = inflated;
        psize = (size_t)m.raw_size;
    }
    struct dl_incoming_entry *e = dl_calloc(1, sizeof *e);
    if (!e) {
        free(inflated);
        return;
    }
    e->token = ++net->next_token;
    e->request_id = m.id;
    e->conn_serial = c->serial;
    e->expires = dl_now() + m.timeout_s + 5;
    e->next = net->incoming;
    net->incoming = e;
    c->incoming_requests++;
    struct dl_net_incoming in = {e->token, c->peer_id, m.method, payload, psize, m.timeout_s, c->peer_role};
    fn(user, net, &in);
    free(inflated);
}

void dl_rpc_on_response(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    struct dl_msg_response m;
    if (dl_msg_response_decode(body, size, &m)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
        return;
    }
    struct dl_pending *p = NULL;
    for (struct dl_pending *x = net->pending; x; x = x->next)
        if (x->id == m.id && x->conn_serial == c->serial) p = x;
    if (!p) return; /* late answer to a timed-out or cancelled request */
    take_pending(net, m.id);
    int status = m.status <= DL_NET_NO_HANDLER ? (int)m.status : DL_NET_REMOTE_ERROR;
    if (m.compressed) {
        uint8_t *out;
        if (dl_wire_inflate(m.payload, m.size, m.raw_size, net->cfg.max_frame, &out)) {
            finish_pending(p, DL_NET_REMOTE_ERROR, NULL, 0);
            dl_conn_reject(c, DL_ERR_PROTOCOL, "corrupt compressed response", true);
            return;
        }
        finish_pending(p, status, out, (size_t)m.raw_size);
        free(out);
    } else {
        finish_pending(p, status, m.payload, m.size);
    }
}

void dl_rpc_on_cancel(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    uint64_t id;
    if (dl_msg_cancel_decode(body, size, &id)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
        return;
    }
    for (struct dl_incoming_entry **pp = &net->incoming; *pp; pp = &(*pp)->next)
        if ((*pp)->request_id == id && (*pp)->conn_serial == c->serial) {
            struct dl_incoming_entry *e = *pp;
            *pp = e->next;
            c->incoming_requests--;
            free(e);
            return;
        }
}

void dl_rpc_tick(struct dl_net *net, double now) {
    tick_parked(net);
    for (struct dl_pending **pp = &net->pending; *pp;) {
        struct dl_pending *p = *pp;
        if (now >= p->deadline) {
            *pp = p->next;
            send_cancel(net, p->conn_serial, p->id);
            finish_pending(p, DL_NET_TIMEOUT, NULL, 0);
        } else {
            pp = &p->next;
        }
    }
    for (struct dl_incoming_entry **pp = &net->incoming; *pp;) {
        struct dl_incoming_entry *e = *pp;
        if (now >= e->expires) {
            *pp = e->next;
            struct dl_conn *c = dl_net_conn_by_serial(net, e->conn_serial);
            if (c) c->incoming_requests--;
            free(e);
        } else {
            pp = &e->next;
        }
    }
}

void dl_rpc_conn_closed(struct dl_net *net, struct dl_conn *c) {
    for (struct dl_pending **pp = &net->pending; *pp;) {
        struct dl_pending *p = *pp;
        if (p->conn_serial == c->serial) {
            *pp = p->next;
            finish_pending(p, DL_NET_DISCONNECTED, NULL, 0);
        } else {
            pp = &p->next;
        }
    }
    for (struct dl_incoming_entry **pp = &net->incoming; *pp;) {
        struct dl_incoming_entry *e = *pp;
        if (e->conn_serial == c->serial) {
            *pp = e->next;
            free(e);
        } else {
            pp = &e->next;
        }
    }
}

void dl_rpc_fail_all(struct dl_net *net) {
    while (net->parked) {
        struct dl_cmd *cmd = net->parked;
        net->parked = cmd->next;
        if (cmd->callback) cmd->callback(cmd->user, cmd->id, DL_NET_DISCONNECTED, NULL, 0);
        free(cmd->payload);
        free(cmd);
    }
    while (net->pending) {
        struct dl_pending *p = net->pending;
        net->pending = p->next;
        finish_pending(p, DL_NET_DISCONNECTED, NULL, 0);
    }
    while (net->incoming) {
        struct dl_incoming_entry *e = net->incoming;
        net->incoming = e->next;
        free(e);
    }
}

/* ---- public entry points (any thread) ------------------------------------------ */

static struct dl_cmd *payload_cmd(const void *payload, size_t size, size_t max, unsigned flags) {
    if (size > max) {
        dl_fail("payload of %zu bytes exceeds the frame limit (%zu)", size, max);
        return NULL;
    }
    struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
    if (!cmd) return NULL;
    uint8_t *z = NULL;
    size_t zn = 0;
    int rc = (flags & DL_NET_RAW) ? 1 : dl_wire_deflate(payload, size, &z, &zn);
    if (rc < 0) {
        free(cmd);
        return NULL;
    }
    cmd->raw_size = size;
    if (rc == 0) {
        cmd->payload = z;
        cmd->size = zn;
        cmd->compressed = true;
    } else {
        cmd->payload = dl_malloc(size ? size : 1);
        if (!cmd->payload) {
            free(cmd);
            return NULL;
        }
        if (size) memcpy(cmd->payload, payload, size);
        cmd->size = size;
    }
    return cmd;
}

uint64_t dl_net_request(dl_net *net, const char *peer_id, const char *method, const void *payload,
                        size_t size, double timeout_s, dl_net_response_fn callback, void *user) {
    return dl_net_request_ex(net, peer_id, method, payload, size, timeout_s, 0, callback, user);
}

uint64_t dl_net_request_ex(dl_net *net, const char *peer_id, const char *method, const void *payload,
                           size_t size, double timeout_s, unsigned flags, dl_net_response_fn callback,
                           void *user) {
    if (!method || strlen(method) >= DL_WIRE_METHOD_MAX || !peer_id || strlen(peer_id) >= DL_PEER_ID_HEX ||
        !(timeout_s > 0) || timeout_s > 86400) {
        dl_fail("request: bad method, peer id or timeout");
        return 0;
    }
    struct dl_cmd *cmd = payload_cmd(payload, size, net->cfg.max_frame - 256, flags);
    if (!cmd) return 0;
    cmd->type = CMD_REQUEST;
    snprintf(cmd->peer_id, sizeof cmd->peer_id, "%s", peer_id);
    snprintf(cmd->method, sizeof cmd->method, "%s", method);
    cmd->timeout_s = timeout_s;
    cmd->callback = callback;
    cmd->user = user;
    pthread_mutex_lock(&net->lock);
    cmd->id = ++net->next_request_id;
    pthread_mutex_unlock(&net->lock);
    uint64_t id = cmd->id;
    dl_net_post(net, cmd);
    return id;
}

int dl_net_cancel(dl_net *net, uint64_t request_id) {
    struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
    if (!cmd) return -1;
    cmd->type = CMD_CANCEL;
    cmd->id = request_id;
    return dl_net_post(net, cmd);
}

int dl_net_respond(dl_net *net, uint64_t token, int status, const void *payload, size_t size) {
    return dl_net_respond_ex(net, token, status, payload, size, 0);
}

int dl_net_respond_ex(dl_net *net, uint64_t token, int status, const void *payload, size_t size,
                      unsigned flags) {
    if (status != DL_NET_OK && status != DL_NET_REMOTE_ERROR) return dl_fail("respond: status must be OK or REMOTE_ERROR");
    struct dl_cmd *cmd = payload_cmd(payload, size, net->cfg.max_frame - 256, flags);
    if (!cmd) return -1;
    cmd->type = CMD_RESPOND;
    cmd->id = token;
    cmd->status = status;
    return dl_net_post(net, cmd);
}

struct dl_net_prepared {
    uint8_t *data;
    size_t size;
    uint64_t raw_size;
    bool compressed;
};

int dl_net_prepare(const void *payload, size_t size, dl_net_prepared **out) {
    *out = NULL;
    struct dl_net_prepared *p = dl_calloc(1, sizeof *p);
    if (!p) return -1;
    struct dl_cmd *cmd = payload_cmd(payload, size, SIZE_MAX, 0);
    if (!cmd) {
        free(p);
        return -1;
    }
    p->data = cmd->payload;
    p->size = cmd->size;
    p->raw_size = cmd->raw_size;
    p->compressed = cmd->compressed;
    free(cmd);
    *out = p;
    return 0;
}

void dl_net_prepared_free(dl_net_prepared *prepared) {
    if (!prepared) return;
    free(prepared->data);
    free(prepared);
}

size_t dl_net_prepared_wire_size(const dl_net_prepared *prepared) { return prepared->size; }

int dl_net_respond_prepared(dl_net *net, uint64_t token, const dl_net_prepared *prepared) {
    if (prepared->size > net->cfg.max_frame - 256)
        return dl_fail("payload of %zu bytes exceeds the frame limit (%zu)", prepared->size,
                       (size_t)net->cfg.max_frame - 256);
    struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
    if (!cmd) return -1;
    cmd->payload = dl_malloc(prepared->size ? prepared->size : 1);
    if (!cmd->payload) {
        free(cmd);
        return -1;
    }
    if (prepared->size) memcpy(cmd->payload, prepared->data, prepared->size);
    cmd->size = prepared->size;
    cmd->raw_size = prepared->raw_size;
    cmd->compressed = prepared->compressed;
    cmd->type = CMD_RESPOND;
    cmd->id = token;
    cmd->status = DL_NET_OK;
    return dl_net_post(net, cmd);
}

int dl_net_set_handler(dl_net *net, const char *method, dl_net_handler_fn handler, void *user) {
    if (!method || !*method || strlen(method) >= DL_WIRE_METHOD_MAX) return dl_fail("handler: bad method name");
    pthread_mutex_lock(&net->lock);
    int slot = -1;
    for (int i = 0; i < DL_NET_MAX_HANDLERS; i++)
        if (net->handlers[i].fn && !strcmp(net->handlers[i].method, method)) slot = i;
    if (slot < 0 && handler)
        for (int i = 0; i < DL_NET_MAX_HANDLERS && slot < 0; i++)
            if (!net->handlers[i].fn) slot = i;
    int rc = 0;
    if (slot < 0) {
        rc = handler ? dl_fail("handler: more than %d methods", DL_NET_MAX_HANDLERS) : 0;
    } else {
        snprintf(net->handlers[slot].method, sizeof net->handlers[slot].method, "%s", method);
        net->handlers[slot].fn = handler;
        net->handlers[slot].user = user;
    }
    pthread_mutex_unlock(&net->lock);
    return rc;
}

struct sync_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
    uint8_t *data;
    size_t size;
};

static void sync_cb(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct sync_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    if (status == DL_NET_OK) {
        w->data = malloc(size ? size : 1);
        if (w->data && size) memcpy(w->data, payload, size);
        w->size = size;
        if (!w->data) w->status = DL_NET_DISCONNECTED;
    }
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int dl_net_request_sync(dl_net *net, const char *peer_id, const char *method, const void *payload,
                        size_t size, double timeout_s, uint8_t **response, size_t *response_size) {
    struct sync_wait w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    *response = NULL;
    *response_size = 0;
    if (!dl_net_request(net, peer_id, method, payload, size, timeout_s, sync_cb, &w)) {
        w.status = DL_NET_DISCONNECTED;
    } else {
        /* The callback always runs (on timeout at the latest), so this wait ends. */
        pthread_mutex_lock(&w.lock);
        while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    *response = w.data;
    *response_size = w.size;
    return w.status;
}
