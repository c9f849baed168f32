/* CenteredClip: the robust aggregation rule of BTARD (Gorbunov et al. 2021,
 * "Secure Distributed Training at Scale"), private to src/collab.
 *
 * Given k contributions x_j (one chunk each, len elements) with weights w_j,
 * it starts from the coordinate-wise median v and repeats, `iterations` times,
 *     v <- v + sum_j w_j (x_j - v) min(1, tau / ||x_j - v||) / sum_j w_j
 * so that a contribution far from the others pulls v by at most tau (times
 * its weight share) per iteration. Everything is summed in double in a fixed
 * order (contributions in the given order, elements in index order), so
 * every member that reduces the same inputs gets the same bits. */
#ifndef DEDLOC_COLLAB_CENTERED_CLIP_H
#define DEDLOC_COLLAB_CENTERED_CLIP_H

#include <stdbool.h>
#include <stddef.h>

/* x[j] points at len floats (finite); w[j] >= 0 with a positive sum. v
 * receives the result (len doubles). clipped[j] (may be NULL) is set when
 * contribution j lies farther than tau from the result, i.e. its pull on the
 * result was cut. Returns 0, or -1 (bad arguments, no memory; dl_fail says). */
int dl_centered_clip(const float *const *x, const double *w, size_t k, size_t len, double tau, int iterations,
                     double *v, bool *clipped);

#endif
