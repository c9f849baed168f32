/* The monitor's board and header, driven without a swarm: records go in as
 * the network thread hands them over, the view is set by hand.
 *  - a restarted peer (same peer id, its count starting over) keeps what it
 *    brought before: 992, then a restart, then 720 reads 1712, not 720;
 *  - the header's rate is the peers' measured rates when their progress
 *    records say 0 (as a trainer's do at each step change), its samples
 *    towards the step stop at the target, its target is the peers' when the
 *    monitor was not given one and the given one otherwise;
 *  - the folder of a run's files is the run id's own. */
#include <sys/stat.h>

#include "dl_test.h"
#include "monitor/monitor_internal.h"

static struct dl_metrics record(const char *peer_id, double time, double uptime, double samples_total) {
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    snprintf(m.peer_id, sizeof m.peer_id, "%s", peer_id);
    m.time = time;
    m.uptime_s = uptime;
    m.samples_total = samples_total;
    m.loss = -1;
    snprintf(m.name, sizeof m.name, "carol");
    return m;
}

static double board_total(const struct dl_monitor_state *s, const char *peer_id) {
    for (size_t i = 0; i < s->num_metrics; i++)
        if (!strcmp(s->metrics[i].peer_id, peer_id)) return dl_monitor_contributed(s, i);
    return -1;
}

static const char *A = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *B = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

static void check_restarts(struct dl_monitor_state *s) {
    /* Session 1 of A, started at t = 1000. */
    struct dl_metrics r = record(A, 1010, 10, 100);
    dl_monitor_board_note(s, &r);
    r = record(A, 1100, 100, 992);
    dl_monitor_board_note(s, &r);
    CHECK(board_total(s, A) == 992);
    /* A late answer from before does not roll it back, nor count twice. */
    r = record(A, 1050, 50, 500);
    dl_monitor_board_note(s, &r);
    CHECK(board_total(s, A) == 992);
    /* Restarted at t = 1200 with the same identity: its count starts over. */
    r = record(A, 1205, 5, 40);
    dl_monitor_board_note(s, &r);
    CHECK_MSG(board_total(s, A) == 992 + 40, "after a restart: %g", board_total(s, A));
    r = record(A, 1300, 100, 720);
    dl_monitor_board_note(s, &r);
    CHECK_MSG(board_total(s, A) == 992 + 720, "992 then 720 after a restart: %g", board_total(s, A));
    /* Seen first long after its restart (the count already past the old
     * one): the session start still tells. */
    r = record(A, 5000, 1000, 5000);
    dl_monitor_board_note(s, &r);
    CHECK(board_total(s, A) == 992 + 720 + 5000);
    /* A restart quicker than the clock slack: count and uptime both fell. */
    r = record(A, 5002, 1, 8);
    dl_monitor_board_note(s, &r);
    CHECK(board_total(s, A) == 992 + 720 + 5000 + 8);
    /* Another peer is a line of its own; a steady peer banks nothing. */
    for (int k = 1; k <= 5; k++) {
        r = record(B, 2000 + k, 100 + k, 10 * k);
        dl_monitor_board_note(s, &r);
    }
    CHECK(board_total(s, B) == 50);
    CHECK(s->num_metrics == 2);
}

static void set_view(struct dl_monitor_state *s, double now, double record_age, uint64_t epoch_b) {
    dl_swarm_view_free(&s->view);
    memset(&s->view, 0, sizeof s->view);
    s->view.peers = calloc(2, sizeof *s->view.peers);
    s->view.num_peers = 2;
    s->view.global_epoch = 7;
    const char *ids[2] = {A, B};
    for (int i = 0; i < 2; i++) {
        struct dl_swarm_peer *p = &s->view.peers[i];
        snprintf(p->peer_id, sizeof p->peer_id, "%s", ids[i]);
        p->epoch = i == 0 ? 7 : epoch_b;
        p->samples_accumulated = 0; /* just after a step change... */
        p->samples_per_second = 0;  /* ...when a trainer publishes a rate of 0 */
        p->time = now - record_age;
    }
    s->view.samples_per_second = 0;
}

static void check_header(struct dl_monitor_state *s) {
    /* Both peers measured their last step: 100 and 50 samples/s; both aim at 48. */
    for (size_t i = 0; i < s->num_metrics; i++) {
        s->metrics[i].samples_per_second = i == 0 ? 100 : 50;
        s->metrics[i].target_batch = 48;
    }
    s->target_batch = 4096; /* the default: the monitor was told nothing */
    s->target_given = false;
    double now = 10000;
    struct dl_monitor_header h;

    set_view(s, now, 0.1, 7);
    dl_monitor_header(s, now, &h);
    CHECK_MSG(h.samples_per_second == 150, "rate %g while the records say 0", h.samples_per_second);
    CHECK_MSG(h.target_batch == 48 && !strcmp(h.target_source, "peers"), "target %g (%s)", h.target_batch,
              h.target_source);
    CHECK(fabs(h.collective_samples - 15) < 1e-9); /* 0.1 s at 150 samples/s */
    CHECK(fabs(h.eta_s - 33.0 / 150) < 1e-9);

    /* Records 2 s old: 300 samples extrapolated, but the target is 48. */
    set_view(s, now, 2, 7);
    dl_monitor_header(s, now, &h);
    CHECK_MSG(h.collective_samples == 48, "samples %g / %g", h.collective_samples, h.target_batch);
    CHECK(h.eta_s == 0);

    /* A peer one epoch behind adds its rate, not its samples. */
    set_view(s, now, 0.1, 6);
    dl_monitor_header(s, now, &h);
    CHECK(h.samples_per_second == 150 && fabs(h.collective_samples - 10) < 1e-9);

    /* A target given to the monitor wins over the peers'. */
    s->target_batch = 4096;
    s->target_given = true;
    set_view(s, now, 2, 7);
    dl_monitor_header(s, now, &h);
    CHECK(h.target_batch == 4096 && !strcmp(h.target_source, "given"));
    CHECK(fabs(h.collective_samples - 300) < 1e-9);

    /* Without metrics the records' rates are all there is. */
    s->target_given = false;
    size_t kept = s->num_metrics;
    s->num_metrics = 0;
    set_view(s, now, 1, 7);
    s->view.peers[0].samples_per_second = 20;
    dl_monitor_header(s, now, &h);
    CHECK(h.samples_per_second == 20 && h.target_batch == 4096 && !strcmp(h.target_source, "default"));
    s->num_metrics = kept;
}

static void check_state_dir(void) {
    char base[] = "/tmp/dl_monitor_board_XXXXXX";
    if (!mkdtemp(base)) return;
    setenv("XDG_STATE_HOME", base, 1);
    char a[4096], b[4096], c[4096], d[4096];
    CHECK(dl_monitor_state_dir("run-one", a, sizeof a) == 0);
    CHECK(dl_monitor_state_dir("run-two", b, sizeof b) == 0);
    char want[4200];
    snprintf(want, sizeof want, "%s/dedloc/monitor/run-one", base);
    CHECK_MSG(!strcmp(a, want), "%s", a);
    struct stat st;
    CHECK(stat(a, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(strcmp(a, b) != 0);
    /* Nothing leaves the folder, and two ids that read alike stay apart. */
    CHECK(dl_monitor_state_dir("../../etc", c, sizeof c) == 0);
    CHECK(dl_monitor_state_dir("__.._etc", d, sizeof d) == 0);
    CHECK_MSG(!strstr(c + strlen(base), "/..") && strncmp(c, base, strlen(base)) == 0, "%s", c);
    CHECK(strcmp(c, d) != 0);
    CHECK(dl_monitor_state_dir("..", c, sizeof c) == 0 && !strstr(c + strlen(base), "/.."));
    /* A relative XDG_STATE_HOME is ignored (the XDG rules): HOME is used. */
    setenv("XDG_STATE_HOME", "relative", 1);
    setenv("HOME", base, 1);
    CHECK(dl_monitor_state_dir("run-one", c, sizeof c) == 0);
    snprintf(want, sizeof want, "%s/.local/state/dedloc/monitor/run-one", base);
    CHECK_MSG(!strcmp(c, want), "%s", c);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd)) {}
}

int main(void) {
    struct dl_monitor_state *s = calloc(1, sizeof *s);
    if (!s) return 1;
    check_restarts(s);
    check_header(s);
    dl_swarm_view_free(&s->view);
    free(s);
    check_state_dir();
    return dl_test_finish("test_monitor_board");
}
