/* dedloc monitor: an observer of a collaboration that serves its state over
 * HTTP. Shared between the command (cmd_monitor.c: the swarm side), the
 * history (monitor_history.c) and the HTTP side (monitor_http.c). */
#ifndef DEDLOC_CLI_MONITOR_H
#define DEDLOC_CLI_MONITOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "dedloc/collab.h"
#include "dedloc/model.h"
#include "dedloc/net.h"
#include "dedloc/train.h"

/* One sample of the run over time (a line of the history file). */
struct monitor_point {
    double time;                /* Unix seconds */
    double step;
    double loss;                /* mean of the peers' last losses; -1 = none */
    double samples_per_second;  /* collective */
    double peers_alive;
};

/* History in memory: at most `max` points; when full, every other point goes
 * (the oldest and the newest always stay) and from then on one point in twice
 * as many is kept, so a long run keeps its whole shape, evenly spaced, at a
 * coarser grain; the newest point is always there. The file
 * is appended to, and rewritten with the points in memory once it holds more
 * than MONITOR_HISTORY_FILE_FACTOR * max lines: disk stays bounded too. */
#define MONITOR_HISTORY_FILE_FACTOR 4
struct monitor_history {
    struct monitor_point *points;
    size_t count, max;
    size_t stride;              /* points of the run per point kept (doubles at each halving) */
    size_t tail_age;            /* points the newest slot has stood for */
    FILE *file;                 /* JSON lines, appended; NULL = memory only */
    char *path;                 /* the file's name (for its rewrite) */
    size_t file_lines;          /* lines the file holds now */
    size_t compactions;         /* rewrites so far (status, tests) */
};

/* Opens (creating) path and loads the points it holds; malformed lines are
 * skipped with a warning. path NULL: memory only. */
int monitor_history_open(struct monitor_history *h, const char *path, size_t max);
/* Adds a point (and its line); rewrites the file when it is over its bound. */
int monitor_history_add(struct monitor_history *h, const struct monitor_point *p);
void monitor_history_close(struct monitor_history *h);

/* Checkpoints and Hugging Face exports of the swarm's state
 * (monitor_snapshot.c): every N global steps a worker thread downloads the
 * state as a newcomer does and writes it, so the event loop keeps serving. */
struct monitor_snapshots {
    /* Settings (fixed once the monitor runs). */
    const char *checkpoint_dir;         /* NULL: no checkpoints */
    int64_t checkpoint_every;
    int keep;                           /* checkpoints kept (<= 0: all) */
    const char *export_dir;             /* NULL: no exports */
    int64_t export_every;
    const char *tokenizer;              /* for the exports; NULL: the built-in demo tokenizer */
    double fetch_timeout_s;
    double test_hold_s;                 /* test builds: the worker waits this long before writing */
    dl_albert_config model;
    dl_train_layout layout;
    dl_param_layout model_layout;
    dl_opt_config opt;                  /* stored in the checkpoints */
    char *config_json, *run_json;
    dl_net *net;
    /* The worker (its flags under the state's lock). */
    pthread_t thread;
    bool started, finished;
    double retry_at;                    /* dl_now(): no new fetch before */
    /* Results, under the state's lock; read by /api/status. */
    uint64_t checkpoint_epoch, export_epoch; /* last written (0: none) */
    double checkpoint_time, export_time;     /* wall clock */
    char checkpoint_path[4096];
    char param_hash[65];                /* of the last state written */
    uint64_t fetches, failures;
    char last_error[256];
};

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
    struct monitor_snapshots snap;
};

/* The latest metrics of peer_id, or NULL; lock held. */
const struct dl_metrics *monitor_find_metrics(const struct monitor_state *s, const char *peer_id);
/* Mean of the last losses of alive peers, -1 when none; lock held. */
double monitor_mean_loss(const struct monitor_state *s);

/* Prepares the snapshots' model, layout and run settings (model: a preset or
 * a config.json; max_steps/target_batch <= 0: not given). */
int monitor_snapshots_init(struct monitor_snapshots *m, const char *model, int64_t max_steps, double target_batch);
/* From the event loop, lock not held: starts a download when a checkpoint or
 * an export is due at global_epoch and none is under way. */
void monitor_snapshots_tick(struct monitor_state *s, uint64_t global_epoch);
/* Waits for a download under way; then frees everything. */
void monitor_snapshots_stop(struct monitor_state *s);

/* Serves /, /chart.min.js, /api/status, /api/history and /metrics on
 * host:port (0 = any; the chosen one in *bound_port) with base's loop. */
struct evhttp;
struct event_base;
struct evhttp *monitor_http_start(struct event_base *base, const char *host, int port, struct monitor_state *s,
                                  int *bound_port);

#endif
