/* The monitor's history: JSON lines on disk (so a restarted monitor goes on
 * with its charts), a bounded, downsampled copy in memory. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/monitor.h"
#include "dedloc/util.h"

/* Halves the points, keeping every other one (the newest always stays). */
static void downsample(struct monitor_history *h) {
    size_t kept = 0;
    for (size_t i = h->count % 2 ? 0 : 1; i < h->count; i += 2) h->points[kept++] = h->points[i];
    h->count = kept;
}

static void keep_point(struct monitor_history *h, const struct monitor_point *p) {
    if (h->count == h->max) downsample(h);
    h->points[h->count++] = *p;
}

static double number_of(const cJSON *o, const char *name, double lo, double hi, bool *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        *ok = false;
        return 0;
    }
    return v->valuedouble;
}

static int parse_line(const char *line, struct monitor_point *p) {
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

int monitor_history_open(struct monitor_history *h, const char *path, size_t max) {
    memset(h, 0, sizeof *h);
    h->max = max < 16 ? 16 : max;
    h->points = dl_calloc(h->max, sizeof *h->points);
    if (!h->points) return -1;
    if (!path) return 0;
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
            struct monitor_point p;
            if (parse_line(line, &p)) bad++;
            else keep_point(h, &p);
        }
        fclose(in);
        if (bad) DL_WARN("monitor", "%s: skipped %zu malformed line%s of %zu", path, bad, bad == 1 ? "" : "s", lineno);
    }
    h->file = fopen(path, "a");
    if (!h->file) {
        int rc = dl_fail("cannot append to the history file %s: %s (check the directory and its permissions)", path,
                         strerror(errno));
        free(h->points);
        h->points = NULL;
        return rc;
    }
    return 0;
}

int monitor_history_add(struct monitor_history *h, const struct monitor_point *p) {
    keep_point(h, p);
    if (!h->file) return 0;
    /* %.17g: a restarted monitor reads back the same numbers. */
    fprintf(h->file,
            "{\"time\":%.17g,\"step\":%.17g,\"loss\":%.17g,\"samples_per_second\":%.17g,\"peers_alive\":%.17g}\n",
            p->time, p->step, p->loss, p->samples_per_second, p->peers_alive);
    if (fflush(h->file)) return dl_fail("writing the history file: %s", strerror(errno));
    return 0;
}

void monitor_history_close(struct monitor_history *h) {
    if (h->file) fclose(h->file);
    free(h->points);
    memset(h, 0, sizeof *h);
}
