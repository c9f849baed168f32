/* A swarm peer's checkpoint and resume (dl_collab_train_run, a lone peer on
 * loopback) with a synthetic backend whose data stream is a counter: batch k
 * of the stream gives a quadratic's gradient toward a target drawn from k,
 * and the stream's "state" is the counter at its mark. The peer takes share
 * 1 of 3 (--data-shard 1/3: batches 1, 4, 7, ...), two micro-batches a step,
 * and is stopped one micro-batch into step 4. Its checkpoint must record the
 * stream after the 6 micro-batches of the 3 steps it applied (batch 19, not
 * past the dropped 7th), and a resume, by seeking there or by re-reading
 * the stream from its start (19 batches skipped), must feed the micro-batches
 * of an uninterrupted run and end with its weights, bit for bit. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "counter_stream.h"
#include "dl_test.h"

enum { N = CS_N, SAMPLES = CS_SAMPLES, STEPS = 5, MAX_DRAWN = CS_MAX_DRAWN, SHARD = 1, SHARDS = 3 };

/* One lone peer's run to STEPS from resume (NULL: fresh weights); params in/out. */
static int run_peer(counter_stream *s, bool data_resumed, const dl_checkpoint *resume, const char *ckdir,
                    const dl_train_layout *layout, float *params) {
    static volatile sig_atomic_t stop;
    stop = 0;
    s->stop = &stop;
    s->mark = -1;
    s->seed = 500;
    char run_id[64];
    snprintf(run_id, sizeof run_id, "test-collab-resume-%d", (int)getpid());
    struct dl_collab_train_options o;
    dl_collab_train_options_default(&o);
    o.base.target_batch = 2 * SAMPLES;
    o.base.max_steps = STEPS;
    o.base.checkpoint_dir = ckdir;
    o.base.keep = 0;
    o.base.stop = &stop;
    o.base.run_json = "{}";
    o.base.model_config_json = "{}";
    o.shard_index = SHARD;
    o.shard_count = SHARDS;
    o.join_wait_s = 0;
    o.linger_s = 0;
    dl_opt_config opt = dl_opt_config_sahajbert();
    opt.lr = 0.01;
    opt.warmup_steps = 1;
    opt.total_steps = STEPS;
    dl_trainer_backend be = counter_stream_backend(s, data_resumed);
    return counter_stream_lone_run(run_id, &o, &opt, layout, params, resume, &be);
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    const char *names[] = {"w"};
    size_t numels[] = {N};
    dl_train_layout layout;
    CHECK_OK(dl_train_layout_init(&layout, 1, names, numels, NULL));
    float init[N], whole_params[N], params[N];
    for (int i = 0; i < N; i++) init[i] = 0.1f * (float)i;

    /* Uninterrupted: every micro-batch is stream batch 3 m + 1. */
    counter_stream whole = {0};
    memcpy(whole_params, init, sizeof init);
    CHECK_OK(run_peer(&whole, false, NULL, NULL, &layout, whole_params));
    CHECK(whole.count == 2 * STEPS);
    for (int m = 0; m < whole.count && m < MAX_DRAWN; m++) CHECK(whole.drawn[m] == SHARDS * m + SHARD);

    /* Stopped one micro-batch into step 4. */
    char dir[] = "/tmp/dedloc-test-collab-resume.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    counter_stream first = {.stop_after = 7};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&first, false, NULL, dir, &layout, params));
    counter_stream_check_fed(&first, &whole, 0, 7, "before the stop");
    dl_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    CHECK(dl_checkpoint_load_latest(dir, &ck, NULL, 0) == 0);
    CHECK(ck.step == 3);
    CHECK_MSG(ck.progress.micro_batches == 6, "the checkpoint counts %lld micro-batches, want the 6 applied",
              (long long)ck.progress.micro_batches);
    int64_t at = -1;
    CHECK(ck.data_state && ck.data_state_size == sizeof at);
    if (ck.data_state && ck.data_state_size == sizeof at) memcpy(&at, ck.data_state, sizeof at);
    CHECK_MSG(at == 6 * SHARDS + SHARD, "the checkpoint records stream batch %lld, want %d", (long long)at,
              6 * SHARDS + SHARD);

    /* Resumed by seeking: nothing skipped, the same micro-batches and weights. */
    counter_stream seek = {.pos = at};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&seek, true, &ck, NULL, &layout, params));
    CHECK_MSG(seek.skipped == 0, "seeking re-read %lld batches", (long long)seek.skipped);
    counter_stream_check_fed(&seek, &whole, 6, 2 * STEPS - 6, "resumed by seeking");
    CHECK(memcmp(params, whole_params, sizeof params) == 0);

    /* Resumed by re-reading: 6 x 3 + 1 batches skipped, the same again. */
    counter_stream replay = {0};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&replay, false, &ck, NULL, &layout, params));
    CHECK_MSG(replay.skipped == 6 * SHARDS + SHARD, "re-read %lld batches, want %d", (long long)replay.skipped,
              6 * SHARDS + SHARD);
    counter_stream_check_fed(&replay, &whole, 6, 2 * STEPS - 6, "resumed by re-reading");
    CHECK(memcmp(params, whole_params, sizeof params) == 0);

    dl_checkpoint_free(&ck);
    dl_train_layout_free(&layout);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_collab_resume");
}
