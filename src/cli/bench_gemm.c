/* dedloc bench gemm: GFLOP/s of the transformer GEMM shapes through CLBlast,
 * with its built-in parameters and with the stored tuning. The same file
 * makes the benchmark program bench/bench_gemm, which adds on a CPU device
 * the same shapes through OpenBLAS's cblas_sgemm (bench/gemm_openblas.c,
 * DEDLOC_BENCH_OPENBLAS): that comparison is for us, not for the users of
 * the shipped binary, so it stays out of it. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/device.h"
#include "dedloc/util.h"

#ifdef DEDLOC_BENCH_OPENBLAS
#include "bench/gemm_openblas.h"
#define BENCH_GEMM_NAME "bench_gemm"
#else
#define BENCH_GEMM_NAME "dedloc bench gemm"
#endif

/* Square products, then ALBERT-large (sahajBERT) for 8 x 128 tokens: the
 * Q/K/V/output projections, the FFN up and down projections (weights stored
 * [out, in], hence B^T), and the attention context of 16 heads. */
static const dl_gemm_shape shapes[] = {
    {"square-512", 512, 512, 512, 1, false, false},
    {"square-1024", 1024, 1024, 1024, 1, false, false},
    {"square-2048", 2048, 2048, 2048, 1, false, false},
    {"attn-proj", 1024, 1024, 1024, 1, false, true},
    {"ffn-up", 1024, 4096, 1024, 1, false, true},
    {"ffn-down", 1024, 1024, 4096, 1, false, true},
    {"attn-batch", 128, 64, 128, 16, false, false},
};
enum { NSHAPES = sizeof shapes / sizeof *shapes };

static void help(FILE *out) {
    fprintf(out,
            "usage: " BENCH_GEMM_NAME " [--device D] [--json] [--repeat N] [--shapes LIST]\n\n"
            "GFLOP/s (median of N timed calls after one untimed call) of single-precision\n"
            "GEMM for transformer shapes, written MxNxK (C is MxN):\n");
    for (int i = 0; i < NSHAPES; i++)
        fprintf(out, "  %-12s %zu x %zux%zux%zu%s\n", shapes[i].name, shapes[i].batch,
                shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].trans_b ? " (B transposed)" : "");
    fprintf(out,
            "Columns: CLBlast with its built-in parameters (untuned), CLBlast with the\n"
            "parameters stored by 'dedloc tune' for this device (tuned, if any), and on a\n"
            "CPU device OpenBLAS on the same cores, with best CLBlast / OpenBLAS (these two\n"
            "only in the benchmark program build/bench_gemm, built with OpenBLAS).\n\n"
            "  --device D     device index or name part (see 'dedloc devices')\n"
            "  --repeat N     timed calls per shape and column (default 5)\n"
            "  --shapes LIST  comma-separated shape names (default: all)\n"
            "  --json         one JSON object instead of the table\n");
}

static bool shape_selected(const char *list, const char *name) {
    if (!list) return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        p += len + (end ? 1 : 0);
    }
    return false;
}

static double gflops(const dl_gemm_shape *s, double seconds) {
    return seconds > 0 ? dl_gemm_shape_flops(s) / seconds / 1e9 : 0;
}

int bench_gemm(int argc, char **argv) {
    const char *device_sel = NULL, *shape_list = NULL;
    int repeat = 5, json = 0;
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'}, {"repeat", required_argument, NULL, 'r'},
        {"shapes", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},         {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = cli_getopt_long(argc, argv, "d:r:s:jh", opts, "bench gemm")) != -1) {
        switch (c) {
        case 'd': device_sel = optarg; break;
        case 'r': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 1000) {
                fprintf(stderr, BENCH_GEMM_NAME ": --repeat takes 1..1000\n");
                return DL_EXIT_USAGE;
            }
            repeat = (int)v;
            break;
        }
        case 's': shape_list = optarg; break;
        case 'j': json = 1; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, BENCH_GEMM_NAME ": unexpected argument '%s'\n", argv[optind]);
        return DL_EXIT_USAGE;
    }
    bool selected[NSHAPES];
    int nselected = 0;
    for (int i = 0; i < NSHAPES; i++) nselected += selected[i] = shape_selected(shape_list, shapes[i].name);
    if (!nselected) {
        fprintf(stderr, BENCH_GEMM_NAME ": no shape matches '%s'; see --help\n", shape_list);
        return DL_EXIT_USAGE;
    }

    /* CLBlast keeps parameter overrides per OpenCL device for the process:
     * measure the built-in parameters first, then apply the stored ones. */
    dl_device *dev;
    if (dl_device_open_ex(device_sel, DL_OPEN_NO_TUNING | DL_OPEN_CLBLAST, &dev)) {
        fprintf(stderr, BENCH_GEMM_NAME ": %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    const dl_device_info *info = dl_device_get_info(dev);
    char tune_path[4096];
    dl_tune_path(info, tune_path, sizeof tune_path);
    bool have_tuning = dl_file_exists(tune_path);
    bool use_openblas = false;
#ifdef DEDLOC_BENCH_OPENBLAS
    use_openblas = info->is_cpu;
#endif
    if (!json) {
        printf("device: [%d] %s (%s), %s\n", info->index, info->name, info->platform,
               info->is_gpu ? "GPU" : info->is_cpu ? "CPU" : "other");
        printf("tuning: %s\n", have_tuning ? tune_path : "none stored (run 'dedloc tune')");
        printf("median of %d calls; the first call of each column compiles kernels, untimed\n\n",
               repeat);
    }
    double untuned[NSHAPES] = {0}, tuned[NSHAPES] = {0}, openblas[NSHAPES] = {0};
    int rc = 0;
    for (int i = 0; i < NSHAPES && !rc; i++) {
        if (!selected[i]) continue;
        double t;
        if (!(rc = dl_gemm_time(dev, &shapes[i], repeat, &t))) untuned[i] = gflops(&shapes[i], t);
    }
    if (!rc && have_tuning) {
        bool applied = false;
        if (dl_tune_apply(dev, &applied)) {
            fprintf(stderr, BENCH_GEMM_NAME ": stored tuning not applied: %s\n", dl_error());
            have_tuning = false;
        }
        for (int i = 0; i < NSHAPES && !rc && have_tuning; i++) {
            if (!selected[i]) continue;
            double t;
            if (!(rc = dl_gemm_time(dev, &shapes[i], repeat, &t))) tuned[i] = gflops(&shapes[i], t);
        }
    }
#ifdef DEDLOC_BENCH_OPENBLAS
    for (int i = 0; i < NSHAPES && !rc && use_openblas; i++) {
        if (!selected[i]) continue;
        double t;
        if (!(rc = dl_openblas_gemm_seconds(&shapes[i], repeat, &t))) openblas[i] = gflops(&shapes[i], t);
    }
#endif
    if (rc) {
        fprintf(stderr, BENCH_GEMM_NAME ": %s\n", dl_error());
        dl_device_close(dev);
        return DL_EXIT_FAILURE;
    }

    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "benchmark", "gemm");
        cJSON_AddNumberToObject(root, "device_index", info->index);
        cJSON_AddStringToObject(root, "device", info->name);
        cJSON_AddStringToObject(root, "platform", info->platform);
        cJSON_AddStringToObject(root, "driver", info->driver);
        if (have_tuning) cJSON_AddStringToObject(root, "tuning_file", tune_path);
        else cJSON_AddNullToObject(root, "tuning_file");
        cJSON_AddNumberToObject(root, "repeat", repeat);
        cJSON *list = cJSON_AddArrayToObject(root, "shapes");
        for (int i = 0; i < NSHAPES; i++) {
            if (!selected[i]) continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", shapes[i].name);
            cJSON_AddNumberToObject(o, "m", (double)shapes[i].m);
            cJSON_AddNumberToObject(o, "n", (double)shapes[i].n);
            cJSON_AddNumberToObject(o, "k", (double)shapes[i].k);
            cJSON_AddNumberToObject(o, "batch", (double)shapes[i].batch);
            cJSON_AddBoolToObject(o, "trans_a", shapes[i].trans_a);
            cJSON_AddBoolToObject(o, "trans_b", shapes[i].trans_b);
            cJSON_AddNumberToObject(o, "untuned_gflops", untuned[i]);
            if (have_tuning) cJSON_AddNumberToObject(o, "tuned_gflops", tuned[i]);
            else cJSON_AddNullToObject(o, "tuned_gflops");
            double best = tuned[i] > untuned[i] ? tuned[i] : untuned[i];
            if (use_openblas) {
                cJSON_AddNumberToObject(o, "openblas_gflops", openblas[i]);
                cJSON_AddNumberToObject(o, "best_over_openblas", openblas[i] > 0 ? best / openblas[i] : 0);
            } else {
                cJSON_AddNullToObject(o, "openblas_gflops");
                cJSON_AddNullToObject(o, "best_over_openblas");
            }
            cJSON_AddItemToArray(list, o);
        }
        char *text = cJSON_Print(root);
        if (text) printf("%s\n", text);
        free(text);
        cJSON_Delete(root);
    } else {
        printf("%-12s %-22s %10s %10s %10s %10s\n", "shape", "MxNxK", "untuned", "tuned",
               "OpenBLAS", "best/BLAS");
        for (int i = 0; i < NSHAPES; i++) {
            if (!selected[i]) continue;
            char dims[64], col_tuned[16] = "-", col_blas[16] = "-", col_ratio[16] = "-";
            if (shapes[i].batch > 1)
                snprintf(dims, sizeof dims, "%zu x %zux%zux%zu", shapes[i].batch, shapes[i].m,
                         shapes[i].n, shapes[i].k);
            else
                snprintf(dims, sizeof dims, "%zux%zux%zu%s", shapes[i].m, shapes[i].n,
                         shapes[i].k, shapes[i].trans_b ? " B^T" : "");
            if (have_tuning) snprintf(col_tuned, sizeof col_tuned, "%.1f", tuned[i]);
            if (use_openblas) {
                double best = tuned[i] > untuned[i] ? tuned[i] : untuned[i];
                snprintf(col_blas, sizeof col_blas, "%.1f", openblas[i]);
                if (openblas[i] > 0) snprintf(col_ratio, sizeof col_ratio, "%.2f", best / openblas[i]);
            }
            printf("%-12s %-22s %10.1f %10s %10s %10s\n", shapes[i].name, dims, untuned[i],
                   col_tuned, col_blas, col_ratio);
        }
        printf("\nGFLOP/s; tuned = parameters from 'dedloc tune', applied with "
               "CLBlastOverrideParameters\n");
    }
    dl_device_close(dev);
    return DL_EXIT_OK;
}
