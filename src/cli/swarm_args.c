/* The swarm options shared by `dedloc train` and `dedloc aux`, and the
 * services around the step loop. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli/swarm_args.h"
#include "collab/wirecodec.h"
#include "dedloc/util.h"

enum {
    S_RUN = CLI_SWARM_OPT_BASE, S_LISTEN, S_ANNOUNCE, S_INITIAL, S_IDENTITY, S_CLIENT, S_MAXUP, S_BW, S_NODHT,
    S_DHTBOOT, S_EXPIRY, S_LOCAL, S_MINPEERS, S_SHARD, S_COMP, S_DEADLINE, S_JOINWAIT, S_STATE_EVERY, S_LINGER,
    S_AGG, S_TAU, S_CLIPIT, S_CLIPBAN, S_NAME, S_MANIFEST, S_TOKEN, S_DELAY, S_CORRUPT, S_ATTACK, S_LOG_BATCHES,
};

static const struct option swarm_opts[] = {
    {"run-id", required_argument, NULL, S_RUN}, {"listen", required_argument, NULL, S_LISTEN},
    {"announce", required_argument, NULL, S_ANNOUNCE}, {"initial-peers", required_argument, NULL, S_INITIAL},
    {"identity", required_argument, NULL, S_IDENTITY}, {"client-mode", no_argument, NULL, S_CLIENT},
    {"max-upload", required_argument, NULL, S_MAXUP}, {"bandwidth", required_argument, NULL, S_BW},
    {"no-dht", no_argument, NULL, S_NODHT}, {"dht-bootstrap", required_argument, NULL, S_DHTBOOT},
    {"expiry", required_argument, NULL, S_EXPIRY}, {"local-batch", required_argument, NULL, S_LOCAL},
    {"min-peers", required_argument, NULL, S_MINPEERS}, {"data-shard", required_argument, NULL, S_SHARD},
    {"compression", required_argument, NULL, S_COMP}, {"round-deadline", required_argument, NULL, S_DEADLINE},
    {"join-wait", required_argument, NULL, S_JOINWAIT}, {"state-every", required_argument, NULL, S_STATE_EVERY},
    {"linger", required_argument, NULL, S_LINGER}, {"aggregation", required_argument, NULL, S_AGG},
    {"clip-tau", required_argument, NULL, S_TAU}, {"clip-iterations", required_argument, NULL, S_CLIPIT},
    {"clip-ban-rounds", required_argument, NULL, S_CLIPBAN}, {"name", required_argument, NULL, S_NAME},
    {"manifest", required_argument, NULL, S_MANIFEST}, {"token", required_argument, NULL, S_TOKEN},
    {"delay-update", no_argument, NULL, S_DELAY},
#ifdef DEDLOC_TEST_HOOKS
    {"test-corrupt-at-step", required_argument, NULL, S_CORRUPT},
    {"test-attack", required_argument, NULL, S_ATTACK},
    {"test-log-batches", no_argument, NULL, S_LOG_BATCHES},
#endif
    {0, 0, 0, 0}};

const struct option *cli_swarm_options(void) { return swarm_opts; }

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

static int num(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

int cli_swarm_option(struct cli_swarm_args *a, int c, const char *arg, const char *cmd) {
    if (c < CLI_SWARM_OPT_BASE || c > S_LOG_BATCHES) return 1;
    a->any = true;
    double v = 0;
    int bad = 0;
    /* What a manifest decides may not be given beside it. */
    if (c == S_RUN || c == S_COMP || c == S_AGG || c == S_TAU || c == S_CLIPIT || c == S_CLIPBAN)
        a->run_option_given = swarm_opts[c - CLI_SWARM_OPT_BASE].name;
    switch (c) {
    case S_RUN: a->net.run_id = arg; break;
    case S_LISTEN: a->net.listen = arg; break;
    case S_ANNOUNCE: a->net.announce = arg; break;
    case S_INITIAL: a->net.initial_peers = arg; break;
    case S_IDENTITY: a->net.identity_path = arg; break;
    case S_CLIENT: a->net.client_mode = a->collab.client_mode = true; break;
    case S_MAXUP: bad = num(arg, 0.001, 1e6, &a->net.max_upload_mbit); break;
    case S_BW: bad = num(arg, 0, 1e6, &v); a->net.bandwidth_mbit = a->collab.bandwidth_mbit = v; break;
    case S_NODHT: a->net.use_dht = false; break;
    case S_DHTBOOT: a->net.dht_bootstrap = arg; a->net.use_dht = true; break;
    case S_EXPIRY: bad = num(arg, 0.5, 86400, &a->net.expiry_s); break;
    case S_LOCAL: bad = num(arg, 1, 1e12, &v); a->train.local_batch = (int64_t)v; break;
    case S_MINPEERS: bad = num(arg, 1, DL_AVG_MAX_MEMBERS, &v); a->train.min_peers = (size_t)v; break;
    case S_SHARD: {
        long i, k;
        char tail;
        if (sscanf(arg, "%ld/%ld%c", &i, &k, &tail) != 2 || k < 1 || i < 0 || i >= k || k > 4096) bad = 1;
        a->train.shard_index = i;
        a->train.shard_count = k;
        break;
    }
    case S_COMP: bad = dl_codec_from_name(arg, &a->train.compression); break;
    case S_DEADLINE: bad = num(arg, 1, 86400, &a->train.round_deadline_s); break;
    case S_JOINWAIT: bad = num(arg, 0, 86400, &a->train.join_wait_s); break;
    case S_STATE_EVERY: bad = num(arg, 1, 1e9, &v); a->train.state_every = (int64_t)v; break;
    case S_LINGER: bad = num(arg, 0, 3600, &a->train.linger_s); break;
    case S_AGG: bad = dl_aggregation_from_name(arg, &a->train.aggregation); break;
    case S_TAU: bad = num(arg, 1e-30, 1e30, &a->train.clip_tau); break;
    case S_CLIPIT: bad = num(arg, 1, 1000, &v); a->train.clip_iterations = (int)v; break;
    case S_CLIPBAN: bad = num(arg, 0, 1e6, &v); a->collab.clip_ban_rounds = (int)v; break;
    case S_NAME: a->train.display_name = arg; bad = strlen(arg) >= 64; break;
    case S_MANIFEST: a->manifest_path = arg; break;
    case S_TOKEN: a->net.token_path = arg; break;
    case S_DELAY: a->train.delay_update = true; break;
    case S_CORRUPT: bad = num(arg, 1, 1e12, &v); a->train.corrupt_at_step = (int64_t)v; break;
    case S_LOG_BATCHES: a->train.test_log_batches = true; break;
    case S_ATTACK:
        /* "none" is the default, not an attack to ask for */
        bad = dl_test_attack_from_name(arg, &a->train.test_attack) || a->train.test_attack == DL_TEST_ATTACK_NONE;
        break;
    default: return 1;
    }
    if (bad) {
        fprintf(stderr, "dedloc %s: bad value '%s' for --%s\n", cmd, arg, swarm_opts[c - CLI_SWARM_OPT_BASE].name);
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
            "  --compression C      gradient codec on the wire: none (default), fp16, uint8\n"
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
            "  --linger S           after the last step keep serving the state S seconds (2)\n"
            "  --delay-update       average each step's gradient while computing the next step's\n"
            "                       micro-batches (faster on slow links; their gradients are then one\n"
            "                       step stale; weights stay identical on every peer)\n");
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
    if (dl_net_start(&a->net, &net)) return -1;
    if (a->has_manifest &&
        dl_run_files_serve(net, &a->manifest, a->tokenizer_bytes, a->tokenizer_size, &files))
        goto done;
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
    dl_opt_config opt = dl_opt_config_sahajbert();
    opt.kind = kind;
    /* tiny + LAMB: 0.1. LAMB scales each tensor's step to its norm, and
     * tensors that start at zero (biases) move by about the rate per step,
     * so a run of a few hundred steps needs a large rate to move at all:
     * in 60 steps of 32 samples 0.005 moved the loss 9.73 -> 9.60, 0.1
     * moves it to 8.92; over 300 steps (scripts/demo.sh) it ends where 0.05
     * does, without climbing back (docs/training.md has the numbers).
     * AdamW's rate is absolute: tiny keeps 0.005 there. */
    if (tiny) opt.lr = kind == DL_OPT_LAMB ? 0.1 : 0.005;
    opt.weight_decay = 0.01;
    opt.max_grad_norm = 1.0;
    opt.total_steps = tiny ? max_steps : 125000;
    opt.warmup_steps = tiny ? max_steps / 10 : 5000;
    if (kind == DL_OPT_ADAMW) opt.eps = 1e-8;
    return opt;
}
