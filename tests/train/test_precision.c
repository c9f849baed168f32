/* fp16 and bf16 storage against fp32 on the same batch and weights (tiny
 * model, B=2, T=24, one sequence padded):
 *   - the gradients (computed at loss scale 2^16 in fp16, unscaled on the way
 *     out) agree with fp32's within a stated tolerance. Storage in half keeps
 *     11 significant bits (unit roundoff 4.9e-4; bf16: 8 bits, 3.9e-3) and the
 *     roundings add up through the layers, so we allow about ten unit
 *     roundoffs over the whole gradient: 5e-3 relative L2 for fp16, 4e-2 for
 *     bf16, and twice that for any tensor whose gradient is not negligible
 *     (measured here: fp16 8.4e-4 whole, 1.4e-3 worst tensor; bf16 7.9e-3,
 *     1.2e-2);
 *   - the losses agree within 1e-3 relative (measured 2e-6 and 8e-5);
 *   - after a host optimizer step, the device copy of the new fp32 master
 *     weights is exactly those weights rounded to the storage format, checked
 *     against a rounding written here from the formats' definitions (not the
 *     library's dl_f32_to_f16 / dl_f32_to_bf16, which set_params uses). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/device.h"
#include "dedloc/model.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { B = 2, T = 24 };

static void make_batch(dl_batch *b, const dl_albert_config *cfg) {
    dl_batch_alloc(b, B, T);
    dl_rng rng;
    dl_rng_seed(&rng, 11);
    for (int i = 0; i < B; i++) {
        int len = T - 3 * i; /* the second sequence is padded */
        for (int t = 0; t < T; t++) {
            int k = i * T + t;
            b->attention_mask[k] = t < len;
            b->input_ids[k] = t < len ? 5 + (int32_t)dl_rng_below(&rng, (uint64_t)cfg->vocab_size - 5) : 0;
            b->token_type_ids[k] = t < len && t >= len / 2;
            b->labels[k] = -100;
            if (t > 0 && t < len - 1 && dl_rng_uniform(&rng) < 0.2f) {
                b->labels[k] = b->input_ids[k];
                b->input_ids[k] = 4;
            }
        }
        b->labels[i * T + 1] = 7; /* at least one masked position per row */
        b->sentence_order_label[i] = i & 1;
    }
}

static double sq_norm(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static double rel_l2(const float *a, const float *b, size_t n) { return dl_test_rel_l2(a, b, n); }

/* x rounded to the nearest value with `bits` significant bits (ties to even,
 * nearbyint's default mode) whose exponent is at least `min_exp`, below which
 * the spacing stays 2^(min_exp - bits + 1) (subnormals); |x| at or past
 * `overflow` becomes an infinity. Scaling by a power of two is exact in
 * double, so the only rounding is nearbyint's. fp16: 11 bits, min exponent
 * -14, overflow 65520; bf16: 8 bits, -126, 2^128 - 2^119. */
static float round_to_format(float x, int bits, int min_exp, double overflow) {
    if (x == 0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e); /* |x| = m 2^e, m in [0.5, 1): the exponent of x is e - 1 */
    int exponent = e - 1 < min_exp ? min_exp : e - 1;
    double quantum = ldexp(1.0, exponent - (bits - 1));
    double r = nearbyint((double)x / quantum) * quantum;
    if (fabs(r) >= overflow) return x > 0 ? INFINITY : -INFINITY;
    return (float)r;
}

static float reference_storage(dl_precision p, float x) {
    return p == DL_PRECISION_FP16 ? round_to_format(x, 11, -14, 65520.0)
                                  : round_to_format(x, 8, -126, ldexp(1.0, 128) - ldexp(1.0, 119));
}

/* The reference rounding on hand-picked values whose answers are known. */
static void test_reference_rounding(void) {
    CHECK(reference_storage(DL_PRECISION_FP16, 1.0f + 1.0f / 2048) == 1.0f);           /* tie, even */
    CHECK(reference_storage(DL_PRECISION_FP16, 1.0f + 3.0f / 2048) == 1.0f + 2.0f / 1024); /* tie, up */
    CHECK(reference_storage(DL_PRECISION_FP16, 65519.0f) == 65504.0f);
    CHECK(isinf(reference_storage(DL_PRECISION_FP16, 65520.0f)));
    CHECK(reference_storage(DL_PRECISION_FP16, 3e-8f) == ldexpf(1.0f, -24)); /* subnormal */
    CHECK(reference_storage(DL_PRECISION_FP16, 2.9e-8f) == 0.0f);
    CHECK(reference_storage(DL_PRECISION_BF16, 1.00390625f) == 1.0f); /* tie, even */
    CHECK(reference_storage(DL_PRECISION_BF16, 1.01171875f) == 1.015625f); /* tie, up */
    CHECK(reference_storage(DL_PRECISION_BF16, -0.3f) == -0.30078125f);
}

int main(void) {
    dl_device *dev;
    if (dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &dev)) {
        fprintf(stderr, "no OpenCL device: %s\n", dl_error());
        return 1;
    }
    test_reference_rounding();
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    dl_batch batch;
    make_batch(&batch, &cfg);

    dl_model *m32 = NULL;
    CHECK_OK(dl_model_create(dev, &cfg, B, T, DL_PRECISION_FP32, &m32));
    if (!m32) return dl_test_finish("test_precision");
    const dl_param_layout *ml = dl_model_layout(m32);
    size_t n = ml->total;
    float *params = malloc(n * 4), *g32 = malloc(n * 4), *g16 = malloc(n * 4), *avg = malloc(n * 4);
    float *dev16 = malloc(n * 4);
    CHECK_OK(dl_albert_init_params(&cfg, 5, params));
    dl_losses l32, l16;
    CHECK_OK(dl_model_set_params(m32, params));
    CHECK_OK(dl_model_zero_grad(m32));
    CHECK_OK(dl_model_forward_backward(m32, &batch, 1.0f, &l32));
    CHECK_OK(dl_model_get_grads(m32, 1.0f, g32));

    const dl_precision modes[2] = {DL_PRECISION_FP16, DL_PRECISION_BF16};
    const double tol[2] = {5e-3, 4e-2};
    for (int mi = 0; mi < 2; mi++) {
        dl_precision p = modes[mi];
        dl_model *mh = NULL;
        if (dl_model_create(dev, &cfg, B, T, p, &mh)) {
            CHECK_MSG(0, "%s model: %s", dl_precision_name(p), dl_error());
            continue;
        }
        dl_loss_scale ls;
        dl_loss_scale_init(&ls, p == DL_PRECISION_FP16);
        CHECK_OK(dl_model_set_params(mh, params));
        CHECK_OK(dl_model_zero_grad(mh));
        CHECK_OK(dl_model_forward_backward(mh, &batch, ls.scale, &l16));
        CHECK_OK(dl_model_get_grads(mh, ls.scale, g16));
        CHECK(dl_all_finite(g16, n));
        double whole = rel_l2(g16, g32, n), worst = 0, largest = 0;
        const char *worst_name = "";
        for (int t = 0; t < ml->count; t++) {
            const dl_param_entry *e = &ml->entries[t];
            double norm = sqrt(sq_norm(g32 + e->offset, e->numel));
            if (norm > largest) largest = norm;
        }
        for (int t = 0; t < ml->count; t++) {
            const dl_param_entry *e = &ml->entries[t];
            /* Tensors whose gradient is negligible (attention key bias: zero
             * in exact arithmetic, softmax ignores it) are judged as part of
             * the whole only. */
            if (sqrt(sq_norm(g32 + e->offset, e->numel)) < 1e-3 * largest) continue;
            double r = rel_l2(g16 + e->offset, g32 + e->offset, e->numel);
            if (!(r <= worst)) worst_name = e->name;
            worst = dl_test_worse(worst, r);
        }
        double loss_err = fabs(l16.loss - l32.loss) / fabs(l32.loss);
        printf("%s vs fp32: loss %.6f vs %.6f (rel %.2e); gradient rel L2 %.2e, worst tensor %.2e (%s)\n",
               dl_precision_name(p), l16.loss, l32.loss, loss_err, whole, worst, worst_name);
        CHECK(loss_err <= 1e-3);
        CHECK_MSG(whole <= tol[mi], "%s gradient rel L2 %.3g", dl_precision_name(p), whole);
        CHECK_MSG(worst <= 2 * tol[mi], "%s worst tensor %s %.3g", dl_precision_name(p), worst_name, worst);

        /* A host step from the average of both gradients gives new fp32
         * master weights (values that are not all on the storage grid); the
         * device copy must be exactly those rounded to the storage format. */
        for (size_t i = 0; i < n; i++) avg[i] = (g32[i] + g16[i]) * 0.5f;
        dl_train_layout tl;
        CHECK_OK(dl_train_layout_from_model(ml, &tl));
        dl_opt_config oc = dl_opt_config_sahajbert();
        oc.warmup_steps = 0;
        dl_optimizer opt;
        CHECK_OK(dl_optimizer_init(&opt, &oc, &tl));
        float *master = malloc(n * 4);
        memcpy(master, params, n * 4);
        CHECK_OK(dl_optimizer_step(&opt, master, avg, NULL));
        CHECK(memcmp(master, params, n * 4) != 0);
        CHECK_OK(dl_model_set_params(mh, master));
        CHECK_OK(dl_model_get_params(mh, dev16));
        size_t mismatched = 0, off_grid = 0;
        for (size_t i = 0; i < n; i++) {
            float want = reference_storage(p, master[i]);
            off_grid += want != master[i];
            mismatched += memcmp(&want, &dev16[i], 4) != 0;
        }
        CHECK_MSG(mismatched == 0, "%zu device weights are not the rounded master", mismatched);
        CHECK_MSG(off_grid > n / 2, "only %zu of %zu master weights needed rounding", off_grid, n);
        free(master);
        dl_optimizer_free(&opt);
        dl_train_layout_free(&tl);
        dl_model_free(mh);
    }
    dl_model_free(m32);
    dl_batch_free(&batch);
    dl_device_close(dev);
    free(params);
    free(g32);
    free(g16);
    free(avg);
    free(dev16);
    return dl_test_finish("test_precision");
}
