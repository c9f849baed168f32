/* The search behind `dedloc tune`: the model presets' GEMM shapes, timing
 * them with the parameters in force, trying candidate Xgemm parameter sets
 * within a time budget, and storing the winner where dl_tune_apply (tune.c)
 * finds it at every device open. Candidates come from tune_explore.c. */
#include <cjson/cJSON.h>
#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/device.h"
#include "dedloc/util.h"

enum { TIMING_REPEAT = 3 };

/* The preset's linear layers for 8 x 128 tokens (weights [out, in]: B^T). */
static const dl_tune_preset presets[] = {
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

const dl_tune_preset *dl_tune_preset_find(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(name, presets[i].name)) return &presets[i];
    return NULL;
}

int dl_tune_preset_seconds(dl_device *dev, const dl_tune_preset *p, double *per_shape, double *total) {
    *total = 0;
    for (int i = 0; i < p->nshapes; i++) {
        if (dl_gemm_time(dev, &p->shapes[i], TIMING_REPEAT, &per_shape[i])) return -1;
        *total += per_shape[i];
    }
    return 0;
}

int dl_tune_override_xgemm(dl_device *dev, const dl_xgemm_config *c) {
    const char *names[DL_XGEMM_PARAMS_MAX];
    for (size_t i = 0; i < c->count; i++) names[i] = c->names[i];
    CLBlastStatusCode st = CLBlastOverrideParameters(dl_device_get_info(dev)->device_id, "Xgemm",
                                                     CLBlastPrecisionSingle, c->count, names,
                                                     c->values);
    return st == CLBlastSuccess ? 0 : dl_fail("CLBlast refused the parameters (error %d)", (int)st);
}

void dl_xgemm_config_describe(const dl_xgemm_config *c, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < c->count && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s=%zu", i ? " " : "", c->names[i],
                                 c->values[i]);
}

int dl_tune_time_candidates(dl_device *dev, const dl_tune_preset *p, const dl_xgemm_config *candidates,
                            int ncand, double deadline, double last_cost, double base_total,
                            double *best_times, FILE *progress) {
    int best = -1;
    double best_total = base_total;
    for (int i = 0; i < ncand; i++) {
        double t0 = dl_now();
        if (t0 + last_cost > deadline) {
            if (progress) fprintf(progress, "budget reached: %d of %d candidates timed\n", i, ncand);
            break;
        }
        char desc[512];
        dl_xgemm_config_describe(&candidates[i], desc, sizeof desc);
        double times[DL_TUNE_PRESET_SHAPES_MAX], total;
        if (dl_tune_override_xgemm(dev, &candidates[i]) || dl_tune_preset_seconds(dev, p, times, &total)) {
            if (progress) fprintf(progress, "  candidate %d failed: %s\n", i + 1, dl_error());
            dl_clear_error();
            continue;
        }
        last_cost = dl_now() - t0;
        if (progress) {
            fprintf(progress, "  candidate %d: %.2f x the built-in speed (%s)\n", i + 1, base_total / total, desc);
            fflush(progress);
        }
        if (total < best_total) {
            best_total = total;
            memcpy(best_times, times, sizeof times);
            best = i;
        }
    }
    return best;
}

int dl_tune_store(const dl_device_info *info, const dl_tune_preset *p, const dl_xgemm_config *best,
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
