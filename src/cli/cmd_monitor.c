/* dedloc monitor: the options of the observer of a collaboration; the
 * monitor itself (the swarm side, the history, HTTP, the snapshots) is the
 * library's monitor module (include/dedloc/monitor.h). */
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/export_hf.h"
#include "cli/opt_table.h"
#include "cli/swarm_args.h"
#include "dedloc/collab.h"
#include "dedloc/monitor.h"
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
            "                           (default: history.jsonl in a folder of the run id,\n"
            "                           $XDG_STATE_HOME/dedloc/monitor/RUN or ~/.local/state/...)\n"
            "  --history-points N       points kept in memory, older ones downsampled (default 2048)\n"
            "  --sample-every S         seconds between history points (default 5)\n"
            "  --target-batch N         samples per global step, for the ETA (default 4096)\n"
            "  --expiry S               drop peers not heard from for S seconds (default 60)\n"
            "  --identity FILE          ed25519 identity, created with mode 0600 if absent\n"
            "  --manifest FILE          the run manifest (dedloc run init): run id, key and target batch\n"
            "                           from it; peers of a manifest run admit only its holders\n"
            "  --token FILE             our admission token, for a run with an authority (dedloc\n"
            "                           authority issue --role monitor)\n"
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
    if (cli_parse_double(colon + 1, 0, 65535, &p)) return -1;
    *port = (int)p;
    return 0;
}

/* The command's settings, as the options leave them. */
struct monitor_args {
    struct dl_net_config net;
    const char *listen_http, *history_path;
    double sample_every, duration, points;
    double ck_every, export_every, keep, max_steps, state_hold_s;
    bool target_given;
    const char *ck_dir, *export_dir, *model, *tokenizer;
    const char *manifest_path;
    bool with_manifest; /* a flag, not a NULL test of the path: analyzers then take optarg for NULL */
};

static int set_target(void *settings, const char *arg) {
    struct monitor_args *m = settings;
    m->target_given = true;
    return cli_parse_double(arg, 1, 1e15, &m->net.target_batch);
}

static int set_manifest(void *settings, const char *arg) {
    struct monitor_args *m = settings;
    m->manifest_path = arg;
    m->with_manifest = true;
    return 0;
}

#define M_FIELD(f) offsetof(struct monitor_args, f)
enum { O_HELP = 'h', O_FIRST = 256 };
/* In the order getopt_long lists the candidates of an ambiguous prefix. */
static const struct cli_opt monitor_opts[] = {
    {"run-id", O_FIRST + 0, CLI_OPT_STRING, M_FIELD(net.run_id), 0, 0, NULL},
    {"initial-peers", O_FIRST + 1, CLI_OPT_STRING, M_FIELD(net.initial_peers), 0, 0, NULL},
    {"listen-http", O_FIRST + 2, CLI_OPT_STRING, M_FIELD(listen_http), 0, 0, NULL},
    {"history", O_FIRST + 3, CLI_OPT_STRING, M_FIELD(history_path), 0, 0, NULL},
    {"history-points", O_FIRST + 4, CLI_OPT_DOUBLE, M_FIELD(points), 16, 1e6, NULL},
    {"sample-every", O_FIRST + 5, CLI_OPT_DOUBLE, M_FIELD(sample_every), 0.1, 86400, NULL},
    {"target-batch", O_FIRST + 6, CLI_OPT_SETTER, 0, 0, 0, set_target},
    {"expiry", O_FIRST + 7, CLI_OPT_DOUBLE, M_FIELD(net.expiry_s), 0.5, 86400, NULL},
    {"identity", O_FIRST + 8, CLI_OPT_STRING, M_FIELD(net.identity_path), 0, 0, NULL},
    {"no-dht", O_FIRST + 9, CLI_OPT_UNSET, M_FIELD(net.use_dht), 0, 0, NULL},
    {"duration", O_FIRST + 10, CLI_OPT_DOUBLE, M_FIELD(duration), 0, 1e9, NULL},
    {"checkpoint-dir", O_FIRST + 11, CLI_OPT_STRING, M_FIELD(ck_dir), 0, 0, NULL},
    {"checkpoint-every", O_FIRST + 12, CLI_OPT_WHOLE, M_FIELD(ck_every), 1, 1e12, NULL},
    {"keep", O_FIRST + 13, CLI_OPT_WHOLE, M_FIELD(keep), 0, 1 << 20, NULL},
    {"export-dir", O_FIRST + 14, CLI_OPT_STRING, M_FIELD(export_dir), 0, 0, NULL},
    {"export-every", O_FIRST + 15, CLI_OPT_WHOLE, M_FIELD(export_every), 1, 1e12, NULL},
    {"model", O_FIRST + 16, CLI_OPT_STRING, M_FIELD(model), 0, 0, NULL},
    {"max-steps", O_FIRST + 17, CLI_OPT_WHOLE, M_FIELD(max_steps), 1, 1e12, NULL},
    {"tokenizer", O_FIRST + 18, CLI_OPT_STRING, M_FIELD(tokenizer), 0, 0, NULL},
    {"manifest", O_FIRST + 19, CLI_OPT_SETTER, 0, 0, 0, set_manifest},
    {"token", O_FIRST + 21, CLI_OPT_STRING, M_FIELD(net.token_path), 0, 0, NULL},
#ifdef DEDLOC_TEST_HOOKS
    {"test-hold-download", O_FIRST + 20, CLI_OPT_DOUBLE, M_FIELD(state_hold_s), 0, 60, NULL},
#endif
    {"help", O_HELP, CLI_OPT_OTHER, 0, 0, 0, NULL},
};
enum { N_MONITOR_OPTS = sizeof monitor_opts / sizeof monitor_opts[0] };

/* 0 parsed, 1 help printed, -1 usage error (said). */
static int parse_args(int argc, char **argv, struct monitor_args *m) {
    memset(m, 0, sizeof *m);
    dl_net_config_default(&m->net);
    m->listen_http = "127.0.0.1:8080";
    m->history_path = NULL; /* a file of the run id's own (cmd_monitor) */
    m->sample_every = 5;
    m->duration = -1;
    m->points = 2048;
    m->ck_every = m->export_every = 100;
    m->keep = 3;
    m->model = "tiny";
    m->manifest_path = "";
    return cli_opt_parse(monitor_opts, N_MONITOR_OPTS, O_HELP, argc, argv, m, "monitor", help);
}

/* --manifest: the run id, key and target batch come from it, and the model
 * and steps of what the monitor writes. 0, or -1 with the message printed. */
static int apply_manifest(struct monitor_args *args, struct dl_manifest *manifest, char *run_key) {
    if (args->net.run_id) {
        fprintf(stderr, "dedloc monitor: --run-id comes from the manifest\n");
        return -1;
    }
    if (dl_manifest_load(args->manifest_path, manifest)) {
        fprintf(stderr, "dedloc monitor: %s\n", dl_error());
        return -1;
    }
    args->net.run_id = manifest->run_id;
    args->net.manifest_hash = manifest->hash;
    args->net.target_batch = (double)manifest->target_batch;
    if (manifest->model_preset[0])
        args->model = manifest->model_preset; /* what the monitor's checkpoints and exports are of */
    if (manifest->max_steps > 0)
        args->max_steps = (double)manifest->max_steps;
    args->target_given = true;
    if (manifest->has_authority) {
        dl_authority_public_hex(manifest->authority, run_key);
        args->net.run_key = run_key;
    }
    return 0;
}

int cmd_monitor(int argc, char **argv) {
    struct monitor_args args;
    int parsed = parse_args(argc, argv, &args);
    if (parsed) return parsed > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    /* A run with a manifest admits only peers that present its hash. */
    struct dl_manifest manifest;
    memset(&manifest, 0, sizeof manifest);
    char run_key[DL_AUTHORITY_PK_HEX];
    if (args.with_manifest && apply_manifest(&args, &manifest, run_key)) return DL_EXIT_USAGE;
    char http_host[64];
    int http_port = 0;
    if (optind < argc || !args.net.run_id) {
        fprintf(stderr, "dedloc monitor: %s\n", optind < argc ? "unexpected argument" : "--run-id is required");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    if (split_host_port(args.listen_http, http_host, sizeof http_host, &http_port)) {
        fprintf(stderr, "dedloc monitor: --listen-http wants ADDR:PORT with a numeric address, got '%s'\n",
                args.listen_http);
        return DL_EXIT_USAGE;
    }
    /* What `dedloc train --model M --max-steps S` uses when no optimizer
     * option is given: the monitor's checkpoints hold it, and a resumed
     * trainer overrides it with the ones it gets. */
    bool tiny = !strcmp(args.model, "tiny");
    int64_t opt_steps = args.max_steps > 0 ? (int64_t)args.max_steps : tiny ? 300 : 125000;
    /* One history per run: a second run's chart must not continue the first's. */
    char history_path[4200];
    if (!args.history_path) {
        char dir[4096];
        if (dl_monitor_state_dir(args.net.run_id, dir, sizeof dir)) {
            fprintf(stderr, "dedloc monitor: %s\n", dl_error());
            return DL_EXIT_FAILURE;
        }
        snprintf(history_path, sizeof history_path, "%s/history.jsonl", dir);
        args.history_path = history_path;
    }
    DL_INFO("monitor", "history of run '%s' in %s", args.net.run_id, args.history_path);
    struct dl_monitor_config mcfg = {
        .net = args.net,
        .http_host = http_host,
        .http_port = http_port,
        .history_path = args.history_path,
        .history_points = (size_t)args.points,
        .sample_every_s = args.sample_every,
        .duration_s = args.duration,
        .checkpoint_dir = args.ck_dir,
        .checkpoint_every = (int64_t)args.ck_every,
        .keep = (int)args.keep,
        .export_dir = args.export_dir,
        .export_every = (int64_t)args.export_every,
        .model = args.model,
        .max_steps = (int64_t)args.max_steps,
        .run_target_batch = args.target_given ? args.net.target_batch : 0,
        .tokenizer = args.tokenizer,
        .checkpoint_opt = cli_train_opt_defaults(tiny, DL_OPT_LAMB, opt_steps),
        .exporter = {cli_export_check_out, cli_export_hf},
        .test_hold_s = args.state_hold_s,
    };
    signal(SIGPIPE, SIG_IGN);
    dl_monitor *monitor = NULL;
    int rc = DL_EXIT_FAILURE;
    if (dl_monitor_open(&mcfg, &monitor)) {
        fprintf(stderr, "dedloc monitor: %s\n", dl_error());
    } else {
        printf("{\"http\":\"http://%s%s%s:%d/\",\"http_port\":%d,\"peer_id\":\"%s\"}\n",
               strchr(http_host, ':') ? "[" : "", http_host, strchr(http_host, ':') ? "]" : "",
               dl_monitor_http_port(monitor), dl_monitor_http_port(monitor), dl_monitor_peer_id(monitor));
        fflush(stdout);
        if (dl_monitor_run(monitor)) fprintf(stderr, "dedloc monitor: %s\n", dl_error());
        else rc = DL_EXIT_OK;
    }
    dl_monitor_close(monitor);
    dl_manifest_free(&manifest);
    return rc;
}
