/* Accountable aggregation: the arithmetic of the checks (private to
 * src/collab; the protocol is docs/protocol.md, "Accountable aggregation").
 *
 * After every result of a round is signed, each chunk gets a direction z,
 * values in (-1, 1) (dl_audit_direction) drawn from a seed nobody knew before (BLAKE2b of the round's
 * signed results and of nonces its aggregators revealed only after every
 * result was signed). Each sender publishes, per chunk it contributed to, four
 * numbers about the chunk x it sent (as the aggregator decodes it): s = z.x,
 * a = sum |x_e| (what bounds the rounding of s), d = |x - q|_2, its
 * distance to the decoded result q, and r = x.q. The aggregator's result commits to e2 =
 * |v - q|_2 (v the result before encoding, in double), to delta = |v_c - v|_2
 * (v_c the centered-clip iterate its clip weights come from; 0 for the mean)
 * and to the clip weight c_j of each contributor (1 for the mean). A result
 * is right when
 *     z.q = sum_j w_j c_j s_j / sum_j w_j c_j       (within tolerance),
 *     q.q = sum_j w_j c_j r_j / sum_j w_j c_j       (within |q|_2 e2: q.(q - v)),
 * and, for centered clip, each c_j is what min(1, tau / |x_j - v_c|) allows
 * for a distance within delta + e2 of d_j. */
#ifndef DEDLOC_COLLAB_AUDIT_H
#define DEDLOC_COLLAB_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a sender publishes about one chunk it sent: s = z.x, a = sum |x_e|,
 * d = |x - q|_2 and r = x.q, its product with the result (the alignment
 * check's term, dl_audit_check). */
struct dl_audit_measure {
    double s, a, d, r;
};

/* One contributor of a chunk, as the checks see it: its weight and measures
 * (from its signed projections) and its clip weight (from the signed result). */
struct dl_audit_claim {
    double weight, clip;
    struct dl_audit_measure m;
    bool fact; /* m computed by the checker itself from the signed chunk (a stand-in), not claimed */
};

/* A result's own numbers: its projection and L1 norm (computed by the
 * checking member from the decoded result) and what it committed to. */
struct dl_audit_result {
    double s, l1, l2;             /* z.q, sum |q_e|, |q|_2 */
    double linf;                  /* max |q_e| (what bounds an int8 result's rounding) */
    double range;                 /* max q_e - min q_e (what bounds a uint8 result's rounding) */
    double e2, delta;             /* committed: |v - q|_2, |v_c - v|_2 */
    size_t len;
    int codec;                    /* enum dl_codec of the result */
};

enum dl_audit_verdict {
    DL_AUDIT_PASS = 0,
    DL_AUDIT_WRONG = 1,           /* the equation fails: evidence against the aggregator */
    DL_AUDIT_UNCHECKABLE = 2,     /* its committed error bounds exceed what an honest one needs:
                                   * not applied, but no evidence of a lie */
    DL_AUDIT_FALSE_CLAIM = 3,     /* a contributor's signed measures are impossible
                                   * (dl_audit_claim_possible): evidence against that contributor */
};

/* Hoeffding: for z of independent values in [-1, 1] with mean 0 and a
 * vector a fixed before z, P(|z.a| > k |a|_2) <= 2 exp(-k^2 / 2); k = 8
 * makes it 2.5e-14. */
#define DL_AUDIT_SIGMAS 8.0

/* The seed's randomness (docs/protocol.md, "Accountable aggregation", 2):
 * every aggregator draws a nonce for the round and commits to it in each
 * result it signs; it reveals the nonce only once it holds every result of
 * the round. The commitment is BLAKE2b-256 of a domain tag, the round id
 * and the nonce. */
#define DL_AUDIT_NONCE 32
void dl_audit_nonce_commit(const uint8_t round_id[16], const uint8_t nonce[DL_AUDIT_NONCE], uint8_t commit[32]);
/* Whether a revealed nonce is the one `commit` committed to. */
bool dl_audit_reveal_matches(const uint8_t round_id[16], const uint8_t nonce[DL_AUDIT_NONCE], const uint8_t commit[32]);
/* Chunk `chunk`'s direction from the round's seed: len words c_e, the
 * ChaCha20 stream read as little-endian int16, each giving z_e =
 * dl_audit_z(c_e): its sign from the word's sign, its magnitude
 * 3/4 + (2m + 1) / 2^18 from the low 15 bits m, so in (3/4, 1), symmetric
 * about 0, E z_e^2 about 0.77.
 *
 * Why not +-1 signs: a lie of +c on one element and -c on another moves
 * z.q by c (z_a - z_b), which signs leave at 0 one time in two, whatever c.
 * Here it stays within a tolerance t only when both signs agree and the
 * magnitudes lie within t / c of each other: about 4 t / c of the time (at
 * least 2^-16, when the two words are equal). Why not magnitudes spread
 * over (0, 1): the projection of a dense lie (a scaled or flipped result)
 * spreads as sqrt(E z^2); at 1/3 a uint8 result's wide tolerance let half
 * again as many flips through as with signs, at 0.77 about as few. */
#define DL_AUDIT_Z_BASE (3 << 16)
#define DL_AUDIT_Z_UNIT 0x1p-18
static inline double dl_audit_z(int16_t c) {
    int32_t num = DL_AUDIT_Z_BASE + 2 * (c & 0x7fff) + 1;
    return (double)(c < 0 ? -num : num) * DL_AUDIT_Z_UNIT;
}
void dl_audit_direction(const uint8_t seed[32], uint64_t chunk, size_t len, int16_t *z);
/* The same through libsodium (portable) or OpenSSL (the fast one, falling
 * back to libsodium); tests hold the two equal. */
void dl_audit_direction_path(bool portable, const uint8_t seed[32], uint64_t chunk, size_t len, int16_t *z);
/* s, a, d and r of x against q, in double, in the fixed order of
 * audit_measure.c (eight lanes by index mod 8), the same on every CPU. */
void dl_audit_measure(const int16_t *z, const float *x, const float *q, size_t len, struct dl_audit_measure *out);
/* A result's smallest and largest value (0 and 0 for no elements). */
struct dl_audit_extremes {
    double lo, hi;
};
/* Over a result q, in one pass: s and a as above, d = |q|_2, r = q.q (the
 * same sum as d, before its root), its extremes. */
void dl_audit_measure_result(const int16_t *z, const float *q, size_t len, struct dl_audit_measure *out,
                             struct dl_audit_extremes *ext);
/* Either of the above on the portable path (portable) or the fastest this
 * CPU has; q NULL: d = |x|_2 and r = x.x; ext may be NULL. Tests hold the paths equal. */
void dl_audit_measure_path(bool portable, const int16_t *z, const float *x, const float *q, size_t len,
                           struct dl_audit_measure *out, struct dl_audit_extremes *ext);
/* dl_audit_measure of x against q and dl_audit_measure_result of q, the
 * same bits as the two calls, in one sweep over z and q. */
void dl_audit_measure_both(const int16_t *z, const float *x, const float *q, size_t len, struct dl_audit_measure *mx,
                           struct dl_audit_measure *mq, struct dl_audit_extremes *eq);
void dl_audit_measure_both_path(bool portable, const int16_t *z, const float *x, const float *q, size_t len,
                                struct dl_audit_measure *mx, struct dl_audit_measure *mq,
                                struct dl_audit_extremes *eq);
/* Whether two measures of the same chunk agree: the sender's published one
 * and the one recomputed from its signed chunk (the same arithmetic on the
 * same floats, so equal up to a margin kept for other compilers). */
bool dl_audit_measure_agrees(const struct dl_audit_measure *published, const struct dl_audit_measure *recomputed);
/* The tolerance of the equation: 8 e2 (the result's rounding, in the
 * direction) plus the double rounding of every sum on either side. */
double dl_audit_tolerance(const struct dl_audit_claim *c, size_t count, const struct dl_audit_result *res);
/* The most e2 an honest aggregator can need for a result of this L2 norm,
 * max norm and range (max - min) under `codec` (enum dl_codec); INFINITY
 * when the codec gives no bound. */
double dl_audit_e2_bound(int codec, double q_l2, double q_linf, double q_range, size_t len);
/* Checks one chunk. clip: centered clip with radius tau (else every c_j must
 * be 1 and delta 0). An e2 beyond dl_audit_e2_bound, or a delta beyond
 * tau / 2, would buy the aggregator slack an honest one never needs: the
 * chunk is then uncheckable. why (may be NULL) says what failed. */
enum dl_audit_verdict dl_audit_check(const struct dl_audit_claim *c, size_t count, const struct dl_audit_result *res,
                                     bool clip, double tau, char *why, size_t why_size);
/* Whether a contributor's claimed measures (s, a, d, r) of its chunk x can
 * be true of some x against the result res (its s, l1 and l2 filled in):
 * finite, a >= 0, d >= 0, |s| <= a, a <= sqrt(len) (d + |q|_2),
 * d <= sqrt(len) 2^32 + |q|_2 (no value reaches 2^32, wirecodec.h),
 * |s - z.q| <= DL_AUDIT_SIGMAS d, which z.(x - q) exceeds with probability
 * at most 2.5e-14 (Hoeffding, as above), and |r - q.q| <= d |q|_2
 * (Cauchy-Schwarz), all within the double rounding of the sums. The
 * equation alone cannot see through a claim that nobody but the
 * aggregator can check against its chunk (its own, or a colluding
 * sender's); this bounds what such a claim absorbs: c_j |s_j - z.q| <=
 * DL_AUDIT_SIGMAS c_j d_j, at most DL_AUDIT_SIGMAS tau under centered clip,
 * and c_j |r_j - q.q| <= c_j d_j |q|_2 (at most tau |q|_2). A false claim
 * is evidence against its signer. why (may be NULL) says which bound
 * fails. */
bool dl_audit_claim_possible(const struct dl_audit_measure *m, const struct dl_audit_result *res, char *why,
                             size_t why_size);

#endif
