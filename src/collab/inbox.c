/* Requests, answers and the inbox: the averaging round's transport over the
 * network (inbox.h). Answers arrive on the network thread, which only copies
 * them into the inbox; the round thread takes them from there. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/inbox.h"
#include "dedloc/util.h"

const struct dl_avg_method dl_avg_methods[DL_AVG_NUM_METHODS] = {
    {"avg.join", EV_JOIN},         {"avg.chunk", EV_CHUNK},     {"avg.result", EV_RESULT},
    {"avg.fetch", EV_FETCH},       {"avg.rereduce", EV_REREDUCE}, {"avg.contrib", EV_CONTRIB},
    {"avg.alive", EV_ALIVE},       {"avg.audit", EV_AUDIT},
};

int dl_avg_method_kind(const char *method) {
    for (size_t i = 0; i < DL_AVG_NUM_METHODS; i++)
        if (!strcmp(dl_avg_methods[i].method, method)) return dl_avg_methods[i].kind;
    return -1;
}

struct dl_avg_event *dl_avg_event_new(int kind, const char *peer_id, const uint8_t *data, size_t size) {
    struct dl_avg_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->kind = kind;
    if (peer_id) snprintf(ev->peer_id, sizeof ev->peer_id, "%s", peer_id);
    if (size) {
        ev->data = malloc(size);
        if (!ev->data) {
            free(ev);
            return NULL;
        }
        memcpy(ev->data, data, size);
    }
    ev->size = size;
    return ev;
}

void dl_avg_event_free(struct dl_avg_event *ev) {
    if (!ev) return;
    free(ev->data);
    free(ev);
}

/* ---- the inbox ------------------------------------------------------------------ */

int dl_inbox_init(struct dl_inbox *inbox, pthread_mutex_t *lock) {
    memset(inbox, 0, sizeof *inbox);
    inbox->lock = lock;
    /* Waits end at dl_now() times: the monotonic clock. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&inbox->wake, &attr);
    pthread_condattr_destroy(&attr);
    return rc ? dl_fail("collab: cannot create the inbox's condition variable") : 0;
}

void dl_inbox_destroy(struct dl_inbox *inbox) {
    while (inbox->head) {
        struct dl_avg_event *ev = inbox->head;
        inbox->head = ev->next;
        dl_avg_event_free(ev);
    }
    inbox->tail = NULL;
    pthread_cond_destroy(&inbox->wake);
}

void dl_inbox_push(struct dl_inbox *inbox, struct dl_avg_event *ev) {
    ev->next = NULL;
    if (inbox->tail) inbox->tail->next = ev;
    else inbox->head = ev;
    inbox->tail = ev;
    pthread_cond_signal(&inbox->wake);
}

const char *dl_inbox_offer(struct dl_inbox *inbox, int kind, const struct dl_net_incoming *in) {
    if (kind == EV_JOIN && in->size > DL_INBOX_JOIN_MAX_BYTES) return "refused: a join of this size";
    if (inbox->requests >= DL_INBOX_MAX_EVENTS || inbox->request_bytes + in->size > DL_INBOX_MAX_BYTES)
        return "busy: averaging inbox full";
    size_t mine = 0, my_bytes = 0, my_joins = 0;
    for (const struct dl_avg_event *ev = inbox->head; ev; ev = ev->next) {
        if (!ev->token || strcmp(ev->peer_id, in->peer_id)) continue;
        mine++;
        my_bytes += ev->size;
        my_joins += ev->kind == EV_JOIN;
    }
    if (mine >= DL_INBOX_PEER_EVENTS || my_bytes + in->size > DL_INBOX_PEER_BYTES)
        return "busy: too many of your requests wait in our averaging inbox";
    if (kind == EV_JOIN && my_joins >= DL_INBOX_PEER_JOINS) return "busy: your earlier joins still wait";
    struct dl_avg_event *ev = dl_avg_event_new(kind, in->peer_id, in->payload, in->size);
    if (!ev) return "out of memory";
    ev->token = in->token;
    inbox->requests++;
    inbox->request_bytes += in->size;
    dl_inbox_push(inbox, ev);
    return NULL;
}

void dl_inbox_poke(struct dl_inbox *inbox) {
    inbox->poke = true;
    pthread_cond_signal(&inbox->wake);
}

struct dl_avg_event *dl_inbox_wait(struct dl_inbox *inbox, double until) {
    pthread_mutex_lock(inbox->lock);
    while (!inbox->head && !inbox->poke) {
        double now = dl_now();
        if (now >= until) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double wait = until - now;
        ts.tv_sec += (time_t)wait;
        ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int rc = pthread_cond_timedwait(&inbox->wake, inbox->lock, &ts);
        if (rc == ETIMEDOUT) break;
    }
    struct dl_avg_event *list = inbox->head;
    inbox->head = inbox->tail = NULL;
    inbox->requests = inbox->request_bytes = 0;
    inbox->poke = false;
    pthread_mutex_unlock(inbox->lock);
    return list;
}

/* ---- the network transport --------------------------------------------------------- */

struct request_ctx {
    struct dl_inbox *inbox;
    uint64_t serial;
    int kind;
    uint32_t part, chunk, member;
    char peer_id[DL_PEER_ID_HEX];
};

/* Network thread: the answer goes to the inbox while its round runs. */
static void on_response(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct request_ctx *ctx = user;
    struct dl_inbox *inbox = ctx->inbox;
    pthread_mutex_lock(inbox->lock);
    if (inbox->serial && inbox->serial == ctx->serial) {
        struct dl_avg_event *ev = dl_avg_event_new(ctx->kind, ctx->peer_id, payload, payload ? size : 0);
        if (ev) {
            ev->status = status;
            ev->serial = ctx->serial;
            ev->part = ctx->part;
            ev->chunk = ctx->chunk;
            ev->member = ctx->member;
            dl_inbox_push(inbox, ev);
        }
    }
    pthread_mutex_unlock(inbox->lock);
    free(ctx);
}

static int net_request(void *ctx_, uint64_t serial, const char *peer_id, const char *method, const void *payload,
                       size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member) {
    struct dl_net_transport *t = ctx_;
    struct request_ctx *ctx = dl_calloc(1, sizeof *ctx);
    if (!ctx) return -1;
    ctx->inbox = t->inbox;
    ctx->serial = serial;
    ctx->kind = kind;
    ctx->part = part;
    ctx->chunk = chunk;
    ctx->member = member;
    snprintf(ctx->peer_id, sizeof ctx->peer_id, "%s", peer_id);
    if (!(timeout_s > 0.05)) timeout_s = 0.05;
    if (!dl_net_request_ex(t->net, peer_id, method, payload, size, timeout_s, DL_NET_RAW, on_response, ctx)) {
        free(ctx);
        return -1;
    }
    return 0;
}

static int net_respond(void *ctx, uint64_t token, int status, const void *payload, size_t size) {
    struct dl_net_transport *t = ctx;
    return dl_net_respond_ex(t->net, token, status, payload, size, DL_NET_RAW);
}

static void net_respond_text(void *ctx, uint64_t token, const char *text) {
    struct dl_net_transport *t = ctx;
    dl_net_respond(t->net, token, DL_NET_REMOTE_ERROR, text, strlen(text));
}

static struct dl_avg_event *net_wait(void *ctx, double until) {
    struct dl_net_transport *t = ctx;
    return dl_inbox_wait(t->inbox, until);
}

static void net_sign(void *ctx, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]) {
    struct dl_net_transport *t = ctx;
    dl_net_sign(t->net, data, size, sig);
}

static double net_now(void *ctx) {
    (void)ctx;
    return dl_now();
}

const struct dl_round_transport_ops dl_net_transport_ops = {
    .request = net_request,
    .respond = net_respond,
    .respond_text = net_respond_text,
    .wait = net_wait,
    .sign = net_sign,
    .now = net_now,
};
