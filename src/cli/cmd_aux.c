/* dedloc aux: an auxiliary peer of a collaboration. It runs on the CPU
 * without a device, contributes no gradients (weight 0), takes a share of
 * the aggregation in every round and serves the training state it
 * downloads from the trainers to newcomers. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "cli/swarm_args.h"
#include "dedloc/collab.h"
#include "dedloc/model.h"
#include "dedloc/train.h"
#include "dedloc/util.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc aux --run-id ID [options]\n\n"
            "An auxiliary peer: no device and no gradient of its own. It joins every\n"
            "averaging round of the collaboration with weight 0 and aggregates a share of\n"
            "the gradients (its bandwidth is what it brings), and it downloads the\n"
            "training state from the trainers and serves it to peers that join.\n\n"
            "  --model M            tiny (default), sahajbert or a config.json: the model the run trains\n"
            "  --seed K             seed of the run's initial weights (0)\n"
            "  --target-batch N     the collective batch (tiny 32, otherwise 4096)\n"
            "  --max-steps S        leave after this epoch (tiny 300, otherwise 125000)\n"
            "  --state-every N      download the state every N epochs (1)\n"
            "  --log FILE           JSON lines: one per round, and state downloads\n"
            "  --quiet              no progress line\n\n");
    cli_swarm_help(out);
    fprintf(out, "\nSIGINT / SIGTERM leave cleanly.\n");
}

int cmd_aux(int argc, char **argv) {
    enum { A_MODEL = 256, A_SEED, A_TARGET, A_STEPS, A_LOG, A_QUIET };
    static const struct option own[] = {
        {"model", required_argument, NULL, A_MODEL}, {"seed", required_argument, NULL, A_SEED},
        {"target-batch", required_argument, NULL, A_TARGET}, {"max-steps", required_argument, NULL, A_STEPS},
        {"log", required_argument, NULL, A_LOG}, {"quiet", no_argument, NULL, A_QUIET},
        {"help", no_argument, NULL, 'h'}};
    enum { N_OWN = sizeof own / sizeof own[0] };
    struct option all[N_OWN + CLI_SWARM_MAX_OPTS + 1];
    memcpy(all, own, sizeof own);
    size_t n_all = N_OWN;
    for (const struct option *so = cli_swarm_options(); so->name && n_all < N_OWN + CLI_SWARM_MAX_OPTS; so++)
        all[n_all++] = *so;
    memset(&all[n_all], 0, sizeof all[n_all]);

    struct cli_swarm_args sw;
    cli_swarm_args_default(&sw);
    const char *model = "tiny", *log = NULL;
    long long seed = 0, target = 0, steps = 0;
    bool quiet = false;
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", all, "aux")) != -1) {
        int r = cli_swarm_option(&sw, c, optarg, "aux");
        if (r < 0) return DL_EXIT_USAGE;
        if (r == 0) continue;
        char *end = NULL;
        switch (c) {
        case A_MODEL: model = optarg; break;
        case A_SEED: seed = strtoll(optarg, &end, 10); break;
        case A_TARGET: target = strtoll(optarg, &end, 10); break;
        case A_STEPS: steps = strtoll(optarg, &end, 10); break;
        case A_LOG: log = optarg; break;
        case A_QUIET: quiet = true; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
        if (end && (*end || end == optarg || strtoll(optarg, NULL, 10) < 0)) {
            fprintf(stderr, "dedloc aux: bad number '%s'\n", optarg);
            return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc aux: unexpected argument '%s'; see 'dedloc aux --help'\n", argv[optind]);
        return DL_EXIT_USAGE;
    }
    const char *model_json = NULL;
    if (sw.manifest_path) {
        if (strcmp(model, "tiny") || seed || target || steps) {
            fprintf(stderr, "dedloc aux: --model, --seed, --target-batch and --max-steps come from the manifest\n");
            return DL_EXIT_USAGE;
        }
        if (cli_swarm_load_manifest(&sw, NULL, "aux") || cli_swarm_check_token(&sw, "aux") ||
            cli_swarm_load_invite(&sw, "aux")) {
            cli_swarm_args_free(&sw);
            return DL_EXIT_USAGE;
        }
        model = sw.manifest.model_preset;
        model_json = sw.manifest.model_config_json;
        seed = sw.manifest.seed;
        target = sw.manifest.target_batch;
        steps = sw.manifest.max_steps;
    }
    bool tiny = !strcmp(model, "tiny");
    if (target <= 0) target = tiny ? 32 : 4096;
    if (steps <= 0) steps = tiny ? 300 : 125000;
    if (cli_swarm_finish(&sw, "aux", (double)target)) {
        cli_swarm_args_free(&sw);
        return DL_EXIT_USAGE;
    }
    sw.collab.aux = true;

    int exit_code = DL_EXIT_FAILURE;
    dl_albert_config cfg;
    dl_param_layout ml = {0};
    dl_train_layout layout = {0};
    float *params = NULL;
    if (model_json) {
        if (dl_albert_config_parse(model_json, strlen(model_json), "the manifest's model", &cfg)) goto fail;
    } else if (dl_albert_config_preset(model, &cfg) != 0) {
        dl_clear_error();
        if (dl_albert_config_load(model, &cfg)) goto fail;
    }
    if (dl_param_layout_build(&cfg, &ml) || dl_train_layout_from_model(&ml, &layout)) goto fail;
    params = dl_malloc(dl_mul_size(layout.total, sizeof(float)));
    /* The run's initial weights, so that the aux peer serves epoch 0 too. */
    if (!params || dl_albert_init_params(&cfg, (uint64_t)seed, params)) goto fail;
    dl_opt_config opt = dl_opt_config_sahajbert();
    sw.train.base.target_batch = target;
    sw.train.base.max_steps = steps;
    /* Local-steps mode: the sync target counts inner steps of the manifest's micro-batch. */
    if (sw.has_manifest) sw.train.sync_micro_batch = sw.manifest.micro_batch;
    sw.train.base.log_path = log;
    sw.train.base.progress = quiet ? NULL : stderr;
    sw.train.base.stop = &stop_flag;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    struct dl_collab_train_result res;
    if (cli_swarm_run(&sw, &sw.train, &opt, &layout, params, NULL, NULL, &res)) goto fail;
    fprintf(stderr, "dedloc aux: %s at epoch %" PRId64 "; %" PRId64 " rounds, %" PRId64 " failed, %" PRId64
            " state downloads\n", res.base.interrupted ? "stopped" : "done", res.base.steps, res.rounds_ok,
            res.rounds_failed, res.state_downloads);
    exit_code = DL_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "dedloc aux: %s\n", dl_error());
done:
    free(params);
    dl_train_layout_free(&layout);
    dl_param_layout_free(&ml);
    cli_swarm_args_free(&sw);
    return exit_code;
}
