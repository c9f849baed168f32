/* Discovery through OpenDHT: every peer runs a DHT node, announces its signed
 * record under a key derived from the run id and dials the peers it finds
 * there. The DHT carries only who is where; progress travels directly. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

#ifdef DEDLOC_HAVE_OPENDHT
#include <opendht/opendht_c.h>

struct dl_dht {
    dht_runner *runner;
    dht_infohash key;
    double next_put, next_get, started;
    bool get_in_flight;
    pthread_mutex_t lock;  /* guards get_in_flight against the DHT thread */
};

/* Runs on OpenDHT's thread: verify, then hand the address to the network
 * thread through its command queue. */
static bool on_value(const dht_value *value, void *user) {
    struct dl_net *net = user;
    dht_data_view data = dht_value_get_data(value);
    struct dl_record r;
    if (dl_record_verify(data.data, data.size, net->run_id, &r)) {
        DL_DEBUG("net", "DHT: ignoring a value: %s", dl_error());
        return true;
    }
    if (r.goodbye || r.client_mode || !r.address[0] || !memcmp(r.pk, net->id.pk, DL_WIRE_PK)) return true;
    /* Values live 10 minutes; older announcements are of peers long gone. */
    if (dl_wall_time() - r.time > 900) return true;
    struct dl_cmd *cmd = dl_calloc(1, sizeof *cmd);
    if (!cmd) return true;
    cmd->type = CMD_DIAL;
    memcpy(cmd->pk, r.pk, DL_WIRE_PK);
    snprintf(cmd->address, sizeof cmd->address, "%s", r.address);
    dl_net_post(net, cmd);
    return true;
}

static void on_get_done(bool ok, void *user) {
    struct dl_net *net = user;
    pthread_mutex_lock(&net->dht->lock);
    net->dht->get_in_flight = false;
    pthread_mutex_unlock(&net->dht->lock);
}

static void on_put_done(bool ok, void *user) {
    if (!ok) DL_DEBUG("net", "DHT: announcement not stored yet");
}

/* True when --listen named one host (not a wildcard, not client mode): the
 * host the DHT node should keep to, and cannot (below). */
static bool listen_names_host(const struct dl_net *net) {
    const char *a = net->listen_addr;
    return a[0] && strncmp(a, "0.0.0.0:", 8) && strncmp(a, "[::]:", 5);
}

int dl_dht_start(struct dl_net *net) {
    struct dl_dht *d = dl_calloc(1, sizeof *d);
    if (!d) return -1;
    pthread_mutex_init(&d->lock, NULL);
    d->runner = dht_runner_new();
    if (!d->runner) {
        free(d);
        return dl_fail("OpenDHT: cannot create a node");
    }
    dht_runner_config cfg;
    dht_runner_config_default(&cfg);
    cfg.threaded = true;
    cfg.log = false;
    cfg.peer_discovery = false;
    cfg.peer_publish = false;
    int port = net->cfg.dht_port;
    if (port < 0) port = net->listen_port ? net->listen_port + 1 : 0;
    if (port > 65535) port = 0;
    int rc = dht_runner_run_config(d->runner, (in_port_t)port, &cfg);
    if (rc) {
        dht_runner_delete(d->runner);
        free(d);
        return dl_fail("OpenDHT: cannot start a node on UDP port %d (error %d); pick another with --dht-port",
                       port, rc);
    }
    net->dht_port = dht_runner_get_bound_port(d->runner, AF_INET);
    if (net->cfg.dht_bootstrap) {
        char *list = dl_strdup(net->cfg.dht_bootstrap), *save = NULL;
        for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
            char *colon = strrchr(tok, ':');
            if (!colon) continue;
            *colon = 0;
            char *host = tok;
            if (*host == '[') {
                host++;
                char *end = strchr(host, ']');
                if (end) *end = 0;
            }
            dht_runner_bootstrap(d->runner, host, colon + 1);
        }
        free(list);
    }
    char key[200];
    snprintf(key, sizeof key, "dedloc/run/%s", net->run_id);
    dht_infohash_get_from_string(&d->key, key);
    d->started = dl_now();
    d->next_put = d->next_get = d->started;
    net->dht = d;
    DL_INFO("net", "DHT node on UDP port %d", net->dht_port);
    /* OpenDHT's C API (opendht_c.h, 2.4) takes a port and nothing else: its
     * node binds 0.0.0.0 and [::] on it. Binding one host needs its C++ API
     * (DhtRunner::run with two SockAddr), which a C11 program cannot call;
     * so a peer told to keep to one host says where its DHT is open instead
     * (docs/protocol.md, "DHT discovery"). */
    if (listen_names_host(net))
        DL_WARN("net", "--listen %s names one host, but the DHT node is open on every address (UDP port %d "
                "of 0.0.0.0 and [::]): OpenDHT's C library cannot bind one host. Pass --no-dht to keep this "
                "peer to %s (it then finds peers through --initial-peers only)",
                net->listen_addr, net->dht_port, net->listen_addr);
    return 0;
}

void dl_dht_tick(struct dl_net *net, double now) {
    struct dl_dht *d = net->dht;
    if (!d) return;
    if (now >= d->next_put && !net->cfg.client_mode && net->announce_addr[0]) {
        pthread_mutex_lock(&net->lock);
        struct dl_swarm_entry *self = dl_swarm_find(&net->swarm, net->id.pk);
        dht_value *v = self ? dht_value_new(self->blob, self->blob_size) : NULL;
        pthread_mutex_unlock(&net->lock);
        if (v) {
            dht_runner_put(d->runner, &d->key, v, on_put_done, net, false);
            dht_value_unref(v);
        }
        /* Quickly at first (the DHT may not be joined yet), then well inside
         * the 10-minute value lifetime. */
        d->next_put = now + (now - d->started < 30 ? 5 : net->cfg.dht_refresh_s);
    }
    if (now >= d->next_get) {
        pthread_mutex_lock(&d->lock);
        bool busy = d->get_in_flight;
        if (!busy) d->get_in_flight = true;
        pthread_mutex_unlock(&d->lock);
        if (!busy) dht_runner_get(d->runner, &d->key, on_value, on_get_done, net);
        d->next_get = now + (now - d->started < 30 ? 1 : 10);
    }
}

void dl_dht_stop(struct dl_net *net) {
    struct dl_dht *d = net->dht;
    if (!d) return;
    /* The destructor joins OpenDHT's threads, so no callback runs afterwards. */
    dht_runner_delete(d->runner);
    pthread_mutex_destroy(&d->lock);
    free(d);
    net->dht = NULL;
}

#else

int dl_dht_start(struct dl_net *net) {
    return dl_fail("this build has no OpenDHT (libopendht-c-dev); run with --no-dht");
}
void dl_dht_tick(struct dl_net *net, double now) {}
void dl_dht_stop(struct dl_net *net) {}

#endif
