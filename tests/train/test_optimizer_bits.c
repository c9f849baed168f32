/* The optimizer step's bits do not depend on the C library.
 *
 * Peers of one run must end every step with bit-identical weights whatever
 * machine they run on, so the step may use no libm function whose last bit
 * varies between implementations (pow, exp, log, ...).
 *
 * The independent reference is exact rational arithmetic: beta^k for the
 * betas and steps below was computed exactly with Python's fractions and
 * rounded once to double (the table, with the command that made it). The
 * library's dl_powi must give exactly those doubles; then every scalar of a
 * step is recomputed from the table and each float operation redone as the
 * optimizer documents it, and the weights and moments must match the
 * optimizer's bit for bit at early and late steps, for LAMB and AdamW, with
 * and without weight decay. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define N 7

/* Made by:
 *   python3 -c "from fractions import Fraction as F
 *   for b in (0.9, 0.999): print([float(F(b)**k).hex() for k in (1, 2, 10, 5000, 125000)])"
 * (exact rational powers of the doubles 0.9 and 0.999, rounded once), and the
 * same for 0.98 and 0.5 at more exponents. */
static const int64_t STEPS[] = {1, 2, 10, 5000, 125000};
#define NSTEPS (sizeof STEPS / sizeof *STEPS)
static const double POW_09[NSTEPS] = {0x1.ccccccccccccdp-1, 0x1.9eb851eb851ecp-1, 0x1.650bf60432fd9p-2,
                                      0x1.fa8a46525d707p-761, 0x0.0p+0};
static const double POW_0999[NSTEPS] = {0x1.ff7ced916872bp-1, 0x1.fef9fcb0c026dp-1, 0x1.fae7299c256e3p-1,
                                        0x1.b8798c0f74e0cp-8, 0x1.7ccce8dff9d45p-181};

static double exact_power(double beta, size_t step_index) {
    return beta == 0.9 ? POW_09[step_index] : POW_0999[step_index];
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The moments' update in float, as the optimizer documents it (torch's
 * mul_ then add_/addcmul_, each rounded to float). */
static void moments(const dl_opt_config *c, float *m, float *v, const float *g) {
    const float b1 = (float)c->beta1, omb1 = (float)(1.0 - c->beta1);
    const float b2 = (float)c->beta2, omb2 = (float)(1.0 - c->beta2);
    for (int i = 0; i < N; i++) {
        float mi = m[i] * b1;
        m[i] = mi + omb1 * g[i];
        float vi = v[i] * b2;
        v[i] = vi + omb2 * g[i] * g[i];
    }
}

/* L2 norm: squares summed in double in index order, the root rounded to
 * float (sqrt is correctly rounded by IEEE 754, not a libm approximation). */
static float norm2(const float *x) {
    double s = 0;
    for (int i = 0; i < N; i++) s += (double)x[i] * (double)x[i];
    return (float)sqrt(s);
}

static void lamb_reference(const dl_opt_config *c, size_t si, double lr, double wd, float *p, const float *g,
                           float *m, float *v) {
    moments(c, m, v, g);
    double bc = sqrt(1.0 - exact_power(c->beta2, si)) / (1.0 - exact_power(c->beta1, si));
    double step_size = lr * bc;
    float wn = norm2(p);
    if (wn > (float)c->clamp_value) wn = (float)c->clamp_value;
    float upd[N];
    const float eps = (float)c->eps;
    for (int i = 0; i < N; i++) upd[i] = m[i] / (sqrtf(v[i]) + eps);
    if (wd != 0)
        for (int i = 0; i < N; i++) upd[i] = upd[i] + (float)wd * p[i];
    float an = norm2(upd);
    float alpha = (wn == 0.0f || an == 0.0f) ? (float)(-step_size) : (float)(-step_size) * (wn / an);
    for (int i = 0; i < N; i++) p[i] = p[i] + alpha * upd[i];
}

static void adamw_reference(const dl_opt_config *c, size_t si, double lr, double wd, float *p, const float *g,
                            float *m, float *v) {
    const float decay = (float)(1.0 - lr * wd);
    for (int i = 0; i < N; i++) p[i] = p[i] * decay;
    moments(c, m, v, g);
    double bc1 = 1.0 - exact_power(c->beta1, si);
    double bc2 = 1.0 - exact_power(c->beta2, si);
    float bc2_sqrt = (float)sqrt(bc2);
    float value = (float)(-(lr / bc1));
    for (int i = 0; i < N; i++) {
        float denom = sqrtf(v[i]) / bc2_sqrt + (float)c->eps;
        p[i] = p[i] + value * m[i] / denom;
    }
}

static void check_kind(dl_opt_kind kind, bool no_decay, size_t si) {
    int64_t step = STEPS[si];
    dl_opt_config c = dl_opt_config_sahajbert();
    c.kind = kind;
    const char *names[1] = {no_decay ? "encoder.bias" : "encoder.weight"};
    size_t numel[1] = {N};
    bool nd[1] = {no_decay};
    dl_train_layout layout;
    CHECK_OK(dl_train_layout_init(&layout, 1, names, numel, nd));
    dl_optimizer opt;
    CHECK_OK(dl_optimizer_init(&opt, &c, &layout));
    dl_rng rng;
    dl_rng_seed(&rng, 1000 + (uint64_t)step + 7 * kind + 3 * no_decay);
    float p[N], g[N], m[N], v[N];
    for (int i = 0; i < N; i++) {
        p[i] = dl_rng_normal(&rng) * 0.05f;
        g[i] = dl_rng_normal(&rng) * 0.01f;
        m[i] = dl_rng_normal(&rng) * 0.001f;
        v[i] = fabsf(dl_rng_normal(&rng)) * 1e-6f;
    }
    memcpy(opt.exp_avg, m, sizeof m);
    memcpy(opt.exp_avg_sq, v, sizeof v);
    opt.step = step - 1; /* the update advances it to `step` */
    float params[N];
    memcpy(params, p, sizeof p);
    const double lr = 0.00176;
    dl_optimizer_update(&opt, params, g, lr);
    double wd = no_decay ? 0.0 : c.weight_decay;
    if (kind == DL_OPT_LAMB) lamb_reference(&c, si, lr, wd, p, g, m, v);
    else adamw_reference(&c, si, lr, wd, p, g, m, v);
    int diff = 0;
    for (int i = 0; i < N; i++)
        diff += bits(params[i]) != bits(p[i]) || bits(opt.exp_avg[i]) != bits(m[i]) ||
                bits(opt.exp_avg_sq[i]) != bits(v[i]);
    CHECK_MSG(diff == 0, "%s step %lld (%s): %d of %d elements differ in their bits (e.g. %.9g vs %.9g)",
              dl_opt_kind_name(kind), (long long)step, no_decay ? "no decay" : "decay", diff, N, params[0], p[0]);
    CHECK(opt.step == step);
    dl_optimizer_free(&opt);
    dl_train_layout_free(&layout);
}

/* dl_powi against the exact table, and more exponents and bases (exact
 * rational powers, rounded once, made the same way). */
static void check_powi(void) {
    for (size_t i = 0; i < NSTEPS; i++) {
        CHECK_MSG(dl_powi(0.9, STEPS[i]) == POW_09[i], "0.9^%lld = %a, exact %a", (long long)STEPS[i],
                  dl_powi(0.9, STEPS[i]), POW_09[i]);
        CHECK_MSG(dl_powi(0.999, STEPS[i]) == POW_0999[i], "0.999^%lld = %a, exact %a", (long long)STEPS[i],
                  dl_powi(0.999, STEPS[i]), POW_0999[i]);
    }
    static const struct { double base; int64_t n; double exact; } more[] = {
        {0.9, 3, 0x1.753f7ced91688p-1},     {0.9, 7, 0x1.e9c6a99d1cdbfp-2},    {0.9, 100, 0x1.bda056ed49410p-16},
        {0.9, 1000, 0x1.fee7413dac341p-153}, {0.999, 3, 0x1.fe772d5570166p-1}, {0.999, 7, 0x1.fc6d3e72229bcp-1},
        {0.999, 100, 0x1.cf40ea930fdf5p-1}, {0.999, 1000, 0x1.788526411ed72p-2}, {0.98, 1, 0x1.f5c28f5c28f5cp-1},
        {0.98, 2, 0x1.ebb98c7e28240p-1},    {0.98, 3, 0x1.e1e3eaf6837f7p-1},   {0.98, 7, 0x1.bc7af32c3c04ap-1},
        {0.98, 10, 0x1.a2575df010dd1p-1},   {0.98, 100, 0x1.0f9ad77b06290p-3}, {0.98, 1000, 0x1.ce9c4ca6be0c3p-30},
        {0.98, 5000, 0x1.345135f2d2597p-146}, {0.98, 125000, 0.0},             {0.5, 10, 0x1p-10},
        {0.5, 1000, 0x1p-1000},             {1.0, 125000, 1.0},                {0.9, 0, 1.0},
    };
    for (size_t i = 0; i < sizeof more / sizeof *more; i++)
        CHECK_MSG(dl_powi(more[i].base, more[i].n) == more[i].exact, "%g^%lld = %a, exact %a", more[i].base,
                  (long long)more[i].n, dl_powi(more[i].base, more[i].n), more[i].exact);
}

int main(void) {
    check_powi();
    for (size_t s = 0; s < NSTEPS; s++)
        for (int nd = 0; nd < 2; nd++) {
            check_kind(DL_OPT_LAMB, nd, s);
            check_kind(DL_OPT_ADAMW, nd, s);
        }
    return dl_test_finish("optimizer bits");
}
