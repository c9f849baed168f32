/* The trainer's backend on a real device: the ALBERT model on an OpenCL
 * device, fed micro-batches by the data stream. dl_trainer_run knows the
 * model and the data only through the callbacks below, so `dedloc train`,
 * any other peer that trains and the tests share this one glue. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

static int be_set_params(void *ctx, const float *params) {
    return dl_model_set_params(((dl_device_backend *)ctx)->model, params);
}

static int next_batch(dl_device_backend *b) {
    int rc = dl_data_next_batch(b->data, &b->batch, -1);
    if (rc == DL_DATA_BATCH) return 0;
    if (rc == DL_DATA_END) return dl_fail("the data source ended");
    return rc == DL_DATA_TIMEOUT ? dl_fail("timed out waiting for data") : -1;
}

static int be_micro_batch(void *ctx, float loss_scale, float *grad, int *samples, dl_losses *losses) {
    dl_device_backend *b = ctx;
    if (next_batch(b)) return -1;
    if (dl_model_zero_grad(b->model) || dl_model_forward_backward(b->model, &b->batch, loss_scale, losses) ||
        dl_model_get_grads(b->model, loss_scale, grad))
        return -1;
    *samples = b->batch.batch;
    return 0;
}

/* Each micro-batch's mean gradient enters the device's sum weighted by its
 * sequences, folded into the loss scale, so nothing crosses to the host
 * until the step is complete. */
static int be_accumulate(void *ctx, bool first, float loss_scale, int *samples, dl_losses *losses) {
    dl_device_backend *b = ctx;
    if (next_batch(b)) return -1;
    if (first && dl_model_zero_grad(b->model)) return -1;
    if (dl_model_forward_backward(b->model, &b->batch, loss_scale * (float)b->batch.batch, losses)) return -1;
    *samples = b->batch.batch;
    return 0;
}

static int be_collect(void *ctx, float loss_scale, int64_t total_samples, float *grad) {
    dl_device_backend *b = ctx;
    if (total_samples <= 0) return dl_fail("no samples were accumulated");
    return dl_model_get_grads(b->model, loss_scale * (float)total_samples, grad);
}

static int be_skip(void *ctx, int64_t n) {
    dl_device_backend *b = ctx;
    for (int64_t i = 0; i < n; i++)
        if (next_batch(b)) return -1;
    return 0;
}

static int be_mark_data(void *ctx) { return dl_data_mark(((dl_device_backend *)ctx)->data); }

static int be_save_data(void *ctx, uint8_t **state, size_t *size) {
    return dl_data_save_state(((dl_device_backend *)ctx)->data, state, size);
}

int dl_device_backend_open(dl_device_backend *be, const dl_data_config *data, const dl_tokenizer *tok,
                           const char *device_selector, const dl_albert_config *cfg,
                           dl_precision precision) {
    dl_model_options opts = {.max_batch = data->batch_size, .max_seq = data->max_seq_len,
                             .precision = precision};
    return dl_device_backend_open_with(be, data, tok, device_selector, cfg, &opts, 0, 0, NULL);
}

int dl_device_backend_open_with(dl_device_backend *be, const dl_data_config *data,
                                const dl_tokenizer *tok, const char *device_selector,
                                const dl_albert_config *cfg, const dl_model_options *opts,
                                long long max_device_mb, int max_batch_limit, int *batch_used) {
    memset(be, 0, sizeof *be);
    dl_data_config dc = *data;
    dl_model_options mo = *opts;
    mo.max_seq = dc.max_seq_len;
    /* The device first: the micro-batch it fits decides the stream's batches. */
    if (dl_device_open(device_selector, &be->device)) goto fail;
    const dl_device_info *info = dl_device_get_info(be->device);
    DL_INFO("train", "device: %s", info->name);
    if (mo.max_batch <= 0) {
        if (dl_model_fp16_compute(info, mo.precision, &mo.fp16_compute_elem)) goto fail;
        size_t budget = dl_model_memory_budget(info, max_device_mb);
        dl_model_memory est;
        if (dl_model_fit_batch(cfg, &mo, budget, (size_t)info->max_alloc,
                               max_batch_limit > 0 ? max_batch_limit : 4096, &mo.max_batch, &est)) {
            dl_fail_context("choosing the micro-batch for %s", info->name);
            goto fail;
        }
        DL_INFO("train", "micro-batch %d x %d fits %.0f MiB of device memory (estimate %.0f MiB%s)",
                mo.max_batch, mo.max_seq, (double)budget / 1048576.0, (double)est.total / 1048576.0,
                mo.recompute ? ", activations recomputed" : "");
    }
    dc.batch_size = mo.max_batch;
    if (batch_used) *batch_used = mo.max_batch;
    if (dl_data_open(&dc, tok, &be->data)) goto fail;
    if (dl_model_create_with(be->device, cfg, &mo, &be->model)) goto fail;
    return 0;
fail:
    dl_device_backend_close(be);
    return -1;
}

void dl_device_backend_close(dl_device_backend *be) {
    if (be->model) dl_model_free(be->model);
    if (be->data) dl_data_close(be->data);
    dl_batch_free(&be->batch);
    if (be->device) dl_device_close(be->device);
    memset(be, 0, sizeof *be);
}

static uint64_t be_batch_fingerprint(void *ctx) {
    return dl_batch_fingerprint(&((dl_device_backend *)ctx)->batch);
}

dl_trainer_backend dl_device_backend_callbacks(dl_device_backend *be) {
    return (dl_trainer_backend){be, be_set_params, be_micro_batch, be_skip, be_accumulate, be_collect,
                                be_mark_data, be_save_data, false, be_batch_fingerprint};
}
