/* Min-max load balancing of the butterfly all-reduce by bisection on the
 * round time.
 *
 * For a round time T, member i meets t_i <= T exactly when its fraction lies
 * in an interval [lo_i(T), hi_i(T)]. With c_i = T b_i / V (the bytes it may
 * upload, in units of V) and slope d_i = recv_i - send_i, t_i = V (send_i +
 * d_i w_i) / b_i, so:
 *   CLIENT            w_i = 0, feasible iff c_i >= 1 (it always sends V);
 *   d_i > 0           [0, min(1, (c_i - send_i) / d_i)], feasible iff c_i >= send_i;
 *   d_i = 0           [0, 1], feasible iff c_i >= send_i (two vector holders:
 *                     each uploads V whatever the split);
 *   d_i < 0           [max(0, 1 - c_i), 1] (a lone vector holder among aux
 *                     members: aggregating more means sending less).
 * Every hi_i is also capped at dl_balance_share_cap (no member aggregates
 * more than about twice a fair share, whatever bandwidth it declares).
 * T is feasible iff every member is and sum lo_i <= 1 <= sum hi_i. The
 * intervals only widen as T grows, so feasibility is monotone and bisection
 * finds the smallest feasible T to the last bit; any w in the intervals with
 * sum 1 is then optimal. Everything is scaled to V = 1 (the optimal w does
 * not depend on V) and multiplied back at the end. */
#include "collab/balance.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"

struct member_model {
    bool aggregates;
    double send, recv, bandwidth;
};

double dl_balance_share_cap(size_t aggregators) { return aggregators ? 2.0 / (double)(aggregators + 1) : 0; }

/* The lower median: with two values it is the smaller one, so a single
 * liar among two cannot pull the bound up with its own claim. */
double dl_balance_lower_median(size_t n, const double *values) {
    double sorted[DL_AVG_MAX_MEMBERS];
    if (n == 0 || n > DL_AVG_MAX_MEMBERS) return 0;
    memcpy(sorted, values, n * sizeof *sorted);
    for (size_t j = 1; j < n; j++) { /* insertion sort: n is a group's size */
        double v = sorted[j];
        size_t i = j;
        while (i > 0 && sorted[i - 1] > v) {
            sorted[i] = sorted[i - 1];
            i--;
        }
        sorted[i] = v;
    }
    return sorted[(n - 1) / 2];
}

void dl_balance_clamp_bandwidths(size_t n, double *bandwidth_mbit) {
    double cap = DL_BALANCE_BANDWIDTH_SPREAD * dl_balance_lower_median(n, bandwidth_mbit);
    for (size_t i = 0; i < n; i++)
        if (bandwidth_mbit[i] > cap) bandwidth_mbit[i] = cap;
}

/* Fills lo[i], hi[i] for round time T (V = 1); false when T is infeasible. */
void dl_balance_cap_weights(size_t n, double *weight) {
    double positive[DL_AVG_MAX_MEMBERS];
    size_t k = 0;
    for (size_t i = 0; i < n && i < DL_AVG_MAX_MEMBERS; i++)
        if (weight[i] > 0) positive[k++] = weight[i];
    if (!k) return;
    double cap = DL_BALANCE_WEIGHT_SPREAD * dl_balance_lower_median(k, positive);
    for (size_t i = 0; i < n; i++)
        if (weight[i] > cap) weight[i] = cap;
}

static bool interval_at(size_t n, const struct member_model *m, double cap, double T, double *lo, double *hi) {
    double sum_lo = 0, sum_hi = 0;
    for (size_t i = 0; i < n; i++) {
        double c = T * m[i].bandwidth, d = m[i].recv - m[i].send;
        lo[i] = hi[i] = 0;
        if (!m[i].aggregates) {
            if (c < m[i].send) return false;
            continue;
        }
        if (d > 0) {
            if (c < m[i].send) return false;
            double w = (c - m[i].send) / d;
            hi[i] = w < 1 ? w : 1;
        } else if (d == 0) {
            if (c < m[i].send) return false;
            hi[i] = 1;
        } else {
            double w = (m[i].send - c) / -d;
            lo[i] = w > 0 ? w : 0;
            hi[i] = 1;
        }
        if (hi[i] > cap) hi[i] = cap;
        if (lo[i] > hi[i]) return false;
        sum_lo += lo[i];
        sum_hi += hi[i];
    }
    return sum_lo <= 1 && sum_hi >= 1;
}

int dl_balance_solve(size_t n, const double *bandwidth, const enum dl_member_role *role,
                     double vector_bytes, double *fractions, double *bound_s) {
    if (n == 0 || !bandwidth || !role || !fractions || !bound_s)
        return dl_fail("load balance: empty group or missing arrays");
    if (!(vector_bytes >= 0) || !isfinite(vector_bytes))
        return dl_fail("load balance: vector size %g is not a finite size", vector_bytes);
    size_t holders = 0, aggregators = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(bandwidth[i] > 0) || !isfinite(bandwidth[i]))
            return dl_fail("load balance: member %zu has bandwidth %g (must be finite and > 0)", i, bandwidth[i]);
        if ((unsigned)role[i] >= DL_MEMBER_ROLE_COUNT)
            return dl_fail("load balance: member %zu has unknown role %d", i, role[i]);
        holders += role[i] != DL_MEMBER_AUX;
        aggregators += role[i] != DL_MEMBER_CLIENT;
    }
    if (!aggregators) return dl_fail("load balance: every member is a client, so no one can aggregate");
    if (!holders) return dl_fail("load balance: every member is auxiliary, so there is nothing to average");

    struct member_model *m = dl_calloc(n, sizeof *m);
    double *lo = dl_calloc(n, sizeof *lo), *hi = dl_calloc(n, sizeof *hi);
    if (!m || !lo || !hi) {
        free(m);
        free(lo);
        free(hi);
        return -1;
    }
    double cap = dl_balance_share_cap(aggregators);
    double T_hi = 0;
    for (size_t i = 0; i < n; i++) {
        m[i].aggregates = role[i] != DL_MEMBER_CLIENT;
        m[i].send = role[i] != DL_MEMBER_AUX;
        m[i].recv = (double)(holders - (role[i] != DL_MEMBER_AUX));
        m[i].bandwidth = bandwidth[i];
        /* With any w in [0, 1], t_i <= max(send, recv) / b_i: a feasible start. */
        double worst = (m[i].send > m[i].recv ? m[i].send : m[i].recv) / bandwidth[i];
        if (worst > T_hi) T_hi = worst;
    }
    double T_lo = 0;
    if (!interval_at(n, m, cap, T_hi, lo, hi)) T_hi *= 2; /* rounding at the start bound; never expected */
    if (interval_at(n, m, cap, 0, lo, hi)) T_hi = 0;       /* e.g. one trainer that aggregates it all */
    for (int iter = 0; iter < 2000 && T_hi > 0; iter++) {
        double mid = T_lo + (T_hi - T_lo) / 2;
        if (mid <= T_lo || mid >= T_hi) break; /* adjacent doubles: done */
        if (interval_at(n, m, cap, mid, lo, hi))
            T_hi = mid;
        else
            T_lo = mid;
    }
    interval_at(n, m, cap, T_hi, lo, hi);
    double sum_lo = 0, sum_hi = 0;
    for (size_t i = 0; i < n; i++) {
        sum_lo += lo[i];
        sum_hi += hi[i];
    }
    /* Any point with lo <= w <= hi and sum 1 is optimal; take the same
     * proportion of every member's room. */
    double theta = sum_hi > sum_lo ? (1 - sum_lo) / (sum_hi - sum_lo) : 0;
    if (theta < 0) theta = 0;
    if (theta > 1) theta = 1;
    size_t largest = 0;
    for (size_t i = 0; i < n; i++) {
        fractions[i] = m[i].aggregates ? lo[i] + theta * (hi[i] - lo[i]) : 0;
        if (fractions[i] > fractions[largest]) largest = i;
    }
    /* Rounding: let the largest share absorb the last bits, so sum w = 1. */
    double others = 0;
    for (size_t i = 0; i < n; i++)
        if (i != largest) others += fractions[i];
    fractions[largest] = others < 1 ? 1 - others : 0;
    double bound = 0;
    for (size_t i = 0; i < n; i++) {
        double t = vector_bytes * (m[i].send * (1 - fractions[i]) + fractions[i] * m[i].recv) / bandwidth[i];
        if (t > bound) bound = t;
    }
    *bound_s = bound;
    free(m);
    free(lo);
    free(hi);
    return 0;
}

void dl_balance_split(size_t n, const double *fractions, size_t elements, size_t *part_elems) {
    if (n == 0) return;
    double total = 0;
    size_t positive = 0;
    for (size_t i = 0; i < n; i++) {
        part_elems[i] = 0;
        if (fractions[i] > 0 && isfinite(fractions[i])) {
            total += fractions[i];
            positive++;
        }
    }
    if (!positive || !isfinite(total)) {
        part_elems[0] = elements;
        return;
    }
    size_t given = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(fractions[i] > 0 && isfinite(fractions[i]))) continue;
        double whole = floor(fractions[i] / total * (double)elements);
        if (whole > (double)(elements - given)) whole = (double)(elements - given);
        part_elems[i] = (size_t)whole;
        given += part_elems[i];
    }
    /* Largest remainder, one element at a time: fewer than `positive` are
     * left in exact arithmetic, so this is O(n^2) at worst and needs no
     * allocation. A member already topped up has a negative remainder and
     * comes last, so rounding surpluses cycle fairly. */
    for (size_t left = elements - given; left > 0; left--) {
        size_t best = SIZE_MAX;
        double best_rem = 0;
        for (size_t i = 0; i < n; i++) {
            if (!(fractions[i] > 0 && isfinite(fractions[i]))) continue;
            double rem = fractions[i] / total * (double)elements - (double)part_elems[i];
            if (best == SIZE_MAX || rem > best_rem) {
                best = i;
                best_rem = rem;
            }
        }
        part_elems[best]++;
    }
}
