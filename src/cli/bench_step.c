/* dedloc bench step: times forward + backward of one ALBERT micro-batch and
 * sets it beside the device's own SGEMM rate measured in the same run. The
 * timing is the library's (dl_model_time_step, dl_gemm_square_seconds); this
 * file parses the options, calls them and prints. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/model.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc bench step [--model tiny|sahajbert|DIR] [--batch B] [--seq T]\n"
            "                         [--precision fp32|fp16|bf16] [--device D] [--warmup N]\n"
            "                         [--steps N] [--recompute] [--profile] [--json]\n\n"
            "Times forward + backward (gradients accumulated on the device) of one\n"
            "micro-batch of B x T random tokens with 15%% MLM labels. Reports the\n"
            "median step time, tokens/s, the GEMM GFLOP/s the step achieves, its share of\n"
            "a 1024^3 SGEMM measured on the same device, and the device memory.\n\n"
            "  --model M    preset (tiny, sahajbert) or a HF model folder (default tiny)\n"
            "  --batch B    sequences per micro-batch (default 8)\n"
            "  --seq T      tokens per sequence (default 128)\n"
            "  --precision  storage precision (default fp32; fp16/bf16 halve the kept\n"
            "               activations; fp16 runs the GEMMs in half where the device\n"
            "               has cl_khr_fp16, other arithmetic stays fp32)\n"
            "  --warmup N   untimed steps first (default 1; the first compiles kernels)\n"
            "  --steps N    timed steps (default 3)\n"
            "  --recompute  keep only each layer's input in the forward pass and recompute\n"
            "               its activations in the backward pass (less memory, more time)\n"
            "  --profile    after the timed steps, run as many again with every op timed\n"
            "               on its own (the queue drained around it) and print where the\n"
            "               step's time goes, per kernel and GEMM kind\n"
            "  --json       one JSON object instead of the table\n"
            "Compare with PyTorch on the CPU: scripts/bench_pytorch_step.py.\n");
}

static int compare_op_seconds(const void *a, const void *b) {
    double x = ((const dl_op_profile *)a)->seconds, y = ((const dl_op_profile *)b)->seconds;
    return (x < y) - (x > y);
}

static double profile_total(const dl_step_timing *st) {
    double total = 0;
    for (int i = 0; i < st->profile_count; i++) total += st->profile[i].seconds;
    return total;
}

/* Largest share first; seconds and calls per step. */
static void print_profile_table(dl_step_timing *st) {
    qsort(st->profile, (size_t)st->profile_count, sizeof *st->profile, compare_op_seconds);
    double n = st->profiled_steps, total = profile_total(st);
    printf("\nper-op profile (%d steps, every op timed alone; %.3f s per step in ops)\n",
           st->profiled_steps, total / n);
    printf("%-34s %10s %7s %8s\n", "op", "s/step", "share", "calls");
    for (int i = 0; i < st->profile_count; i++) {
        const dl_op_profile *e = &st->profile[i];
        printf("%-34s %10.4f %6.1f%% %8.0f\n", e->name, e->seconds / n,
               total > 0 ? 100.0 * e->seconds / total : 0, (double)e->calls / n);
    }
}

/* A second JSON line after the step's. */
static void print_profile_json(dl_step_timing *st) {
    qsort(st->profile, (size_t)st->profile_count, sizeof *st->profile, compare_op_seconds);
    double n = st->profiled_steps;
    printf("{\"bench\": \"step_profile\", \"steps\": %d, \"ops\": [", st->profiled_steps);
    for (int i = 0; i < st->profile_count; i++)
        printf("%s{\"op\": \"%s\", \"s_per_step\": %.6f, \"calls_per_step\": %.1f}", i ? ", " : "",
               st->profile[i].name, st->profile[i].seconds / n, (double)st->profile[i].calls / n);
    printf("]}\n");
}

static int parse_positive(const char *text, const char *what, int *out) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || v < 0 || v > 1 << 20) {
        fprintf(stderr, "dedloc bench step: %s '%s' is not a count\n", what, text);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int bench_step(int argc, char **argv) {
    const char *model_name = "tiny", *device_sel = NULL, *precision_name = "fp32";
    dl_precision precision;
    int B = 8, T = 128, warmup = 1, steps = 3, json = 0, profile = 0, recompute = 0;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"batch", required_argument, NULL, 'b'},
        {"seq", required_argument, NULL, 't'},   {"device", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'}, {"steps", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {"precision", required_argument, NULL, 'p'}, {"profile", no_argument, NULL, 'P'},
        {"recompute", no_argument, NULL, 'R'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = cli_getopt_long(argc, argv, "m:b:t:d:w:s:p:jh", opts, "bench step")) != -1) {
        switch (c) {
        case 'm': model_name = optarg; break;
        case 'b': if (parse_positive(optarg, "--batch", &B)) return DL_EXIT_USAGE; break;
        case 't': if (parse_positive(optarg, "--seq", &T)) return DL_EXIT_USAGE; break;
        case 'd': device_sel = optarg; break;
        case 'w': if (parse_positive(optarg, "--warmup", &warmup)) return DL_EXIT_USAGE; break;
        case 's': if (parse_positive(optarg, "--steps", &steps)) return DL_EXIT_USAGE; break;
        case 'j': json = 1; break;
        case 'p': precision_name = optarg; break;
        case 'P': profile = 1; break;
        case 'R': recompute = 1; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc || B < 1 || T < 1 || steps < 1) {
        fprintf(stderr, "dedloc bench step: batch, seq and steps must be at least 1\n");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    if (dl_precision_parse(precision_name, &precision)) {
        fprintf(stderr, "dedloc bench step: %s\n", dl_error());
        return DL_EXIT_USAGE;
    }
    dl_albert_config cfg;
    float *params = NULL;
    if (dl_albert_config_preset(model_name, &cfg)) {
        dl_clear_error();
        if (dl_albert_load_hf(model_name, &cfg, &params)) {
            fprintf(stderr, "dedloc bench step: --model %s is neither a preset (tiny, sahajbert) "
                            "nor a HF model folder: %s\n", model_name, dl_error());
            return DL_EXIT_USAGE;
        }
    }
    dl_device *dev = NULL;
    dl_step_timing st = {0};
    int rc = dl_device_open(device_sel, &dev);
    dl_model_options shape = {.max_batch = B, .max_seq = T, .precision = precision,
                              .recompute = recompute != 0};
    size_t base_bytes = dev ? dl_device_bytes_in_use(dev) : 0;
    if (!rc)
        rc = dl_model_time_step_with(dev, &cfg, params, &shape, warmup, steps, profile != 0,
                                     json ? NULL : stderr, &st);
    double gemm_s = 0;
    if (!rc) rc = dl_gemm_square_seconds(dev, 1024, &gemm_s);
    if (rc) {
        fprintf(stderr, "dedloc bench step: %s\n", dl_error());
    } else {
        double step_s = st.step_seconds;
        double flops = st.flops;
        double gflops = flops / step_s / 1e9, gemm_gflops = 2.0 * 1024 * 1024 * 1024 / gemm_s / 1e9;
        double tokens_s = (double)B * T / step_s;
        double mem_mib = (double)st.model_memory_bytes / 1048576.0;
        size_t peak = dl_device_bytes_peak(dev) - base_bytes;
        double peak_mib = (double)peak / 1048576.0;
        dl_model_memory est = {0};
        const dl_device_info *info = dl_device_get_info(dev);
        if (dl_model_fp16_compute(info, precision, &shape.fp16_compute_elem) == 0)
            dl_model_memory_estimate(&cfg, &shape, &est);
        if (json) {
            printf("{\"bench\": \"step\", \"model\": \"%s\", \"device\": \"%s\", \"precision\": "
                   "\"%s\", \"compute\": \"%s\", \"batch\": %d, \"seq\": %d, \"parameters\": %zu, \"masked\": %d, "
                   "\"steps\": %d, \"step_s\": %.6f, \"tokens_per_s\": %.1f, \"gemm_flops\": %.6g, "
                   "\"gflops\": %.2f, \"sgemm1024_gflops\": %.2f, \"share_of_sgemm\": %.4f, "
                   "\"model_memory_bytes\": %zu, \"device_peak_bytes\": %zu, \"recompute\": %s, "
                   "\"estimate_bytes\": %zu, \"activation_bytes_per_layer\": %zu}\n",
                   model_name, info->name, precision_name, st.compute, B, T, st.parameters,
                   st.masked_tokens, steps, step_s, tokens_s, flops, gflops, gemm_gflops, gflops / gemm_gflops,
                   st.model_memory_bytes, peak, recompute ? "true" : "false", est.total,
                   est.per_layer);
            if (st.profile_count) print_profile_json(&st);
        } else {
            char desc[256];
            dl_albert_config_describe(&cfg, desc, sizeof desc);
            printf("model        %s (%s; %zu parameters)\n", model_name, desc, st.parameters);
            printf("device       %s\n", info->name);
            printf("batch        %d x %d tokens, %d masked, %s storage, %s compute\n", B, T,
                   st.masked_tokens, precision_name, st.compute);
            printf("step         %.3f s (median of %d)   %.1f tokens/s\n", step_s, steps,
                   tokens_s);
            printf("GEMM work    %.1f GFLOP per step   %.2f GFLOP/s achieved\n", flops / 1e9,
                   gflops);
            printf("SGEMM 1024^3 %.2f GFLOP/s on this device: the step reaches %.0f%%\n",
                   gemm_gflops, 100.0 * gflops / gemm_gflops);
            printf("memory       %.1f MiB held by the model, %.1f MiB allocated at the peak of the "
                   "step%s\n", mem_mib, peak_mib, recompute ? " (recompute)" : "");
            printf("             %.1f MiB of activations per layer application, %.1f MiB for "
                   "weights and gradients\n", (double)est.per_layer / 1048576.0,
                   (double)(est.parameters + est.gradients) / 1048576.0);
            if (st.profile_count) print_profile_table(&st);
        }
    }
    if (dev) dl_device_close(dev);
    free(st.profile);
    free(params);
    return rc ? DL_EXIT_FAILURE : DL_EXIT_OK;
}
