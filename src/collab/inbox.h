/* How an averaging round's messages travel (private to src/collab).
 *
 * The round talks to the other members through a transport: a table of
 * operations and a context pointer (struct dl_round_transport), the way
 * libevent's bufferevent_ops stand between a connection and its user. The
 * round sends requests and answers through it and takes what arrived from it
 * as events; it never names the network or the service that owns it. Over
 * the network (dl_net_transport_ops), incoming requests and answers land in
 * the service's inbox on the network thread and the round thread takes them
 * from there; a test can run rounds over a transport of its own, in memory. */
#ifndef DEDLOC_COLLAB_INBOX_H
#define DEDLOC_COLLAB_INBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/net.h"

/* What an event is: an incoming request of one of the averaging methods, or
 * the answer (or failure) of a request the round sent. */
enum dl_avg_event_kind {
    EV_JOIN, EV_CHUNK, EV_RESULT, EV_FETCH, EV_REREDUCE, EV_CONTRIB, EV_ALIVE, /* incoming requests */
    EV_JOIN_REPLY, EV_CHUNK_ACK, EV_RESULT_ACK, EV_FETCH_REPLY, EV_REREDUCE_REPLY, EV_CONTRIB_REPLY,
    EV_PING_REPLY,
    EV_AUDIT, EV_AUDIT_ACK, /* accountable aggregation: request, reply */
    EV_AUDIT_DISCLOSED,     /* the reply to a disclosure request: a sender's signed chunk */
    EV_AUDIT_SPOT_CHUNK,    /* the same for our own spot check's draw (kept apart: another chunk of the part
                             * may be disputed at once, 3c, or escalated) */
};

struct dl_avg_event {
    int kind;
    uint64_t token;               /* incoming: for the transport's respond */
    char peer_id[DL_PEER_ID_HEX]; /* who sent it / whom we asked */
    int status;                   /* replies: dl_net_status */
    uint64_t serial;              /* replies: the round that asked */
    uint32_t part, chunk, member; /* replies: what was asked */
    uint8_t *data;
    size_t size;
    struct dl_avg_event *next;
};

/* The averaging methods and the event kind each arrives as. */
struct dl_avg_method {
    const char *method;
    int kind;
};
#define DL_AVG_NUM_METHODS 8
extern const struct dl_avg_method dl_avg_methods[DL_AVG_NUM_METHODS];
/* The kind of an incoming request for `method`; -1 for no averaging method. */
int dl_avg_method_kind(const char *method);

/* An event holding a copy of size bytes of data (calloc'd; NULL when out of
 * memory). */
struct dl_avg_event *dl_avg_event_new(int kind, const char *peer_id, const uint8_t *data, size_t size);
void dl_avg_event_free(struct dl_avg_event *ev);

struct dl_round_transport_ops {
    /* Sends a request to peer_id. Its answer, or its failure (timeout,
     * disconnection), comes back once from wait as an event of `kind`
     * carrying serial, part, chunk and member, if the round `serial` is still
     * the one running. 0, or -1 (dl_fail) when it cannot be sent at all:
     * then nothing comes back. */
    int (*request)(void *ctx, uint64_t serial, const char *peer_id, const char *method, const void *payload,
                   size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member);
    /* Answers the incoming request `token` with these bytes as they are.
     * 0, or -1 (dl_fail) when the answer cannot be queued. */
    int (*respond)(void *ctx, uint64_t token, int status, const void *payload, size_t size);
    /* Answers the incoming request `token` with an error text
     * (DL_NET_REMOTE_ERROR). */
    void (*respond_text)(void *ctx, uint64_t token, const char *text);
    /* Takes every event that has arrived, in arrival order (a list through
     * ->next; the caller frees each), waiting until one arrives, the owner
     * pokes the round, or the clock reaches `until`. */
    struct dl_avg_event *(*wait)(void *ctx, double until);
    /* Signs data with this member's identity key (ed25519, what
     * dl_net_verify checks against the member's key). */
    void (*sign)(void *ctx, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]);
    /* The clock of the round's deadlines and timeouts, in seconds
     * (dl_now over the network). */
    double (*now)(void *ctx);
};

struct dl_round_transport {
    const struct dl_round_transport_ops *ops;
    void *ctx;
};

/* What incoming requests may wait in the inbox (docs/protocol.md, "Limits
 * against floods"), checked on the network thread before anything is
 * copied. An honest member has at most DL_AVG_SEND_WINDOW chunks and
 * DL_AVG_RESULT_WINDOW results in flight to us, and one join per round, so
 * the per-peer bounds are far above what it sends; they hold what a peer
 * can queue before our first round (when nothing takes joins) or while our
 * round thread is busy. Answers to our own requests are not counted: we
 * asked for them. */
#define DL_INBOX_MAX_EVENTS 4096
#define DL_INBOX_MAX_BYTES ((size_t)512 << 20)
#define DL_INBOX_PEER_EVENTS 64
#define DL_INBOX_PEER_BYTES ((size_t)64 << 20)
#define DL_INBOX_PEER_JOINS 4
#define DL_INBOX_JOIN_MAX_BYTES 4096

/* The queue of events between the network thread and the round thread.
 * Every field is guarded by *lock, the owner's lock, which the owner also
 * holds while it decides where an incoming request goes. */
struct dl_inbox {
    pthread_mutex_t *lock;
    pthread_cond_t wake;
    struct dl_avg_event *head, *tail;
    bool poke;                    /* the owner has news for the round (a handoff) */
    uint64_t serial;              /* answers are taken for this round only; 0: none runs */
    size_t requests, request_bytes; /* incoming requests queued, and their bytes (DL_INBOX_MAX_*) */
};

int dl_inbox_init(struct dl_inbox *inbox, pthread_mutex_t *lock);
/* Frees the events left and the condition variable. */
void dl_inbox_destroy(struct dl_inbox *inbox);
/* Appends ev and wakes the round thread (lock held). */
void dl_inbox_push(struct dl_inbox *inbox, struct dl_avg_event *ev);
/* Queues the incoming request `in` of this kind (network thread, lock
 * held) when the DL_INBOX_* limits allow it: NULL, or why not (a text to
 * answer the request with; nothing was queued). */
const char *dl_inbox_offer(struct dl_inbox *inbox, int kind, const struct dl_net_incoming *in);
/* Wakes the round thread without an event (lock held). */
void dl_inbox_poke(struct dl_inbox *inbox);
/* Takes the queued events; waits (lock not held) until one arrives, a poke,
 * or dl_now() reaches `until`. */
struct dl_avg_event *dl_inbox_wait(struct dl_inbox *inbox, double until);

/* The transport over the network: requests through net, answers and
 * incoming requests (which the owner's handlers push) through the inbox. */
struct dl_net_transport {
    dl_net *net;
    struct dl_inbox *inbox;
};
extern const struct dl_round_transport_ops dl_net_transport_ops;

#endif
