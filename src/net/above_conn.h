/* What the files above conn.c (layers 4 to 7 of net_internal.h) offer each
 * other and net.c. Files of layers 0 to 3 never include this header. */
#ifndef DEDLOC_NET_ABOVE_CONN_H
#define DEDLOC_NET_ABOVE_CONN_H

#include "net/net_internal.h"

/* targets.c */
/* A dial to address failed before the handshake (refused, timed out, closed):
 * the first failure of an initial peer is a warning, the retries are quiet. */
void dl_net_note_dial_failure(struct dl_net *net, const char *address, const char *why);
bool dl_net_is_banned(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]);
void dl_net_ban(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]);
/* The target with this key, else the keyless one at this address. */
struct dl_target *dl_net_find_target(struct dl_net *net, const uint8_t *pk, const char *address);
/* False when we dialled an address learned with a key (record or DHT) and
 * another key answered. Initial peers may change identity. */
bool dl_net_target_accepts(struct dl_net *net, const char *address, const uint8_t pk[DL_WIRE_PK]);
void dl_net_note_target(struct dl_net *net, const uint8_t *pk, const char *address, enum dl_target_source source);
/* The peer we dialled at address (who: its id or address) refused us with
 * an ERROR: the next dial waits 2, 4, 8 ... DL_NET_REFUSED_MAX_S seconds,
 * and the refusal is a warning once per DL_NET_REFUSED_WARN_S. */
void dl_net_target_refused(struct dl_net *net, const char *address, const char *who, uint32_t code,
                           const char *text, uint32_t version);
/* Whether the target's owner refused us recently (no dial before refused_until). */
bool dl_net_target_refusing(const struct dl_target *t, double now);
/* A dial to address ended before the handshake completed. */
void dl_net_target_failed(struct dl_net *net, const char *address);
void dl_net_tick_targets(struct dl_net *net, double now);

/* gossip.c */
void dl_net_send_records(struct dl_net *net, struct dl_conn *c, struct dl_conn *except,
                         const uint8_t *blob, size_t size);
void dl_net_publish_record(struct dl_net *net, bool goodbye);
void dl_net_tick_publish(struct dl_net *net, double now);
void dl_net_on_ready(struct dl_net *net, struct dl_conn *c);
void dl_net_on_closed(struct dl_net *net, struct dl_conn *c);
void dl_net_on_records(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size);

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
/* Why the fetch-only connection c (inbound, its HELLO just read) must be
 * refused: over DL_NET_MAX_FETCH_ONLY in all or DL_NET_MAX_FETCH_ONLY_PER_HOST
 * from its host; NULL when it may stay. */
const char *dl_net_door_fetch_only_refusal(struct dl_net *net, const struct dl_conn *c);
/* Takes one run-file request from the allowance of remote's host
 * (DL_NET_RUN_FILES_*); false when the host is over it. */
bool dl_net_door_run_files_allowed(struct dl_net *net, const char *remote);

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

/* metrics.c: serves the metrics relay (every peer but a fetch-only one). */
int dl_net_metrics_start(struct dl_net *net);

/* dht.c */
int dl_dht_start(struct dl_net *net);
void dl_dht_tick(struct dl_net *net, double now);
void dl_dht_stop(struct dl_net *net);

#endif
