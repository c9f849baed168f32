/* What the monitor makes of the records it holds: the contributors' board
 * (samples per peer id, across restarts of that peer) and the header of the
 * run (target batch, samples towards the next step, samples/s, ETA). Lock
 * held by the callers (monitor_internal.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "monitor/monitor_internal.h"

/* A record whose session began (time - uptime) this much later than the one
 * before it comes from a restarted peer. Both clocks are the peer's, read at
 * the same moment, so they agree to far better than this; the margin is for
 * a wall clock stepped by NTP. */
#define RESTART_SLACK_S 5.0

static double session_start(const struct dl_metrics *m) { return m->time - m->uptime_s; }

/* A peer's samples_total counts from its own start: when it restarts (same
 * identity, same peer id) the count starts over, and what it brought before
 * is banked here. A restart shows as a later session start, or, for one
 * quicker than the slack, as a count and an uptime that both went down. */
static bool restarted(const struct dl_metrics *before, const struct dl_metrics *now) {
    if (session_start(now) > session_start(before) + RESTART_SLACK_S) return true;
    return now->samples_total < before->samples_total && now->uptime_s < before->uptime_s;
}

void dl_monitor_board_note(struct dl_monitor_state *s, const struct dl_metrics *m) {
    struct dl_metrics *slot = (struct dl_metrics *)dl_monitor_find_metrics(s, m->peer_id);
    if (!slot) {
        if (s->num_metrics >= DL_MONITOR_MAX_METRICS) return;
        slot = &s->metrics[s->num_metrics];
        s->banked[s->num_metrics] = 0;
        s->num_metrics++;
        *slot = *m;
        return;
    }
    /* Keep the newest only: a late answer must not roll a peer back. */
    if (m->time < slot->time) return;
    if (restarted(slot, m)) s->banked[slot - s->metrics] += slot->samples_total;
    *slot = *m;
}

double dl_monitor_contributed(const struct dl_monitor_state *s, size_t i) {
    return s->banked[i] + s->metrics[i].samples_total;
}

/* A peer's samples/s: its metrics record's, measured over its last step,
 * when there is one. Its progress record's rate is not enough alone: a
 * trainer publishes 0 at each step change, at once, and its measured rate
 * only with a later refresh (up to 10 s on), so with steps of a few seconds
 * the records say 0 most of the time. */
static double peer_rate(const struct dl_monitor_state *s, const struct dl_swarm_peer *p) {
    const struct dl_metrics *m = dl_monitor_find_metrics(s, p->peer_id);
    return m && m->samples_per_second > 0 ? m->samples_per_second : p->samples_per_second;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The target batch most alive peers announce in their metrics (the larger
 * on a tie); 0 when none does. */
static double announced_target(const struct dl_monitor_state *s) {
    const struct dl_swarm_view *v = &s->view;
    double *values = dl_calloc(v->num_peers + 1, sizeof *values);
    if (!values) return 0;
    size_t n = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_metrics *m = dl_monitor_find_metrics(s, v->peers[i].peer_id);
        if (m && m->target_batch > 0) values[n++] = m->target_batch;
    }
    qsort(values, n, sizeof *values, by_value);
    double best = 0;
    size_t best_run = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && values[j] == values[i]) j++;
        if (j - i >= best_run) {
            best_run = j - i;
            best = values[i];
        }
        i = j;
    }
    free(values);
    return best;
}

void dl_monitor_header(const struct dl_monitor_state *s, double now_wall, struct dl_monitor_header *h) {
    memset(h, 0, sizeof *h);
    const struct dl_swarm_view *v = &s->view;
    h->target_batch = s->target_batch;
    h->target_source = "default";
    if (s->target_given) {
        h->target_source = "given";
    } else {
        double announced = announced_target(s);
        if (announced > 0) {
            h->target_batch = announced;
            h->target_source = "peers";
        }
    }
    double collective = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        double rate = peer_rate(s, p);
        h->samples_per_second += rate;
        if (p->epoch != v->global_epoch) continue;
        double elapsed = now_wall - p->time;
        collective += p->samples_accumulated + (elapsed > 0 ? elapsed : 0) * rate;
    }
    /* Past the target the peers are forming the round: samples beyond it
     * are not "towards the next step" (and an estimate extrapolated from
     * records of a step that is averaging would climb without end). */
    h->collective_samples = collective < h->target_batch ? collective : h->target_batch;
    double remaining = h->target_batch - h->collective_samples;
    if (remaining <= 0) h->eta_s = 0;
    else if (h->samples_per_second > 0) h->eta_s = remaining / h->samples_per_second;
    else h->eta_s = -1;
}
