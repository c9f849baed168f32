/* Accountable aggregation: the arithmetic of the checks (collab/audit.h). */
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "collab/audit.h"
#include "collab/bytes.h"
#include "dedloc/collab.h"

void dl_audit_nonce_commit(const uint8_t round_id[16], const uint8_t nonce[DL_AUDIT_NONCE], uint8_t commit[32]) {
    static const char tag[] = "dedloc audit nonce";
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, (const uint8_t *)tag, sizeof tag);
    crypto_generichash_update(&st, round_id, 16);
    crypto_generichash_update(&st, nonce, DL_AUDIT_NONCE);
    crypto_generichash_final(&st, commit, 32);
}

bool dl_audit_reveal_matches(const uint8_t round_id[16], const uint8_t nonce[DL_AUDIT_NONCE], const uint8_t commit[32]) {
    uint8_t mine[32];
    dl_audit_nonce_commit(round_id, nonce, mine);
    return !sodium_memcmp(mine, commit, 32);
}

/* The keystream of ChaCha20 as Bernstein defined it (64-bit nonce, 64-bit
 * block counter from 0), which libsodium's crypto_stream_chacha20 is.
 * OpenSSL's EVP_chacha20 takes the state's last four words as a 16-byte IV
 * (the counter's two words, then the nonce's), so counter 0 and our nonce
 * give the same stream while the counter stays below 2^32 blocks (a chunk
 * needs 2^12). OpenSSL's is the fast one: 1.3 GB/s of directions through
 * libsodium made them the audit's largest cost. */
static bool stream_openssl(uint8_t *out, size_t size, const uint8_t nonce[8], const uint8_t key[32]) {
    if (size > INT_MAX) return false;
    uint8_t iv[16] = {0};
    memcpy(iv + 8, nonce, 8);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n = 0;
    bool ok = ctx && EVP_EncryptInit_ex(ctx, EVP_chacha20(), NULL, key, iv) == 1;
    if (ok) {
        memset(out, 0, size);
        ok = EVP_EncryptUpdate(ctx, out, &n, out, (int)size) == 1 && (size_t)n == size;
    }
    EVP_CIPHER_CTX_free(ctx);
    return ok;
}

void dl_audit_direction_path(bool portable, const uint8_t seed[32], uint64_t chunk, size_t len, int16_t *z) {
    /* ChaCha20 keyed by the seed, the chunk index as its nonce: one stream
     * per chunk, the same words on every member. */
    uint8_t nonce[crypto_stream_chacha20_NONCEBYTES];
    _Static_assert(crypto_stream_chacha20_NONCEBYTES == 8, "Bernstein's ChaCha20 has a 64-bit nonce");
    dl_put_u64(nonce, chunk);
    if (!len) return;
    if (portable || !stream_openssl((uint8_t *)z, 2 * len, nonce, seed))
        crypto_stream_chacha20((unsigned char *)z, 2 * len, nonce, seed);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    for (size_t e = 0; e < len; e++) {
        uint16_t u = (uint16_t)z[e];
        z[e] = (int16_t)(uint16_t)((u >> 8) | (u << 8));
    }
#endif
}

void dl_audit_direction(const uint8_t seed[32], uint64_t chunk, size_t len, int16_t *z) {
    dl_audit_direction_path(false, seed, chunk, len, z);
}

static bool close_to(double x, double y) { return fabs(x - y) <= 1e-12 * fmax(fabs(x), fabs(y)) + 1e-300; }

bool dl_audit_measure_agrees(const struct dl_audit_measure *published, const struct dl_audit_measure *recomputed) {
    return close_to(published->s, recomputed->s) && close_to(published->a, recomputed->a) &&
           close_to(published->d, recomputed->d) && close_to(published->r, recomputed->r);
}

/* A sum of m double terms is off by at most (m - 1) u times the sum of their
 * magnitudes (u = 2^-53, Higham's gamma bound, which holds while m u < 1);
 * 2 m u leaves room for the products and divisions around it. */
static double gamma_of(size_t m) { return 2.0 * (double)(m + 8) * 0x1p-53; }

double dl_audit_tolerance(const struct dl_audit_claim *c, size_t count, const struct dl_audit_result *res) {
    double total = 0, spread = 0;
    for (size_t j = 0; j < count; j++) total += c[j].weight * c[j].clip;
    /* Each s_j is off by gamma(len) a_j; the aggregator's weighted sum of
     * the x_j (element by element) by gamma(count) sum_j w_j c_j |x_j|, whose
     * projection is bounded by the same a_j; the members' weighted sum of
     * the s_j by gamma(count) sum_j w_j c_j |s_j| <= ... a_j. */
    for (size_t j = 0; j < count; j++) spread += c[j].weight * c[j].clip / total * c[j].m.a;
    double g = gamma_of(res->len) + gamma_of(count);
    return DL_AUDIT_SIGMAS * res->e2 + g * (2 * spread + res->l1);
}

double dl_audit_e2_bound(int codec, double q_l2, double q_linf, double q_range, size_t len) {
    /* Rounding to fp32: half an ulp, 2^-24 relative (plus fp32's smallest
     * subnormal step); to fp16: 2^-11 relative plus half of fp16's smallest
     * subnormal (2^-25), after the fp32 rounding. Each bound doubled against
     * the rounding of |q|_2 itself. */
    double root = sqrt((double)len);
    switch (codec) {
    case DL_CODEC_NONE: return 2 * (0x1p-24 * q_l2 + 0x1p-149 * root);
    case DL_CODEC_FP16: return 2 * ((0x1p-11 + 0x1p-24) * q_l2 + 0x1p-25 * root);
    /* uint8: a result's grid runs from its smallest value to its largest
     * (wirecodec.c), w = (max - min) / 256 wide, nothing clamped. A bin's
     * values and their mean lie within w of each other, so its squared
     * errors sum to at most count x w^2 / 4 (Bhatia-Davis), and the result
     * |v - q| <= sqrt(len) w / 2 (plus fp32 roundings of v and of each
     * mean, subnormal steps included). Bins 0 and 255 hold the smallest and the largest value and
     * decode to a mean within w of it, so q's range is at least 254 w (less
     * two roundings). Not 12 sigma / 256: with the contributions' mean +-
     * 6 sigma grid, values beyond it (most of the non-zeros of a sparse
     * chunk, such as an embedding's gradient) decode to an end bin's mean,
     * far beyond one bin width. A quarter to spare rather than doubled, for
     * uint8 and int8: their bounds are rigorous up to roundings of 2^-22
     * relative, and their margin is the tolerance a liar can claim, which
     * lets a lie nearly orthogonal to the result through (an honest e2 at
     * the bound's edge reaches 0.795 of it, test_collab_audit (h); doubled,
     * the orthogonal lie of (g) passed 9 and 15 chunks of 30 instead of 5
     * and 7). */
    case DL_CODEC_UINT8: return 1.25 * (root * ((q_range + 0x1p-22 * q_linf) / 508.0 + 0x1p-149) + 0x1p-23 * q_l2);
    /* int8: each element within scale / 2 (plus half an ulp), where scale =
     * max|v| / 127 and max|v| <= max|q| + scale / 2, so scale <= max|q| /
     * 126.5 and scale / 2 <= max|q| / 253; the smallest subnormal scale
     * (values below 127 x 2^-150) adds half of 2^-149 at most. */
    case DL_CODEC_INT8: return 1.25 * (root * (q_linf / 253.0 + 0x1p-150) + 0x1p-24 * q_l2);
    /* topk: results travel as sparse fp16, which decodes as fp16 does (its
     * zeros are exact). */
    case DL_CODEC_TOPK: return 2 * ((0x1p-11 + 0x1p-24) * q_l2 + 0x1p-25 * root);
    default: return INFINITY;
    }
}

bool dl_audit_claim_possible(const struct dl_audit_measure *m, const struct dl_audit_result *res, char *why,
                             size_t why_size) {
    char dummy[8];
    if (!why) why = dummy, why_size = sizeof dummy;
    why[0] = 0;
    if (!isfinite(m->s) || !(m->a >= 0) || !(m->d >= 0) || !isfinite(m->a) || !isfinite(m->d) || !isfinite(m->r)) {
        snprintf(why, why_size, "measures (%g, %g, %g, %g) that are not a projection, a norm, a distance and a product",
                 m->s, m->a, m->d, m->r);
        return false;
    }
    /* Each of s, a, d, z.q, |q|_1 and |q|_2 is a sum of len terms, off by
     * at most g times the sum of their magnitudes; 4 g covers a bound's two
     * sides. */
    double g = 4 * gamma_of(res->len), root = sqrt((double)res->len);
    if (fabs(m->s) > m->a * (1 + g)) {
        snprintf(why, why_size, "a projection %g beyond the chunk's claimed L1 norm %g", m->s, m->a);
        return false;
    }
    if (m->a > root * (m->d + res->l2) * (1 + g) + 0x1p-149) {
        snprintf(why, why_size, "an L1 norm %g beyond sqrt(len) (distance %g + |q| %g)", m->a, m->d, res->l2);
        return false;
    }
    if (m->d > (root * 0x1p32 + res->l2) * (1 + g)) {
        snprintf(why, why_size, "a distance %g beyond what values below 2^32 can reach", m->d);
        return false;
    }
    /* The heart of it: z was drawn after x and q were fixed, so z.(x - q)
     * lies within DL_AUDIT_SIGMAS |x - q| but for a 2.5e-14 chance. */
    double off = fabs(m->s - res->s), bound = DL_AUDIT_SIGMAS * m->d * (1 + g) + g * (m->a + res->l1) + 0x1p-149;
    if (off > bound) {
        snprintf(why, why_size, "a projection %.9g that is %.3g from the result's %.9g, beyond %g times the claimed "
                 "distance %g", m->s, off, res->s, DL_AUDIT_SIGMAS, m->d);
        return false;
    }
    /* r - q.q = (x - q).q, at most d |q|_2 (Cauchy-Schwarz); each of r and
     * q.q is off by g times |x|_2 |q|_2 <= (d + |q|_2) |q|_2. This bounds
     * what a claim nobody else can hold against its chunk absorbs in the
     * alignment check: c_j |r_j - q.q| <= c_j d_j |q|_2, at most tau |q|_2
     * under centered clip. */
    double l2 = res->l2, roff = fabs(m->r - l2 * l2);
    double rbound = m->d * l2 * (1 + g) + g * (m->d + 2 * l2) * l2 + 0x1p-1000;
    if (!(roff <= rbound)) {
        snprintf(why, why_size, "a product with the result %.9g that is %.3g from its squared norm %.9g, beyond the "
                 "claimed distance %g times its norm %g", m->r, roff, l2 * l2, m->d, l2);
        return false;
    }
    return true;
}

enum dl_audit_verdict dl_audit_check(const struct dl_audit_claim *c, size_t count, const struct dl_audit_result *res,
                                     bool clip, double tau, char *why, size_t why_size) {
    char dummy[8];
    if (!why) why = dummy, why_size = sizeof dummy;
    why[0] = 0;
    if (!count) {
        snprintf(why, why_size, "a result with no contributor");
        return DL_AUDIT_WRONG;
    }
    if (!(res->e2 >= 0) || !(res->delta >= 0) || !isfinite(res->e2) || !isfinite(res->delta)) {
        snprintf(why, why_size, "committed error bounds %g %g are not distances", res->e2, res->delta);
        return DL_AUDIT_WRONG;
    }
    if (!clip && res->delta != 0) {
        snprintf(why, why_size, "a mean with a centered-clip distance %g", res->delta);
        return DL_AUDIT_WRONG;
    }
    /* The equation first: it needs no clip-weight bound, and with e2 held
     * to what an honest result needs (a rigorous bound for every codec)
     * an aggregator cannot buy tolerance by claiming a large rounding. */
    double e2_bound = dl_audit_e2_bound(res->codec, res->l2, res->linf, res->range, res->len);
    double total = 0;
    for (size_t j = 0; j < count; j++) {
        if (!(c[j].clip >= 0 && c[j].clip <= 1) || (!clip && c[j].clip != 1)) {
            snprintf(why, why_size, "contributor %zu has clip weight %g", j, c[j].clip);
            return DL_AUDIT_WRONG;
        }
        total += c[j].weight * c[j].clip;
    }
    if (!(total > 0)) {
        snprintf(why, why_size, "the contributors' weights sum to %g", total);
        return DL_AUDIT_WRONG;
    }
    double want = 0;
    for (size_t j = 0; j < count; j++) want += c[j].weight * c[j].clip * c[j].m.s;
    want /= total;
    struct dl_audit_result held = *res;
    if (held.e2 > e2_bound) held.e2 = e2_bound;
    double tol = dl_audit_tolerance(c, count, &held);
    if (!(fabs(res->s - want) <= tol)) {
        snprintf(why, why_size, "its projection is %.9g where its contributors' give %.9g (tolerance %.3g)", res->s,
                 want, tol);
        return DL_AUDIT_WRONG;
    }
    /* The result's size as well. It is a weighted mean of its contributions,
     * with weights w_j c_j (c_j = 1 for the mean; under centered clip the
     * clip weights at the iterate it commits to), so |v|_1 <= sum_j w_j c_j
     * a_j / W (the triangle inequality), and |q - v|_1 <= sqrt(len) e2. One
     * direction leaves a result c times the mean through whenever z is
     * nearly orthogonal to the mean, with a chance of about the rounding's
     * share of the projection, which a coarse codec's rounding (int8's
     * max|q| / 253 an element) makes a few percent for any c: the norm
     * does not look away. (A claim a_j below the sender's chunk is a false
     * claim, which its aggregator's attestation shows; a c_j outside what
     * the distances allow fails below.) */
    {
        double l1 = 0, g = gamma_of(res->len) + gamma_of(count);
        for (size_t j = 0; j < count; j++) l1 += c[j].weight * c[j].clip * c[j].m.a;
        l1 /= total;
        double allowed = l1 * (1 + 2 * g) + sqrt((double)res->len) * held.e2 * (1 + g) + g * res->l1 +
                         0x1p-149 * (double)res->len;
        if (!(res->l1 <= allowed)) {
            snprintf(why, why_size, "its L1 norm %.9g exceeds the %.9g that its contributors' chunks allow", res->l1,
                     allowed);
            return DL_AUDIT_WRONG;
        }
    }
    /* The result's alignment with what it averages. Its contributors'
     * products give q.v = sum_j w_j c_j r_j / W (r_j = x_j.q, signed after
     * q was fixed), so q.q - q.v = q.(q - v), which is at most |q|_2 e2 for
     * an honest result (Cauchy-Schwarz, e2 = |v - q|_2 within its bound),
     * whatever the direction. A result q = v + D must keep |q.D| within
     * that: a flipped result misses by 2 |q|^2, a result c times the mean by
     * (1 - 1/c) |q|^2, and the projection above, a single random direction,
     * let a flip through about one chunk in two with uint8 or int8 (their
     * rounding, and so its tolerance, grows with the result). What passes
     * here is a lie nearly orthogonal to the result, which the projection
     * still meets. Rounding: each r_j, the aggregator's sum that made v and
     * our weighted sum are off by g times sum_j (w_j c_j / W) |x_j|_2 |q|_2,
     * with |x_j|_2 <= d_j + |q|_2; q.q by g |q|_2^2. */
    {
        double l2 = res->l2, g = gamma_of(res->len) + gamma_of(count), aligned = 0, spread = 0;
        for (size_t j = 0; j < count; j++) {
            aligned += c[j].weight * c[j].clip * c[j].m.r;
            spread += c[j].weight * c[j].clip / total * (c[j].m.d + l2);
        }
        aligned /= total;
        double miss = fabs(l2 * l2 - aligned),
               allowed = l2 * (held.e2 * (1 + g) + 4 * g * (spread + l2)) + 0x1p-1000;
        if (!(miss <= allowed)) {
            snprintf(why, why_size, "its squared norm %.9g is %.3g from its product with what its contributors sent "
                     "(%.9g), beyond its rounding's %.3g", l2 * l2, miss, aligned, allowed);
            return DL_AUDIT_WRONG;
        }
    }
    if (res->e2 > e2_bound || (clip && res->delta > tau / 2)) {
        snprintf(why, why_size, "its committed error bounds (%g, %g) exceed what an honest result needs (%g, %g)",
                 res->e2, res->delta, e2_bound, clip ? tau / 2 : 0.0);
        return DL_AUDIT_UNCHECKABLE;
    }
    for (size_t j = 0; clip && j < count; j++) {
        /* |x_j - v_c| lies within delta + e2 of d_j = |x_j - q| (triangle
         * inequality through v), so c_j = min(1, tau / |x_j - v_c|) lies
         * between these two. */
        const struct dl_audit_claim *cj = &c[j];
        double far = cj->m.d + res->delta + held.e2, near = cj->m.d - res->delta - held.e2;
        double lo = far > tau ? tau / far : 1.0, hi = near > tau ? tau / near : 1.0;
        if (cj->clip < lo * (1 - 1e-9) || cj->clip > hi * (1 + 1e-9)) {
            snprintf(why, why_size, "contributor %zu at distance %g (+- %g) has clip weight %g, not in [%g, %g]", j,
                     cj->m.d, res->delta, cj->clip, lo, hi);
            return DL_AUDIT_WRONG;
        }
    }
    return DL_AUDIT_PASS;
}
