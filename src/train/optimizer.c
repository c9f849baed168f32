/* LAMB (as torch_optimizer 0.3.0's Lamb) and AdamW (as torch 1.13's
 * torch.optim.AdamW, single-tensor path) over a flat fp32 vector.
 *
 * Each formula follows the torch source operation by operation, with the same
 * float roundings of the Python-double hyperparameters:
 *   - a Python float multiplied with a float tensor is rounded to float first;
 *   - scalars computed in Python (bias corrections, step sizes) are doubles
 *     until they meet a tensor;
 *   - addcmul is self + value * a * b and addcdiv self + value * a / b, left
 *     to right.
 * The one place torch itself is not reproducible across machines is
 * add_(x, alpha=...): its vectorized CPU path uses a fused multiply-add where
 * the CPU has one, its scalar tail does not. We never fuse (-ffp-contract=off),
 * so we agree with torch to within an ulp or so per operation, and with
 * ourselves bit for bit everywhere. For that, no libm function whose last bit
 * may differ between C libraries is used: the bias corrections' beta^step
 * come from dl_powi (multiplications only); sqrt is correctly rounded by
 * IEEE 754 on every library. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

dl_opt_config dl_opt_config_sahajbert(void) {
    dl_opt_config c = {
        .kind = DL_OPT_LAMB,
        .lr = 0.00176,
        .beta1 = 0.9,
        .beta2 = 0.999,
        .eps = 1e-6,
        .weight_decay = 0.01,
        .clamp_value = 10000.0,
        .debias = true,
        .max_grad_norm = 1.0,
        .warmup_steps = 5000,
        .total_steps = 125000,
    };
    return c;
}

int dl_opt_kind_parse(const char *name, dl_opt_kind *kind) {
    if (!strcmp(name, "lamb")) {
        *kind = DL_OPT_LAMB;
        return 0;
    }
    if (!strcmp(name, "adamw")) {
        *kind = DL_OPT_ADAMW;
        return 0;
    }
    return dl_fail("unknown optimizer '%s' (expected lamb or adamw)", name);
}

const char *dl_opt_kind_name(dl_opt_kind kind) {
    return kind == DL_OPT_ADAMW ? "adamw" : "lamb";
}

static int check_config(const dl_opt_config *c) {
    if (!(c->lr > 0) || !isfinite(c->lr)) return dl_fail("learning rate must be positive, got %g", c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return dl_fail("betas must lie in [0, 1), got (%g, %g)", c->beta1, c->beta2);
    if (!(c->eps >= 0)) return dl_fail("eps must be >= 0, got %g", c->eps);
    if (!(c->weight_decay >= 0)) return dl_fail("weight decay must be >= 0, got %g", c->weight_decay);
    if (c->kind == DL_OPT_LAMB && !(c->clamp_value >= 0))
        return dl_fail("LAMB clamp value must be >= 0, got %g", c->clamp_value);
    if (c->warmup_steps < 0 || c->total_steps < 0)
        return dl_fail("warmup and total steps must be >= 0");
    return 0;
}

int dl_optimizer_init(dl_optimizer *opt, const dl_opt_config *config, const dl_train_layout *layout) {
    memset(opt, 0, sizeof *opt);
    if (check_config(config)) return dl_fail_context("optimizer");
    if (layout->total == 0 || layout->count <= 0) return dl_fail("optimizer: empty parameter layout");
    opt->config = *config;
    int rc = dl_train_layout_copy(&opt->layout, layout);
    if (rc) return -1;
    opt->exp_avg = dl_calloc(layout->total, sizeof(float));
    opt->exp_avg_sq = dl_calloc(layout->total, sizeof(float));
    size_t largest = 0;
    for (int t = 0; t < layout->count; t++)
        if (layout->tensors[t].numel > largest) largest = layout->tensors[t].numel;
    opt->scratch = dl_malloc(largest * sizeof(float));
    if (!opt->exp_avg || !opt->exp_avg_sq || !opt->scratch) {
        dl_optimizer_free(opt);
        return dl_fail_context("optimizer state for %zu parameters", layout->total);
    }
    return 0;
}

void dl_optimizer_free(dl_optimizer *opt) {
    dl_train_layout_free(&opt->layout);
    free(opt->exp_avg);
    free(opt->exp_avg_sq);
    free(opt->scratch);
    opt->exp_avg = opt->exp_avg_sq = opt->scratch = NULL;
}

/* exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
 * exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
static void update_moments(float *m, float *v, const float *g, size_t n, double beta1, double beta2) {
    const float b1 = (float)beta1, one_minus_b1 = (float)(1.0 - beta1);
    const float b2 = (float)beta2, one_minus_b2 = (float)(1.0 - beta2);
    for (size_t i = 0; i < n; i++) {
        float mi = m[i] * b1;
        m[i] = mi + one_minus_b1 * g[i];
        float vi = v[i] * b2;
        v[i] = vi + one_minus_b2 * g[i] * g[i];
    }
}

static float norm_f(const float *x, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * (double)x[i];
    return (float)sqrt(sum);
}

/* torch_optimizer.Lamb.step for one tensor. `update` is scratch of n floats. */
static void lamb_tensor(const dl_opt_config *c, int64_t step, double lr, float *p, const float *g,
                        float *m, float *v, float *update, size_t n, double weight_decay) {
    update_moments(m, v, g, n, c->beta1, c->beta2);
    double bias_correction = 1.0;
    if (c->debias) {
        bias_correction = sqrt(1.0 - dl_powi(c->beta2, step));
        bias_correction /= 1.0 - dl_powi(c->beta1, step);
    }
    double step_size = lr * bias_correction;

    float weight_norm = norm_f(p, n);
    /* .clamp(0, clamp_value): the bounds are rounded to float. */
    float clamp_hi = (float)c->clamp_value;
    if (weight_norm > clamp_hi) weight_norm = clamp_hi;
    if (weight_norm < 0.0f) weight_norm = 0.0f;

    /* adam_step = exp_avg / exp_avg_sq.sqrt().add(eps); adam_step.add_(p, alpha=wd) */
    const float eps = (float)c->eps;
    for (size_t i = 0; i < n; i++) update[i] = m[i] / (sqrtf(v[i]) + eps);
    if (weight_decay != 0) {
        const float wd = (float)weight_decay;
        for (size_t i = 0; i < n; i++) update[i] = update[i] + wd * p[i];
    }
    float adam_norm = norm_f(update, n);

    /* trust_ratio is 1 (exactly) when either norm is zero, else a float
     * quotient; alpha = -step_size * trust_ratio with -step_size rounded to
     * float first (a Python float times a float tensor). */
    float alpha;
    if (weight_norm == 0.0f || adam_norm == 0.0f) {
        alpha = (float)(-step_size);
    } else {
        float trust_ratio = weight_norm / adam_norm;
        alpha = (float)(-step_size) * trust_ratio;
    }
    for (size_t i = 0; i < n; i++) p[i] = p[i] + alpha * update[i];
}

/* torch.optim.AdamW (_single_tensor_adamw, amsgrad off) for one tensor. */
static void adamw_tensor(const dl_opt_config *c, int64_t step, double lr, float *p, const float *g,
                         float *m, float *v, size_t n, double weight_decay) {
    /* param.mul_(1 - lr * weight_decay), skipped by torch's arithmetic only
     * in effect when weight_decay is 0 (x * 1.0f == x). */
    const float decay = (float)(1.0 - lr * weight_decay);
    for (size_t i = 0; i < n; i++) p[i] = p[i] * decay;
    update_moments(m, v, g, n, c->beta1, c->beta2);
    double bias_correction1 = 1.0 - dl_powi(c->beta1, step);
    double bias_correction2 = 1.0 - dl_powi(c->beta2, step);
    double step_size = lr / bias_correction1;
    const float bc2_sqrt = (float)sqrt(bias_correction2);
    const float eps = (float)c->eps;
    const float value = (float)(-step_size);
    for (size_t i = 0; i < n; i++) {
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + value * m[i] / denom;
    }
}

void dl_optimizer_update(dl_optimizer *opt, float *params, const float *grad, double lr) {
    const dl_opt_config *c = &opt->config;
    opt->step++;
    float *update = opt->scratch;
    for (int t = 0; t < opt->layout.count; t++) {
        const dl_train_tensor *ts = &opt->layout.tensors[t];
        double wd = ts->no_weight_decay ? 0.0 : c->weight_decay;
        size_t o = ts->offset;
        if (c->kind == DL_OPT_LAMB)
            lamb_tensor(c, opt->step, lr, params + o, grad + o, opt->exp_avg + o, opt->exp_avg_sq + o,
                        update, ts->numel, wd);
        else
            adamw_tensor(c, opt->step, lr, params + o, grad + o, opt->exp_avg + o, opt->exp_avg_sq + o,
                         ts->numel, wd);
    }
}

int dl_optimizer_step(dl_optimizer *opt, float *params, float *grad, dl_opt_step_info *info) {
    const dl_opt_config *c = &opt->config;
    size_t n = opt->layout.total;
    float coef = 1.0f;
    float norm;
    if (c->max_grad_norm > 0)
        norm = dl_clip_grad_norm(grad, n, c->max_grad_norm, &coef);
    else
        norm = dl_grad_norm(grad, n);
    if (!isfinite(norm))
        return dl_fail("optimizer step %lld: the gradient norm is not finite; step skipped",
                       (long long)opt->step);
    double lr = dl_schedule_linear_warmup(c->lr, opt->step, c->warmup_steps, c->total_steps);
    dl_optimizer_update(opt, params, grad, lr);
    if (info) {
        info->lr = lr;
        info->grad_norm = norm;
        info->clip_coef = coef;
    }
    return 0;
}
