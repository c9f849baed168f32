/* Timing one training step of the model (`dedloc bench step`): forward and
 * backward of a micro-batch of random tokens with 15% MLM labels, on the
 * device the caller opened. The figures, not their presentation, live here. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/util.h"

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Random token ids above the special ones, the second half of each sequence
 * as segment B, 15% of positions labelled for MLM, random sentence order. */
static void fill_random_batch(dl_batch *batch, const dl_albert_config *cfg, int B, int T) {
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    for (int i = 0; i < B * T; i++) {
        batch->input_ids[i] = 5 + (int32_t)dl_rng_below(&rng, (uint64_t)cfg->vocab_size - 5);
        batch->token_type_ids[i] = (i % T) >= T / 2;
        batch->attention_mask[i] = 1;
        if (dl_rng_uniform(&rng) < 0.15f) batch->labels[i] = batch->input_ids[i];
    }
    for (int b = 0; b < B; b++) batch->sentence_order_label[b] = (int32_t)dl_rng_below(&rng, 2);
}

/* Profiled steps after the timed ones: the table is copied out before the
 * model goes. */
static int profile_steps(dl_model *model, const dl_batch *batch, int steps, FILE *progress,
                         dl_step_timing *out) {
    dl_losses losses;
    int rc = dl_model_set_profiling(model, true);
    for (int i = 0; !rc && i < steps; i++) {
        if (progress) fprintf(progress, "profiled step %d of %d...\n", i + 1, steps);
        rc = dl_model_zero_grad(model);
        if (!rc) rc = dl_model_forward_backward(model, batch, 1.0f, &losses);
    }
    int count = 0;
    const dl_op_profile *table = dl_model_profile(model, &count);
    if (!rc && count > 0) {
        out->profile = dl_malloc((size_t)count * sizeof *out->profile);
        if (!out->profile) return -1;
        memcpy(out->profile, table, (size_t)count * sizeof *out->profile);
        out->profile_count = count;
        out->profiled_steps = steps;
    }
    dl_model_set_profiling(model, false);
    return rc;
}

int dl_model_time_step_with(dl_device *dev, const dl_albert_config *cfg, const float *params,
                            const dl_model_options *shape, int warmup, int steps, bool profile,
                            FILE *progress, dl_step_timing *out) {
    int batch_size = shape->max_batch, seq = shape->max_seq;
    if (batch_size < 1 || seq < 1 || steps < 1 || warmup < 0)
        return dl_fail("step timing: batch, seq and steps must be at least 1");
    dl_model *model = NULL;
    dl_batch batch = {0};
    float *initial = NULL;
    double *times = dl_calloc((size_t)steps, sizeof *times);
    dl_param_layout layout;
    int rc = times ? dl_param_layout_build(cfg, &layout) : -1;
    bool have_layout = rc == 0;
    if (!rc && !params) {
        initial = dl_malloc(layout.total * sizeof *initial);
        rc = initial ? dl_albert_init_params(cfg, 1, initial) : -1;
        params = initial;
    }
    if (!rc) rc = dl_batch_alloc(&batch, batch_size, seq);
    if (!rc) fill_random_batch(&batch, cfg, batch_size, seq);
    if (!rc) rc = dl_model_create_with(dev, cfg, shape, &model);
    if (!rc) rc = dl_model_set_params(model, params);
    dl_losses losses = {0};
    for (int i = 0; !rc && i < warmup + steps; i++) {
        /* Said before the step: the first one compiles every kernel, which
         * takes minutes at sahajBERT's size on a CPU. */
        if (progress && i < warmup) {
            fprintf(progress, "warm-up step %d of %d: running%s...\n", i + 1, warmup,
                    i == 0 ? " (compiles the device kernels on first use: minutes for a large model on a CPU)" : "");
            fflush(progress);
        }
        double t0 = dl_now();
        rc = dl_model_zero_grad(model);
        if (!rc) rc = dl_model_forward_backward(model, &batch, 1.0f, &losses);
        if (i >= warmup) times[i - warmup] = dl_now() - t0;
        if (!rc && progress)
            fprintf(progress, "%s step %d: %.3f s, loss %.4f\n", i < warmup ? "warm-up" : "timed",
                    i < warmup ? i + 1 : i - warmup + 1, dl_now() - t0, losses.loss);
    }
    if (!rc) {
        qsort(times, (size_t)steps, sizeof *times, compare_double);
        out->step_seconds = times[steps / 2];
        out->masked_tokens = losses.masked_tokens;
        out->flops = dl_albert_step_flops(cfg, batch_size, seq, losses.masked_tokens);
        out->parameters = layout.total;
        out->model_memory_bytes = dl_model_memory_bytes(model);
        snprintf(out->compute, sizeof out->compute, "%s", dl_model_compute_name(model));
        if (profile) rc = profile_steps(model, &batch, steps, progress, out);
    }
    dl_model_free(model);
    dl_batch_free(&batch);
    if (have_layout) dl_param_layout_free(&layout);
    free(times);
    free(initial);
    return rc;
}

int dl_model_time_step(dl_device *dev, const dl_albert_config *cfg, const float *params, int batch_size,
                       int seq, dl_precision precision, int warmup, int steps, FILE *progress,
                       dl_step_timing *out) {
    dl_model_options shape = {.max_batch = batch_size, .max_seq = seq, .precision = precision};
    return dl_model_time_step_with(dev, cfg, params, &shape, warmup, steps, false, progress, out);
}

int dl_model_profile_step(dl_device *dev, const dl_albert_config *cfg, const float *params, int batch_size,
                          int seq, dl_precision precision, int warmup, int steps, FILE *progress,
                          dl_step_timing *out) {
    dl_model_options shape = {.max_batch = batch_size, .max_seq = seq, .precision = precision};
    return dl_model_time_step_with(dev, cfg, params, &shape, warmup, steps, true, progress, out);
}
