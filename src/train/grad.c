/* Layout view, gradient norms, clipping, accumulation and the learning-rate
 * schedule: the small deterministic pieces around the optimizer step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

bool dl_train_no_decay_name(const char *name) {
    return name && (strstr(name, "bias") || strstr(name, "LayerNorm.weight"));
}

int dl_train_layout_init(dl_train_layout *layout, int count, const char *const *names,
                         const size_t *numels, const bool *no_decay) {
    memset(layout, 0, sizeof *layout);
    if (count <= 0) return dl_fail("parameter layout: %d tensors", count);
    layout->tensors = dl_calloc((size_t)count, sizeof *layout->tensors);
    if (!layout->tensors) return -1;
    layout->count = count;
    size_t offset = 0;
    for (int i = 0; i < count; i++) {
        dl_train_tensor *t = &layout->tensors[i];
        if (numels[i] == 0 || numels[i] > SIZE_MAX / 8 - offset) {
            dl_train_layout_free(layout);
            return dl_fail("parameter layout: tensor %d has an invalid size %zu", i, numels[i]);
        }
        t->offset = offset;
        t->numel = numels[i];
        t->ndim = 1;
        t->shape[0] = (int64_t)numels[i];
        offset += numels[i];
        if (names && names[i]) {
            t->name = dl_strdup(names[i]);
            if (!t->name) {
                dl_train_layout_free(layout);
                return -1;
            }
        }
        t->no_weight_decay = no_decay ? no_decay[i] : dl_train_no_decay_name(t->name);
    }
    layout->total = offset;
    return 0;
}

int dl_train_layout_copy(dl_train_layout *dst, const dl_train_layout *src) {
    memset(dst, 0, sizeof *dst);
    dst->tensors = dl_calloc((size_t)src->count, sizeof *dst->tensors);
    if (!dst->tensors) return -1;
    dst->count = src->count;
    dst->total = src->total;
    for (int i = 0; i < src->count; i++) {
        dst->tensors[i] = src->tensors[i];
        dst->tensors[i].name = NULL;
        if (src->tensors[i].name && !(dst->tensors[i].name = dl_strdup(src->tensors[i].name))) {
            dl_train_layout_free(dst);
            return -1;
        }
    }
    return 0;
}

void dl_train_layout_free(dl_train_layout *layout) {
    if (layout->tensors)
        for (int i = 0; i < layout->count; i++) free(layout->tensors[i].name);
    free(layout->tensors);
    memset(layout, 0, sizeof *layout);
}

double dl_schedule_linear_warmup(double base_lr, int64_t step, int64_t warmup_steps,
                                 int64_t total_steps) {
    /* transformers.get_linear_schedule_with_warmup's lambda, in Python's
     * double arithmetic, times the base learning rate (LambdaLR). */
    double lambda;
    if (step < warmup_steps) {
        lambda = (double)step / (double)(warmup_steps > 1 ? warmup_steps : 1);
    } else {
        int64_t span = total_steps - warmup_steps;
        lambda = (double)(total_steps - step) / (double)(span > 1 ? span : 1);
        if (lambda < 0.0) lambda = 0.0;
    }
    return base_lr * lambda;
}

float dl_grad_norm(const float *grad, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)grad[i] * (double)grad[i];
    return (float)sqrt(sum);
}

float dl_clip_grad_norm(float *grad, size_t n, double max_norm, float *coef_out) {
    float norm = dl_grad_norm(grad, n);
    /* clip_coef = max_norm / (total_norm + 1e-6): Python's float / tensor is
     * tensor.reciprocal() * max_norm, all in float; then clamp(max=1.0). */
    float coef = (1.0f / (norm + 1e-6f)) * (float)max_norm;
    if (coef > 1.0f) coef = 1.0f;
    for (size_t i = 0; i < n; i++) grad[i] = grad[i] * coef;
    if (coef_out) *coef_out = coef;
    return norm;
}

bool dl_all_finite(const float *x, size_t n) {
    /* x - x is 0 for finite x and NaN for Inf or NaN; one branch at the end. */
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++) acc += x[i] - x[i];
    return acc == 0.0f;
}

int dl_grad_accum_init(dl_grad_accum *acc, size_t n) {
    memset(acc, 0, sizeof *acc);
    acc->sum = dl_calloc(n, sizeof(float));
    if (!acc->sum) return dl_fail_context("gradient accumulator");
    acc->n = n;
    return 0;
}

void dl_grad_accum_free(dl_grad_accum *acc) {
    free(acc->sum);
    memset(acc, 0, sizeof *acc);
}

void dl_grad_accum_reset(dl_grad_accum *acc) {
    memset(acc->sum, 0, acc->n * sizeof(float));
    acc->samples = 0;
}

void dl_grad_accum_add(dl_grad_accum *acc, const float *grad, int64_t samples) {
    const float w = (float)samples;
    for (size_t i = 0; i < acc->n; i++) acc->sum[i] = acc->sum[i] + grad[i] * w;
    acc->samples += samples;
}

int dl_grad_accum_mean(const dl_grad_accum *acc, float *out) {
    if (acc->samples <= 0) return dl_fail("no samples accumulated: cannot average the gradient");
    const float total = (float)acc->samples;
    for (size_t i = 0; i < acc->n; i++) out[i] = acc->sum[i] / total;
    return 0;
}
