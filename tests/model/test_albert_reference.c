/* The model against transformers: each fixture folder (written by
 * scripts/make_reference.py) holds a random-init AlbertForPreTraining, one
 * batch and the reference loss and gradients. The device must agree: losses
 * within 1e-5 relative, every gradient within 1e-4 relative L2; and two runs
 * must give the same bits. Device: $DEDLOC_TEST_DEVICE or the default. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"
#include "dl_test.h"

static dl_device *device;

static double rel_err(double a, double b) { return dl_test_diff(a, b) / fmax(fabs(b), 1e-30); }

/* Relative L2 error with a floor on the reference norm: the attention key
 * bias gradient is exactly zero in exact arithmetic (softmax ignores a
 * constant added to a whole row of scores), so both sides hold only rounding
 * noise (~1e-12) and a plain relative error would compare noise with noise. */
static double grad_error(const float *got, const float *want, size_t n) {
    return dl_test_rel_l2_floor(got, want, n, 1e-6);
}

/* The tree's root: where the build put it, unless DEDLOC_TEST_SOURCE_DIR
 * says it moved (scripts/gpu_check.sh runs this test from a copied tree). */
static const char *source_dir(void) {
    const char *moved = getenv("DEDLOC_TEST_SOURCE_DIR");
    return moved && *moved ? moved : DEDLOC_SOURCE_DIR;
}

static void check_fixture(const char *name) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", source_dir(), name);
    dl_albert_config cfg;
    float *params = NULL;
    CHECK_OK(dl_albert_load_hf(dir, &cfg, &params));
    if (!params) return;
    dl_batch batch;
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_OK(dl_albert_load_batch(path, &batch));
    dl_safetensors *expected = NULL;
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    CHECK_OK(dl_st_read(path, 0, &expected));
    dl_model *model = NULL;
    CHECK_OK(dl_model_create(device, &cfg, batch.batch, batch.seq, DL_PRECISION_FP32, &model));
    if (!model || !expected) {
        free(params);
        return;
    }
    const dl_param_layout *layout = dl_model_layout(model);
    float *grads = malloc(layout->total * sizeof *grads);
    float *again = malloc(layout->total * sizeof *again);
    float *ref = malloc(layout->total * sizeof *ref);
    dl_losses losses, losses2;
    CHECK_OK(dl_model_set_params(model, params));
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &batch, 1.0f, &losses));
    CHECK_OK(dl_model_get_grads(model, 1.0f, grads));

    float ref_loss[3];
    CHECK_OK(dl_st_get_f32(expected, "loss", &ref_loss[0], 1));
    CHECK_OK(dl_st_get_f32(expected, "mlm_loss", &ref_loss[1], 1));
    CHECK_OK(dl_st_get_f32(expected, "sop_loss", &ref_loss[2], 1));
    float got[3] = {losses.loss, losses.mlm_loss, losses.sop_loss};
    const char *loss_names[3] = {"loss", "mlm_loss", "sop_loss"};
    for (int i = 0; i < 3; i++) {
        double e = rel_err(got[i], ref_loss[i]);
        printf("%s: %-10s %.7f (reference %.7f, rel err %.2e)\n", name, loss_names[i], got[i],
               ref_loss[i], e);
        CHECK_MSG(e < 1e-5, "%s %s rel err %g", name, loss_names[i], e);
    }

    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < layout->count; i++) {
        const dl_param_entry *e = &layout->entries[i];
        if (dl_st_get_f32(expected, e->name, ref + e->offset, e->numel)) {
            CHECK_MSG(0, "%s: reference gradient %s: %s", name, e->name, dl_error());
            continue;
        }
        double err = grad_error(grads + e->offset, ref + e->offset, e->numel);
        if (getenv("DEDLOC_TEST_VERBOSE") || !(err < 1e-4))
            printf("%s:   %-80s rel L2 %.2e\n", name, e->name, err);
        CHECK_MSG(err < 1e-4, "%s gradient %s rel L2 %g", name, e->name, err);
        if (!(err <= worst)) worst_name = e->name;
        worst = dl_test_worse(worst, err);
    }
    printf("%s: worst gradient %s, rel L2 %.2e\n", name, worst_name, worst);

    /* Determinism: the same batch again gives the same bits. */
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &batch, 1.0f, &losses2));
    CHECK_OK(dl_model_get_grads(model, 1.0f, again));
    CHECK(!memcmp(&losses, &losses2, sizeof losses));
    CHECK_MSG(!memcmp(grads, again, layout->total * sizeof *grads), "%s: second run differs",
              name);

    /* Loss scaling is undone by get_grads; accumulation adds. */
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &batch, 1024.0f, &losses2));
    CHECK_OK(dl_model_get_grads(model, 1024.0f, again));
    CHECK(dl_test_rel_l2(again, grads, layout->total) < 1e-6);
    CHECK_OK(dl_model_forward_backward(model, &batch, 1024.0f, &losses2));
    CHECK_OK(dl_model_get_grads(model, 2048.0f, again));
    CHECK(dl_test_rel_l2(again, grads, layout->total) < 1e-6);

    /* Forward only gives the same losses and leaves the gradients alone. */
    CHECK_OK(dl_model_forward(model, &batch, &losses2));
    CHECK(losses2.loss == losses.loss);
    /* Its logits match transformers' (the MLM ones at the labelled rows). */
    int V = cfg.vocab_size, M = losses.masked_tokens, N = batch.batch * batch.seq;
    float *sop = malloc((size_t)batch.batch * 2 * sizeof *sop), *ref_sop = malloc((size_t)batch.batch * 2 * 4);
    float *mlm = malloc(((size_t)M * V + 1) * 4), *ref_mlm = malloc((size_t)N * V * 4);
    CHECK_OK(dl_model_get_logits(model, sop, mlm));
    CHECK_OK(dl_st_get_f32(expected, "sop_logits", ref_sop, (size_t)batch.batch * 2));
    CHECK_OK(dl_st_get_f32(expected, "prediction_logits", ref_mlm, (size_t)N * V));
    double logit_err = dl_test_max_abs(sop, ref_sop, (size_t)batch.batch * 2);
    for (int n = 0, row = 0; n < N; n++)
        if (batch.labels[n] != -100) {
            double e = dl_test_max_abs(mlm + (size_t)row * V, ref_mlm + (size_t)n * V, (size_t)V);
            logit_err = dl_test_worse(logit_err, e);
            row++;
        }
    printf("%s: logits max abs diff %.2e (%d masked rows)\n", name, logit_err, M);
    CHECK_MSG(logit_err < 1e-5, "%s logits differ by %g", name, logit_err);
    free(sop);
    free(ref_sop);
    free(mlm);
    free(ref_mlm);
    float *after = malloc(layout->total * sizeof *after);
    CHECK_OK(dl_model_get_grads(model, 2048.0f, after));
    CHECK(!memcmp(after, again, layout->total * sizeof *after));
    free(after);

    /* No labelled position: HF's mean over nothing is NaN; here the MLM loss
     * is 0 and adds no gradient, so such a micro-batch still trains SOP. */
    dl_batch unlabelled;
    CHECK_OK(dl_batch_alloc(&unlabelled, batch.batch, batch.seq));
    size_t tokens = (size_t)batch.batch * batch.seq;
    memcpy(unlabelled.input_ids, batch.input_ids, tokens * 4);
    memcpy(unlabelled.token_type_ids, batch.token_type_ids, tokens * 4);
    memcpy(unlabelled.attention_mask, batch.attention_mask, tokens * 4);
    memcpy(unlabelled.sentence_order_label, batch.sentence_order_label, (size_t)batch.batch * 4);
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &unlabelled, 1.0f, &losses2));
    CHECK(losses2.masked_tokens == 0 && losses2.mlm_loss == 0.0f);
    CHECK(losses2.loss == losses2.sop_loss && losses2.sop_loss == losses.sop_loss);
    CHECK_OK(dl_model_get_grads(model, 1.0f, again));
    const dl_param_entry *pred_bias = dl_param_layout_find(layout, "predictions.bias");
    bool finite = true, bias_zero = true;
    for (size_t i = 0; i < layout->total; i++) finite = finite && isfinite(again[i]);
    for (size_t i = 0; i < pred_bias->numel; i++) bias_zero = bias_zero && again[pred_bias->offset + i] == 0.0f;
    CHECK(finite && bias_zero);
    dl_batch_free(&unlabelled);

    /* A model sized for larger batches computes the same bits on this one. */
    dl_model *roomy = NULL;
    int roomy_seq = batch.seq + 3 <= cfg.max_position_embeddings ? batch.seq + 3 : batch.seq;
    CHECK_OK(dl_model_create(device, &cfg, batch.batch + 2, roomy_seq, DL_PRECISION_FP32, &roomy));
    if (roomy) {
        CHECK_OK(dl_model_set_params(roomy, params));
        CHECK_OK(dl_model_forward_backward(roomy, &batch, 1.0f, &losses2));
        CHECK_OK(dl_model_get_grads(roomy, 1.0f, again));
        CHECK(losses2.loss == losses.loss);
        CHECK_MSG(!memcmp(grads, again, layout->total * sizeof *grads),
                  "%s: a model sized %d x %d gives other gradients", name, batch.batch + 2,
                  roomy_seq);
        dl_model_free(roomy);
    }
    /* Recomputation: the same bits in fp32 (same kernels on the same inputs),
     * and so the same agreement with the reference. */
    dl_model *re = NULL;
    dl_model_options ro = {.max_batch = batch.batch, .max_seq = batch.seq,
                           .precision = DL_PRECISION_FP32, .recompute = true};
    CHECK_OK(dl_model_create_with(device, &cfg, &ro, &re));
    if (re) {
        CHECK_OK(dl_model_set_params(re, params));
        CHECK_OK(dl_model_zero_grad(re));
        CHECK_OK(dl_model_forward_backward(re, &batch, 1.0f, &losses2));
        CHECK_OK(dl_model_get_grads(re, 1.0f, again));
        CHECK(losses2.loss == losses.loss);
        CHECK_MSG(!memcmp(grads, again, layout->total * sizeof *grads),
                  "%s: recomputation changes the gradients", name);
        printf("%s: recompute gives the same bits; device memory %.1f MiB (without: %.1f MiB)\n",
               name, dl_model_memory_bytes(re) / 1048576.0,
               dl_model_memory_bytes(model) / 1048576.0);
        dl_model_free(re);
    }
    printf("%s: device memory %.1f MiB\n", name, dl_model_memory_bytes(model) / 1048576.0);
    free(grads);
    free(again);
    free(ref);
    free(params);
    dl_model_free(model);
    dl_st_free(expected);
    dl_batch_free(&batch);
}

/* fp16/bf16 storage: the same fixture, with the weights and kept activations
 * rounded to the storage format, lands near the fp32 reference (bounds from
 * the formats' precision: 11 and 8 significant bits) and is deterministic. */
static void check_fixture_storage(const char *name, dl_precision precision, bool recompute, const char *compute,
                                  double loss_tol, double grad_tol) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", source_dir(), name);
    dl_albert_config cfg;
    float *params = NULL;
    dl_batch batch;
    dl_safetensors *expected = NULL;
    CHECK_OK(dl_albert_load_hf(dir, &cfg, &params));
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_OK(dl_albert_load_batch(path, &batch));
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    CHECK_OK(dl_st_read(path, 0, &expected));
    dl_model *model = NULL;
    dl_model_options mo = {.max_batch = batch.batch, .max_seq = batch.seq,
                           .precision = precision, .recompute = recompute};
    CHECK_OK(dl_model_create_with(device, &cfg, &mo, &model));
    if (!model || !params || !expected) return;
    CHECK_MSG(!strcmp(dl_model_compute_name(model), compute), "%s: computes in %s, expected %s",
              name, dl_model_compute_name(model), compute);
    const dl_param_layout *layout = dl_model_layout(model);
    float *grads = malloc(layout->total * sizeof *grads), *again = malloc(layout->total * 4),
          *ref = malloc(layout->total * sizeof *ref);
    dl_losses losses, losses2;
    float scale = 65536.0f; /* as the fp16 loss scaler starts */
    CHECK_OK(dl_model_set_params(model, params));
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &batch, scale, &losses));
    CHECK_OK(dl_model_get_grads(model, scale, grads));
    float ref_loss;
    CHECK_OK(dl_st_get_f32(expected, "loss", &ref_loss, 1));
    double le = rel_err(losses.loss, ref_loss), worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < layout->count; i++) {
        const dl_param_entry *e = &layout->entries[i];
        if (strstr(e->name, "key.bias")) continue; /* exactly zero, noise on both sides */
        CHECK_OK(dl_st_get_f32(expected, e->name, ref + e->offset, e->numel));
        double err = grad_error(grads + e->offset, ref + e->offset, e->numel);
        if (!(err <= worst)) worst_name = e->name;
        worst = dl_test_worse(worst, err);
    }
    printf("%s %s%s (compute %s): loss rel err %.2e, worst gradient %s rel L2 %.2e\n", name,
           dl_precision_name(precision), recompute ? " recompute" : "", compute, le, worst_name, worst);
    CHECK_MSG(le < loss_tol, "%s %s loss rel err %g", name, dl_precision_name(precision), le);
    CHECK_MSG(worst < grad_tol, "%s %s gradient %s rel L2 %g", name, dl_precision_name(precision),
              worst_name, worst);
    CHECK_OK(dl_model_zero_grad(model));
    CHECK_OK(dl_model_forward_backward(model, &batch, scale, &losses2));
    CHECK_OK(dl_model_get_grads(model, scale, again));
    CHECK(!memcmp(&losses, &losses2, sizeof losses));
    CHECK(!memcmp(grads, again, layout->total * sizeof *grads));
    printf("%s %s: device memory %.2f MiB\n", name, dl_precision_name(precision),
           dl_model_memory_bytes(model) / 1048576.0);
    free(grads);
    free(again);
    free(ref);
    free(params);
    dl_model_free(model);
    dl_st_free(expected);
    dl_batch_free(&batch);
}

/* The gradient bound of native half compute for a fixture: 8 sqrt(k) u
 * with k its longest GEMM sum (main says why). */
static double half_sum_tolerance(const char *name) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", source_dir(), name);
    dl_albert_config cfg;
    float *params = NULL;
    dl_batch batch;
    CHECK_OK(dl_albert_load_hf(dir, &cfg, &params));
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_OK(dl_albert_load_batch(path, &batch));
    int k = cfg.vocab_size;
    int sums[] = {cfg.hidden_size, cfg.intermediate_size, cfg.embedding_size, batch.batch * batch.seq};
    for (size_t i = 0; i < sizeof sums / sizeof sums[0]; i++)
        if (sums[i] > k) k = sums[i];
    free(params);
    dl_batch_free(&batch);
    return 8.0 * sqrt((double)k) * ldexp(1.0, -11);
}

int main(void) {
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &device));
    if (!device) return dl_test_finish("test_albert_reference");
    printf("device: %s\n", dl_device_get_info(device)->name);
    check_fixture("albert_tiny");
    check_fixture("albert_groups");
    check_fixture("albert_odd");
#ifdef DEDLOC_TEST_HOOKS
    /* The MLM decoder a few rows at a time (mlm_decoder.c takes 512): every
     * chunk's logits, loss and decoder gradients against the same fixtures,
     * and the logits of a forward pass fetched chunk by chunk. */
    setenv("DEDLOC_MLM_CHUNK", "3", 1);
    check_fixture("albert_tiny");
    check_fixture("albert_odd");
    unsetenv("DEDLOC_MLM_CHUNK");
#endif
    /* fp16 storage with fp32 arithmetic, on any device */
    setenv("DEDLOC_FP16_COMPUTE", "off", 1);
    setenv("DEDLOC_BF16_COMPUTE", "off", 1); /* bf16 compute: test_albert_bf16.c */
    check_fixture_storage("albert_groups", DL_PRECISION_FP16, false, "fp32", 1e-4, 1e-2);
    check_fixture_storage("albert_odd", DL_PRECISION_FP16, false, "fp32", 1e-4, 1e-2);
    check_fixture_storage("albert_groups", DL_PRECISION_BF16, false, "fp32", 1e-3, 8e-2);
    check_fixture_storage("albert_odd", DL_PRECISION_BF16, false, "fp32", 1e-3, 8e-2);
    /* fp16 compute: every GEMM's operands and product rounded to half (11
     * significant bits, unit roundoff 2^-11 = 4.9e-4). The kept activations
     * are halves already, so the new roundings are those of the gradients
     * flowing back and of each product; the storage bounds still hold
     * (measured on PoCL, emulated: loss 8.6e-6, gradients 2.8e-3). Emulated
     * (test builds, any device): the products sum in fp32 inside the GEMM. */
#ifdef DEDLOC_TEST_HOOKS
    setenv("DEDLOC_FP16_COMPUTE", "emulate", 1);
    check_fixture_storage("albert_groups", DL_PRECISION_FP16, false, "fp16-emulated", 1e-4, 1e-2);
    check_fixture_storage("albert_odd", DL_PRECISION_FP16, false, "fp16-emulated", 1e-4, 1e-2);
#endif
    /* Real CLBlastHgemm where the device has cl_khr_fp16: each element of a
     * product is a sum of k half products rounded in half at every step, so
     * its error grows like sqrt(k) * u (u = 2^-11, the roundings independent)
     * instead of u; a gradient passes through several such products, which
     * the factor 8 allows. k is the longest sum of the fixture (the vocabulary
     * in the decoder's input gradient, B*T in the weight gradients, the
     * intermediate size in the FFN). Measured on Intel's OpenCL CPU runtime:
     * loss 4.5e-6 and 6.7e-6, gradients 3.9e-3 (albert_groups, albert_odd);
     * the bounds come to about 3e-2 and 4.5e-2. */
    setenv("DEDLOC_FP16_COMPUTE", "require", 1);
    bool native_half = dl_device_get_info(device)->fp16;
    if (native_half) {
        check_fixture_storage("albert_groups", DL_PRECISION_FP16, false, "fp16", 1e-3,
                              half_sum_tolerance("albert_groups"));
        check_fixture_storage("albert_odd", DL_PRECISION_FP16, false, "fp16", 1e-3,
                              half_sum_tolerance("albert_odd"));
    } else {
        /* asked for, fp16 compute is refused where the device cannot do it */
        dl_albert_config cfg;
        CHECK_OK(dl_albert_config_preset("tiny", &cfg));
        dl_model *model = NULL;
        CHECK(dl_model_create(device, &cfg, 2, 16, DL_PRECISION_FP16, &model) == -1 && !model);
        CHECK_MSG(strstr(dl_error(), "cl_khr_fp16") != NULL, "refusal: %s", dl_error());
        dl_model_free(model);
    }
    unsetenv("DEDLOC_FP16_COMPUTE");
    /* Recomputed activations stay fp32: within the same bounds; fp16 storage
     * computes in half by default where the device has cl_khr_fp16. */
    if (native_half)
        check_fixture_storage("albert_groups", DL_PRECISION_FP16, true, "fp16", 1e-3,
                              half_sum_tolerance("albert_groups"));
    else
        check_fixture_storage("albert_groups", DL_PRECISION_FP16, true, "fp32", 1e-4, 1e-2);
    check_fixture_storage("albert_odd", DL_PRECISION_BF16, true, "fp32", 1e-3, 8e-2);
    dl_device_close(device);
    return dl_test_finish("test_albert_reference");
}
