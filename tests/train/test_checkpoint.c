/* Checkpoints: a round trip restores every bit; keep-last-N prunes; a
 * truncated file, a flipped byte (in a tensor or in the metadata) and a file
 * that is not a checkpoint are refused with a clear error, and the folder
 * loader falls back to the previous checkpoint and removes temporary files
 * left by a killed writer. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/safetensors.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

static char dir[256];

static void make_state(dl_optimizer *opt, float **params, uint64_t seed) {
    const char *names[3] = {"albert.embeddings.word_embeddings.weight", "albert.embeddings.LayerNorm.bias",
                            "predictions.dense.weight"};
    size_t numels[3] = {40, 8, 24};
    dl_train_layout l;
    CHECK_OK(dl_train_layout_init(&l, 3, names, numels, NULL));
    l.tensors[0].ndim = 2, l.tensors[0].shape[0] = 10, l.tensors[0].shape[1] = 4;
    l.tensors[2].ndim = 2, l.tensors[2].shape[0] = 6, l.tensors[2].shape[1] = 4;
    dl_opt_config cfg = dl_opt_config_sahajbert();
    CHECK_OK(dl_optimizer_init(opt, &cfg, &l));
    dl_train_layout_free(&l);
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    *params = malloc(opt->layout.total * sizeof(float));
    float *grad = malloc(72 * sizeof(float));
    for (int i = 0; i < 72; i++) (*params)[i] = dl_rng_normal(&rng);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 72; i++) grad[i] = dl_rng_normal(&rng);
        CHECK_OK(dl_optimizer_step(opt, *params, grad, NULL));
    }
    free(grad);
}

static void fill_extra(dl_checkpoint *ck) {
    ck->model_config_json = "{\"model_type\": \"albert\", \"vocab_size\": 10}";
    ck->run_json = "{\"batch\": 4}";
    dl_loss_scale_init(&ck->loss_scale, true);
    ck->loss_scale.scale = 8192.0f;
    ck->loss_scale.clean_steps = 17;
    ck->loss_scale.overflows = 3;
    ck->progress.samples = 12345;
    ck->progress.micro_batches = 678;
    ck->progress.data_seed = 0xfedcba9876543210ull;
    ck->progress.peer_seed = 42;
    ck->progress.elapsed_s = 1.25;
}

static void test_round_trip(void) {
    dl_optimizer opt;
    float *params;
    make_state(&opt, &params, 1);
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &opt, params);
    fill_extra(&ck);
    char path[512];
    snprintf(path, sizeof path, "%s/one.safetensors", dir);
    CHECK_OK(dl_checkpoint_save(path, &ck));

    dl_checkpoint back;
    CHECK_OK(dl_checkpoint_load(path, 0, &back));
    size_t n = opt.layout.total;
    CHECK(back.layout.total == n && back.layout.count == 3);
    CHECK(memcmp(back.params, params, n * 4) == 0);
    CHECK(memcmp(back.exp_avg, opt.exp_avg, n * 4) == 0);
    CHECK(memcmp(back.exp_avg_sq, opt.exp_avg_sq, n * 4) == 0);
    CHECK(back.step == 3);
    CHECK(back.layout.tensors[0].ndim == 2 && back.layout.tensors[0].shape[0] == 10);
    CHECK(back.layout.tensors[1].no_weight_decay && !back.layout.tensors[2].no_weight_decay);
    CHECK(!strcmp(back.layout.tensors[2].name, "predictions.dense.weight"));
    const dl_opt_config *a = &back.opt_config, *b = &opt.config;
    CHECK(a->kind == b->kind && a->lr == b->lr && a->beta1 == b->beta1 && a->beta2 == b->beta2 &&
          a->eps == b->eps && a->weight_decay == b->weight_decay && a->clamp_value == b->clamp_value &&
          a->debias == b->debias && a->max_grad_norm == b->max_grad_norm &&
          a->warmup_steps == b->warmup_steps && a->total_steps == b->total_steps);
    CHECK(back.loss_scale.enabled && back.loss_scale.scale == 8192.0f && back.loss_scale.clean_steps == 17 &&
          back.loss_scale.overflows == 3 && back.loss_scale.growth_interval == 2000);
    CHECK(back.progress.samples == 12345 && back.progress.micro_batches == 678);
    CHECK(back.progress.data_seed == 0xfedcba9876543210ull && back.progress.peer_seed == 42);
    CHECK(back.progress.elapsed_s == 1.25);
    CHECK(!strcmp(back.model_config_json, ck.model_config_json) && !strcmp(back.run_json, "{\"batch\": 4}"));

    /* Restoring into a fresh optimizer continues the same trajectory. */
    dl_optimizer fresh;
    CHECK_OK(dl_optimizer_init(&fresh, &back.opt_config, &back.layout));
    CHECK_OK(dl_checkpoint_restore_optimizer(&back, &fresh));
    float grad_a[72], grad_b[72];
    for (int i = 0; i < 72; i++) grad_a[i] = grad_b[i] = (float)(i % 7) - 3.0f;
    CHECK_OK(dl_optimizer_step(&opt, params, grad_a, NULL));
    CHECK_OK(dl_optimizer_step(&fresh, back.params, grad_b, NULL));
    CHECK(memcmp(back.params, params, n * 4) == 0 && memcmp(fresh.exp_avg_sq, opt.exp_avg_sq, n * 4) == 0);

    /* The file is ordinary safetensors: tensors under their names, F32. */
    dl_safetensors *st;
    CHECK_OK(dl_st_read(path, 0, &st));
    const dl_st_tensor *t = dl_st_find(st, "params.predictions.dense.weight");
    CHECK(t && t->dtype == DL_ST_F32 && t->ndim == 2 && t->shape[0] == 6 && t->shape[1] == 4);
    CHECK(dl_st_find(st, "exp_avg_sq.albert.embeddings.LayerNorm.bias") != NULL);
    dl_st_free(st);

    dl_checkpoint_free(&back);
    dl_optimizer_free(&fresh);
    dl_optimizer_free(&opt);
    free(params);
}

static void write_bytes(const char *path, const char *data, size_t size) {
    CHECK_OK(dl_write_file_atomic(path, data, size));
}

static void test_corruption(void) {
    dl_optimizer opt;
    float *params;
    make_state(&opt, &params, 2);
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &opt, params);
    fill_extra(&ck);
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    CHECK_OK(dl_checkpoint_save(good, &ck));
    char *img;
    size_t size;
    CHECK_OK(dl_read_file(good, 1 << 24, &img, &size));
    dl_checkpoint back;

    /* Truncated: the last tensor's bytes are missing. */
    write_bytes(bad, img, size - 10);
    CHECK(dl_checkpoint_load(bad, 0, &back) == -1);
    CHECK_MSG(strstr(dl_error(), "bad.safetensors") != NULL, "error names the file: %s", dl_error());
    printf("truncated:     %s\n", dl_error());

    /* One bit flipped in the last tensor's data. */
    img[size - 5] ^= 0x10;
    write_bytes(bad, img, size);
    CHECK(dl_checkpoint_load(bad, 0, &back) == -1);
    CHECK_MSG(strstr(dl_error(), "checksum") != NULL, "%s", dl_error());
    printf("flipped data:  %s\n", dl_error());
    img[size - 5] ^= 0x10;

    /* A digit of the metadata changed (the header still parses). */
    uint64_t hlen;
    memcpy(&hlen, img, 8);
    char *hdr = img + 8;
    char *lr = memmem(hdr, (size_t)hlen, "\\\"lr\\\":0.00176", 14);
    CHECK(lr != NULL);
    if (lr) {
        lr[13] = '7';
        write_bytes(bad, img, size);
        CHECK(dl_checkpoint_load(bad, 0, &back) == -1);
        CHECK_MSG(strstr(dl_error(), "metadata is corrupted") != NULL, "%s", dl_error());
        printf("edited header: %s\n", dl_error());
        lr[13] = '6';
    }

    /* Wrong magic: a valid safetensors file that is not a checkpoint. */
    dl_st_writer *w = dl_st_writer_new();
    int64_t shape[1] = {2};
    float two[2] = {1, 2};
    CHECK_OK(dl_st_writer_add(w, "x", DL_ST_F32, 1, shape, two));
    CHECK_OK(dl_st_writer_metadata(w, "format", "pt"));
    CHECK_OK(dl_st_writer_write(w, bad));
    dl_st_writer_free(w);
    CHECK(dl_checkpoint_load(bad, 0, &back) == -1);
    CHECK_MSG(strstr(dl_error(), "not a dedloc checkpoint") != NULL, "%s", dl_error());
    printf("not ours:      %s\n", dl_error());

    /* Not safetensors at all. */
    write_bytes(bad, "DEDLOC?!garbage garbage garbage", 31);
    CHECK(dl_checkpoint_load(bad, 0, &back) == -1);
    printf("garbage:       %s\n", dl_error());

    /* The untouched image still loads. */
    write_bytes(bad, img, size);
    CHECK_OK(dl_checkpoint_load(bad, 0, &back));
    dl_checkpoint_free(&back);
    free(img);
    dl_optimizer_free(&opt);
    free(params);
}

/* The in-memory form (state transfer to a joining peer) is the file image. */
static void test_memory(void) {
    dl_optimizer opt;
    float *params;
    make_state(&opt, &params, 4);
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &opt, params);
    fill_extra(&ck);
    char *img = NULL;
    size_t size = 0;
    CHECK_OK(dl_checkpoint_serialize(&ck, &img, &size));
    char path[512], *file = NULL;
    size_t file_size = 0;
    snprintf(path, sizeof path, "%s/mem.safetensors", dir);
    CHECK_OK(dl_checkpoint_save(path, &ck));
    CHECK_OK(dl_read_file(path, 1 << 24, &file, &file_size));
    CHECK(file_size == size && img && file && memcmp(img, file, size) == 0);
    char *copy = malloc(size);
    memcpy(copy, img, size);
    dl_checkpoint back;
    CHECK_OK(dl_checkpoint_parse(img, size, &back)); /* takes img */
    CHECK(back.step == opt.step && memcmp(back.params, params, opt.layout.total * 4) == 0);
    dl_checkpoint_free(&back);
    copy[size - 1] ^= 1;
    CHECK(dl_checkpoint_parse(copy, size, &back) == -1); /* takes copy */
    CHECK(strstr(dl_error(), "checksum") != NULL);
    free(file);
    dl_optimizer_free(&opt);
    free(params);
}

static void test_folder(void) {
    char sub[512], path[600];
    snprintf(sub, sizeof sub, "%s/run", dir);
    dl_checkpoint back;
    CHECK(dl_checkpoint_load_latest(sub, &back, NULL, 0) == 1); /* no folder yet */
    dl_optimizer opt;
    float *params;
    make_state(&opt, &params, 3);
    float grad[72];
    for (int i = 0; i < 72; i++) grad[i] = 0.01f * (float)i;
    for (int s = 0; s < 5; s++) {
        dl_checkpoint ck;
        dl_checkpoint_view(&ck, &opt, params);
        fill_extra(&ck);
        CHECK_OK(dl_checkpoint_save_in_dir(sub, &ck, 3, path, sizeof path));
        CHECK_OK(dl_optimizer_step(&opt, params, grad, NULL));
    }
    /* steps 3..7 saved, the newest three kept */
    for (int step = 3; step <= 7; step++) {
        snprintf(path, sizeof path, "%s/checkpoint-%010d.safetensors", sub, step);
        CHECK_MSG(dl_file_exists(path) == (step >= 5), "step %d kept? %d", step, dl_file_exists(path));
    }
    /* Temporary files of a killed writer are removed by the scan; a running
     * writer's (this process) and a look-alike name are left alone. */
    pid_t child = fork();
    if (child == 0) _exit(0);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child);
    char stale[700], live[700], other[700];
    snprintf(stale, sizeof stale, "%s/checkpoint-%010d.safetensors.tmp.%ld", sub, 8, (long)child);
    snprintf(live, sizeof live, "%s/checkpoint-%010d.safetensors.tmp.%ld", sub, 8, (long)getpid());
    snprintf(other, sizeof other, "%s/checkpoint-%010d.safetensors.tmp.%ldx", sub, 8, (long)child);
    write_bytes(stale, "x", 1);
    write_bytes(live, "x", 1);
    write_bytes(other, "x", 1);
    char used[600];
    CHECK_OK(dl_checkpoint_load_latest(sub, &back, used, sizeof used));
    CHECK(back.step == 7 && strstr(used, "0000000007"));
    CHECK(!dl_file_exists(stale));
    CHECK(dl_file_exists(live) && dl_file_exists(other));
    unlink(live);
    unlink(other);
    dl_checkpoint_free(&back);

    /* Corrupt the newest: the previous one is used. */
    snprintf(path, sizeof path, "%s/checkpoint-%010d.safetensors", sub, 7);
    CHECK(truncate(path, 100) == 0);
    CHECK_OK(dl_checkpoint_load_latest(sub, &back, used, sizeof used));
    CHECK(back.step == 6 && strstr(used, "0000000006"));
    dl_checkpoint_free(&back);
    /* All corrupt: a clear failure. */
    for (int step = 5; step <= 6; step++) {
        snprintf(path, sizeof path, "%s/checkpoint-%010d.safetensors", sub, step);
        CHECK(truncate(path, 9) == 0);
    }
    CHECK(dl_checkpoint_load_latest(sub, &back, NULL, 0) == -1);
    printf("all corrupt:   %s\n", dl_error());
    dl_optimizer_free(&opt);
    free(params);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dedloc_ckpt_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    dl_log_set_level(DL_LOG_ERROR);
    test_round_trip();
    test_corruption();
    test_memory();
    test_folder();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return dl_test_finish("test_checkpoint");
}
