/* Load balancing of the butterfly all-reduce: the bisection solver against a
 * brute-force search over a fine grid of fractions, closed-form cases, refusals,
 * and the integer split against exact integer arithmetic. */
#include <stdint.h>

#include "collab/balance.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* Upload time of member i under fractions w, computed from the definition. */
static double member_time(size_t n, const double *b, const enum dl_member_role *role, double V, const double *w,
                          size_t i) {
    size_t holders = 0;
    for (size_t j = 0; j < n; j++) holders += role[j] != DL_MEMBER_AUX;
    double send = role[i] != DL_MEMBER_AUX;
    double recv = (double)(holders - (role[i] != DL_MEMBER_AUX));
    return V * (send * (1 - w[i]) + w[i] * recv) / b[i];
}

static double round_time(size_t n, const double *b, const enum dl_member_role *role, double V, const double *w) {
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        double x = member_time(n, b, role, V, w, i);
        if (x > t) t = x;
    }
    return t;
}

/* Brute force: every w on the grid of step 1/steps over the aggregators. */
struct grid {
    size_t n;
    const double *b;
    const enum dl_member_role *role;
    double V;
    int steps;
    double w[8];
    double best;
};

static void grid_walk(struct grid *g, size_t i, int left) {
    if (i == g->n) {
        if (left == 0) {
            double t = round_time(g->n, g->b, g->role, g->V, g->w);
            if (t < g->best) g->best = t;
        }
        return;
    }
    if (g->role[i] == DL_MEMBER_CLIENT) {
        g->w[i] = 0;
        grid_walk(g, i + 1, left);
        return;
    }
    /* No member above the share cap (balance.h). */
    size_t able = 0;
    for (size_t j = 0; j < g->n; j++) able += g->role[j] != DL_MEMBER_CLIENT;
    double cap = dl_balance_share_cap(able);
    for (int k = 0; k <= left; k++) {
        g->w[i] = (double)k / g->steps;
        if (g->w[i] > cap + 1e-12) break;
        grid_walk(g, i + 1, left - k);
    }
}

static double grid_best(size_t n, const double *b, const enum dl_member_role *role, double V, int steps) {
    struct grid g = {n, b, role, V, steps, {0}, 1e300};
    grid_walk(&g, 0, steps);
    return g.best;
}

/* Solver result checked from the definition: valid fractions, the bound it
 * claims is the round time of its fractions, and no grid point does better. */
static void check_against_grid(size_t n, const double *b, const enum dl_member_role *role, double V, int steps,
                               const char *what) {
    double w[8], bound = -1;
    int rc = dl_balance_solve(n, b, role, V, w, &bound);
    CHECK_MSG(rc == 0, "%s: %s", what, dl_error());
    if (rc) return;
    double sum = 0;
    bool valid = true;
    for (size_t i = 0; i < n; i++) {
        sum += w[i];
        if (!(w[i] >= 0 && w[i] <= 1)) valid = false;
        if (role[i] == DL_MEMBER_CLIENT && w[i] != 0) valid = false;
    }
    CHECK_MSG(valid, "%s: fractions out of range or client aggregates", what);
    CHECK_MSG(fabs(sum - 1) <= 1e-12, "%s: sum of fractions %.17g", what, sum);
    double actual = round_time(n, b, role, V, w);
    CHECK_MSG(fabs(actual - bound) <= 1e-12 * actual, "%s: bound %.17g, round time of w %.17g", what, bound, actual);
    double brute = grid_best(n, b, role, V, steps);
    CHECK_MSG(actual <= brute * (1 + 1e-12), "%s: solver %.12g worse than grid %.12g", what, actual, brute);
    /* The grid's nearest point to the optimum moves each w_i by < 1/steps,
     * which changes t_i by at most V |recv_i - send_i| / (b_i steps). */
    double slack = 0;
    for (size_t i = 0; i < n; i++) slack = fmax(slack, V * (double)(n) / (b[i] * steps));
    CHECK_MSG(actual >= brute - slack, "%s: solver %.12g far below grid %.12g: time model differs", what, actual, brute);
}

static void test_equal_bandwidths(void) {
    for (size_t n = 1; n <= 7; n++) {
        double b[8], w[8], bound;
        enum dl_member_role role[8];
        for (size_t i = 0; i < n; i++) {
            b[i] = 12.5;
            role[i] = DL_MEMBER_TRAINER;
        }
        CHECK_OK(dl_balance_solve(n, b, role, 100.0, w, &bound));
        bool equal = true;
        for (size_t i = 0; i < n; i++) equal &= fabs(w[i] - 1.0 / (double)n) <= 1e-12;
        CHECK_MSG(equal, "n=%zu: all-equal bandwidths give w = 1/n (w0 = %.17g)", n, w[0]);
        /* DESIGN.md: V (1 + (n - 2) / n) / b; n = 1 sends nothing. */
        double want = n == 1 ? 0 : 100.0 * (1 + (double)(n - 2) / (double)n) / 12.5;
        CHECK_MSG(fabs(bound - want) <= 1e-12 * (want + 1), "n=%zu: bound %.17g want %.17g", n, bound, want);
    }
}

static void test_closed_forms(void) {
    double w[8], bound;
    /* Two trainers: each uploads V whatever the split; the slower sets the time. */
    {
        double b[2] = {1, 10};
        enum dl_member_role role[2] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER};
        CHECK_OK(dl_balance_solve(2, b, role, 8, w, &bound));
        CHECK(fabs(bound - 8) <= 1e-12);
    }
    /* A lone trainer with an aux member: t_0 = V (1 - w0) / b0 (it sends what it
     * does not aggregate), t_aux = V w_aux / b_aux (it returns to the trainer).
     * Keeping everything would cost nothing, but the share cap (2/3 with two
     * aggregators) leaves the aux member a third: t_aux = 1/3 sets the time. */
    {
        double b[2] = {3, 1};
        enum dl_member_role role[2] = {DL_MEMBER_TRAINER, DL_MEMBER_AUX};
        CHECK_OK(dl_balance_solve(2, b, role, 1, w, &bound));
        CHECK_MSG(fabs(w[0] - 2.0 / 3) <= 1e-12 && fabs(w[1] - 1.0 / 3) <= 1e-12 && fabs(bound - 1.0 / 3) <= 1e-12,
                  "w_aux %.17g bound %.17g", w[1], bound);
    }
    /* Two trainers and a fast aux member: a trainer has recv = send = 1, so
     * t_i = V / b_i whatever w_i; the aux member (t = 2 V w / b) cannot help. */
    {
        double b[3] = {1, 1, 100};
        enum dl_member_role role[3] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_AUX};
        CHECK_OK(dl_balance_solve(3, b, role, 1, w, &bound));
        CHECK_MSG(fabs(bound - 1) <= 1e-12, "bound %.17g", bound);
    }
    /* Three trainers, one a slow client: T >= V / b_client no matter what. */
    {
        double b[3] = {100, 100, 0.5};
        enum dl_member_role role[3] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_CLIENT};
        CHECK_OK(dl_balance_solve(3, b, role, 1, w, &bound));
        CHECK(w[2] == 0);
        CHECK(fabs(bound - 2) <= 1e-12);
    }
    /* Zero-size vector: time 0, fractions still valid. */
    {
        double b[3] = {1, 2, 3};
        enum dl_member_role role[3] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_TRAINER};
        CHECK_OK(dl_balance_solve(3, b, role, 0, w, &bound));
        CHECK(bound == 0 && fabs(w[0] + w[1] + w[2] - 1) <= 1e-12);
    }
}

static void test_against_brute_force(void) {
    dl_rng rng;
    dl_rng_seed(&rng, 20261130);
    const double V = 1e6;
    int cases = 0;
    for (size_t n = 2; n <= 5; n++) {
        int steps = n <= 3 ? 600 : n == 4 ? 120 : 48;
        for (int rep = 0; rep < 12; rep++) {
            double b[8];
            enum dl_member_role role[8];
            size_t holders = 0, aggregators = 0;
            for (size_t i = 0; i < n; i++) {
                b[i] = pow(10, 2 * dl_rng_uniform(&rng)); /* 1 .. 100 */
                uint64_t r = dl_rng_below(&rng, 6);
                role[i] = r < 3 ? DL_MEMBER_TRAINER : r < 5 ? DL_MEMBER_CLIENT : DL_MEMBER_AUX;
                holders += role[i] != DL_MEMBER_AUX;
                aggregators += role[i] != DL_MEMBER_CLIENT;
            }
            if (!holders) role[0] = DL_MEMBER_TRAINER;
            if (!aggregators) role[n - 1] = DL_MEMBER_AUX;
            char what[64];
            snprintf(what, sizeof what, "random n=%zu case %d", n, rep);
            check_against_grid(n, b, role, V, steps, what);
            cases++;
        }
    }
    /* Hand-picked mixes: a fast aux beside slow trainers, two clients and one
     * aggregator, a lone trainer with two aux members. */
    double b1[4] = {1, 2, 50, 4};
    enum dl_member_role r1[4] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_AUX, DL_MEMBER_TRAINER};
    check_against_grid(4, b1, r1, V, 200, "fast aux");
    double b2[3] = {5, 1, 2};
    enum dl_member_role r2[3] = {DL_MEMBER_CLIENT, DL_MEMBER_TRAINER, DL_MEMBER_CLIENT};
    check_against_grid(3, b2, r2, V, 600, "two clients, one aggregator");
    double b3[3] = {2, 1, 7};
    enum dl_member_role r3[3] = {DL_MEMBER_TRAINER, DL_MEMBER_AUX, DL_MEMBER_AUX};
    check_against_grid(3, b3, r3, V, 600, "lone trainer, two aux");
    double b4[5] = {1, 1, 1, 1, 100};
    enum dl_member_role r4[5] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_TRAINER,
                                 DL_MEMBER_TRAINER};
    check_against_grid(5, b4, r4, V, 48, "one fast trainer");
    CHECK(cases == 48);
}

static void test_refusals(void) {
    double w[4], bound, b[3] = {1, 2, 3};
    const enum dl_member_role T = DL_MEMBER_TRAINER, C = DL_MEMBER_CLIENT, A = DL_MEMBER_AUX;
    enum dl_member_role clients[3] = {C, C, C}, aux[3] = {A, A, A}, ok[3] = {T, T, T};
    enum dl_member_role bad_role[3] = {T, (enum dl_member_role)7, T};
    CHECK(dl_balance_solve(3, b, clients, 1, w, &bound) == -1 && strstr(dl_error(), "client"));
    CHECK(dl_balance_solve(3, b, aux, 1, w, &bound) == -1);
    CHECK(dl_balance_solve(3, b, bad_role, 1, w, &bound) == -1);
    CHECK(dl_balance_solve(0, b, ok, 1, w, &bound) == -1);
    double zero_bw[3] = {1, 0, 3}, nan_bw[3] = {1, NAN, 3}, inf_bw[3] = {1, INFINITY, 3};
    CHECK(dl_balance_solve(3, zero_bw, ok, 1, w, &bound) == -1);
    CHECK(dl_balance_solve(3, nan_bw, ok, 1, w, &bound) == -1);
    CHECK(dl_balance_solve(3, inf_bw, ok, 1, w, &bound) == -1);
    CHECK(dl_balance_solve(3, b, ok, -1, w, &bound) == -1);
    CHECK(dl_balance_solve(3, b, ok, NAN, w, &bound) == -1);
}

/* Reference split with exact integers: fractions p_i / P. */
static void split_reference(size_t n, const uint64_t *p, uint64_t elements, size_t *out) {
    uint64_t P = 0, given = 0, rem[8];
    for (size_t i = 0; i < n; i++) P += p[i];
    for (size_t i = 0; i < n; i++) {
        out[i] = (size_t)(p[i] * elements / P);
        rem[i] = p[i] * elements % P;
        given += out[i];
    }
    for (uint64_t left = elements - given; left > 0; left--) {
        size_t best = 0;
        bool found = false;
        for (size_t i = 0; i < n; i++)
            if (p[i] && rem[i] != UINT64_MAX && (!found || rem[i] > rem[best])) {
                best = i;
                found = true;
            }
        out[best]++;
        rem[best] = UINT64_MAX; /* topped up */
    }
}

static void test_split(void) {
    size_t parts[8];
    double third[3] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
    dl_balance_split(3, third, 10, parts);
    CHECK(parts[0] == 4 && parts[1] == 3 && parts[2] == 3);
    double with_zero[3] = {0.5, 0, 0.5};
    dl_balance_split(3, with_zero, 7, parts);
    CHECK(parts[0] == 4 && parts[1] == 0 && parts[2] == 3);
    double none[2] = {0, 0};
    dl_balance_split(2, none, 5, parts);
    CHECK(parts[0] == 5 && parts[1] == 0);
    dl_balance_split(3, third, 0, parts);
    CHECK(parts[0] == 0 && parts[1] == 0 && parts[2] == 0);

    dl_rng rng;
    dl_rng_seed(&rng, 7);
    int mismatches = 0, bad_sums = 0, nondeterministic = 0;
    for (int rep = 0; rep < 2000; rep++) {
        size_t n = 1 + (size_t)dl_rng_below(&rng, 8);
        uint64_t p[8], P = 0;
        for (size_t i = 0; i < n; i++) {
            p[i] = dl_rng_below(&rng, 4) == 0 ? 0 : 1 + dl_rng_below(&rng, 1000);
            P += p[i];
        }
        if (!P) p[0] = P = 1;
        uint64_t elements = rep % 3 == 0 ? dl_rng_below(&rng, 20) : 1 + dl_rng_below(&rng, 50000000);
        double f[8];
        for (size_t i = 0; i < n; i++) f[i] = (double)p[i] / (double)P;
        size_t got[8], again[8], want[8];
        dl_balance_split(n, f, elements, got);
        dl_balance_split(n, f, elements, again);
        split_reference(n, p, elements, want);
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            sum += got[i];
            if (got[i] != again[i]) nondeterministic++;
        }
        if (sum != elements) bad_sums++;
        /* Doubles can only differ from exact rationals where two remainders tie
         * to within rounding; with P <= 8000 and elements < 2^26 they never do
         * except exact ties, which both break to the lower index. */
        if (memcmp(got, want, n * sizeof *got)) mismatches++;
    }
    CHECK_MSG(bad_sums == 0, "%d splits do not cover the elements exactly", bad_sums);
    CHECK(nondeterministic == 0);
    CHECK_MSG(mismatches == 0, "%d splits differ from the exact integer reference", mismatches);

    /* Split of the solver's fractions covers an odd size exactly. */
    double b[5] = {1, 3, 7, 2, 5}, w[5], bound;
    enum dl_member_role role[5] = {DL_MEMBER_TRAINER, DL_MEMBER_CLIENT, DL_MEMBER_TRAINER, DL_MEMBER_AUX,
                                   DL_MEMBER_TRAINER};
    CHECK_OK(dl_balance_solve(5, b, role, 4e6, w, &bound));
    dl_balance_split(5, w, 1000003, parts);
    size_t sum = 0;
    for (int i = 0; i < 5; i++) sum += parts[i];
    CHECK(sum == 1000003 && parts[1] == 0);
}

/* Bounded claims: one member's declared bandwidth or weight cannot take the
 * vector or the average (docs/protocol.md, "Bounded claims, leaders and roles"). */
static void test_bounded_claims(void) {
    /* Four trainers, one declaring 10^4 times the others' bandwidth: without
     * the share cap the solver gives it the whole vector (it is the only one
     * whose time does not grow); with it, at most 2 / 5. */
    double b[4] = {12.5, 12.5, 1.25e5, 12.5}, w[4], bound;
    enum dl_member_role role[4] = {DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_TRAINER, DL_MEMBER_TRAINER};
    CHECK_OK(dl_balance_solve(4, b, role, 100.0, w, &bound));
    CHECK_MSG(w[2] <= 0.4 + 1e-12, "the liar aggregates %.17g of the vector (cap 0.4)", w[2]);
    CHECK(fabs(dl_balance_share_cap(4) - 0.4) <= 1e-15 && dl_balance_share_cap(1) == 1);
    /* Clamped to 4 x the lower median; clamping twice changes nothing. */
    double mbit[4] = {100, 100, 1e6, 50};
    dl_balance_clamp_bandwidths(4, mbit);
    CHECK_MSG(mbit[2] == 400 && mbit[0] == 100 && mbit[3] == 50, "clamped to %g", mbit[2]);
    dl_balance_clamp_bandwidths(4, mbit);
    CHECK(mbit[2] == 400);
    /* Two members: the lower median is the smaller, so a liar among two
     * cannot raise its own bound. */
    double two[2] = {1e6, 10};
    dl_balance_clamp_bandwidths(2, two);
    CHECK_MSG(two[0] == 40 && two[1] == 10, "two members: %g %g", two[0], two[1]);
    /* Weights: 1e12 among 1, 2, 3 counts as 4 x 2; zeros (aux, no samples)
     * take no part in the median. */
    double weight[6] = {1, 2, 1e12, 3, 0, 0};
    dl_balance_cap_weights(6, weight);
    CHECK_MSG(weight[2] == 8 && weight[0] == 1 && weight[3] == 3 && weight[4] == 0, "capped to %g", weight[2]);
    double none[2] = {0, 0};
    dl_balance_cap_weights(2, none);
    CHECK(none[0] == 0 && none[1] == 0);
}

int main(void) {
    test_bounded_claims();
    test_equal_bandwidths();
    test_closed_forms();
    test_against_brute_force();
    test_refusals();
    test_split();
    return dl_test_finish("test_collab_balance");
}
