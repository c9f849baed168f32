/* The loss watch: a run whose loss climbs is told once per episode; a noisy
 * but steady run, and a run with a short spike it recovers from, are not. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dedloc/train.h"
#include "dl_test.h"

enum { STEPS = 400 };

typedef double (*loss_fn)(int step);

/* Deterministic noise in [-1, 1): a hash of the step, no rng state. */
static double noise(int step) {
    unsigned x = (unsigned)step * 2654435761u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (double)(x % 20000u) / 10000.0 - 1.0;
}

/* Falls from 9.7 towards 6.5, as the tiny model does. */
static double falling(int step) { return 6.5 + 3.2 * exp(-step / 80.0); }

static double noisy_stable(int step) { return falling(step) + 0.8 * noise(step); }

/* What the former recipe did at 3000 steps: down to 6.7, then up by orders
 * of magnitude from step 200 on. */
static double diverging(int step) {
    return step < 200 ? falling(step) + 0.2 * noise(step) : falling(200) * exp((step - 200) / 25.0);
}

/* Three wild steps (a batch of odd text, say), then back to normal. */
static double spike_then_recover(int step) {
    return falling(step) + 0.2 * noise(step) + (step >= 250 && step < 253 ? 60.0 : 0.0);
}

/* Up to 3x, back down, and up again: two episodes. */
static double two_episodes(int step) {
    double base = falling(step) + 0.1 * noise(step);
    if (step >= 150 && step < 200) return base * 3;
    if (step >= 300) return base * 3;
    return base;
}

/* A loss that turns NaN is a rise. */
static double turns_nan(int step) { return step < 300 ? falling(step) : NAN; }

/* A small loss wobbling by more than 1.5x stays below the absolute margin. */
static double small_and_noisy(int step) { return 0.2 + 0.15 * noise(step); }

static const struct {
    const char *name;
    loss_fn loss;
    int alarms;         /* episodes expected */
    int first_alarm_lo; /* the first warning within [lo, hi] (when alarms > 0) */
    int first_alarm_hi;
} cases[] = {
    {"noisy but stable", noisy_stable, 0, 0, 0},
    {"rising", diverging, 1, 200, 230},
    {"spike then recover", spike_then_recover, 0, 0, 0},
    {"rise, recover, rise again", two_episodes, 2, 150, 175},
    {"turns NaN", turns_nan, 1, 300, 315},
    {"small and noisy", small_and_noisy, 0, 0, 0},
};

int main(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dl_loss_watch w;
        memset(&w, 0, sizeof w);
        int alarms = 0, first = -1;
        char text[512] = "";
        for (int step = 1; step <= STEPS; step++) {
            if (dl_loss_watch_add(&w, step, cases[c].loss(step))) {
                alarms++;
                if (first < 0) {
                    first = step;
                    dl_loss_watch_describe(&w, 0.05, text, sizeof text);
                }
            }
        }
        CHECK_MSG(alarms == cases[c].alarms, "%s: %d warnings, expected %d", cases[c].name, alarms,
                  cases[c].alarms);
        CHECK(w.alarms == alarms);
        if (cases[c].alarms > 0) {
            CHECK_MSG(first >= cases[c].first_alarm_lo && first <= cases[c].first_alarm_hi,
                      "%s: first warning at step %d, expected within %d-%d", cases[c].name, first,
                      cases[c].first_alarm_lo, cases[c].first_alarm_hi);
            /* The warning says what to change, and fits a JSON string as it is. */
            CHECK_MSG(strstr(text, "--lr") && strstr(text, "--warmup-steps"), "%s: %s", cases[c].name, text);
            CHECK(!strchr(text, '"') && !strchr(text, '\\'));
        }
    }
    /* Settings: a shorter window notices sooner. */
    dl_loss_watch w;
    memset(&w, 0, sizeof w);
    w.window = 5;
    int first = -1;
    for (int step = 1; step <= STEPS && first < 0; step++)
        if (dl_loss_watch_add(&w, step, diverging(step))) first = step;
    CHECK_MSG(first >= 200 && first <= 215, "window 5: first warning at step %d", first);
    return dl_test_finish("test_loss_watch");
}
