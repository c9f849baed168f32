/* Hashing (xxh64), the deterministic random generator every module seeds
 * from its configuration, and the clocks. */
#include "dedloc/util.h"

#include <math.h>
#include <time.h>
#include <xxhash.h>

uint64_t dl_hash64(const void *data, size_t size, uint64_t seed) {
    return (uint64_t)XXH64(data, size, (XXH64_hash_t)seed);
}

void dl_hash64_hex(uint64_t h, char out[17]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = digits[h & 15];
        h >>= 4;
    }
    out[16] = 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dl_rng_seed(dl_rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dl_rng_next(dl_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dl_rng_uniform(dl_rng *rng) { return (float)(dl_rng_next(rng) >> 40) * (1.0f / 16777216.0f); }

uint64_t dl_rng_below(dl_rng *rng, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = dl_rng_next(rng);
    while (x >= limit);
    return x % n;
}

float dl_rng_normal(dl_rng *rng) {
    double u1 = ((double)(dl_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(dl_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

double dl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double dl_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Double-double arithmetic (Dekker, Knuth): a value is hi + lo with |lo| at
 * most half an ulp of hi. Only +, -, * on doubles, never fused (the build
 * has -ffp-contract=off), so every IEEE 754 machine gets the same bits. */
static void two_sum_fast(double a, double b, double *hi, double *lo) {
    double s = a + b;
    *lo = b - (s - a);
    *hi = s;
}

static void split(double a, double *hi, double *lo) {
    double t = 134217729.0 * a; /* 2^27 + 1 */
    *hi = t - (t - a);
    *lo = a - *hi;
}

/* (xh + xl) * (yh + yl) to about 2^-104 relative. */
static void dd_mul(double xh, double xl, double yh, double yl, double *h, double *l) {
    double p = xh * yh, ah, al, bh, bl;
    split(xh, &ah, &al);
    split(yh, &bh, &bl);
    double e = ((ah * bh - p) + ah * bl + al * bh) + al * bl; /* p + e == xh * yh exactly */
    e += xh * yl + xl * yh;
    two_sum_fast(p, e, h, l);
}

double dl_powi(double base, int64_t n) {
    double rh = 1.0, rl = 0.0, sh = base, sl = 0.0;
    for (uint64_t e = n > 0 ? (uint64_t)n : 0; e; e >>= 1) {
        if (e & 1) dd_mul(rh, rl, sh, sl, &rh, &rl);
        if (e > 1) dd_mul(sh, sl, sh, sl, &sh, &sl);
    }
    return rh + rl;
}
