/* Resuming without replay, end to end: a run trains N steps, is stopped one
 * micro-batch into step N+1 (the partial accumulation is dropped), saves;
 * a second run opens the data stream at the checkpoint's recorded position
 * (no fast-forward: it draws only its own micro-batches) and trains to N+M.
 * Every micro-batch (token ids, types, attention, labels, sentence order)
 * and the final weights must be the bits of one uninterrupted N+M run. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { N = 3, M = 3, MICRO_PER_STEP = 2, BATCH = 2, SEQ = 32, MAX_MICRO = 64 };

/* Wraps the device backend's callbacks to fingerprint each micro-batch. */
typedef struct {
    dl_device_backend *be;
    dl_trainer_backend inner;
    uint64_t hashes[MAX_MICRO];
    int count;
    int stop_after;               /* > 0: raise *stop after this many micro-batches */
    volatile sig_atomic_t *stop;
} recorder;


static void record(recorder *r) {
    if (r->count < MAX_MICRO) r->hashes[r->count] = dl_batch_fingerprint(&r->be->batch);
    r->count++;
    if (r->stop_after > 0 && r->count == r->stop_after) *r->stop = 1;
}

static int rec_set_params(void *ctx, const float *p) {
    recorder *r = ctx;
    return r->inner.set_params(r->inner.ctx, p);
}
static int rec_micro(void *ctx, float scale, float *grad, int *samples, dl_losses *losses) {
    recorder *r = ctx;
    int rc = r->inner.micro_batch(r->inner.ctx, scale, grad, samples, losses);
    if (!rc) record(r);
    return rc;
}
static int rec_skip(void *ctx, int64_t n) {
    recorder *r = ctx;
    return r->inner.skip(r->inner.ctx, n);
}
static int rec_accumulate(void *ctx, bool first, float scale, int *samples, dl_losses *losses) {
    recorder *r = ctx;
    int rc = r->inner.accumulate(r->inner.ctx, first, scale, samples, losses);
    if (!rc) record(r);
    return rc;
}
static int rec_collect(void *ctx, float scale, int64_t total, float *grad) {
    recorder *r = ctx;
    return r->inner.collect(r->inner.ctx, scale, total, grad);
}
static int rec_mark(void *ctx) {
    recorder *r = ctx;
    return r->inner.mark_data(r->inner.ctx);
}
static int rec_save(void *ctx, uint8_t **state, size_t *size) {
    recorder *r = ctx;
    return r->inner.save_data(r->inner.ctx, state, size);
}

static dl_trainer_backend wrap(recorder *r, dl_device_backend *be) {
    r->be = be;
    r->inner = dl_device_backend_callbacks(be);
    return (dl_trainer_backend){r, rec_set_params, rec_micro, rec_skip, rec_accumulate, rec_collect,
                                rec_mark, rec_save, false, NULL};
}

typedef struct {
    const dl_tokenizer *tok;
    dl_albert_config cfg;
    dl_train_layout layout;
    dl_opt_config opt;
    char corpus[600];
} setup;

/* One run: to max_steps, from `resume` if given (its data state opens the
 * stream), checkpoints in dir if given, stopped after stop_after micro-batches
 * if > 0. Returns the final weights (malloc'd). */
static float *run(setup *su, int64_t max_steps, const char *dir, dl_checkpoint *resume, int stop_after,
                  recorder *rec, dl_trainer_result *res) {
    dl_data_config dc;
    dl_data_config_default(&dc);
    dc.source = su->corpus;
    dc.batch_size = BATCH;
    dc.max_seq_len = SEQ;
    dc.shuffle_buffer = 40;
    dc.seed = 11;
    dc.loop = true;
    if (resume) {
        dc.resume_state = resume->data_state;
        dc.resume_state_size = resume->data_state_size;
    }
    dl_device_backend be;
    float *params = malloc(su->layout.total * sizeof *params);
    if (!params || dl_device_backend_open(&be, &dc, su->tok, "0", &su->cfg, DL_PRECISION_FP32)) {
        CHECK_MSG(0, "open: %s", dl_error());
        free(params);
        return NULL;
    }
    CHECK_OK(dl_albert_init_params(&su->cfg, 3, params));
    static volatile sig_atomic_t stop;
    stop = 0;
    memset(rec, 0, sizeof *rec);
    rec->stop = &stop;
    rec->stop_after = stop_after;
    dl_trainer_backend cb = wrap(rec, &be);
    cb.data_resumed = resume != NULL;
    dl_trainer_options o = {.target_batch = MICRO_PER_STEP * BATCH, .max_steps = max_steps,
                            .checkpoint_dir = dir, .keep = 0, .stop = &stop, .data_seed = 11};
    int rc = dl_trainer_run(&o, &su->opt, &su->layout, params, resume, &cb, res);
    CHECK_MSG(rc == 0, "trainer: %s", dl_error());
    dl_device_backend_close(&be);
    return params;
}

int main(void) {
    setup su;
    memset(&su, 0, sizeof su);
    snprintf(su.corpus, sizeof su.corpus, "%s/tests/fixtures/text/corpus_bn_sample.txt", DEDLOC_SOURCE_DIR);
    dl_tokenizer *tok = NULL;
    CHECK_OK(dl_tokenizer_load_demo(&tok));
    su.tok = tok;
    CHECK_OK(dl_albert_config_preset("tiny", &su.cfg));
    su.cfg.num_hidden_layers = 2;
    su.cfg.max_position_embeddings = SEQ;
    dl_param_layout pl;
    CHECK_OK(dl_param_layout_build(&su.cfg, &pl));
    CHECK_OK(dl_train_layout_from_model(&pl, &su.layout));
    dl_param_layout_free(&pl);
    su.opt = dl_opt_config_sahajbert();
    su.opt.lr = 0.01;
    su.opt.warmup_steps = 2;
    su.opt.total_steps = 20;
    dl_device *probe = NULL;
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &probe));
    if (!probe) return dl_test_finish("test_resume_exact");
    dl_device_close(probe);

    char dir[] = "/tmp/dedloc-resume-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    recorder whole, first, second;
    dl_trainer_result r0, r1, r2;
    float *p0 = run(&su, N + M, NULL, NULL, 0, &whole, &r0);
    /* Stopped one micro-batch into step N + 1: saved at step N. */
    float *p1 = run(&su, N + M, dir, NULL, N * MICRO_PER_STEP + 1, &first, &r1);
    CHECK(r1.interrupted && r1.steps == N && r1.checkpoint_step == N);
    dl_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    CHECK(dl_checkpoint_load_latest(dir, &ck, NULL, 0) == 0);
    CHECK(ck.step == N && ck.data_state != NULL && ck.data_state_size > 0);
    CHECK(ck.progress.micro_batches == N * MICRO_PER_STEP);
    float *p2 = ck.data_state ? run(&su, N + M, dir, &ck, 0, &second, &r2) : NULL;
    if (p0 && p1 && p2) {
        CHECK(whole.count == (N + M) * MICRO_PER_STEP);
        CHECK(first.count == N * MICRO_PER_STEP + 1);
        /* No fast-forward: the resumed run draws only its own micro-batches. */
        CHECK_MSG(second.count == M * MICRO_PER_STEP, "the resumed run drew %d micro-batches", second.count);
        for (int i = 0; i < first.count; i++)
            CHECK_MSG(first.hashes[i] == whole.hashes[i], "micro-batch %d of the first run differs", i);
        for (int i = 0; i < second.count && i < MAX_MICRO; i++)
            CHECK_MSG(second.hashes[i] == whole.hashes[N * MICRO_PER_STEP + i],
                      "micro-batch %d after resuming differs", N * MICRO_PER_STEP + i);
        CHECK(r2.steps == N + M);
        CHECK_MSG(!memcmp(p0, p2, su.layout.total * sizeof *p0), "final weights differ: %s vs %s",
                  r0.param_hash, r2.param_hash);
        CHECK(!strcmp(r0.param_hash, r2.param_hash));
        printf("resumed at step %d from a %zu-byte stream state: %d micro-batches and weights %s "
               "identical to the uninterrupted run\n", N, ck.data_state_size, second.count, r2.param_hash);
    }
    dl_checkpoint_free(&ck);
    free(p0);
    free(p1);
    free(p2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    dl_train_layout_free(&su.layout);
    dl_tokenizer_free(tok);
    return dl_test_finish("test_resume_exact");
}
