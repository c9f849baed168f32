/* Every codec path against the scalar one: the same return code, the same
 * error message, the same encoded bytes and the same decoded bits, on random
 * and edge inputs (NaN, Inf, -0, fp32 and fp16 subnormals, the fp16 clamp,
 * every tie between two fp16 values, every fp16 value), in both directions,
 * at lengths that leave every possible tail after the vector blocks. A path
 * this CPU lacks is reported and skipped; the scalar path always runs. */
#include <float.h>
#include <stdint.h>

#include "collab/wirecodec.h"
#include "dedloc/util.h"
#include "dl_test.h"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Encodes x on `path` and on the scalar path; returns the number of
 * disagreements (result, message or bytes) and prints the first. */
static size_t compare_encode(enum dl_codec_path path, enum dl_codec codec, const float *x, size_t n,
                             const char *what) {
    size_t size = dl_codec_size(codec, n);
    uint8_t *want = malloc(size + 1), *got = malloc(size + 1);
    /* Poisoned differently, so that a byte one path leaves unwritten shows. */
    memset(want, 0xA5, size + 1);
    memset(got, 0x5A, size + 1);
    char want_msg[512] = "";
    int want_rc = dl_codec_encode_path(DL_CODEC_PATH_SCALAR, codec, x, n, want);
    if (want_rc) snprintf(want_msg, sizeof want_msg, "%s", dl_error());
    int got_rc = dl_codec_encode_path(path, codec, x, n, got);
    size_t bad = 0;
    if (got_rc != want_rc || (got_rc && strcmp(dl_error(), want_msg))) {
        fprintf(stderr, "%s: %s encode on %s returned %d (%s), scalar %d (%s)\n", what, dl_codec_name(codec),
                dl_codec_path_name(path), got_rc, got_rc ? dl_error() : "", want_rc, want_msg);
        bad++;
    } else if (!want_rc) {
        for (size_t i = 0; i < size; i++)
            if (got[i] != want[i] && bad++ == 0)
                fprintf(stderr, "%s: %s encode on %s: byte %zu of %zu is %02x, scalar %02x\n", what,
                        dl_codec_name(codec), dl_codec_path_name(path), i, size, got[i], want[i]);
    }
    free(want);
    free(got);
    return bad;
}

static size_t compare_decode(enum dl_codec_path path, enum dl_codec codec, const uint8_t *in, size_t n,
                             const char *what) {
    size_t size = dl_codec_size(codec, n);
    float *want = malloc(4 * n + 4), *got = malloc(4 * n + 4);
    memset(want, 0xA5, 4 * n + 4);
    memset(got, 0x5A, 4 * n + 4);
    char want_msg[512] = "";
    int want_rc = dl_codec_decode_path(DL_CODEC_PATH_SCALAR, codec, in, size, n, want);
    if (want_rc) snprintf(want_msg, sizeof want_msg, "%s", dl_error());
    int got_rc = dl_codec_decode_path(path, codec, in, size, n, got);
    size_t bad = 0;
    if (got_rc != want_rc || (got_rc && strcmp(dl_error(), want_msg))) {
        fprintf(stderr, "%s: %s decode on %s returned %d (%s), scalar %d (%s)\n", what, dl_codec_name(codec),
                dl_codec_path_name(path), got_rc, got_rc ? dl_error() : "", want_rc, want_msg);
        bad++;
    } else if (!want_rc && memcmp(got, want, 4 * n)) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(got + i, want + i, 4) && bad++ == 0)
                fprintf(stderr, "%s: %s decode on %s: value %zu of %zu is %.9g, scalar %.9g\n", what,
                        dl_codec_name(codec), dl_codec_path_name(path), i, n, got[i], want[i]);
    }
    free(want);
    free(got);
    return bad;
}

/* Both directions: x encoded, then the scalar path's bytes decoded. */
static void check_both(enum dl_codec_path path, const float *x, size_t n, const char *what) {
    for (int c = 0; c < DL_CODEC_COUNT; c++) {
        size_t bad = compare_encode(path, c, x, n, what);
        size_t size = dl_codec_size(c, n);
        uint8_t *wire = malloc(size + 1);
        if (dl_codec_encode_path(DL_CODEC_PATH_SCALAR, c, x, n, wire) == 0)
            bad += compare_decode(path, c, wire, n, what);
        free(wire);
        CHECK_MSG(bad == 0, "%s: %s on %s differs from scalar (%zu places)", what, dl_codec_name(c),
                  dl_codec_path_name(path), bad);
    }
    /* The moments behind a uint8 grid, bit for bit. */
    double want_m = 0, want_s = 0, got_m = 1, got_s = 1;
    int want_mrc = dl_codec_uint8_moments_path(DL_CODEC_PATH_SCALAR, x, n, &want_m, &want_s);
    int got_mrc = dl_codec_uint8_moments_path(path, x, n, &got_m, &got_s);
    CHECK_MSG(got_mrc == want_mrc && (want_mrc || (!memcmp(&got_m, &want_m, 8) && !memcmp(&got_s, &want_s, 8))),
              "%s: uint8 mean/sigma on %s: %.17g %.17g, scalar %.17g %.17g", what, dl_codec_path_name(path), got_m,
              got_s, want_m, want_s);
    /* A uint8 result's grid from the smallest to the largest value. */
    size_t size = dl_codec_size(DL_CODEC_UINT8, n), want_size = 0, got_size = 0;
    uint8_t *want = malloc(size + 1), *got = malloc(size + 1);
    memset(want, 0xA5, size + 1);
    memset(got, 0x5A, size + 1);
    int want_rc = dl_codec_result_encode_path(DL_CODEC_PATH_SCALAR, DL_CODEC_UINT8, x, n, want, &want_size);
    int got_rc = dl_codec_result_encode_path(path, DL_CODEC_UINT8, x, n, got, &got_size);
    CHECK_MSG(got_rc == want_rc && got_size == want_size && (want_rc || !memcmp(want, got, size)),
              "%s: uint8 result on %s differs from scalar", what, dl_codec_path_name(path));
    free(want);
    free(got);
}

/* Values the fp16 conversion has to get exactly right. */
static size_t fill_edges(float *x, size_t cap) {
    size_t n = 0;
    const float fixed[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                           65504.0f, -65504.0f, 65519.0f, 65519.996f, 65520.0f, -65520.0f, 1e9f,
                           ldexpf(1, -24), ldexpf(1, -25), -ldexpf(1, -25), ldexpf(3, -26), ldexpf(1, -26),
                           ldexpf(1, -14), ldexpf(1023, -24), ldexpf(2047, -25), 2049.0f, 2051.0f,
                           1.0f + ldexpf(1, -11), 1.0f + 3 * ldexpf(1, -11), 0.1f, -0.3f};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < cap; i++) x[n++] = fixed[i];
    /* Every finite fp16 value, and the tie halfway to its upper neighbour
     * (exact in fp32), and one fp32 ulp either side of that tie. */
    for (uint32_t h = 0; h < 0x7c00u && n + 8 <= cap; h++) {
        float a = dl_f16_to_f32((uint16_t)h), b = dl_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)a + (double)b) / 2);
        float below = nextafterf(mid, 0), above = nextafterf(mid, INFINITY);
        x[n++] = a;
        x[n++] = -a;
        x[n++] = mid;
        x[n++] = -mid;
        x[n++] = below;
        x[n++] = above;
        x[n++] = -below;
        x[n++] = -above;
    }
    return n;
}

/* The reduce's fused step against decoding then adding, as the reduce did:
 * the same sum bits, and a refused chunk leaves the sum untouched. */
static void check_accumulate(enum dl_codec_path path, const float *x, size_t n, const char *what) {
    double *want = malloc(8 * n + 8), *got = malloc(8 * n + 8), weight = 0.3715;
    float *y = malloc(4 * n + 4), *mean_want = malloc(4 * n + 4), *mean_got = malloc(4 * n + 4);
    for (int c = 0; c < DL_CODEC_COUNT; c++) {
        size_t size = dl_codec_size(c, n);
        uint8_t *wire = malloc(size + 1);
        if (dl_codec_encode_path(DL_CODEC_PATH_SCALAR, c, x, n, wire)) {
            free(wire);
            continue;
        }
        for (size_t i = 0; i < n; i++) want[i] = got[i] = 0.01 * (double)i - 1.5;
        CHECK_OK(dl_codec_decode_path(DL_CODEC_PATH_SCALAR, c, wire, size, n, y));
        for (size_t i = 0; i < n; i++) want[i] += weight * (double)y[i];
        int rc = dl_codec_decode_accumulate_path(path, c, wire, size, n, weight, got);
        CHECK_MSG(rc == 0 && !memcmp(want, got, 8 * n), "%s: %s accumulate on %s differs from decode then add",
                  what, dl_codec_name(c), dl_codec_path_name(path));
        double total = 2.75;
        CHECK_OK(dl_codec_mean_path(DL_CODEC_PATH_SCALAR, want, n, total, mean_want));
        CHECK_OK(dl_codec_mean_path(path, got, n, total, mean_got));
        size_t mean_off = 0;
        for (size_t i = 0; i < n; i++) {
            float ref = (float)(want[i] / total);
            mean_off += memcmp(&ref, &mean_want[i], 4) != 0 || memcmp(&ref, &mean_got[i], 4) != 0;
        }
        CHECK_MSG(mean_off == 0, "%s: mean on %s differs from (float)(acc / total) in %zu places", what,
                  dl_codec_path_name(path), mean_off);
        /* Break the chunk's last value (or a codebook entry): refused, sum kept. */
        if (n && c == DL_CODEC_NONE) memcpy(wire + 4 * (n - 1), &(float){INFINITY}, 4);
        if (n && c == DL_CODEC_FP16) wire[2 * n - 1] |= 0x7c;
        if (c == DL_CODEC_UINT8) memcpy(wire + 4 * 255, &(float){NAN}, 4);
        if (c == DL_CODEC_INT8) memcpy(wire, &(float){NAN}, 4); /* the scale */
        if (n && c == DL_CODEC_TOPK) memcpy(wire + 4, &(float){NAN}, 4); /* the first block's high magnitude */
        if (n || c == DL_CODEC_UINT8 || c == DL_CODEC_INT8) {
            memcpy(got, want, 8 * n);
            rc = dl_codec_decode_accumulate_path(path, c, wire, size, n, weight, got);
            CHECK_MSG(rc == -1 && !memcmp(want, got, 8 * n), "%s: %s accumulate on %s of a bad chunk", what,
                      dl_codec_name(c), dl_codec_path_name(path));
        }
        CHECK(dl_codec_decode_accumulate_path(path, c, wire, size + 1, n, weight, got) == -1);
        free(wire);
    }
    free(want);
    free(got);
    free(y);
    free(mean_want);
    free(mean_got);
}

/* Sums whose mean is exactly halfway between two floats (so the final
 * rounding is a tie) or one double ulp off it: only a true division by the
 * total, rounded once to float, gives the scalar's bits. */
static void check_mean_ties(enum dl_codec_path path) {
    dl_rng rng;
    dl_rng_seed(&rng, 12);
    size_t n = 4099;
    double *acc = malloc(8 * n);
    float *want = malloc(4 * n), *got = malloc(4 * n);
    const double totals[] = {3, 7, 0.75, 12345};
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < n; i++) {
            float f = ldexpf(1 + dl_rng_uniform(&rng), (int)dl_rng_below(&rng, 60) - 30);
            double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
            acc[i] = mid * totals[t];
            if (i % 3 == 1) acc[i] = nextafter(acc[i], 0);
            if (i % 3 == 2) acc[i] = nextafter(acc[i], INFINITY);
        }
        CHECK_OK(dl_codec_mean_path(DL_CODEC_PATH_SCALAR, acc, n, totals[t], want));
        CHECK_OK(dl_codec_mean_path(path, acc, n, totals[t], got));
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            float ref = (float)(acc[i] / totals[t]);
            off += memcmp(&ref, &want[i], 4) != 0 || memcmp(&ref, &got[i], 4) != 0;
        }
        CHECK_MSG(off == 0, "mean on %s of sums at float ties, total %g: %zu of %zu differ",
                  dl_codec_path_name(path), totals[t], off, n);
    }
    free(acc);
    free(want);
    free(got);
}

static void test_path(enum dl_codec_path path) {
    check_mean_ties(path);
    dl_rng rng;
    dl_rng_seed(&rng, 11);
    size_t cap = 8 * 0x7c00 + 64;
    float *x = malloc(4 * cap);
    size_t n_edges = fill_edges(x, cap);
    check_both(path, x, n_edges, "all fp16 values and ties");
    check_accumulate(path, x, n_edges, "all fp16 values and ties");

    /* Every tail length after the 8-, 16- and 32-wide blocks, from an
     * unaligned start. */
    char what[96];
    for (size_t n = 0; n <= 97; n++) {
        for (size_t i = 0; i < n; i++) x[i + 1] = 1e-3f * dl_rng_normal(&rng);
        snprintf(what, sizeof what, "normal n=%zu", n);
        check_both(path, x + 1, n, what);
        check_accumulate(path, x + 1, n, what);
    }
    /* uint8 codes on the bins' edges: the vector path codes in fp32 and
     * hands the scalar formula every value that lies too near an edge to
     * tell. The result's grid runs from the smallest to the largest value,
     * so each edge lo + k width is known: the floats nearest it and two
     * ulps either side. Then chunks whose mean is far from their spread
     * (3 and 30 sigmas of 1e3), where fp32 can tell fewer values or none;
     * and subnormal values, whose 1 / width is beyond fp32's range. */
    {
        const float lo = 0.1f, hi = 0.7f;
        double width = ((double)hi - (double)lo) / DL_CODEC_UINT8_BINS;
        size_t m = 0;
        x[m++] = lo;
        x[m++] = hi;
        for (int k = 0; k <= DL_CODEC_UINT8_BINS; k++) {
            float edge = (float)((double)lo + k * width);
            float around[5] = {edge, nextafterf(edge, 0), nextafterf(edge, 1), 0, 0};
            around[3] = nextafterf(around[1], 0);
            around[4] = nextafterf(around[2], 1);
            for (int j = 0; j < 5; j++)
                if (around[j] >= lo && around[j] <= hi) x[m++] = around[j];
        }
        check_both(path, x, m, "uint8 edges of the result's grid");
        for (int far = 0; far < 3; far++) {
            const float centre[] = {3.0f, 30.0f, -1000.0f};
            for (size_t i = 0; i < 4096; i++) x[i] = centre[far] + 1e-3f * dl_rng_normal(&rng);
            snprintf(what, sizeof what, "uint8, mean %g with sigma 1e-3", (double)centre[far]);
            check_both(path, x, 4096, what);
        }
        for (size_t i = 0; i < 4096; i++) x[i] = 1e-41f * (float)dl_rng_below(&rng, 100);
        check_both(path, x, 4096, "uint8, subnormal values");
    }
    /* topk over whole blocks (the vector path's own selection): spread-out
     * values, a few levels with ties at every magnitude, a block of zeros,
     * one magnitude throughout, and a few large values in small ones. */
    size_t nt = 3 * DL_CODEC_TOPK_BLOCK + 100;
    float *t = malloc(4 * nt);
    uint8_t *wire_topk = malloc(dl_codec_size(DL_CODEC_TOPK, nt));
    for (int kind = 0; kind < 5; kind++) {
        for (size_t i = 0; i < nt; i++) {
            float v = 1e-3f * dl_rng_normal(&rng);
            if (kind == 1) v = (float)((int)dl_rng_below(&rng, 5) - 2) * 1e-3f;
            if (kind == 2) v = 0;
            if (kind == 3) v = i % 3 ? 0.25f : -0.25f;
            if (kind == 4) v = dl_rng_below(&rng, 500) ? 1e-6f * dl_rng_normal(&rng) : 3.0f * dl_rng_normal(&rng);
            t[i] = v;
        }
        snprintf(what, sizeof what, "topk whole blocks, kind %d", kind);
        CHECK_MSG(compare_encode(path, DL_CODEC_TOPK, t, nt, what) == 0, "%s", what);
    }
    /* Values beyond the bound in whole blocks (the vector path checks a
     * block in its selection's first pass): the refusal names the first,
     * wherever it is; the largest value within the bound is encoded. */
    const float beyond[] = {NAN, INFINITY, -ldexpf(1, DL_CODEC_MAX_EXPONENT), ldexpf(1.5f, DL_CODEC_MAX_EXPONENT + 3)};
    const size_t at[][2] = {{0, SIZE_MAX},
                            {DL_CODEC_TOPK_BLOCK + 1234, SIZE_MAX},
                            {3 * DL_CODEC_TOPK_BLOCK - 1, 3 * DL_CODEC_TOPK_BLOCK + 5},
                            {3 * DL_CODEC_TOPK_BLOCK + 99, SIZE_MAX},
                            {2 * DL_CODEC_TOPK_BLOCK + 7, 2 * DL_CODEC_TOPK_BLOCK + 3}};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        for (size_t i = 0; i < nt; i++) t[i] = 1e-3f * dl_rng_normal(&rng);
        for (int j = 0; j < 2; j++)
            if (at[k][j] != SIZE_MAX) t[at[k][j]] = beyond[(k + (size_t)j) % 4];
        snprintf(what, sizeof what, "topk whole blocks, beyond the bound at %zu", at[k][0]);
        CHECK_MSG(compare_encode(path, DL_CODEC_TOPK, t, nt, what) == 0, "%s", what);
        CHECK_MSG(dl_codec_encode_path(path, DL_CODEC_TOPK, t, nt, wire_topk) == -1, "%s: not refused", what);
        size_t first = at[k][1] < at[k][0] ? at[k][1] : at[k][0];
        char index[32];
        snprintf(index, sizeof index, " %zu ", first);
        CHECK_MSG(strstr(dl_error(), index) != NULL, "%s: the refusal (%s) does not name %zu", what, dl_error(), first);
    }
    for (size_t i = 0; i < nt; i++) t[i] = 1e-3f * dl_rng_normal(&rng);
    t[DL_CODEC_TOPK_BLOCK + 17] = -nextafterf(ldexpf(1, DL_CODEC_MAX_EXPONENT), 0);
    CHECK_MSG(compare_encode(path, DL_CODEC_TOPK, t, nt, "topk, the largest magnitude within the bound") == 0,
              "the largest magnitude within the bound");
    CHECK_MSG(dl_codec_encode_path(path, DL_CODEC_TOPK, t, nt, wire_topk) == 0, "the largest magnitude within the bound: %s",
              dl_error());
    free(wire_topk);
    free(t);

    /* Random bit patterns in fp16's range and beyond; a NaN or Inf planted
     * at every position of short vectors (the refusal must name the same
     * index). */
    for (int rep = 0; rep < 200; rep++) {
        size_t n = 1 + dl_rng_below(&rng, 700);
        for (size_t i = 0; i < n; i++) {
            uint32_t exp = 80 + (uint32_t)dl_rng_below(&rng, 80); /* 2^-47 .. 2^32 */
            x[i] = bits_f32((uint32_t)(dl_rng_next(&rng) & 0x807fffffu) | exp << 23);
        }
        snprintf(what, sizeof what, "random bits n=%zu", n);
        check_both(path, x, n, what);
    }
    const float bad_values[] = {NAN, -NAN, INFINITY, -INFINITY, bits_f32(0x7f800001u)};
    for (size_t n = 1; n <= 70; n += 3)
        for (size_t at = 0; at < n; at++) {
            for (size_t i = 0; i < n; i++) x[i] = 0.5f * dl_rng_normal(&rng);
            x[at] = bad_values[(n + at) % 5];
            snprintf(what, sizeof what, "non-finite at %zu of %zu", at, n);
            for (int c = 0; c < DL_CODEC_COUNT; c++)
                CHECK_MSG(compare_encode(path, c, x, n, what) == 0, "%s: %s encode", what, dl_codec_name(c));
            /* The same vector as fp32 and as fp16 bytes, to be refused on
             * decoding at the same index. */
            uint8_t raw[4 * 70];
            memcpy(raw, x, 4 * n);
            CHECK_MSG(compare_decode(path, DL_CODEC_NONE, raw, n, what) == 0, "%s: none decode", what);
            for (size_t i = 0; i < n; i++) {
                uint16_t h = i == at ? (uint16_t)(0x7c00u | (n % 3)) : (uint16_t)(0x3c00u + i);
                memcpy(raw + 2 * i, &h, 2);
            }
            CHECK_MSG(compare_decode(path, DL_CODEC_FP16, raw, n, what) == 0, "%s: fp16 decode", what);
        }

    /* Decoding bytes no encoder wrote: every fp16 pattern (NaN and Inf
     * among them, so refusals are compared), uint8 codes under codebooks
     * of random finite floats and with one non-finite entry. */
    size_t nh = 0x10000;
    uint8_t *wire = malloc(dl_codec_size(DL_CODEC_FP16, nh)); /* the larger of fp16 and uint8 here */
    for (uint32_t h = 0; h < nh; h++) {
        uint16_t v = (uint16_t)h;
        memcpy(wire + 2 * h, &v, 2);
    }
    CHECK_MSG(compare_decode(path, DL_CODEC_FP16, wire, nh, "fp16 patterns with NaN") == 0, "fp16 refusal");
    for (uint32_t h = 0; h < nh; h++) { /* the same patterns, the non-finite ones moved into range */
        uint16_t v = (uint16_t)h;
        if ((v & 0x7c00u) == 0x7c00u) v = (uint16_t)(v & 0xbfffu);
        memcpy(wire + 2 * h, &v, 2);
    }
    for (size_t n = 0; n <= 40; n++)
        CHECK_MSG(compare_decode(path, DL_CODEC_FP16, wire + 2 * (nh - 40 - n), n, "fp16 finite patterns") == 0,
                  "fp16 decode of %zu", n);
    CHECK_MSG(compare_decode(path, DL_CODEC_FP16, wire, nh, "fp16 finite patterns") == 0, "fp16 decode");
    for (int rep = 0; rep < 50; rep++) {
        size_t n = dl_rng_below(&rng, 3000);
        for (int k = 0; k < DL_CODEC_UINT8_BINS; k++) {
            float c = bits_f32((uint32_t)dl_rng_next(&rng) & 0xbf7fffffu); /* exponent below all ones */
            memcpy(wire + 4 * k, &c, 4);
        }
        for (size_t i = 0; i < n; i++) wire[1024 + i] = (uint8_t)dl_rng_next(&rng);
        if (rep % 5 == 4) memcpy(wire + 4 * dl_rng_below(&rng, 256), &bad_values[rep % 5], 4);
        snprintf(what, sizeof what, "uint8 codes n=%zu", n);
        CHECK_MSG(compare_decode(path, DL_CODEC_UINT8, wire, n, what) == 0, "%s", what);
    }
    free(wire);

    /* Gradient-like chunks at the all-reduce's chunk size, odd lengths,
     * with outliers beyond 6 sigma, a constant chunk and +-FLT_MAX. */
    size_t big = 131072 + 13;
    float *g = malloc(4 * big);
    for (size_t i = 0; i < big; i++) g[i] = 1e-3f * dl_rng_normal(&rng) * (dl_rng_below(&rng, 500) ? 1.0f : 1e3f);
    check_both(path, g, big, "gradient chunk");
    check_accumulate(path, g, big, "gradient chunk");
    for (size_t i = 0; i < big; i++) g[i] = 42.5f;
    check_both(path, g, big, "constant chunk");
    /* Zeros of both signs: a result grid from -0 or +0 must not depend on
     * which one the lanes met first. */
    for (size_t i = 0; i < big; i++) g[i] = (i * 7 + 3) % 5 ? 0.0f : -0.0f;
    for (size_t n = 1; n <= 40; n++) check_both(path, g + 40 - n, n, "signed zeros");
    check_both(path, g, big, "signed zeros");
    for (size_t i = 0; i < big; i++) g[i] = i % 3 ? FLT_MAX : -FLT_MAX;
    check_both(path, g, big, "+-FLT_MAX");
    free(g);
    free(x);
}

int main(void) {
    CHECK(dl_codec_path_available(DL_CODEC_PATH_SCALAR));
    CHECK(dl_codec_path_available(dl_codec_best_path()));
    CHECK(!strcmp(dl_codec_path_name(DL_CODEC_PATH_SCALAR), "scalar"));
    CHECK(!strcmp(dl_codec_path_name(DL_CODEC_PATH_COUNT), "unknown"));
    float one = 1;
    uint8_t out[4];
    CHECK(dl_codec_encode_path(DL_CODEC_PATH_COUNT, DL_CODEC_FP16, &one, 1, out) == -1 &&
          strstr(dl_error(), "not available"));
    for (int p = 0; p < DL_CODEC_PATH_COUNT; p++) {
        if (!dl_codec_path_available(p)) {
            printf("codec path %s: not on this CPU, skipped\n", dl_codec_path_name(p));
            continue;
        }
        printf("codec path %s against scalar\n", dl_codec_path_name(p));
        test_path(p);
    }
    return dl_test_finish("test_collab_codec_paths");
}
