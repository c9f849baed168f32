/* Wire codec throughput: encode and decode speed of each averaging codec on
 * one core, in GB/s of fp32 input (4 bytes per value), over a vector cut into
 * chunks as the all-reduce cuts it, on every implementation (path) this CPU
 * has: scalar, and the vector one where cpuid reports it. Also the reduce's
 * step per contribution: decoding straight into a double sum (accum), and
 * decoding into floats then adding (dec+add, the unfused way), in GB/s of
 * fp32 values.
 *
 *   build/bench_codec [--elements N] [--chunk N] [--seconds S] [--cpu-time] [--best] [--json]
 *
 * --cpu-time divides by this thread's CPU time instead of wall-clock time:
 * on a shared, overloaded machine it leaves out the time the thread waited
 * for a core (caches are still shared, so figures still move). --best
 * prints each column's fastest pass over the whole vector instead of the
 * mean over all passes: where the core's other hardware thread belongs to
 * another tenant, the mean moves by 1.5x between runs of the same code, and
 * the fastest pass says what the code does when left alone (the JSON
 * carries both).
 *
 * Defaults: 16777216 elements (64 MiB of fp32), chunks of 131072 elements
 * (512 KiB of fp32), at least 1 s per measurement. Values are normal with
 * sigma 1e-3, like gradients. Prints a table, or with --json one JSON line. */
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"

#include <time.h>

static bool use_cpu_time;

static double bench_clock(void) {
    if (!use_cpu_time) return dl_now();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct codec_result {
    double encode_gbs, decode_gbs, accumulate_gbs, decode_add_gbs, ratio;
    double best_gbs[4]; /* the same four, from each phase's fastest pass over the vector */
};

/* The reduce's step as it was: decode into a chunk of floats, then add. */
static int decode_then_add(enum dl_codec_path path, int codec, const uint8_t *in, size_t size, size_t n, float *tmp,
                           double *acc) {
    if (dl_codec_decode_path(path, codec, in, size, n, tmp)) return -1;
    for (size_t e = 0; e < n; e++) acc[e] += 0.5 * (double)tmp[e];
    return 0;
}

/* Phases: encode, decode, the reduce's fused decode-and-add into a chunk of
 * doubles, and decode then add (the unfused step, for comparison). */
static int measure(enum dl_codec_path path, int codec, const float *x, float *y, uint8_t *wire, double *acc,
                   size_t elements, size_t chunk, double min_seconds, struct codec_result *r) {
    size_t chunks = (elements + chunk - 1) / chunk, stride = dl_codec_size(codec, chunk);
    size_t wire_bytes = 0;
    for (int phase = 0; phase < 4; phase++) {
        int reps = 0;
        double t0 = bench_clock(), t, fastest = INFINITY, pass_start = t0;
        do {
            for (size_t c = 0; c < chunks; c++) {
                size_t off = c * chunk, n = elements - off < chunk ? elements - off : chunk;
                size_t size = dl_codec_size(codec, n);
                const uint8_t *in = wire + c * stride;
                int rc = phase == 0   ? dl_codec_encode_path(path, codec, x + off, n, wire + c * stride)
                         : phase == 1 ? dl_codec_decode_path(path, codec, in, size, n, y + off)
                         : phase == 2 ? dl_codec_decode_accumulate_path(path, codec, in, size, n, 0.5, acc)
                                      : decode_then_add(path, codec, in, size, n, y, acc);
                if (rc) return -1;
                if (phase == 0 && reps == 0) wire_bytes += size;
            }
            reps++;
            double pass_end = bench_clock();
            if (pass_end - pass_start < fastest) fastest = pass_end - pass_start;
            pass_start = pass_end;
            t = pass_end - t0;
        } while (t < min_seconds);
        double gbs = 4.0 * (double)elements * reps / t / 1e9;
        double *slot[] = {&r->encode_gbs, &r->decode_gbs, &r->accumulate_gbs, &r->decode_add_gbs};
        *slot[phase] = gbs;
        r->best_gbs[phase] = fastest > 0 ? 4.0 * (double)elements / fastest / 1e9 : INFINITY;
    }
    r->ratio = 4.0 * (double)elements / (double)wire_bytes;
    return 0;
}

int main(int argc, char **argv) {
    size_t elements = 16777216, chunk = 131072;
    double seconds = 1;
    bool json = false, best = false;
    static const struct option opts[] = {{"elements", 1, 0, 'n'}, {"chunk", 1, 0, 'c'},    {"seconds", 1, 0, 's'},
                                         {"json", 0, 0, 'j'},     {"cpu-time", 0, 0, 't'}, {"best", 0, 0, 'b'},
                                         {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 'n': elements = strtoull(optarg, &end, 10); break;
        case 'c': chunk = strtoull(optarg, &end, 10); break;
        case 's': seconds = strtod(optarg, &end); break;
        case 'j': json = true; break;
        case 't': use_cpu_time = true; break;
        case 'b': best = true; break;
        case 'h':
            printf("usage: bench_codec [--elements N] [--chunk N] [--seconds S] [--cpu-time] [--best] [--json]\n");
            return 0;
        default: return 2;
        }
        if (end && *end) {
            fprintf(stderr, "bench_codec: '%s' is not a number\n", optarg);
            return 2;
        }
    }
    if (!elements || !chunk || !(seconds > 0)) {
        fprintf(stderr, "bench_codec: --elements, --chunk and --seconds must be positive\n");
        return 2;
    }
    size_t chunks = (elements + chunk - 1) / chunk;
    float *x = dl_malloc(dl_mul_size(elements, 4)), *y = dl_malloc(dl_mul_size(elements, 4));
    uint8_t *wire = dl_malloc(dl_mul_size(chunks, dl_codec_size(DL_CODEC_NONE, chunk)));
    double *acc = dl_calloc(chunk, sizeof(double));
    if (!x || !y || !wire || !acc) {
        fprintf(stderr, "bench_codec: %s\n", dl_error());
        return 1;
    }
    /* Touch every page first, so no measurement pays for page faults. */
    memset(y, 0, elements * 4);
    memset(wire, 0, chunks * dl_codec_size(DL_CODEC_NONE, chunk));
    dl_rng rng;
    dl_rng_seed(&rng, 1);
    for (size_t i = 0; i < elements; i++) x[i] = 1e-3f * dl_rng_normal(&rng);
    struct codec_result r[DL_CODEC_PATH_COUNT][DL_CODEC_COUNT];
    bool have[DL_CODEC_PATH_COUNT];
    for (int p = 0; p < DL_CODEC_PATH_COUNT; p++) {
        have[p] = dl_codec_path_available(p);
        for (int c = 0; have[p] && c < DL_CODEC_COUNT; c++)
            if (measure(p, c, x, y, wire, acc, elements, chunk, seconds, &r[p][c])) {
                fprintf(stderr, "bench_codec: %s on %s: %s\n", dl_codec_name(c), dl_codec_path_name(p), dl_error());
                return 1;
            }
    }
    if (json) {
        printf("{\"bench\":\"codec\",\"elements\":%zu,\"chunk\":%zu,\"clock\":\"%s\",\"best_path\":\"%s\","
               "\"codecs\":[",
               elements, chunk, use_cpu_time ? "thread_cpu" : "wall", dl_codec_path_name(dl_codec_best_path()));
        bool first = true;
        for (int p = 0; p < DL_CODEC_PATH_COUNT; p++)
            for (int c = 0; have[p] && c < DL_CODEC_COUNT; c++) {
                const double *b = r[p][c].best_gbs;
                printf("%s{\"codec\":\"%s\",\"path\":\"%s\",\"encode_gbs\":%.3f,\"decode_gbs\":%.3f,"
                       "\"accumulate_gbs\":%.3f,\"decode_add_gbs\":%.3f,\"ratio\":%.3f,\"encode_best_gbs\":%.3f,"
                       "\"decode_best_gbs\":%.3f,\"accumulate_best_gbs\":%.3f,\"decode_add_best_gbs\":%.3f}",
                       first ? "" : ",", dl_codec_name(c), dl_codec_path_name(p), r[p][c].encode_gbs,
                       r[p][c].decode_gbs, r[p][c].accumulate_gbs, r[p][c].decode_add_gbs, r[p][c].ratio, b[0],
                       b[1], b[2], b[3]);
                first = false;
            }
        printf("]}\n");
    } else {
        printf("%zu fp32 values in chunks of %zu, one thread; GB/s of fp32 input per %s second, %s; best path "
               "here: %s\n",
               elements, chunk, use_cpu_time ? "CPU" : "wall-clock",
               best ? "each column's fastest pass over the vector" : "mean over the passes",
               dl_codec_path_name(dl_codec_best_path()));
        printf("%-6s %-7s %12s %12s %12s %12s %8s\n", "codec", "path", "encode GB/s", "decode GB/s", "accum GB/s",
               "dec+add GB/s", "ratio");
        for (int c = 0; c < DL_CODEC_COUNT; c++)
            for (int p = 0; p < DL_CODEC_PATH_COUNT; p++)
                if (have[p])
                    printf("%-6s %-7s %12.2f %12.2f %12.2f %12.2f %8.2f\n", dl_codec_name(c), dl_codec_path_name(p),
                           best ? r[p][c].best_gbs[0] : r[p][c].encode_gbs,
                           best ? r[p][c].best_gbs[1] : r[p][c].decode_gbs,
                           best ? r[p][c].best_gbs[2] : r[p][c].accumulate_gbs,
                           best ? r[p][c].best_gbs[3] : r[p][c].decode_add_gbs, r[p][c].ratio);
    }
    free(x);
    free(y);
    free(wire);
    free(acc);
    return 0;
}
