/* A running peer's lifecycle: start and stop, the network thread, its
 * command queue, the periodic tick (keepalives and expiry; publishing is in
 * gossip.c, dialling in targets.c), the listener and the view. */
#include <errno.h>
#include <event2/thread.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

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
    c->max_buffered = (size_t)256 << 20;
#ifdef DEDLOC_HAVE_OPENDHT
    c->use_dht = true;
#endif
    c->dht_port = -1;
    c->dht_refresh_s = 60;
}

static char *dup_or_null(const char *s) { return s ? dl_strdup(s) : NULL; }

/* ---- commands from other threads (posted by queue.c) ----------------------------- */

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
            if (new_epoch && !net->stopping) dl_net_publish_record(net, false);
            break;
        }
        case CMD_DIAL: dl_net_note_target(net, cmd->pk, cmd->address, DL_TARGET_DHT); break;
        case CMD_STOP:
            if (!net->stopping) {
                net->stopping = true;
                net->stop_deadline = dl_now() + 1.0;
                dl_net_publish_record(net, true);
                if (net->listener) evconnlistener_disable(net->listener);
            }
            break;
        default:
            dl_rpc_run_cmd(net, cmd);
            if (cmd->next == cmd) { /* parked until its peer is connected (rpc.c) */
                cmd->next = net->parked;
                net->parked = cmd;
                continue;
            }
            break;
        }
        free(cmd->payload);
        free(cmd);
    }
}

/* ---- what connections report (conn.c calls up only through this table) ----------- */

static void conn_dial_failed(struct dl_conn *c, const char *why) { dl_net_note_dial_failure(c->net, c->dialled, why); }

static void conn_handshake_missed(struct dl_conn *c) { dl_net_target_failed(c->net, c->dialled); }

static void conn_dialled_self(struct dl_conn *c) {
    struct dl_net *net = c->net;
    for (size_t i = 0; i < net->num_targets; i++)
        if (!strcmp(net->targets[i].address, c->dialled)) net->targets[i].is_self = true;
}

static uint32_t conn_refuse_key(struct dl_conn *c, const uint8_t pk[DL_WIRE_PK], const char **why) {
    if (c->outbound && !dl_net_target_accepts(c->net, c->dialled, pk)) {
        *why = "another identity than announced at this address";
        return DL_ERR_PROTOCOL;
    }
    if (dl_net_is_banned(c->net, pk)) {
        *why = "banned";
        return DL_ERR_BANNED;
    }
    if (!c->outbound && c->peer_fetch_only && (*why = dl_net_door_fetch_only_refusal(c->net, c)))
        return DL_ERR_BUSY;
    return 0;
}

static int conn_admit(struct dl_conn *c, const uint8_t *token, size_t token_size) {
    return dl_net_admit(c->net, c, token, token_size);
}

static void conn_ready(struct dl_conn *c) {
    dl_net_on_ready(c->net, c);
    /* A newcomer fetching the run files is no peer of the run: it learns
     * nobody's address or token, and no revocation list. */
    if (!c->peer_fetch_only) dl_net_send_revocations(c->net, c, NULL);
}

static int conn_message(struct dl_conn *c, uint8_t type, const uint8_t *body, size_t size) {
    switch (type) {
    case DL_MSG_RECORDS: dl_net_on_records(c->net, c, body, size); return 0;
    case DL_MSG_REVOCATIONS: dl_net_on_revocations(c->net, c, body, size); return 0;
    case DL_MSG_REQUEST: dl_rpc_on_request(c->net, c, body, size); return 0;
    case DL_MSG_RESPONSE: dl_rpc_on_response(c->net, c, body, size); return 0;
    case DL_MSG_CANCEL: dl_rpc_on_cancel(c->net, c, body, size); return 0;
    default: return -1;
    }
}

static void conn_closing(struct dl_conn *c, bool was_ready) {
    if (was_ready) dl_net_on_closed(c->net, c);
    dl_rpc_conn_closed(c->net, c);
}

static void conn_refused(struct dl_conn *c, uint32_t code, const char *text, uint32_t version) {
    char who[DL_PEER_ID_HEX + DL_NET_ADDR_MAX + 4];
    snprintf(who, sizeof who, "%s", c->state >= CONN_AUTH && c->peer_id[0] ? c->peer_id : c->remote);
    dl_net_target_refused(c->net, c->dialled, who, code, text, version);
}

static void conn_ban(struct dl_conn *c) { dl_net_ban(c->net, c->peer_pk); }

static void conn_strike(struct dl_conn *c, const char *why) { dl_net_strike_host(c->net, c->remote, why); }

static const struct dl_conn_ops net_conn_ops = {
    .dial_failed = conn_dial_failed,
    .handshake_missed = conn_handshake_missed,
    .dialled_self = conn_dialled_self,
    .refuse_key = conn_refuse_key,
    .admit = conn_admit,
    .ready = conn_ready,
    .message = conn_message,
    .closing = conn_closing,
    .refused = conn_refused,
    .ban = conn_ban,
    .strike = conn_strike,
};

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
        } else if (c->peer_fetch_only && now - c->created > DL_NET_FETCH_ONLY_LIFETIME_S) {
            dl_conn_reject(c, DL_ERR_BUSY, "fetch-only connection open for too long", false);
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
    dl_net_tick_budget(net, now);
    dl_net_tick_publish(net, now);
    pthread_mutex_lock(&net->lock);
    size_t expired = dl_swarm_expire(&net->swarm, now, net->cfg.expiry_s, net->id.pk);
    pthread_mutex_unlock(&net->lock);
    if (expired) DL_INFO("net", "%zu peer record(s) expired", expired);
    dl_net_tick_targets(net, now);
    dl_rpc_tick(net, now);
    dl_dht_tick(net, now);
    dl_net_tick_admission(net, now);
}

/* ---- listener --------------------------------------------------------------------- */

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg) {
    struct dl_net *net = arg;
    /* Unauthenticated connections cost memory and crypto before they prove
     * anything: at most DL_NET_MAX_PREAUTH of them at a time. */
    size_t preauth = 0;
    for (struct dl_conn *c = net->conns; c; c = c->next) preauth += c->state < CONN_READY && !c->outbound;
    if (net->num_conns >= DL_NET_MAX_CONNS || preauth >= DL_NET_MAX_PREAUTH || net->stopping) {
        DL_DEBUG("net", "refusing a connection (%zu connections, %zu unauthenticated)", net->num_conns, preauth);
        evutil_closesocket(fd);
        return;
    }
    if (!dl_net_door_admit(net, sa)) {
        evutil_closesocket(fd);
        return;
    }
    dl_net_socket_nodelay(fd);
    struct bufferevent *bev = bufferevent_socket_new(net->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        evutil_closesocket(fd);
        return;
    }
    char remote[DL_NET_ADDR_MAX];
    dl_net_sockaddr_string(sa, remote, sizeof remote);
    if (!dl_conn_new(net, bev, false, remote, NULL)) bufferevent_free(bev);
}

static int start_listener(struct dl_net *net) {
    const char *spec = net->cfg.listen ? net->cfg.listen : "0.0.0.0:0";
    if (!*spec || net->cfg.client_mode) return 0;
    struct sockaddr_storage ss;
    int len;
    if (dl_net_resolve_address(spec, &ss, &len, true)) return dl_fail_context("--listen");
    net->listener = evconnlistener_new_bind(net->base, accept_cb, net,
                                            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128,
                                            (struct sockaddr *)&ss, len);
    if (!net->listener) return dl_fail("cannot listen on %s: %s", spec, strerror(errno));
    struct sockaddr_storage bound;
    memset(&bound, 0, sizeof bound);
    socklen_t bl = sizeof bound;
    if (getsockname(evconnlistener_get_fd(net->listener), (struct sockaddr *)&bound, &bl))
        return dl_fail("cannot read the address bound for %s: %s", spec, strerror(errno));
    dl_net_sockaddr_string((struct sockaddr *)&bound, net->listen_addr, sizeof net->listen_addr);
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
    dl_trust_free(&net->trust);
    free(net->metrics_blob);
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
    dl_conn_set_ops(net, &net_conn_ops);
    dl_swarm_init(&net->swarm, 4096);
    net->cfg = *config;
    if (!net->cfg.max_buffered) net->cfg.max_buffered = (size_t)256 << 20;
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
    if (config->manifest_hash) {
        net->has_manifest = true;
        memcpy(net->manifest_hash, config->manifest_hash, sizeof net->manifest_hash);
    }
    net->cfg.manifest_hash = NULL;
    net->refresh_s = config->min_refresh_s;
    if (dl_identity_load(net->cfg.identity_path, &net->id)) goto fail;
    if (dl_net_admission_start(net)) goto fail;
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
            if (dl_net_resolve_address(tok, &ss, &len, true)) {
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
    if (!net->cfg.fetch_only && dl_net_metrics_start(net)) goto fail;
    if (net->cfg.use_dht && dl_dht_start(net)) goto fail;
    dl_net_publish_record(net, false);
    net->next_publish = dl_now() + net->cfg.min_refresh_s;
    if (pthread_create(&net->thread, NULL, thread_main, net)) {
        dl_fail("cannot start the network thread");
        dl_dht_stop(net);
        goto fail;
    }
    net->thread_started = true;
    if (net->cfg.fetch_only)
        DL_DEBUG("net", "fetch-only peer %s started", net->id.peer_id);
    else
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
const char *dl_net_run_id(const dl_net *net) { return net->run_id; }
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

int dl_net_set_param_hash(dl_net *net, const uint8_t hash[32]) {
    pthread_mutex_lock(&net->lock);
    net->has_param_hash = hash != NULL;
    if (hash) memcpy(net->param_hash, hash, sizeof net->param_hash);
    else memset(net->param_hash, 0, sizeof net->param_hash);
    pthread_mutex_unlock(&net->lock);
    return 0;
}

void dl_net_vouch_epoch(dl_net *net, uint64_t epoch) {
    pthread_mutex_lock(&net->lock);
    net->swarm.vouched = true;
    net->swarm.vouched_epoch = epoch;
    pthread_mutex_unlock(&net->lock);
}

int dl_net_set_measured_bandwidth(dl_net *net, double mbit) {
    if (!(mbit >= 0) || mbit > 1e7) return dl_fail("measured bandwidth %g Mbit/s out of range", mbit);
    pthread_mutex_lock(&net->lock);
    net->measured_mbit = mbit;
    pthread_mutex_unlock(&net->lock);
    return 0;
}

int dl_net_swarm_view(dl_net *net, struct dl_swarm_view *view) {
    pthread_mutex_lock(&net->lock);
    int rc = dl_swarm_compute(&net->swarm, dl_wall_time(), net->cfg.target_batch, net->id.pk, view);
    view->num_connections = net->num_ready;
    view->records_checked = net->records_checked;
    view->records_verified = net->records_verified;
    view->buffered_bytes = net->buffered;
    view->refresh_s = net->refresh_s;
    pthread_mutex_unlock(&net->lock);
    return rc;
}

bool dl_net_dial_refused(dl_net *net, char *why, size_t cap) {
    pthread_mutex_lock(&net->lock);
    bool refused = net->dial_refusal[0] != 0;
    if (cap) snprintf(why, cap, "%s", net->dial_refusal);
    pthread_mutex_unlock(&net->lock);
    return refused;
}

bool dl_net_connected_peer(dl_net *net, char out[DL_PEER_ID_HEX]) {
    pthread_mutex_lock(&net->lock);
    snprintf(out, DL_PEER_ID_HEX, "%s", net->last_ready);
    pthread_mutex_unlock(&net->lock);
    return out[0] != 0;
}
