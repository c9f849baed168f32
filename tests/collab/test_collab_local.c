/* Local-steps mode (DiLoCo) of the step loop, in one process.
 *
 * Error feedback, exact: a sync sends (outer - local) + residual; after it
 * the residual becomes that minus what the codec carried. With the codec
 * none nothing is lost (the residual is +0 everywhere, bit for bit); with
 * a lossy codec (fp16 rounding, as a stand-in) what was sent plus the new
 * residual is what would have been sent uncompressed, bit for bit, and the
 * next sync's pseudo-gradient carries the residual.
 *
 * Resume in the middle of the inner steps: a lone peer (dl_collab_train_run
 * on loopback, a synthetic backend whose stream is a counter, as in
 * test_collab_resume.c) syncs every 3 micro-batches (--local-batch) for 4
 * syncs, inner LAMB after every micro-batch, outer Nesterov at every sync.
 * Stopped two micro-batches into its third sync, its checkpoint must hold
 * the outer state of 2 syncs and the local weights, inner moments and step,
 * samples and losses of the 8 micro-batches; resumed (seeking or re-reading
 * the stream), it must feed the same micro-batches and end with the weights
 * of the uninterrupted run, bit for bit. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collab/train_loop_internal.h"
#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "counter_stream.h"
#include "dl_test.h"

enum { N = CS_N, SAMPLES = CS_SAMPLES, H = 3, SYNCS = 4, MAX_DRAWN = CS_MAX_DRAWN };

/* ---- error feedback ---- */

static void test_residual(void) {
    float outer[N], local[N], residual[N], pseudo[N], sent[N], before[N];
    dl_rng rng;
    dl_rng_seed(&rng, 2424);
    for (int i = 0; i < N; i++) {
        outer[i] = dl_rng_normal(&rng);
        local[i] = outer[i] - 0.01f * dl_rng_normal(&rng);
        residual[i] = 0.0f;
    }
    /* The codec none: sent is what we sent, nothing is kept. */
    dl_local_pseudo_gradient(N, outer, local, residual, pseudo);
    memcpy(sent, pseudo, sizeof sent);
    dl_local_residual_update(N, outer, local, residual, sent);
    for (int i = 0; i < N; i++) CHECK_MSG(residual[i] == 0.0f && !signbit(residual[i]), "codec none: residual[%d] %g", i, residual[i]);

    /* A lossy codec over three syncs. */
    for (int sync = 0; sync < 3; sync++) {
        for (int i = 0; i < N; i++) local[i] = outer[i] - 0.01f * dl_rng_normal(&rng);
        memcpy(before, residual, sizeof before);
        dl_local_pseudo_gradient(N, outer, local, residual, pseudo);
        bool carried = true, nonzero = false;
        for (int i = 0; i < N; i++) {
            carried &= pseudo[i] == (outer[i] - local[i]) + before[i];
            sent[i] = dl_f16_to_f32(dl_f32_to_f16(pseudo[i]));
        }
        CHECK_MSG(carried, "sync %d: the pseudo-gradient does not carry the residual", sync);
        dl_local_residual_update(N, outer, local, residual, sent);
        for (int i = 0; i < N; i++) {
            CHECK_MSG(sent[i] + residual[i] == pseudo[i], "sync %d element %d: sent %.9g + residual %.9g != %.9g", sync,
                      i, sent[i], residual[i], pseudo[i]);
            nonzero |= residual[i] != 0.0f;
        }
        CHECK_MSG(nonzero, "sync %d: fp16 lost nothing (the test's values are too round)", sync);
    }
}

/* ---- resume in the middle of the inner steps ---- */

static int run_peer(counter_stream *s, bool data_resumed, const dl_checkpoint *resume, const char *ckdir,
                    const dl_train_layout *layout, float *params) {
    static volatile sig_atomic_t stop;
    stop = 0;
    s->stop = &stop;
    s->mark = -1;
    s->seed = 900;
    char run_id[64];
    snprintf(run_id, sizeof run_id, "test-collab-local-%d", (int)getpid());
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    o.base.target_batch = 1000; /* not used: --local-batch decides */
    o.base.max_steps = SYNCS;
    o.base.checkpoint_dir = ckdir;
    o.base.keep = 0;
    o.base.stop = &stop;
    o.base.run_json = "{}";
    o.base.model_config_json = "{}";
    o.local_batch = H * SAMPLES;
    o.local_steps = H;
    o.join_wait_s = 0;
    o.linger_s = 0;
    dl_opt_config opt = dl_opt_config_sahajbert();
    opt.lr = 0.01;
    opt.warmup_steps = 2;
    opt.total_steps = SYNCS * H;
    dl_trainer_backend be = counter_stream_backend(s, data_resumed);
    return counter_stream_lone_run(run_id, &o, &opt, layout, params, resume, &be);
}

static void test_resume(void) {
    const char *names[] = {"w"};
    size_t numels[] = {N};
    dl_train_layout layout;
    CHECK_OK(dl_train_layout_init(&layout, 1, names, numels, NULL));
    float init[N], whole_params[N], params[N];
    for (int i = 0; i < N; i++) init[i] = 0.1f * (float)i;

    char whole_dir[] = "/tmp/dedloc-test-collab-local-whole.XXXXXX", dir[] = "/tmp/dedloc-test-collab-local.XXXXXX";
    CHECK(mkdtemp(whole_dir) != NULL && mkdtemp(dir) != NULL);
    counter_stream whole = {0};
    memcpy(whole_params, init, sizeof init);
    CHECK_OK(run_peer(&whole, false, NULL, whole_dir, &layout, whole_params));
    CHECK(whole.count == H * SYNCS);
    /* The end: the outer state of 4 syncs, local weights restarted from it. */
    dl_checkpoint end;
    memset(&end, 0, sizeof end);
    CHECK(dl_checkpoint_load_latest(whole_dir, &end, NULL, 0) == 0);
    CHECK(end.step == SYNCS && end.opt_config.kind == DL_OPT_NESTEROV && end.local.params);
    if (end.local.params) {
        CHECK(memcmp(end.params, whole_params, sizeof whole_params) == 0);
        CHECK(memcmp(end.local.params, whole_params, sizeof whole_params) == 0);
        CHECK(end.local.inner_step == H * SYNCS && end.local.samples_since_sync == 0);
        bool momentum = false, residual_zero = true;
        for (int i = 0; i < N; i++) {
            momentum |= end.exp_avg[i] != 0;
            residual_zero &= end.local.residual[i] == 0;
        }
        CHECK_MSG(momentum, "the outer momentum is zero after 4 syncs");
        CHECK_MSG(residual_zero, "codec none: a residual was kept");
    }
    dl_checkpoint_free(&end);

    /* Stopped two micro-batches into the third sync. */
    counter_stream first = {.stop_after = 2 * H + 2};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&first, false, NULL, dir, &layout, params));
    counter_stream_check_fed(&first, &whole, 0, 2 * H + 2, "before the stop");
    dl_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    CHECK(dl_checkpoint_load_latest(dir, &ck, NULL, 0) == 0);
    CHECK(ck.step == 2);
    CHECK_MSG(ck.progress.micro_batches == 2 * H + 2, "the checkpoint counts %lld micro-batches, want %d",
              (long long)ck.progress.micro_batches, 2 * H + 2);
    CHECK(ck.local.params != NULL);
    if (ck.local.params) {
        CHECK(ck.local.inner_step == 2 * H + 2 && ck.local.samples_since_sync == 2 * SAMPLES);
        CHECK_MSG(memcmp(ck.local.params, ck.params, sizeof(float) * N) != 0,
                  "mid inner steps, the local weights equal the outer ones");
        CHECK(ck.local.loss_sum[0] > 0);
    }
    int64_t at = -1;
    CHECK(ck.data_state && ck.data_state_size == sizeof at);
    if (ck.data_state && ck.data_state_size == sizeof at) memcpy(&at, ck.data_state, sizeof at);
    CHECK_MSG(at == 2 * H + 2, "the checkpoint records stream batch %lld, want %d", (long long)at, 2 * H + 2);

    counter_stream seek = {.pos = at};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&seek, true, &ck, NULL, &layout, params));
    CHECK(seek.skipped == 0);
    counter_stream_check_fed(&seek, &whole, 2 * H + 2, H * SYNCS - (2 * H + 2), "resumed by seeking");
    CHECK_MSG(memcmp(params, whole_params, sizeof params) == 0, "resumed by seeking: the weights differ");

    counter_stream replay = {0};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&replay, false, &ck, NULL, &layout, params));
    CHECK(replay.skipped == 2 * H + 2);
    counter_stream_check_fed(&replay, &whole, 2 * H + 2, H * SYNCS - (2 * H + 2), "resumed by re-reading");
    CHECK_MSG(memcmp(params, whole_params, sizeof params) == 0, "resumed by re-reading: the weights differ");

    dl_checkpoint_free(&ck);
    dl_train_layout_free(&layout);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", dir, whole_dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    test_residual();
    test_resume();
    return dl_test_finish("test_collab_local");
}
