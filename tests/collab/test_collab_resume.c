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
#include "dl_test.h"

enum { N = 19, SAMPLES = 3, STEPS = 5, MAX_DRAWN = 64, SHARD = 1, SHARDS = 3 };

typedef struct {
    float params[N];
    int64_t pos;                 /* the next batch of the stream */
    int64_t mark;                /* the stream at the last mark (-1: none) */
    int64_t skipped;             /* batches thrown away before the first micro-batch (the
                                  * others' shares after each are not counted) */
    int64_t drawn[MAX_DRAWN];    /* the stream batches fed as micro-batches */
    int count;
    int stop_after;              /* > 0: raise *stop once this many micro-batches were fed */
    volatile sig_atomic_t *stop;
} counter_stream;

static int cs_set_params(void *ctx, const float *p) {
    memcpy(((counter_stream *)ctx)->params, p, sizeof(float) * N);
    return 0;
}

static int cs_micro_batch(void *ctx, float scale, float *grad, int *samples, dl_losses *losses) {
    counter_stream *s = ctx;
    int64_t k = s->pos++;
    if (s->count < MAX_DRAWN) s->drawn[s->count] = k;
    s->count++;
    if (s->stop_after > 0 && s->count == s->stop_after) *s->stop = 1;
    dl_rng rng;
    dl_rng_seed(&rng, 500 + (uint64_t)k);
    double loss = 0;
    for (int i = 0; i < N; i++) {
        float d = s->params[i] - (0.5f + 0.1f * dl_rng_normal(&rng));
        loss += 0.5 * (double)d * d / N;
        grad[i] = d / (float)N * scale / scale;
    }
    *samples = SAMPLES;
    *losses = (dl_losses){.loss = (float)loss, .mlm_loss = (float)loss, .sop_loss = 0};
    return 0;
}

static int cs_skip(void *ctx, int64_t n) {
    counter_stream *s = ctx;
    s->pos += n;
    if (s->count == 0) s->skipped += n;
    return 0;
}

static int cs_mark(void *ctx) {
    counter_stream *s = ctx;
    s->mark = s->pos;
    return 0;
}

static int cs_save(void *ctx, uint8_t **state, size_t *size) {
    counter_stream *s = ctx;
    if (s->mark < 0) return dl_fail("no mark");
    *state = malloc(sizeof s->mark);
    if (!*state) return -1;
    memcpy(*state, &s->mark, sizeof s->mark);
    *size = sizeof s->mark;
    return 0;
}

static dl_trainer_backend callbacks(counter_stream *s) {
    return (dl_trainer_backend){.ctx = s, .set_params = cs_set_params, .micro_batch = cs_micro_batch,
                                .skip = cs_skip, .mark_data = cs_mark, .save_data = cs_save};
}

/* One lone peer's run to STEPS from resume (NULL: fresh weights); params in/out. */
static int run_peer(counter_stream *s, bool data_resumed, const dl_checkpoint *resume, const char *ckdir,
                    const dl_train_layout *layout, float *params) {
    static volatile sig_atomic_t stop;
    stop = 0;
    s->stop = &stop;
    s->mark = -1;
    char run_id[64];
    snprintf(run_id, sizeof run_id, "test-collab-resume-%d", (int)getpid());
    struct dl_net_config nc;
    dl_net_config_default(&nc);
    nc.run_id = run_id;
    nc.listen = "127.0.0.1:0";
    nc.use_dht = false;
    struct dl_collab_config cc;
    dl_collab_config_default(&cc);
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
    dl_trainer_backend be = callbacks(s);
    be.data_resumed = data_resumed;
    dl_net *net = NULL;
    dl_collab *collab = NULL;
    dl_state_donor *donor = NULL;
    struct dl_collab_train_result res;
    int rc = -1;
    if (!dl_net_start(&nc, &net) && !dl_collab_start(net, &cc, &collab) && !dl_state_donor_start(net, NULL, &donor))
        rc = dl_collab_train_run(net, collab, donor, &o, &opt, layout, params, resume, &be, &res);
    dl_state_donor_stop(donor);
    if (collab) dl_collab_stop(collab);
    dl_net_stop(net);
    return rc;
}

/* s fed micro-batches from..from + want - 1 of the uninterrupted run. */
static void check_fed(const counter_stream *s, const counter_stream *whole, int from, int want, const char *what) {
    CHECK_MSG(s->count == want, "%s: fed %d micro-batches, want %d", what, s->count, want);
    for (int i = 0; i < s->count && i < MAX_DRAWN && from + i < MAX_DRAWN; i++)
        CHECK_MSG(s->drawn[i] == whole->drawn[from + i], "%s: micro-batch %d is stream batch %lld, want %lld", what,
                  from + i, (long long)s->drawn[i], (long long)whole->drawn[from + i]);
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
    check_fed(&first, &whole, 0, 7, "before the stop");
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
    check_fed(&seek, &whole, 6, 2 * STEPS - 6, "resumed by seeking");
    CHECK(memcmp(params, whole_params, sizeof params) == 0);

    /* Resumed by re-reading: 6 x 3 + 1 batches skipped, the same again. */
    counter_stream replay = {0};
    memcpy(params, init, sizeof init);
    CHECK_OK(run_peer(&replay, false, &ck, NULL, &layout, params));
    CHECK_MSG(replay.skipped == 6 * SHARDS + SHARD, "re-read %lld batches, want %d", (long long)replay.skipped,
              6 * SHARDS + SHARD);
    check_fed(&replay, &whole, 6, 2 * STEPS - 6, "resumed by re-reading");
    CHECK(memcmp(params, whole_params, sizeof params) == 0);

    dl_checkpoint_free(&ck);
    dl_train_layout_free(&layout);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_collab_resume");
}
