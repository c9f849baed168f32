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

/* The largest LAMB step, relative to each tensor's norm, that the tiny
 * recipe lets its schedule reach. LAMB moves every tensor by
 * lr * bias_correction(t) times its own norm, whatever the gradient, so the
 * rate is a fraction of the weights changed per step, and steps compound:
 * the tiny model on the demo corpus held a relative step of 0.02 for a
 * hundred steps (lr 0.1 over 300 steps) and diverged after a hundred steps
 * near 0.05 (lr 0.1 over 3000 steps, where warmup ends at step 300 and the
 * bias correction has grown to 0.5). 0.01 leaves a margin of five below
 * that. */
#define TINY_LAMB_MAX_STEP 0.01
/* tiny + LAMB never goes above this peak rate (short runs reach it). */
#define TINY_LAMB_MAX_LR 0.1

double dl_opt_peak_step(const dl_opt_config *c) {
    /* Step t (from 1) uses the schedule at t - 1, the optimizer steps taken
     * before it (dl_optimizer_step), and the bias correction of t:
     * lr(t - 1) * sqrt(1 - beta2^t) / (1 - beta1^t) for LAMB with debias,
     * lr(t - 1) for the rest. Past warmup the schedule only falls, so once the bias
     * correction has converged to 1 (0.999^t < 1e-15 for t > 35000) nothing
     * later can be larger: the scan stops there. */
    int64_t end = c->total_steps > 0 ? c->total_steps : c->warmup_steps + 1;
    int64_t settled = (c->warmup_steps > 0 ? c->warmup_steps : 0) + 50000;
    if (end > settled) end = settled;
    if (end < 1) end = 1;
    bool debias = c->kind == DL_OPT_LAMB && c->debias;
    double b1_t = 1.0, b2_t = 1.0, peak = 0.0;
    for (int64_t t = 1; t <= end; t++) {
        b1_t *= c->beta1;
        b2_t *= c->beta2;
        double step = dl_schedule_linear_warmup(c->lr, t - 1, c->warmup_steps, c->total_steps);
        if (debias) step *= sqrt(1.0 - b2_t) / (1.0 - b1_t);
        if (step > peak) peak = step;
    }
    return peak;
}

dl_opt_config dl_opt_config_preset(bool tiny, dl_opt_kind kind, int64_t max_steps) {
    dl_opt_config opt = dl_opt_config_sahajbert();
    opt.kind = kind;
    opt.weight_decay = 0.01;
    opt.max_grad_norm = 1.0;
    opt.total_steps = tiny ? max_steps : 125000;
    opt.warmup_steps = tiny ? max_steps / 10 : 5000;
    if (kind == DL_OPT_ADAMW) opt.eps = 1e-8;
    if (!tiny) return opt;
    if (kind == DL_OPT_ADAMW) {
        /* AdamW's rate is absolute, per element. */
        opt.lr = 0.005;
        return opt;
    }
    /* LAMB: tensors that start at zero (biases) move by about the rate per
     * step, so a run of a few hundred steps wants a large rate to move at
     * all; a long run at that rate diverges. The peak rate is therefore the
     * largest (up to TINY_LAMB_MAX_LR) whose schedule keeps the relative
     * step at or below TINY_LAMB_MAX_STEP at every step: about 0.04 over
     * 300 steps, 0.017 over 3000, 0.01 for long runs. The relative step is
     * linear in the peak rate, so one scan at rate 1 finds it. */
    opt.lr = 1.0;
    double unit_peak = dl_opt_peak_step(&opt);
    opt.lr = unit_peak > 0 ? TINY_LAMB_MAX_STEP / unit_peak : TINY_LAMB_MAX_LR;
    if (opt.lr > TINY_LAMB_MAX_LR) opt.lr = TINY_LAMB_MAX_LR;
    return opt;
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
    if (!strcmp(name, "nesterov")) {
        *kind = DL_OPT_NESTEROV;
        return 0;
    }
    return dl_fail("unknown optimizer '%s' (expected lamb, adamw or nesterov)", name);
}

const char *dl_opt_kind_name(dl_opt_kind kind) {
    switch (kind) {
    case DL_OPT_ADAMW: return "adamw";
    case DL_OPT_NESTEROV: return "nesterov";
    default: return "lamb";
    }
}

dl_opt_config dl_opt_config_outer(double lr, double momentum) {
    dl_opt_config c = {.kind = DL_OPT_NESTEROV, .lr = lr, .beta1 = momentum};
    return c;
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

/* torch.optim.SGD(momentum=mu, nesterov=True, dampening=0) for one tensor
 * (_single_tensor_sgd): d_p = g (+ wd * p); the first step clones d_p into
 * the buffer, later ones take buf * mu + d_p; then d_p + mu * buf, and
 * p + (-lr) * that. mu, wd and -lr are rounded to float as torch rounds a
 * Python float that meets a float tensor. */
static void nesterov_tensor(const dl_opt_config *c, bool first, double lr, float *p, const float *g, float *buf,
                            size_t n, double weight_decay) {
    const float mu = (float)c->beta1, neg_lr = (float)(-lr), wd = (float)weight_decay;
    for (size_t i = 0; i < n; i++) {
        float d = weight_decay != 0 ? g[i] + wd * p[i] : g[i];
        float b = first ? d : buf[i] * mu + d;
        buf[i] = b;
        float step = d + mu * b;
        p[i] = p[i] + neg_lr * step;
    }
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
    const bool first = opt->step == 0;
    opt->step++;
    float *update = opt->scratch;
    for (int t = 0; t < opt->layout.count; t++) {
        const dl_train_tensor *ts = &opt->layout.tensors[t];
        double wd = ts->no_weight_decay ? 0.0 : c->weight_decay;
        size_t o = ts->offset;
        if (c->kind == DL_OPT_NESTEROV)
            nesterov_tensor(c, first, lr, params + o, grad + o, opt->exp_avg + o, ts->numel, wd);
        else if (c->kind == DL_OPT_LAMB)
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
    /* The outer optimizer's rate is constant (DiLoCo's outer lr does not decay). */
    double lr = c->kind == DL_OPT_NESTEROV ? c->lr
                                           : dl_schedule_linear_warmup(c->lr, opt->step, c->warmup_steps, c->total_steps);
    dl_optimizer_update(opt, params, grad, lr);
    if (info) {
        info->lr = lr;
        info->grad_norm = norm;
        info->clip_coef = coef;
    }
    return 0;
}
