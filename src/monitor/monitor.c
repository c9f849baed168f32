/* The monitor's swarm side and its event loop: it joins the collaboration as
 * an observer (it trains nothing, in client mode so it never votes on the
 * global step), pulls every peer's signed metrics record, keeps a history
 * (monitor_history.c) and serves it all over HTTP (monitor_http.c). */
#include <event2/event.h>
#include <event2/http.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/collab.h"
#include "dedloc/util.h"
#include "monitor/monitor_internal.h"

struct dl_monitor {
    struct dl_monitor_state *state;
    dl_net *net;
    struct event_base *base;
    struct evhttp *http;
    struct event *tick, *sigint, *sigterm;
    int http_port;
    double sample_every, next_sample, end, last_epoch_change;
    uint64_t last_epoch;
    size_t relay_turn;  /* which peer relays client-mode peers' records this tick */
};

const struct dl_metrics *dl_monitor_find_metrics(const struct dl_monitor_state *s, const char *peer_id) {
    for (size_t i = 0; i < s->num_metrics; i++)
        if (!strcmp(s->metrics[i].peer_id, peer_id)) return &s->metrics[i];
    return NULL;
}

double dl_monitor_mean_loss(const struct dl_monitor_state *s) {
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < s->view.num_peers; i++) {
        const struct dl_metrics *m = dl_monitor_find_metrics(s, s->view.peers[i].peer_id);
        if (m && m->loss >= 0) {
            sum += m->loss;
            n++;
        }
    }
    return n ? sum / (double)n : -1;
}

/* Runs on the network thread with a verified record (or a failure). */
static void on_metrics(void *user, const char *peer_id, int status, const struct dl_metrics *m) {
    struct dl_monitor_state *s = user;
    if (status != DL_NET_OK || !m) return;
    pthread_mutex_lock(&s->lock);
    dl_monitor_board_note(s, m);
    pthread_mutex_unlock(&s->lock);
}

/* A metrics request for each peer in v. A client-mode peer (behind NAT) is
 * dialled by nobody, so its record is asked of a peer that it dialled: one
 * of the others, in turn from tick to tick, so a relay that does not hold
 * a connection to it costs one miss, not every answer. */
static void fetch_metrics(struct dl_monitor *l, const struct dl_swarm_view *v) {
    size_t relays = 0;
    for (size_t i = 0; i < v->num_peers; i++) relays += !v->peers[i].client_mode;
    l->relay_turn++;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        uint64_t id = 0;
        if (!p->client_mode) {
            id = dl_net_fetch_metrics(l->net, p->peer_id, 2.0, on_metrics, l->state);
        } else if (relays) {
            size_t k = (l->relay_turn + i) % relays;
            for (size_t j = 0; j < v->num_peers; j++) {
                if (v->peers[j].client_mode) continue;
                if (k-- == 0) {
                    id = dl_net_fetch_metrics_via(l->net, v->peers[j].peer_id, p->peer_id, 2.0, on_metrics, l->state);
                    break;
                }
            }
        }
        if (!id && (!p->client_mode || relays)) DL_DEBUG("monitor", "metrics of %s: %s", p->peer_id, dl_error());
    }
}

/* Once a second: a fresh view, a metrics request to each peer, maybe a
 * history point. */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    struct dl_monitor *l = arg;
    struct dl_monitor_state *s = l->state;
    double now = dl_now();
    if (l->end > 0 && now >= l->end) {
        event_base_loopbreak(l->base);
        return;
    }
    struct dl_swarm_view v;
    if (dl_net_swarm_view(l->net, &v)) {
        DL_WARN("monitor", "swarm view: %s", dl_error());
        return;
    }
    /* We are an observer: leave ourselves out. */
    size_t kept = 0;
    for (size_t i = 0; i < v.num_peers; i++)
        if (!v.peers[i].is_self) v.peers[kept++] = v.peers[i];
    v.num_peers = kept;
    fetch_metrics(l, &v);
    pthread_mutex_lock(&s->lock);
    uint64_t epoch = v.global_epoch;
    if (v.global_epoch != l->last_epoch) {
        if (l->last_epoch_change > 0 && v.global_epoch == l->last_epoch + 1) s->round_s = now - l->last_epoch_change;
        l->last_epoch_change = now;
        l->last_epoch = v.global_epoch;
    }
    dl_swarm_view_free(&s->view);
    s->view = v;
    s->view_time = dl_wall_time();
    if (now >= l->next_sample) {
        l->next_sample = now + l->sample_every;
        struct dl_monitor_header hd;
        dl_monitor_header(s, s->view_time, &hd);
        struct dl_monitor_point p = {s->view_time, (double)v.global_epoch, dl_monitor_mean_loss(s),
                                     hd.samples_per_second, (double)v.num_peers};
        if (dl_monitor_history_add(&s->history, &p)) DL_WARN("monitor", "%s", dl_error());
    }
    pthread_mutex_unlock(&s->lock);
    dl_monitor_snapshots_tick(s, epoch);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg) { event_base_loopbreak(arg); }

/* The state the HTTP side reads, with the settings of the snapshots. */
static struct dl_monitor_state *state_new(const struct dl_monitor_config *cfg) {
    struct dl_monitor_state *state = dl_calloc(1, sizeof *state);
    if (!state) return NULL;
    pthread_mutex_init(&state->lock, NULL);
    state->run_id = cfg->net.run_id;
    state->target_batch = cfg->net.target_batch;
    state->target_given = cfg->run_target_batch > 0;
    struct dl_monitor_snapshots *snap = &state->snap;
    snap->checkpoint_dir = cfg->checkpoint_dir;
    snap->checkpoint_every = cfg->checkpoint_every;
    snap->keep = cfg->keep;
    snap->export_dir = cfg->export_dir;
    snap->export_every = cfg->export_every;
    snap->tokenizer = cfg->tokenizer;
    snap->exporter = cfg->exporter;
    snap->opt = cfg->checkpoint_opt;
    snap->test_hold_s = cfg->test_hold_s;
    return state;
}

/* The event loop: HTTP, the once-a-second tick, the stop signals. */
static int serve_setup(struct dl_monitor *m, const struct dl_monitor_config *cfg) {
    m->base = event_base_new();
    if (!m->base) return dl_fail("cannot create an event loop (libevent event_base_new failed)");
    m->end = cfg->duration_s >= 0 ? dl_now() + cfg->duration_s : 0;
    m->http = dl_monitor_http_start(m->base, cfg->http_host, cfg->http_port, m->state, &m->http_port, &m->state->conns);
    m->tick = event_new(m->base, -1, EV_PERSIST, on_tick, m);
    m->sigint = evsignal_new(m->base, SIGINT, on_stop_signal, m->base);
    m->sigterm = evsignal_new(m->base, SIGTERM, on_stop_signal, m->base);
    struct timeval second = {1, 0};
    if (!m->http) return -1;
    if (!m->tick || !m->sigint || !m->sigterm || event_add(m->tick, &second) || event_add(m->sigint, NULL) ||
        event_add(m->sigterm, NULL))
        return dl_fail("cannot set up the event loop's timer and signals (libevent)");
    on_tick(-1, 0, m);
    return 0;
}

int dl_monitor_open(const struct dl_monitor_config *cfg, dl_monitor **out) {
    *out = NULL;
    struct dl_net_config net_cfg = cfg->net;
    /* An observer: dials out only, never counted as a voter. */
    net_cfg.listen = "";
    net_cfg.client_mode = true;
    if (net_cfg.max_refresh_s > net_cfg.expiry_s / 4) net_cfg.max_refresh_s = net_cfg.expiry_s / 4;
    if (net_cfg.min_refresh_s > net_cfg.max_refresh_s) net_cfg.min_refresh_s = net_cfg.max_refresh_s;
    if (net_cfg.keepalive_s > net_cfg.expiry_s / 3) net_cfg.keepalive_s = net_cfg.expiry_s / 3;

    struct dl_monitor *m = dl_calloc(1, sizeof *m);
    if (!m) return -1;
    m->sample_every = cfg->sample_every_s;
    m->state = state_new(cfg);
    if (!m->state) {
        free(m);
        return -1;
    }
    struct dl_monitor_snapshots *snap = &m->state->snap;
    /* The folders are checked now, not at the first checkpoint hours later. */
    bool snapshots = cfg->checkpoint_dir || cfg->export_dir;
    if ((snapshots && (dl_monitor_snapshots_init(snap, cfg->model, cfg->max_steps, cfg->run_target_batch) ||
                       dl_trainer_check_outputs(cfg->checkpoint_dir, NULL) ||
                       (cfg->export_dir && cfg->exporter.check_out(cfg->export_dir)))) ||
        dl_monitor_history_open(&m->state->history, cfg->history_path, cfg->history_points) ||
        dl_net_start(&net_cfg, &m->net)) {
        dl_monitor_close(m);
        return -1;
    }
    snprintf(m->state->peer_id, sizeof m->state->peer_id, "%s", dl_net_peer_id(m->net));
    snap->net = m->net;
    if (serve_setup(m, cfg)) {
        dl_monitor_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

int dl_monitor_http_port(const dl_monitor *m) { return m->http_port; }

const char *dl_monitor_peer_id(const dl_monitor *m) { return m->state->peer_id; }

int dl_monitor_run(dl_monitor *m) {
    if (event_base_dispatch(m->base) < 0) return dl_fail("the monitor's event loop failed (libevent)");
    return 0;
}

void dl_monitor_close(dl_monitor *m) {
    if (!m) return;
    if (m->sigterm) event_free(m->sigterm);
    if (m->sigint) event_free(m->sigint);
    if (m->tick) event_free(m->tick);
    if (m->http) evhttp_free(m->http);
    struct dl_monitor_state *state = m->state;
    dl_monitor_conns_free(state->conns); /* its events belong to the base */
    if (m->base) event_base_free(m->base);
    /* A state download uses net: it ends first. The network thread may
     * still be in on_metrics: stop it before freeing what it writes. */
    dl_monitor_snapshots_stop(state);
    dl_net_stop(m->net);
    dl_swarm_view_free(&state->view);
    dl_monitor_history_close(&state->history);
    pthread_mutex_destroy(&state->lock);
    free(state);
    free(m);
}
