/* `dedloc bench allreduce` runs end to end with 3 small peers (one a client)
 * and prints its JSON: every peer finished each round with the same bits,
 * the figures follow from each other (busbw = algbw 2(n-1)/n, efficiency =
 * bound / time), the byte counts match what the group must move. Times are
 * only required to be positive: tests never judge wall-clock time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "dedloc/util.h"
#include "dl_test.h"

static double num(const cJSON *o, const char *key) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key)); }

int main(void) {
    char dir[] = "/tmp/dedloc_bench_allreduce_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cmd[2048], path[256];
    snprintf(path, sizeof path, "%s/out.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s bench allreduce --peers 3 --size 300001 --compression none --bandwidths 400,200 --client-mode 1 "
             "--rounds 2 --json >%s 2>%s/log",
             DEDLOC_BINARY, path, dir);
    int status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        /* What the bench said, to tell a failed round from a failed start. */
        char show[600];
        snprintf(show, sizeof show, "grep -v ' INFO ' %s/log | tail -n 25 >&2", dir);
        if (system(show)) fprintf(stderr, "(no bench log)\n");
    }
    char *text = NULL;
    size_t size;
    CHECK_OK(dl_read_file(path, 1 << 24, &text, &size));
    cJSON *json = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(json != NULL && cJSON_GetArraySize(json) == 2, "no valid JSON of 2 rounds: %.200s", text ? text : "");
    for (int r = 0; json && r < cJSON_GetArraySize(json); r++) {
        const cJSON *row = cJSON_GetArrayItem(json, r);
        double t = num(row, "time_s"), algbw = num(row, "algbw_bytes_per_s"), busbw = num(row, "busbw_bytes_per_s");
        CHECK(num(row, "members") == 3 && num(row, "ok") == 3 && num(row, "distinct_results") == 1);
        CHECK(t > 0 && isfinite(t));
        CHECK(fabs(algbw - 300001 * 4.0 / t) <= 1e-6 * algbw);
        CHECK(fabs(busbw - algbw * 2 * 2 / 3) <= 1e-6 * busbw);
        CHECK(fabs(num(row, "efficiency") - num(row, "lp_bound_s") / t) <= 1e-9);
        CHECK(num(row, "lp_bound_s") > 0);
        CHECK(num(row, "peak_rss_bytes_max") > 300001 * 4.0);
        /* The client aggregates nothing; it sends the whole vector once
         * (plus 24-byte chunk headers), the others also return results. */
        const cJSON *peers = cJSON_GetObjectItem(row, "peers");
        int clients = 0;
        for (int i = 0; i < cJSON_GetArraySize(peers); i++) {
            const cJSON *p = cJSON_GetArrayItem(peers, i);
            int me = (int)num(p, "my_index");
            const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "members"), me);
            if (num(m, "role") != 1) continue;
            clients++;
            CHECK(num(m, "part_elems") == 0);
            /* A chunk that reached its aggregator before the group record
             * did is refused and sent again: real traffic, reported apart. */
            double sent = num(p, "bytes_sent"), resent = num(p, "bytes_resent");
            CHECK(resent >= 0 && resent <= sent);
            CHECK_MSG(sent - resent >= 300001 * 4.0 && sent - resent < 300001 * 4.0 + 4096,
                      "client sent %.0f bytes, %.0f of them again", sent, resent);
        }
        CHECK(clients == 1);
    }
    cJSON_Delete(json);
    free(text);
    /* A list of codecs: one run each, rows in the order given, with the
     * traffic per peer and per parameter. */
    snprintf(cmd, sizeof cmd,
             "%s bench allreduce --peers 3 --size 300001 --compression int8,topk --bandwidths 400 --rounds 1 "
             "--json >%s 2>%s/log",
             DEDLOC_BINARY, path, dir);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(dl_read_file(path, 1 << 24, &text, &size));
    json = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(json != NULL && cJSON_GetArraySize(json) == 2, "no valid JSON of 2 runs: %.200s", text ? text : "");
    double bits[2] = {0, 0};
    for (int r = 0; json && r < cJSON_GetArraySize(json) && r < 2; r++) {
        const cJSON *row = cJSON_GetArrayItem(json, r);
        const char *codec = cJSON_GetStringValue(cJSON_GetObjectItem(row, "compression"));
        CHECK(codec && !strcmp(codec, r ? "topk" : "int8"));
        CHECK(num(row, "ok") == 3 && num(row, "distinct_results") == 1);
        bits[r] = num(row, "sent_bits_per_param");
        CHECK(fabs(bits[r] - num(row, "bytes_sent_mean") * 8 / 300001) <= 1e-9 * bits[r]);
        CHECK(num(row, "bytes_sent_mean") <= num(row, "bytes_sent_max"));
    }
    /* int8 moves 8 bits per value each way; topk 0.23 out and sparse fp16 back */
    CHECK_MSG(bits[0] > 8 * 2 * 2 / 3.0 * 0.99 && bits[1] > 0 && bits[1] < bits[0] / 3, "int8 %.3f, topk %.3f bits",
              bits[0], bits[1]);
    cJSON_Delete(json);
    free(text);
    snprintf(cmd, sizeof cmd, "%s bench allreduce --compression none,zip 2>/dev/null", DEDLOC_BINARY);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(cmd, sizeof cmd, "%s bench allreduce --peers 1 2>/dev/null", DEDLOC_BINARY);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(cmd, sizeof cmd, "%s bench allreduce --compression zip 2>/dev/null", DEDLOC_BINARY);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_bench_allreduce");
}
