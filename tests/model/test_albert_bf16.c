/* bf16 compute (--precision bf16 on a CPU with AVX512-BF16): the model's
 * GEMMs (the linear layers' and attention's batched products over
 * (sequence, head)) multiply bf16-rounded operands with fp32 accumulation. On
 * the PyTorch fixtures (fp32 reference losses and gradients) the result
 * must stay within bounds derived from bf16's precision, be deterministic,
 * and differ from bf16 storage with fp32 arithmetic (the GEMMs really ran
 * in bf16).
 *
 * Bounds: bf16 keeps 8 significant bits, unit roundoff u = 2^-9 = 1.95e-3.
 * Storage already rounds the weights and every kept activation once (the
 * bounds test_albert_reference holds bf16 storage to: loss 1e-3, gradients
 * 8e-2 relative L2, about u/2 and 40u). bf16 compute adds one rounding of
 * each GEMM operand not already stored in bf16: the fp32 working
 * activations and the gradients flowing back, each off by at most u
 * relative; a few such roundings in a row per layer, independent from
 * element to element, move the loss by about u and the gradients by a few
 * u more. So: loss within 2u = 3.9e-3 relative, gradients within the
 * storage bound 8e-2, on the fixtures test_albert_reference holds bf16
 * storage to (measured here: loss 9e-5 and 1e-5, gradients 2.5e-2 and
 * 1.7e-2). Not albert_tiny: its pooler bias gradient is a sum over two
 * sequences that nearly cancel, so the rounding of the SOP head's gradient
 * shows there relative to a small sum (9.6e-2 measured, 1.9e-2 with bf16
 * storage alone).
 *
 * Where bf16 compute is unavailable (run with DNNL_MAX_CPU_ISA=AVX512_CORE:
 * the tests/model/CMakeLists.txt entry model/test_albert_bf16_unavailable),
 * the model computes in fp32 on bf16 storage, and DEDLOC_BF16_COMPUTE=require
 * is refused with the reason. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"
#include "dl_test.h"

static dl_device *device;

typedef struct run_result {
    dl_losses losses;
    float *grads;
    char compute[16];
} run_result;

static int run(const dl_albert_config *cfg, const float *params, const dl_batch *batch, const char *mode,
               run_result *out) {
    setenv("DEDLOC_BF16_COMPUTE", mode, 1);
    dl_model *model = NULL;
    int rc = dl_model_create(device, cfg, batch->batch, batch->seq, DL_PRECISION_BF16, &model);
    unsetenv("DEDLOC_BF16_COMPUTE");
    if (rc) return -1;
    const dl_param_layout *layout = dl_model_layout(model);
    out->grads = malloc(layout->total * sizeof *out->grads);
    snprintf(out->compute, sizeof out->compute, "%s", dl_model_compute_name(model));
    rc = !out->grads || dl_model_set_params(model, params) || dl_model_zero_grad(model) ||
         dl_model_forward_backward(model, batch, 1.0f, &out->losses) ||
         dl_model_get_grads(model, 1.0f, out->grads);
    dl_model_free(model);
    return rc ? -1 : 0;
}

static void check_fixture(const char *name, bool available) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", DEDLOC_SOURCE_DIR, name);
    dl_albert_config cfg;
    float *params = NULL;
    dl_batch batch;
    dl_safetensors *expected = NULL;
    CHECK_OK(dl_albert_load_hf(dir, &cfg, &params));
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_OK(dl_albert_load_batch(path, &batch));
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    CHECK_OK(dl_st_read(path, 0, &expected));
    if (!params || !expected) return;
    run_result bf = {0}, again = {0}, storage = {0};
    CHECK_OK(run(&cfg, params, &batch, "auto", &bf));
    CHECK_OK(run(&cfg, params, &batch, "auto", &again));
    CHECK_OK(run(&cfg, params, &batch, "off", &storage));
    if (!bf.grads || !again.grads || !storage.grads) goto done;
    CHECK_MSG(!strcmp(bf.compute, available ? "bf16" : "fp32"), "%s: computes in %s", name, bf.compute);
    CHECK_MSG(!strcmp(storage.compute, "fp32"), "%s: DEDLOC_BF16_COMPUTE=off computes in %s", name,
              storage.compute);

    dl_param_layout layout;
    CHECK_OK(dl_param_layout_build(&cfg, &layout));
    float *ref = malloc(layout.total * sizeof *ref);
    float ref_loss;
    CHECK_OK(dl_st_get_f32(expected, "loss", &ref_loss, 1));
    double loss_err = fabs((double)bf.losses.loss - ref_loss) / fabs((double)ref_loss);
    double worst = 0, worst_storage = 0;
    const char *worst_name = "";
    for (int i = 0; ref && i < layout.count; i++) {
        const dl_param_entry *e = &layout.entries[i];
        if (strstr(e->name, "key.bias")) continue; /* exactly zero: rounding noise on both sides */
        CHECK_OK(dl_st_get_f32(expected, e->name, ref + e->offset, e->numel));
        double err = dl_test_rel_l2_floor(bf.grads + e->offset, ref + e->offset, e->numel, 1e-6);
        if (!(err <= worst)) worst_name = e->name;
        worst = dl_test_worse(worst, err);
        worst_storage = dl_test_worse(
            worst_storage, dl_test_rel_l2_floor(storage.grads + e->offset, ref + e->offset, e->numel, 1e-6));
    }
    printf("%s: compute %s: loss %.7f (reference %.7f, rel err %.2e), worst gradient %s rel L2 %.2e "
           "(bf16 storage alone: loss rel err %.2e, worst gradient %.2e)\n",
           name, bf.compute, bf.losses.loss, ref_loss, loss_err, worst_name, worst,
           fabs((double)storage.losses.loss - ref_loss) / fabs((double)ref_loss), worst_storage);
    CHECK_MSG(loss_err < 2 * 0x1p-9, "%s: loss rel err %g", name, loss_err);
    CHECK_MSG(worst < 8e-2, "%s: gradient %s rel L2 %g", name, worst_name, worst);
    /* deterministic: the same bits twice */
    CHECK(bf.losses.loss == again.losses.loss && bf.losses.mlm_loss == again.losses.mlm_loss &&
          bf.losses.sop_loss == again.losses.sop_loss);
    CHECK_MSG(!memcmp(bf.grads, again.grads, layout.total * sizeof *bf.grads), "%s: second run differs", name);
    /* bf16 GEMMs change the result; without them it is bf16 storage's */
    bool same = !memcmp(bf.grads, storage.grads, layout.total * sizeof *bf.grads);
    CHECK_MSG(same == !available, "%s: bf16 compute gives %s gradients as bf16 storage alone", name,
              same ? "the same" : "other");
    free(ref);
    dl_param_layout_free(&layout);
done:
    free(bf.grads);
    free(again.grads);
    free(storage.grads);
    free(params);
    dl_st_free(expected);
    dl_batch_free(&batch);
}

int main(void) {
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &device));
    if (!device) return dl_test_finish("test_albert_bf16");
    char why[256] = "";
    bool available = dl_bf16_gemm_supported(device, why, sizeof why);
    printf("device: %s; bf16 compute %s%s\n", dl_device_get_info(device)->name, available ? "yes" : "no: ", why);
    check_fixture("albert_groups", available);
    check_fixture("albert_odd", available);
    if (!available) {
        /* asked for, it is refused with the reason */
        dl_albert_config cfg;
        CHECK_OK(dl_albert_config_preset("tiny", &cfg));
        dl_model *model = NULL;
        setenv("DEDLOC_BF16_COMPUTE", "require", 1);
        CHECK(dl_model_create(device, &cfg, 2, 16, DL_PRECISION_BF16, &model) == -1 && !model);
        unsetenv("DEDLOC_BF16_COMPUTE");
        CHECK_MSG(strstr(dl_error(), why) != NULL, "refusal: %s", dl_error());
        dl_model_free(model);
    }
    dl_device_close(device);
    return dl_test_finish("test_albert_bf16");
}
