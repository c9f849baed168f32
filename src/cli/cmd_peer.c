/* dedloc peer: a bare peer that trains nothing. It joins a collaboration,
 * keeps the DHT and the peer lists alive (a stable bootstrap address for a
 * run) and prints its swarm view: one JSON object per line for scripts, or a
 * status line for a person at a terminal. Test builds (CMake option
 * DEDLOC_TEST_HOOKS) also take --fake-* progress for the swarm tests;
 * production builds neither take nor show them. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/swarm_args.h"
#include "dedloc/net.h"
#include "dedloc/util.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { stop_requested = 1; }

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc peer --run-id ID [options]\n\n"
            "Joins the collaboration ID without training, keeps the DHT and the peer lists\n"
            "alive, and prints the swarm view: on a terminal a readable status line, otherwise\n"
            "(piped, or with --json) one JSON object per line (the first line at once, so\n"
            "scripts can read the chosen ports). Ctrl-C leaves cleanly: the other peers get\n"
            "a goodbye record.\n\n"
            "  --run-id ID              collaboration to join (required)\n"
            "  --listen ADDR:PORT       TCP address to listen on (default 0.0.0.0:0; port 0 = any)\n"
            "  --announce ADDR:PORT     address other peers should dial (default: the listen address)\n"
            "  --initial-peers LIST     host:port,host:port of peers to join through\n"
            "  --identity FILE          ed25519 identity, created with mode 0600 if absent\n"
            "                           (default: a fresh identity each run)\n"
            "  --status-every S         seconds between JSON lines (default 5)\n"
            "  --client-mode            behind NAT/firewall: dial out only, not dialled\n"
            "  --max-upload MBIT        cap the upload rate (megabits/s, all connections)\n"
            "  --bandwidth MBIT         declared upload bandwidth told to other peers\n"
            "  --target-batch N         samples per global step, for the ETA (default 4096)\n"
            "  --expiry S               drop records not refreshed for S seconds (default 60)\n"
            "  --max-buffered MIB       bound on all connections' input (and output) buffers (default 256)\n"
            "  --keepalive S            ping period; 3x silent = dead (default 5)\n"
            "  --no-dht                 no DHT discovery (initial peers only)\n"
            "  --dht-port PORT          UDP port of the DHT node (default listen port + 1; 0 = any)\n"
            "  --dht-bootstrap LIST     host:port,... of DHT nodes to join\n"
            "  --duration S             leave after S seconds (default: run until Ctrl-C)\n"
            "  --json                   JSON lines even on a terminal\n"
            "  --text                   readable status lines even when piped\n\n"
            "admission (default: an open run that anyone knowing the run id may join):\n"
            "  --run-key KEY            run authority's public key (hex, or a file holding it):\n"
            "                           admit only peers with a valid token from it\n"
            "  --token FILE             our token ('dedloc authority issue' for our peer id)\n"
            "  --manifest FILE          the run manifest (dedloc run init): run id and key from it, and\n"
            "                           served with its tokenizer to newcomers (dedloc join)\n"
            "  --revoked FILE           the authority's signed revocation list (re-read on change)\n"
            "  --allow FILE             peer ids admitted without a token, one per line\n"
            "  --roles LIST             roles admitted with a token (default trainer,aux,monitor)\n\n"
#ifdef DEDLOC_TEST_HOOKS
            "testing aids (a bare peer has no progress of its own; test builds only):\n"
            "  --fake-epoch E           publish epoch E\n"
            "  --fake-samples N         publish N samples accumulated at start\n"
            "  --fake-samples-per-second X   and a rate of X samples/s (samples grow with it)\n"
            "  --fake-loss X            also publish a metrics record (loss X, device \"fake\")\n"
            "  --name NAME              display name in that metrics record\n\n"
#endif
            "Each JSON line holds: time, peer_id, listen, announce, dht_port, peers (ids of the\n"
            "peers counted alive, ours included), num_peers, connections, global_epoch,\n"
            "collective_samples, samples_per_second, eta_s (-1 = no rate), refresh_s, unbacked\n"
            "(peers claiming an epoch no quorum backs), records_checked, records_verified\n"
            "(signatures checked: news, not duplicates), buffered_bytes (all connections).\n");
}

static void format_eta(double s, char *out, size_t size) {
    if (!(s >= 0) || s > 1e8) snprintf(out, size, "unknown (no rate yet)");
    else if (s >= 3600) snprintf(out, size, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(out, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, size, "%ds", (int)s);
}

/* The view for a person: where we are reachable, who is there, how far the
 * global step is. */
static void print_view_text(dl_net *net, const struct dl_swarm_view *v, double target_batch, bool first) {
    if (first) {
        const char *announce = dl_net_announce_address(net);
        printf("peer %s listening on %s%s%s", dl_net_peer_id(net), dl_net_listen_address(net),
               announce[0] ? ", reachable at " : " (client mode: dials out only)", announce);
        if (dl_net_dht_port(net)) printf(", DHT on UDP port %d", dl_net_dht_port(net));
        printf("\n");
    }
    char eta[32];
    format_eta(v->eta_s, eta, sizeof eta);
    time_t now = time(NULL);
    struct tm tm;
    char clock[16] = "";
    if (localtime_r(&now, &tm)) strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    printf("%s  %zu peer%s (ours included), %zu connection%s | global step %llu | samples %.0f / %.0f | "
           "%.1f samples/s | next step in %s\n",
           clock, v->num_peers, v->num_peers == 1 ? "" : "s", v->num_connections,
           v->num_connections == 1 ? "" : "s", (unsigned long long)v->global_epoch, v->collective_samples,
           target_batch, v->samples_per_second, eta);
    fflush(stdout);
}

static void print_view(dl_net *net, bool as_text, double target_batch, bool first) {
    struct dl_swarm_view v;
    if (dl_net_swarm_view(net, &v)) {
        fprintf(stderr, "dedloc peer: %s\n", dl_error());
        return;
    }
    if (as_text) {
        print_view_text(net, &v, target_batch, first);
        dl_swarm_view_free(&v);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(net));
    cJSON_AddStringToObject(o, "listen", dl_net_listen_address(net));
    cJSON_AddStringToObject(o, "announce", dl_net_announce_address(net));
    cJSON_AddNumberToObject(o, "dht_port", dl_net_dht_port(net));
    cJSON *peers = cJSON_AddArrayToObject(o, "peers");
    for (size_t i = 0; i < v.num_peers; i++) cJSON_AddItemToArray(peers, cJSON_CreateString(v.peers[i].peer_id));
    cJSON_AddNumberToObject(o, "num_peers", (double)v.num_peers);
    cJSON_AddNumberToObject(o, "connections", (double)v.num_connections);
    cJSON_AddNumberToObject(o, "global_epoch", (double)v.global_epoch);
    cJSON_AddNumberToObject(o, "collective_samples", v.collective_samples);
    cJSON_AddNumberToObject(o, "samples_per_second", v.samples_per_second);
    cJSON_AddNumberToObject(o, "eta_s", v.eta_s);
    cJSON_AddNumberToObject(o, "refresh_s", v.refresh_s);
    size_t unbacked = 0;
    for (size_t i = 0; i < v.num_peers; i++) unbacked += v.peers[i].epoch_unbacked;
    cJSON_AddNumberToObject(o, "unbacked", (double)unbacked);
    cJSON_AddNumberToObject(o, "records_checked", (double)v.records_checked);
    cJSON_AddNumberToObject(o, "records_verified", (double)v.records_verified);
    cJSON_AddNumberToObject(o, "buffered_bytes", (double)v.buffered_bytes);
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        printf("%s\n", text);
        fflush(stdout);
    }
    free(text);
    cJSON_Delete(o);
    dl_swarm_view_free(&v);
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* "trainer,aux" -> DL_ROLE_BIT mask */
static int parse_roles(const char *list, unsigned *mask) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    *mask = 0;
    for (char *save = NULL, *r = strtok_r(buf, ",", &save); r; r = strtok_r(NULL, ",", &save)) {
        enum dl_role role;
        if (dl_role_from_name(r, &role)) return -1;
        *mask |= DL_ROLE_BIT(role);
    }
    return *mask ? 0 : -1;
}

#ifdef DEDLOC_TEST_HOOKS
/* Test builds: a metrics record like a trainer's, for the monitor tests. */
static void publish_fake_metrics(dl_net *net, uint64_t epoch, double loss, double sps, double uptime,
                                 const char *name) {
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    m.step = epoch;
    m.loss = loss;
    m.samples_per_second = sps;
    m.samples_total = sps * uptime;
    m.uptime_s = uptime;
    snprintf(m.device, sizeof m.device, "fake");
    snprintf(m.vendor, sizeof m.vendor, "dedloc-test");
    snprintf(m.precision, sizeof m.precision, "fp32");
    snprintf(m.name, sizeof m.name, "%s", name);
    if (dl_net_publish_metrics(net, &m)) fprintf(stderr, "dedloc peer: %s\n", dl_error());
}
#endif

int cmd_peer(int argc, char **argv) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.listen = "0.0.0.0:0";
    double status_every = 5, duration = -1, fake_samples = 0, fake_sps = 0, fake_loss = -1, v = 0;
    const char *name = "";
    int format = -1; /* -1: text on a terminal, JSON otherwise; 0: JSON; 1: text */
    uint64_t fake_epoch = 0;
    enum { O_RUN = 256, O_LISTEN, O_ANNOUNCE, O_INITIAL, O_IDENTITY, O_STATUS, O_CLIENT, O_MAXUP,
           O_BW, O_TARGET, O_EXPIRY, O_KEEPALIVE, O_NODHT, O_DHTPORT, O_DHTBOOT, O_DURATION,
           O_JSON, O_TEXT, O_RUNKEY, O_TOKEN, O_REVOKED, O_ALLOW, O_ROLES, O_MANIFEST, O_FEPOCH, O_FSAMPLES, O_FSPS, O_FLOSS, O_NAME,
           O_MAXBUF };
    static const struct option opts[] = {
        {"run-id", required_argument, NULL, O_RUN}, {"listen", required_argument, NULL, O_LISTEN},
        {"announce", required_argument, NULL, O_ANNOUNCE}, {"initial-peers", required_argument, NULL, O_INITIAL},
        {"identity", required_argument, NULL, O_IDENTITY}, {"status-every", required_argument, NULL, O_STATUS},
        {"client-mode", no_argument, NULL, O_CLIENT}, {"max-upload", required_argument, NULL, O_MAXUP},
        {"bandwidth", required_argument, NULL, O_BW}, {"target-batch", required_argument, NULL, O_TARGET},
        {"expiry", required_argument, NULL, O_EXPIRY}, {"max-buffered", required_argument, NULL, O_MAXBUF}, {"keepalive", required_argument, NULL, O_KEEPALIVE},
        {"no-dht", no_argument, NULL, O_NODHT}, {"dht-port", required_argument, NULL, O_DHTPORT},
        {"dht-bootstrap", required_argument, NULL, O_DHTBOOT}, {"duration", required_argument, NULL, O_DURATION},
        {"json", no_argument, NULL, O_JSON}, {"text", no_argument, NULL, O_TEXT},
        {"run-key", required_argument, NULL, O_RUNKEY}, {"token", required_argument, NULL, O_TOKEN},
        {"revoked", required_argument, NULL, O_REVOKED}, {"allow", required_argument, NULL, O_ALLOW},
        {"roles", required_argument, NULL, O_ROLES}, {"manifest", required_argument, NULL, O_MANIFEST},
#ifdef DEDLOC_TEST_HOOKS
        /* Test hooks (CMake option DEDLOC_TEST_HOOKS): progress a bare peer does
         * not have, for the swarm tests. Kept last: opts[c - O_RUN] names an option. */
        {"fake-epoch", required_argument, NULL, O_FEPOCH}, {"fake-samples", required_argument, NULL, O_FSAMPLES},
        {"fake-samples-per-second", required_argument, NULL, O_FSPS},
        {"fake-loss", required_argument, NULL, O_FLOSS}, {"name", required_argument, NULL, O_NAME},
#endif
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0}};
    const char *manifest_path = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_RUN: cfg.run_id = optarg; break;
        case O_LISTEN: cfg.listen = optarg; break;
        case O_ANNOUNCE: cfg.announce = optarg; break;
        case O_INITIAL: cfg.initial_peers = optarg; break;
        case O_IDENTITY: cfg.identity_path = optarg; break;
        case O_STATUS: bad = parse_double(optarg, 0.01, 86400, &status_every); break;
        case O_CLIENT: cfg.client_mode = true; break;
        case O_MAXUP: bad = parse_double(optarg, 0.001, 1e6, &cfg.max_upload_mbit); break;
        case O_BW: bad = parse_double(optarg, 0, 1e6, &cfg.bandwidth_mbit); break;
        case O_TARGET: bad = parse_double(optarg, 1, 1e15, &cfg.target_batch); break;
        case O_EXPIRY: bad = parse_double(optarg, 0.5, 86400, &cfg.expiry_s); break;
        case O_MAXBUF: bad = parse_double(optarg, 16, 1 << 20, &v); cfg.max_buffered = (size_t)v << 20; break;
        case O_KEEPALIVE: bad = parse_double(optarg, 0.1, 3600, &cfg.keepalive_s); break;
        case O_NODHT: cfg.use_dht = false; break;
        case O_DHTPORT: bad = parse_double(optarg, 0, 65535, &v); cfg.dht_port = (int)v; break;
        case O_DHTBOOT: cfg.dht_bootstrap = optarg; cfg.use_dht = true; break;
        case O_DURATION: bad = parse_double(optarg, 0, 1e9, &duration); break;
        case O_JSON: format = 0; break;
        case O_TEXT: format = 1; break;
        case O_RUNKEY: cfg.run_key = optarg; break;
        case O_TOKEN: cfg.token_path = optarg; break;
        case O_REVOKED: cfg.revoked_path = optarg; break;
        case O_ALLOW: cfg.allow_path = optarg; break;
        case O_ROLES: bad = parse_roles(optarg, &cfg.admit_roles); break;
        case O_MANIFEST: manifest_path = optarg; break;
#ifdef DEDLOC_TEST_HOOKS
        case O_FEPOCH: bad = parse_double(optarg, 0, 1e15, &v); fake_epoch = (uint64_t)v; break;
        case O_FSAMPLES: bad = parse_double(optarg, 0, 1e15, &fake_samples); break;
        case O_FSPS: bad = parse_double(optarg, 0, 1e9, &fake_sps); break;
        case O_FLOSS: bad = parse_double(optarg, 0, 1e6, &fake_loss); break;
        case O_NAME: name = optarg; break;
#endif
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "dedloc peer: bad value '%s' for --%s\n", optarg, opts[c - O_RUN].name);
            return DL_EXIT_USAGE;
        }
    }
    /* --manifest: the run id and key come from it, and we serve it with the
     * tokenizer: a bare peer makes a stable address for `dedloc join`. */
    struct cli_swarm_args sw;
    cli_swarm_args_default(&sw);
    if (manifest_path) {
        if (cfg.run_id || cfg.run_key) {
            fprintf(stderr, "dedloc peer: --run-id and --run-key come from the manifest\n");
            return DL_EXIT_USAGE;
        }
        sw.manifest_path = manifest_path;
        if (cli_swarm_load_manifest(&sw, NULL, "peer")) {
            cli_swarm_args_free(&sw);
            return DL_EXIT_USAGE;
        }
        cfg.run_id = sw.net.run_id;
        cfg.run_key = sw.net.run_key;
        cfg.manifest_hash = sw.net.manifest_hash;
        cfg.target_batch = (double)sw.manifest.target_batch;
    }
    if (optind < argc || !cfg.run_id) {
        fprintf(stderr, "dedloc peer: %s\n", optind < argc ? "unexpected argument" : "--run-id is required");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    /* A malformed address is a usage error (exit 2), found before anything
     * starts; one that does not resolve or bind stays a runtime error. */
    const char *const single[] = {cfg.listen, cfg.announce};
    for (size_t i = 0; i < 2; i++)
        if (single[i] && dl_net_check_address(single[i])) {
            fprintf(stderr, "dedloc peer: --%s: %s\n", i ? "announce" : "listen", dl_error());
            return DL_EXIT_USAGE;
        }
    const char *const lists[] = {cfg.initial_peers, cfg.dht_bootstrap};
    for (size_t i = 0; i < 2; i++) {
        char *copy = lists[i] ? dl_strdup(lists[i]) : NULL, *save = NULL;
        for (char *a = copy ? strtok_r(copy, ",", &save) : NULL; a; a = strtok_r(NULL, ",", &save)) {
            while (*a == ' ') a++;
            if (*a && dl_net_check_address(a)) {
                fprintf(stderr, "dedloc peer: --%s: %s\n", i ? "dht-bootstrap" : "initial-peers", dl_error());
                free(copy);
                return DL_EXIT_USAGE;
            }
        }
        free(copy);
    }
    bool text = format == 1 || (format < 0 && isatty(fileno(stdout)));
    /* Refresh often enough that a short test expiry still works. */
    if (cfg.max_refresh_s > cfg.expiry_s / 4) cfg.max_refresh_s = cfg.expiry_s / 4;
    if (cfg.min_refresh_s > cfg.max_refresh_s) cfg.min_refresh_s = cfg.max_refresh_s;
    if (cfg.keepalive_s > cfg.expiry_s / 3) cfg.keepalive_s = cfg.expiry_s / 3;

    dl_net *net = NULL;
    dl_run_files *files = NULL;
    if (dl_net_start(&cfg, &net) ||
        (sw.has_manifest && dl_run_files_serve(net, &sw.manifest, sw.tokenizer_bytes, sw.tokenizer_size, &files))) {
        fprintf(stderr, "dedloc peer: %s\n", dl_error());
        if (net) dl_net_stop(net);
        dl_run_files_stop(files);
        cli_swarm_args_free(&sw);
        return DL_EXIT_FAILURE;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    double start = dl_now(), next_status = start, next_publish = start;
    bool first_view = true;
    while (!stop_requested && (duration < 0 || dl_now() - start < duration)) {
        double now = dl_now();
        if (now >= next_publish) {
            dl_net_publish_progress(net, fake_epoch, fake_samples + fake_sps * (now - start), fake_sps);
            if (fake_loss >= 0) publish_fake_metrics(net, fake_epoch, fake_loss, fake_sps, now - start, name);
            next_publish = now + 1.0;
        }
        if (now >= next_status) {
            print_view(net, text, cfg.target_batch, first_view);
            first_view = false;
            next_status += status_every;
            if (next_status < now) next_status = now + status_every;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    dl_net_stop(net);
    dl_run_files_stop(files);
    cli_swarm_args_free(&sw);
    return DL_EXIT_OK;
}
