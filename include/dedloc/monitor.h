/* dedloc monitor: an observer of a collaboration. It joins the swarm in
 * client mode (it trains nothing and never votes on the global step), pulls
 * every peer's signed metrics record, keeps a bounded history of the run and
 * serves it all over HTTP: an embedded page with live charts, JSON for
 * scripts (/api/status, /api/history; docs/monitor.md) and Prometheus text
 * (/metrics). It may also keep the run: every N global steps it downloads
 * the swarm's state as a newcomer does and writes a checkpoint and/or a
 * Hugging Face export. */
#ifndef DEDLOC_MONITOR_H
#define DEDLOC_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dedloc/model.h"
#include "dedloc/net.h"
#include "dedloc/train.h"

/* ==== history ==== */

/* One sample of the run over time (a line of the history file). */
struct dl_monitor_point {
    double time;                /* Unix seconds */
    double step;
    double loss;                /* mean of the peers' last losses; -1 = none */
    double samples_per_second;  /* collective */
    double peers_alive;
};

/* The history file is rewritten from the points in memory once it holds
 * more than this many times the points kept in memory: disk stays bounded. */
#define DL_MONITOR_HISTORY_FILE_FACTOR 4

/* History in memory: at most `max` points; when full, every other point goes
 * (the oldest and the newest always stay) and from then on one point in twice
 * as many is kept, so a long run keeps its whole shape, evenly spaced, at a
 * coarser grain; the newest point is always there. The file is appended to,
 * and rewritten with the points in memory once it holds more than
 * DL_MONITOR_HISTORY_FILE_FACTOR * max lines. */
struct dl_monitor_history {
    struct dl_monitor_point *points;
    size_t count, max;
    size_t stride;              /* points of the run per point kept (doubles at each halving) */
    size_t tail_age;            /* points the newest slot has stood for */
    FILE *file;                 /* JSON lines, appended; NULL = memory only */
    char *path;                 /* the file's name (for its rewrite) */
    size_t file_lines;          /* lines the file holds now */
    size_t compactions;         /* rewrites so far (status, tests) */
};

/* Opens (creating) path and loads the points it holds, keeping at most max
 * (at least 16) in memory; malformed lines are skipped with a warning; a file over its
 * bound is rewritten at once. path NULL: memory only. 0, or -1 with
 * dl_fail() (the history is then closed). */
int dl_monitor_history_open(struct dl_monitor_history *h, const char *path, size_t max);
/* Adds a point (and its line); rewrites the file when it is over its bound.
 * 0, or -1 with dl_fail() (the point is kept in memory all the same). */
int dl_monitor_history_add(struct dl_monitor_history *h, const struct dl_monitor_point *p);
/* Closes the file and frees the points; h may be zeroed or closed already. */
void dl_monitor_history_close(struct dl_monitor_history *h);

/* The folder (created) where a monitor of run_id keeps its files unless told
 * otherwise: $XDG_STATE_HOME/dedloc/monitor/RUN (else
 * ~/.local/state/dedloc/monitor/RUN), RUN being the run id with anything
 * but letters, digits, '.', '-' and '_' replaced, plus a hash of the run id
 * when it was. 0, or -1 with dl_fail(). */
int dl_monitor_state_dir(const char *run_id, char *out, size_t size);

/* ==== the monitor ==== */

/* How the monitor writes a Hugging Face export of the swarm's state. The
 * writer belongs to the command line (`dedloc export` uses the same), so the
 * caller lends it; both return 0, or -1 with dl_fail(). */
struct dl_monitor_exporter {
    /* 0 when out may take an export (absent, or an earlier export). */
    int (*check_out)(const char *out);
    /* Writes the folder out from fp32 weights of the model cfg; tokenizer:
     * a tokenizer.json path or NULL (then the one named in run_json, else a
     * built-in one); tok_name gets which one was written. */
    int (*write)(const char *out, const dl_albert_config *cfg, const float *params, const char *tokenizer,
                 const char *run_json, char *tok_name, size_t tok_name_size);
};

struct dl_monitor_config {
    /* The swarm: run id (required), peers, identity, expiry, target batch
     * (for the ETA), admission. The monitor adds what makes it an observer:
     * it does not listen, it runs in client mode, and its refresh and
     * keepalive periods are bounded by the expiry. */
    struct dl_net_config net;
    /* HTTP: a numeric address and a port (0 = any). */
    const char *http_host;
    int http_port;
    /* History: its JSON-lines file (NULL: memory only), the points kept in
     * memory and the seconds between two points. */
    const char *history_path;
    size_t history_points;
    double sample_every_s;
    double duration_s;                  /* dl_monitor_run returns after this long; < 0 = until a signal */
    /* Keeping the run. Neither folder given: nothing is downloaded. */
    const char *checkpoint_dir;         /* NULL: no checkpoints */
    int64_t checkpoint_every;           /* global steps between checkpoints */
    int keep;                           /* checkpoints kept (<= 0: all) */
    const char *export_dir;             /* NULL: no exports */
    int64_t export_every;               /* global steps between exports */
    const char *model;                  /* the run's model: a preset name or a config.json */
    int64_t max_steps;                  /* the run's --max-steps as given to its trainers; <= 0: not given */
    double run_target_batch;            /* the run's target batch as given to its trainers; <= 0: not given */
    const char *tokenizer;              /* tokenizer.json of the exports; NULL: the built-in demo tokenizer */
    dl_opt_config checkpoint_opt;       /* optimizer settings stored in the checkpoints */
    struct dl_monitor_exporter exporter; /* needed when export_dir is given */
    double test_hold_s;                 /* test builds: a download waits this long before writing */
};

typedef struct dl_monitor dl_monitor;

/* Checks the model and the output folders (now, not at the first checkpoint
 * hours later), opens the history, joins the swarm, binds HTTP, sets up the
 * event loop and takes the first look at the swarm: once it returns 0 the
 * monitor serves as soon as dl_monitor_run runs. -1 with dl_fail() otherwise
 * (*out is then NULL and everything is released). */
int dl_monitor_open(const struct dl_monitor_config *cfg, dl_monitor **out);
/* The HTTP port bound (the chosen one when the config said 0). */
int dl_monitor_http_port(const dl_monitor *m);
/* The monitor's own peer id (hex). */
const char *dl_monitor_peer_id(const dl_monitor *m);
/* Runs the event loop on the calling thread: once a second a fresh view of
 * the swarm, a metrics request to each peer and, every sample_every_s, a
 * history point; HTTP requests in between. Returns 0 when the duration is
 * over or on SIGINT or SIGTERM (handled by the loop while it runs), -1 with
 * dl_fail() when the loop fails. */
int dl_monitor_run(dl_monitor *m);
/* Waits for a state download under way, leaves the swarm, closes the history
 * and frees m (NULL is allowed). */
void dl_monitor_close(dl_monitor *m);

#endif
