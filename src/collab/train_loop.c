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

#include "collab/train_sync.h"
#include "dedloc/util.h"

/* Extra elements averaged with the gradient: the peers' mean losses, so that
 * every member logs the same collective loss. */
#define LOSS_ELEMS 3

typedef struct {
    const struct dl_collab_train_options *o;
    dl_net *net;
    dl_collab *collab;
    dl_state_donor *donor;
    const dl_trainer_backend *be;  /* NULL: auxiliary peer */
    size_t n;
    float *params;
    dl_optimizer opt;
    dl_grad_accum acc;
    dl_loss_scale ls, ls_at_step;
    dl_train_progress progress, progress_at_step;
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

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Our weights changed: new hash, new record, new snapshot. */
static int publish_state(loop_state *st) {
    if (!st->has_state) {
        dl_net_set_param_hash(st->net, NULL);
        return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, 0, 0);
    }
    dl_collab_param_hash(st->params, st->n, st->hash);
    if (dl_train_state_publish(st->donor, &st->opt, st->params, st->progress.samples)) return -1;
    dl_net_set_param_hash(st->net, st->hash);
    return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, (double)st->acc.samples, 0);
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
    return dl_checkpoint_save_in_dir(o->checkpoint_dir, &ck, o->keep, st->res->base.checkpoint,
                                     sizeof st->res->base.checkpoint);
}

/* One micro-batch into the accumulator (dropped when not finite). */
static int micro_batch(loop_state *st) {
    int samples = 0;
    dl_losses losses = {0};
    double t0 = dl_now();
    if (st->be->micro_batch(st->be->ctx, st->ls.scale, st->grad, &samples, &losses))
        return dl_fail_context("micro-batch %" PRId64, st->progress.micro_batches);
    st->progress.micro_batches++;
    st->micro_since_round++;
    bool finite = dl_all_finite(st->grad, st->n) && isfinite(losses.loss);
    if (dl_loss_scale_update(&st->ls, finite)) {
        if (samples <= 0) return dl_fail("the backend returned a micro-batch of %d samples", samples);
        dl_grad_accum_add(&st->acc, st->grad, samples);
        st->loss_sum[0] += (double)losses.loss * samples;
        st->loss_sum[1] += (double)losses.mlm_loss * samples;
        st->loss_sum[2] += (double)losses.sop_loss * samples;
    }
    /* Deterministic shares: micro-batch k of the stream belongs to peer k mod count. */
    if (st->o->shard_count > 1 && st->be->skip(st->be->ctx, st->o->shard_count - 1))
        return dl_fail_context("skipping the other peers' micro-batches");
    double dt = dl_now() - t0;
    st->compute_s += dt;
    st->res->compute_s += dt;
    double rate = st->acc.samples / fmax(dl_now() - st->step_start, 1e-3);
    return dl_net_publish_progress(st->net, (uint64_t)st->opt.step, (double)st->acc.samples, rate);
}

static void add_member_list(cJSON *o, const struct dl_avg_result *r) {
    cJSON *members = cJSON_AddArrayToObject(o, "members");
    for (size_t i = 0; i < r->num_members; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "peer_id", r->members[i].peer_id);
        cJSON_AddNumberToObject(m, "samples", r->members[i].weight);
        cJSON_AddStringToObject(m, "role", r->members[i].role == 2 ? "aux" : r->members[i].role == 1 ? "client"
                                                                                                     : "trainer");
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

static void log_event(loop_state *st, const char *event, const char *detail) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", event);
    cJSON_AddNumberToObject(o, "epoch", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddStringToObject(o, "detail", detail);
    emit(st, o);
}

/* The state we start from (a resumed checkpoint's or the initial weights). */
static void log_start(loop_state *st, bool resumed) {
    char hex[65];
    dl_collab_hash_hex(st->hash, hex);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "start");
    cJSON_AddNumberToObject(o, "epoch", (double)st->opt.step);
    cJSON_AddNumberToObject(o, "time", dl_wall_time());
    cJSON_AddStringToObject(o, "peer_id", dl_net_peer_id(st->net));
    cJSON_AddBoolToObject(o, "resumed", resumed);
    cJSON_AddStringToObject(o, "param_hash", hex);
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
    log_event(st, "download", detail);
    struct dl_train_state_meta meta;
    double t0 = dl_now();
    if (dl_train_state_fetch(st->net, look, &st->opt, st->params, &meta, fmax(30, st->o->round_deadline_s))) {
        DL_WARN("collab", "state download failed (trying again soon): %s", dl_error());
        log_event(st, "download_failed", dl_error());
        return -1;
    }
    st->res->wait_s += dl_now() - t0;
    st->progress.samples = meta.samples;
    st->has_state = true;
    st->last_state_epoch = meta.epoch;
    st->prev_wait_until = dl_now() + 3;
    st->res->state_downloads++;
    if (st->be && st->be->set_params(st->be->ctx, st->params)) return dl_fail_context("uploading downloaded weights");
    st->progress_at_step = st->progress;
    st->ls_at_step = st->ls;
    return publish_state(st);
}

/* Test hook (only the test builds' CLI sets it): replaces the gradient
 * elements of our contribution with an attack; the loss elements after them
 * stay honest. The noise is drawn from the epoch and our peer id, so a rerun
 * repeats it. */
static void attack_gradient(loop_state *st) {
    if (st->o->test_attack == DL_TEST_ATTACK_SIGN_FLIP) {
        for (size_t i = 0; i < st->n; i++) st->grad[i] *= -1000.0f;
        return;
    }
    uint64_t x = dl_hash64(dl_net_peer_id(st->net), strlen(dl_net_peer_id(st->net)), (uint64_t)st->opt.step);
    for (size_t i = 0; i < st->n; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        st->grad[i] = (float)((double)(z >> 11) * 0x1p-53 * 200.0 - 100.0);
    }
}

/* One averaging round at our epoch and, when it succeeds, the step. Returns
 * 1 when the step was taken, 0 when the round failed (nothing applied), -1 on
 * a local error. */
static int round_and_step(loop_state *st, size_t expected, bool alone) {
    size_t n = st->n;
    int64_t local = st->acc.samples;
    if (st->be) {
        if (dl_grad_accum_mean(&st->acc, st->grad)) return -1;
        for (int k = 0; k < LOSS_ELEMS; k++) st->grad[n + k] = (float)(st->loss_sum[k] / (double)local);
    } else {
        memset(st->grad, 0, (n + LOSS_ELEMS) * sizeof(float));
    }
    if (st->be && st->o->test_attack != DL_TEST_ATTACK_NONE) attack_gradient(st);
    struct dl_avg_options ao;
    dl_avg_options_default(&ao);
    ao.epoch = (uint64_t)st->opt.step;
    ao.weight = (double)local;
    ao.compression = st->o->compression;
    ao.aggregation = st->o->aggregation;
    ao.clip_tau = st->o->clip_tau;
    ao.clip_iterations = st->o->clip_iterations;
    ao.deadline_s = st->o->round_deadline_s;
    ao.expected_peers = expected;
    struct dl_avg_result r;
    double t0 = dl_now();
    int status;
    if (alone) {
        /* Nobody else in the swarm: the average is our own gradient, and
         * matchmaking would only wait out its window for joiners. */
        memset(&r, 0, sizeof r);
        r.members = dl_calloc(1, sizeof *r.members);
        if (!r.members) return -1;
        r.num_members = 1;
        snprintf(r.members[0].peer_id, sizeof r.members[0].peer_id, "%s", dl_net_peer_id(st->net));
        r.members[0].weight = ao.weight;
        r.members[0].role = st->be ? 0 : 2;
        status = r.status = DL_AVG_OK;
    } else {
        status = dl_collab_average(st->collab, st->grad, n + LOSS_ELEMS, &ao, &r);
    }
    st->micro_since_round = 0;
    if (status != DL_AVG_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "round of epoch %" PRId64 " failed (%s: %s): nothing applied, %" PRId64
                 " samples kept for the next round", st->opt.step, dl_avg_status_name(status), r.reason, local);
        DL_WARN("collab", "%s", detail);
        log_event(st, "round_failed", detail);
        st->res->rounds_failed++;
        st->res->wait_s += dl_now() - t0;
        dl_avg_result_free(&r);
        return 0;
    }
    double group = 0;
    for (size_t i = 0; i < r.num_members; i++) group += r.members[i].weight;
    float losses[LOSS_ELEMS];
    memcpy(losses, st->grad + n, sizeof losses);
    dl_opt_step_info info = {0};
    if (st->be) {
        if (dl_optimizer_step(&st->opt, st->params, st->grad, &info)) {
            dl_avg_result_free(&r);
            return -1;
        }
        if (st->be->set_params(st->be->ctx, st->params)) {
            dl_avg_result_free(&r);
            return dl_fail_context("uploading the weights after step %" PRId64, st->opt.step);
        }
    } else {
        /* An aux peer does not receive the average: it moves to the next
         * epoch without weights until it downloads them. */
        st->opt.step++;
        st->has_state = false;
    }
    /* Test hook (only the test builds' CLI sets it): self-healing on purpose. */
    if (st->o->corrupt_at_step > 0 && st->opt.step == st->o->corrupt_at_step && st->has_state) {
        st->params[0] += 1e-3f;
        DL_WARN("collab", "test hook: weights perturbed after step %" PRId64, st->opt.step);
        if (st->be && st->be->set_params(st->be->ctx, st->params)) return -1;
    }
    st->progress.samples += (int64_t)llround(group);
    dl_grad_accum_reset(&st->acc);
    memset(st->loss_sum, 0, sizeof st->loss_sum);
    st->ls_at_step = st->ls;
    st->progress_at_step = st->progress;
    st->res->rounds_ok++;
    double now = dl_now(), wall = now - st->step_start;
    st->res->wait_s += now - t0;
    if (publish_state(st)) {
        dl_avg_result_free(&r);
        return -1;
    }
    bool has_losses = st->be && group > 0 && isfinite(losses[0]); /* aux peers do not receive the average */
    log_step(st, &r, st->has_state ? &info : NULL, has_losses ? losses : NULL, group, local, wall);
    publish_metrics(st, has_losses ? losses : NULL, local, wall);
    progress_line(st, has_losses ? losses : NULL, wall > 0 ? group / wall : 0, r.num_members);
    if (has_losses) {
        if (st->res->base.steps_this_run == 0) st->res->base.first_loss = losses[0];
        st->res->base.last_loss = losses[0];
    }
    st->res->base.steps_this_run++;
    st->step_start = now;
    st->compute_s = 0;
    st->prev_wait_until = now + 3;
    dl_avg_result_free(&r);
    const dl_trainer_options *o = &st->o->base;
    if (o->save_every > 0 && st->opt.step % o->save_every == 0 && st->opt.step < o->max_steps && save_checkpoint(st))
        return -1;
    return 1;
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
    log_event(st, "disagree", detail);
    if (download(st, look, "param_hash disagreement") == 0) st->res->heals++;
    else nap(0.2);
}

/* Waits (bounded) until `want` peers are at our epoch. */
static void wait_for_peers(loop_state *st, size_t want, double timeout_s) {
    double until = dl_now() + timeout_s;
    while (dl_now() < until && !stopping(st)) {
        struct dl_swarm_look look;
        if (!dl_swarm_look(st->net, (uint64_t)st->opt.step, NULL, 0, &look) && look.at_epoch >= want) return;
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
        if (dl_swarm_look(st->net, (uint64_t)st->opt.step, st->has_state ? st->hash : NULL, 0, &look)) return -1;
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
    if (st->acc.samples <= 0 || st->micro_since_round == 0) return false;
    if (st->o->local_batch > 0) return st->acc.samples >= st->o->local_batch;
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
        struct dl_swarm_look look;
        if (dl_swarm_look(st->net, (uint64_t)st->opt.step, st->has_state ? st->hash : NULL, (double)st->acc.samples,
                          &look))
            return -1;
        if (look.ahead_epoch > (uint64_t)st->opt.step) {
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
            if (round_and_step(st, expected, look.peers <= 1 && expected <= 1) < 0) return -1;
            continue;
        }
        if (st->be) {
            if (micro_batch(st)) return -1;
        } else {
            if (st->micro_since_round == 0) st->micro_since_round = 1;
            nap(0.05);
        }
    }
    return 0;
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
    dl_loss_scale_init(&st.ls, o->base.loss_scaling);
    st.progress.data_seed = o->base.data_seed;
    st.progress.peer_seed = o->base.peer_seed;
    if (resume) {
        if (dl_checkpoint_restore_optimizer(resume, &st.opt)) goto done;
        memcpy(params, resume->params, st.n * sizeof(float));
        st.ls = resume->loss_scale;
        st.progress = resume->progress;
        if (be && resume->progress.micro_batches > 0 && be->skip(be->ctx, resume->progress.micro_batches)) {
            dl_fail_context("resume: cannot fast-forward the data stream");
            goto done;
        }
    }
    if (be && o->shard_count > 1 && o->shard_index > 0 && be->skip(be->ctx, o->shard_index)) {
        dl_fail_context("skipping to this peer's share of the stream");
        goto done;
    }
    if (o->base.log_path && !(st.log = fopen(o->base.log_path, "a"))) {
        dl_fail("cannot open the log %s for appending", o->base.log_path);
        goto done;
    }
    if (be && be->set_params(be->ctx, params)) {
        dl_fail_context("uploading the weights");
        goto done;
    }
    st.last_state_epoch = (uint64_t)st.opt.step;
    if (publish_state(&st)) goto done;
    log_start(&st, resume != NULL);
    st.ls_at_step = st.ls;
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
            if (st.has_state && !dl_swarm_look(net, (uint64_t)st.opt.step, st.hash, 0, &look) && look.i_disagree &&
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
    if (st.log) fclose(st.log);
    dl_grad_accum_free(&st.acc);
    free(st.grad);
    dl_optimizer_free(&st.opt);
    return rc;
}
