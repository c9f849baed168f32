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

/* Chooses w (w_i >= 0, sum w_i = 1 up to rounding, w_i = 0 for CLIENT)
 * minimising max_i t_i exactly: the feasible set for a round time T has a
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
