/* The monitor's shared state (private to src/monitor): the loop and the swarm
 * side (monitor.c) write it, the HTTP side (monitor_http.c) reads it, the
 * snapshots (monitor_snapshot.c) download and write the swarm's state. */
#ifndef DEDLOC_MONITOR_INTERNAL_H
#define DEDLOC_MONITOR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "dedloc/collab.h"
#include "dedloc/model.h"
#include "dedloc/monitor.h"
#include "dedloc/net.h"
#include "dedloc/train.h"

/* Checkpoints and Hugging Face exports of the swarm's state
 * (monitor_snapshot.c): every N global steps a worker thread downloads the
 * state as a newcomer does and writes it, so the event loop keeps serving. */
struct dl_monitor_snapshots {
    /* Settings (fixed once the monitor runs). */
    const char *checkpoint_dir;         /* NULL: no checkpoints */
    int64_t checkpoint_every;
    int keep;                           /* checkpoints kept (<= 0: all) */
    const char *export_dir;             /* NULL: no exports */
    int64_t export_every;
    const char *tokenizer;              /* for the exports; NULL: the built-in demo tokenizer */
    struct dl_monitor_exporter exporter;
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

#define DL_MONITOR_MAX_METRICS 1024

struct dl_monitor_conns;

/* Everything the HTTP side reads; lock guards it (the metrics callbacks run on
 * the network thread). */
struct dl_monitor_state {
    pthread_mutex_t lock;
    const char *run_id;
    char peer_id[DL_PEER_ID_HEX];
    double target_batch;                /* given (--target-batch, --manifest), else the default */
    bool target_given;                  /* else the peers' announced target wins over the default */
    struct dl_swarm_view view;          /* latest, without us (an observer) */
    double view_time;                   /* wall clock of the view */
    struct dl_metrics metrics[DL_MONITOR_MAX_METRICS]; /* latest verified record per peer */
    double metrics_seen[DL_MONITOR_MAX_METRICS];       /* wall clock it arrived */
    double banked[DL_MONITOR_MAX_METRICS];             /* samples of that peer's earlier sessions */
    size_t num_metrics;
    double round_s;                     /* seconds between the last two global steps; 0 = unknown */
    struct dl_monitor_history history;
    struct dl_monitor_snapshots snap;
    struct dl_monitor_conns *conns;     /* the HTTP connection budget (event loop only) */
};

/* The latest metrics of peer_id, or NULL; lock held. */
const struct dl_metrics *dl_monitor_find_metrics(const struct dl_monitor_state *s, const char *peer_id);
/* Mean of the last losses of alive peers, -1 when none; lock held. */
double dl_monitor_mean_loss(const struct dl_monitor_state *s);

/* ---- the board and the header (monitor_board.c), lock held ---- */

/* Takes a verified record into the peer's slot (a new slot for a new peer
 * id, while there is room); an older record than the slot's is ignored; a
 * record of a restarted peer banks the samples of its previous session. */
void dl_monitor_board_note(struct dl_monitor_state *s, const struct dl_metrics *m);
/* Samples metrics[i]'s peer contributed over all its sessions seen. */
double dl_monitor_contributed(const struct dl_monitor_state *s, size_t i);

/* The run's header as the page shows it. */
struct dl_monitor_header {
    double target_batch;        /* given, else what most alive peers announce, else the default */
    const char *target_source;  /* "given", "peers" or "default" */
    double collective_samples;  /* towards the next step, extrapolated to now, at most the target */
    double samples_per_second;  /* over the alive peers, each as measured over its last step */
    double eta_s;               /* 0: the target is reached (a round is forming); -1: no rate */
};
void dl_monitor_header(const struct dl_monitor_state *s, double now_wall, struct dl_monitor_header *h);

/* Prepares the snapshots' model, layout and run settings (model: a preset or
 * a config.json; max_steps/target_batch <= 0: not given); m->opt is set by
 * the caller. */
int dl_monitor_snapshots_init(struct dl_monitor_snapshots *m, const char *model, int64_t max_steps,
                              double target_batch);
/* From the event loop, lock not held: starts a download when a checkpoint or
 * an export is due at global_epoch and none is under way. */
void dl_monitor_snapshots_tick(struct dl_monitor_state *s, uint64_t global_epoch);
/* Waits for a download under way; then frees everything. */
void dl_monitor_snapshots_stop(struct dl_monitor_state *s);

/* ---- the HTTP connection budget (monitor_conns.c) ---- */

struct evhttp;
struct evhttp_bound_socket;
struct evhttp_request;
struct event_base;

/* What the monitor's HTTP server holds at most (docs/monitor.md, "Limits");
 * 0 turns a limit off. */
struct dl_monitor_http_limits {
    size_t max_connections;   /* open at once, all clients together */
    size_t max_per_address;   /* open at once from one IP address */
    double header_deadline_s; /* from the accept, or the last request, to the next request's complete head */
};
#define DL_MONITOR_HTTP_MAX_CONNECTIONS 64
#define DL_MONITOR_HTTP_MAX_PER_ADDRESS 8
#define DL_MONITOR_HTTP_HEADER_DEADLINE_S 10.0

struct dl_monitor_conns_stats {
    size_t open;               /* connections held now (ours until the sweep after evhttp frees one) */
    size_t peak;               /* the most held at once */
    uint64_t accepted;         /* connections evhttp accepted */
    uint64_t closed_address;   /* the oldest of an address over its share, closed for a newer one */
    uint64_t refused_total;    /* closed at once: accepted past the total in one burst */
    uint64_t closed_slow;      /* closed at their deadline */
    uint64_t pauses;           /* times the listener stopped accepting at the total */
};

/* Puts http's connections (accepted on sock) under the limits; NULL on
 * failure (the error says why). Call before serving; free after evhttp_free. */
struct dl_monitor_conns *dl_monitor_conns_attach(struct event_base *base, struct evhttp *http,
                                                 struct evhttp_bound_socket *sock,
                                                 const struct dl_monitor_http_limits *limits);
/* From the request handler: the request's head arrived, its connection's
 * deadline starts again. c may be NULL. */
void dl_monitor_conns_note_request(struct dl_monitor_conns *c, struct evhttp_request *req);
void dl_monitor_conns_get_stats(const struct dl_monitor_conns *c, struct dl_monitor_conns_stats *out);
void dl_monitor_conns_free(struct dl_monitor_conns *c);

/* Serves /, /chart.min.js, /api/status, /api/history and /metrics on
 * host:port (0 = any; the chosen one in *bound_port) with base's loop,
 * under the default limits (*conns, to free after evhttp_free). */
struct evhttp *dl_monitor_http_start(struct event_base *base, const char *host, int port, struct dl_monitor_state *s,
                                     int *bound_port, struct dl_monitor_conns **conns);

#endif
