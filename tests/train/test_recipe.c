/* The presets' default optimizer schedules stay stable for any run length.
 *
 * LAMB moves each tensor by lr(t) * sqrt(1 - beta2^t) / (1 - beta1^t) times
 * its own norm per step (dl_opt_peak_step gives the largest such step of a
 * schedule). The former tiny recipe, LAMB at 0.1 with warmup over a tenth of
 * the run, reached 0.023 over 300 steps and trained fine, but 0.06 over
 * 3000 steps, where the tiny model on the demo corpus diverged after step
 * 400 (loss 6.7 -> 339 -> 4e5, then a non-finite gradient). The presets must
 * keep that step at or below 0.01 whatever --max-steps is. */
#include <math.h>
#include <stdio.h>

#include "dedloc/train.h"
#include "dl_test.h"

#define TINY_MAX_STEP 0.01

static const int64_t lengths[] = {1, 2, 10, 60, 100, 300, 599, 1000, 3000, 10000, 30000, 125000, 1000000};

int main(void) {
    /* The former recipe at 3000 steps breaks the bound the presets keep. */
    dl_opt_config former = dl_opt_config_preset(true, DL_OPT_LAMB, 3000);
    former.lr = 0.1;
    CHECK(dl_opt_peak_step(&former) > 0.05);

    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int64_t n = lengths[i];
        dl_opt_config tiny = dl_opt_config_preset(true, DL_OPT_LAMB, n);
        double peak = dl_opt_peak_step(&tiny);
        CHECK_MSG(peak <= TINY_MAX_STEP * (1 + 1e-12), "tiny, %lld steps: lr %g reaches a relative step of %g",
                  (long long)n, tiny.lr, peak);
        /* Never above the short-run rate, and the warmup and decay span the run. */
        CHECK(tiny.lr > 0 && tiny.lr <= 0.1);
        CHECK(tiny.total_steps == n && tiny.warmup_steps == n / 10);
        CHECK(tiny.max_grad_norm == 1.0 && tiny.kind == DL_OPT_LAMB);

        dl_opt_config adamw = dl_opt_config_preset(true, DL_OPT_ADAMW, n);
        CHECK(adamw.kind == DL_OPT_ADAMW && adamw.lr == 0.005 && dl_opt_peak_step(&adamw) <= 0.005);

        /* sahajbert keeps sahajBERT's recipe whatever the run length. */
        dl_opt_config big = dl_opt_config_preset(false, DL_OPT_LAMB, n);
        dl_opt_config sahaj = dl_opt_config_sahajbert();
        CHECK(big.lr == sahaj.lr && big.warmup_steps == 5000 && big.total_steps == 125000);
        CHECK(dl_opt_peak_step(&big) <= sahaj.lr);
    }
    /* The bound costs short runs little: a run of 300 steps keeps a rate
     * near the former one, long runs settle at the bound itself. */
    CHECK(dl_opt_config_preset(true, DL_OPT_LAMB, 60).lr > 0.05);
    CHECK(dl_opt_config_preset(true, DL_OPT_LAMB, 300).lr > 0.04);
    CHECK(fabs(dl_opt_config_preset(true, DL_OPT_LAMB, 1000000).lr - TINY_MAX_STEP) < 1e-4);

    /* The peak is found wherever it lies: at a schedule's first step, in its
     * warmup, or where the bias correction overtakes the decay. */
    dl_opt_config flat = dl_opt_config_sahajbert();
    flat.debias = false;
    flat.warmup_steps = 0;
    flat.total_steps = 10;  /* the first step takes the full rate, then it decays */
    CHECK(fabs(dl_opt_peak_step(&flat) - flat.lr) < 1e-15);
    flat.debias = true;     /* the bias correction holds the first steps back */
    CHECK(dl_opt_peak_step(&flat) < 0.4 * flat.lr);
    flat.total_steps = 1000000000;  /* nearly constant: the correction tends to 1 */
    CHECK(fabs(dl_opt_peak_step(&flat) - flat.lr) < 1e-4 * flat.lr);
    return dl_test_finish("test_recipe");
}
