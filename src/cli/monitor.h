/* dedloc monitor: an observer of a collaboration that serves its state over
 * HTTP. Shared between the command (cmd_monitor.c: the swarm side), the
 * history (monitor_history.c) and the HTTP side (monitor_http.c). */
#ifndef DEDLOC_CLI_MONITOR_H
#define DEDLOC_CLI_MONITOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "dedloc/net.h"

/* One sample of the run over time (a line of the history file). */
struct monitor_point {
    double time;                /* Unix seconds */
    double step;
    double loss;                /* mean of the peers' last losses; -1 = none */
    double samples_per_second;  /* collective */
    double peers_alive;
};

/* History in memory: at most `max` points; when full, every other point goes
 * and the rest stand for twice the time each, so a long run keeps its whole
 * shape at a coarser grain. The file keeps every point. */
struct monitor_history {
    struct monitor_point *points;
    size_t count, max;
    FILE *file;                 /* JSON lines, appended; NULL = memory only */
};

/* Opens (creating) path and loads the points it holds; malformed lines are
 * skipped with a warning. path NULL: memory only. */
int monitor_history_open(struct monitor_history *h, const char *path, size_t max);
int monitor_history_add(struct monitor_history *h, const struct monitor_point *p);
void monitor_history_close(struct monitor_history *h);

/* What the monitor knows about one peer. */
struct monitor_peer {
    struct dl_swarm_peer view;
    bool has_metrics;
    struct dl_metrics metrics;
};

#define MONITOR_MAX_METRICS 1024

/* Everything the HTTP side reads; lock guards it (the metrics callbacks run on
 * the network thread). */
struct monitor_state {
    pthread_mutex_t lock;
    const char *run_id;
    char peer_id[DL_PEER_ID_HEX];
    double target_batch;
    struct dl_swarm_view view;          /* latest, without us (an observer) */
    double view_time;                   /* wall clock of the view */
    struct dl_metrics metrics[MONITOR_MAX_METRICS]; /* latest verified record per peer */
    double metrics_seen[MONITOR_MAX_METRICS];       /* wall clock it arrived */
    size_t num_metrics;
    double round_s;                     /* seconds between the last two global steps; 0 = unknown */
    struct monitor_history history;
};

/* The latest metrics of peer_id, or NULL; lock held. */
const struct dl_metrics *monitor_find_metrics(const struct monitor_state *s, const char *peer_id);
/* Mean of the last losses of alive peers, -1 when none; lock held. */
double monitor_mean_loss(const struct monitor_state *s);

/* Serves /, /chart.min.js, /api/status, /api/history and /metrics on
 * host:port (0 = any; the chosen one in *bound_port) with base's loop. */
struct evhttp;
struct event_base;
struct evhttp *monitor_http_start(struct event_base *base, const char *host, int port, struct monitor_state *s,
                                  int *bound_port);

#endif
