/* dedloc tune: a bounded search for CLBlast GEMM parameters for the shapes of
 * a model preset on one device. Exploration by CLBlast's own kernel tuner
 * (fast: it compiles only the GEMM kernel), then the best few candidates are
 * timed through the real routine on the preset's shapes against CLBlast's
 * built-in parameters; the winner, if it beats them, is stored in
 * dl_cache_dir()/clblast/<device key>.json and applied at every device open. */
#include <cjson/cJSON.h>
#include <clblast_c.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/gemm_timing.h"
#include "cli/tune_explore.h"
#include "dedloc/device.h"
#include "dedloc/util.h"

enum { MAX_CANDIDATES = 6, TIMING_REPEAT = 3 };

/* The preset's linear layers for 8 x 128 tokens (weights [out, in]: B^T). */
typedef struct tune_preset {
    const char *name;
    dl_gemm_shape shapes[4];
    int nshapes;
    size_t explore_m, explore_n, explore_k; /* the size the kernel tuner runs */
} tune_preset;

static const tune_preset presets[] = {
    {"sahajbert",
     {{"attn-proj", 1024, 1024, 1024, 1, false, true},
      {"ffn-up", 1024, 4096, 1024, 1, false, true},
      {"ffn-down", 1024, 1024, 4096, 1, false, true}},
     3, 512, 512, 512},
    {"tiny",
     {{"attn-proj", 1024, 128, 128, 1, false, true},
      {"ffn-up", 1024, 512, 128, 1, false, true},
      {"ffn-down", 1024, 128, 512, 1, false, true},
      {"mlm-decoder", 1024, 8000, 64, 1, false, true}},
     4, 256, 256, 256},
};

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
            "                       compilation\n"
            "  --no-tuner           skip clblast_tuner_xgemm; time built-in candidates\n");
}

/* Total median seconds of the preset's shapes with the current parameters. */
static int preset_seconds(dl_device *dev, const tune_preset *p, double *per_shape, double *total) {
    *total = 0;
    for (int i = 0; i < p->nshapes; i++) {
        if (dl_gemm_time(dev, &p->shapes[i], TIMING_REPEAT, &per_shape[i])) return -1;
        *total += per_shape[i];
    }
    return 0;
}

static int override_xgemm(dl_device *dev, const dl_xgemm_config *c) {
    const char *names[DL_XGEMM_PARAMS_MAX];
    for (size_t i = 0; i < c->count; i++) names[i] = c->names[i];
    CLBlastStatusCode st = CLBlastOverrideParameters(dl_device_get_info(dev)->device_id, "Xgemm",
                                                     CLBlastPrecisionSingle, c->count, names,
                                                     c->values);
    return st == CLBlastSuccess ? 0 : dl_fail("CLBlast refused the parameters (error %d)", (int)st);
}

static void describe(const dl_xgemm_config *c, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < c->count && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s=%zu", i ? " " : "", c->names[i],
                                 c->values[i]);
}

static int store(const dl_device_info *info, const tune_preset *p, const dl_xgemm_config *best,
                 const double *base, const double *tuned, double budget, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "format", 1);
    cJSON_AddStringToObject(root, "device", info->name);
    cJSON_AddStringToObject(root, "platform", info->platform);
    cJSON_AddStringToObject(root, "driver", info->driver);
    cJSON_AddStringToObject(root, "model", p->name);
    cJSON_AddNumberToObject(root, "budget_seconds", budget);
    cJSON_AddNumberToObject(root, "created_unix", (double)(long long)dl_wall_time());
    cJSON *shapes = cJSON_AddArrayToObject(root, "shapes");
    for (int i = 0; i < p->nshapes; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "name", p->shapes[i].name);
        cJSON_AddNumberToObject(s, "m", (double)p->shapes[i].m);
        cJSON_AddNumberToObject(s, "n", (double)p->shapes[i].n);
        cJSON_AddNumberToObject(s, "k", (double)p->shapes[i].k);
        cJSON_AddNumberToObject(s, "builtin_gflops", dl_gemm_shape_flops(&p->shapes[i]) / base[i] / 1e9);
        cJSON_AddNumberToObject(s, "tuned_gflops", dl_gemm_shape_flops(&p->shapes[i]) / tuned[i] / 1e9);
        cJSON_AddItemToArray(shapes, s);
    }
    cJSON *kernels = cJSON_AddArrayToObject(root, "kernels");
    cJSON *entry = cJSON_CreateObject();
    cJSON_AddStringToObject(entry, "kernel", "Xgemm");
    cJSON_AddNumberToObject(entry, "precision", 32);
    cJSON *params = cJSON_AddObjectToObject(entry, "parameters");
    for (size_t i = 0; i < best->count; i++)
        cJSON_AddNumberToObject(params, best->names[i], (double)best->values[i]);
    cJSON_AddItemToArray(kernels, entry);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return dl_fail("out of memory writing the tuning file");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/clblast", dl_cache_dir());
    int rc = dl_mkdirs(dir);
    if (!rc) rc = dl_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
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
    while ((c = getopt_long(argc, argv, "d:m:b:nh", opts, NULL)) != -1) {
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
    const tune_preset *preset = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(model, presets[i].name)) preset = &presets[i];
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

    double base[4], base_total, best_times[4], best_total;
    printf("built-in parameters:");
    fflush(stdout);
    double base_started = dl_now();
    if (preset_seconds(dev, preset, base, &base_total)) {
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
    memcpy(best_times, base, sizeof base);
    best_total = base_total;

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

    int best = -1;
    for (int i = 0; i < ncand; i++) {
        double t0 = dl_now();
        if (t0 + last_cost > deadline) {
            printf("budget reached: %d of %d candidates timed\n", i, ncand);
            break;
        }
        char desc[512];
        describe(&candidates[i], desc, sizeof desc);
        double times[4], total;
        if (override_xgemm(dev, &candidates[i]) || preset_seconds(dev, preset, times, &total)) {
            printf("  candidate %d failed: %s\n", i + 1, dl_error());
            dl_clear_error();
            continue;
        }
        last_cost = dl_now() - t0;
        printf("  candidate %d: %.2f x the built-in speed (%s)\n", i + 1, base_total / total, desc);
        fflush(stdout);
        if (total < best_total) {
            best_total = total;
            memcpy(best_times, times, sizeof times);
            best = i;
        }
    }

    int rc = DL_EXIT_OK;
    if (best < 0) {
        printf("no candidate beat CLBlast's built-in parameters; nothing stored");
        if (dl_file_exists(path)) printf(" (an earlier tuning stays in %s)", path);
        printf("\n");
    } else if (store(info, preset, &candidates[best], base, best_times, budget, path)) {
        fprintf(stderr, "dedloc tune: %s\n", dl_error());
        rc = DL_EXIT_FAILURE;
    } else {
        printf("stored %s\n", path);
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
