/* The swarm options shared by `dedloc train` and `dedloc aux`, and the
 * services around the step loop. */
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cli/opt_table.h"
#include "cli/swarm_args.h"
#include "dedloc/util.h"

enum {
    S_RUN = CLI_SWARM_OPT_BASE, S_LISTEN, S_ANNOUNCE, S_INITIAL, S_IDENTITY, S_CLIENT, S_MAXUP, S_BW, S_NODHT,
    S_DHTBOOT, S_EXPIRY, S_LOCAL, S_MINPEERS, S_SHARD, S_COMP, S_DEADLINE, S_JOINWAIT, S_STATE_EVERY, S_LINGER,
    S_AGG, S_TAU, S_CLIPIT, S_CLIPBAN, S_NAME, S_MANIFEST, S_TOKEN, S_DELAY, S_CORRUPT, S_ATTACK, S_LOG_BATCHES,
    S_MISBEHAVE, S_INVITE, S_LOCAL_STEPS, S_OUTER_LR, S_OUTER_MOMENTUM, S_OUTER_COMP,
    S_LAST = S_OUTER_COMP,
};

static int set_client_mode(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    a->net.client_mode = a->collab.client_mode = true;
    return 0;
}

static int set_bandwidth(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    double v = 0;
    int bad = cli_parse_double(arg, 0, 1e6, &v);
    a->net.bandwidth_mbit = a->collab.bandwidth_mbit = v;
    return bad;
}

static int set_dht_bootstrap(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    a->net.dht_bootstrap = arg;
    a->net.use_dht = true;
    return 0;
}

static int set_min_peers(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    double v;
    if (cli_parse_double(arg, 1, DL_AVG_MAX_MEMBERS, &v)) return -1;
    a->train.min_peers = (size_t)v;
    return 0;
}

/* I/K: this peer takes micro-batches I, I+K, I+2K... of the stream. */
static int set_data_shard(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    long i, k;
    char tail;
    if (sscanf(arg, "%ld/%ld%c", &i, &k, &tail) != 2 || k < 1 || i < 0 || i >= k || k > 4096) return -1;
    a->train.shard_index = i;
    a->train.shard_count = k;
    return 0;
}

static int set_compression(void *settings, const char *arg) {
    return dl_codec_from_name(arg, &((struct cli_swarm_args *)settings)->train.compression) ? -1 : 0;
}

/* Through the codec name table: codecs added there are accepted here. */
static int set_outer_compression(void *settings, const char *arg) {
    return dl_codec_from_name(arg, &((struct cli_swarm_args *)settings)->train.outer_compression) ? -1 : 0;
}

static int set_aggregation(void *settings, const char *arg) {
    return dl_aggregation_from_name(arg, &((struct cli_swarm_args *)settings)->train.aggregation) ? -1 : 0;
}

/* Shown on monitors' contributor boards: at most 63 characters. */
static int set_name(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    a->train.display_name = arg;
    return strlen(arg) >= 64 ? -1 : 0;
}

#ifdef DEDLOC_TEST_HOOKS
static int set_test_attack(void *settings, const char *arg) {
    struct cli_swarm_args *a = settings;
    /* "none" is the default, not an attack to ask for */
    if (dl_test_attack_from_name(arg, &a->train.test_attack) || a->train.test_attack == DL_TEST_ATTACK_NONE) return -1;
    return 0;
}

/* Round misbehaviours that a training peer commits with well-formed data
 * (dl_test_misbehaviour_from_name): an aggregator whose results are -1000
 * times the average, a sender whose published projections lie, chunks of
 * huge finite values, a leader that dictates other settings or stalls every
 * round it leads. */
static int set_test_misbehave(void *settings, const char *arg) {
    return dl_test_misbehaviour_from_name(arg, &((struct cli_swarm_args *)settings)->collab.test_misbehaviour);
}
#endif

#define S_FIELD(f) offsetof(struct cli_swarm_args, f)
/* In the order getopt_long lists the candidates of an ambiguous prefix. */
static const struct cli_opt swarm_table[] = {
    {"run-id", S_RUN, CLI_OPT_STRING, S_FIELD(net.run_id), 0, 0, NULL},
    {"listen", S_LISTEN, CLI_OPT_STRING, S_FIELD(net.listen), 0, 0, NULL},
    {"announce", S_ANNOUNCE, CLI_OPT_STRING, S_FIELD(net.announce), 0, 0, NULL},
    {"initial-peers", S_INITIAL, CLI_OPT_STRING, S_FIELD(net.initial_peers), 0, 0, NULL},
    {"identity", S_IDENTITY, CLI_OPT_STRING, S_FIELD(net.identity_path), 0, 0, NULL},
    {"client-mode", S_CLIENT, CLI_OPT_ACTION, 0, 0, 0, set_client_mode},
    {"max-upload", S_MAXUP, CLI_OPT_DOUBLE, S_FIELD(net.max_upload_mbit), 0.001, 1e6, NULL},
    {"bandwidth", S_BW, CLI_OPT_SETTER, 0, 0, 0, set_bandwidth},
    {"no-dht", S_NODHT, CLI_OPT_UNSET, S_FIELD(net.use_dht), 0, 0, NULL},
    {"dht-bootstrap", S_DHTBOOT, CLI_OPT_SETTER, 0, 0, 0, set_dht_bootstrap},
    {"expiry", S_EXPIRY, CLI_OPT_DOUBLE, S_FIELD(net.expiry_s), 0.5, 86400, NULL},
    {"local-batch", S_LOCAL, CLI_OPT_INT64, S_FIELD(train.local_batch), 1, 1e12, NULL},
    {"min-peers", S_MINPEERS, CLI_OPT_SETTER, 0, 0, 0, set_min_peers},
    {"data-shard", S_SHARD, CLI_OPT_SETTER, 0, 0, 0, set_data_shard},
    {"compression", S_COMP, CLI_OPT_SETTER, 0, 0, 0, set_compression},
    {"round-deadline", S_DEADLINE, CLI_OPT_DOUBLE, S_FIELD(train.round_deadline_s), 1, 86400, NULL},
    {"join-wait", S_JOINWAIT, CLI_OPT_DOUBLE, S_FIELD(train.join_wait_s), 0, 86400, NULL},
    {"state-every", S_STATE_EVERY, CLI_OPT_INT64, S_FIELD(train.state_every), 1, 1e9, NULL},
    {"linger", S_LINGER, CLI_OPT_DOUBLE, S_FIELD(train.linger_s), 0, 3600, NULL},
    {"aggregation", S_AGG, CLI_OPT_SETTER, 0, 0, 0, set_aggregation},
    {"clip-tau", S_TAU, CLI_OPT_DOUBLE, S_FIELD(train.clip_tau), 1e-30, 1e30, NULL},
    {"clip-iterations", S_CLIPIT, CLI_OPT_INT, S_FIELD(train.clip_iterations), 1, 1000, NULL},
    {"clip-ban-rounds", S_CLIPBAN, CLI_OPT_INT, S_FIELD(collab.clip_ban_rounds), 0, 1e6, NULL},
    {"name", S_NAME, CLI_OPT_SETTER, 0, 0, 0, set_name},
    {"manifest", S_MANIFEST, CLI_OPT_STRING, S_FIELD(manifest_path), 0, 0, NULL},
    {"token", S_TOKEN, CLI_OPT_STRING, S_FIELD(net.token_path), 0, 0, NULL},
    {"delay-update", S_DELAY, CLI_OPT_FLAG, S_FIELD(train.delay_update), 0, 0, NULL},
    {"invite-file", S_INVITE, CLI_OPT_STRING, S_FIELD(invite_path), 0, 0, NULL},
    {"local-steps", S_LOCAL_STEPS, CLI_OPT_INT64, S_FIELD(train.local_steps), 1, 1e9, NULL},
    {"outer-lr", S_OUTER_LR, CLI_OPT_DOUBLE, S_FIELD(train.outer_lr), 1e-9, 100, NULL},
    {"outer-momentum", S_OUTER_MOMENTUM, CLI_OPT_DOUBLE, S_FIELD(train.outer_momentum), 0, 0.999999, NULL},
    {"outer-compression", S_OUTER_COMP, CLI_OPT_SETTER, 0, 0, 0, set_outer_compression},
#ifdef DEDLOC_TEST_HOOKS
    {"test-corrupt-at-step", S_CORRUPT, CLI_OPT_INT64, S_FIELD(train.corrupt_at_step), 1, 1e12, NULL},
    {"test-attack", S_ATTACK, CLI_OPT_SETTER, 0, 0, 0, set_test_attack},
    {"test-log-batches", S_LOG_BATCHES, CLI_OPT_FLAG, S_FIELD(train.test_log_batches), 0, 0, NULL},
    {"test-misbehave", S_MISBEHAVE, CLI_OPT_SETTER, 0, 0, 0, set_test_misbehave},
#endif
};
enum { N_SWARM_OPTS = sizeof swarm_table / sizeof swarm_table[0] };
_Static_assert(N_SWARM_OPTS <= CLI_SWARM_MAX_OPTS, "commands' getopt tables hold CLI_SWARM_MAX_OPTS swarm options");

const struct option *cli_swarm_options(void) {
    static struct option opts[N_SWARM_OPTS + 1];
    cli_opt_fill(swarm_table, N_SWARM_OPTS, opts);
    return opts;
}

void cli_swarm_args_default(struct cli_swarm_args *a) {
    memset(a, 0, sizeof *a);
    dl_net_config_default(&a->net);
    a->net.listen = "0.0.0.0:0";
    dl_collab_config_default(&a->collab);
    /* A leader waits this long at least for the peers its view expects: one
     * still in its last micro-batch on a busy machine joins in time. It
     * closes at once when all of them have joined. */
    a->collab.matchmaking_floor_s = 2.0;
    dl_collab_train_options_default(&a->train);
}

int cli_swarm_option(struct cli_swarm_args *a, int c, const char *arg, const char *cmd) {
    if (c < CLI_SWARM_OPT_BASE || c > S_LAST) return 1;
    const struct cli_opt *e = cli_opt_find(swarm_table, N_SWARM_OPTS, c);
    a->any = true;
    if (!e) return 1;
    /* What a manifest decides may not be given beside it. */
    if (c == S_RUN || c == S_COMP || c == S_AGG || c == S_TAU || c == S_CLIPIT || c == S_CLIPBAN ||
        c == S_LOCAL_STEPS || c == S_OUTER_LR || c == S_OUTER_MOMENTUM || c == S_OUTER_COMP)
        a->run_option_given = e->name;
    if (cli_opt_assign(e, a, arg)) {
        fprintf(stderr, "dedloc %s: bad value '%s' for --%s\n", cmd, arg, e->name);
        return -1;
    }
    return 0;
}

int cli_swarm_finish(struct cli_swarm_args *a, const char *cmd, double target_batch) {
    if (a->manifest_path && !a->has_manifest) {
        fprintf(stderr, "dedloc %s: --manifest is not supported here\n", cmd);
        return -1;
    }
    if (!a->net.run_id) {
        fprintf(stderr, "dedloc %s: the swarm options need --run-id ID\n", cmd);
        return -1;
    }
    a->net.target_batch = target_batch;
    /* Refresh often enough that a short expiry still works. */
    if (a->net.max_refresh_s > a->net.expiry_s / 4) a->net.max_refresh_s = a->net.expiry_s / 4;
    if (a->net.min_refresh_s > a->net.max_refresh_s) a->net.min_refresh_s = a->net.max_refresh_s;
    if (a->net.keepalive_s > a->net.expiry_s / 3) a->net.keepalive_s = a->net.expiry_s / 3;
    return 0;
}

void cli_swarm_help(FILE *out) {
    fprintf(out,
            "swarm (train as one peer of the collaboration ID; see docs/collab_training.md):\n"
            "  --run-id ID          collaboration to join; --target-batch is then the collective batch\n"
            "  --listen ADDR:PORT   TCP address to listen on (default 0.0.0.0:0)\n"
            "  --announce ADDR:PORT address other peers should dial\n"
            "  --initial-peers LIST host:port,... of peers to join through\n"
            "  --identity FILE      ed25519 identity (created if absent): a restarted peer keeps its id\n"
            "  --client-mode        behind NAT: dial out only, never aggregates\n"
            "  --max-upload MBIT    cap the upload rate\n"
            "  --bandwidth MBIT     declared upload bandwidth (load balancing)\n"
            "  --no-dht             initial peers only; --dht-bootstrap LIST: DHT nodes to join\n"
            "  --expiry S           drop peers silent for S seconds (60)\n"
            "  --compression C      gradient codec on the wire: none (default), fp16, uint8, int8, topk\n"
            "  --round-deadline S   whole averaging round (60)\n"
            "  --aggregation A      how aggregators combine contributions: mean (default) or\n"
            "                       centered-clip (robust to a minority of bad peers; agreed in the\n"
            "                       leader's group record)\n"
            "  --clip-tau T         centered clip: radius per 1 MiB chunk (1); set it above the honest\n"
            "                       spread of a chunk, or honest peers are clipped too\n"
            "  --clip-iterations N  centered clip: iterations (20)\n"
            "  --clip-ban-rounds N  ban a peer clipped in N consecutive rounds for the run (10; 0 never)\n"
            "  --join-wait S        at start, look this long for the swarm before training alone (5)\n"
            "  --min-peers N        wait for N peers before the first step\n"
            "  --local-batch N      contribute exactly N samples per step (deterministic shares)\n"
            "  --data-shard I/K     take micro-batches I, I+K, I+2K... of the stream (with --local-batch:\n"
            "                       K peers together see what one peer with K times the batch sees)\n"
            "  --name NAME          display name on monitors' contributor board (at most 63 characters)\n"
            "  --manifest FILE      take every run setting from this signed run manifest (dedloc run\n"
            "                       init; docs/manifest.md) and serve it and the tokenizer to newcomers\n"
            "  --token FILE         our admission token, for a run with an authority (dedloc authority)\n"
            "  --invite-file FILE   hand out tokens to volunteers who join with this invite's code\n"
            "                       (dedloc authority invite; needs --manifest)\n"
            "  --linger S           after the last step keep serving the state S seconds (2)\n"
            "  --delay-update       average each step's gradient while computing the next step's\n"
            "                       micro-batches (faster on slow links; their gradients are then one\n"
            "                       step stale; weights stay identical on every peer)\n"
            "  --local-steps H      low-communication mode (DiLoCo): each peer takes inner optimizer\n"
            "                       steps (one per micro-batch) on its own weights; the swarm syncs when\n"
            "                       its samples reach H micro-batches per peer seen, averaging the\n"
            "                       pseudo-gradients (outer minus local weights), and every peer takes\n"
            "                       one outer Nesterov step; --max-steps then counts syncs\n"
            "  --outer-lr LR        the outer step's rate (0.7)\n"
            "  --outer-momentum M   its Nesterov momentum (0.9)\n"
            "  --outer-compression C  codec of the pseudo-gradient on the wire (none; the names of\n"
            "                       --compression); what it does not carry is kept and sent next sync\n");
}

int cli_swarm_run(struct cli_swarm_args *a, struct dl_collab_train_options *train, const dl_opt_config *opt,
                  const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                  const dl_trainer_backend *backend, struct dl_collab_train_result *res) {
    dl_net *net = NULL;
    dl_collab *collab = NULL;
    dl_state_donor *donor = NULL;
    dl_run_files *files = NULL;
    int rc = -1;
    signal(SIGPIPE, SIG_IGN);
    if (a->invite_path && !a->invite) return dl_fail("--invite-file is not loaded");
    if (dl_net_start(&a->net, &net)) return -1;
    if (a->has_manifest &&
        dl_run_files_serve(net, &a->manifest, a->tokenizer_bytes, a->tokenizer_size, &files))
        goto done;
    if (a->invite && dl_net_serve_invite(net, a->invite)) goto done;
    DL_INFO("collab", "peer %s listening on %s, run %s", dl_net_peer_id(net), dl_net_listen_address(net),
            a->net.run_id);
    if (dl_collab_start(net, &a->collab, &collab) || dl_state_donor_start(net, NULL, &donor)) goto done;
    rc = dl_collab_train_run(net, collab, donor, train, opt, layout, params, resume, backend, res);
done:
    dl_state_donor_stop(donor);
    if (collab) dl_collab_stop(collab);
    dl_net_stop(net);
    dl_run_files_stop(files);
    return rc;
}

dl_opt_config cli_train_opt_defaults(bool tiny, dl_opt_kind kind, int64_t max_steps) {
    /* The recipe lives with the optimizer (dl_opt_config_preset, docs/training.md). */
    return dl_opt_config_preset(tiny, kind, max_steps);
}
