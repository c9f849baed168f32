/* `dedloc grad` through the binary: agrees with the transformers fixture,
 * rejects bad batch files with exit 1 and a message naming the problem, and
 * usage errors with exit 2. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"
#include "dl_test.h"

static char tmpdir[] = "/tmp/dedloc_grad_XXXXXX";

/* Runs the binary with args, stderr into tmpdir/stderr; returns the exit code. */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s/stdout 2>%s/stderr", DEDLOC_BINARY, args, tmpdir, tmpdir);
    int status = system(cmd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static bool stderr_contains(const char *needle) {
    char path[512], *text;
    size_t size;
    snprintf(path, sizeof path, "%s/stderr", tmpdir);
    if (dl_read_file(path, 1 << 20, &text, &size)) return false;
    bool found = strstr(text, needle) != NULL;
    if (!found) fprintf(stderr, "stderr was: %s\n", text);
    free(text);
    return found;
}

static void write_batch(const char *path, int B, int T, int64_t bad_id, bool drop_labels,
                        int label_cols) {
    dl_st_writer *w = dl_st_writer_new();
    int64_t *ids = calloc((size_t)B * T, sizeof *ids), *ones = calloc((size_t)B * T, sizeof *ones),
            *labels = calloc((size_t)B * T, sizeof *labels), *sop = calloc((size_t)B, sizeof *sop),
            *types = calloc((size_t)B * T, sizeof *types);
    for (int i = 0; i < B * T; i++) {
        ids[i] = 5 + i % 7;
        ones[i] = 1;
        labels[i] = i % 5 ? -100 : 9;
    }
    ids[3] = bad_id;
    int64_t shape[2] = {B, T}, label_shape[2] = {B, label_cols}, sop_shape[1] = {B};
    CHECK_OK(dl_st_writer_add(w, "input_ids", DL_ST_I64, 2, shape, ids));
    CHECK_OK(dl_st_writer_add(w, "token_type_ids", DL_ST_I64, 2, shape, types));
    CHECK_OK(dl_st_writer_add(w, "attention_mask", DL_ST_I64, 2, shape, ones));
    if (!drop_labels) CHECK_OK(dl_st_writer_add(w, "labels", DL_ST_I64, 2, label_shape, labels));
    CHECK_OK(dl_st_writer_add(w, "sentence_order_label", DL_ST_I64, 1, sop_shape, sop));
    CHECK_OK(dl_st_writer_write(w, path));
    dl_st_writer_free(w);
    free(ids);
    free(ones);
    free(labels);
    free(sop);
    free(types);
}

int main(void) {
    CHECK(mkdtemp(tmpdir) != NULL);
    char fixture[1024], args[4096], out[600], batch[600], path[1200];
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/albert_odd", DEDLOC_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/grads.safetensors", tmpdir);
    const char *dev = getenv("DEDLOC_TEST_DEVICE");
    char dev_arg[300] = "";
    if (dev) snprintf(dev_arg, sizeof dev_arg, "--device '%s'", dev);

    snprintf(args, sizeof args,
             "grad --model %s --batch %s/batch.safetensors --out %s --logits %s/logits %s",
             fixture, fixture, out, tmpdir, dev_arg);
    CHECK(run(args) == 0);
    dl_safetensors *logits = NULL;
    snprintf(path, sizeof path, "%s/logits", tmpdir);
    CHECK_OK(dl_st_read(path, 0, &logits));
    if (logits) {
        const dl_st_tensor *sop = dl_st_find(logits, "sop_logits"),
                           *mlm = dl_st_find(logits, "prediction_logits");
        CHECK(sop && sop->ndim == 2 && sop->shape[0] == 3 && sop->shape[1] == 2);
        CHECK(mlm && mlm->ndim == 2 && mlm->shape[1] == 131);
        CHECK(dl_st_find(logits, "loss") != NULL);
        dl_st_free(logits);
    }
    dl_safetensors *got = NULL, *want = NULL;
    snprintf(path, sizeof path, "%s/expected.safetensors", fixture);
    CHECK_OK(dl_st_read(out, 0, &got));
    CHECK_OK(dl_st_read(path, 0, &want));
    if (got && want) {
        dl_albert_config cfg;
        snprintf(path, sizeof path, "%s/config.json", fixture);
        CHECK_OK(dl_albert_config_load(path, &cfg));
        dl_param_layout layout;
        CHECK_OK(dl_param_layout_build(&cfg, &layout));
        CHECK(got->count == layout.count + 3);
        float a, b;
        CHECK_OK(dl_st_get_f32(got, "loss", &a, 1));
        CHECK_OK(dl_st_get_f32(want, "loss", &b, 1));
        CHECK(dl_test_diff(a, b) <= 1e-5 * fabs(b));
        float *ga = malloc(layout.total * sizeof *ga), *gb = malloc(layout.total * sizeof *gb);
        for (int i = 0; i < layout.count; i++) {
            const dl_param_entry *e = &layout.entries[i];
            const dl_st_tensor *t = dl_st_find(got, e->name);
            CHECK_MSG(t && t->ndim == e->ndim && t->shape[0] == e->shape[0], "%s", e->name);
            CHECK_OK(dl_st_get_f32(got, e->name, ga, e->numel));
            CHECK_OK(dl_st_get_f32(want, e->name, gb, e->numel));
            double err = dl_test_rel_l2_floor(ga, gb, e->numel, 1e-6);
            CHECK_MSG(err < 1e-4, "%s rel L2 %g", e->name, err);
        }
        free(ga);
        free(gb);
        dl_param_layout_free(&layout);
    }
    dl_st_free(got);
    dl_st_free(want);

    /* a token id outside the vocabulary of 131 */
    snprintf(batch, sizeof batch, "%s/bad_id.safetensors", tmpdir);
    write_batch(batch, 2, 9, 131, false, 9);
    snprintf(args, sizeof args, "grad --model %s --batch %s --out %s/x %s", fixture, batch, tmpdir,
             dev_arg);
    CHECK(run(args) == 1);
    CHECK(stderr_contains("input_ids[0][3] = 131"));
    /* a missing tensor */
    snprintf(batch, sizeof batch, "%s/no_labels.safetensors", tmpdir);
    write_batch(batch, 2, 9, 6, true, 9);
    snprintf(args, sizeof args, "grad --model %s --batch %s --out %s/x %s", fixture, batch, tmpdir,
             dev_arg);
    CHECK(run(args) == 1);
    CHECK(stderr_contains("labels is missing"));
    /* labels of another shape than input_ids */
    snprintf(batch, sizeof batch, "%s/bad_shape.safetensors", tmpdir);
    write_batch(batch, 2, 9, 6, false, 8);
    snprintf(args, sizeof args, "grad --model %s --batch %s --out %s/x %s", fixture, batch, tmpdir,
             dev_arg);
    CHECK(run(args) == 1);
    CHECK(stderr_contains("labels"));
    /* a sequence longer than max_position_embeddings (48) */
    snprintf(batch, sizeof batch, "%s/too_long.safetensors", tmpdir);
    write_batch(batch, 1, 49, 6, false, 49);
    snprintf(args, sizeof args, "grad --model %s --batch %s --out %s/x %s", fixture, batch, tmpdir,
             dev_arg);
    CHECK(run(args) == 1);
    CHECK(stderr_contains("max_position_embeddings"));
    /* a model folder without weights */
    snprintf(args, sizeof args, "grad --model %s --batch %s --out %s/x", tmpdir, batch, tmpdir);
    CHECK(run(args) == 1);

    CHECK(run("grad") == 2);
    CHECK(run("grad --model x --batch y") == 2);
    CHECK(run("grad --bogus") == 2);
    CHECK(run("grad --help") == 0);

    snprintf(args, sizeof args, "rm -rf '%s'", tmpdir);
    CHECK(system(args) == 0);
    return dl_test_finish("test_grad_cli");
}
