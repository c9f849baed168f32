/* Checkpoints of local-steps mode (DiLoCo): the outer state as every
 * checkpoint holds it, plus the peer's local weights, inner optimizer
 * moments and step, error-feedback residual and its samples and losses
 * since the last sync, under "local.*" tensors and a "local" metadata
 * entry. A round trip restores every bit; a checkpoint of exact mode is
 * written byte for byte as before the local entries existed (a pinned
 * hash of its image, taken from the format before them) and loads without
 * them; a changed or stripped "local" entry is refused. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* xxh64 of the exact-mode image below, as the code before local-steps
 * checkpoints wrote it. */
#define EXACT_IMAGE_HASH "4ac0ac7bb9e0d44a"

enum { TOTAL = 10 };

static float arrays[8][TOTAL];

static void make(dl_checkpoint *ck, dl_train_layout *layout) {
    const char *names[] = {"a.weight", "b.bias"};
    size_t numels[] = {6, 4};
    CHECK_OK(dl_train_layout_init(layout, 2, names, numels, NULL));
    layout->tensors[0].ndim = 2, layout->tensors[0].shape[0] = 2, layout->tensors[0].shape[1] = 3;
    dl_rng rng;
    dl_rng_seed(&rng, 24);
    for (int a = 0; a < 8; a++)
        for (int i = 0; i < TOTAL; i++) arrays[a][i] = dl_rng_normal(&rng);
    memset(ck, 0, sizeof *ck);
    ck->layout = *layout;
    ck->params = arrays[0];
    ck->exp_avg = arrays[1];
    ck->exp_avg_sq = arrays[2];
    ck->opt_config = dl_opt_config_sahajbert();
    ck->step = 5;
    ck->model_config_json = "{}";
    ck->run_json = "{}";
    dl_loss_scale_init(&ck->loss_scale, false);
    ck->progress.samples = 960;
    ck->progress.micro_batches = 123;
}

static void add_local(dl_checkpoint *ck) {
    dl_checkpoint_local *l = &ck->local;
    l->params = arrays[3];
    l->exp_avg = arrays[4];
    l->exp_avg_sq = arrays[5];
    for (int i = 0; i < TOTAL; i++) arrays[5][i] *= arrays[5][i]; /* second moments are >= 0 */
    l->residual = arrays[6];
    l->inner_config = dl_opt_config_sahajbert();
    l->inner_step = 77;
    l->samples_since_sync = 48;
    l->loss_sum[0] = 123.25;
    l->loss_sum[1] = 100.5;
    l->loss_sum[2] = 22.75;
    l->local_steps = 50;
}

/* Replaces the first occurrence of what (in the header) by with, same length. */
static bool patch(char *img, size_t size, const char *what, const char *with) {
    size_t n = strlen(what);
    for (size_t i = 0; i + n <= size; i++)
        if (!memcmp(img + i, what, n)) {
            memcpy(img + i, with, n);
            return true;
        }
    return false;
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    dl_train_layout layout;
    dl_checkpoint ck;
    make(&ck, &layout);

    /* Exact mode: the image of before, and no local state on reading. */
    char *img = NULL;
    size_t size = 0;
    CHECK_OK(dl_checkpoint_serialize(&ck, &img, &size));
    char hex[17];
    dl_hash64_hex(dl_hash64(img, size, 0), hex);
    CHECK_MSG(!strcmp(hex, EXACT_IMAGE_HASH), "an exact-mode checkpoint is no longer the old format: image %s, want %s",
              hex, EXACT_IMAGE_HASH);
    dl_checkpoint back;
    CHECK_OK(dl_checkpoint_parse(img, size, &back));
    CHECK(back.local.params == NULL && back.local.residual == NULL);
    CHECK(back.opt_config.kind == DL_OPT_LAMB && back.step == 5);
    CHECK(memcmp(back.exp_avg, arrays[1], sizeof arrays[1]) == 0);
    dl_checkpoint_free(&back);

    /* Local mode: every bit back. */
    ck.opt_config = dl_opt_config_outer(0.7, 0.9);
    add_local(&ck);
    CHECK_OK(dl_checkpoint_serialize(&ck, &img, &size));
    char *copy = malloc(size), *copy2 = malloc(size);
    memcpy(copy, img, size);
    memcpy(copy2, img, size);
    CHECK_OK(dl_checkpoint_parse(img, size, &back));
    const dl_checkpoint_local *l = &back.local;
    CHECK(l->params && l->exp_avg && l->exp_avg_sq && l->residual);
    if (l->params) {
        CHECK(memcmp(back.params, arrays[0], sizeof arrays[0]) == 0);
        CHECK(memcmp(l->params, arrays[3], sizeof arrays[3]) == 0);
        CHECK(memcmp(l->exp_avg, arrays[4], sizeof arrays[4]) == 0);
        CHECK(memcmp(l->exp_avg_sq, arrays[5], sizeof arrays[5]) == 0);
        CHECK(memcmp(l->residual, arrays[6], sizeof arrays[6]) == 0);
    }
    CHECK(l->inner_config.kind == DL_OPT_LAMB && l->inner_config.lr == 0.00176 && l->inner_config.total_steps == 125000);
    CHECK(l->inner_step == 77 && l->samples_since_sync == 48 && l->local_steps == 50);
    CHECK(l->loss_sum[0] == 123.25 && l->loss_sum[1] == 100.5 && l->loss_sum[2] == 22.75);
    CHECK(back.opt_config.kind == DL_OPT_NESTEROV && back.opt_config.lr == 0.7 && back.opt_config.beta1 == 0.9);
    dl_checkpoint_free(&back);

    /* A changed local entry fails the metadata checksum; one stripped of
     * its name leaves local tensors without it. */
    /* (the entry is JSON text inside the header's JSON: its quotes escaped) */
    CHECK(patch(copy, size, "\\\"inner_step\\\":77", "\\\"inner_step\\\":78"));
    CHECK(dl_checkpoint_parse(copy, size, &back) != 0);
    CHECK_MSG(strstr(dl_error(), "checksum") != NULL, "changed local entry: %s", dl_error());
    CHECK(patch(copy2, size, "\"local\":", "\"lokal\":"));
    CHECK(dl_checkpoint_parse(copy2, size, &back) != 0);
    dl_train_layout_free(&layout);
    return dl_test_finish("test_checkpoint_local");
}
