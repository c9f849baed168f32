/* Load balancing of the butterfly all-reduce (private to src/collab).
 *
 * The averaged vector (V bytes) is cut into one part per aggregator; member i
 * aggregates the fraction w_i. Member i sends its own vector's parts to the
 * other aggregators unless it is AUX (an aux member trains nothing, so it has
 * no vector), and aggregates w_i unless it is CLIENT (nobody can dial a
 * client); an aggregator returns its reduced part to every other non-AUX
 * member. Upload time of member i:
 *   t_i = V * (send_i * (1 - w_i) + w_i * recv_i) / b_i
 * with send_i = (role != AUX), recv_i = number of non-AUX members other than i.
 * With every member a trainer this is DESIGN.md's V (1 + (n - 2) w_i) / b_i. */
#ifndef DEDLOC_COLLAB_BALANCE_H
#define DEDLOC_COLLAB_BALANCE_H

#include <stddef.h>

#include "dedloc/collab.h" /* enum dl_member_role */

/* A declared bandwidth counts for at most this many times the group's
 * (lower) median declared bandwidth: declarations are claims nobody has
 * measured, so one member's cannot outweigh the group's. */
#define DL_BALANCE_BANDWIDTH_SPREAD 4.0

/* The largest fraction of the vector one member may aggregate when
 * `aggregators` members can: 2 / (aggregators + 1), about twice a fair share,
 * and below the whole vector as soon as two can aggregate. A lying
 * aggregator signs whatever it likes for its part, so its part is what it
 * can spoil; the cap bounds that whatever it declares. */
double dl_balance_share_cap(size_t aggregators);
/* The lower median of n values (the smaller middle one when n is even);
 * 0 for n == 0 or n > DL_AVG_MAX_MEMBERS. */
double dl_balance_lower_median(size_t n, const double *values);
/* Caps every bandwidth at DL_BALANCE_BANDWIDTH_SPREAD times the lower
 * median of all of them. Idempotent: the median does not move. */
void dl_balance_clamp_bandwidths(size_t n, double *bandwidth_mbit);

/* A sender's weight (the samples behind its vector, which only it can
 * see) counts for at most this many times the lower median of the positive
 * weights of one chunk's contributors: one liar cannot outweigh the group,
 * while honest peers of different speeds keep most of their difference. */
#define DL_BALANCE_WEIGHT_SPREAD 4.0
/* Caps weight[i] at DL_BALANCE_WEIGHT_SPREAD times the lower median of the
 * positive weights (none positive: unchanged). Idempotent. */
void dl_balance_cap_weights(size_t n, double *weight);

/* Chooses w (w_i >= 0, sum w_i = 1 up to rounding, w_i = 0 for CLIENT,
 * w_i <= dl_balance_share_cap) minimising max_i t_i exactly: the feasible set for a round time T has a
 * closed form per member, so T is found by bisection (no simplex). Where the
 * optimum leaves slack (the round time is set by a member whose time does not
 * depend on its own fraction), the slack is shared in proportion to each
 * aggregator's room under T, which is deterministic.
 * bandwidth[i] > 0 and finite, in any unit consistent with vector_bytes per
 * second; vector_bytes >= 0. Returns 0 with *bound_s = the optimal max t_i,
 * or -1 with dl_fail() when no member may aggregate (all CLIENT), when no
 * member has a vector (all AUX), or an input is invalid. */
int dl_balance_solve(size_t n, const double *bandwidth, const enum dl_member_role *role,
                     double vector_bytes, double *fractions, double *bound_s);

/* Integer part sizes covering `elements` exactly, proportional to fractions
 * (largest remainder; ties go to the lower index). A member with fraction 0
 * (or negative, or NaN) gets 0 elements; if no fraction is positive, member 0
 * gets everything. Same inputs, same sizes on every machine. */
void dl_balance_split(size_t n, const double *fractions, size_t elements, size_t *part_elems);

#endif
