/* The monitor's HTTP side (libevent's evhttp): the embedded page, JSON for
 * scripts and the page, Prometheus text for scrapers. Requests are bounded
 * (GET/HEAD only, small headers, no body, a timeout for slow clients), so a
 * bad client costs one connection, never the monitor. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dedloc/util.h"
#include "monitor/monitor_internal.h"

/* Generated from the files of web/ and libjs-chart.js by cmake/embed_files.cmake. */
struct dl_web_embedded {
    const char *name;
    const char *data;
    size_t size;
};
extern const struct dl_web_embedded dl_web_embedded_table[];

static void send_body(struct evhttp_request *req, int code, const char *reason, const char *type, const void *data,
                      size_t size) {
    struct evbuffer *body = evbuffer_new();
    if (!body || evbuffer_add(body, data, size)) {
        DL_WARN("monitor", "out of memory answering a request");
        if (body) evbuffer_free(body);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply(req, code, reason, body);
    evbuffer_free(body);
}

static void send_json(struct evhttp_request *req, cJSON *o) {
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    if (text) send_body(req, 200, "OK", "application/json", text, strlen(text));
    else evhttp_send_error(req, 500, "out of memory");
    free(text);
    cJSON_Delete(o);
}

/* -1 (unknown) becomes null: JSON has no better word for it. */
static void add_loss(cJSON *o, const char *name, double loss) {
    if (loss >= 0) cJSON_AddNumberToObject(o, name, loss);
    else cJSON_AddNullToObject(o, name);
}

static cJSON *metrics_json(const struct dl_metrics *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "time", m->time);
    cJSON_AddNumberToObject(o, "step", (double)m->step);
    add_loss(o, "loss", m->loss);
    cJSON_AddNumberToObject(o, "samples_per_second", m->samples_per_second);
    cJSON_AddNumberToObject(o, "samples_total", m->samples_total);
    cJSON_AddNumberToObject(o, "uptime_s", m->uptime_s);
    cJSON_AddStringToObject(o, "device", m->device);
    cJSON_AddStringToObject(o, "vendor", m->vendor);
    cJSON_AddStringToObject(o, "precision", m->precision);
    cJSON_AddStringToObject(o, "name", m->name);
    if (m->target_batch > 0) cJSON_AddNumberToObject(o, "target_batch", m->target_batch);
    else cJSON_AddNullToObject(o, "target_batch");
    /* Local-steps mode: syncs; any mode: bytes sent in rounds (null: not said). */
    if (m->syncs > 0) cJSON_AddNumberToObject(o, "syncs", m->syncs);
    else cJSON_AddNullToObject(o, "syncs");
    if (m->bytes_sent > 0) cJSON_AddNumberToObject(o, "bytes_sent", m->bytes_sent);
    else cJSON_AddNullToObject(o, "bytes_sent");
    return o;
}

/* A contributor on the board: its latest record and its samples over all
 * its sessions. */
struct contributor {
    const struct dl_metrics *m;
    double samples;
};

static int by_samples(const void *a, const void *b) {
    double x = ((const struct contributor *)a)->samples, y = ((const struct contributor *)b)->samples;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The monitor's checkpoints and exports: null when not asked for. */
static void add_snapshots(cJSON *o, const struct dl_monitor_snapshots *m) {
    if (!m->checkpoint_dir && !m->export_dir) {
        cJSON_AddNullToObject(o, "snapshots");
        return;
    }
    cJSON *j = cJSON_AddObjectToObject(o, "snapshots");
    cJSON_AddBoolToObject(j, "downloading", m->started && !m->finished);
    cJSON_AddNumberToObject(j, "fetches", (double)m->fetches);
    cJSON_AddNumberToObject(j, "failures", (double)m->failures);
    cJSON_AddStringToObject(j, "last_error", m->last_error);
    cJSON_AddStringToObject(j, "param_hash", m->param_hash);
    if (m->checkpoint_dir) {
        cJSON *c = cJSON_AddObjectToObject(j, "checkpoint");
        cJSON_AddStringToObject(c, "dir", m->checkpoint_dir);
        cJSON_AddNumberToObject(c, "every", (double)m->checkpoint_every);
        cJSON_AddNumberToObject(c, "epoch", (double)m->checkpoint_epoch);
        cJSON_AddStringToObject(c, "path", m->checkpoint_path);
        cJSON_AddNumberToObject(c, "time", m->checkpoint_time);
    } else {
        cJSON_AddNullToObject(j, "checkpoint");
    }
    if (m->export_dir) {
        cJSON *e = cJSON_AddObjectToObject(j, "export");
        cJSON_AddStringToObject(e, "dir", m->export_dir);
        cJSON_AddNumberToObject(e, "every", (double)m->export_every);
        cJSON_AddNumberToObject(e, "epoch", (double)m->export_epoch);
        cJSON_AddNumberToObject(e, "time", m->export_time);
    } else {
        cJSON_AddNullToObject(j, "export");
    }
}

static cJSON *status_json(struct dl_monitor_state *s) {
    cJSON *o = cJSON_CreateObject();
    const struct dl_swarm_view *v = &s->view;
    double now = dl_wall_time();
    cJSON_AddStringToObject(o, "run_id", s->run_id);
    cJSON_AddStringToObject(o, "monitor_peer_id", s->peer_id);
    cJSON_AddNumberToObject(o, "time", s->view_time);
    cJSON_AddNumberToObject(o, "global_epoch", (double)v->global_epoch);
    struct dl_monitor_header hd;
    dl_monitor_header(s, now, &hd);
    cJSON_AddNumberToObject(o, "target_batch", hd.target_batch);
    cJSON_AddStringToObject(o, "target_source", hd.target_source);
    cJSON_AddNumberToObject(o, "collective_samples", hd.collective_samples);
    cJSON_AddNumberToObject(o, "samples_per_second", hd.samples_per_second);
    cJSON_AddNumberToObject(o, "eta_s", hd.eta_s);
    cJSON_AddNumberToObject(o, "round_s", s->round_s);
    cJSON_AddNumberToObject(o, "peers_alive", (double)v->num_peers);
    add_loss(o, "loss", dl_monitor_mean_loss(s));
    cJSON *peers = cJSON_AddArrayToObject(o, "peers");
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "peer_id", p->peer_id);
        cJSON_AddStringToObject(e, "address", p->address);
        cJSON_AddNumberToObject(e, "epoch", (double)p->epoch);
        cJSON_AddNumberToObject(e, "samples_accumulated", p->samples_accumulated);
        cJSON_AddNumberToObject(e, "samples_per_second", p->samples_per_second);
        cJSON_AddBoolToObject(e, "client_mode", p->client_mode);
        if (p->has_param_hash) {
            char hex[65];
            dl_collab_hash_hex(p->param_hash, hex);
            cJSON_AddStringToObject(e, "param_hash", hex);
        } else {
            cJSON_AddNullToObject(e, "param_hash");
        }
        double seen = now - p->time;
        cJSON_AddNumberToObject(e, "last_seen_s", seen > 0 ? seen : 0);
        const struct dl_metrics *m = dl_monitor_find_metrics(s, p->peer_id);
        if (m) cJSON_AddItemToObject(e, "metrics", metrics_json(m));
        else cJSON_AddNullToObject(e, "metrics");
        cJSON_AddItemToArray(peers, e);
    }
    /* Every contributor the monitor has heard of, alive or gone. */
    struct contributor *order = dl_calloc(s->num_metrics + 1, sizeof *order);
    size_t ranked = order ? s->num_metrics : 0;
    for (size_t i = 0; i < ranked; i++) order[i] = (struct contributor){&s->metrics[i], dl_monitor_contributed(s, i)};
    if (ranked) qsort(order, ranked, sizeof order[0], by_samples);
    cJSON *board = cJSON_AddArrayToObject(o, "leaderboard");
    for (size_t i = 0; i < ranked; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "peer_id", order[i].m->peer_id);
        cJSON_AddStringToObject(e, "name", order[i].m->name);
        cJSON_AddStringToObject(e, "device", order[i].m->device);
        cJSON_AddNumberToObject(e, "samples_total", order[i].samples);
        cJSON_AddItemToArray(board, e);
    }
    free(order);
    cJSON *h = cJSON_AddObjectToObject(o, "history");
    cJSON_AddNumberToObject(h, "points", (double)s->history.count);
    cJSON_AddNumberToObject(h, "max_points", (double)s->history.max);
    cJSON_AddNumberToObject(h, "file_lines", (double)s->history.file_lines);
    cJSON_AddNumberToObject(h, "rewrites", (double)s->history.compactions);
    add_snapshots(o, &s->snap);
    return o;
}

static cJSON *history_json(struct dl_monitor_state *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON *points = cJSON_AddArrayToObject(o, "points");
    for (size_t i = 0; i < s->history.count; i++) {
        const struct dl_monitor_point *p = &s->history.points[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "time", p->time);
        cJSON_AddNumberToObject(e, "step", p->step);
        add_loss(e, "loss", p->loss);
        cJSON_AddNumberToObject(e, "samples_per_second", p->samples_per_second);
        cJSON_AddNumberToObject(e, "peers_alive", p->peers_alive);
        cJSON_AddItemToArray(points, e);
    }
    return o;
}

static void prom_metric(struct evbuffer *b, const char *name, const char *type, const char *help) {
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prometheus text exposition format 0.0.4. Peer ids are hex and metric
 * strings are printable ASCII without quotes or backslashes (checked when
 * the record is verified), so labels need no escaping. */
static void prometheus_text(struct dl_monitor_state *s, struct evbuffer *b) {
    const struct dl_swarm_view *v = &s->view;
    prom_metric(b, "dedloc_step", "gauge", "Global step (epoch) of the collaboration.");
    evbuffer_add_printf(b, "dedloc_step %llu\n", (unsigned long long)v->global_epoch);
    double loss = dl_monitor_mean_loss(s);
    prom_metric(b, "dedloc_loss", "gauge", "Mean of the alive peers' last training losses.");
    if (loss >= 0) evbuffer_add_printf(b, "dedloc_loss %.9g\n", loss);
    else evbuffer_add_printf(b, "dedloc_loss NaN\n");
    prom_metric(b, "dedloc_peers_alive", "gauge", "Peers with a live progress record.");
    evbuffer_add_printf(b, "dedloc_peers_alive %zu\n", v->num_peers);
    struct dl_monitor_header hd;
    dl_monitor_header(s, dl_wall_time(), &hd);
    prom_metric(b, "dedloc_samples_per_second", "gauge", "Collective training throughput.");
    evbuffer_add_printf(b, "dedloc_samples_per_second %.9g\n", hd.samples_per_second);
    prom_metric(b, "dedloc_collective_samples", "gauge", "Samples accumulated towards the next step.");
    evbuffer_add_printf(b, "dedloc_collective_samples %.9g\n", hd.collective_samples);
    prom_metric(b, "dedloc_round_seconds", "gauge", "Seconds between the last two global steps (0 = unknown).");
    evbuffer_add_printf(b, "dedloc_round_seconds %.9g\n", s->round_s);
    prom_metric(b, "dedloc_peer_samples_per_second", "gauge", "Throughput of one peer.");
    for (size_t i = 0; i < v->num_peers; i++)
        evbuffer_add_printf(b, "dedloc_peer_samples_per_second{peer=\"%s\"} %.9g\n", v->peers[i].peer_id,
                            v->peers[i].samples_per_second);
    prom_metric(b, "dedloc_peer_epoch", "gauge", "Epoch one peer trains on.");
    for (size_t i = 0; i < v->num_peers; i++)
        evbuffer_add_printf(b, "dedloc_peer_epoch{peer=\"%s\"} %llu\n", v->peers[i].peer_id,
                            (unsigned long long)v->peers[i].epoch);
    prom_metric(b, "dedloc_peer_samples_total", "counter", "Samples one peer contributed, over its restarts.");
    for (size_t i = 0; i < s->num_metrics; i++)
        evbuffer_add_printf(b, "dedloc_peer_samples_total{peer=\"%s\",name=\"%s\"} %.9g\n", s->metrics[i].peer_id,
                            s->metrics[i].name, dl_monitor_contributed(s, i));
    prom_metric(b, "dedloc_peer_loss", "gauge", "Last training loss one peer reported.");
    for (size_t i = 0; i < s->num_metrics; i++)
        if (s->metrics[i].loss >= 0)
            evbuffer_add_printf(b, "dedloc_peer_loss{peer=\"%s\"} %.9g\n", s->metrics[i].peer_id, s->metrics[i].loss);
}

static void send_static(struct evhttp_request *req, const char *name) {
    for (const struct dl_web_embedded *f = dl_web_embedded_table; f->name; f++) {
        if (strcmp(f->name, name)) continue;
        size_t n = strlen(name);
        bool js = n > 3 && !strcmp(name + n - 3, ".js");
        send_body(req, 200, "OK", js ? "text/javascript; charset=utf-8" : "text/html; charset=utf-8", f->data,
                  f->size);
        return;
    }
    evhttp_send_error(req, 500, "page missing from the binary");
}

static void handle(struct evhttp_request *req, void *arg) {
    struct dl_monitor_state *s = arg;
    dl_monitor_conns_note_request(s->conns, req);
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (!path) path = "/";
    if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
        send_static(req, "index.html");
        return;
    }
    if (!strcmp(path, "/chart.min.js")) {
        send_static(req, "chart.min.js");
        return;
    }
    if (!strcmp(path, "/api/status") || !strcmp(path, "/api/history")) {
        pthread_mutex_lock(&s->lock);
        cJSON *o = path[5] == 's' ? status_json(s) : history_json(s);
        pthread_mutex_unlock(&s->lock);
        send_json(req, o);
        return;
    }
    if (!strcmp(path, "/metrics")) {
        struct evbuffer *b = evbuffer_new();
        if (!b) {
            evhttp_send_error(req, 500, "out of memory");
            return;
        }
        pthread_mutex_lock(&s->lock);
        prometheus_text(s, b);
        pthread_mutex_unlock(&s->lock);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
        return;
    }
    evhttp_send_error(req, 404, "no such page (try /, /api/status, /api/history, /metrics)");
}

struct evhttp *dl_monitor_http_start(struct event_base *base, const char *host, int port, struct dl_monitor_state *s,
                                     int *bound_port, struct dl_monitor_conns **conns) {
    *conns = NULL;
    struct evhttp *http = evhttp_new(base);
    if (!http) {
        dl_fail("cannot create the HTTP server (libevent evhttp_new failed)");
        return NULL;
    }
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    /* A client idle for 10 s is dropped (evhttp's timeout starts again
     * with every byte: the deadline of the connection budget is what
     * bounds a client that sends its head a byte at a time). */
    evhttp_set_timeout(http, 10);
    evhttp_set_max_headers_size(http, 8 * 1024);
    evhttp_set_max_body_size(http, 0);
    evhttp_set_gencb(http, handle, s);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, host, (ev_uint16_t)port);
    if (!sock) {
        dl_fail("cannot listen for HTTP on %s port %d: %s (is the port in use?)", host, port, strerror(errno));
        evhttp_free(http);
        return NULL;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl)) {
        dl_fail("getsockname: %s", strerror(errno));
        evhttp_free(http);
        return NULL;
    }
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    const struct dl_monitor_http_limits limits = {DL_MONITOR_HTTP_MAX_CONNECTIONS, DL_MONITOR_HTTP_MAX_PER_ADDRESS,
                                                  DL_MONITOR_HTTP_HEADER_DEADLINE_S};
    *conns = dl_monitor_conns_attach(base, http, sock, &limits);
    if (!*conns) {
        evhttp_free(http);
        return NULL;
    }
    return http;
}
