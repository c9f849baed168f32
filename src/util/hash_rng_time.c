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
