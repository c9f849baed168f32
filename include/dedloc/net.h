/* dedloc networking core: one peer of a collaboration.
 *
 * A dl_net is a libevent loop running in its own thread. It listens for and
 * dials TCP connections (IPv4 and IPv6), authenticates every peer with an
 * ed25519 identity and encrypts every frame after the handshake
 * (docs/protocol.md), finds other peers through initial peers, peer exchange
 * and OpenDHT, and keeps the swarm's progress view of DeDLOC: every peer's
 * signed progress record (epoch, samples accumulated, samples/s, time, client
 * mode) merged into a global epoch, collective sample count and ETA.
 *
 * Thread safety: every function below may be called from any thread except
 * where noted. Callbacks (request handlers and response callbacks) run on the
 * network thread: keep them short, never call dl_net_stop or the *_sync
 * functions from them. */
#ifndef DEDLOC_NET_H
#define DEDLOC_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dl_net dl_net;

/* Hex peer id: the first 16 bytes of BLAKE2b(ed25519 public key). */
#define DL_PEER_ID_HEX 33
/* "host:port" or "[v6]:port" */
#define DL_NET_ADDR_MAX 64

/* What an admission token lets a peer do (see "admission" below); a peer of
 * an open run, admitted without a token, has DL_ROLE_NONE. */
enum dl_role { DL_ROLE_NONE = 0, DL_ROLE_TRAINER = 1, DL_ROLE_AUX = 2, DL_ROLE_MONITOR = 3, DL_ROLE_COUNT };

struct dl_net_config {
    const char *run_id;          /* required: peers of other runs are refused */
    const char *listen;          /* "ADDR:PORT" (port 0 = any); NULL = "0.0.0.0:0"; "" = do not listen */
    const char *announce;        /* address others should dial; NULL = the listen address */
    const char *initial_peers;   /* "host:port,host:port" or NULL */
    const char *identity_path;   /* ed25519 identity file, created (mode 0600) if absent; NULL = ephemeral */
    bool client_mode;            /* behind NAT: dial out only, never dialled, no global-epoch vote */
    double max_upload_mbit;      /* upload cap over all connections; 0 = unlimited */
    double bandwidth_mbit;       /* declared upload bandwidth, told to other peers (0 = unknown) */
    double target_batch;         /* samples per global step, for the ETA (default 4096) */
    double expiry_s;             /* a record not refreshed for this long is dropped (default 60) */
    double min_refresh_s;        /* bounds of the adaptive publish period (default 0.5 .. 10) */
    double max_refresh_s;
    double keepalive_s;          /* ping period; silent for 3x this = dead (default 5) */
    double handshake_timeout_s;  /* default 10 */
    double ban_s;                /* how long a misbehaving peer is ignored (default 60) */
    uint32_t max_frame;          /* largest frame accepted, bytes (default 16 MiB) */
    size_t max_pending_out;      /* per-connection output buffer bound (default 64 MiB) */
    size_t max_buffered;         /* all connections' input buffers together, and their output buffers (default 256 MiB each) */
    /* DHT discovery (OpenDHT). */
    bool use_dht;                /* default true where OpenDHT is available */
    int dht_port;                /* UDP port of the DHT node; -1 = listen port + 1, 0 = any (default -1) */
    const char *dht_bootstrap;   /* "host:port,..." of DHT nodes to join, or NULL */
    double dht_refresh_s;        /* re-announce period (default 60; values live 10 min) */
    /* Who may join (docs/protocol.md, "Admission"). With neither run_key nor
     * allow_path the run is open: anyone who knows the run id may join. */
    const char *run_key;         /* run authority's public key (64 hex digits, or a file holding them) */
    const char *token_path;      /* our admission token (text form), or NULL */
    const char *revoked_path;    /* signed revocation list of the authority, or NULL (re-read when it changes) */
    const char *allow_path;      /* file of admitted peer ids (one per line, # comments), or NULL */
    unsigned admit_roles;        /* DL_ROLE_BIT() mask of roles admitted with a token (default: all) */
    /* The run manifest (docs/manifest.md): the BLAKE2b-256 of ours (NULL:
     * none), told in the handshake; peers refuse each other when their
     * manifests differ or only one has one. */
    const uint8_t *manifest_hash;
    /* A newcomer that does not know the run yet (`dedloc join`): its
     * connections may only ask for the run files (DL_NET_METHOD_MANIFEST and
     * DL_NET_METHOD_TOKENIZER of collab.h); run id, manifest and admission
     * are not checked for them, and nothing they gossip is taken. */
    bool fetch_only;
};

/* Fills the defaults documented above. */
void dl_net_config_default(struct dl_net_config *config);

/* Starts a peer: loads or creates the identity, binds the listener, starts
 * the network thread and (if enabled) the DHT node. */
int dl_net_start(const struct dl_net_config *config, dl_net **net);

/* Sends a goodbye record to every connected peer, flushes for up to a second,
 * stops the thread and frees everything. NULL is allowed. */
void dl_net_stop(dl_net *net);

/* Checks the form of a configured address ("host:port", "[v6]:port") without
 * resolving it: 0, or -1 with an error naming it (e.g. a port out of range).
 * Commands use it to tell a mistyped option (usage error) from a runtime one. */
int dl_net_check_address(const char *text);

/* Our peer id (hex, NUL-terminated, valid until stop). */
const char *dl_net_peer_id(const dl_net *net);
/* The run id this net was started for (valid until stop). */
const char *dl_net_run_id(const dl_net *net);
/* The address we listen on, with the chosen port ("" when not listening). */
const char *dl_net_listen_address(const dl_net *net);
/* The address we tell others to dial ("" in client mode or when not listening). */
const char *dl_net_announce_address(const dl_net *net);
/* The bound UDP port of the DHT node, 0 when the DHT is off. */
int dl_net_dht_port(const dl_net *net);

/* Publishes our progress: it goes to every connected peer at once when the
 * epoch changes, otherwise with the next adaptive refresh. */
int dl_net_publish_progress(dl_net *net, uint64_t epoch, double samples_accumulated,
                            double samples_per_second);

/* Sets what our next progress records carry besides progress: the
 * BLAKE2b-256 of our parameters (NULL: none), and our upload bandwidth as
 * measured in past averaging rounds (published when none was declared). */
int dl_net_set_param_hash(dl_net *net, const uint8_t hash[32]);
/* Says that our state at `epoch` comes from a round we took part in and
 * verified (not from a download or our own start): while our record is at
 * that epoch with a param hash, we count ourselves among the peers whose
 * majority moves the global epoch (docs/collab_training.md, "The epoch and
 * the reference state"). A state taken from others vouches for nothing:
 * once our record is past `epoch` (a download), we no longer vote. */
void dl_net_vouch_epoch(dl_net *net, uint64_t epoch);
int dl_net_set_measured_bandwidth(dl_net *net, double mbit);

/* One peer as the swarm view sees it. */
struct dl_swarm_peer {
    char peer_id[DL_PEER_ID_HEX];
    char address[DL_NET_ADDR_MAX];
    uint64_t epoch;
    double samples_accumulated;  /* as published */
    double samples_per_second;
    double time;                 /* owner's wall clock at publication (Unix seconds) */
    double bandwidth_mbit;       /* declared, else measured in its past rounds; 0 = unknown */
    bool client_mode;
    bool is_self;
    bool has_param_hash;         /* param_hash was published */
    uint8_t param_hash[32];      /* BLAKE2b-256 of its parameters at epoch (signed with the record) */
    bool epoch_unbacked;         /* claims an epoch above global_epoch that no quorum backs: its word
                                    alone, not to be followed (docs/protocol.md, "The swarm view") */
};

/* The DeDLOC view of the collaboration at one moment. */
struct dl_swarm_view {
    uint64_t global_epoch;       /* ours, or the highest epoch a quorum of other non-client peers claims */
    double collective_samples;   /* sum over peers at global_epoch, extrapolated to now */
    double samples_per_second;   /* sum over every alive peer */
    double eta_s;                /* (target - collective) / rate, 0 when reached, -1 if no rate */
    double refresh_s;            /* current adaptive publish period */
    size_t num_connections;      /* authenticated connections */
    size_t num_peers;            /* alive records, ours included, of peers that may train */
    size_t num_observers;        /* alive records of monitor-role peers: in nothing above or below */
    uint64_t records_checked;    /* records received (from every connection) */
    uint64_t records_verified;   /* of which the signature was checked (news, not duplicates) */
    size_t buffered_bytes;       /* in all connections' buffers at the last count */
    struct dl_swarm_peer *peers; /* num_peers entries, sorted by peer id */
};

/* A peer we hold an authenticated connection to (the newest one still
 * open): false when there is none. For a fetch-only newcomer, the peer to ask. */
bool dl_net_connected_peer(dl_net *net, char out[DL_PEER_ID_HEX]);
/* Whether a peer we dialled answered in a way no retry changes (it speaks
 * another protocol, or another version of ours); why gets "ADDRESS: what"
 * (cap bytes). A fetch-only newcomer gives up on it at once. */
bool dl_net_dial_refused(dl_net *net, char *why, size_t cap);

/* Computes the view now. Free with dl_swarm_view_free. */
int dl_net_swarm_view(dl_net *net, struct dl_swarm_view *view);
void dl_swarm_view_free(struct dl_swarm_view *view);

/* ---- requests ----------------------------------------------------------------
 * A request goes to one connected peer, carries a method name (<= 63 bytes)
 * and an opaque payload (<= max_frame minus a little), and gets exactly one
 * response: the handler's, or a local failure (timeout, cancellation,
 * disconnection). Large payloads are zlib-compressed on the wire when that
 * saves at least an eighth. */
enum dl_net_status {
    DL_NET_OK = 0,
    DL_NET_REMOTE_ERROR = 1,  /* the handler answered with an error */
    DL_NET_TIMEOUT = 2,
    DL_NET_CANCELLED = 3,
    DL_NET_DISCONNECTED = 4,  /* no connection, or it closed before the answer */
    DL_NET_NO_HANDLER = 5,    /* the other peer serves no such method */
    DL_NET_STATUS_COUNT
};
/* "ok" "remote error" "timeout" "cancelled" "disconnected" "no handler";
 * "unknown" for anything else. Callbacks carry the status as an int. */
const char *dl_net_status_name(enum dl_net_status status);

/* Called once per request on the network thread. payload is valid only
 * during the call. */
typedef void (*dl_net_response_fn)(void *user, uint64_t request_id, int status,
                                   const uint8_t *payload, size_t size);

/* Sends a request; returns its id (> 0), or 0 with an error recorded when it
 * cannot even be queued. The callback always runs exactly once. */
uint64_t dl_net_request(dl_net *net, const char *peer_id, const char *method, const void *payload,
                        size_t size, double timeout_s, dl_net_response_fn callback, void *user);

/* Flags of the *_ex forms. DL_NET_RAW: send the payload as it is, without
 * trying zlib (float tensors and already-encoded data gain nothing from it,
 * and the attempt costs more CPU than the transfer). */
enum { DL_NET_RAW = 1 };
uint64_t dl_net_request_ex(dl_net *net, const char *peer_id, const char *method, const void *payload,
                           size_t size, double timeout_s, unsigned flags, dl_net_response_fn callback,
                           void *user);

/* Cancels a pending request: its callback runs with DL_NET_CANCELLED (unless
 * the response won the race) and the other peer is told to stop. */
int dl_net_cancel(dl_net *net, uint64_t request_id);

/* Blocking form for threads other than the network thread. On DL_NET_OK
 * *response (malloc'd, caller frees) holds the answer. Returns the status. */
int dl_net_request_sync(dl_net *net, const char *peer_id, const char *method, const void *payload,
                        size_t size, double timeout_s, uint8_t **response, size_t *response_size);

/* An incoming request, valid during the handler call. */
struct dl_net_incoming {
    uint64_t token;            /* pass to dl_net_respond */
    const char *peer_id;
    const char *method;
    const uint8_t *payload;
    size_t size;
    double deadline_s;         /* seconds the requester will wait */
    enum dl_role peer_role;    /* the requester's; DL_ROLE_NONE in an open run */
};

/* Handles requests for one method; runs on the network thread. It may answer
 * at once or later (from any thread) with dl_net_respond. */
typedef void (*dl_net_handler_fn)(void *user, dl_net *net, const struct dl_net_incoming *request);

/* Methods whose name starts with this are public: they are also answered on
 * fetch-only connections (dl_net_config.fetch_only). */
#define DL_NET_PUBLIC_PREFIX "dedloc.run."

/* Registers (or replaces, or with handler NULL removes) the handler of a
 * method. At most 32 methods. */
int dl_net_set_handler(dl_net *net, const char *method, dl_net_handler_fn handler, void *user);

/* Answers an incoming request. status DL_NET_OK or DL_NET_REMOTE_ERROR (the
 * payload is then an error message). Answers to cancelled requests or
 * vanished connections are dropped silently. */
int dl_net_respond(dl_net *net, uint64_t token, int status, const void *payload, size_t size);
int dl_net_respond_ex(dl_net *net, uint64_t token, int status, const void *payload, size_t size,
                      unsigned flags);

/* A payload answered many times (the run files) is compressed once:
 * dl_net_prepare keeps its zlib form when that saves space (its raw bytes
 * otherwise), and dl_net_respond_prepared answers with a copy of it, so no
 * request costs a compression on the network thread. */
typedef struct dl_net_prepared dl_net_prepared;
int dl_net_prepare(const void *payload, size_t size, dl_net_prepared **out);
void dl_net_prepared_free(dl_net_prepared *prepared);
/* Bytes on the wire (compressed or raw) of a prepared payload. */
size_t dl_net_prepared_wire_size(const dl_net_prepared *prepared);
int dl_net_respond_prepared(dl_net *net, uint64_t token, const dl_net_prepared *prepared);

/* ---- signatures with the peer's identity ------------------------------------
 * For records other modules build (group records, signed averaging results):
 * an ed25519 signature by this peer's identity key, checked by anyone who
 * knows the signer's public key. A peer id is derived from its public key, so
 * a (peer id, public key) pair is self-certifying. */
#define DL_NET_PUBLIC_KEY 32
#define DL_NET_SIGNATURE 64
/* Our public key (DL_NET_PUBLIC_KEY bytes, valid until stop). */
const uint8_t *dl_net_public_key(const dl_net *net);
/* Loads the identity file at path (created, mode 0600, when absent) and
 * gives its key pair: pk, and sk in libsodium's 64-byte form (for signing
 * things outside a running net, such as a run manifest). */
int dl_net_identity_keys(const char *path, uint8_t pk[DL_NET_PUBLIC_KEY], uint8_t sk[64]);
/* The peer id that belongs to a public key. */
void dl_net_peer_id_from_key(const uint8_t pk[DL_NET_PUBLIC_KEY], char out[DL_PEER_ID_HEX]);
void dl_net_sign(const dl_net *net, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]);
/* 0 when pk belongs to peer_id and sig is pk's signature of data; -1 (with
 * dl_fail saying which) otherwise. */
int dl_net_verify(const char *peer_id, const uint8_t pk[DL_NET_PUBLIC_KEY], const void *data, size_t size,
                  const uint8_t sig[DL_NET_SIGNATURE]);

/* ---- admission: run authority, tokens, revocations ----------------------------
 * A run authority is an ed25519 key pair kept by whoever runs the
 * collaboration. It signs tokens that admit one peer id, with a role and an
 * expiry, and a revocation list. Peers started with the authority's public
 * key admit only peers presenting a valid token (or listed in an allowlist). */
#define DL_ROLE_BIT(role) (1u << (role))
#define DL_ROLES_ALL (DL_ROLE_BIT(DL_ROLE_TRAINER) | DL_ROLE_BIT(DL_ROLE_AUX) | DL_ROLE_BIT(DL_ROLE_MONITOR))
/* "none" "trainer" "aux" "monitor" (a table checked against DL_ROLE_COUNT at
 * compile time); "unknown" for anything else. */
const char *dl_role_name(enum dl_role role);
/* A role a token may grant: "trainer", "aux" or "monitor" ("none" is no
 * token's role and is refused). 0 with *role set, or -1 with dl_fail. */
int dl_role_from_name(const char *name, enum dl_role *role);
/* Trainers and auxiliary peers take part in averaging; monitors only watch. */
bool dl_role_may_send_gradients(enum dl_role role);

#define DL_AUTHORITY_PK 32
#define DL_AUTHORITY_PK_HEX 65
#define DL_TOKEN_NAME_MAX 64
#define DL_TOKEN_RUN_ID_MAX 128
/* Longest token in binary form and in text form (with the NUL): a token
 * issued through an invite carries the authority's delegation (137 bytes). */
#define DL_TOKEN_MAX_BYTES 448
#define DL_TOKEN_TEXT_MAX 608

struct dl_authority {
    uint8_t pk[DL_AUTHORITY_PK];
    uint8_t sk[64];
    char run_id[DL_TOKEN_RUN_ID_MAX];
};

/* Creates a fresh authority for run_id in path (mode 0600, O_EXCL: an
 * existing file is never overwritten). */
int dl_authority_create(const char *path, const char *run_id, struct dl_authority *a);
/* Loads an authority file; refuses one readable by group or others. */
int dl_authority_load(const char *path, struct dl_authority *a);
void dl_authority_clear(struct dl_authority *a);
/* Public key as 64 lowercase hex digits. */
void dl_authority_public_hex(const uint8_t pk[DL_AUTHORITY_PK], char out[DL_AUTHORITY_PK_HEX]);
/* Reads a public key: 64 hex digits, or the name of a file whose first line holds them. */
int dl_authority_parse_public(const char *text, uint8_t pk[DL_AUTHORITY_PK]);

/* What a token says. */
struct dl_token {
    uint8_t authority_pk[DL_AUTHORITY_PK];
    char run_id[DL_TOKEN_RUN_ID_MAX];
    char peer_id[DL_PEER_ID_HEX];
    enum dl_role role;
    char name[DL_TOKEN_NAME_MAX];
    uint64_t issued, expires;    /* Unix seconds */
    bool delegated;              /* signed through an invite's delegation, not by the authority itself */
};

/* Signs a token; writes its binary form (at most DL_TOKEN_MAX_BYTES) into
 * out and its size into *size. */
int dl_token_sign(const struct dl_authority *a, const struct dl_token *t, uint8_t *out, size_t *size);
/* Binary form <-> text form ("dlt1." + URL-safe base64). */
int dl_token_to_text(const uint8_t *bin, size_t size, char out[DL_TOKEN_TEXT_MAX]);
int dl_token_from_text(const char *text, uint8_t *out, size_t *size);
/* Parses a binary token and verifies its signature against the key it
 * names. It still has to be checked against our authority (dl_token_check). */
int dl_token_decode(const uint8_t *bin, size_t size, struct dl_token *t);
/* Checks a decoded token for our authority, run, the peer that presented it
 * and the time now; the error says which check failed. */
int dl_token_check(const struct dl_token *t, const uint8_t authority_pk[DL_AUTHORITY_PK],
                   const char *run_id, const char *peer_id, double now);

/* A signed list of revoked peer ids. */
struct dl_revocations {
    uint8_t authority_pk[DL_AUTHORITY_PK];
    char run_id[DL_TOKEN_RUN_ID_MAX];
    uint64_t serial;             /* grows with every edit: a newer list supersedes an older */
    size_t count;
    uint8_t (*ids)[16];          /* raw peer ids */
};
/* Loads and verifies a list. authority_pk non-NULL: it must be that authority's. */
int dl_revocations_load(const char *path, const uint8_t *authority_pk, struct dl_revocations *r);
/* Adds peer_id (if not there) to the list in path, creating it when absent,
 * and writes it back signed (atomically). */
int dl_revocations_add(const struct dl_authority *a, const char *path, const char *peer_id);
bool dl_revocations_contains(const struct dl_revocations *r, const char *peer_id);
void dl_revocations_free(struct dl_revocations *r);
/* Binary form (what the file holds after its text prefix; what peers gossip):
 * decode verifies the signature; read_file takes the file's binary form
 * without checking it (*bin malloc'd). */
int dl_revocations_decode(const uint8_t *bin, size_t size, struct dl_revocations *r);
/* The authority key, run id and serial a binary list claims, without
 * checking its signature: only for deciding that a list is not worth that
 * check. */
int dl_revocations_peek(const uint8_t *bin, size_t size, uint8_t authority_pk[DL_AUTHORITY_PK],
                        char run_id[DL_TOKEN_RUN_ID_MAX], uint64_t *serial);
int dl_revocations_read_file(const char *path, uint8_t **bin, size_t *size);
/* ---- invites (docs/protocol.md, "Invites") ---------------------------------
 * An invite lets a volunteer get a token with one command, `dedloc join
 * HOST:PORT --invite CODE`, from a peer that holds the invite file. The file
 * holds a key of its own and the authority's delegation to it (never the
 * authority's key), the code's hash, how many peers it admits and until
 * when; the peer ids it admitted are kept beside it (FILE.used), so a
 * restarted peer keeps counting. */
#define DL_NET_METHOD_INVITE "dedloc.run.invite"
/* "dli1." and the URL-safe base64 of 16 random bytes, with the NUL. */
#define DL_INVITE_CODE_MAX 32
#define DL_INVITE_MAX_USES 100000
typedef struct dl_invite dl_invite;

/* Makes an invite of authority a to path (mode 0600, never overwritten):
 * up to uses peers may redeem its code within redeem_s seconds from now, for
 * a token of role valid valid_s seconds from its redemption. code gets the
 * code to hand out (it is kept only as a hash). */
int dl_invite_create(const struct dl_authority *a, const char *path, enum dl_role role, uint32_t uses,
                     double redeem_s, double valid_s, char code[DL_INVITE_CODE_MAX]);
/* Loads an invite file (its delegation verified) and the record of its uses. */
int dl_invite_load(const char *path, dl_invite **invite);
void dl_invite_free(dl_invite *invite);
/* The authority and the run the invite admits to. */
const uint8_t *dl_invite_authority(const dl_invite *invite);
const char *dl_invite_run_id(const dl_invite *invite);
/* Redeems code for peer_id at time now: a token (text form) bound to
 * peer_id, or -1 with the reason (not an invite code, unknown code, expired,
 * used up, the use could not be recorded). A peer id that redeemed the code
 * before gets a new token without using up another place. */
int dl_invite_redeem(dl_invite *invite, const char *code, const char *peer_id, double now,
                     char token[DL_TOKEN_TEXT_MAX]);
/* Answers DL_NET_METHOD_INVITE with dl_invite_redeem for the asking peer's
 * proven id (also on fetch-only connections: a newcomer has no token yet).
 * The invite must outlive net. */
int dl_net_serve_invite(dl_net *net, dl_invite *invite);
/* Asks a connected peer to redeem code for our peer id; 0 with the token
 * (text form), or -1 with the peer's reason. */
int dl_net_redeem_invite(dl_net *net, const char *peer_id, const char *code, double timeout_s,
                         char token[DL_TOKEN_TEXT_MAX]);

/* ---- metrics records ---------------------------------------------------------
 * A trainer's progress for monitors (`dedloc monitor`): a small record signed
 * with the peer's identity and bound to the run, served on request under
 * DL_NET_METHOD_METRICS (a monitor pulls it, so a flood is impossible by
 * construction). A record over DL_METRICS_MAX_BYTES, with a string that is
 * too long or not printable ASCII, or with a number out of range fails to
 * verify and is ignored. */
#define DL_NET_METHOD_METRICS "dedloc.metrics"
#define DL_METRICS_MAX_BYTES 1024
#define DL_METRICS_TEXT 48
struct dl_metrics {
    char peer_id[DL_PEER_ID_HEX];   /* the signer (set by verification) */
    double time;                    /* signer's wall clock at publication (set by publish) */
    uint64_t step;                  /* the global step it trains on */
    double loss;                    /* last training loss; -1 = none yet */
    double samples_per_second;
    double samples_total;           /* samples contributed since it joined */
    double uptime_s;
    char device[DL_METRICS_TEXT];   /* e.g. "NVIDIA H100" */
    char vendor[DL_METRICS_TEXT];
    char precision[16];             /* "fp32", "fp16", ... */
    char name[DL_METRICS_TEXT];     /* display name the contributor chose ("" = none) */
    double target_batch;            /* samples per global step the trainer aims at; 0 = not said */
    double syncs;                   /* local-steps mode: syncs it took part in since it joined; 0 = none, DeDLOC's
                                     * exact mode, or not said (records before the field) */
    double bytes_sent;              /* payload bytes it sent in averaging rounds since it joined; 0 = not said */
};

/* Signs m (time set to now) and serves it to whoever asks from now on. The
 * training loop calls it after each local step or so; cheap. */
int dl_net_publish_metrics(dl_net *net, const struct dl_metrics *m);

/* Asks a connected peer for its metrics record. The callback runs once on the
 * network thread: status DL_NET_OK with a verified record, otherwise m is
 * NULL (a record failing its signature or bounds reads DL_NET_REMOTE_ERROR).
 * Returns the request id, 0 when it could not be queued. */
typedef void (*dl_net_metrics_fn)(void *user, const char *peer_id, int status, const struct dl_metrics *m);
uint64_t dl_net_fetch_metrics(dl_net *net, const char *peer_id, double timeout_s, dl_net_metrics_fn callback,
                              void *user);

/* A client-mode peer cannot be dialled, so nobody who dials out only (a
 * monitor) reaches it: every peer relays the record of a peer it is
 * connected to under DL_NET_METHOD_METRICS_RELAY (payload: that peer's hex
 * id; the answer is the owner's signed record as it is). This asks
 * relay_peer_id for peer_id's record; the callback is dl_net_fetch_metrics'
 * (verified against peer_id). */
#define DL_NET_METHOD_METRICS_RELAY "dedloc.metrics.relay"
uint64_t dl_net_fetch_metrics_via(dl_net *net, const char *relay_peer_id, const char *peer_id, double timeout_s,
                                  dl_net_metrics_fn callback, void *user);

/* Checks a metrics blob: signature by expected_peer_id's key (NULL: any),
 * run, size and bounds. 0 with *m filled, or -1 with the reason. */
int dl_metrics_verify(const uint8_t *blob, size_t size, const char *run_id, const char *expected_peer_id,
                      struct dl_metrics *m);

#endif
