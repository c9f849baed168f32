/* dedloc monitor against a small live swarm on loopback: two `dedloc peer`
 * processes publishing fake progress and metrics (test builds), one monitor.
 * Checks /api/status and /api/history (schema and numbers against what the
 * peers were told to publish), /metrics (parsed here as Prometheus text),
 * the page, the history file across a restart, and that bad HTTP input
 * (huge headers, garbage, POST, slow and idle clients) leaves it serving. */
#include "dl_test.h"
#include "monitor/monitor_swarm.h"

static void check_status_schema(const cJSON *s) {
    const char *numbers[] = {"time", "global_epoch", "target_batch", "collective_samples", "samples_per_second",
                             "eta_s", "round_s", "peers_alive", "loss"};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        CHECK_MSG(cJSON_IsNumber(item(s, numbers[i])), "/api/status: %s is not a number", numbers[i]);
    CHECK(cJSON_IsString(item(s, "run_id")) && !strcmp(item(s, "run_id")->valuestring, "monitor-test"));
    CHECK(cJSON_IsString(item(s, "monitor_peer_id")));
    CHECK(cJSON_IsArray(item(s, "peers")) && cJSON_GetArraySize(item(s, "peers")) == 2);
    CHECK(cJSON_IsArray(item(s, "leaderboard")) && cJSON_GetArraySize(item(s, "leaderboard")) == 2);
    const cJSON *p;
    cJSON_ArrayForEach(p, item(s, "peers")) {
        const char *peer_numbers[] = {"epoch", "samples_accumulated", "samples_per_second", "last_seen_s"};
        for (size_t i = 0; i < 4; i++) CHECK(cJSON_IsNumber(item(p, peer_numbers[i])));
        const cJSON *m = item(p, "metrics");
        const char *metric_numbers[] = {"time", "step", "loss", "samples_per_second", "samples_total", "uptime_s"};
        for (size_t i = 0; i < 6; i++) CHECK(cJSON_IsNumber(item(m, metric_numbers[i])));
        const char *metric_strings[] = {"device", "vendor", "precision", "name"};
        for (size_t i = 0; i < 4; i++) CHECK(cJSON_IsString(item(m, metric_strings[i])));
    }
}

/* The numbers the peers were told to publish (the independent reference):
 * peer 0 epoch 3, 10 samples/s, loss 2.5, "alice"; peer 1 epoch 3, 5
 * samples/s, loss 3.5, "bob". */
static void check_status_numbers(const cJSON *s) {
    CHECK(json_num(s, "global_epoch") == 3);
    CHECK(json_num(s, "samples_per_second") == 15);
    CHECK(json_num(s, "loss") == 3.0);
    CHECK(json_num(s, "target_batch") == 4096);
    const double sps[2] = {10, 5}, loss[2] = {2.5, 3.5};
    const char *names[2] = {"alice", "bob"};
    for (int i = 0; i < 2; i++) {
        const cJSON *p = find_peer(s, peers[i].peer_id);
        const cJSON *m = item(p, "metrics");
        CHECK(json_num(p, "samples_per_second") == sps[i]);
        CHECK(json_num(p, "epoch") == 3);
        CHECK(json_num(m, "loss") == loss[i]);
        CHECK(json_num(m, "step") == 3);
        CHECK(cJSON_IsString(item(m, "name")) && !strcmp(item(m, "name")->valuestring, names[i]));
        CHECK(cJSON_IsString(item(m, "device")) && !strcmp(item(m, "device")->valuestring, "fake"));
    }
    /* The leaderboard is sorted by samples contributed, largest first. */
    const cJSON *board = item(s, "leaderboard");
    double prev = INFINITY;
    const cJSON *e;
    cJSON_ArrayForEach(e, board) {
        CHECK(json_num(e, "samples_total") <= prev);
        prev = json_num(e, "samples_total");
    }
}

/* ---- a small Prometheus text parser, written from the format's description ---- */
struct prom_sample {
    char name[64];
    char labels[160];
    double value;
};

static int prom_parse(const char *text, struct prom_sample *out, int max, int *bad) {
    int n = 0;
    char typed[64][64];
    int ntyped = 0;
    *bad = 0;
    const char *line = text;
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[512];
        if (len >= sizeof buf) {
            (*bad)++;
        } else {
            memcpy(buf, line, len);
            buf[len] = 0;
            char name[64], type[32];
            if (buf[0] == '#') {
                if (sscanf(buf, "# TYPE %63s %31s", name, type) == 2 && ntyped < 64) {
                    bool known = !strcmp(type, "gauge") || !strcmp(type, "counter");
                    if (!known) (*bad)++;
                    snprintf(typed[ntyped++], 64, "%s", name);
                }
            } else if (len && n < max) {
                struct prom_sample *s = &out[n];
                memset(s, 0, sizeof *s);
                size_t i = strspn(buf, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:0123456789");
                snprintf(s->name, sizeof s->name, "%.*s", (int)i, buf);
                const char *rest = buf + i;
                if (*rest == '{') {
                    const char *close = strchr(rest, '}');
                    if (!close) {
                        (*bad)++;
                        goto next;
                    }
                    snprintf(s->labels, sizeof s->labels, "%.*s", (int)(close - rest - 1), rest + 1);
                    rest = close + 1;
                }
                char *end;
                if (*rest != ' ') (*bad)++;
                s->value = strtod(rest, &end);
                if (end == rest || *end) (*bad)++;
                bool has_type = false;
                for (int t = 0; t < ntyped; t++) has_type |= !strcmp(typed[t], s->name);
                if (!has_type || !i) (*bad)++;
                n++;
            }
        }
    next:
        if (!nl) break;
        line = nl + 1;
    }
    return n;
}

static double prom_value(const struct prom_sample *s, int n, const char *name, const char *label_part) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s[i].name, name) && (!label_part || strstr(s[i].labels, label_part))) return s[i].value;
    return NAN;
}

static void check_prometheus(void) {
    char *body = NULL;
    CHECK(http_get("/metrics", &body) == 200);
    if (!body) return;
    struct prom_sample samples[64];
    int bad;
    int n = prom_parse(body, samples, 64, &bad);
    CHECK_MSG(bad == 0, "%d malformed Prometheus lines in:\n%s", bad, body);
    CHECK(n >= 6);
    CHECK(prom_value(samples, n, "dedloc_step", NULL) == 3);
    CHECK(prom_value(samples, n, "dedloc_loss", NULL) == 3);
    CHECK(prom_value(samples, n, "dedloc_peers_alive", NULL) == 2);
    CHECK(prom_value(samples, n, "dedloc_samples_per_second", NULL) == 15);
    CHECK(prom_value(samples, n, "dedloc_round_seconds", NULL) >= 0);
    char label[64];
    snprintf(label, sizeof label, "peer=\"%s\"", peers[0].peer_id);
    CHECK(prom_value(samples, n, "dedloc_peer_samples_per_second", label) == 10);
    CHECK(prom_value(samples, n, "dedloc_peer_loss", label) == 2.5);
    snprintf(label, sizeof label, "peer=\"%s\"", peers[1].peer_id);
    CHECK(prom_value(samples, n, "dedloc_peer_samples_per_second", label) == 5);
    CHECK(prom_value(samples, n, "dedloc_peer_loss", label) == 3.5);
    free(body);
}

static void check_page(void) {
    char *body = NULL;
    CHECK(http_get("/", &body) == 200);
    CHECK(body && strstr(body, "<canvas id=\"chart-loss\"") && strstr(body, "<table id=\"peers\""));
    CHECK(body && !strstr(body, "http://") && !strstr(body, "https://")); /* nothing fetched from elsewhere */
    free(body);
    CHECK(http_get("/chart.min.js", &body) == 200);
    CHECK(body && strstr(body, "Chart.js") != NULL);
    free(body);
    CHECK(http_get("/no-such-page", NULL) == 404);
}

/* Every request here is bad in its own way; the monitor must answer or drop
 * it and go on serving. */
static void check_bad_input(void) {
    /* Idle connections and a client that never finishes its request. */
    int idle[20];
    for (int i = 0; i < 20; i++) idle[i] = connect_monitor();
    int slow = connect_monitor();
    CHECK(slow >= 0 && send(slow, "GET /api/sta", 12, MSG_NOSIGNAL) == 12);

    size_t huge_size = 64 * 1024;
    char *huge = malloc(huge_size + 64);
    if (huge) {
        int n = snprintf(huge, 64, "GET / HTTP/1.1\r\nX-Big: ");
        memset(huge + n, 'a', huge_size);
        memcpy(huge + n + huge_size, "\r\n\r\n", 4);
        int st = http_raw(huge, (size_t)n + huge_size + 4, NULL);
        CHECK_MSG(st == 0 || (st >= 400 && st < 500), "huge header answered %d", st);
        free(huge);
    }
    const char garbage[] = "\x01\x02\xff garbage \r\n\r\n";
    int st = http_raw(garbage, sizeof garbage - 1, NULL);
    CHECK_MSG(st == 0 || (st >= 400 && st < 500), "garbage answered %d", st);
    const char post[] = "POST /api/status HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    st = http_raw(post, sizeof post - 1, NULL);
    CHECK_MSG(st == 405 || st == 413, "POST answered %d", st);
    const char long_path_head[] = "GET /";
    char long_path[9000];
    memcpy(long_path, long_path_head, 5);
    memset(long_path + 5, 'x', 8000);
    memcpy(long_path + 8005, " HTTP/1.1\r\n\r\n", 14);
    st = http_raw(long_path, strlen(long_path), NULL);
    CHECK_MSG(st == 0 || (st >= 400 && st < 500), "a long path answered %d", st);

    /* Still serving, with the slow and idle clients still connected. */
    cJSON *s = get_json("/api/status");
    CHECK(s && json_num(s, "peers_alive") == 2);
    cJSON_Delete(s);
    for (int i = 0; i < 20; i++)
        if (idle[i] >= 0) close(idle[i]);
    if (slow >= 0) close(slow);
}

/* 40 old points (time 1000..1039, no loss), with malformed lines among them. */
static void write_old_history(void) {
    FILE *f = fopen(history_path, "w");
    if (!f) return;
    for (int i = 0; i < 40; i++) {
        fprintf(f, "{\"time\":%d,\"step\":%d,\"loss\":-1,\"samples_per_second\":7,\"peers_alive\":1}\n", 1000 + i, i);
        if (i == 10) fprintf(f, "not json at all\n");
        if (i == 20) fprintf(f, "{\"time\":1002,\"step\":\"two\"}\n");
    }
    fclose(f);
}

struct history_summary {
    int count;
    double first, last;
    bool increasing, old_loss_null;
};

/* /api/history, schema-checked and summed up. */
static struct history_summary history_summary(void) {
    struct history_summary h = {-1, 0, 0, true, true};
    cJSON *j = get_json("/api/history");
    const cJSON *points = item(j, "points");
    h.count = cJSON_IsArray(points) ? cJSON_GetArraySize(points) : -1;
    double prev = -1;
    const cJSON *p;
    cJSON_ArrayForEach(p, points) {
        CHECK(cJSON_IsNumber(item(p, "time")) && cJSON_IsNumber(item(p, "step")) &&
              cJSON_IsNumber(item(p, "samples_per_second")) && cJSON_IsNumber(item(p, "peers_alive")));
        CHECK(cJSON_IsNumber(item(p, "loss")) || cJSON_IsNull(item(p, "loss")));
        double t = json_num(p, "time");
        if (!(t > prev)) h.increasing = false;
        if (t < 2000 && !cJSON_IsNull(item(p, "loss"))) h.old_loss_null = false;
        if (prev < 0) h.first = t;
        prev = t;
    }
    h.last = prev;
    cJSON_Delete(j);
    return h;
}

int main(void) {
    swarm_names("monitor_http");
    unlink(history_path);
    write_old_history();
    if (start_swarm()) return 1;
    cJSON *status = wait_for_full_status();
    CHECK_MSG(status != NULL, "the monitor never saw both peers with their metrics");
    if (status) {
        check_status_schema(status);
        check_status_numbers(status);
    }
    cJSON_Delete(status);
    check_prometheus();
    check_page();
    check_bad_input();

    /* --history-points 16: the 40 old points and the new ones, downsampled
     * to at most 16, in order, the newest kept. */
    usleep(1500000); /* a few live points (every 0.5 s) */
    struct history_summary before = history_summary();
    CHECK_MSG(before.count >= 3 && before.count <= 16, "history holds %d points", before.count);
    CHECK(before.increasing && before.old_loss_null);
    CHECK(before.first == 1000); /* the file's oldest point stays */
    CHECK(before.last > 1e9);                            /* and live ones after them */

    /* A restarted monitor goes on with the history it wrote. */
    kill(monitor_pid, SIGTERM);
    waitpid(monitor_pid, NULL, 0);
    monitor_pid = 0;
    CHECK(start_monitor(peers[0].listen));
    struct history_summary after = history_summary();
    CHECK_MSG(after.count >= 3 && after.count <= 16, "history after restart: %d points", after.count);
    CHECK(after.increasing && after.old_loss_null);
    CHECK(after.first == 1000);
    CHECK(after.last >= before.last);
    stop_swarm();
    return dl_test_finish("test_monitor_http");
}
