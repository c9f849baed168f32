/* The synthetic backend: micro-batches that sleep instead of computing but
 * hand the loop a full-size gradient, so that network scaling can be
 * measured apart from CPU contention (dedloc train --synthetic-compute). */
#include <string.h>
#include <time.h>

#include "dedloc/train.h"

void dl_synthetic_backend_init(dl_synthetic_backend *be, size_t n, double seconds, int batch, uint64_t seed) {
    memset(be, 0, sizeof *be);
    be->n = n;
    be->seconds = seconds;
    be->batch = batch;
    be->seed = seed;
}

static int syn_set_params(void *ctx, const float *params) {
    (void)ctx;
    (void)params;
    return 0;
}

static int syn_micro_batch(void *ctx, float loss_scale, float *grad, int *samples, dl_losses *losses) {
    (void)loss_scale;
    dl_synthetic_backend *be = ctx;
    if (be->seconds > 0) {
        struct timespec ts = {(time_t)be->seconds, (long)((be->seconds - (double)(time_t)be->seconds) * 1e9)};
        nanosleep(&ts, NULL);
    }
    /* splitmix64 draws scaled to [-1e-3, 1e-3). */
    uint64_t x = (be->seed * 0x9E3779B97F4A7C15ull) ^ (be->index++ * 0xD1B54A32D192ED03ull);
    for (size_t i = 0; i < be->n; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        grad[i] = (float)((double)(z >> 40) / 8388608.0 - 1.0) * 1e-3f;
    }
    *samples = be->batch;
    memset(losses, 0, sizeof *losses);
    return 0;
}

static int syn_skip(void *ctx, int64_t n) {
    ((dl_synthetic_backend *)ctx)->index += (uint64_t)n;
    return 0;
}

dl_trainer_backend dl_synthetic_backend_callbacks(dl_synthetic_backend *be) {
    return (dl_trainer_backend){.ctx = be, .set_params = syn_set_params, .micro_batch = syn_micro_batch, .skip = syn_skip};
}
