/* Local-steps mode of the step loop (DiLoCo; docs/collab_training.md,
 * "Low-communication mode"; train_loop_internal.h lists the loop's files).
 * st->model holds the OUTER weights and the outer Nesterov optimizer: what
 * the swarm averages toward, hashes, serves and checkpoints, bit-identical
 * on every peer. Here live this peer's own pieces: its local weights (the
 * device trains on them), its inner optimizer (the run's LAMB or AdamW, its
 * own schedule position), and the error-feedback residual of what its syncs
 * have not sent yet. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

/* The checkpoint keeps the loss sums since the last sync in 3 doubles. */
_Static_assert(LOSS_ELEMS == 3, "dl_checkpoint_local.loss_sum holds LOSS_ELEMS sums");

void dl_local_pseudo_gradient(size_t n, const float *outer, const float *local, const float *residual, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = (outer[i] - local[i]) + residual[i];
}

/* The same sum as dl_local_pseudo_gradient, recomputed from the same
 * operands (so the same bits) rather than kept in a third buffer. */
void dl_local_residual_update(size_t n, const float *outer, const float *local, float *residual, const float *sent) {
    for (size_t i = 0; i < n; i++) residual[i] = ((outer[i] - local[i]) + residual[i]) - sent[i];
}

int loop_local_init(loop_state *st, const dl_opt_config *inner_config, const dl_checkpoint *resume) {
    struct loop_local *l = &st->local;
    size_t n = st->model.n;
    l->on = true;
    if (dl_optimizer_init(&l->inner, inner_config, &st->model.opt.layout))
        return dl_fail_context("the inner optimizer of local-steps mode");
    l->params = dl_malloc(dl_mul_size(n, sizeof(float)));
    l->residual = dl_calloc(n, sizeof(float));
    l->sent = dl_malloc(dl_mul_size(n + LOSS_ELEMS, sizeof(float)));
    if (!l->params || !l->residual || !l->sent) return -1;
    if (!resume) {
        memcpy(l->params, st->model.params, n * sizeof(float));
        return 0;
    }
    const dl_checkpoint_local *c = &resume->local;
    memcpy(l->params, c->params, n * sizeof(float));
    memcpy(l->residual, c->residual, n * sizeof(float));
    memcpy(l->inner.exp_avg, c->exp_avg, n * sizeof(float));
    memcpy(l->inner.exp_avg_sq, c->exp_avg_sq, n * sizeof(float));
    l->inner.step = c->inner_step;
    /* In the middle of the inner steps: the samples and losses behind the
     * local weights since the last sync go into the next one. */
    st->accum.acc.samples = c->samples_since_sync;
    for (int k = 0; k < LOSS_ELEMS; k++) st->accum.loss_sum[k] = c->loss_sum[k];
    st->count.micro_since_round = c->samples_since_sync > 0 ? 1 : 0;
    return 0;
}

void loop_local_free(loop_state *st) {
    struct loop_local *l = &st->local;
    dl_optimizer_free(&l->inner);
    free(l->params);
    free(l->residual);
    free(l->sent);
    l->params = l->residual = l->sent = NULL;
}

int loop_local_inner_step(loop_state *st, float *grad, const dl_losses *losses) {
    struct loop_local *l = &st->local;
    if (dl_optimizer_step(&l->inner, l->params, grad, NULL))
        return dl_fail_context("inner step %" PRId64, l->inner.step);
    l->inner_loss = losses->loss;
    if (st->be->set_params(st->be->ctx, l->params))
        return dl_fail_context("uploading the local weights after inner step %" PRId64, l->inner.step);
    return 0;
}

int64_t loop_local_round_vector(loop_state *st, float *vec) {
    size_t n = st->model.n;
    int64_t samples = st->accum.acc.samples;
    if (samples <= 0) return dl_fail("no inner steps since the last sync: nothing to average");
    dl_local_pseudo_gradient(n, st->model.params, st->local.params, st->local.residual, vec);
    for (int k = 0; k < LOSS_ELEMS; k++) vec[n + k] = (float)(st->accum.loss_sum[k] / (double)samples);
    return samples;
}

void loop_local_prefill_sent(loop_state *st, const float *vec) {
    /* What we send, until the round says what the codec made of it: with
     * the codec none (or a round that does not fill it) nothing was lost. */
    memcpy(st->local.sent, vec, (st->model.n + LOSS_ELEMS) * sizeof(float));
}

void loop_local_before_outer_step(loop_state *st) {
    dl_local_residual_update(st->model.n, st->model.params, st->local.params, st->local.residual, st->local.sent);
}

void loop_local_after_outer_step(loop_state *st) {
    memcpy(st->local.params, st->model.params, st->model.n * sizeof(float));
    st->local.syncs++;
}

int loop_local_restart(loop_state *st) {
    /* The outer weights moved under us (a download): the local weights
     * start again from them. Inner steps taken from the old outer weights
     * would not make a pseudo-gradient of the new ones, so their samples
     * are dropped; the inner optimizer's moments and the residual are kept
     * (they describe this peer's data and what it has not sent, not the
     * weights). */
    memcpy(st->local.params, st->model.params, st->model.n * sizeof(float));
    if (st->accum.acc.samples > 0)
        DL_INFO("collab", "local-steps mode: %" PRId64 " samples of inner steps from the previous outer weights "
                "dropped", st->accum.acc.samples);
    loop_clear_accumulation(st);
    st->count.micro_since_round = 0;
    return loop_mark_data(st);
}

void loop_local_checkpoint(const loop_state *st, dl_checkpoint *ck) {
    const struct loop_local *l = &st->local;
    dl_checkpoint_local *c = &ck->local;
    c->params = l->params;
    c->exp_avg = l->inner.exp_avg;
    c->exp_avg_sq = l->inner.exp_avg_sq;
    c->residual = l->residual;
    c->inner_config = l->inner.config;
    c->inner_step = l->inner.step;
    c->samples_since_sync = st->accum.acc.samples;
    for (int k = 0; k < LOSS_ELEMS; k++) c->loss_sum[k] = st->accum.loss_sum[k];
    c->local_steps = st->o->local_steps;
}

void loop_local_report(const loop_state *st, cJSON *o) {
    const struct loop_local *l = &st->local;
    cJSON_AddStringToObject(o, "mode", "local");
    cJSON_AddNumberToObject(o, "syncs", (double)l->syncs);
    cJSON_AddNumberToObject(o, "inner_steps", (double)l->inner.step);
    cJSON_AddNumberToObject(o, "local_loss", (double)l->inner_loss);
    /* |residual|_2: what error feedback holds back for the next sync (0
     * with the codec none). */
    double r2 = 0;
    for (size_t i = 0; i < st->model.n; i++) r2 += (double)l->residual[i] * (double)l->residual[i];
    cJSON_AddNumberToObject(o, "residual_norm", sqrt(r2));
    cJSON_AddNumberToObject(o, "bytes_sent_total", st->report.bytes_sent);
    cJSON_AddStringToObject(o, "outer_compression", dl_codec_name(st->o->outer_compression));
}
