/* The state of a running peer, shared by the files of src/net. Everything
 * here belongs to the network thread unless the comment says "lock".
 *
 * The files of src/net stand in layers. A file calls functions of lower
 * layers only; what a lower layer has to tell an upper one goes through
 * callbacks the upper layer registered, as libevent's bufferevent_setcb
 * does for us. tests/static/check_layers.sh reads the table below (keep
 * its shape: a layer number, then the files) and checks the includes and,
 * with nm, the calls between the object files.
 *
 *   0  address.c compress.c frame.c identity.c msgpack_fields.c queue.c
 *      revocation.c swarm.c token.c
 *                      addresses, compression, framing and sealing, keys,
 *                      msgpack fields, the command queue's entry, lists,
 *                      the swarm table, tokens
 *   1  codec.c record.c sign.c trust.c
 *                      messages, signed records, admission policy
 *   2  handshake.c     the HELLO/AUTH exchange on its own
 *   3  conn.c          one connection: frames in and out, the handshake state
 *                      machine; hands messages and events up through
 *                      struct dl_conn_ops
 *   4  admission.c door.c targets.c
 *                      who may stay, limits per host, whom we dial and ban
 *   5  dht.c gossip.c rpc.c
 *                      the DHT, records and peer exchange, requests
 *   6  metrics.c invite.c
 *                      signed metrics records and invites, served as
 *                      requests
 *   7  net.c           start and stop, the network thread, the tick, the
 *                      listener; registers the connection callbacks
 *
 * This header (with wire.h, swarm.h and trust.h, which it includes)
 * declares layers 0 to 3 and the state they share; the files
 * above conn.c declare what they offer each other in net/above_conn.h,
 * which no file of layers 0 to 3 includes. */
#ifndef DEDLOC_NET_INTERNAL_H
#define DEDLOC_NET_INTERNAL_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <pthread.h>

#include "dedloc/net.h"
#include "net/swarm.h"
#include "net/trust.h"
#include "net/wire.h"

#define DL_NET_MAX_CONNS 256
#define DL_NET_MAX_PREAUTH 64
/* Per remote host (door.c): unauthenticated connections at once, and new
 * connections per second with a burst allowance. */
#define DL_NET_MAX_PREAUTH_PER_HOST 16
#define DL_NET_DOOR_RATE 20.0
#define DL_NET_DOOR_BURST 40.0
#define DL_NET_DOOR_HOSTS 256
#define DL_NET_MAX_TARGETS 1024
/* Outbound dials under way at once, and connection slots kept for inbound
 * peers: our own dialling never takes the room peers need to reach us. */
#define DL_NET_MAX_DIALLING 16
#define DL_NET_INBOUND_RESERVE 64
/* An address learned second-hand (a record forwarded by another peer, the
 * DHT) is dialled at most this many times without a handshake, then left. */
#define DL_NET_SECOND_HAND_TRIES 3
/* A peer that refuses us (admission, run manifest, version) is dialled again
 * after 2 s, then 4, 8 ... up to this; its refusal is a warning once per
 * DL_NET_REFUSED_WARN_S, a debug line otherwise. */
#define DL_NET_REFUSED_MAX_S 300.0
#define DL_NET_REFUSED_WARN_S 60.0
/* New identities one connection may introduce: a burst (peer exchange of a
 * large swarm) then a few per second. */
#define DL_NET_NEW_KEYS_BURST 256.0
#define DL_NET_NEW_KEYS_RATE 4.0
/* Ban table size (the ban that ends first gives way), and the misdeeds from
 * one host (keys banned, forged handshake signatures) within ban_s after
 * which the host itself is refused for ban_s. */
#define DL_NET_MAX_BANS 1024
#define DL_NET_HOST_STRIKES 4
#define DL_NET_MAX_HANDLERS 32
#define DL_NET_MAX_INCOMING_PER_CONN 64
/* Before authentication only HELLO and AUTH are accepted: small frames. */
#define DL_NET_PREAUTH_MAX_BODY 1024
/* Fetch-only connections (newcomers asking for the run files, docs/protocol.md
 * "Limits against floods"): at most this many at once, and per remote host;
 * each may ask this many requests (one at a time) and lives this long. The
 * run-file requests of one host, fetch-only or not, draw on a token bucket
 * (a burst, then one per DL_NET_RUN_FILES_EVERY_S); what all fetch-only
 * connections have queued to send stays under max_buffered / 8. */
#define DL_NET_MAX_FETCH_ONLY 16
#define DL_NET_MAX_FETCH_ONLY_PER_HOST 2
#define DL_NET_FETCH_ONLY_REQUESTS 4
#define DL_NET_FETCH_ONLY_LIFETIME_S 30.0
#define DL_NET_RUN_FILES_BURST 8.0
#define DL_NET_RUN_FILES_EVERY_S 2.0
#define DL_NET_TICK_S 0.05

enum dl_conn_state { CONN_CONNECTING, CONN_HELLO, CONN_AUTH, CONN_READY, CONN_CLOSING };

struct dl_conn {
    struct dl_net *net;
    struct bufferevent *bev;
    uint64_t serial;
    bool outbound;
    enum dl_conn_state state;
    struct dl_handshake hs;
    struct dl_seal rx, tx;
    uint8_t peer_pk[DL_WIRE_PK];
    char peer_id[DL_PEER_ID_HEX];
    bool peer_client;
    bool peer_fetch_only;             /* a newcomer that may only fetch the run files */
    char remote[DL_NET_ADDR_MAX];     /* address of the socket's other end */
    char dialled[DL_NET_ADDR_MAX];    /* what we dialled (outbound only) */
    double created, last_rx, last_ping, closing_since;
    size_t incoming_requests;
    size_t requests_served;           /* fetch-only: requests taken so far (DL_NET_FETCH_ONLY_REQUESTS) */
    enum dl_role peer_role;           /* what its token grants; DL_ROLE_NONE in an open run */
    bool was_ready;                   /* completed the handshake at some point */
    bool read_paused;                 /* reading stopped: over the global buffer budget */
    double new_keys_tokens, new_keys_last; /* DL_NET_NEW_KEYS_* allowance */
    size_t records_dropped;
    double drop_warned;
    double admitted_until;            /* wall clock when its token expires; 0 = never */
    struct dl_conn *next;
};

/* An address we try to keep a connection to: an initial peer, a peer seen in
 * a record, or one found in the DHT. */
struct dl_target {
    char address[DL_NET_ADDR_MAX];
    uint8_t pk[DL_WIRE_PK];
    bool has_pk, initial, is_self;
    bool warned; /* an initial peer's failure was said once (warning level) */
    bool second_hand;                 /* learned from someone else than its owner */
    bool given_up;                    /* second-hand and DL_NET_SECOND_HAND_TRIES dials failed */
    unsigned failures;                /* dials in a row that did not reach a handshake */
    double next_attempt, backoff, last_seen;
    double last_dial;                 /* when we last dialled it */
    double refused_backoff;           /* its owner refused us (not admitted, another manifest...):
                                       * seconds until the next dial, doubling to DL_NET_REFUSED_MAX_S */
    double refused_until, refused_warned; /* no dial before; when we last said so at warning level */
    unsigned refusals;                /* refusals since the last warning */
};

struct dl_door_host {
    char host[48];
    double tokens, last, last_warned;
    size_t refused;
    double run_files_tokens, run_files_last; /* DL_NET_RUN_FILES_* allowance */
    unsigned strikes;                 /* misdeeds since strikes_since */
    double strikes_since, banned_until;
};

struct dl_ban {
    uint8_t pk[DL_WIRE_PK];
    double until;
};

enum dl_target_source { DL_TARGET_FIRST_HAND, DL_TARGET_SECOND_HAND, DL_TARGET_DHT };

/* A request we sent and wait on. */
struct dl_pending {
    uint64_t id;
    uint64_t conn_serial;
    double deadline;
    dl_net_response_fn callback;
    void *user;
    struct dl_pending *next;
};

/* A request we received and have not answered yet. */
struct dl_incoming_entry {
    uint64_t token, request_id, conn_serial;
    double expires;
    struct dl_incoming_entry *next;
};

enum dl_cmd_type { CMD_PUBLISH, CMD_REQUEST, CMD_CANCEL, CMD_RESPOND, CMD_DIAL, CMD_STOP };

struct dl_cmd {
    enum dl_cmd_type type;
    uint64_t id;                      /* request id or token */
    int status;
    char peer_id[DL_PEER_ID_HEX];
    char method[DL_WIRE_METHOD_MAX];
    char address[DL_NET_ADDR_MAX];
    uint8_t pk[DL_WIRE_PK];
    double timeout_s;
    double samples, samples_per_second;  /* CMD_PUBLISH */
    double park_start, park_until;    /* CMD_REQUEST waiting for a connection */
    uint8_t *payload;                 /* owned; already compressed when compressed */
    size_t size;
    uint64_t raw_size;
    bool compressed;
    dl_net_response_fn callback;
    void *user;
    struct dl_cmd *next;
};

struct dl_handler {
    char method[DL_WIRE_METHOD_MAX];
    dl_net_handler_fn fn;
    void *user;
};

struct dl_dht;

struct dl_net {
    struct dl_net_config cfg;         /* strings point into owned copies below */
    const struct dl_conn_ops *conn_ops; /* what connections report to (dl_conn_set_ops) */
    char *run_id, *listen_cfg, *announce_cfg, *initial_cfg, *identity_cfg, *dht_bootstrap_cfg;
    struct dl_identity id;
    char listen_addr[DL_NET_ADDR_MAX], announce_addr[DL_NET_ADDR_MAX];
    int listen_port;

    struct event_base *base;
    pthread_t thread;
    bool thread_started;
    struct evconnlistener *listener;
    struct event *tick_ev, *cmd_ev;
    struct ev_token_bucket_cfg *bucket_cfg;
    struct bufferevent_rate_limit_group *rate_group;

    pthread_mutex_t lock;             /* guards: swarm, cmd queue, handlers, counters below */
    struct dl_swarm swarm;
    struct dl_cmd *cmd_head, *cmd_tail;
    struct dl_handler handlers[DL_NET_MAX_HANDLERS];
    size_t num_ready;
    double refresh_s;
    uint64_t next_request_id;
    uint8_t *metrics_blob;            /* our signed metrics record (src/net/metrics.c), or NULL */
    size_t metrics_size;
    int metrics_relays;               /* relays of other peers' records under way (network thread) */

    struct dl_conn *conns;
    size_t num_conns;
    uint64_t next_serial;
    struct dl_target targets[DL_NET_MAX_TARGETS];
    size_t num_targets;
    struct dl_ban bans[DL_NET_MAX_BANS];
    size_t num_bans;
    _Atomic size_t buffered;          /* bytes in every connection's buffers, at the last count */
    _Atomic uint64_t records_checked, records_verified; /* signature checks saved by the duplicate check */
    struct dl_pending *pending;
    struct dl_incoming_entry *incoming;
    uint64_t next_token;

    /* our progress (network thread) */
    uint64_t my_epoch, published_epoch, last_seq;
    double my_samples, my_sps, my_time;
    bool force_publish, stopping;
    double next_publish, stop_deadline;
    /* Requests to a known peer we are not connected to yet: they wait here
     * (at most handshake_timeout_s) while it is dialled. */
    struct dl_cmd *parked;
    /* lock: extra fields of our progress record */
    uint8_t param_hash[32];
    bool has_param_hash;
    bool has_manifest;                /* manifest_hash: our run manifest's (docs/manifest.md) */
    uint8_t manifest_hash[32];
    char last_ready[DL_PEER_ID_HEX];  /* lock: the peer of the newest ready connection still open ("" = none) */
    char dial_refusal[160];           /* lock: why a peer we dialled can never be one ("" = none yet) */
    double measured_mbit;

    struct dl_dht *dht;
    int dht_port;

    struct dl_trust trust;            /* who may join (admission.c) */
    struct dl_door_host door[DL_NET_DOOR_HOSTS]; /* limits per remote host (door.c) */
    double next_admission_check;
};

/* What conn.c hands up. The files above it register the table once, before
 * the first connection (net.c, dl_conn_set_ops); conn.c calls nothing of
 * theirs by name. Each callback may close or reject c, except where said. */
struct dl_conn_ops {
    /* An outbound connection failed at the socket (refused, timed out,
     * closed) before its handshake completed; why as the socket says. */
    void (*dial_failed)(struct dl_conn *c, const char *why);
    /* An outbound connection closes without ever having been ready: it
     * counts against the address dialled. Must not close c. */
    void (*handshake_missed)(struct dl_conn *c);
    /* A connection we dialled reached ourselves. Must not close c. */
    void (*dialled_self)(struct dl_conn *c);
    /* The HELLO of key pk passed version, run and manifest: 0 to go on, or
     * the ERROR code to refuse it with, and *why. Must not close c. */
    uint32_t (*refuse_key)(struct dl_conn *c, const uint8_t pk[DL_WIRE_PK], const char **why);
    /* The AUTH signature checked out: 0 admits c; -1 when it was refused
     * (and rejected). */
    int (*admit)(struct dl_conn *c, const uint8_t *token, size_t token_size);
    /* c completed the handshake and is ready. */
    void (*ready)(struct dl_conn *c);
    /* A sealed message of a ready c that conn.c does not answer itself
     * (all but PING and PONG): 0 when handled, -1 for a type unknown here. */
    int (*message)(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size);
    /* c stops (it may be called again on the same c as it closes);
     * was_ready: it had been ready until now. Must not close c. */
    void (*closing)(struct dl_conn *c, bool was_ready);
    /* Outbound c was refused by the peer's ERROR (code, its text): not a
     * duplicate or self connection. Says so (once in a while) and backs
     * the dial off. Must not close c. */
    void (*refused)(struct dl_conn *c, uint32_t code, const char *text, uint32_t version);
    /* c, whose key is proven, misbehaved: ban the key. Must not close c. */
    void (*ban)(struct dl_conn *c);
    /* A misdeed from the host at the other end of inbound c. Must not close c. */
    void (*strike)(struct dl_conn *c, const char *why);
};

/* conn.c */
/* Registers the callbacks every connection of net reports to (ops must
 * outlive net). */
void dl_conn_set_ops(struct dl_net *net, const struct dl_conn_ops *ops);
struct dl_conn *dl_conn_new(struct dl_net *net, struct bufferevent *bev, bool outbound,
                            const char *remote, const char *dialled);
/* Closes at once (frees the connection; fails its pending requests). */
void dl_conn_close(struct dl_conn *c, const char *why);
/* Sends ERROR (if code) then closes once flushed; logs; bans if ban. */
void dl_conn_reject(struct dl_conn *c, uint32_t code, const char *why, bool ban);
/* Seals and queues one frame; -1 if the output buffer is over its bound. */
int dl_conn_send(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size, bool droppable);
struct dl_conn *dl_net_conn_by_serial(struct dl_net *net, uint64_t serial);
/* Bytes in every connection's input (or output) buffers: each side of all
 * connections together stays within max_buffered. */
size_t dl_net_buffered(struct dl_net *net, bool output);
/* Each tick: connections paused over the global budget resume when there is room. */
void dl_net_tick_budget(struct dl_net *net, double now);
struct dl_conn *dl_net_conn_by_pk(struct dl_net *net, const uint8_t pk[DL_WIRE_PK], bool ready_only);

/* address.c */
void dl_net_socket_nodelay(evutil_socket_t fd);
void dl_net_sockaddr_string(const struct sockaddr *sa, char *out, size_t cap);
/* "ip:port", "[v6]:port", or with allow_dns "host:port" (resolved, blocking:
 * configuration only, never addresses received from the network). */
int dl_net_resolve_address(const char *text, struct sockaddr_storage *ss, int *len, bool allow_dns);

/* queue.c */
/* Hands cmd (owned from here on) to the network thread; any thread. */
int dl_net_post(struct dl_net *net, struct dl_cmd *cmd);

#endif
