/* The training loop of one peer: accumulate micro-batches to the target batch,
 * step on the host, upload, log, checkpoint; resume exactly from a checkpoint. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

int dl_train_layout_from_model(const dl_param_layout *ml, dl_train_layout *out) {
    const char **names = dl_calloc((size_t)ml->count, sizeof *names);
    size_t *numels = dl_calloc((size_t)ml->count, sizeof *numels);
    int rc = -1;
    if (names && numels) {
        for (int i = 0; i < ml->count; i++) {
            names[i] = ml->entries[i].name;
            numels[i] = ml->entries[i].numel;
        }
        rc = dl_train_layout_init(out, ml->count, names, numels, NULL);
    }
    for (int i = 0; rc == 0 && i < ml->count; i++) {
        if (ml->entries[i].offset != out->tensors[i].offset) {
            dl_train_layout_free(out);
            rc = dl_fail("model layout entry %s is not packed in order", ml->entries[i].name);
            break;
        }
        out->tensors[i].ndim = ml->entries[i].ndim;
        /* A model entry holds at most 2 dimensions: never read past them. */
        enum { MODEL_DIMS = sizeof ml->entries[i].shape / sizeof ml->entries[i].shape[0] };
        for (int d = 0; d < MODEL_DIMS && d < ml->entries[i].ndim; d++)
            out->tensors[i].shape[d] = ml->entries[i].shape[d];
    }
    free(names);
    free(numels);
    return rc;
}

/* Steps averaged at each end of a run for the summary. */
#define LOSS_WINDOW 10
/* Off a terminal, micro-batch progress lines come at most this often. */
#define MICRO_LINE_EVERY_S 30.0

typedef struct {
    const dl_trainer_options *o;
    const dl_trainer_backend *be;
    dl_optimizer opt;
    dl_grad_accum acc;
    dl_loss_scale ls;
    dl_train_progress progress;
    /* Loss scale and progress as they were right after the last optimizer
     * step: a checkpoint records these, not the state of a partial
     * accumulation, so a resumed run redraws the same micro-batches. */
    dl_loss_scale ls_at_step;
    dl_train_progress progress_at_step;
    float *grad;
    FILE *log;
    bool tty;
    double run_start;
    int64_t start_step;
    int64_t run_samples;
    /* this run's losses: the first LOSS_WINDOW steps and a ring of the last */
    float first_losses[LOSS_WINDOW], last_losses[LOSS_WINDOW];
    /* progress within the target batch */
    double accum_start;       /* when this accumulation began */
    double last_micro_line;   /* when the last micro-batch progress line was printed (not a terminal) */
    bool micro_line_open;     /* a terminal's live line holds micro-batch progress */
    dl_loss_watch loss_watch; /* warns once per episode of a sharply rising loss */
} loop_state;

static void format_duration(double s, char *out, size_t size) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, size, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, size, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(out, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(out, size, "%lds", t);
}

typedef struct {
    double loss, mlm, sop, lr, sps;
    float grad_norm;
    int64_t samples, dropped;
    char hash[17];
    char warning[512];  /* "" unless this step starts an episode of rising loss */
} step_record;

/* Saves the state at the last step boundary. A failed save (disk full...)
 * does not stop training: the previous checkpoint stays, the failure is
 * said loudly, and the next save point tries again. 0 saved, -1 failed. */
static int save_checkpoint(loop_state *st, float *params, dl_trainer_result *res) {
    if (!st->o->checkpoint_dir) return 0;
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &st->opt, params);
    ck.model_config_json = (char *)st->o->model_config_json;
    ck.run_json = (char *)st->o->run_json;
    ck.loss_scale = st->ls_at_step;
    ck.progress = st->progress_at_step;
    ck.progress.elapsed_s += dl_now() - st->run_start;
    /* The stream's state at the same boundary; without it the checkpoint
     * is still good and a resumed run fast-forwards. */
    if (st->be->save_data && st->be->save_data(st->be->ctx, &ck.data_state, &ck.data_state_size)) {
        DL_WARN("train", "the checkpoint of step %" PRId64 " goes without the data stream's position (%s): "
                "resuming from it re-reads the stream up to there", ck.step, dl_error());
        ck.data_state = NULL;
        ck.data_state_size = 0;
    }
    char path[sizeof res->checkpoint];
    int saved = dl_checkpoint_save_in_dir(st->o->checkpoint_dir, &ck, st->o->keep, path, sizeof path);
    free(ck.data_state);
    if (saved) {
        res->save_failures++;
        if (st->tty && st->o->progress) fputc('\n', st->o->progress);
        if (res->checkpoint[0])
            DL_ERROR("train", "SAVING THE CHECKPOINT OF STEP %" PRId64 " FAILED: %s. Training goes on; the last good "
                     "checkpoint is %s (step %" PRId64 "); the next save point tries again",
                     ck.step, dl_error(), res->checkpoint, res->checkpoint_step);
        else
            DL_ERROR("train", "SAVING THE CHECKPOINT OF STEP %" PRId64 " FAILED: %s. Training goes on; no checkpoint "
                     "of this run is saved yet; the next save point tries again (free space in %s?)",
                     ck.step, dl_error(), st->o->checkpoint_dir);
        return -1;
    }
    snprintf(res->checkpoint, sizeof res->checkpoint, "%s", path);
    res->checkpoint_step = ck.step;
    DL_DEBUG("train", "checkpoint %s", res->checkpoint);
    return 0;
}

/* Time left for the run: to max_steps at the pace so far, or to the time
 * limit, whichever comes first; negative when unknown. */
static double run_eta(const loop_state *st, double now) {
    const dl_trainer_options *o = st->o;
    int64_t done = st->opt.step - st->start_step, left = o->max_steps - st->opt.step;
    double elapsed = now - st->run_start;
    double eta = done > 0 ? elapsed / (double)done * (double)left : -1;
    if (o->max_seconds > 0) {
        double until_limit = o->max_seconds - elapsed;
        if (until_limit < 0) until_limit = 0;
        if (eta < 0 || until_limit < eta) eta = until_limit;
    }
    return eta;
}

static void report(loop_state *st, const step_record *r, dl_trainer_result *res) {
    const dl_trainer_options *o = st->o;
    int64_t step = st->opt.step;
    if (st->log && !res->log_failed) {
        fprintf(st->log,
                "{\"step\": %" PRId64 ", \"loss\": %.7g, \"mlm_loss\": %.7g, \"sop_loss\": %.7g, \"lr\": %.9g, "
                "\"samples\": %" PRId64 ", \"samples_per_second\": %.4g, \"grad_norm\": %.7g, "
                "\"loss_scale\": %.9g, \"dropped_micro_batches\": %" PRId64 ", \"param_hash\": \"%s\"%s%s%s}\n",
                step, r->loss, r->mlm, r->sop, r->lr, st->progress.samples, r->sps, r->grad_norm,
                (double)st->ls.scale, r->dropped, r->hash, r->warning[0] ? ", \"warning\": \"" : "", r->warning,
                r->warning[0] ? "\"" : "");
        if (fflush(st->log) != 0 || ferror(st->log)) {
            res->log_failed = true;
            if (st->tty && o->progress) fputc('\n', o->progress);
            DL_ERROR("train", "cannot write the log %s at step %" PRId64 " (%s); training goes on without it",
                     o->log_path, step, strerror(errno));
        }
    }
    if (!o->progress) return;
    char eta[32];
    format_duration(run_eta(st, dl_now()), eta, sizeof eta);
    char line[256];
    snprintf(line, sizeof line,
             "step %" PRId64 "/%" PRId64 " | %.1f samples/s | loss %.4f (mlm %.4f, sop %.4f) | lr %.3g | "
             "scale %g | ETA %s",
             step, o->max_steps, r->sps, r->loss, r->mlm, r->sop, r->lr, (double)st->ls.scale, eta);
    if (st->tty) {
        fprintf(o->progress, "\r%s\033[K", line);
        if (step >= o->max_steps) fputc('\n', o->progress);
    } else {
        fprintf(o->progress, "%s\n", line);
    }
    st->micro_line_open = false;
    fflush(o->progress);
}

/* Progress inside a step: a large target batch takes many micro-batches
 * (sahajBERT's 4096 samples: hours on one CPU), so the line moves with each
 * one. On a terminal the live line is rewritten every micro-batch; otherwise
 * the first micro-batch of the run gets a line, then one every
 * MICRO_LINE_EVERY_S seconds. */
static void report_micro_batch(loop_state *st) {
    const dl_trainer_options *o = st->o;
    if (!o->progress) return;
    double now = dl_now();
    bool first = st->progress.micro_batches == st->progress_at_step.micro_batches + 1 &&
                 st->opt.step == st->start_step;
    if (!st->tty && !first && now - st->last_micro_line < MICRO_LINE_EVERY_S) return;
    double took = now - st->accum_start;
    double rate = took > 0 ? (double)st->acc.samples / took : 0;
    char step_eta[32], run_eta_text[32];
    format_duration(rate > 0 ? (double)(o->target_batch - st->acc.samples) / rate : -1, step_eta, sizeof step_eta);
    double eta = run_eta(st, now);
    format_duration(eta, run_eta_text, sizeof run_eta_text);
    char line[256];
    snprintf(line, sizeof line,
             "step %" PRId64 "/%" PRId64 " | accumulating %" PRId64 "/%" PRId64 " samples | %.1f samples/s | "
             "next step in %s%s%s",
             st->opt.step + 1, o->max_steps, st->acc.samples, o->target_batch, rate, step_eta,
             eta >= 0 ? " | ETA " : "", eta >= 0 ? run_eta_text : "");
    if (st->tty) {
        fprintf(o->progress, "\r%s\033[K", line);
        st->micro_line_open = true;
    } else {
        fprintf(o->progress, "%s\n", line);
    }
    st->last_micro_line = now;
    fflush(o->progress);
}

static bool stop_requested(const dl_trainer_options *o) { return o->stop && *o->stop; }

/* Sums the micro-batches on the device; the mean gradient crosses once. A
 * non-finite loss poisons the sum, and without loss scaling it means the
 * run diverged. */
static int accumulate_on_device(loop_state *st, const dl_trainer_backend *be, step_record *r) {
    double loss = 0, mlm = 0, sop = 0;
    bool first = true;
    while (st->acc.samples < st->o->target_batch) {
        if (stop_requested(st->o)) return 1;
        int samples = 0;
        dl_losses losses = {0};
        if (be->accumulate(be->ctx, first, st->ls.scale, &samples, &losses))
            return dl_fail_context("micro-batch %" PRId64, st->progress.micro_batches);
        first = false;
        st->progress.micro_batches++;
        if (!isfinite(losses.loss))
            return dl_fail("micro-batch %" PRId64 " gave a non-finite loss in fp32: the run diverged (lower --lr?)",
                           st->progress.micro_batches - 1);
        if (samples <= 0) return dl_fail("the backend returned a micro-batch of %d samples", samples);
        dl_loss_scale_update(&st->ls, true); /* counts the clean micro-batch, as the other path does */
        st->acc.samples += samples;
        loss += (double)losses.loss * samples;
        mlm += (double)losses.mlm_loss * samples;
        sop += (double)losses.sop_loss * samples;
        report_micro_batch(st);
    }
    if (be->collect(be->ctx, st->ls.scale, st->acc.samples, st->grad)) return dl_fail_context("collecting the gradient");
    if (!dl_all_finite(st->grad, st->acc.n))
        return dl_fail("the step's gradient is not finite in fp32: the run diverged (lower --lr?)");
    double n = (double)st->acc.samples;
    r->loss = loss / n;
    r->mlm = mlm / n;
    r->sop = sop / n;
    r->samples = st->acc.samples;
    return 0;
}

/* Accumulates one target batch into st->grad (the sample-weighted mean); 1
 * if stopped first, 0 when full, -1 on error. */
static int accumulate(loop_state *st, const dl_trainer_backend *be, step_record *r) {
    dl_grad_accum_reset(&st->acc);
    double loss = 0, mlm = 0, sop = 0;
    r->dropped = 0;
    st->accum_start = dl_now();
    if (be->accumulate && be->collect && !st->o->loss_scaling) return accumulate_on_device(st, be, r);
    while (st->acc.samples < st->o->target_batch) {
        if (stop_requested(st->o)) return 1;
        int samples = 0;
        dl_losses losses = {0};
        float scale = st->ls.scale;
        if (be->micro_batch(be->ctx, scale, st->grad, &samples, &losses))
            return dl_fail_context("micro-batch %" PRId64, st->progress.micro_batches);
        st->progress.micro_batches++;
        bool finite = dl_all_finite(st->grad, st->acc.n) && isfinite(losses.loss);
        if (!dl_loss_scale_update(&st->ls, finite)) {
            r->dropped++;
            DL_DEBUG("train", "micro-batch dropped: non-finite gradient at loss scale %g", (double)scale);
            if (!st->o->loss_scaling && r->dropped >= 16)
                return dl_fail("16 micro-batches of one step gave non-finite gradients in fp32: the run diverged "
                               "(lower --lr?)");
            continue;
        }
        if (samples <= 0) return dl_fail("the backend returned a micro-batch of %d samples", samples);
        dl_grad_accum_add(&st->acc, st->grad, samples);
        loss += (double)losses.loss * samples;
        mlm += (double)losses.mlm_loss * samples;
        sop += (double)losses.sop_loss * samples;
        report_micro_batch(st);
    }
    double n = (double)st->acc.samples;
    r->loss = loss / n;
    r->mlm = mlm / n;
    r->sop = sop / n;
    r->samples = st->acc.samples;
    return dl_grad_accum_mean(&st->acc, st->grad);
}

static int apply_resume(loop_state *st, const dl_checkpoint *ck, float *params, const dl_trainer_backend *be) {
    if (dl_checkpoint_restore_optimizer(ck, &st->opt)) return dl_fail_context("resume");
    memcpy(params, ck->params, ck->layout.total * sizeof(float));
    st->ls = ck->loss_scale;
    st->progress = ck->progress;
    if (ck->progress.data_seed != st->o->data_seed || ck->progress.peer_seed != st->o->peer_seed)
        return dl_fail("resume: the checkpoint was trained with data seeds %" PRIu64 "/%" PRIu64
                       ", this run has %" PRIu64 "/%" PRIu64,
                       ck->progress.data_seed, ck->progress.peer_seed, st->o->data_seed, st->o->peer_seed);
    if (be->data_resumed) return 0; /* the stream was opened at the checkpoint's position */
    if (ck->progress.micro_batches > 0 && be->skip(be->ctx, ck->progress.micro_batches))
        return dl_fail_context("resume: cannot fast-forward the data stream by %" PRId64 " micro-batches",
                               ck->progress.micro_batches);
    return 0;
}

/* The summary's losses: means over the first and the last steps of the run
 * (up to LOSS_WINDOW each, at most half the run so the two do not overlap). */
static void summarize_losses(const loop_state *st, dl_trainer_result *res) {
    int64_t n = st->opt.step - st->start_step;
    if (n <= 0) return;
    int k = n >= 2 * LOSS_WINDOW ? LOSS_WINDOW : (n >= 2 ? (int)(n / 2) : 1);
    double first = 0, last = 0;
    for (int i = 0; i < k; i++) {
        first += st->first_losses[i];
        last += st->last_losses[(n - 1 - i) % LOSS_WINDOW];
    }
    res->first_loss = (float)(first / k);
    res->last_loss = (float)(last / k);
    res->loss_window = k;
}

int dl_trainer_run(const dl_trainer_options *o, const dl_opt_config *opt_config, const dl_train_layout *layout,
                   float *params, const dl_checkpoint *resume, const dl_trainer_backend *be,
                   dl_trainer_result *res) {
    memset(res, 0, sizeof *res);
    if (o->target_batch <= 0) return dl_fail("the target batch must be positive");
    loop_state st = {.o = o, .be = be};
    st.tty = o->progress && isatty(fileno(o->progress));
    const dl_opt_config *cfg = resume ? &resume->opt_config : opt_config;
    if (dl_optimizer_init(&st.opt, cfg, layout)) return -1;
    int rc = -1;
    st.grad = dl_malloc(dl_mul_size(layout->total, sizeof(float)));
    if (!st.grad || dl_grad_accum_init(&st.acc, layout->total)) goto done;
    dl_loss_scale_init(&st.ls, o->loss_scaling);
    st.progress.data_seed = o->data_seed;
    st.progress.peer_seed = o->peer_seed;
    if (resume && apply_resume(&st, resume, params, be)) goto done;
    if (be->mark_data && be->mark_data(be->ctx)) goto done;
    if (o->log_path && !(st.log = fopen(o->log_path, "a"))) {
        dl_fail("cannot open the log %s for appending", o->log_path);
        goto done;
    }
    if (be->set_params(be->ctx, params)) {
        dl_fail_context("uploading the weights");
        goto done;
    }
    st.ls_at_step = st.ls;
    st.progress_at_step = st.progress;
    st.start_step = st.opt.step;
    st.run_start = dl_now();
    double step_start = st.run_start;
    if (o->progress && st.opt.step < o->max_steps) {
        /* The first micro-batch compiles the kernels on first use: minutes on
         * a cold cache at sahajBERT's size, so say what is happening. */
        fprintf(o->progress, "first micro-batch (compiling the device kernels on first use can take minutes)...%s",
                st.tty ? "" : "\n");
        st.micro_line_open = st.tty;
        fflush(o->progress);
    }
    while (st.opt.step < o->max_steps) {
        step_record r = {0};
        int acc = accumulate(&st, be, &r);
        if (acc < 0) goto done;
        if (acc > 0) {
            res->interrupted = true;
            break;
        }
        dl_opt_step_info info;
        if (dl_optimizer_step(&st.opt, params, st.grad, &info)) goto done;
        if (be->set_params(be->ctx, params)) {
            dl_fail_context("uploading the weights after step %" PRId64, st.opt.step);
            goto done;
        }
        /* Only now is the step complete: samples and the stream position at
         * this boundary are what a checkpoint records. */
        st.progress.samples += r.samples;
        st.run_samples += r.samples;
        st.ls_at_step = st.ls;
        st.progress_at_step = st.progress;
        if (be->mark_data && be->mark_data(be->ctx)) goto done;
        double now = dl_now();
        r.lr = info.lr;
        r.grad_norm = info.grad_norm;
        r.sps = now > step_start ? (double)r.samples / (now - step_start) : 0;
        step_start = now;
        dl_hash64_hex(dl_hash64(params, layout->total * sizeof(float), 0), r.hash);
        if (dl_loss_watch_add(&st.loss_watch, st.opt.step, r.loss)) {
            dl_loss_watch_describe(&st.loss_watch, r.lr, r.warning, sizeof r.warning);
            if (st.tty && o->progress) fputc('\n', o->progress);
            DL_WARN("train", "%s", r.warning);
        }
        int64_t run_steps = st.opt.step - st.start_step;
        if (run_steps <= LOSS_WINDOW) st.first_losses[run_steps - 1] = (float)r.loss;
        st.last_losses[(run_steps - 1) % LOSS_WINDOW] = (float)r.loss;
        report(&st, &r, res);
        bool due = o->save_every > 0 && st.opt.step % o->save_every == 0;
        if (due && st.opt.step < o->max_steps) save_checkpoint(&st, params, res); /* a failure is said and retried */
        if (o->max_seconds > 0 && now - st.run_start >= o->max_seconds && st.opt.step < o->max_steps) {
            res->time_limit = true;
            break;
        }
    }
    if (st.tty && (res->time_limit || res->interrupted || st.micro_line_open)) fputc('\n', o->progress);
    /* At the end and on a stop: the state at the last step boundary (a
     * partial accumulation is dropped; the resumed run redraws it). */
    res->last_save_failed = save_checkpoint(&st, params, res) != 0;
    summarize_losses(&st, res);
    rc = 0;
done:
    res->steps = st.opt.step;
    res->steps_this_run = st.opt.step - st.start_step;
    double elapsed = dl_now() - st.run_start;
    res->samples_per_second = elapsed > 0 && st.run_start > 0 ? (double)st.run_samples / elapsed : 0;
    dl_hash64_hex(dl_hash64(params, layout->total * sizeof(float), 0), res->param_hash);
    if (st.log) fclose(st.log);
    dl_grad_accum_free(&st.acc);
    free(st.grad);
    dl_optimizer_free(&st.opt);
    return rc;
}
