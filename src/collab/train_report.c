/* What the step loop says of itself (train_loop_internal.h): JSON events
 * and step lines (the log file and the status stream), the signed metrics
 * record monitors read, and the progress line. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

static void add_member_list(cJSON *o, const struct dl_avg_result *r) {
    cJSON *members = cJSON_AddArrayToObject(o, "members");
    for (size_t i = 0; i < r->num_members; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "peer_id", r->members[i].peer_id);
        cJSON_AddNumberToObject(m, "samples", r->members[i].weight);
        cJSON_AddStringToObject(m, "role", dl_member_role_name(r->members[i].role));
        cJSON_AddItemToArray(members, m);
    }
    /* The rule the group record fixed for this round (the leader's). */
    cJSON_AddStringToObject(o, "aggregation", dl_aggregation_name(r->aggregation));
}

static void emit(loop_state *st, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        if (st->report.log) {
            fprintf(st->report.log, "%s\n", text);
            fflush(st->report.log);
        }
        if (st->o->status) {
            fprintf(st->o->status, "%s\n", text);
            fflush(st->o->status);
        }
    }
    free(text);
    cJSON_Delete(o);
}

/* Test hook: which micro-batch of our share of the stream we just drew (its
 * index counts our micro-batches since the run began, across resumes). */
void loop_log_batch(loop_state *st) {
    if (!st->o->test_log_batches || !st->be->batch_fingerprint) return;
    char hex[17];
    dl_hash64_hex(st->be->batch_fingerprint(st->be->ctx), hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(DL_TRAIN_EVENT_BATCH));
    cJSON_AddNumberToObject(o, "epoch", (double)st->model.opt.step);
    cJSON_AddNumberToObject(o, "index", (double)st->count.progress.micro_batches);
    cJSON_AddStringToObject(o, "fingerprint", hex);
    emit(st, o);
}

void loop_log_event(loop_state *st, enum dl_train_event event, const char *detail) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(event));
    cJSON_AddNumberToObject(o, "epoch", (double)st->model.opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddStringToObject(o, "detail", detail);
    emit(st, o);
}

/* The state we start from (a resumed checkpoint's or the initial weights),
 * and how the data stream got to our position in it: "fresh", "seek" (opened
 * at the checkpoint's recorded position) or "replay" (data_skipped batches
 * re-read from the start). */
void loop_log_start(loop_state *st, bool resumed, const char *data, int64_t data_skipped) {
    char hex[65];
    dl_collab_hash_hex(st->model.hash, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(DL_TRAIN_EVENT_START));
    cJSON_AddNumberToObject(o, "epoch", (double)st->model.opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddBoolToObject(o, "resumed", resumed);
    cJSON_AddStringToObject(o, "param_hash", hex);
    if (st->be) {
        cJSON_AddStringToObject(o, "data", data);
        cJSON_AddNumberToObject(o, "data_skipped", (double)data_skipped);
        cJSON_AddNumberToObject(o, "micro_batches", (double)st->count.progress.micro_batches);
    }
    emit(st, o);
}

void loop_log_step(loop_state *st, const struct dl_avg_result *r, const dl_opt_step_info *info,
                   const float *losses, double group_samples, int64_t local_samples, double wall_s) {
    char hex[65] = "";
    if (st->model.has_state) dl_collab_hash_hex(st->model.hash, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)st->model.opt.step);
    cJSON_AddNumberToObject(o, "loss", losses ? losses[0] : NAN);
    cJSON_AddNumberToObject(o, "mlm_loss", losses ? losses[1] : NAN);
    cJSON_AddNumberToObject(o, "sop_loss", losses ? losses[2] : NAN);
    cJSON_AddNumberToObject(o, "lr", info ? info->lr : 0);
    cJSON_AddNumberToObject(o, "samples", (double)st->count.progress.samples);
    cJSON_AddNumberToObject(o, "samples_per_second", wall_s > 0 ? group_samples / wall_s : 0);
    cJSON_AddNumberToObject(o, "grad_norm", info ? info->grad_norm : 0);
    cJSON_AddNumberToObject(o, "loss_scale", st->accum.ls.scale);
    cJSON_AddStringToObject(o, "param_hash", hex);
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddNumberToObject(o, "group_samples", group_samples);
    cJSON_AddNumberToObject(o, "local_samples", (double)local_samples);
    add_member_list(o, r);
    cJSON_AddNumberToObject(o, "round_s", r->total_s);
    cJSON_AddNumberToObject(o, "matchmaking_s", r->matchmaking_s);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)r->bytes_sent);
    cJSON_AddNumberToObject(o, "bytes_received", (double)r->bytes_received);
    cJSON_AddNumberToObject(o, "compute_s", st->report.compute_s);
    cJSON_AddNumberToObject(o, "wait_s", fmax(0, wall_s - st->report.compute_s));
    /* Exact mode: compute that ran while this step's round matchmade. */
    cJSON_AddNumberToObject(o, "matchmaking_overlap_s", st->early.overlap_s);
    cJSON_AddNumberToObject(o, "matchmaking_overlap_micro_batches", (double)st->early.overlap_micro);
    /* Local-steps mode: loss above is the outer loss (averaged with the
     * pseudo-gradients); local_loss is our last inner step's. */
    if (st->local.on) loop_local_report(st, o);
    /* Once per episode of sharply rising loss, in the log and on stderr. */
    if (losses && dl_loss_watch_add(&st->report.loss_watch, st->model.opt.step, losses[0])) {
        char warning[512];
        dl_loss_watch_describe(&st->report.loss_watch, info ? info->lr : 0, warning, sizeof warning);
        DL_WARN("collab", "%s", warning);
        cJSON_AddStringToObject(o, "warning", warning);
    }
    emit(st, o);
}

/* Copies text into a metrics field, replacing what the record refuses
 * (control bytes, non-ASCII, " \ < > &) so an odd device name cannot stop it. */
static void metrics_text(char *out, size_t cap, const char *text) {
    snprintf(out, cap, "%s", text ? text : "");
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e || strchr("\"\\<>&", *p)) *p = '_';
}

/* The metrics record monitors show: one per step, signed by net. */
void loop_publish_metrics(loop_state *st, const float *losses, int64_t local_samples, double wall_s) {
    if (!st->be) return;
    st->report.samples_contributed += (double)local_samples;
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    m.step = (uint64_t)st->model.opt.step;
    m.loss = losses && isfinite(losses[0]) && losses[0] >= 0 ? losses[0] : -1;
    m.samples_per_second = wall_s > 0 ? (double)local_samples / wall_s : 0;
    m.samples_total = st->report.samples_contributed;
    m.uptime_s = dl_now() - st->report.run_start;
    m.target_batch = (double)st->o->base.target_batch; /* the monitor's header, when it was not told */
    m.syncs = st->local.on ? (double)st->local.syncs : 0;
    m.bytes_sent = st->report.bytes_sent;
    const struct dl_collab_train_options *o = st->o;
    metrics_text(m.device, sizeof m.device, o->device_name);
    metrics_text(m.vendor, sizeof m.vendor, o->device_vendor);
    metrics_text(m.precision, sizeof m.precision, o->precision_name);
    metrics_text(m.name, sizeof m.name, o->display_name);
    if (dl_net_publish_metrics(st->net, &m)) DL_WARN("collab", "metrics record not published: %s", dl_error());
}

void loop_progress_line(loop_state *st, const float *losses, double sps, size_t members) {
    FILE *out = st->o->base.progress;
    if (!out) return;
    char hex[65] = "-";
    if (st->model.has_state) dl_collab_hash_hex(st->model.hash, hex);
    fprintf(out, "step %" PRId64 "/%" PRId64 " | loss %.4f | %zu in round | %.1f samples/s | hash %.12s\n",
            st->model.opt.step, st->o->base.max_steps, losses ? losses[0] : NAN, members, sps, hex);
    fflush(out);
}
