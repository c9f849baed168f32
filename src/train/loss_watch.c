/* Watches the loss of a run for a sharp rise and says so once per episode:
 * a diverging run (a rate too high for the run's length) climbs for
 * hundreds of steps before its gradient turns non-finite, and nobody
 * looking at a log line per step notices in time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"

enum { DEFAULT_WINDOW = 10 };
#define DEFAULT_FACTOR 1.3
#define DEFAULT_MIN_RISE 0.5

static int window_of(const dl_loss_watch *w) {
    int n = w->window > 0 ? w->window : DEFAULT_WINDOW;
    return n > DL_LOSS_WATCH_MAX_WINDOW ? DL_LOSS_WATCH_MAX_WINDOW : n;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median, not the mean: one wild micro-batch (a batch of odd text)
 * moves a mean of 10 steps by a lot and a median not at all, while a run
 * that diverges moves both. A NaN sorts as the largest (it is a rise). */
static double window_median(const dl_loss_watch *w, int n) {
    double sorted[DL_LOSS_WATCH_MAX_WINDOW] = {0};
    for (int i = 0; i < n; i++) sorted[i] = isnan(w->ring[i]) ? INFINITY : w->ring[i];
    qsort(sorted, (size_t)n, sizeof sorted[0], compare_double);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

bool dl_loss_watch_add(dl_loss_watch *w, int64_t step, double loss) {
    int n = window_of(w);
    double factor = w->factor > 1 ? w->factor : DEFAULT_FACTOR;
    double min_rise = w->min_rise > 0 ? w->min_rise : DEFAULT_MIN_RISE;
    w->ring[w->count % n] = loss;
    w->count++;
    w->last_step = step;
    if (w->count < n) return false;
    double median = window_median(w, n);
    w->median = median;
    if (!w->has_best || median < w->best) {
        w->best = median;
        w->best_step = step;
        w->has_best = true;
    }
    bool rising = !isfinite(median) || (median > w->best * factor && median - w->best > min_rise);
    if (rising && !w->alarmed) {
        w->alarmed = true;
        w->alarms++;
        return true;
    }
    /* The episode ends once the loss is back within half the margin, so a
     * loss that hovers at the threshold does not warn at every crossing. */
    double rearm = w->best * (1 + (factor - 1) / 2);
    if (w->alarmed && isfinite(median) && median <= rearm) w->alarmed = false;
    return false;
}

void dl_loss_watch_describe(const dl_loss_watch *w, double lr, char *out, size_t size) {
    int n = window_of(w);
    double ratio = w->best > 0 ? w->median / w->best : INFINITY;
    snprintf(out, size,
             "the loss is rising: its median over the last %d steps is %.4g at step %lld, %.3gx the best "
             "median %.4g (step %lld); the run is diverging. Lower --lr (this step used %.3g) or lengthen "
             "--warmup-steps, and restart from a checkpoint saved before step %lld",
             n, w->median, (long long)w->last_step, ratio, w->best, (long long)w->best_step, lr,
             (long long)w->best_step);
}
