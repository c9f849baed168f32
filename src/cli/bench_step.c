/* dedloc bench step: times forward + backward of one ALBERT micro-batch and
 * sets it beside the device's own SGEMM rate measured in the same run. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "dedloc/model.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc bench step [--model tiny|sahajbert|DIR] [--batch B] [--seq T]\n"
            "                         [--precision fp32|fp16|bf16] [--device D] [--warmup N]\n"
            "                         [--steps N] [--json]\n\n"
            "Times forward + backward (gradients accumulated on the device) of one\n"
            "micro-batch of B x T random tokens with 15%% MLM labels. Reports the\n"
            "median step time, tokens/s, the GEMM GFLOP/s the step achieves, its share of\n"
            "a 1024^3 SGEMM measured on the same device, and the device memory.\n\n"
            "  --model M    preset (tiny, sahajbert) or a HF model folder (default tiny)\n"
            "  --batch B    sequences per micro-batch (default 8)\n"
            "  --seq T      tokens per sequence (default 128)\n"
            "  --precision  storage precision (default fp32; fp16/bf16 halve the kept\n"
            "               activations, arithmetic stays fp32)\n"
            "  --warmup N   untimed steps first (default 1; the first compiles kernels)\n"
            "  --steps N    timed steps (default 3)\n"
            "  --json       one JSON object instead of the table\n"
            "Compare with PyTorch on the CPU: scripts/bench_pytorch_step.py.\n");
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

/* Seconds of one 1024^3 SGEMM (best of 5 after a warm-up call). */
static int sgemm_seconds(dl_device *dev, double *seconds) {
    const size_t n = 1024;
    dl_buffer a = {0}, b = {0}, c = {0};
    int rc = dl_buffer_alloc(dev, n * n * 4, &a);
    if (!rc) rc = dl_buffer_alloc(dev, n * n * 4, &b);
    if (!rc) rc = dl_buffer_alloc(dev, n * n * 4, &c);
    if (!rc) rc = dl_buffer_fill32(dev, &a, 0, n * n * 4, 0x3c000000u);
    if (!rc) rc = dl_buffer_fill32(dev, &b, 0, n * n * 4, 0x3c000000u);
    dl_gemm_args g = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .a = &a, .lda = n,
                      .b = &b, .ldb = n, .c = &c, .ldc = n, .batch_count = 1};
    double best = 1e30;
    for (int i = 0; !rc && i < 6; i++) {
        double t0 = dl_now();
        rc = dl_gemm(dev, &g);
        if (!rc) rc = dl_device_finish(dev);
        double t = dl_now() - t0;
        if (i > 0 && t < best) best = t;
    }
    if (a.mem) dl_buffer_free(dev, &a);
    if (b.mem) dl_buffer_free(dev, &b);
    if (c.mem) dl_buffer_free(dev, &c);
    *seconds = best;
    return rc;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_step(int argc, char **argv) {
    const char *model_name = "tiny", *device_sel = NULL, *precision_name = "fp32";
    dl_precision precision;
    int B = 8, T = 128, warmup = 1, steps = 3, json = 0;
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'}, {"batch", required_argument, NULL, 'b'},
        {"seq", required_argument, NULL, 't'},   {"device", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'}, {"steps", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {"precision", required_argument, NULL, 'p'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:b:t:d:w:s:p:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_name = optarg; break;
        case 'b': if (parse_positive(optarg, "--batch", &B)) return DL_EXIT_USAGE; break;
        case 't': if (parse_positive(optarg, "--seq", &T)) return DL_EXIT_USAGE; break;
        case 'd': device_sel = optarg; break;
        case 'w': if (parse_positive(optarg, "--warmup", &warmup)) return DL_EXIT_USAGE; break;
        case 's': if (parse_positive(optarg, "--steps", &steps)) return DL_EXIT_USAGE; break;
        case 'j': json = 1; break;
        case 'p': precision_name = optarg; break;
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
    dl_model *model = NULL;
    dl_batch batch = {0};
    double *times = dl_calloc((size_t)steps, sizeof *times);
    dl_param_layout layout;
    int rc = times ? dl_param_layout_build(&cfg, &layout) : -1;
    if (!rc && !params) {
        params = dl_malloc(layout.total * sizeof *params);
        rc = params ? dl_albert_init_params(&cfg, 1, params) : -1;
    }
    if (!rc) rc = dl_batch_alloc(&batch, B, T);
    if (!rc) {
        dl_rng rng;
        dl_rng_seed(&rng, 7);
        for (int i = 0; i < B * T; i++) {
            batch.input_ids[i] = 5 + (int32_t)dl_rng_below(&rng, (uint64_t)cfg.vocab_size - 5);
            batch.token_type_ids[i] = (i % T) >= T / 2;
            batch.attention_mask[i] = 1;
            if (dl_rng_uniform(&rng) < 0.15f) batch.labels[i] = batch.input_ids[i];
        }
        for (int b = 0; b < B; b++) batch.sentence_order_label[b] = (int32_t)dl_rng_below(&rng, 2);
    }
    if (!rc) rc = dl_device_open(device_sel, &dev);
    if (!rc) rc = dl_model_create(dev, &cfg, B, T, precision, &model);
    if (!rc) rc = dl_model_set_params(model, params);
    dl_losses losses = {0};
    for (int i = 0; !rc && i < warmup + steps; i++) {
        double t0 = dl_now();
        rc = dl_model_zero_grad(model);
        if (!rc) rc = dl_model_forward_backward(model, &batch, 1.0f, &losses);
        if (i >= warmup) times[i - warmup] = dl_now() - t0;
        if (!rc && !json)
            fprintf(stderr, "%s step %d: %.3f s, loss %.4f\n", i < warmup ? "warm-up" : "timed",
                    i < warmup ? i + 1 : i - warmup + 1, dl_now() - t0, losses.loss);
    }
    double gemm_s = 0;
    if (!rc) rc = sgemm_seconds(dev, &gemm_s);
    if (rc) {
        fprintf(stderr, "dedloc bench step: %s\n", dl_error());
    } else {
        qsort(times, (size_t)steps, sizeof *times, compare_double);
        double step_s = times[steps / 2];
        double flops = dl_albert_step_flops(&cfg, B, T, losses.masked_tokens);
        double gflops = flops / step_s / 1e9, gemm_gflops = 2.0 * 1024 * 1024 * 1024 / gemm_s / 1e9;
        double tokens_s = (double)B * T / step_s;
        double mem_mib = (double)dl_model_memory_bytes(model) / 1048576.0;
        double peak_mib = (double)dl_device_bytes_peak(dev) / 1048576.0;
        const dl_device_info *info = dl_device_get_info(dev);
        if (json) {
            printf("{\"bench\": \"step\", \"model\": \"%s\", \"device\": \"%s\", \"precision\": "
                   "\"%s\", \"batch\": %d, \"seq\": %d, \"parameters\": %zu, \"masked\": %d, "
                   "\"steps\": %d, \"step_s\": %.6f, \"tokens_per_s\": %.1f, \"gemm_flops\": %.6g, "
                   "\"gflops\": %.2f, \"sgemm1024_gflops\": %.2f, \"share_of_sgemm\": %.4f, "
                   "\"model_memory_bytes\": %zu, \"device_peak_bytes\": %zu}\n",
                   model_name, info->name, precision_name, B, T, layout.total,
                   losses.masked_tokens, steps, step_s, tokens_s, flops, gflops, gemm_gflops, gflops / gemm_gflops,
                   dl_model_memory_bytes(model), dl_device_bytes_peak(dev));
        } else {
            char desc[256];
            dl_albert_config_describe(&cfg, desc, sizeof desc);
            printf("model        %s (%s; %zu parameters)\n", model_name, desc, layout.total);
            printf("device       %s\n", info->name);
            printf("batch        %d x %d tokens, %d masked, %s storage\n", B, T,
                   losses.masked_tokens, precision_name);
            printf("step         %.3f s (median of %d)   %.1f tokens/s\n", step_s, steps,
                   tokens_s);
            printf("GEMM work    %.1f GFLOP per step   %.2f GFLOP/s achieved\n", flops / 1e9,
                   gflops);
            printf("SGEMM 1024^3 %.2f GFLOP/s on this device: the step reaches %.0f%%\n",
                   gemm_gflops, 100.0 * gflops / gemm_gflops);
            printf("memory       %.1f MiB held by the model, %.1f MiB device peak\n", mem_mib,
                   peak_mib);
        }
    }
    dl_model_free(model);
    if (dev) dl_device_close(dev);
    dl_batch_free(&batch);
    if (times) dl_param_layout_free(&layout);
    free(times);
    free(params);
    return rc ? DL_EXIT_FAILURE : DL_EXIT_OK;
}
