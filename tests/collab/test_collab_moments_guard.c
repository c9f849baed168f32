/* The moments' guard of the step loop (loop_guard_moments, train_round.c;
 * docs/collab_training.md, "The attacked rounds' memory"): after each
 * applied centered-clip round it keeps the optimizer's moments of the last
 * round whose results clipped nobody, and when a round's clip count refuses
 * a peer it puts them back, bit for bit. A round that clips someone but
 * refuses nobody changes neither; without a snapshot of its own history
 * (the state was downloaded since) a member keeps its moments; without a
 * snapshot at all (the mean, local steps) nothing happens. */
#include <stdlib.h>
#include <string.h>

#include "collab/train_loop_internal.h"
#include "dedloc/collab.h"
#include "dl_test.h"

enum { N = 37 };

/* The moments an optimizer step would leave: m and v filled from a tag. */
static void step_to(loop_state *st, float tag) {
    st->model.opt.step++;
    for (size_t i = 0; i < N; i++) {
        st->model.opt.exp_avg[i] = tag + (float)i;
        st->model.opt.exp_avg_sq[i] = tag * 0.5f + (float)i * 0.25f;
    }
}

static bool moments_are(const loop_state *st, float tag) {
    for (size_t i = 0; i < N; i++)
        if (st->model.opt.exp_avg[i] != tag + (float)i || st->model.opt.exp_avg_sq[i] != tag * 0.5f + (float)i * 0.25f)
            return false;
    return true;
}

static struct dl_avg_result round_of(int clipped_member, uint32_t refused) {
    struct dl_avg_result r;
    memset(&r, 0, sizeof r);
    if (clipped_member >= 0) r.clip_judged[clipped_member / 8] |= (uint8_t)(1u << (clipped_member % 8));
    r.clip_refused = refused;
    return r;
}

int main(void) {
    loop_state st;
    memset(&st, 0, sizeof st);
    st.model.n = N;
    st.model.opt.exp_avg = calloc(N, sizeof(float));
    st.model.opt.exp_avg_sq = calloc(N, sizeof(float));
    st.model.clean_m = calloc(N, sizeof(float));
    st.model.clean_v = calloc(N, sizeof(float));
    if (!st.model.opt.exp_avg || !st.model.opt.exp_avg_sq || !st.model.clean_m || !st.model.clean_v) return 1;
    st.model.clean_valid = true; /* a fresh run: every starter's moments are zero */

    /* Round 1 clips member 9 (a bit past the first byte): no snapshot. */
    step_to(&st, 100);
    struct dl_avg_result r = round_of(9, 0);
    loop_guard_moments(&st, &r);
    CHECK_MSG(moments_are(&st, 100), "a clipped round that refuses nobody changed the moments");
    CHECK_MSG(st.model.clean_m[5] == 0 && st.model.clean_v[5] == 0 && st.model.clean_step == 0,
              "a clipped round became the snapshot");

    /* Round 2 clips nobody: its moments are the snapshot. */
    step_to(&st, 200);
    r = round_of(-1, 0);
    loop_guard_moments(&st, &r);
    CHECK(moments_are(&st, 200));
    CHECK_MSG(st.model.clean_step == 2 && st.model.clean_m[3] == 203 && st.model.clean_v[3] == 100.75f,
              "the clean round's moments were not kept (step %lld)", (long long)st.model.clean_step);

    /* Rounds 3 and 4 clip member 0; round 4's count refuses it: back to round 2's. */
    step_to(&st, 300);
    r = round_of(0, 0);
    loop_guard_moments(&st, &r);
    CHECK(moments_are(&st, 300));
    step_to(&st, 400);
    r = round_of(0, 1);
    loop_guard_moments(&st, &r);
    CHECK_MSG(moments_are(&st, 200), "the refusing round did not put round 2's moments back (m[0] %g)",
              (double)st.model.opt.exp_avg[0]);
    CHECK_MSG(st.model.opt.step == 4, "the guard moved the step (%lld)", (long long)st.model.opt.step);

    /* After a download (no snapshot of our own rounds) a refusal keeps the moments. */
    st.model.clean_valid = false;
    step_to(&st, 500);
    r = round_of(2, 1);
    loop_guard_moments(&st, &r);
    CHECK_MSG(moments_are(&st, 500), "moments restored from a snapshot that is not of our history");
    /* ... until a clean round makes one again. */
    step_to(&st, 600);
    r = round_of(-1, 0);
    loop_guard_moments(&st, &r);
    CHECK(st.model.clean_valid && st.model.clean_step == 6);
    step_to(&st, 700);
    r = round_of(1, 1);
    loop_guard_moments(&st, &r);
    CHECK(moments_are(&st, 600));

    /* No snapshot buffers (the mean, local steps, --delay-update): nothing happens. */
    free(st.model.clean_m);
    free(st.model.clean_v);
    st.model.clean_m = st.model.clean_v = NULL;
    step_to(&st, 800);
    r = round_of(1, 1);
    loop_guard_moments(&st, &r);
    CHECK(moments_are(&st, 800));

    free(st.model.opt.exp_avg);
    free(st.model.opt.exp_avg_sq);
    return dl_test_finish("test_collab_moments_guard");
}
