/* Wire codec throughput: encode and decode speed of each averaging codec on
 * one core, in GB/s of fp32 input (4 bytes per value), over a vector cut into
 * chunks as the all-reduce cuts it.
 *
 *   build/bench_codec [--elements N] [--chunk N] [--seconds S] [--json]
 *
 * Defaults: 16777216 elements (64 MiB of fp32), chunks of 131072 elements
 * (512 KiB of fp32), at least 1 s per measurement. Values are normal with
 * sigma 1e-3, like gradients. Prints a table, or with --json one JSON line. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"

struct codec_result {
    double encode_gbs, decode_gbs, ratio;
};

static int measure(int codec, const float *x, float *y, uint8_t *wire, size_t elements, size_t chunk,
                   double min_seconds, struct codec_result *r) {
    size_t chunks = (elements + chunk - 1) / chunk, stride = dl_codec_size(codec, chunk);
    size_t wire_bytes = 0;
    for (int phase = 0; phase < 2; phase++) {
        int reps = 0;
        double t0 = dl_now(), t;
        do {
            for (size_t c = 0; c < chunks; c++) {
                size_t off = c * chunk, n = elements - off < chunk ? elements - off : chunk;
                size_t size = dl_codec_size(codec, n);
                int rc = phase == 0 ? dl_codec_encode(codec, x + off, n, wire + c * stride)
                                    : dl_codec_decode(codec, wire + c * stride, size, n, y + off);
                if (rc) return -1;
                if (phase == 0 && reps == 0) wire_bytes += size;
            }
            reps++;
            t = dl_now() - t0;
        } while (t < min_seconds);
        double gbs = 4.0 * (double)elements * reps / t / 1e9;
        if (phase == 0)
            r->encode_gbs = gbs;
        else
            r->decode_gbs = gbs;
    }
    r->ratio = 4.0 * (double)elements / (double)wire_bytes;
    return 0;
}

int main(int argc, char **argv) {
    size_t elements = 16777216, chunk = 131072;
    double seconds = 1;
    bool json = false;
    static const struct option opts[] = {{"elements", 1, 0, 'n'}, {"chunk", 1, 0, 'c'},
                                         {"seconds", 1, 0, 's'},  {"json", 0, 0, 'j'},
                                         {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 'n': elements = strtoull(optarg, &end, 10); break;
        case 'c': chunk = strtoull(optarg, &end, 10); break;
        case 's': seconds = strtod(optarg, &end); break;
        case 'j': json = true; break;
        case 'h':
            printf("usage: bench_codec [--elements N] [--chunk N] [--seconds S] [--json]\n");
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
    if (!x || !y || !wire) {
        fprintf(stderr, "bench_codec: %s\n", dl_error());
        return 1;
    }
    /* Touch every page first, so no measurement pays for page faults. */
    memset(y, 0, elements * 4);
    memset(wire, 0, chunks * dl_codec_size(DL_CODEC_NONE, chunk));
    dl_rng rng;
    dl_rng_seed(&rng, 1);
    for (size_t i = 0; i < elements; i++) x[i] = 1e-3f * dl_rng_normal(&rng);
    struct codec_result r[3];
    for (int c = 0; c <= DL_CODEC_UINT8; c++)
        if (measure(c, x, y, wire, elements, chunk, seconds, &r[c])) {
            fprintf(stderr, "bench_codec: %s: %s\n", dl_codec_name(c), dl_error());
            return 1;
        }
    if (json) {
        printf("{\"bench\":\"codec\",\"elements\":%zu,\"chunk\":%zu,\"codecs\":[", elements, chunk);
        for (int c = 0; c <= DL_CODEC_UINT8; c++)
            printf("%s{\"codec\":\"%s\",\"encode_gbs\":%.3f,\"decode_gbs\":%.3f,\"ratio\":%.3f}", c ? "," : "",
                   dl_codec_name(c), r[c].encode_gbs, r[c].decode_gbs, r[c].ratio);
        printf("]}\n");
    } else {
        printf("%zu fp32 values in chunks of %zu, one thread; GB/s of fp32 input\n", elements, chunk);
        printf("%-6s %12s %12s %8s\n", "codec", "encode GB/s", "decode GB/s", "ratio");
        for (int c = 0; c <= DL_CODEC_UINT8; c++)
            printf("%-6s %12.2f %12.2f %8.2f\n", dl_codec_name(c), r[c].encode_gbs, r[c].decode_gbs, r[c].ratio);
    }
    free(x);
    free(y);
    free(wire);
    return 0;
}
