/* dedloc peer: a bare peer that trains nothing. It joins a collaboration,
 * keeps the DHT and the peer lists alive (a stable bootstrap address for a
 * run) and prints its swarm view: one JSON object per line for scripts, or a
 * status line for a person at a terminal. Test builds (CMake option
 * DEDLOC_TEST_HOOKS) also take --fake-* progress for the swarm tests;
 * production builds neither take nor show them. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
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
                                 const char *name, double target_batch) {
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
    m.target_batch = target_batch;
    if (dl_net_publish_metrics(net, &m)) fprintf(stderr, "dedloc peer: %s\n", dl_error());
}
#endif

/* The command's settings, as the options leave them. */
struct peer_args {
    struct dl_net_config net;
    double status_every, duration, fake_samples, fake_sps, fake_loss;
    const char *name;
    int format; /* -1: text on a terminal, JSON otherwise; 0: JSON; 1: text */
    uint64_t fake_epoch;
    const char *manifest_path;
};

/* Whole MiB, stored in bytes. */
static int set_max_buffered(void *settings, const char *arg) {
    struct peer_args *p = settings;
    double v = 0;
    int bad = cli_parse_double(arg, 16, 1 << 20, &v);
    p->net.max_buffered = (size_t)v << 20;
    return bad;
}

static int set_dht_port(void *settings, const char *arg) {
    struct peer_args *p = settings;
    double v = 0;
    int bad = cli_parse_double(arg, 0, 65535, &v);
    p->net.dht_port = (int)v;
    return bad;
}

static int set_dht_bootstrap(void *settings, const char *arg) {
    struct peer_args *p = settings;
    p->net.dht_bootstrap = arg;
    p->net.use_dht = true;
    return 0;
}

static int set_json(void *settings, const char *arg) {
    ((struct peer_args *)settings)->format = 0;
    return 0;
}

static int set_text(void *settings, const char *arg) {
    ((struct peer_args *)settings)->format = 1;
    return 0;
}

static int set_roles(void *settings, const char *arg) {
    return parse_roles(arg, &((struct peer_args *)settings)->net.admit_roles);
}

#ifdef DEDLOC_TEST_HOOKS
static int set_fake_epoch(void *settings, const char *arg) {
    struct peer_args *p = settings;
    double v = 0;
    int bad = cli_parse_double(arg, 0, 1e15, &v);
    p->fake_epoch = (uint64_t)v;
    return bad;
}
#endif

#define P_FIELD(f) offsetof(struct peer_args, f)
enum { O_HELP = 'h', O_FIRST = 256 };
/* In the order getopt_long lists the candidates of an ambiguous prefix. */
static const struct cli_opt peer_opts[] = {
    {"run-id", O_FIRST + 0, CLI_OPT_STRING, P_FIELD(net.run_id), 0, 0, NULL},
    {"listen", O_FIRST + 1, CLI_OPT_STRING, P_FIELD(net.listen), 0, 0, NULL},
    {"announce", O_FIRST + 2, CLI_OPT_STRING, P_FIELD(net.announce), 0, 0, NULL},
    {"initial-peers", O_FIRST + 3, CLI_OPT_STRING, P_FIELD(net.initial_peers), 0, 0, NULL},
    {"identity", O_FIRST + 4, CLI_OPT_STRING, P_FIELD(net.identity_path), 0, 0, NULL},
    {"status-every", O_FIRST + 5, CLI_OPT_DOUBLE, P_FIELD(status_every), 0.01, 86400, NULL},
    {"client-mode", O_FIRST + 6, CLI_OPT_FLAG, P_FIELD(net.client_mode), 0, 0, NULL},
    {"max-upload", O_FIRST + 7, CLI_OPT_DOUBLE, P_FIELD(net.max_upload_mbit), 0.001, 1e6, NULL},
    {"bandwidth", O_FIRST + 8, CLI_OPT_DOUBLE, P_FIELD(net.bandwidth_mbit), 0, 1e6, NULL},
    {"target-batch", O_FIRST + 9, CLI_OPT_DOUBLE, P_FIELD(net.target_batch), 1, 1e15, NULL},
    {"expiry", O_FIRST + 10, CLI_OPT_DOUBLE, P_FIELD(net.expiry_s), 0.5, 86400, NULL},
    {"max-buffered", O_FIRST + 11, CLI_OPT_SETTER, 0, 0, 0, set_max_buffered},
    {"keepalive", O_FIRST + 12, CLI_OPT_DOUBLE, P_FIELD(net.keepalive_s), 0.1, 3600, NULL},
    {"no-dht", O_FIRST + 13, CLI_OPT_UNSET, P_FIELD(net.use_dht), 0, 0, NULL},
    {"dht-port", O_FIRST + 14, CLI_OPT_SETTER, 0, 0, 0, set_dht_port},
    {"dht-bootstrap", O_FIRST + 15, CLI_OPT_SETTER, 0, 0, 0, set_dht_bootstrap},
    {"duration", O_FIRST + 16, CLI_OPT_DOUBLE, P_FIELD(duration), 0, 1e9, NULL},
    {"json", O_FIRST + 17, CLI_OPT_ACTION, 0, 0, 0, set_json},
    {"text", O_FIRST + 18, CLI_OPT_ACTION, 0, 0, 0, set_text},
    {"run-key", O_FIRST + 19, CLI_OPT_STRING, P_FIELD(net.run_key), 0, 0, NULL},
    {"token", O_FIRST + 20, CLI_OPT_STRING, P_FIELD(net.token_path), 0, 0, NULL},
    {"revoked", O_FIRST + 21, CLI_OPT_STRING, P_FIELD(net.revoked_path), 0, 0, NULL},
    {"allow", O_FIRST + 22, CLI_OPT_STRING, P_FIELD(net.allow_path), 0, 0, NULL},
    {"roles", O_FIRST + 23, CLI_OPT_SETTER, 0, 0, 0, set_roles},
    {"manifest", O_FIRST + 24, CLI_OPT_STRING, P_FIELD(manifest_path), 0, 0, NULL},
#ifdef DEDLOC_TEST_HOOKS
    /* Test hooks (CMake option DEDLOC_TEST_HOOKS): progress a bare peer does
     * not have, for the swarm tests. */
    {"fake-epoch", O_FIRST + 25, CLI_OPT_SETTER, 0, 0, 0, set_fake_epoch},
    {"fake-samples", O_FIRST + 26, CLI_OPT_DOUBLE, P_FIELD(fake_samples), 0, 1e15, NULL},
    {"fake-samples-per-second", O_FIRST + 27, CLI_OPT_DOUBLE, P_FIELD(fake_sps), 0, 1e9, NULL},
    {"fake-loss", O_FIRST + 28, CLI_OPT_DOUBLE, P_FIELD(fake_loss), 0, 1e6, NULL},
    {"name", O_FIRST + 29, CLI_OPT_STRING, P_FIELD(name), 0, 0, NULL},
#endif
    {"help", O_HELP, CLI_OPT_OTHER, 0, 0, 0, NULL},
};
enum { N_PEER_OPTS = sizeof peer_opts / sizeof peer_opts[0] };

/* 0 parsed, 1 help printed, -1 usage error (said). */
static int parse_args(int argc, char **argv, struct peer_args *p) {
    memset(p, 0, sizeof *p);
    dl_net_config_default(&p->net);
    p->net.listen = "0.0.0.0:0";
    p->status_every = 5;
    p->duration = -1;
    p->fake_loss = -1;
    p->name = "";
    p->format = -1;
    return cli_opt_parse(peer_opts, N_PEER_OPTS, O_HELP, argc, argv, p, "peer", help);
}

int cmd_peer(int argc, char **argv) {
    struct peer_args args;
    int parsed = parse_args(argc, argv, &args);
    if (parsed) return parsed > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    struct dl_net_config cfg = args.net;
    double status_every = args.status_every, duration = args.duration;
    double fake_samples = args.fake_samples, fake_sps = args.fake_sps;
    const char *manifest_path = args.manifest_path;
    int format = args.format;
    uint64_t fake_epoch = args.fake_epoch;
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
#ifdef DEDLOC_TEST_HOOKS
            if (args.fake_loss >= 0)
                publish_fake_metrics(net, fake_epoch, args.fake_loss, fake_sps, now - start, args.name,
                                     cfg.target_batch);
#endif
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
