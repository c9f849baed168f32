/* dedloc monitor: the options of the observer of a collaboration; the
 * monitor itself (the swarm side, the history, HTTP, the snapshots) is the
 * library's monitor module (include/dedloc/monitor.h). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/export_hf.h"
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

int cmd_monitor(int argc, char **argv) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
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
    /* What `dedloc train --model M --max-steps S` uses when no optimizer
     * option is given: the monitor's checkpoints hold it, and a resumed
     * trainer overrides it with the ones it gets. */
    bool tiny = !strcmp(model, "tiny");
    int64_t opt_steps = max_steps > 0 ? (int64_t)max_steps : tiny ? 300 : 125000;
    struct dl_monitor_config mcfg = {
        .net = cfg,
        .http_host = http_host,
        .http_port = http_port,
        .history_path = history_path,
        .history_points = (size_t)points,
        .sample_every_s = sample_every,
        .duration_s = duration,
        .checkpoint_dir = ck_dir,
        .checkpoint_every = (int64_t)ck_every,
        .keep = (int)keep,
        .export_dir = export_dir,
        .export_every = (int64_t)export_every,
        .model = model,
        .max_steps = (int64_t)max_steps,
        .run_target_batch = target_given ? cfg.target_batch : 0,
        .tokenizer = tokenizer,
        .checkpoint_opt = cli_train_opt_defaults(tiny, DL_OPT_LAMB, opt_steps),
        .exporter = {cli_export_check_out, cli_export_hf},
        .test_hold_s = state_hold_s,
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
