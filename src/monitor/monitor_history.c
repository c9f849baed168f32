/* The monitor's history: JSON lines on disk (so a restarted monitor goes on
 * with its charts), a bounded, downsampled copy in memory; the file is
 * rewritten from that copy when it grows past a few times its size. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dedloc/monitor.h"

/* Halves the points, keeping every other one counted from the newest, and
 * the oldest: the chart still starts where the run started. From then on one
 * point in twice as many is kept. */
static void downsample(struct dl_monitor_history *h) {
    if (h->count < 3) return;
    size_t kept = 1; /* points[0] stays */
    for (size_t i = h->count % 2 ? 2 : 1; i < h->count; i += 2) h->points[kept++] = h->points[i];
    h->count = kept;
    h->stride *= 2;
    h->tail_age = h->stride; /* the newest kept point stays: the next one is appended */
}

/* The last slot always holds the newest point; it is kept for good (the next
 * point appended after it) once it stands for `stride` points, so the points
 * kept are evenly spaced however long the run. */
static void keep_point(struct dl_monitor_history *h, const struct dl_monitor_point *p) {
    if (h->count > 1 && h->tail_age < h->stride) {
        h->points[h->count - 1] = *p;
        h->tail_age++;
        return;
    }
    if (h->count == h->max) downsample(h);
    h->points[h->count++] = *p;
    h->tail_age = 1;
}

static double number_of(const cJSON *o, const char *name, double lo, double hi, bool *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        *ok = false;
        return 0;
    }
    return v->valuedouble;
}

static int parse_line(const char *line, struct dl_monitor_point *p) {
    cJSON *o = cJSON_Parse(line);
    bool ok = o != NULL;
    if (o) {
        p->time = number_of(o, "time", 0, 1e11, &ok);
        p->step = number_of(o, "step", 0, 9e15, &ok);
        p->loss = number_of(o, "loss", -1, 1e6, &ok);
        p->samples_per_second = number_of(o, "samples_per_second", 0, 1e15, &ok);
        p->peers_alive = number_of(o, "peers_alive", 0, 1e9, &ok);
    }
    cJSON_Delete(o);
    return ok ? 0 : -1;
}

static int write_point(FILE *f, const struct dl_monitor_point *p) {
    /* %.17g: a restarted monitor reads back the same numbers. */
    return fprintf(f,
                   "{\"time\":%.17g,\"step\":%.17g,\"loss\":%.17g,\"samples_per_second\":%.17g,\"peers_alive\":%.17g}\n",
                   p->time, p->step, p->loss, p->samples_per_second, p->peers_alive) < 0
               ? -1
               : 0;
}

/* Replaces the file by the points in memory (temporary file, fsync, rename:
 * a crash leaves the old file or the new one), then appends to the new one. */
static int compact(struct dl_monitor_history *h) {
    size_t n = strlen(h->path) + 32;
    char *tmp = dl_malloc(n);
    if (!tmp) return -1;
    snprintf(tmp, n, "%s.tmp.%ld", h->path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    int rc = out ? 0 : dl_fail("cannot write %s: %s", tmp, strerror(errno));
    for (size_t i = 0; !rc && i < h->count; i++) rc = write_point(out, &h->points[i]);
    if (out) {
        if (!rc && (fflush(out) || fsync(fileno(out)))) rc = -1;
        if (fclose(out)) rc = -1;
        if (rc) dl_fail("writing %s: %s (disk full?)", tmp, strerror(errno));
    }
    if (!rc && rename(tmp, h->path)) rc = dl_fail("cannot rename %s to %s: %s", tmp, h->path, strerror(errno));
    if (rc) {
        unlink(tmp);
    } else {
        if (h->file) fclose(h->file);
        h->file = fopen(h->path, "a");
        if (!h->file) rc = dl_fail("cannot append to the history file %s: %s", h->path, strerror(errno));
        h->file_lines = h->count;
        h->compactions++;
    }
    free(tmp);
    return rc;
}

static bool over_bound(const struct dl_monitor_history *h) {
    return h->file_lines > DL_MONITOR_HISTORY_FILE_FACTOR * h->max;
}

int dl_monitor_history_open(struct dl_monitor_history *h, const char *path, size_t max) {
    memset(h, 0, sizeof *h);
    h->max = max < 16 ? 16 : max;
    h->stride = 1;
    h->points = dl_calloc(h->max, sizeof *h->points);
    if (!h->points) return -1;
    if (!path) return 0;
    h->path = dl_strdup(path);
    if (!h->path) {
        dl_monitor_history_close(h);
        return -1;
    }
    FILE *in = fopen(path, "r");
    if (in) {
        char line[1024];
        size_t bad = 0, lineno = 0;
        while (fgets(line, sizeof line, in)) {
            lineno++;
            size_t n = strlen(line);
            if (n && line[n - 1] != '\n' && !feof(in)) {
                /* An overlong line: skip the rest of it. */
                int ch;
                while ((ch = fgetc(in)) != EOF && ch != '\n') {}
                bad++;
                continue;
            }
            struct dl_monitor_point p;
            if (parse_line(line, &p)) bad++;
            else keep_point(h, &p);
        }
        fclose(in);
        if (bad) DL_WARN("monitor", "%s: skipped %zu malformed line%s of %zu", path, bad, bad == 1 ? "" : "s", lineno);
        h->file_lines = lineno;
    }
    /* A file left long (an older monitor, a crash before a rewrite) or with
     * bad lines is rewritten now. */
    if ((over_bound(h) || h->file_lines > h->count) && compact(h)) {
        DL_WARN("monitor", "%s; appending to the history file as it is", dl_error());
        h->file_lines = 0;
    }
    int rc = 0;
    if (!h->file && !(h->file = fopen(path, "a")))
        rc = dl_fail("cannot append to the history file %s: %s (check the directory and its permissions)", path,
                     strerror(errno));
    if (rc) dl_monitor_history_close(h);
    return rc;
}

int dl_monitor_history_add(struct dl_monitor_history *h, const struct dl_monitor_point *p) {
    keep_point(h, p);
    if (!h->file) return 0;
    if (write_point(h->file, p) || fflush(h->file)) return dl_fail("writing the history file: %s", strerror(errno));
    h->file_lines++;
    if (over_bound(h) && compact(h)) {
        /* Appending goes on; the next try comes after as many lines again. */
        h->file_lines = 0;
        return dl_fail_context("rewriting the history file %s", h->path);
    }
    return 0;
}

void dl_monitor_history_close(struct dl_monitor_history *h) {
    if (h->file) fclose(h->file);
    free(h->points);
    free(h->path);
    memset(h, 0, sizeof *h);
}
