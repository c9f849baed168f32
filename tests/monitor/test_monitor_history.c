/* The monitor's history stays bounded over a long run: a synthetic run of
 * many points (fed directly, as the monitor's tick would) keeps at most
 * --history-points in memory and a few times that on disk, always with the
 * run's first and newest points and the shape in between; a restarted
 * monitor reads the same bounds back, and a long file left by an older
 * monitor is rewritten at start. The expected values come from the points
 * the test itself made (time = index), not from the history code. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/monitor.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define MAX_POINTS 64
#define FILE_BOUND (DL_MONITOR_HISTORY_FILE_FACTOR * MAX_POINTS)

static const char *path = "test_monitor_history.jsonl";

static struct dl_monitor_point point(size_t i) {
    return (struct dl_monitor_point){(double)i, (double)(i / 10), i % 7 ? 3.0 + 1.0 / (double)(i + 1) : -1,
                                  (double)(i % 100), (double)(1 + i % 3)};
}

/* Lines in the file, counted independently of the history code. */
static size_t file_lines(void) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* In memory: bounded, in order, oldest (0) and newest (last) kept, values
 * exact, and every quarter of the run still has points (the shape). */
static void check_points(const struct dl_monitor_history *h, size_t fed, const char *what) {
    CHECK_MSG(h->count >= MAX_POINTS / 2 && h->count <= MAX_POINTS, "%s: %zu points in memory", what, h->count);
    if (h->count == 0) return;
    CHECK_MSG(h->points[0].time == 0, "%s: the oldest point is %g, not 0", what, h->points[0].time);
    CHECK_MSG(h->points[h->count - 1].time == (double)(fed - 1), "%s: the newest point is %g, not %zu", what,
              h->points[h->count - 1].time, fed - 1);
    bool ordered = true, exact = true;
    int quarters[4] = {0};
    for (size_t i = 0; i < h->count; i++) {
        const struct dl_monitor_point *p = &h->points[i];
        if (i && !(p->time > h->points[i - 1].time)) ordered = false;
        struct dl_monitor_point want = point((size_t)p->time);
        if (memcmp(p, &want, sizeof want)) exact = false;
        int q = (int)(4 * p->time / (double)fed);
        if (q >= 0 && q < 4) quarters[q]++;
    }
    CHECK_MSG(ordered, "%s: points out of order", what);
    CHECK_MSG(exact, "%s: a point's values changed", what);
    for (int q = 0; q < 4; q++) CHECK_MSG(quarters[q] > 0, "%s: no point in quarter %d of the run", what, q);
}

int main(void) {
    /* Memory only: 200000 points into 64 slots. */
    struct dl_monitor_history h;
    CHECK_OK(dl_monitor_history_open(&h, NULL, MAX_POINTS));
    for (size_t i = 0; i < 200000; i++) {
        struct dl_monitor_point p = point(i);
        dl_monitor_history_add(&h, &p);
    }
    check_points(&h, 200000, "memory only");
    dl_monitor_history_close(&h);

    /* With a file: 30000 points; the file never holds more than the bound. */
    unlink(path);
    CHECK_OK(dl_monitor_history_open(&h, path, MAX_POINTS));
    size_t worst_lines = 0;
    bool add_ok = true;
    for (size_t i = 0; i < 30000; i++) {
        struct dl_monitor_point p = point(i);
        if (dl_monitor_history_add(&h, &p)) add_ok = false;
        if (i % 97 == 0) {
            size_t n = file_lines();
            if (n > worst_lines) worst_lines = n;
        }
    }
    CHECK(add_ok);
    CHECK_MSG(worst_lines <= FILE_BOUND && file_lines() <= FILE_BOUND, "the file reached %zu lines (bound %d)",
              worst_lines, FILE_BOUND);
    CHECK_MSG(h.compactions >= 30000 / FILE_BOUND / 2, "only %zu rewrites of the file", h.compactions);
    CHECK(h.file_lines == file_lines());
    check_points(&h, 30000, "with a file");
    dl_monitor_history_close(&h);
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0); /* no temporary file left behind */

    /* A restart reads it back: same bounds, same ends. */
    CHECK_OK(dl_monitor_history_open(&h, path, MAX_POINTS));
    check_points(&h, 30000, "after a restart");
    CHECK(file_lines() <= FILE_BOUND);
    dl_monitor_history_close(&h);

    /* A long file from an older monitor (every point kept), with malformed
     * lines: read, downsampled, and rewritten at start. */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        for (size_t i = 0; i < 50000; i++) {
            struct dl_monitor_point p = point(i);
            fprintf(f, "{\"time\":%.17g,\"step\":%.17g,\"loss\":%.17g,\"samples_per_second\":%.17g,\"peers_alive\":%.17g}\n",
                    p.time, p.step, p.loss, p.samples_per_second, p.peers_alive);
            if (i == 100) fprintf(f, "{\"time\": \"garbage\"}\n");
            if (i == 200) fprintf(f, "%s\n", "not json");
        }
        fclose(f);
    }
    CHECK_OK(dl_monitor_history_open(&h, path, MAX_POINTS));
    check_points(&h, 50000, "from a long file");
    CHECK_MSG(file_lines() == h.count, "the long file was not rewritten (%zu lines, %zu points)", file_lines(), h.count);
    CHECK(h.compactions == 1);
    dl_monitor_history_close(&h);
    unlink(path);
    return dl_test_finish("test_monitor_history");
}
