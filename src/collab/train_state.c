/* Our state against the swarm's and on disk (the step loop,
 * train_loop_internal.h): the record and snapshot we publish after our
 * weights change, the download of the swarm's state (catching up, healing
 * a disagreement), the data stream's mark and our checkpoints. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "collab/train_loop_internal.h"
#include "dedloc/util.h"

/* Our record after our weights changed (st->model.hash already computed). */
int loop_publish_record(loop_state *st) {
    if (!st->model.has_state) {
        dl_net_set_param_hash(st->net, NULL);
        return dl_net_publish_progress(st->net, (uint64_t)st->model.opt.step, 0, 0);
    }
    dl_net_set_param_hash(st->net, st->model.hash);
    return dl_net_publish_progress(st->net, (uint64_t)st->model.opt.step, (double)loop_local_samples(st), 0);
}

/* Our weights changed: new hash, new snapshot, new record. */
int loop_publish_state(loop_state *st) {
    if (st->model.has_state) {
        dl_collab_param_hash(st->model.params, st->model.n, st->model.hash);
        if (dl_train_state_publish(st->donor, &st->model.opt, st->model.params, st->count.progress.samples,
                                   &st->count.ls_at_step))
            return -1;
    }
    return loop_publish_record(st);
}

int loop_save_checkpoint(loop_state *st) {
    const dl_trainer_options *o = &st->o->base;
    if (!o->checkpoint_dir || !st->model.has_state) return 0;
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &st->model.opt, st->model.params);
    ck.model_config_json = (char *)o->model_config_json;
    ck.run_json = (char *)o->run_json;
    ck.loss_scale = st->count.ls_at_step;
    ck.progress = st->count.progress_at_step;
    if (st->local.on) {
        /* Every micro-batch drawn went into the local weights: the
         * checkpoint stands where the stream stands now, mid inner steps. */
        if (loop_mark_data(st)) return -1;
        ck.progress = st->count.progress;
        ck.loss_scale = st->accum.ls;
        loop_local_checkpoint(st, &ck);
    }
    ck.progress.elapsed_s += dl_now() - st->report.run_start;
    if (st->be && st->be->save_data) {
        if (st->count.mark_micro != ck.progress.micro_batches) {
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
int loop_mark_data(loop_state *st) {
    if (!st->be || !st->be->mark_data) return 0;
    if (st->be->mark_data(st->be->ctx)) return dl_fail_context("marking the data stream's position");
    st->count.mark_micro = st->count.progress.micro_batches;
    return 0;
}

/* Downloads the swarm's reference state; keeps our accumulated gradient. */
int loop_download(loop_state *st, const struct dl_swarm_look *look, const char *why) {
    char hex[65];
    dl_collab_hash_hex(look->ref_hash, hex);
    char detail[400];
    snprintf(detail, sizeof detail, "%s: downloading the state of epoch %" PRIu64 " (param_hash %.16s, held by %zu of %zu)",
             why, look->ref_epoch, hex, look->ref_holders, look->hashes_at_ref);
    DL_INFO("collab", "%s", detail);
    loop_log_event(st, DL_TRAIN_EVENT_DOWNLOAD, detail);
    struct dl_train_state_meta meta;
    double t0 = dl_now();
    if (dl_train_state_fetch(st->net, look, &st->model.opt, st->model.params, &meta,
                             fmax(30, st->o->round_deadline_s), st->o->base.stop)) {
        if (loop_stopping(st)) {
            /* Ctrl-C: the download is dropped, our weights are as they were. */
            DL_INFO("collab", "state download stopped: %s", dl_error());
            return -1;
        }
        DL_WARN("collab", "state download failed (trying again soon): %s", dl_error());
        loop_log_event(st, DL_TRAIN_EVENT_DOWNLOAD_FAILED, dl_error());
        return -1;
    }
    st->res->wait_s += dl_now() - t0;
    st->count.progress.samples = meta.samples;
    dl_train_state_meta_adopt_scale(&meta, &st->accum.ls);
    st->model.has_state = true;
    st->model.clean_valid = false; /* moments of others' history: ours to go back to no longer match */
    st->model.last_state_epoch = meta.epoch;
    st->swarm.prev_wait_until = dl_now() + 3;
    st->res->state_downloads++;
    if (st->local.on && st->be && loop_local_restart(st)) return -1;
    if (st->be && st->be->set_params(st->be->ctx, st->model.params))
        return dl_fail_context("uploading downloaded weights");
    /* Our accumulation is kept for the next round: its micro-batches are not
     * applied yet, and the data mark stays before them (local-steps mode:
     * they were dropped, the mark is here). */
    int64_t applied = st->local.on ? st->count.progress.micro_batches : st->count.progress_at_step.micro_batches;
    st->count.progress_at_step = st->count.progress;
    st->count.progress_at_step.micro_batches = applied;
    st->count.ls_at_step = st->accum.ls;
    return loop_publish_state(st);
}

/* Our weights differ from what most peers at our epoch hold: say so, take theirs. */
void loop_heal(loop_state *st, const struct dl_swarm_look *look) {
    char mine[65], detail[300];
    dl_collab_hash_hex(st->model.hash, mine);
    snprintf(detail, sizeof detail, "our param_hash %.16s disagrees with %zu of %zu peers at epoch %" PRId64, mine,
             look->ref_holders, look->hashes_at_ref, st->model.opt.step);
    DL_WARN("collab", "%s", detail);
    loop_log_event(st, DL_TRAIN_EVENT_DISAGREE, detail);
    if (loop_download(st, look, "param_hash disagreement") == 0) st->res->heals++;
    else loop_nap(0.2);
}

/* Test hook (--test-attack epoch-sybil, test builds' CLI only): one of a
 * colluding pair. It claims an epoch DL_TEST_SYBIL_EPOCH_LEAD steps ahead
 * with weights of its own, which its donor serves and its records sign, so
 * that a peer which takes its word downloads a state that verifies; then it
 * only gossips (the network thread refreshes its record) until stopped. */
int loop_epoch_sybil(loop_state *st) {
    st->model.opt.step += DL_TEST_SYBIL_EPOCH_LEAD;
    for (size_t i = 0; i < st->model.n; i += 97) st->model.params[i] += 1e-2f;
    DL_WARN("collab", "test attack: claiming epoch %" PRId64 " with weights of our own", st->model.opt.step);
    if (loop_publish_state(st)) return -1;
    while (!loop_stopping(st)) loop_nap(0.05);
    return 0;
}
