/* dedloc tune: a bounded search for CLBlast GEMM parameters for the shapes of
 * a model preset on one device. Exploration by CLBlast's own kernel tuner
 * (fast: it compiles only the GEMM kernel), then the best few candidates are
 * timed through the real routine on the preset's shapes against CLBlast's
 * built-in parameters; the winner, if it beats them, is stored in
 * dl_cache_dir()/clblast/<device key>.json and applied at every device open.
 * The search itself lives in the device module (src/device/tune_*.c); this
 * file parses the options, calls it and prints. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/device.h"
#include "dedloc/util.h"

enum { MAX_CANDIDATES = 6 };
/* Exploration shorter than this rarely lets clblast_tuner_xgemm verify a
 * single configuration on PoCL (30 s budgets verified none). */
#define TUNER_MIN_S 60.0

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc tune [--device D] [--model tiny|sahajbert] [--budget-seconds S]\n\n"
            "Searches CLBlast GEMM parameters for the matrix shapes of a model preset on one\n"
            "device, within about S seconds (default 300; a candidate started before the\n"
            "deadline is finished, so a cold run may overshoot by one candidate's time):\n"
            "  1. times the preset's shapes with CLBlast's built-in parameters;\n"
            "  2. runs CLBlast's kernel tuner (clblast_tuner_xgemm, Debian clblast-utils)\n"
            "     for about a third of the budget and keeps its fastest verified settings;\n"
            "  3. times those through the real GEMM routine on the preset's shapes.\n"
            "The best set is stored, if it beats the built-in one, in\n"
            "  <cache>/clblast/<device>.json   (cache: DEDLOC_CACHE_DIR or ~/.cache/dedloc)\n"
            "and every later device open applies it (CLBlastOverrideParameters). Compare\n"
            "with 'dedloc bench gemm'. DEDLOC_NO_TUNING=1 ignores stored parameters;\n"
            "deleting the file forgets them.\n\n"
            "  --device D           device index or name part (see 'dedloc devices')\n"
            "  --model M            tiny or sahajbert (default sahajbert)\n"
            "  --budget-seconds S   time bound, 30..86400 (default 300); on PoCL each\n"
            "                       candidate timed through the routine costs 10-20 s of\n"
            "                       compilation, so a useful budget there is at least 120 s\n"
            "                       (tiny) to 300 s (sahajbert); the run states the minimum\n"
            "                       for this device once the built-in timing is done\n"
            "  --no-tuner           skip clblast_tuner_xgemm; time built-in candidates\n\n"
            "The last line is always a verdict: stored, the built-in parameters are fastest,\n"
            "or the budget was too short (with the budget that would work).\n");
}

int cmd_tune(int argc, char **argv) {
    const char *device_sel = NULL, *model = "sahajbert";
    double budget = 300;
    bool use_tuner = true;
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'}, {"model", required_argument, NULL, 'm'},
        {"budget-seconds", required_argument, NULL, 'b'}, {"no-tuner", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},          {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "d:m:b:nh", opts, "tune")) != -1) {
        switch (c) {
        case 'd': device_sel = optarg; break;
        case 'm': model = optarg; break;
        case 'b': {
            char *end;
            budget = strtod(optarg, &end);
            if (*end || !(budget >= 30 && budget <= 86400)) {
                fprintf(stderr, "dedloc tune: --budget-seconds takes 30..86400\n");
                return DL_EXIT_USAGE;
            }
            break;
        }
        case 'n': use_tuner = false; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc tune: unexpected argument '%s'\n", argv[optind]);
        return DL_EXIT_USAGE;
    }
    const dl_tune_preset *preset = dl_tune_preset_find(model);
    if (!preset) {
        fprintf(stderr, "dedloc tune: unknown model '%s' (tiny, sahajbert)\n", model);
        return DL_EXIT_USAGE;
    }

    double started = dl_now(), deadline = started + budget;
    dl_device *dev;
    if (dl_device_open_ex(device_sel, DL_OPEN_NO_TUNING | DL_OPEN_CLBLAST, &dev)) {
        fprintf(stderr, "dedloc tune: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    const dl_device_info *info = dl_device_get_info(dev);
    char path[4096];
    dl_tune_path(info, path, sizeof path);
    printf("tuning CLBlast GEMM for '%s' on [%d] %s, budget %.0f s\n", preset->name, info->index,
           info->name, budget);

    double base[DL_TUNE_PRESET_SHAPES_MAX] = {0}, base_total, best_times[DL_TUNE_PRESET_SHAPES_MAX] = {0};
    printf("built-in parameters:");
    fflush(stdout);
    double base_started = dl_now();
    if (dl_tune_preset_seconds(dev, preset, base, &base_total)) {
        fprintf(stderr, "\ndedloc tune: %s\n", dl_error());
        dl_device_close(dev);
        return DL_EXIT_FAILURE;
    }
    for (int i = 0; i < preset->nshapes; i++)
        printf(" %s %.1f", preset->shapes[i].name,
               dl_gemm_shape_flops(&preset->shapes[i]) / base[i] / 1e9);
    printf(" GFLOP/s (%.0f s so far)\n", dl_now() - started);
    /* a candidate costs about what the built-in timing cost: compile + runs */
    double last_cost = dl_now() - base_started;
    /* What a budget must hold to time at least one candidate after the
     * tuner's third: what was spent so far, the exploration (at least
     * TUNER_MIN_S, for the tuner to verify anything) and one candidate. */
    double useful = dl_now() - started + last_cost * 1.5;
    if (use_tuner) useful = dl_now() - started + (last_cost > TUNER_MIN_S ? last_cost * 3 : TUNER_MIN_S + last_cost * 2);
    useful = 10 * ceil(useful / 10);
    printf("a useful budget on this device is at least %.0f s", useful);
    if (budget < useful) printf(" (this run's %.0f s is likely too short)", budget);
    printf("\n");
    memcpy(best_times, base, sizeof base);

    dl_xgemm_config candidates[MAX_CANDIDATES];
    int ncand = 0;
    if (use_tuner) {
        double explore = (deadline - dl_now()) / 3;
        if (explore < 10) explore = 10;
        printf("exploring with clblast_tuner_xgemm at %zux%zux%zu for %.0f s\n", preset->explore_m,
               preset->explore_n, preset->explore_k, explore);
        fflush(stdout);
        if (dl_tune_explore(info, preset->explore_m, preset->explore_n, preset->explore_k, explore,
                            candidates, 4, &ncand)) {
            fprintf(stderr, "dedloc tune: %s; timing built-in candidates instead\n", dl_error());
            ncand = 0;
        }
        for (int i = 0; i < ncand; i++) printf("  candidate %d: tuner %.1f GFLOP/s\n", i + 1,
                                                candidates[i].tuner_gflops);
    }
    if (ncand == 0) ncand = dl_tune_builtin_candidates(candidates, MAX_CANDIDATES);

    bool none_fits = dl_now() + last_cost > deadline; /* the search's own test for its first candidate */
    int best = dl_tune_time_candidates(dev, preset, candidates, ncand, deadline, last_cost, base_total,
                                       best_times, stdout);

    int rc = DL_EXIT_OK;
    if (best < 0 && none_fits) {
        printf("verdict: the budget ran out before any candidate could be timed; nothing stored. Run again with "
               "--budget-seconds %.0f or more", useful);
        if (dl_file_exists(path)) printf(" (an earlier tuning stays in %s)", path);
        printf("\n");
    } else if (best < 0) {
        printf("verdict: no candidate beat CLBlast's built-in parameters; nothing stored (a larger budget explores "
               "more)");
        if (dl_file_exists(path)) printf(" (an earlier tuning stays in %s)", path);
        printf("\n");
    } else if (dl_tune_store(info, preset, &candidates[best], base, best_times, budget, path)) {
        fprintf(stderr, "dedloc tune: %s\n", dl_error());
        rc = DL_EXIT_FAILURE;
    } else {
        printf("verdict: stored %s\n", path);
        for (int i = 0; i < preset->nshapes; i++)
            printf("  %-12s %zux%zux%zu  %.1f -> %.1f GFLOP/s\n", preset->shapes[i].name,
                   preset->shapes[i].m, preset->shapes[i].n, preset->shapes[i].k,
                   dl_gemm_shape_flops(&preset->shapes[i]) / base[i] / 1e9,
                   dl_gemm_shape_flops(&preset->shapes[i]) / best_times[i] / 1e9);
    }
    printf("tuning took %.0f s\n", dl_now() - started);
    dl_device_close(dev);
    return rc;
}
