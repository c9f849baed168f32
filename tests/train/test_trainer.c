/* The training loop with a synthetic backend (a quadratic on the host):
 * accumulation to the target batch, dropped overflowing micro-batches, the
 * JSON-lines log, checkpoints, and the resume guarantee: a run interrupted
 * mid-accumulation and resumed from its checkpoint ends bit-identical to an
 * uninterrupted run. A checkpoint folder that breaks mid-run (a full disk)
 * costs saves, never the run: training goes on, the last good checkpoint
 * stays, the next save point retries. The summary's losses are means over
 * the run's first and last steps, as the log records them. The real model
 * and data plug into the same loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { N = 23 };

typedef struct {
    float params[N];         /* what the "device" holds */
    int64_t index;           /* next micro-batch of the stream */
    int64_t stop_at;         /* raise *stop when this micro-batch is drawn (-1: never) */
    volatile sig_atomic_t *stop;
    int set_params_calls;
} synth;

/* Micro-batch k: a target t_k and a sample count, both from k alone, like a
 * deterministic data stream. loss = 0.5 |p - t_k|^2 / N, grad = (p - t_k) / N,
 * computed at the loss scale and divided again (overflows every 5th). */
static void draw(int64_t k, float *target, int *samples) {
    dl_rng rng;
    dl_rng_seed(&rng, 1000 + (uint64_t)k);
    for (int i = 0; i < N; i++) target[i] = 0.5f + 0.1f * dl_rng_normal(&rng);
    *samples = 2 + (int)(k % 3);
}

/* The checkpoint folder breaks (a file takes its place) when the weights are
 * uploaded for the sabotage_call-th time (1: the start; k + 1: after step k)
 * and is mended at the restore_call-th upload; -1: never. */
static const char *sabotage_dir;
static int sabotage_call = -1, restore_call = -1;

static void break_folder(bool broken) {
    char away[400];
    snprintf(away, sizeof away, "%s.away", sabotage_dir);
    if (broken) {
        FILE *f = NULL;
        if (rename(sabotage_dir, away) != 0 || !(f = fopen(sabotage_dir, "w")))
            fprintf(stderr, "cannot break %s\n", sabotage_dir);
        if (f) fclose(f);
    } else if (unlink(sabotage_dir) != 0 || rename(away, sabotage_dir) != 0) {
        fprintf(stderr, "cannot mend %s\n", sabotage_dir);
    }
}

static int synth_set(void *ctx, const float *params) {
    synth *s = ctx;
    memcpy(s->params, params, sizeof s->params);
    s->set_params_calls++;
    if (sabotage_dir && s->set_params_calls == sabotage_call) break_folder(true);
    if (sabotage_dir && s->set_params_calls == restore_call) break_folder(false);
    return 0;
}

static int synth_micro(void *ctx, float scale, float *grad, int *samples, dl_losses *losses) {
    synth *s = ctx;
    float t[N];
    int64_t k = s->index++;
    if (k == s->stop_at && s->stop) *s->stop = 1;
    draw(k, t, samples);
    double loss = 0;
    for (int i = 0; i < N; i++) {
        float d = s->params[i] - t[i];
        loss += 0.5 * (double)d * d / N;
        grad[i] = (d / (float)N * scale) * (1.0f / scale);
    }
    if (k % 5 == 2 && scale > 1000.0f) grad[3] = INFINITY; /* fp16 overflow at a large scale */
    losses->loss = (float)loss;
    losses->mlm_loss = (float)loss;
    losses->sop_loss = 0;
    losses->sequences = *samples;
    return 0;
}

static int synth_skip(void *ctx, int64_t n) {
    ((synth *)ctx)->index += n;
    return 0;
}

static dl_train_layout layout;
static char dir[256];

static int run(const char *ckdir, const char *log, int64_t max_steps, int64_t stop_at, bool resume,
               float *params, dl_trainer_result *res) {
    static volatile sig_atomic_t stop;
    stop = 0;
    synth s = {.stop_at = stop_at, .stop = &stop};
    dl_trainer_backend be = {.ctx = &s, .set_params = synth_set, .micro_batch = synth_micro, .skip = synth_skip};
    dl_trainer_options o = {
        .target_batch = 9, .max_steps = max_steps, .loss_scaling = true, .checkpoint_dir = ckdir,
        .keep = 2, .save_every = 3, .log_path = log, .stop = &stop,
        .model_config_json = "{}", .run_json = "{}", .data_seed = 7, .peer_seed = 0,
    };
    dl_opt_config cfg = dl_opt_config_sahajbert();
    cfg.lr = 0.2;
    cfg.warmup_steps = 2;
    cfg.total_steps = 40;
    for (int i = 0; i < N; i++) params[i] = (float)(i % 5) * 0.3f - 0.2f;
    dl_checkpoint ck, *from = NULL;
    if (resume) {
        if (dl_checkpoint_load_latest(ckdir, &ck, NULL, 0) != 0) return -1;
        from = &ck;
    }
    int rc = dl_trainer_run(&o, &cfg, &layout, params, from, &be, res);
    if (rc) fprintf(stderr, "%s\n", dl_error());
    if (from) dl_checkpoint_free(from);
    return rc;
}

/* The mean of the "loss" fields of log lines [from, to). */
static double log_loss_mean(const char *path, int from, int to) {
    char *text;
    if (dl_read_file(path, 1 << 20, &text, NULL)) return NAN;
    double sum = 0;
    int line = 0;
    for (const char *p = strstr(text, "\"loss\": "); p; p = strstr(p + 1, "\"loss\": "), line++)
        if (line >= from && line < to) sum += strtod(p + 8, NULL);
    free(text);
    return sum / (to - from);
}

/* Saves fail from the upload after step 3 on (steps 6, 9 and the final 10
 * are due); with restore, the folder is back before step 9's save. */
static void failing_saves(void) {
    char ck[300], path[400];
    snprintf(ck, sizeof ck, "%s/broken", dir);
    float w[N];
    dl_trainer_result r;
    sabotage_dir = ck;
    sabotage_call = 5;
    restore_call = -1;
    CHECK_OK(run(ck, NULL, 10, -1, false, w, &r));
    CHECK_MSG(r.steps == 10, "training stopped at step %lld", (long long)r.steps);
    CHECK(r.save_failures == 3 && r.last_save_failed);
    CHECK(r.checkpoint_step == 3 && strstr(r.checkpoint, "checkpoint-0000000003") != NULL);
    snprintf(path, sizeof path, "%s.away/checkpoint-0000000003.safetensors", ck);
    CHECK(dl_file_exists(path)); /* the last good checkpoint is still there */
    break_folder(false);

    snprintf(ck, sizeof ck, "%s/mended", dir);
    sabotage_call = 5;
    restore_call = 8;
    CHECK_OK(run(ck, NULL, 10, -1, false, w, &r));
    CHECK(r.steps == 10 && r.save_failures == 1 && !r.last_save_failed && r.checkpoint_step == 10);
    snprintf(path, sizeof path, "%s/checkpoint-0000000009.safetensors", ck);
    CHECK(dl_file_exists(path));

    /* No save ever succeeds: the result says so (dedloc train exits 1). */
    snprintf(ck, sizeof ck, "%s/never", dir);
    CHECK_OK(dl_mkdirs(ck));
    sabotage_call = 1;
    restore_call = -1;
    CHECK_OK(run(ck, NULL, 4, -1, false, w, &r));
    CHECK(r.steps == 4 && r.last_save_failed && r.checkpoint[0] == 0 && r.save_failures == 2);
    break_folder(false);
    sabotage_dir = NULL;
}

static int count_lines(const char *path) {
    char *text;
    if (dl_read_file(path, 1 << 20, &text, NULL)) return -1;
    int n = 0;
    for (char *p = text; *p; p++) n += *p == '\n';
    free(text);
    return n;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dedloc_trainer_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    dl_log_set_level(DL_LOG_ERROR);
    const char *names[2] = {"dense.weight", "dense.bias"};
    size_t numels[2] = {19, 4};
    CHECK_OK(dl_train_layout_init(&layout, 2, names, numels, NULL));

    char a_dir[300], b_dir[300], a_log[300], b_log[300];
    snprintf(a_dir, sizeof a_dir, "%s/a", dir);
    snprintf(b_dir, sizeof b_dir, "%s/b", dir);
    snprintf(a_log, sizeof a_log, "%s/a.jsonl", dir);
    snprintf(b_log, sizeof b_log, "%s/b.jsonl", dir);

    /* Uninterrupted: 10 steps. */
    float straight[N], resumed[N];
    dl_trainer_result ra, rb1, rb2;
    CHECK_OK(run(a_dir, a_log, 10, -1, false, straight, &ra));
    CHECK(ra.steps == 10 && !ra.interrupted);
    CHECK_MSG(ra.last_loss < 0.75f * ra.first_loss, "loss %g -> %g", ra.first_loss, ra.last_loss);
    CHECK(count_lines(a_log) == 10);
    /* 10 steps: the summary compares the means of the first 5 and the last 5. */
    CHECK(ra.loss_window == 5);
    CHECK_MSG(fabs(ra.first_loss - log_loss_mean(a_log, 0, 5)) < 1e-5 * ra.first_loss &&
                  fabs(ra.last_loss - log_loss_mean(a_log, 5, 10)) < 1e-5 * ra.first_loss,
              "summary %g -> %g, log means %g -> %g", ra.first_loss, ra.last_loss, log_loss_mean(a_log, 0, 5),
              log_loss_mean(a_log, 5, 10));
    CHECK(!ra.last_save_failed && ra.save_failures == 0 && ra.checkpoint_step == 10);
    /* Checkpoints at steps 3, 6, 9 and the end (10); the newest two kept. */
    char p[400];
    snprintf(p, sizeof p, "%s/checkpoint-0000000010.safetensors", a_dir);
    CHECK(dl_file_exists(p));
    snprintf(p, sizeof p, "%s/checkpoint-0000000009.safetensors", a_dir);
    CHECK(dl_file_exists(p));
    snprintf(p, sizeof p, "%s/checkpoint-0000000006.safetensors", a_dir);
    CHECK(!dl_file_exists(p));

    /* Interrupted in the middle of step 5's accumulation (micro-batch 17),
     * then resumed to 10 steps. */
    CHECK_OK(run(b_dir, b_log, 10, 17, false, resumed, &rb1));
    CHECK(rb1.interrupted && rb1.steps >= 3 && rb1.steps < 10);
    printf("interrupted after %lld steps, saved %s\n", (long long)rb1.steps, rb1.checkpoint);
    CHECK_OK(run(b_dir, b_log, 10, -1, true, resumed, &rb2));
    CHECK(rb2.steps == 10 && rb2.steps_this_run == 10 - rb1.steps);
    CHECK_MSG(memcmp(straight, resumed, sizeof straight) == 0, "resumed weights differ: %s vs %s", ra.param_hash,
              rb2.param_hash);
    CHECK(!strcmp(ra.param_hash, rb2.param_hash));
    printf("uninterrupted %s, interrupted+resumed %s\n", ra.param_hash, rb2.param_hash);

    /* The two logs agree line for line on the steps both wrote (the hash and
     * loss fields; samples_per_second differs). */
    char *la, *lb;
    CHECK_OK(dl_read_file(a_log, 1 << 20, &la, NULL));
    CHECK_OK(dl_read_file(b_log, 1 << 20, &lb, NULL));
    CHECK(count_lines(b_log) == 10);
    const char *ha = strstr(la, "\"param_hash\""), *hb = strstr(lb, "\"param_hash\"");
    int same = 0;
    while (ha && hb) {
        same += strncmp(ha, hb, 32) == 0;
        ha = strstr(ha + 1, "\"param_hash\"");
        hb = strstr(hb + 1, "\"param_hash\"");
    }
    CHECK(same == 10);
    CHECK(strstr(la, "\"loss_scale\": 32768") != NULL); /* an overflow halved the scale */
    free(la);
    free(lb);

    /* Resuming a finished run does nothing more and keeps the weights. */
    dl_trainer_result rc3;
    CHECK_OK(run(a_dir, NULL, 10, -1, true, resumed, &rc3));
    CHECK(rc3.steps_this_run == 0 && !memcmp(straight, resumed, sizeof straight));

    /* A checkpoint from another data seed is refused. */
    dl_checkpoint ck;
    CHECK_OK(dl_checkpoint_load_latest(a_dir, &ck, NULL, 0));
    ck.progress.data_seed = 8;
    synth s = {.stop_at = -1};
    dl_trainer_backend be = {.ctx = &s, .set_params = synth_set, .micro_batch = synth_micro, .skip = synth_skip};
    dl_trainer_options o = {.target_batch = 9, .max_steps = 12, .data_seed = 7};
    dl_opt_config cfg = dl_opt_config_sahajbert();
    float w[N];
    CHECK(dl_trainer_run(&o, &cfg, &layout, w, &ck, &be, &rc3) == -1);
    CHECK(strstr(dl_error(), "seed") != NULL);
    dl_checkpoint_free(&ck);

    failing_saves();

    dl_train_layout_free(&layout);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return dl_test_finish("test_trainer");
}
