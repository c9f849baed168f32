/* The DeDLOC step loop of one peer (include/dedloc/collab.h, "collaborative
 * training"): accumulate, publish progress, average with the ready peers at
 * our epoch, step on the host, publish the new param hash and state. A peer
 * behind the swarm or disagreeing with it downloads the state. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/round_async.h"
#include "collab/train_sync.h"
#include "dedloc/util.h"

/* Extra elements averaged with the gradient: the peers' mean losses, so that
 * every member logs the same collective loss. */
#define LOSS_ELEMS 3
/* Stream batches drawn since the data mark beyond which the mark moves on
 * (the stream keeps each: 4096 batches of 8 x 512 tokens are about 270 MB). */
#define MARK_RETAIN_LIMIT 4096

typedef struct {
    const struct dl_collab_train_options *o;
    dl_net *net;
    dl_collab *collab;
    dl_state_donor *donor;
    const dl_trainer_backend *be;  /* NULL: auxiliary peer */
    size_t n;
    float *params;
    dl_optimizer opt;
    dl_grad_accum acc;             /* host path: the sum; device path: only .samples (the sum is on the device) */
    bool on_device;                /* the gradient sums on the device, one download per round */
    bool device_fresh;             /* the device's sum starts from zero at the next micro-batch */
    /* Delayed update: the round of our epoch runs on a thread (round) over
     * rvec while micro-batches of the next step go into acc; a failed
     * round's gradient waits in carry (sum weighted by samples) for the next. */
    bool delayed;
    dl_async_round round;
    float *rvec;
    int64_t round_local;
    int64_t round_epoch;           /* the epoch the running round is for */
    dl_loss_scale round_ls;        /* our loss scale when it started */
    dl_opt_step_info round_info;   /* the step taken on the round's thread */
    char round_error[256];         /* why that step failed */
    dl_grad_accum carry;
    double carry_loss[LOSS_ELEMS];
    /* Exact mode, "Matchmaking ahead of the ETA" below: the round of our
     * epoch matchmakes on a thread (early) while micro-batches go on; when
     * the accumulation ends our vector (in rvec) and weight are handed
     * over and the loop waits for the average as before. */
    bool early_on;
    dl_async_round early;
    struct dl_avg_handoff handoff;
    int64_t early_refused_epoch;   /* an early round failed here: the plain round follows (-1: none) */
    double early_compute_s;        /* compute_s and micro-batches when it started */
    int64_t early_micro;
    double overlap_s;              /* the step being logged: compute beside its matchmaking */
    int64_t overlap_micro;
    double mm_recent[8];           /* matchmaking seconds of the last successful rounds */
    size_t mm_count;
    double micro_s;                /* a micro-batch's seconds (moving average) */
    int micro_samples;             /* the last micro-batch's samples */
    dl_loss_scale ls, ls_at_step;
    dl_train_progress progress, progress_at_step; /* at_step.micro_batches: those applied (the data mark) */
    /* The data stream's mark (what a checkpoint records) follows the
     * micro-batches whose gradient was applied. A delayed round marks where
     * its micro-batches end when it starts; until it succeeds the mark lies
     * past micro-batches not yet applied, and a checkpoint then goes without
     * the position (resuming re-reads the stream: exact, slower). So does
     * one after MARK_RETAIN_LIMIT batches without a step (see micro_batch). */
    int64_t round_micro;           /* delayed: our micro-batches drawn when the running round started */
    int64_t mark_micro;            /* our micro-batches drawn when the stream was marked */
    float *grad;                   /* micro-batch gradient, then the round's vector (n + LOSS_ELEMS) */
    double loss_sum[LOSS_ELEMS];   /* sample-weighted, over the accumulation */
    bool has_state;                /* aux: holds the weights of its epoch */
    uint64_t last_state_epoch;     /* aux: epoch of the last weights it held */
    uint8_t hash[32];
    int64_t micro_since_round;     /* micro-batches since the last attempt */
    double prev_wait_until;        /* how long to wait for peers finishing the previous round */
    double disagree_since;         /* when a tied disagreement was first seen (0: none) */
    double step_start, compute_s, run_start;
    int64_t start_step;
    double samples_contributed;    /* our samples that went into completed rounds */
    FILE *log;
    struct dl_collab_train_result *res;
} loop_state;

void dl_collab_train_options_default(struct dl_collab_train_options *o) {
    memset(o, 0, sizeof *o);
    o->base.target_batch = 4096;
    o->base.max_steps = 125000;
    o->join_wait_s = 5;
    o->round_deadline_s = 60;
    o->state_every = 1;
    o->linger_s = 2;
    struct dl_avg_options avg;
    dl_avg_options_default(&avg);
    o->aggregation = avg.aggregation;
    o->clip_tau = avg.clip_tau;
    o->clip_iterations = avg.clip_iterations;
}

static bool stopping(const loop_state *st) { return st->o->base.stop && *st->o->base.stop; }

/* Our samples at this epoch not yet averaged: the accumulation, and a failed
 * delayed round's gradient kept for the next round. */
static int64_t local_samples(const loop_state *st) { return st->acc.samples + st->carry.samples; }

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Our record after our weights changed (st->hash already computed). */
static int publish_record(loop_state *st) {
    if (!st->has_state) {
        dl_net_set_param_hash(st->net, NULL);
        return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, 0, 0);
    }
    dl_net_set_param_hash(st->net, st->hash);
    return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, (double)local_samples(st), 0);
}

/* Our weights changed: new hash, new snapshot, new record. */
static int publish_state(loop_state *st) {
    if (st->has_state) {
        dl_collab_param_hash(st->params, st->n, st->hash);
        if (dl_train_state_publish(st->donor, &st->opt, st->params, st->progress.samples, &st->ls_at_step))
            return -1;
    }
    return publish_record(st);
}

static int save_checkpoint(loop_state *st) {
    const dl_trainer_options *o = &st->o->base;
    if (!o->checkpoint_dir || !st->has_state) return 0;
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &st->opt, st->params);
    ck.model_config_json = (char *)o->model_config_json;
    ck.run_json = (char *)o->run_json;
    ck.loss_scale = st->ls_at_step;
    ck.progress = st->progress_at_step;
    ck.progress.elapsed_s += dl_now() - st->run_start;
    if (st->be && st->be->save_data) {
        if (st->mark_micro != ck.progress.micro_batches) {
            DL_INFO("collab", "the checkpoint of step %" PRId64 " goes without the data stream's position: its mark lies "
                    "past micro-batches not applied yet (a failed delayed round, or many without a step); resuming "
                    "from it re-reads the stream up to micro-batch %" PRId64, ck.step, ck.progress.micro_batches);
        } else if (st->be->save_data(st->be->ctx, &ck.data_state, &ck.data_state_size)) {
            DL_WARN("collab", "the checkpoint of step %" PRId64 " goes without the data stream's position (%s): "
                    "resuming from it re-reads the stream up to there", ck.step, dl_error());
            ck.data_state = NULL;
            ck.data_state_size = 0;
        }
    }
    int rc = dl_checkpoint_save_in_dir(o->checkpoint_dir, &ck, o->keep, st->res->base.checkpoint,
                                       sizeof st->res->base.checkpoint);
    free(ck.data_state);
    return rc;
}

/* The data stream's position now becomes what a checkpoint records. */
static int mark_data(loop_state *st) {
    if (!st->be || !st->be->mark_data) return 0;
    if (st->be->mark_data(st->be->ctx)) return dl_fail_context("marking the data stream's position");
    st->mark_micro = st->progress.micro_batches;
    return 0;
}

/* One micro-batch into the device's sum (no loss scaling: a non-finite loss
 * cannot be taken back out of the sum, and in fp32 it means divergence). */
static int micro_batch_on_device(loop_state *st, int *samples, dl_losses *losses) {
    if (st->be->accumulate(st->be->ctx, st->device_fresh, st->ls.scale, samples, losses))
        return dl_fail_context("micro-batch %" PRId64, st->progress.micro_batches);
    st->device_fresh = false;
    if (!isfinite(losses->loss))
        return dl_fail("micro-batch %" PRId64 " gave a non-finite loss without loss scaling: the run diverged "
                       "(lower --lr?)", st->progress.micro_batches);
    dl_loss_scale_update(&st->ls, true); /* counts the clean micro-batch, as the host path does */
    return 0;
}

static void emit(loop_state *st, cJSON *o);

/* Test hook: which micro-batch of our share of the stream we just drew (its
 * index counts our micro-batches since the run began, across resumes). */
static void log_batch(loop_state *st) {
    if (!st->o->test_log_batches || !st->be->batch_fingerprint) return;
    char hex[17];
    dl_hash64_hex(st->be->batch_fingerprint(st->be->ctx), hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(DL_TRAIN_EVENT_BATCH));
    cJSON_AddNumberToObject(o, "epoch", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "index", (double)st->progress.micro_batches);
    cJSON_AddStringToObject(o, "fingerprint", hex);
    emit(st, o);
}

/* One micro-batch into the accumulator (dropped when not finite). */
static int micro_batch(loop_state *st) {
    int samples = 0;
    dl_losses losses = {0};
    double t0 = dl_now();
    bool use;
    if (st->on_device) {
        if (micro_batch_on_device(st, &samples, &losses)) return -1;
        use = true;
    } else {
        if (st->be->micro_batch(st->be->ctx, st->ls.scale, st->grad, &samples, &losses))
            return dl_fail_context("micro-batch %" PRId64, st->progress.micro_batches);
        bool finite = dl_all_finite(st->grad, st->n) && isfinite(losses.loss);
        use = dl_loss_scale_update(&st->ls, finite);
    }
    log_batch(st);
    st->progress.micro_batches++;
    st->micro_since_round++;
    if (use) {
        if (samples <= 0) return dl_fail("the backend returned a micro-batch of %d samples", samples);
        if (st->on_device) st->acc.samples += samples;
        else dl_grad_accum_add(&st->acc, st->grad, samples);
        st->loss_sum[0] += (double)losses.loss * samples;
        st->loss_sum[1] += (double)losses.mlm_loss * samples;
        st->loss_sum[2] += (double)losses.sop_loss * samples;
    }
    /* Deterministic shares: micro-batch k of the stream belongs to peer k mod count. */
    if (st->o->shard_count > 1 && st->be->skip(st->be->ctx, st->o->shard_count - 1))
        return dl_fail_context("skipping the other peers' micro-batches");
    /* The stream keeps a copy of every batch drawn since its mark (its
     * state at the mark is saved from them). Rounds that keep failing would
     * let that grow without end: past the limit the mark moves here, and
     * checkpoints go without a position until the next step. */
    int64_t drawn = (st->progress.micro_batches - st->mark_micro) * (st->o->shard_count > 1 ? st->o->shard_count : 1);
    if (st->be->mark_data && drawn > MARK_RETAIN_LIMIT) {
        DL_WARN("collab", "%" PRId64 " micro-batches without a step: the data stream's position is no longer "
                "kept for checkpoints until the next one (a resume then re-reads the stream)",
                st->progress.micro_batches - st->progress_at_step.micro_batches);
        if (mark_data(st)) return -1;
    }
    double dt = dl_now() - t0;
    st->micro_s = st->micro_s > 0 ? 0.7 * st->micro_s + 0.3 * dt : dt;
    st->micro_samples = samples;
    st->compute_s += dt;
    st->res->compute_s += dt;
    /* While a delayed round runs our record keeps saying what we brought to
     * it: these samples belong to the next epoch, published once we are there. */
    if (st->round.running) return 0;
    double rate = (double)local_samples(st) / fmax(dl_now() - st->step_start, 1e-3);
    return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, (double)local_samples(st), rate);
}

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
        if (st->log) {
            fprintf(st->log, "%s\n", text);
            fflush(st->log);
        }
        if (st->o->status) {
            fprintf(st->o->status, "%s\n", text);
            fflush(st->o->status);
        }
    }
    free(text);
    cJSON_Delete(o);
}

static void log_event(loop_state *st, enum dl_train_event event, const char *detail) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(event));
    cJSON_AddNumberToObject(o, "epoch", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddStringToObject(o, "detail", detail);
    emit(st, o);
}

/* The state we start from (a resumed checkpoint's or the initial weights),
 * and how the data stream got to our position in it: "fresh", "seek" (opened
 * at the checkpoint's recorded position) or "replay" (data_skipped batches
 * re-read from the start). */
static void log_start(loop_state *st, bool resumed, const char *data, int64_t data_skipped) {
    char hex[65];
    dl_collab_hash_hex(st->hash, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", dl_train_event_name(DL_TRAIN_EVENT_START));
    cJSON_AddNumberToObject(o, "epoch", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddBoolToObject(o, "resumed", resumed);
    cJSON_AddStringToObject(o, "param_hash", hex);
    if (st->be) {
        cJSON_AddStringToObject(o, "data", data);
        cJSON_AddNumberToObject(o, "data_skipped", (double)data_skipped);
        cJSON_AddNumberToObject(o, "micro_batches", (double)st->progress.micro_batches);
    }
    emit(st, o);
}

static void log_step(loop_state *st, const struct dl_avg_result *r, const dl_opt_step_info *info,
                     const float *losses, double group_samples, int64_t local_samples, double wall_s) {
    char hex[65] = "";
    if (st->has_state) dl_collab_hash_hex(st->hash, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "loss", losses ? losses[0] : NAN);
    cJSON_AddNumberToObject(o, "mlm_loss", losses ? losses[1] : NAN);
    cJSON_AddNumberToObject(o, "sop_loss", losses ? losses[2] : NAN);
    cJSON_AddNumberToObject(o, "lr", info ? info->lr : 0);
    cJSON_AddNumberToObject(o, "samples", (double)st->progress.samples);
    cJSON_AddNumberToObject(o, "samples_per_second", wall_s > 0 ? group_samples / wall_s : 0);
    cJSON_AddNumberToObject(o, "grad_norm", info ? info->grad_norm : 0);
    cJSON_AddNumberToObject(o, "loss_scale", st->ls.scale);
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
    cJSON_AddNumberToObject(o, "compute_s", st->compute_s);
    cJSON_AddNumberToObject(o, "wait_s", fmax(0, wall_s - st->compute_s));
    /* Exact mode: compute that ran while this step's round matchmade. */
    cJSON_AddNumberToObject(o, "matchmaking_overlap_s", st->overlap_s);
    cJSON_AddNumberToObject(o, "matchmaking_overlap_micro_batches", (double)st->overlap_micro);
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
static void publish_metrics(loop_state *st, const float *losses, int64_t local_samples, double wall_s) {
    if (!st->be) return;
    st->samples_contributed += (double)local_samples;
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    m.step = (uint64_t)st->opt.step;
    m.loss = losses && isfinite(losses[0]) && losses[0] >= 0 ? losses[0] : -1;
    m.samples_per_second = wall_s > 0 ? (double)local_samples / wall_s : 0;
    m.samples_total = st->samples_contributed;
    m.uptime_s = dl_now() - st->run_start;
    const struct dl_collab_train_options *o = st->o;
    metrics_text(m.device, sizeof m.device, o->device_name);
    metrics_text(m.vendor, sizeof m.vendor, o->device_vendor);
    metrics_text(m.precision, sizeof m.precision, o->precision_name);
    metrics_text(m.name, sizeof m.name, o->display_name);
    if (dl_net_publish_metrics(st->net, &m)) DL_WARN("collab", "metrics record not published: %s", dl_error());
}

static void progress_line(loop_state *st, const float *losses, double sps, size_t members) {
    FILE *out = st->o->base.progress;
    if (!out) return;
    char hex[65] = "-";
    if (st->has_state) dl_collab_hash_hex(st->hash, hex);
    fprintf(out, "step %" PRId64 "/%" PRId64 " | loss %.4f | %zu in round | %.1f samples/s | hash %.12s\n",
            st->opt.step, st->o->base.max_steps, losses ? losses[0] : NAN, members, sps, hex);
    fflush(out);
}

/* Downloads the swarm's reference state; keeps our accumulated gradient. */
static int download(loop_state *st, const struct dl_swarm_look *look, const char *why) {
    char hex[65];
    dl_collab_hash_hex(look->ref_hash, hex);
    char detail[400];
    snprintf(detail, sizeof detail, "%s: downloading the state of epoch %" PRIu64 " (param_hash %.16s, held by %zu of %zu)",
             why, look->ref_epoch, hex, look->ref_holders, look->hashes_at_ref);
    DL_INFO("collab", "%s", detail);
    log_event(st, DL_TRAIN_EVENT_DOWNLOAD, detail);
    struct dl_train_state_meta meta;
    double t0 = dl_now();
    if (dl_train_state_fetch(st->net, look, &st->opt, st->params, &meta, fmax(30, st->o->round_deadline_s))) {
        DL_WARN("collab", "state download failed (trying again soon): %s", dl_error());
        log_event(st, DL_TRAIN_EVENT_DOWNLOAD_FAILED, dl_error());
        return -1;
    }
    st->res->wait_s += dl_now() - t0;
    st->progress.samples = meta.samples;
    dl_train_state_meta_adopt_scale(&meta, &st->ls);
    st->has_state = true;
    st->last_state_epoch = meta.epoch;
    st->prev_wait_until = dl_now() + 3;
    st->res->state_downloads++;
    if (st->be && st->be->set_params(st->be->ctx, st->params)) return dl_fail_context("uploading downloaded weights");
    /* Our accumulation is kept for the next round: its micro-batches are not
     * applied yet, and the data mark stays before them. */
    int64_t applied = st->progress_at_step.micro_batches;
    st->progress_at_step = st->progress;
    st->progress_at_step.micro_batches = applied;
    st->ls_at_step = st->ls;
    return publish_state(st);
}

/* Test hook (only the test builds' CLI sets it): replaces the gradient
 * elements of our contribution with an attack; the loss elements after them
 * stay honest. The noise is drawn from the epoch and our peer id, so a rerun
 * repeats it. */
static void attack_gradient(const loop_state *st, float *vec) {
    if (st->o->test_attack == DL_TEST_ATTACK_SIGN_FLIP) {
        for (size_t i = 0; i < st->n; i++) vec[i] *= -1000.0f;
        return;
    }
    uint64_t x = dl_hash64(dl_net_peer_id(st->net), strlen(dl_net_peer_id(st->net)), (uint64_t)st->opt.step);
    for (size_t i = 0; i < st->n; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        vec[i] = (float)((double)(z >> 11) * 0x1p-53 * 200.0 - 100.0);
    }
}

/* Our mean gradient at this epoch and our mean losses into vec (n +
 * LOSS_ELEMS); returns the samples behind them (0 for an aux peer), -1 on
 * an error. The accumulation itself is left as it is. */
static int64_t round_vector(loop_state *st, float *vec) {
    size_t n = st->n;
    if (!st->be) {
        memset(vec, 0, (n + LOSS_ELEMS) * sizeof(float));
        return 0;
    }
    int64_t cur = st->acc.samples, total = cur + st->carry.samples;
    if (total <= 0) return dl_fail("no samples accumulated: nothing to average");
    if (cur > 0) {
        if (st->on_device) {
            if (st->be->collect(st->be->ctx, st->ls.scale, cur, vec)) return dl_fail_context("collecting the gradient");
            if (!dl_all_finite(vec, n))
                return dl_fail("the step's gradient is not finite without loss scaling: the run diverged (lower --lr?)");
        } else if (dl_grad_accum_mean(&st->acc, vec)) {
            return -1;
        }
    }
    if (st->carry.samples > 0) {
        /* (our new mean x its samples + the kept sum) / all samples */
        const float wc = (float)cur, all = (float)total;
        for (size_t i = 0; i < n; i++) vec[i] = ((cur > 0 ? vec[i] * wc : 0.0f) + st->carry.sum[i]) / all;
    }
    for (int k = 0; k < LOSS_ELEMS; k++) vec[n + k] = (float)((st->loss_sum[k] + st->carry_loss[k]) / (double)total);
    if (st->o->test_attack != DL_TEST_ATTACK_NONE) attack_gradient(st, vec);
    return total;
}

/* Everything accumulated at this epoch went into a round. */
static void clear_accumulation(loop_state *st) {
    dl_grad_accum_reset(&st->acc);
    if (st->carry.sum) dl_grad_accum_reset(&st->carry);
    st->device_fresh = true;
    memset(st->loss_sum, 0, sizeof st->loss_sum);
    memset(st->carry_loss, 0, sizeof st->carry_loss);
}

static void round_options(const loop_state *st, int64_t local, size_t expected, struct dl_avg_options *ao) {
    dl_avg_options_default(ao);
    ao->epoch = (uint64_t)st->opt.step;
    ao->weight = (double)local;
    ao->compression = st->o->compression;
    ao->aggregation = st->o->aggregation;
    ao->clip_tau = st->o->clip_tau;
    ao->clip_iterations = st->o->clip_iterations;
    ao->deadline_s = st->o->round_deadline_s;
    ao->expected_peers = expected;
}

/* Remembers how long a successful plain round's matchmaking took (the lead
 * of the next early start; an early round's includes waiting for vectors). */
static void early_note_matchmaking(loop_state *st, double seconds) {
    if (!(seconds >= 0) || !isfinite(seconds)) return;
    st->mm_recent[st->mm_count % (sizeof st->mm_recent / sizeof st->mm_recent[0])] = seconds;
    st->mm_count++;
}

/* Test hook (only the test builds' CLI sets it): self-healing on purpose. */
static void corrupt_hook(loop_state *st) {
    if (st->o->corrupt_at_step > 0 && st->opt.step == st->o->corrupt_at_step && st->has_state) {
        st->params[0] += 1e-3f;
        DL_WARN("collab", "test hook: weights perturbed after step %" PRId64, st->opt.step);
    }
}

/* The outcome of a round over vec (local samples of ours, started at t0):
 * the step when it succeeded, nothing when it failed. clear: the
 * accumulation went into the round (synchronous rounds); a delayed round
 * cleared it when it started, and the samples drawn since belong to the next
 * step; its optimizer step, hash and snapshot were taken on the round's
 * thread (step_in_background). Takes r. Returns 1 when the step was taken,
 * 0 when the round failed, -1 on a local error. */
static int finish_round(loop_state *st, struct dl_avg_result *r, float *vec, int64_t local, double t0,
                        bool clear) {
    const bool stepped = !clear && st->be; /* delayed: already stepped on the round's thread */
    size_t n = st->n;
    if (r->status != DL_AVG_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "round of epoch %" PRId64 " failed (%s: %s): nothing applied, %" PRId64
                 " samples kept for the next round", st->opt.step, dl_avg_status_name(r->status), r->reason, local);
        DL_WARN("collab", "%s", detail);
        log_event(st, DL_TRAIN_EVENT_ROUND_FAILED, detail);
        st->res->rounds_failed++;
        /* Peers killed at our epoch would hold up every round until their
         * records expire: leave out those that cannot be reached. */
        size_t gone = dl_collab_probe_peers(st->collab, (uint64_t)st->opt.step);
        if (gone) {
            snprintf(detail, sizeof detail, "%zu peer(s) at epoch %" PRId64 " unreachable: left out of the view", gone,
                     st->opt.step);
            log_event(st, DL_TRAIN_EVENT_PEERS_GONE, detail);
        }
        st->res->wait_s += dl_now() - t0;
        if (!clear && st->be) {
            /* The delayed round's gradient waits for the next round, beside the new micro-batches. */
            dl_grad_accum_add(&st->carry, vec, local);
            for (int k = 0; k < LOSS_ELEMS; k++) st->carry_loss[k] = (double)vec[n + k] * (double)local;
            if (dl_net_publish_progress(st->net, (uint64_t)st->opt.step, (double)local_samples(st), 0)) {
                dl_avg_result_free(r);
                return -1;
            }
        }
        dl_avg_result_free(r);
        return 0;
    }
    /* The samples the chunk headers carried (what counted), the same on every member. */
    double group = r->total_weight;
    float losses[LOSS_ELEMS];
    memcpy(losses, vec + n, sizeof losses);
    dl_opt_step_info info = {0};
    if (stepped) {
        info = st->round_info;
        if (st->be->set_params(st->be->ctx, st->params)) {
            dl_avg_result_free(r);
            return dl_fail_context("uploading the weights after step %" PRId64, st->opt.step);
        }
    } else if (st->be) {
        if (dl_optimizer_step(&st->opt, st->params, vec, &info)) {
            dl_avg_result_free(r);
            return -1;
        }
        corrupt_hook(st);
        if (st->be->set_params(st->be->ctx, st->params)) {
            dl_avg_result_free(r);
            return dl_fail_context("uploading the weights after step %" PRId64, st->opt.step);
        }
    } else {
        /* An aux peer does not receive the average: it moves to the next
         * epoch without weights until it downloads them. */
        st->opt.step++;
        st->has_state = false;
    }
    st->progress.samples += (int64_t)llround(group);
    if (clear) clear_accumulation(st);
    st->ls_at_step = stepped ? st->round_ls : st->ls;
    st->progress_at_step = st->progress;
    if (stepped) {
        /* Applied: the micro-batches up to the round's start, where the
         * stream was marked; those drawn since belong to the next step. */
        st->progress_at_step.micro_batches = st->round_micro;
    } else if (mark_data(st)) {
        dl_avg_result_free(r);
        return -1;
    }
    st->res->rounds_ok++;
    double now = dl_now(), wall = now - st->step_start;
    st->res->wait_s += now - t0;
    if (stepped ? publish_record(st) : publish_state(st)) {
        dl_avg_result_free(r);
        return -1;
    }
    bool has_losses = st->be && group > 0 && isfinite(losses[0]); /* aux peers do not receive the average */
    log_step(st, r, st->has_state ? &info : NULL, has_losses ? losses : NULL, group, local, wall);
    publish_metrics(st, has_losses ? losses : NULL, local, wall);
    progress_line(st, has_losses ? losses : NULL, wall > 0 ? group / wall : 0, r->num_members);
    if (has_losses) {
        if (st->res->base.steps_this_run == 0) st->res->base.first_loss = losses[0];
        st->res->base.last_loss = losses[0];
    }
    st->res->base.steps_this_run++;
    st->step_start = now;
    st->compute_s = 0;
    st->prev_wait_until = now + 3;
    dl_avg_result_free(r);
    const dl_trainer_options *o = &st->o->base;
    if (o->save_every > 0 && st->opt.step % o->save_every == 0 && st->opt.step < o->max_steps && save_checkpoint(st))
        return -1;
    return 1;
}

/* One averaging round at our epoch and, when it succeeds, the step (see
 * finish_round for the result). */
static int round_and_step(loop_state *st, size_t expected, bool alone) {
    int64_t local = round_vector(st, st->grad);
    if (local < 0) return -1;
    struct dl_avg_options ao;
    round_options(st, local, expected, &ao);
    struct dl_avg_result r;
    double t0 = dl_now();
    if (alone) {
        /* Nobody else in the swarm: the average is our own gradient, and
         * matchmaking would only wait out its window for joiners. */
        memset(&r, 0, sizeof r);
        r.members = dl_calloc(1, sizeof *r.members);
        if (!r.members) return -1;
        r.num_members = 1;
        snprintf(r.members[0].peer_id, sizeof r.members[0].peer_id, "%s", dl_net_peer_id(st->net));
        r.members[0].weight = ao.weight;
        r.members[0].role = st->be ? DL_MEMBER_TRAINER : DL_MEMBER_AUX;
        r.total_weight = ao.weight;
        r.status = DL_AVG_OK;
    } else {
        dl_collab_average(st->collab, st->grad, st->n + LOSS_ELEMS, &ao, &r);
        if (r.status == DL_AVG_OK) early_note_matchmaking(st, r.matchmaking_s);
    }
    st->micro_since_round = 0;
    return finish_round(st, &r, st->grad, local, t0, true);
}

/* Delayed update, on the round's thread once the average is in: the
 * optimizer step, the new hash and the state snapshot, so that none of it
 * stands in the way of the micro-batches. It touches only what the main
 * thread leaves alone while a round runs (params, opt, hash, rvec, the
 * donor, progress.samples); the main thread uploads the weights and
 * publishes the record when it joins. */
static int step_in_background(void *user, const struct dl_avg_result *r) {
    loop_state *st = user;
    memset(&st->round_info, 0, sizeof st->round_info);
    if (dl_optimizer_step(&st->opt, st->params, st->rvec, &st->round_info)) goto fail;
    corrupt_hook(st);
    dl_collab_param_hash(st->params, st->n, st->hash);
    if (dl_train_state_publish(st->donor, &st->opt, st->params, st->progress.samples + llround(r->total_weight),
                               &st->round_ls))
        goto fail;
    return 0;
fail:
    snprintf(st->round_error, sizeof st->round_error, "%s", dl_error());
    return -1;
}

/* Delayed update: the round of our epoch starts on its own thread over our
 * gradient so far, and the micro-batches go on for the next step. */
static int start_delayed_round(loop_state *st, size_t expected) {
    int64_t local = round_vector(st, st->rvec);
    if (local < 0) return -1;
    struct dl_avg_options ao;
    round_options(st, local, expected, &ao);
    st->round_ls = st->ls;
    st->round_epoch = st->opt.step;
    st->round_micro = st->progress.micro_batches;
    if (mark_data(st)) return -1; /* ahead of what is applied until the round succeeds */
    clear_accumulation(st);
    st->round_local = local;
    st->micro_since_round = 0;
    return dl_async_round_start(&st->round, st->collab, st->rvec, st->n + LOSS_ELEMS, &ao, step_in_background, st);
}

/* The delayed round has returned: take its step (or keep its gradient) now. */
static int finish_delayed_round(loop_state *st) {
    struct dl_avg_result r;
    int status = dl_async_round_join(&st->round, &r);
    if (status == DL_AVG_OK && st->round.after_rc) {
        dl_avg_result_free(&r);
        return dl_fail("the step after the round of epoch %" PRId64 ": %s", st->round_epoch, st->round_error);
    }
    /* The round ran beside compute: only the time since it returned was waiting. */
    return finish_round(st, &r, st->rvec, st->round_local, dl_now(), false);
}

/* ---- Matchmaking ahead of the ETA (exact mode) --------------------------------
 * Matchmaking takes seconds in which a peer that waits for it computes
 * nothing. So in exact mode the round of our epoch starts on its own thread
 * once the swarm's ETA to the target is within reach (early_due), its join
 * carrying an estimate of our samples; the micro-batches go on, and when the
 * accumulation ends (is_ready) our vector and its real weight are handed
 * over and the loop waits for the average and steps exactly as a plain
 * round would: the weight that counts travels in the chunk headers, so the
 * step's bits are those of a round started at that moment with the same
 * members. An early round that fails before the handoff never read our
 * vector: the plain round follows at once (and no second early one at that
 * epoch). One that fails after it keeps the gradient, as any failed round. */

/* The lead: the median of the last successful plain rounds' matchmaking
 * plus 0.5 s, at least 1 s (1.5 s before any). */
static double early_lead(const loop_state *st) {
    size_t cap = sizeof st->mm_recent / sizeof st->mm_recent[0];
    size_t k = st->mm_count < cap ? st->mm_count : cap;
    if (!k) return 1.5;
    double v[sizeof st->mm_recent / sizeof st->mm_recent[0]];
    memcpy(v, st->mm_recent, k * sizeof *v);
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    double median = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
    return fmax(1.0, median + 0.5);
}

/* Whether to start matchmaking before this micro-batch: the accumulation
 * may end within the lead plus one micro-batch (the next chance to start
 * comes only after it). The whole reach stays under 0.8 x stall_s: the
 * others leave out a member whose vector comes later than stall_s after the
 * group formed. *estimate: our samples at the end, for the join. */
static bool early_due(loop_state *st, const struct dl_swarm_look *look, double *estimate) {
    if (!st->early_on || st->early.running || st->early_refused_epoch == st->opt.step || !(st->micro_s > 0) ||
        st->micro_samples <= 0 || look->peers <= 1)
        return false;
    if (look->at_previous > 0 && dl_now() < st->prev_wait_until) return false;
    double local = (double)local_samples(st), my_rate = st->micro_samples / st->micro_s, eta;
    if (st->o->local_batch > 0) {
        if (st->o->min_peers > 1 && look->at_epoch < st->o->min_peers) return false;
        eta = ((double)st->o->local_batch - local) / my_rate;
    } else {
        if (!(look->samples_per_second > 0)) return false;
        eta = ((double)st->o->base.target_batch - look->collective) / look->samples_per_second;
    }
    double stall = fmax(1.0, st->o->round_deadline_s / 6);
    double reach = fmin(early_lead(st) + st->micro_s, 0.8 * stall);
    if (!(eta < reach)) return false;
    *estimate = fmax(local, local + fmax(eta, 0) * my_rate);
    return true;
}

static int start_early_round(loop_state *st, double estimate) {
    size_t expected = st->o->local_batch > 0 && st->o->min_peers > 1 ? st->o->min_peers : 0;
    struct dl_avg_options ao;
    round_options(st, llround(estimate), expected, &ao);
    dl_avg_handoff_init(&st->handoff);
    ao.handoff = &st->handoff;
    st->early_compute_s = st->compute_s;
    st->early_micro = st->progress.micro_batches;
    return dl_async_round_start(&st->early, st->collab, st->rvec, st->n + LOSS_ELEMS, &ao, NULL, NULL);
}

/* The early round ended without our vector (it never read it). */
static void early_round_gone(loop_state *st) {
    struct dl_avg_result r;
    int status = dl_async_round_join(&st->early, &r);
    char detail[400];
    snprintf(detail, sizeof detail, "matchmaking ahead of the ETA at epoch %" PRId64 " ended without our vector "
             "(%s: %s): the plain round follows", st->opt.step, dl_avg_status_name(status), r.reason);
    DL_INFO("collab", "%s", detail);
    log_event(st, DL_TRAIN_EVENT_EARLY_ROUND_FAILED, detail);
    dl_avg_result_free(&r);
    st->early_refused_epoch = st->opt.step;
}

/* Leaves a running early round (the swarm moved on, we heal, we stop). */
static void abandon_early(loop_state *st) {
    if (!st->early.running) return;
    dl_collab_withdraw(st->collab, &st->handoff);
    early_round_gone(st);
}

/* The accumulation ended with an early round on: hand our vector over and
 * take its outcome, or run the plain round when it is gone already. */
static int hand_over_early(loop_state *st, size_t expected, bool alone) {
    if (!dl_async_round_done(&st->early)) {
        int64_t local = round_vector(st, st->rvec);
        if (local < 0) {
            abandon_early(st);
            return -1;
        }
        double t0 = dl_now();
        double overlap = st->compute_s - st->early_compute_s;
        int64_t micro = st->progress.micro_batches - st->early_micro;
        if (!dl_collab_hand_over(st->collab, &st->handoff, (double)local)) {
            struct dl_avg_result r;
            dl_async_round_join(&st->early, &r);
            st->micro_since_round = 0;
            st->overlap_s = overlap;
            st->overlap_micro = micro;
            int rc = finish_round(st, &r, st->rvec, local, t0, true);
            st->overlap_s = 0;
            st->overlap_micro = 0;
            if (rc == 0) st->early_refused_epoch = st->opt.step;
            return rc < 0 ? -1 : 0;
        }
    }
    early_round_gone(st);
    return round_and_step(st, expected, alone) < 0 ? -1 : 0;
}

/* Whether a disagreement is settled enough to act on: peers still finishing
 * the previous round have not voted yet, and a tie (e.g. two peers) is
 * decided by the lowest peer id only once it has lasted a few seconds, so a
 * record in flight cannot make a correct peer take a wrong state. */
static bool should_heal(loop_state *st, const struct dl_swarm_look *look) {
    double now = dl_now();
    if (look->at_previous > 0) {
        st->disagree_since = 0;
        return false;
    }
    if (look->ref_holders > look->my_holders) return true;
    if (st->disagree_since == 0) st->disagree_since = now;
    return now - st->disagree_since >= 3;
}

/* Our weights differ from what most peers at our epoch hold: say so, take theirs. */
static void heal(loop_state *st, const struct dl_swarm_look *look) {
    st->disagree_since = 0;
    char mine[65], detail[300];
    dl_collab_hash_hex(st->hash, mine);
    snprintf(detail, sizeof detail, "our param_hash %.16s disagrees with %zu of %zu peers at epoch %" PRId64, mine,
             look->ref_holders, look->hashes_at_ref, st->opt.step);
    DL_WARN("collab", "%s", detail);
    log_event(st, DL_TRAIN_EVENT_DISAGREE, detail);
    if (download(st, look, "param_hash disagreement") == 0) st->res->heals++;
    else nap(0.2);
}

/* Waits (bounded) until `want` peers are at our epoch. */
static void wait_for_peers(loop_state *st, size_t want, double timeout_s) {
    double until = dl_now() + timeout_s;
    while (dl_now() < until && !stopping(st)) {
        struct dl_swarm_look look;
        if (!dl_swarm_look(st->net, st->collab, (uint64_t)st->opt.step, NULL, 0, &look) && look.at_epoch >= want) return;
        nap(0.02);
    }
}

/* At start: find the swarm, then take its state when it is ahead of us. */
static int join_swarm(loop_state *st) {
    double until = dl_now() + st->o->join_wait_s;
    size_t want = st->o->min_peers > 1 ? st->o->min_peers : 2;
    double min_wait_until = st->o->min_peers > 1 ? dl_now() + 600 : until;
    for (;;) {
        if (stopping(st)) return 0;
        struct dl_swarm_look look;
        if (dl_swarm_look(st->net, st->collab, (uint64_t)st->opt.step, st->has_state ? st->hash : NULL, 0, &look)) return -1;
        bool ahead = look.ahead_epoch > (uint64_t)st->opt.step;
        if (ahead || (look.peers >= want && look.has_ref && look.hashes_at_ref > (st->has_state ? 1u : 0u))) {
            if (ahead || look.i_disagree || !st->has_state)
                if (download(st, &look, ahead ? "the swarm is ahead of us" : "joining the swarm")) {
                    nap(0.5);
                    continue;
                }
            if (look.peers >= want) return 0;
        }
        double now = dl_now();
        if (now >= until && (st->o->min_peers <= 1 || now >= min_wait_until)) return 0;
        if (look.peers >= want && now >= until) return 0;
        nap(0.05);
    }
}

static bool is_ready(loop_state *st, const struct dl_swarm_look *look) {
    if (!st->be) {
        /* An aux peer joins once trainers hold samples reaching the target. */
        return st->micro_since_round > 0 && look->collective >= (double)st->o->base.target_batch;
    }
    if (local_samples(st) <= 0 || st->micro_since_round == 0) return false;
    if (st->o->local_batch > 0) return local_samples(st) >= st->o->local_batch;
    return look->collective >= (double)st->o->base.target_batch;
}

static int run_loop(loop_state *st) {
    const dl_trainer_options *o = &st->o->base;
    while (st->opt.step < o->max_steps) {
        if (stopping(st)) {
            st->res->base.interrupted = true;
            break;
        }
        if (o->max_seconds > 0 && dl_now() - st->run_start >= o->max_seconds && st->res->base.steps_this_run > 0) {
            st->res->base.time_limit = true;
            break;
        }
        if (st->round.running) {
            /* A delayed round is on: compute for the next step (none is
             * left after the last) and step once it returns. */
            if (dl_async_round_done(&st->round)) {
                if (finish_delayed_round(st) < 0) return -1;
            } else if (st->round_epoch + 1 >= o->max_steps) {
                nap(0.01);
            } else if (micro_batch(st)) {
                return -1;
            }
            continue;
        }
        struct dl_swarm_look look;
        if (dl_swarm_look(st->net, st->collab, (uint64_t)st->opt.step, st->has_state ? st->hash : NULL,
                          (double)local_samples(st), &look))
            return -1;
        if (st->early.running && dl_async_round_done(&st->early)) {
            early_round_gone(st);
            continue;
        }
        if (look.ahead_epoch > (uint64_t)st->opt.step) {
            abandon_early(st);
            if (st->be || look.ahead_epoch >= st->last_state_epoch + (uint64_t)st->o->state_every) {
                if (download(st, &look, "the swarm moved on")) nap(0.2);
            } else {
                /* An aux peer between downloads follows the epoch only. */
                st->opt.step = (int64_t)look.ahead_epoch;
                st->has_state = false;
                if (publish_state(st)) return -1;
            }
            continue;
        }
        if (!st->be && !st->has_state && look.has_ref &&
            (uint64_t)st->opt.step >= st->last_state_epoch + (uint64_t)st->o->state_every) {
            if (download(st, &look, "aux peer refreshing its state")) nap(0.2);
            continue;
        }
        if (!look.i_disagree) st->disagree_since = 0;
        if (look.i_disagree && should_heal(st, &look)) {
            abandon_early(st);
            heal(st, &look);
            continue;
        }
        if (is_ready(st, &look)) {
            /* Peers still finishing the previous round are about to join
             * this one, and one of them may be its leader: matchmaking picks
             * the lowest peer id among the peers at our epoch, so wait
             * (bounded) until they have moved on, or two groups would form. */
            if (look.at_previous > 0 && dl_now() < st->prev_wait_until) {
                nap(0.02);
                continue;
            }
            size_t expected = 0;
            if (st->o->local_batch > 0 && st->o->min_peers > 1) {
                wait_for_peers(st, st->o->min_peers, fmin(10, st->o->round_deadline_s / 3));
                expected = st->o->min_peers;
            }
            bool alone = look.peers <= 1 && expected <= 1;
            if (st->early.running) {
                if (hand_over_early(st, expected, alone)) return -1;
            } else if (st->delayed && !alone) {
                if (start_delayed_round(st, expected)) return -1;
            } else if (round_and_step(st, expected, alone) < 0) {
                return -1;
            }
            continue;
        }
        if (st->be) {
            double estimate;
            if (early_due(st, &look, &estimate) && start_early_round(st, estimate)) return -1;
            if (micro_batch(st)) return -1;
        } else {
            if (st->micro_since_round == 0) st->micro_since_round = 1;
            nap(0.05);
        }
    }
    abandon_early(st);
    /* Stopped with a delayed round on: its step is the others' too. */
    if (st->round.running && finish_delayed_round(st) < 0) return -1;
    return 0;
}

/* Brings the data stream to our position: micro-batch k of the stream is
 * ours when k mod shard_count is our shard index, so after m micro-batches
 * of ours the stream stands at m * shard_count + shard_index. A stream
 * opened at a checkpoint's recorded position is there already; otherwise
 * (a checkpoint without one, or one the CLI could not use) it is re-read.
 * Then marks it: the position a checkpoint records until the first step.
 * Returns the batches re-read, -1 on an error. */
static int64_t stream_start(const dl_trainer_backend *be, const struct dl_collab_train_options *o,
                            const dl_checkpoint *resume, const char **how) {
    int64_t ours = resume ? resume->progress.micro_batches : 0, skip = 0;
    if (resume && be->data_resumed) {
        *how = "seek";
        DL_INFO("collab", "data stream reopened at the checkpoint's position (after our micro-batch %" PRId64
                "): nothing re-read", ours);
    } else {
        int64_t count = o->shard_count > 1 ? o->shard_count : 1;
        skip = ours * count + (o->shard_count > 1 ? o->shard_index : 0);
        if (ours > 0)
            DL_WARN("collab", "the checkpoint's data position is not used (none recorded, --replay-data, or the "
                    "stream changed): re-reading %" PRId64 " batches of the stream to get back to ours (after our "
                    "micro-batch %" PRId64 ")", skip, ours);
        if (skip > 0 && be->skip(be->ctx, skip)) {
            dl_fail_context("bringing the data stream to this peer's position (%" PRId64 " batches)", skip);
            return -1;
        }
    }
    if (be->mark_data && be->mark_data(be->ctx)) {
        dl_fail_context("marking the data stream's position");
        return -1;
    }
    return ours > 0 ? skip : 0;
}

int dl_collab_train_run(dl_net *net, dl_collab *collab, dl_state_donor *donor,
                        const struct dl_collab_train_options *o, const dl_opt_config *opt_config,
                        const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                        const dl_trainer_backend *be, struct dl_collab_train_result *res) {
    memset(res, 0, sizeof *res);
    if (o->base.target_batch <= 0) return dl_fail("the target batch must be positive");
    loop_state st = {.o = o, .net = net, .collab = collab, .donor = donor, .be = be, .n = layout->total,
                     .params = params, .res = res, .has_state = true};
    const dl_opt_config *cfg = resume ? &resume->opt_config : opt_config;
    if (dl_optimizer_init(&st.opt, cfg, layout)) return -1;
    int rc = -1;
    st.grad = dl_malloc(dl_mul_size(st.n + LOSS_ELEMS, sizeof(float)));
    if (!st.grad || dl_grad_accum_init(&st.acc, st.n)) goto done;
    /* One download per round where the backend sums on the device; not with
     * loss scaling, where an overflowing micro-batch must be dropped alone. */
    st.on_device = be && be->accumulate && be->collect && !o->base.loss_scaling;
    st.device_fresh = true;
    st.delayed = o->delay_update && be;
    st.early_on = be && !st.delayed;
    st.early_refused_epoch = -1;
    if (st.delayed || st.early_on) {
        st.rvec = dl_malloc(dl_mul_size(st.n + LOSS_ELEMS, sizeof(float)));
        if (!st.rvec || (st.delayed && dl_grad_accum_init(&st.carry, st.n))) goto done;
    }
    dl_loss_scale_init(&st.ls, o->base.loss_scaling);
    st.progress.data_seed = o->base.data_seed;
    st.progress.peer_seed = o->base.peer_seed;
    if (resume) {
        if (dl_checkpoint_restore_optimizer(resume, &st.opt)) goto done;
        memcpy(params, resume->params, st.n * sizeof(float));
        st.ls = resume->loss_scale;
        st.progress = resume->progress;
    }
    const char *data_how = resume ? "replay" : "fresh";
    int64_t skipped = 0;
    if (be && (skipped = stream_start(be, o, resume, &data_how)) < 0) goto done;
    st.mark_micro = st.progress.micro_batches;
    if (o->base.log_path && !(st.log = fopen(o->base.log_path, "a"))) {
        dl_fail("cannot open the log %s for appending", o->base.log_path);
        goto done;
    }
    if (be && be->set_params(be->ctx, params)) {
        dl_fail_context("uploading the weights");
        goto done;
    }
    st.last_state_epoch = (uint64_t)st.opt.step;
    st.ls_at_step = st.ls;
    if (publish_state(&st)) goto done;
    log_start(&st, resume != NULL, data_how, skipped);
    st.progress_at_step = st.progress;
    st.start_step = st.opt.step;
    st.run_start = dl_now();
    if (join_swarm(&st)) goto done;
    st.step_start = dl_now();
    if (run_loop(&st)) goto done;
    /* The state after the last complete step (a partial accumulation is
     * dropped; it was never averaged). */
    if (save_checkpoint(&st)) goto done;
    rc = 0;
    if (!stopping(&st)) {
        /* Late members may still fetch our results or our state. */
        double until = dl_now() + o->linger_s;
        while (dl_now() < until && !stopping(&st)) {
            struct dl_swarm_look look;
            if (st.has_state && !dl_swarm_look(net, collab, (uint64_t)st.opt.step, st.hash, 0, &look) && look.i_disagree &&
                look.ref_epoch == (uint64_t)st.opt.step && should_heal(&st, &look))
                heal(&st, &look);
            nap(0.05);
        }
    }
done:
    res->base.steps = st.opt.step;
    double elapsed = st.run_start > 0 ? dl_now() - st.run_start : 0;
    res->base.samples_per_second = elapsed > 0 ? (double)(st.progress.samples - (resume ? resume->progress.samples : 0)) / elapsed : 0;
    dl_hash64_hex(dl_hash64(params, st.n * sizeof(float), 0), res->base.param_hash);
    uint8_t h[32];
    dl_collab_param_hash(params, st.n, h);
    dl_collab_hash_hex(h, res->param_hash);
    abandon_early(&st);
    if (st.round.running) {
        /* Left on an error: the round still uses rvec until it returns. */
        struct dl_avg_result r;
        dl_async_round_join(&st.round, &r);
        dl_avg_result_free(&r);
    }
    if (st.log) fclose(st.log);
    dl_grad_accum_free(&st.acc);
    dl_grad_accum_free(&st.carry);
    free(st.rvec);
    free(st.grad);
    dl_optimizer_free(&st.opt);
    return rc;
}
