/* dedloc monitor: joins a collaboration as an observer (it trains nothing,
 * in client mode so it never votes on the global step), pulls every peer's
 * signed metrics record, keeps a history and serves it all over HTTP
 * (monitor_http.c). */
#include <event2/event.h>
#include <event2/http.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/export_hf.h"
#include "cli/monitor.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc monitor --run-id ID --initial-peers LIST [options]\n\n"
            "Joins the collaboration ID as an observer (trains nothing) and serves its state\n"
            "over HTTP: / (a page with live charts, the peers and the contributors; works\n"
            "offline), /api/status and /api/history (JSON, docs/monitor.md), /metrics\n"
            "(Prometheus text). Prints one JSON line once serving: http (the address),\n"
            "http_port, peer_id. Ctrl-C leaves cleanly.\n\n"
            "  --run-id ID              collaboration to watch (required)\n"
            "  --initial-peers LIST     host:port,host:port of peers to join through\n"
            "  --listen-http ADDR:PORT  HTTP address (default 127.0.0.1:8080; port 0 = any)\n"
            "  --history FILE           JSON-lines history, appended and reloaded on restart\n"
            "                           (default dedloc-monitor-history.jsonl)\n"
            "  --history-points N       points kept in memory, older ones downsampled (default 2048)\n"
            "  --sample-every S         seconds between history points (default 5)\n"
            "  --target-batch N         samples per global step, for the ETA (default 4096)\n"
            "  --expiry S               drop peers not heard from for S seconds (default 60)\n"
            "  --identity FILE          ed25519 identity, created with mode 0600 if absent\n"
            "  --manifest FILE          the run manifest (dedloc run init): run id, key and target batch\n"
            "                           from it; peers of a manifest run admit only its holders\n"
            "  --no-dht                 no DHT discovery (initial peers only)\n"
            "  --duration S             leave after S seconds (default: run until Ctrl-C)\n\n"
            "Keeping the run (the state is downloaded and verified as a newcomer does, on a\n"
            "thread of its own; HTTP goes on meanwhile):\n"
            "  --checkpoint-dir DIR     every --checkpoint-every global steps, a checkpoint of the\n"
            "                           swarm's state (checkpoint-<step>.safetensors, written\n"
            "                           atomically) that 'dedloc train --resume FILE' continues\n"
            "  --checkpoint-every N     global steps between checkpoints (100)\n"
            "  --keep N                 newest checkpoints kept (3; 0 keeps them all)\n"
            "  --export-dir DIR         every --export-every global steps, a Hugging Face folder of\n"
            "                           the weights (as 'dedloc export' writes it), replaced each time\n"
            "  --export-every N         global steps between exports (100)\n"
            "  --model M                the run's model: tiny (default), sahajbert or a config.json\n"
            "  --max-steps S            the run's --max-steps, if given to its trainers: the\n"
            "                           checkpoints' learning-rate schedule (tiny: over S steps)\n"
            "  --tokenizer FILE         tokenizer.json of the exports (default: the built-in one)\n");
}

const struct dl_metrics *monitor_find_metrics(const struct monitor_state *s, const char *peer_id) {
    for (size_t i = 0; i < s->num_metrics; i++)
        if (!strcmp(s->metrics[i].peer_id, peer_id)) return &s->metrics[i];
    return NULL;
}

double monitor_mean_loss(const struct monitor_state *s) {
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < s->view.num_peers; i++) {
        const struct dl_metrics *m = monitor_find_metrics(s, s->view.peers[i].peer_id);
        if (m && m->loss >= 0) {
            sum += m->loss;
            n++;
        }
    }
    return n ? sum / (double)n : -1;
}

/* Runs on the network thread with a verified record (or a failure). */
static void on_metrics(void *user, const char *peer_id, int status, const struct dl_metrics *m) {
    struct monitor_state *s = user;
    if (status != DL_NET_OK || !m) return;
    pthread_mutex_lock(&s->lock);
    struct dl_metrics *slot = (struct dl_metrics *)monitor_find_metrics(s, peer_id);
    if (!slot && s->num_metrics < MONITOR_MAX_METRICS) slot = &s->metrics[s->num_metrics++];
    /* Keep the newest only: a late answer must not roll a peer back. */
    if (slot && (slot->peer_id[0] == 0 || m->time >= slot->time)) *slot = *m;
    pthread_mutex_unlock(&s->lock);
}

struct monitor_loop {
    struct monitor_state *state;
    dl_net *net;
    struct event_base *base;
    double sample_every, next_sample, end, last_epoch_change;
    uint64_t last_epoch;
};

/* Once a second: a fresh view, a metrics request to each peer, maybe a
 * history point. */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    struct monitor_loop *l = arg;
    struct monitor_state *s = l->state;
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
    for (size_t i = 0; i < v.num_peers; i++)
        if (!dl_net_fetch_metrics(l->net, v.peers[i].peer_id, 2.0, on_metrics, s))
            DL_DEBUG("monitor", "metrics of %s: %s", v.peers[i].peer_id, dl_error());
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
        struct monitor_point p = {s->view_time, (double)v.global_epoch, monitor_mean_loss(s), v.samples_per_second,
                                  (double)v.num_peers};
        if (monitor_history_add(&s->history, &p)) DL_WARN("monitor", "%s", dl_error());
    }
    pthread_mutex_unlock(&s->lock);
    monitor_snapshots_tick(s, epoch);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg) { event_base_loopbreak(arg); }

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

static int parse_whole(const char *s, double lo, double hi, double *out) {
    return parse_double(s, lo, hi, out) || *out != (double)(int64_t)*out ? -1 : 0;
}

/* "host:port" into its parts (a numeric host; [v6] allowed). */
static int split_host_port(const char *s, char *host, size_t cap, int *port) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return -1;
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (s[0] == '[' && colon[-1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0 || n >= cap) return -1;
    memcpy(host, h, n);
    host[n] = 0;
    double p;
    if (parse_double(colon + 1, 0, 65535, &p)) return -1;
    *port = (int)p;
    return 0;
}

static int serve(struct monitor_state *state, dl_net *net, const char *http_host, int http_port, double sample_every,
                 double duration) {
    struct monitor_loop loop = {state, net, event_base_new(), sample_every, 0, 0, 0, 0};
    if (!loop.base) {
        fprintf(stderr, "dedloc monitor: cannot create an event loop (libevent event_base_new failed)\n");
        return DL_EXIT_FAILURE;
    }
    loop.end = duration >= 0 ? dl_now() + duration : 0;
    int bound = 0, rc = DL_EXIT_FAILURE;
    struct evhttp *http = monitor_http_start(loop.base, http_host, http_port, state, &bound);
    struct event *tick = event_new(loop.base, -1, EV_PERSIST, on_tick, &loop);
    struct event *sigint = evsignal_new(loop.base, SIGINT, on_stop_signal, loop.base);
    struct event *sigterm = evsignal_new(loop.base, SIGTERM, on_stop_signal, loop.base);
    struct timeval second = {1, 0};
    if (!http) {
        fprintf(stderr, "dedloc monitor: %s\n", dl_error());
    } else if (!tick || !sigint || !sigterm || event_add(tick, &second) || event_add(sigint, NULL) ||
               event_add(sigterm, NULL)) {
        fprintf(stderr, "dedloc monitor: cannot set up the event loop's timer and signals (libevent)\n");
    } else {
        on_tick(-1, 0, &loop);
        printf("{\"http\":\"http://%s%s%s:%d/\",\"http_port\":%d,\"peer_id\":\"%s\"}\n", strchr(http_host, ':') ? "[" : "",
               http_host, strchr(http_host, ':') ? "]" : "", bound, bound, state->peer_id);
        fflush(stdout);
        rc = event_base_dispatch(loop.base) < 0 ? DL_EXIT_FAILURE : DL_EXIT_OK;
    }
    if (sigterm) event_free(sigterm);
    if (sigint) event_free(sigint);
    if (tick) event_free(tick);
    if (http) evhttp_free(http);
    event_base_free(loop.base);
    return rc;
}

int cmd_monitor(int argc, char **argv) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    /* An observer: dials out only, never counted as a voter. */
    cfg.listen = "";
    cfg.client_mode = true;
    const char *listen_http = "127.0.0.1:8080", *history_path = "dedloc-monitor-history.jsonl";
    double sample_every = 5, duration = -1, points = 2048;
    double ck_every = 100, export_every = 100, keep = 3, max_steps = 0, state_hold_s = 0;
    bool target_given = false;
    const char *ck_dir = NULL, *export_dir = NULL, *model = "tiny", *tokenizer = NULL;
    enum { O_RUN = 256, O_INITIAL, O_HTTP, O_HISTORY, O_POINTS, O_SAMPLE, O_TARGET, O_EXPIRY, O_IDENTITY, O_NODHT,
           O_DURATION, O_CKDIR, O_CKEVERY, O_KEEP, O_EXDIR, O_EXEVERY, O_MODEL, O_STEPS, O_TOKENIZER, O_MANIFEST,
           O_TEST_HOLD };
    static const struct option opts[] = {
        {"run-id", required_argument, NULL, O_RUN}, {"initial-peers", required_argument, NULL, O_INITIAL},
        {"listen-http", required_argument, NULL, O_HTTP}, {"history", required_argument, NULL, O_HISTORY},
        {"history-points", required_argument, NULL, O_POINTS}, {"sample-every", required_argument, NULL, O_SAMPLE},
        {"target-batch", required_argument, NULL, O_TARGET}, {"expiry", required_argument, NULL, O_EXPIRY},
        {"identity", required_argument, NULL, O_IDENTITY}, {"no-dht", no_argument, NULL, O_NODHT},
        {"duration", required_argument, NULL, O_DURATION}, {"checkpoint-dir", required_argument, NULL, O_CKDIR},
        {"checkpoint-every", required_argument, NULL, O_CKEVERY}, {"keep", required_argument, NULL, O_KEEP},
        {"export-dir", required_argument, NULL, O_EXDIR}, {"export-every", required_argument, NULL, O_EXEVERY},
        {"model", required_argument, NULL, O_MODEL}, {"max-steps", required_argument, NULL, O_STEPS},
        {"tokenizer", required_argument, NULL, O_TOKENIZER}, {"manifest", required_argument, NULL, O_MANIFEST},
#ifdef DEDLOC_TEST_HOOKS
        {"test-hold-download", required_argument, NULL, O_TEST_HOLD},
#endif
        {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    const char *manifest_path = "";
    bool with_manifest = false; /* a flag, not a NULL test of optarg: analyzers then take optarg for NULL */
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_RUN: cfg.run_id = optarg; break;
        case O_INITIAL: cfg.initial_peers = optarg; break;
        case O_HTTP: listen_http = optarg; break;
        case O_HISTORY: history_path = optarg; break;
        case O_POINTS: bad = parse_double(optarg, 16, 1e6, &points); break;
        case O_SAMPLE: bad = parse_double(optarg, 0.1, 86400, &sample_every); break;
        case O_TARGET:
            bad = parse_double(optarg, 1, 1e15, &cfg.target_batch);
            target_given = true;
            break;
        case O_EXPIRY: bad = parse_double(optarg, 0.5, 86400, &cfg.expiry_s); break;
        case O_IDENTITY: cfg.identity_path = optarg; break;
        case O_NODHT: cfg.use_dht = false; break;
        case O_DURATION: bad = parse_double(optarg, 0, 1e9, &duration); break;
        case O_CKDIR: ck_dir = optarg; break;
        case O_CKEVERY: bad = parse_whole(optarg, 1, 1e12, &ck_every); break;
        case O_KEEP: bad = parse_whole(optarg, 0, 1 << 20, &keep); break;
        case O_EXDIR: export_dir = optarg; break;
        case O_EXEVERY: bad = parse_whole(optarg, 1, 1e12, &export_every); break;
        case O_MODEL: model = optarg; break;
        case O_STEPS: bad = parse_whole(optarg, 1, 1e12, &max_steps); break;
        case O_TOKENIZER: tokenizer = optarg; break;
        case O_TEST_HOLD: bad = parse_double(optarg, 0, 60, &state_hold_s); break;
        case O_MANIFEST: manifest_path = optarg; with_manifest = true; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "dedloc monitor: bad value '%s' for --%s\n", optarg, opts[c - O_RUN].name);
            return DL_EXIT_USAGE;
        }
    }
    /* A run with a manifest admits only peers that present its hash. */
    struct dl_manifest manifest;
    memset(&manifest, 0, sizeof manifest);
    char run_key[DL_AUTHORITY_PK_HEX];
    if (with_manifest) {
        if (cfg.run_id) {
            fprintf(stderr, "dedloc monitor: --run-id comes from the manifest\n");
            return DL_EXIT_USAGE;
        }
        if (dl_manifest_load(manifest_path, &manifest)) {
            fprintf(stderr, "dedloc monitor: %s\n", dl_error());
            return DL_EXIT_USAGE;
        }
        cfg.run_id = manifest.run_id;
        cfg.manifest_hash = manifest.hash;
        cfg.target_batch = (double)manifest.target_batch;
        if (manifest.model_preset[0])
            model = manifest.model_preset; /* what the monitor's checkpoints and exports are of */
        if (manifest.max_steps > 0)
            max_steps = (double)manifest.max_steps;
        target_given = true;
        if (manifest.has_authority) {
            dl_authority_public_hex(manifest.authority, run_key);
            cfg.run_key = run_key;
        }
    }
    char http_host[64];
    int http_port = 0;
    if (optind < argc || !cfg.run_id) {
        fprintf(stderr, "dedloc monitor: %s\n", optind < argc ? "unexpected argument" : "--run-id is required");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    if (split_host_port(listen_http, http_host, sizeof http_host, &http_port)) {
        fprintf(stderr, "dedloc monitor: --listen-http wants ADDR:PORT with a numeric address, got '%s'\n", listen_http);
        return DL_EXIT_USAGE;
    }
    if (cfg.max_refresh_s > cfg.expiry_s / 4) cfg.max_refresh_s = cfg.expiry_s / 4;
    if (cfg.min_refresh_s > cfg.max_refresh_s) cfg.min_refresh_s = cfg.max_refresh_s;
    if (cfg.keepalive_s > cfg.expiry_s / 3) cfg.keepalive_s = cfg.expiry_s / 3;

    struct monitor_state *state = dl_calloc(1, sizeof *state);
    if (!state) {
        fprintf(stderr, "dedloc monitor: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    pthread_mutex_init(&state->lock, NULL);
    state->run_id = cfg.run_id;
    state->target_batch = cfg.target_batch;
    struct monitor_snapshots *snap = &state->snap;
    snap->checkpoint_dir = ck_dir;
    snap->checkpoint_every = (int64_t)ck_every;
    snap->keep = (int)keep;
    snap->export_dir = export_dir;
    snap->export_every = (int64_t)export_every;
    snap->tokenizer = tokenizer;
    snap->test_hold_s = state_hold_s;
    int rc = DL_EXIT_FAILURE;
    dl_net *net = NULL;
    /* The folders are checked now, not at the first checkpoint hours later. */
    bool snapshots = ck_dir || export_dir;
    if ((snapshots && (monitor_snapshots_init(snap, model, (int64_t)max_steps, target_given ? cfg.target_batch : 0) ||
                       dl_trainer_check_outputs(ck_dir, NULL) || (export_dir && cli_export_check_out(export_dir)))) ||
        monitor_history_open(&state->history, history_path, (size_t)points) || dl_net_start(&cfg, &net)) {
        fprintf(stderr, "dedloc monitor: %s\n", dl_error());
    } else {
        snprintf(state->peer_id, sizeof state->peer_id, "%s", dl_net_peer_id(net));
        snap->net = net;
        signal(SIGPIPE, SIG_IGN);
        rc = serve(state, net, http_host, http_port, sample_every, duration);
    }
    /* A state download uses net: it ends first. The network thread may
     * still be in on_metrics: stop it before freeing what it writes. */
    monitor_snapshots_stop(state);
    dl_net_stop(net);
    dl_swarm_view_free(&state->view);
    monitor_history_close(&state->history);
    pthread_mutex_destroy(&state->lock);
    free(state);
    dl_manifest_free(&manifest);
    return rc;
}
