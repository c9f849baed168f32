/* The state of a running peer, shared by the files of src/net. Everything
 * here belongs to the network thread unless the comment says "lock". */
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
};

struct dl_door_host {
    char host[48];
    double tokens, last, last_warned;
    size_t refused;
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
    double measured_mbit;

    struct dl_dht *dht;
    int dht_port;

    struct dl_trust trust;            /* who may join (admission.c) */
    struct dl_door_host door[DL_NET_DOOR_HOSTS]; /* limits per remote host (door.c) */
    double next_admission_check;
};

/* conn.c */
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
void dl_net_send_records(struct dl_net *net, struct dl_conn *c, struct dl_conn *except,
                         const uint8_t *blob, size_t size);

/* address.c */
void dl_net_sockaddr_string(const struct sockaddr *sa, char *out, size_t cap);
/* "ip:port", "[v6]:port", or with allow_dns "host:port" (resolved, blocking:
 * configuration only, never addresses received from the network). */
/* A dial to address failed before the handshake (refused, timed out, closed):
 * the first failure of an initial peer is a warning, the retries are quiet. */
void dl_net_note_dial_failure(struct dl_net *net, const char *address, const char *why);
int dl_net_resolve_address(const char *text, struct sockaddr_storage *ss, int *len, bool allow_dns);

/* targets.c */
bool dl_net_is_banned(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]);
void dl_net_ban(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]);
/* The target with this key, else the keyless one at this address. */
struct dl_target *dl_net_find_target(struct dl_net *net, const uint8_t *pk, const char *address);
/* False when we dialled an address learned with a key (record or DHT) and
 * another key answered. Initial peers may change identity. */
bool dl_net_target_accepts(struct dl_net *net, const char *address, const uint8_t pk[DL_WIRE_PK]);
void dl_net_note_target(struct dl_net *net, const uint8_t *pk, const char *address, enum dl_target_source source);
/* A dial to address ended before the handshake completed. */
void dl_net_target_failed(struct dl_net *net, const char *address);
void dl_net_tick_targets(struct dl_net *net, double now);

/* gossip.c */
void dl_net_publish_record(struct dl_net *net, bool goodbye);
void dl_net_tick_publish(struct dl_net *net, double now);
void dl_net_on_ready(struct dl_net *net, struct dl_conn *c);
void dl_net_on_closed(struct dl_net *net, struct dl_conn *c);
void dl_net_on_records(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);

/* net.c */
int dl_net_post(struct dl_net *net, struct dl_cmd *cmd);

/* rpc.c */
void dl_rpc_on_request(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);
void dl_rpc_on_response(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);
void dl_rpc_on_cancel(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);
void dl_rpc_run_cmd(struct dl_net *net, struct dl_cmd *cmd);
void dl_rpc_tick(struct dl_net *net, double now);
void dl_rpc_conn_closed(struct dl_net *net, struct dl_conn *c);
void dl_rpc_fail_all(struct dl_net *net);

/* door.c */
/* Whether a new inbound connection from sa is within its host's limits. */
bool dl_net_door_admit(struct dl_net *net, const struct sockaddr *sa);
/* A misdeed from the host of remote ("ip:port"): a key banned, a forged
 * handshake signature. DL_NET_HOST_STRIKES of them within ban_s ban the
 * host: keys are free to make, addresses are not. */
void dl_net_strike_host(struct dl_net *net, const char *remote, const char *why);

/* admission.c */
/* Loads the admission policy at start and says once whether the run is open. */
int dl_net_admission_start(struct dl_net *net);
/* Decides on a peer whose AUTH signature checked out; rejects it (and
 * returns -1) when it is not admitted. */
int dl_net_admit(struct dl_net *net, struct dl_conn *c, const uint8_t *token, size_t token_size);
/* Once a second: re-reads a changed revocation list, and disconnects peers
 * revoked since or whose token expired during the connection. */
void dl_net_tick_admission(struct dl_net *net, double now);
/* Sends the revocation list in force to c, or (c NULL) to every ready
 * connection but except. */
void dl_net_send_revocations(struct dl_net *net, struct dl_conn *c, struct dl_conn *except);
/* A REVOCATIONS message: a newer list is put in force and forwarded; a
 * forged one bans the sender. */
void dl_net_on_revocations(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);

/* dht.c */
int dl_dht_start(struct dl_net *net);
void dl_dht_tick(struct dl_net *net, double now);
void dl_dht_stop(struct dl_net *net);

#endif
