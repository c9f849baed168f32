/* State transfer throughput on loopback: D donor peers and one fetcher in
 * this process (each its own dl_net and network thread), a state of
 * three buffers (parameters and two moments, --mb MiB in all), fetched
 * --repeat times. Reports MB/s of state (wall clock, best run) and MB per
 * CPU-second of this process (donors and fetcher together: encryption, net's
 * zlib attempt on every chunk, hashing, copies), which moves less than the
 * wall-clock figure on a shared machine. BENCH_STATE_IN_FLIGHT=N sets the
 * fetcher's requests in flight per donor (default 4).
 *
 *   build/bench_state [--mb N] [--chunk BYTES] [--donors D] [--repeat R] [--json] */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/util.h"

#define MAX_BENCH_DONORS 8

static dl_net *start_net(const char *initial) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "bench-state";
    cfg.listen = "127.0.0.1:0";
    cfg.initial_peers = initial;
    cfg.use_dht = false;
    cfg.min_refresh_s = 0.2;
    dl_net *net = NULL;
    return dl_net_start(&cfg, &net) ? NULL : net;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static bool connected(dl_net *net, size_t want, double seconds) {
    double end = dl_now() + seconds;
    while (dl_now() < end) {
        struct dl_swarm_view v;
        if (!dl_net_swarm_view(net, &v)) {
            size_t n = v.num_connections;
            dl_swarm_view_free(&v);
            if (n >= want) return true;
        }
        usleep(20000);
    }
    return false;
}

int main(int argc, char **argv) {
    size_t mb = 96, chunk = DL_STATE_DEFAULT_CHUNK, donors = 1, repeat = 3;
    bool json = false;
    static const struct option opts[] = {{"mb", 1, 0, 'm'},     {"chunk", 1, 0, 'c'}, {"donors", 1, 0, 'd'},
                                         {"repeat", 1, 0, 'r'}, {"json", 0, 0, 'j'},  {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 'm': mb = strtoull(optarg, &end, 10); break;
        case 'c': chunk = strtoull(optarg, &end, 10); break;
        case 'd': donors = strtoull(optarg, &end, 10); break;
        case 'r': repeat = strtoull(optarg, &end, 10); break;
        case 'j': json = true; break;
        default:
            fprintf(stderr, "usage: bench_state [--mb N] [--chunk BYTES] [--donors D] [--repeat R] [--json]\n");
            return 2;
        }
        if (end && *end) {
            fprintf(stderr, "bench_state: '%s' is not a number\n", optarg);
            return 2;
        }
    }
    if (!mb || !repeat || donors < 1 || donors > MAX_BENCH_DONORS) {
        fprintf(stderr, "bench_state: --mb and --repeat must be positive, --donors 1 .. %d\n", MAX_BENCH_DONORS);
        return 2;
    }
    dl_log_set_level(DL_LOG_WARN);
    size_t floats = mb * 1048576 / 12;
    struct dl_state_span spans[3];
    struct dl_state_buffer got[3];
    dl_rng rng;
    dl_rng_seed(&rng, 3);
    for (int b = 0; b < 3; b++) {
        float *x = dl_malloc(dl_mul_size(floats, 4));
        float *y = dl_calloc(floats, 4);
        if (!x || !y) {
            fprintf(stderr, "bench_state: %s\n", dl_error());
            return 1;
        }
        for (size_t i = 0; i < floats; i++) x[i] = 0.02f * dl_rng_normal(&rng);
        spans[b] = (struct dl_state_span){x, floats * 4};
        got[b] = (struct dl_state_buffer){y, floats * 4};
    }
    uint8_t hash[32];
    dl_collab_param_hash(spans[0].data, floats, hash);

    dl_net *donor_net[MAX_BENCH_DONORS] = {0};
    dl_state_donor *donor[MAX_BENCH_DONORS] = {0};
    char initial[1024] = "";
    const char *ids[MAX_BENCH_DONORS];
    struct dl_state_donor_config dcfg;
    dl_state_donor_config_default(&dcfg);
    dcfg.chunk_size = chunk;
    for (size_t i = 0; i < donors; i++) {
        donor_net[i] = start_net(NULL);
        if (!donor_net[i] || dl_state_donor_start(donor_net[i], &dcfg, &donor[i]) ||
            dl_state_donor_publish(donor[i], 1, spans, 3, "meta", 4)) {
            fprintf(stderr, "bench_state: donor %zu: %s\n", i, dl_error());
            return 1;
        }
        ids[i] = dl_net_peer_id(donor_net[i]);
        size_t len = strlen(initial);
        snprintf(initial + len, sizeof initial - len, "%s%s", i ? "," : "", dl_net_listen_address(donor_net[i]));
    }
    dl_net *net = start_net(initial);
    if (!net || !connected(net, donors, 20)) {
        fprintf(stderr, "bench_state: the fetcher did not reach the donors\n");
        return 1;
    }
    struct dl_state_fetch_config cfg;
    dl_state_fetch_config_default(&cfg);
    cfg.epoch = 1;
    cfg.donors = ids;
    cfg.num_donors = donors;
    cfg.expected_param_hash = hash;
    if (getenv("BENCH_STATE_IN_FLIGHT")) cfg.max_in_flight_per_donor = (size_t)atoi(getenv("BENCH_STATE_IN_FLIGHT"));
    double best = 1e30, total = 0, cpu0 = cpu_seconds();
    for (size_t r = 0; r < repeat; r++) {
        struct dl_state_fetch_result res;
        double t0 = dl_now();
        int rc = dl_state_fetch(net, &cfg, got, 3, &res);
        double t = dl_now() - t0;
        dl_state_fetch_result_free(&res);
        if (rc) {
            fprintf(stderr, "bench_state: %s\n", dl_error());
            return 1;
        }
        best = t < best ? t : best;
        total += t;
    }
    for (int b = 0; b < 3; b++)
        if (memcmp(spans[b].data, got[b].data, spans[b].size)) {
            fprintf(stderr, "bench_state: fetched bits differ\n");
            return 1;
        }
    double cpu = cpu_seconds() - cpu0;
    double bytes = 3.0 * (double)floats * 4;
    if (json)
        printf("{\"bench\":\"state\",\"mb\":%.1f,\"chunk\":%zu,\"donors\":%zu,\"repeat\":%zu,"
               "\"best_s\":%.3f,\"mean_s\":%.3f,\"best_MBps\":%.1f,\"MB_per_cpu_s\":%.1f}\n",
               bytes / 1048576, chunk, donors, repeat, best, total / (double)repeat, bytes / best / 1e6,
               bytes * (double)repeat / cpu / 1e6);
    else
        printf("state %.1f MiB, chunk %zu, %zu donor(s): best %.3f s (%.1f MB/s), mean %.3f s over %zu; "
               "%.1f MB per CPU-second\n",
               bytes / 1048576, chunk, donors, best, bytes / best / 1e6, total / (double)repeat, repeat,
               bytes * (double)repeat / cpu / 1e6);
    dl_net_stop(net);
    for (size_t i = 0; i < donors; i++) {
        dl_state_donor_stop(donor[i]);
        dl_net_stop(donor_net[i]);
    }
    for (int b = 0; b < 3; b++) {
        free((void *)spans[b].data);
        free(got[b].data);
    }
    return 0;
}
