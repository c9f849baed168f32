/* Dynamic loss scaling: init 2^16, x2 after 2000 clean micro-batches, x0.5 on
 * overflow, non-finite micro-batches dropped; unscaling is exact. */
#include <math.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void test_schedule_of_scale(void) {
    dl_loss_scale ls;
    dl_loss_scale_init(&ls, true);
    CHECK(ls.scale == 65536.0f);
    for (int i = 0; i < 1999; i++) dl_loss_scale_update(&ls, true);
    CHECK(ls.scale == 65536.0f);
    CHECK(dl_loss_scale_update(&ls, true));
    CHECK(ls.scale == 131072.0f);   /* the 2000th clean micro-batch doubles it */
    CHECK(ls.clean_steps == 0);
    for (int i = 0; i < 1500; i++) dl_loss_scale_update(&ls, true);
    CHECK(!dl_loss_scale_update(&ls, false));   /* overflow: dropped, halved */
    CHECK(ls.scale == 65536.0f && ls.clean_steps == 0 && ls.overflows == 1);
    /* The clean count restarts after an overflow: 1999 more keep the scale. */
    for (int i = 0; i < 1999; i++) dl_loss_scale_update(&ls, true);
    CHECK(ls.scale == 65536.0f);
    dl_loss_scale_update(&ls, true);
    CHECK(ls.scale == 131072.0f);
    /* Repeated overflows keep halving, and the scale stays a power of two. */
    for (int i = 0; i < 20; i++) CHECK(!dl_loss_scale_update(&ls, false));
    CHECK(ls.scale == 131072.0f / 1048576.0f);
    for (int i = 0; i < 400; i++) dl_loss_scale_update(&ls, false);
    CHECK(ls.scale > 0 && isnormal(ls.scale));
}

static void test_disabled(void) {
    dl_loss_scale ls;
    dl_loss_scale_init(&ls, false);
    CHECK(ls.scale == 1.0f);
    for (int i = 0; i < 5000; i++) dl_loss_scale_update(&ls, true);
    CHECK(ls.scale == 1.0f);
    CHECK(!dl_loss_scale_update(&ls, false));   /* fp32 drops non-finite batches too */
    CHECK(ls.scale == 1.0f && ls.overflows == 1);
}

static void test_unscale(void) {
    dl_loss_scale ls;
    dl_loss_scale_init(&ls, true);
    float g[4] = {65536.0f * 0.1f, -3.0f, 0.0f, 1e-30f};
    float want[4] = {65536.0f * 0.1f / 65536.0f, -3.0f / 65536.0f, 0.0f, 1e-30f / 65536.0f};
    CHECK(dl_loss_scale_unscale(&ls, g, 4));
    for (int i = 0; i < 4; i++) CHECK(g[i] == want[i]);
    float bad[3] = {1.0f, INFINITY, 2.0f};
    CHECK(!dl_loss_scale_unscale(&ls, bad, 3));
    float nan_[2] = {NAN, 0.0f};
    CHECK(!dl_loss_scale_unscale(&ls, nan_, 2));
}

/* The dropping rule in an accumulation loop: an overflowing micro-batch adds
 * nothing and counts no samples. */
static void test_drop_in_accumulation(void) {
    dl_loss_scale ls;
    dl_loss_scale_init(&ls, true);
    dl_grad_accum acc;
    CHECK_OK(dl_grad_accum_init(&acc, 2));
    float good[2] = {65536.0f, 2 * 65536.0f}, overflow[2] = {INFINITY, 1.0f}, mean[2];
    float *batches[3] = {good, overflow, good};
    for (int k = 0; k < 3; k++) {
        float g[2] = {batches[k][0], batches[k][1]};
        bool finite = dl_loss_scale_unscale(&ls, g, 2);
        if (dl_loss_scale_update(&ls, finite)) dl_grad_accum_add(&acc, g, 4);
        if (k == 1) CHECK(ls.scale == 32768.0f);
        /* The next batch is computed at the new scale. */
        if (k == 1) good[0] = 32768.0f, good[1] = 2 * 32768.0f;
    }
    CHECK(acc.samples == 8);
    CHECK_OK(dl_grad_accum_mean(&acc, mean));
    CHECK(mean[0] == 1.0f && mean[1] == 2.0f);
    dl_grad_accum_free(&acc);
}

int main(void) {
    test_schedule_of_scale();
    test_disabled();
    test_unscale();
    test_drop_in_accumulation();
    return dl_test_finish("test_loss_scale");
}
