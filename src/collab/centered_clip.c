/* CenteredClip over one chunk (collab/centered_clip.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/centered_clip.h"
#include "dedloc/util.h"

/* Coordinate-wise median of the k contributions (mean of the two middle
 * values when k is even). Insertion sort: k is small (at most a group) and
 * the order of equal values cannot change the result. */
static void coordinate_median(const float *const *x, size_t k, size_t len, double *v, double *column) {
    for (size_t e = 0; e < len; e++) {
        for (size_t j = 0; j < k; j++) {
            double val = (double)x[j][e];
            size_t i = j;
            while (i > 0 && column[i - 1] > val) {
                column[i] = column[i - 1];
                i--;
            }
            column[i] = val;
        }
        v[e] = k % 2 ? column[k / 2] : 0.5 * (column[k / 2 - 1] + column[k / 2]);
    }
}

static double distance(const float *x, const double *v, size_t len) {
    double s = 0;
    for (size_t e = 0; e < len; e++) {
        double d = (double)x[e] - v[e];
        s += d * d;
    }
    return sqrt(s);
}

int dl_centered_clip(const float *const *x, const double *w, size_t k, size_t len, double tau, int iterations,
                     double *v, bool *clipped) {
    if (!k || !len || !(tau > 0) || !isfinite(tau) || iterations < 0)
        return dl_fail("centered clip: bad arguments (k %zu, len %zu, tau %g, iterations %d)", k, len, tau,
                       iterations);
    double total = 0;
    for (size_t j = 0; j < k; j++) {
        if (!(w[j] >= 0) || !isfinite(w[j])) return dl_fail("centered clip: weight %g", w[j]);
        total += w[j];
    }
    if (!(total > 0)) return dl_fail("centered clip: the weights sum to %g", total);
    double *delta = dl_malloc(sizeof(double) * len);
    double *column = dl_malloc(sizeof(double) * k);
    double *coef = dl_malloc(sizeof(double) * k);
    if (!delta || !column || !coef) {
        free(delta);
        free(column);
        free(coef);
        return -1;
    }
    /* The median, not the weighted mean, as the start: a few contributions
     * scaled by 1000 move the mean so far that the bounded steps of a
     * handful of iterations could not come back, while they cannot move the
     * median past the honest values as long as they are a minority. */
    coordinate_median(x, k, len, v, column);
    for (int it = 0; it < iterations; it++) {
        for (size_t j = 0; j < k; j++) {
            double d = distance(x[j], v, len);
            coef[j] = w[j] * (d > tau ? tau / d : 1.0) / total;
        }
        memset(delta, 0, sizeof(double) * len);
        for (size_t j = 0; j < k; j++) {
            if (coef[j] == 0) continue;
            for (size_t e = 0; e < len; e++) delta[e] += coef[j] * ((double)x[j][e] - v[e]);
        }
        for (size_t e = 0; e < len; e++) v[e] += delta[e];
    }
    if (clipped)
        for (size_t j = 0; j < k; j++) clipped[j] = distance(x[j], v, len) > tau;
    free(delta);
    free(column);
    free(coef);
    return 0;
}
