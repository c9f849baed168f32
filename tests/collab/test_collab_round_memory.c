/* The averaging round alone (src/collab/round.h), its members in one process
 * over a transport in memory, driven by a deterministic pump on a virtual
 * clock: no network, no threads, no wall-clock time in any decision.
 *
 * Every member that completes holds the same signed result bytes and the
 * same vector, and each chunk of it is the weighted mean, in member order and
 * in double, of the contributions its contributor mask names, each through
 * the codec's rounding on the way in and the result's on the way out; what
 * each says it sent (error feedback) is its input through the codec where a
 * result's mask names it, 0 where not.
 *
 * The transport does what the network and the service do for a round: a
 * request lands in the addressee's queue with a token, its answer in the
 * asker's queue; avg.alive is answered at once (the network thread's part);
 * a member that has finished answers from its store; a dead member's
 * connections close (every request to it fails as disconnected) or, for a
 * member that hangs, its requests time out. The pump steps each member in
 * turn and moves the clock 50 ms on only when no message is waiting. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/round.h"
#include "collab/wirecodec.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define MAX_MEMBERS 8
#define CHUNK DL_AVG_CHUNK_ELEMS
#define CLOCK_START 1000.0
#define TICK_S 0.05

enum { ALIVE = 0, KILLED, HUNG };

struct pending {                  /* a request not yet answered */
    uint64_t token;
    size_t from, to;
    uint64_t serial;
    int kind;                     /* of the answer */
    uint32_t part, chunk, member;
    double expires;
    bool open;
    int answered_status;          /* how it was answered (the probe's check) */
    char answered_text[64];
};

struct swarm;

struct member {
    struct swarm *swarm;
    size_t index;
    uint8_t pk[DL_NET_PUBLIC_KEY], sk[64];
    char peer_id[DL_PEER_ID_HEX];
    struct dl_bans bans;
    struct dl_round *r;
    struct dl_avg_event *head, *tail;
    float *input;
    int state;                    /* ALIVE, KILLED, HUNG */
    bool dying;                   /* dies once its current step returns */
    bool finished;
};

struct swarm {
    struct member m[MAX_MEMBERS];
    size_t n;
    double clock;
    struct pending *pending;
    size_t num_pending, cap_pending;
    uint64_t next_token;
    long victim;                  /* dies when it sends a result of chunk >= 1; -1: nobody */
    int victim_fate;              /* KILLED or HUNG */
};

static void enqueue(struct member *to, struct dl_avg_event *ev) {
    ev->next = NULL;
    if (to->tail) to->tail->next = ev;
    else to->head = ev;
    to->tail = ev;
}

static struct dl_avg_event *take_all(struct member *m) {
    struct dl_avg_event *list = m->head;
    m->head = m->tail = NULL;
    return list;
}

static void free_events(struct dl_avg_event *ev) {
    while (ev) {
        struct dl_avg_event *next = ev->next;
        dl_avg_event_free(ev);
        ev = next;
    }
}

static long find_member(struct swarm *s, const char *peer_id) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->m[i].peer_id, peer_id)) return (long)i;
    return -1;
}

/* Closes a request with its answer, which reaches the asker while its round
 * runs (the service drops answers for a round that is over). */
static void answer(struct swarm *s, struct pending *p, int status, const void *data, size_t size) {
    if (!p->open) return;
    p->open = false;
    p->answered_status = status;
    if (status == DL_NET_REMOTE_ERROR && data)
        snprintf(p->answered_text, sizeof p->answered_text, "%.*s", (int)size, (const char *)data);
    struct member *asker = &s->m[p->from];
    if (asker->state != ALIVE || asker->finished) return;
    struct dl_avg_event *ev = dl_avg_event_new(p->kind, s->m[p->to].peer_id, data, data ? size : 0);
    if (!ev) abort();
    ev->status = status;
    ev->serial = p->serial;
    ev->part = p->part;
    ev->chunk = p->chunk;
    ev->member = p->member;
    enqueue(asker, ev);
}

static void answer_text(struct swarm *s, struct pending *p, const char *text) {
    answer(s, p, DL_NET_REMOTE_ERROR, text, strlen(text));
}

static struct pending *find_pending(struct swarm *s, uint64_t token) {
    for (size_t i = 0; i < s->num_pending; i++)
        if (s->pending[i].token == token) return &s->pending[i];
    return NULL;
}

/* Whether member m (alive, holding our round) speaks for it now. */
static bool silent(const struct member *m) { return m->state != ALIVE || m->dying; }

static int mem_request(void *ctx, uint64_t serial, const char *peer_id, const char *method, const void *payload,
                       size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member) {
    struct member *me = ctx;
    struct swarm *s = me->swarm;
    if (me->dying) return 0; /* lost with the process */
    long to = find_member(s, peer_id);
    if (to < 0) return dl_fail("no member %s", peer_id);
    if (me->index == (size_t)s->victim && !strcmp(method, "avg.result") && chunk >= 1) {
        /* The victim stops here, in the middle of sending its results. */
        me->dying = true;
        return 0;
    }
    if (s->num_pending == s->cap_pending) {
        s->cap_pending = s->cap_pending ? 2 * s->cap_pending : 256;
        s->pending = realloc(s->pending, s->cap_pending * sizeof *s->pending);
        if (!s->pending) abort();
    }
    struct pending *p = &s->pending[s->num_pending++];
    *p = (struct pending){.token = ++s->next_token, .from = me->index, .to = (size_t)to, .serial = serial,
                          .kind = kind, .part = part, .chunk = chunk, .member = member,
                          .expires = s->clock + (timeout_s > 0.05 ? timeout_s : 0.05), .open = true};
    struct member *dst = &s->m[to];
    int incoming = dl_avg_method_kind(method);
    if (dst->state == KILLED) {
        answer(s, p, DL_NET_DISCONNECTED, NULL, 0);
    } else if (dst->state == HUNG) {
        /* No answer: the request times out. */
    } else if (incoming == EV_ALIVE) {
        if (!dst->finished && dl_round_alive_for(dst->r, payload, size, s->clock)) answer(s, p, DL_NET_OK, NULL, 0);
        else answer_text(s, p, "unknown round");
    } else if (dst->finished) {
        /* What the service keeps of a round: one that completed here. */
        const struct dl_round *r = dst->r;
        if (r->status == DL_AVG_OK && r->i_receive && size >= DL_GROUP_ROUND_ID &&
            !memcmp(payload, r->g.round_id, DL_GROUP_ROUND_ID)) {
            const uint8_t *bytes;
            size_t bytes_size;
            int status = dl_round_answer_finished(r, incoming, payload, size, &bytes, &bytes_size);
            answer(s, p, status, bytes, bytes_size);
        } else {
            answer_text(s, p, "unknown round");
        }
    } else if (dl_bans_is_banned(&dst->bans, me->peer_id)) {
        answer_text(s, p, "refused: banned for misbehaving in an averaging round");
    } else if (incoming < 0 || size < DL_GROUP_ROUND_ID || memcmp(payload, dst->r->g.round_id, DL_GROUP_ROUND_ID)) {
        answer_text(s, p, "unknown round");
    } else {
        struct dl_avg_event *ev = dl_avg_event_new(incoming, me->peer_id, payload, size);
        if (!ev) abort();
        ev->token = p->token;
        enqueue(dst, ev);
    }
    return 0;
}

static int mem_respond(void *ctx, uint64_t token, int status, const void *payload, size_t size) {
    struct member *me = ctx;
    if (silent(me)) return 0;
    struct pending *p = find_pending(me->swarm, token);
    /* Answers to requests that are gone are dropped, as net drops them. */
    if (p && p->to == me->index) answer(me->swarm, p, status, payload, size);
    return 0;
}

static void mem_respond_text(void *ctx, uint64_t token, const char *text) {
    mem_respond(ctx, token, DL_NET_REMOTE_ERROR, text, strlen(text));
}

static struct dl_avg_event *mem_wait(void *ctx, double until) {
    (void)until; /* the pump moves the clock; it never waits */
    return take_all(ctx);
}

static void mem_sign(void *ctx, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]) {
    struct member *me = ctx;
    crypto_sign_detached(sig, NULL, data, size, me->sk);
}

static double mem_now(void *ctx) { return ((struct member *)ctx)->swarm->clock; }

static const struct dl_round_transport_ops mem_ops = {
    .request = mem_request,
    .respond = mem_respond,
    .respond_text = mem_respond_text,
    .wait = mem_wait,
    .sign = mem_sign,
    .now = mem_now,
};

/* The victim's process ends (KILLED: its connections close) or freezes
 * (HUNG: nothing it holds is ever answered). */
static void bring_down(struct swarm *s, struct member *m, int fate) {
    m->dying = false;
    m->state = fate;
    free_events(take_all(m));
    for (size_t i = 0; i < s->num_pending; i++) {
        struct pending *p = &s->pending[i];
        if (!p->open) continue;
        if (p->from == m->index) p->open = false;
        else if (p->to == m->index && fate == KILLED) answer(s, p, DL_NET_DISCONNECTED, NULL, 0);
    }
}

static bool queues_empty(const struct swarm *s) {
    for (size_t i = 0; i < s->n; i++)
        if (s->m[i].head) return false;
    return true;
}

static void expire(struct swarm *s) {
    for (size_t i = 0; i < s->num_pending; i++)
        if (s->pending[i].open && s->pending[i].expires <= s->clock) answer(s, &s->pending[i], DL_NET_TIMEOUT, NULL, 0);
}

/* ---- scenarios ------------------------------------------------------------------ */

struct scenario {
    const char *name;
    size_t members;
    int codec;
    const char *roles;            /* t trainer, c client, a aux; one letter per member */
    uint64_t parts[MAX_MEMBERS];  /* part sizes in elements */
    double weights[MAX_MEMBERS];
    long victim;                  /* -1: nobody fails */
    int victim_fate;
    bool rereducer_dies;          /* the re-reducer of the victim's part is killed with it */
    bool probe_rereduce;          /* member 0 asks part 1's re-reducer to re-reduce while part 1's aggregator lives */
    bool probe_bundles;           /* member 0 sends member 3 malformed bundles of projections */
    int lie;                      /* enum dl_misbehaviour of member `liar` (0: everyone is honest) */
    long liar;
    bool clip;                    /* centered clip (tau below, else 1e9: every contribution counts
                                   * whole); its results are not compared with the mean */
    double tau;
    long outlier;                 /* under clip: this member's values lie `shift` above the others' */
    float shift;
    long accomplice;              /* lie DL_MISBEHAVE_COLLUDE_*: the aggregator `liar` colludes with */
};

static uint32_t rng_state;

static float next_value(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return (float)((double)(rng_state >> 8) / (double)(1u << 24) * 2.0 - 1.0);
}

static int role_of(char letter) {
    return letter == 'c' ? DL_MEMBER_CLIENT : letter == 'a' ? DL_MEMBER_AUX : DL_MEMBER_TRAINER;
}

/* The reference of one chunk: the contributors' chunks through the codec,
 * their weighted mean in member order in double, that mean through the
 * codec. */
static void reference_chunk(const struct scenario *sc, struct swarm *s, const uint8_t *mask, uint64_t off, size_t len,
                            float *out) {
    size_t enc = dl_codec_size(sc->codec, len);
    uint8_t *bytes = malloc(enc);
    float *decoded = malloc(len * sizeof *decoded);
    double *acc = calloc(len, sizeof *acc);
    if (!bytes || !decoded || !acc) abort();
    double present = 0;
    for (size_t j = 0; j < sc->members; j++)
        if (mask[j / 8] & (1u << (j % 8))) present += sc->weights[j];
    bool equal = !(present > 0);
    double total = 0;
    for (size_t j = 0; j < sc->members; j++) {
        if (!(mask[j / 8] & (1u << (j % 8)))) continue;
        if (dl_codec_encode(sc->codec, s->m[j].input + off, len, bytes) ||
            dl_codec_decode(sc->codec, bytes, enc, len, decoded))
            abort();
        double w = equal ? 1.0 : sc->weights[j];
        for (size_t e = 0; e < len; e++) acc[e] += w * (double)decoded[e];
        total += w;
    }
    for (size_t e = 0; e < len; e++) decoded[e] = (float)(acc[e] / total);
    uint8_t *result = malloc(dl_codec_result_max(sc->codec, len));
    size_t result_size;
    if (!result || dl_codec_result_encode(sc->codec, decoded, len, result, &result_size) ||
        dl_codec_result_decode(sc->codec, result, result_size, len, out))
        abort();
    free(result);
    free(bytes);
    free(decoded);
    free(acc);
}

/* What member i says it sent (dl_round_copy_sent): per chunk its input
 * through the codec where the result's mask names it, 0 elsewhere; then the
 * same with its bit cleared in one result's mask (that chunk: all 0). */
static void check_sent(const struct scenario *sc, struct swarm *s, size_t i, size_t n) {
    struct dl_round *r = s->m[i].r;
    float *sent = malloc(n * sizeof *sent), *want = malloc(CHUNK * sizeof *want);
    uint8_t *bytes = malloc(dl_codec_size(sc->codec, CHUNK));
    if (!sent || !want || !bytes) abort();
    for (int pass = 0; pass < 2; pass++) {
        /* pass 1: member i left out of the first chunk it is in */
        long cleared = -1;
        for (size_t gi = 0; pass == 1 && gi < r->num_chunks && cleared < 0; gi++)
            if (r->store[gi][28 + i / 8] & (1u << (i % 8))) {
                r->store[gi][28 + i / 8] &= (uint8_t)~(1u << (i % 8));
                cleared = (long)gi;
            }
        if (pass == 1 && cleared < 0) break;
        for (size_t e = 0; e < n; e++) sent[e] = NAN;
        CHECK_MSG(dl_round_copy_sent(r, sent) == 0, "%s: member %zu: %s", sc->name, i, dl_error());
        size_t wrong = 0;
        for (size_t p = 0; p < sc->members; p++)
            for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
                const uint8_t *res = r->store[r->first_chunk[p] + k];
                uint64_t off, len;
                dl_round_chunk_range(r, p, k, &off, &len);
                bool in = sc->roles[i] != 'a' && (res[28 + i / 8] & (1u << (i % 8)));
                if (in && (dl_codec_encode(sc->codec, s->m[i].input + off, len, bytes) ||
                           dl_codec_decode(sc->codec, bytes, dl_codec_size(sc->codec, len), len, want)))
                    abort();
                if (!in) memset(want, 0, len * sizeof *want);
                wrong += memcmp(want, sent + off, len * sizeof *want) != 0;
            }
        CHECK_MSG(wrong == 0, "%s: member %zu%s: %zu chunks of its sent are not what the aggregators decoded",
                  sc->name, i, pass ? " (left out of one chunk)" : "", wrong);
        if (cleared >= 0) r->store[cleared][28 + i / 8] |= (uint8_t)(1u << (i % 8));
    }
    free(sent);
    free(want);
    free(bytes);
}

/* What a run ends with, to compare two runs of one scenario. */
struct outcome {
    double virtual_s;
    uint64_t result_hash;         /* FNV-1a of the first receiver's vector */
};

static uint64_t fnv1a(const void *data, size_t size) {
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static bool colluding(const struct scenario *sc) {
    return sc->lie == DL_MISBEHAVE_COLLUDE_SEND || sc->lie == DL_MISBEHAVE_COLLUDE_SILENT ||
           sc->lie == DL_MISBEHAVE_COLLUDE_TWO_FACED;
}

static struct outcome run_scenario(const struct scenario *sc) {
    struct outcome outcome = {0, 0};
    struct swarm *s = calloc(1, sizeof *s);
    if (!s) abort();
    s->n = sc->members;
    s->clock = CLOCK_START;
    s->victim = sc->victim;
    s->victim_fate = sc->victim_fate;
    size_t n = 0;
    for (size_t i = 0; i < sc->members; i++) n += sc->parts[i];

    struct dl_group g;
    memset(&g, 0, sizeof g);
    for (size_t i = 0; i < DL_GROUP_ROUND_ID; i++) g.round_id[i] = (uint8_t)(0xA0 + i);
    g.epoch = 7;
    g.elements = n;
    g.codec = sc->codec;
    g.stall_s = 10;
    g.aggregation = sc->clip ? DL_AGG_CENTERED_CLIP : DL_AGG_MEAN;
    g.clip_tau = sc->tau > 0 ? sc->tau : 1e9;
    g.clip_iterations = 20;
    g.n = sc->members;
    rng_state = 0x9E3779B9u ^ (uint32_t)(sc->members * 7919);
    uint64_t offset = 0;
    for (size_t i = 0; i < sc->members; i++) {
        struct member *m = &s->m[i];
        m->swarm = s;
        m->index = i;
        uint8_t seed[32];
        memset(seed, (int)(i + 1), sizeof seed);
        crypto_sign_seed_keypair(m->pk, m->sk, seed);
        dl_net_peer_id_from_key(m->pk, m->peer_id);
        dl_bans_init(&m->bans, 60, 3, 10);
        struct dl_group_member *gm = &g.members[i];
        snprintf(gm->peer_id, sizeof gm->peer_id, "%s", m->peer_id);
        memcpy(gm->pk, m->pk, DL_NET_PUBLIC_KEY);
        gm->role = role_of(sc->roles[i]);
        gm->weight = gm->role == DL_MEMBER_AUX ? 0 : sc->weights[i];
        gm->bandwidth_mbit = 100;
        gm->part_offset = offset;
        gm->part_elems = sc->parts[i];
        offset += sc->parts[i];
        m->input = malloc(n * sizeof *m->input);
        if (!m->input) abort();
        /* Each member's values sit around its own level, so that a missing
         * or doubled contribution moves the mean. */
        for (size_t e = 0; e < n; e++) m->input[e] = next_value() + (float)i;
        if (sc->shift > 0 && (long)i == sc->outlier)
            for (size_t e = 0; e < n; e++) m->input[e] += sc->shift;
    }
    for (size_t i = 0; i < sc->members; i++) {
        struct member *m = &s->m[i];
        const struct dl_round_transport tp = {&mem_ops, m};
        struct dl_round *r = dl_round_new(&tp, &m->bans);
        if (!r) abort();
        r->serial = 1;
        r->has_group = true;
        r->g = g;
        r->me = i;
        r->input = m->input;
        r->n = n;
        r->weight = g.members[i].weight;
        r->input_ready = true;
        r->start = r->group_time = s->clock;
        r->deadline_s = 60;
        r->deadline = s->clock + r->deadline_s;
        r->stall_s = g.stall_s;
        m->r = r;
        if (sc->lie && (long)i == sc->liar) r->misbehaviour = sc->lie;
        if (colluding(sc) && (long)i == sc->accomplice) r->misbehaviour = DL_MISBEHAVE_COLLUDE;
        CHECK_MSG(dl_round_begin(r) == 0, "%s: member %zu cannot begin: %s", sc->name, i, r->reason);
        /* Nonces of our choosing, so that a run is the same bits every
         * time: what the others reveal is still unknown to the liar when
         * it signs. */
        memset(r->audit_nonce, (int)(0x40 + i), sizeof r->audit_nonce);
    }

    if (colluding(sc)) s->m[sc->liar].r->accomplice = s->m[sc->accomplice].r;

    /* A member that wrongly takes part 1's aggregator for dead asks its
     * re-reducer for chunk 0: the re-reducer must find the aggregator
     * alive and refuse, or it would sign generation-1 bits where everyone
     * else holds the aggregator's. */
    uint64_t probe_token = 0;
    if (sc->probe_rereduce) {
        uint8_t ref[DL_AVG_REF_HEADER];
        dl_round_write_ref(ref, s->m[0].r, 1, 0);
        long rr = dl_round_rereducer(s->m[0].r, 1);
        CHECK(rr > 1);
        mem_request(&s->m[0], 999, s->m[rr].peer_id, "avg.rereduce", ref, sizeof ref, 30, EV_REREDUCE_REPLY, 1, 0,
                    (uint32_t)rr);
        probe_token = s->next_token;
    }

    /* Bundles of projections no honest sender writes (truncated, a block
     * of the receiver's own part its sender did not sign, a block in
     * another member's name, a count beyond the group): each refused
     * whole, the round unharmed. (Only the receiver's own part needs the
     * signature: that block goes into its attestation as evidence.) */
    uint64_t bundle_tokens[4] = {0};
    if (sc->probe_bundles) {
        const struct dl_round *r0 = s->m[0].r;
        size_t psz1 = DL_AUDIT_PROJ_HEAD + 24 * dl_round_chunks_of(r0, 1) + DL_NET_SIGNATURE;
        size_t psz3 = DL_AUDIT_PROJ_HEAD + 24 * dl_round_chunks_of(r0, 3) + DL_NET_SIGNATURE;
        uint8_t *b = calloc(1, DL_AUDIT_BUNDLE_HEAD + psz1 + psz3);
        if (!b) abort();
        memcpy(b, r0->g.round_id, DL_GROUP_ROUND_ID);
        dl_put_u16(b + 16, 0);
        b[18] = DL_AUDIT_BUNDLE;
        dl_put_u16(b + 20, 1);
        uint8_t *blk = b + DL_AUDIT_BUNDLE_HEAD;
        memcpy(blk, r0->g.round_id, DL_GROUP_ROUND_ID);
        blk[18] = DL_AUDIT_PROJECTIONS;
        const size_t sizes[4] = {DL_AUDIT_BUNDLE_HEAD + 10, DL_AUDIT_BUNDLE_HEAD + psz3, DL_AUDIT_BUNDLE_HEAD + psz1,
                                 DL_AUDIT_BUNDLE_HEAD + psz1};
        for (int t = 0; t < 4; t++) {
            dl_put_u16(blk + 16, t == 1 ? 3 : 1);   /* member 3's own part */
            dl_put_u16(blk + 20, t == 2 ? 2 : 0);   /* in member 2's name */
            dl_put_u16(b + 20, t == 3 ? 300 : 1); /* beyond the group */
            mem_request(&s->m[0], 999, s->m[3].peer_id, "avg.audit", b, sizes[t], 30, EV_AUDIT_ACK, 0, 0, 3);
            bundle_tokens[t] = s->next_token;
        }
        free(b);
    }

    /* The pump. */
    for (;;) {
        bool running = false;
        for (size_t i = 0; i < s->n; i++) {
            struct member *m = &s->m[i];
            if (m->state != ALIVE || m->finished) continue;
            running = true;
            dl_round_handle(m->r, take_all(m));
            double wake_at;
            bool over = dl_round_advance(m->r, &wake_at);
            if (m->dying) {
                bring_down(s, m, s->victim_fate);
                long rr = dl_round_rereducer(m->r, i);
                if (sc->rereducer_dies && rr >= 0) bring_down(s, &s->m[rr], KILLED);
                continue;
            }
            if (over) {
                dl_round_end(m->r);
                m->finished = true;
                free_events(take_all(m)); /* answers to its last requests, if any */
            }
        }
        if (!running) break;
        if (queues_empty(s)) {
            s->clock += TICK_S;
            expire(s);
        }
        if (s->clock > CLOCK_START + 120) {
            CHECK_MSG(false, "%s: the pump ran past the rounds' deadlines", sc->name);
            break;
        }
    }

    /* Every member that did not fail completed; every receiving one holds
     * the same result bytes and the same vector. */
    long first = -1;
    size_t completed = 0;
    float *ref = malloc(CHUNK * sizeof *ref);
    float **out = calloc(sc->members, sizeof *out);
    if (!ref || !out) abort();
    if (sc->rereducer_dies) {
        /* Nobody may re-reduce the dead part but its re-reducer, dead too:
         * every survivor fails the round at once (the re-reducer counts as
         * failed), not at the round's deadline. */
        for (size_t i = 0; i < s->n; i++) {
            if (s->m[i].state != ALIVE) continue;
            const struct dl_round *r = s->m[i].r;
            CHECK_MSG(r->status == DL_AVG_FAILED && strstr(r->reason, "cannot be recovered"),
                      "%s: member %zu ended %s: %s", sc->name, i, dl_avg_status_name(r->status), r->reason);
        }
        CHECK_MSG(s->clock - CLOCK_START < 30, "%s: the survivors gave up after %.2f s of virtual time", sc->name,
                  s->clock - CLOCK_START);
        printf("%s: %zu members, the survivors gave up after %.2f s of virtual time\n", sc->name, sc->members,
               s->clock - CLOCK_START);
        goto done;
    }
    if (sc->clip && !sc->lie) {
        /* Every member applies the same results and judges the clip
         * weights they commit to alike: the outlier clipped (in every
         * result that names it), everyone seen, nobody else clipped. */
        bool first_seen[MAX_MEMBERS], first_clipped[MAX_MEMBERS];
        for (size_t i = 0; i < s->n; i++) {
            const struct dl_round *r = s->m[i].r;
            CHECK_MSG(r->status == DL_AVG_OK, "%s: member %zu ended %s: %s", sc->name, i,
                      dl_avg_status_name(r->status), r->reason);
            bool seen[MAX_MEMBERS], clipped[MAX_MEMBERS];
            dl_round_clip_verdicts(r, seen, clipped);
            for (size_t j = 0; j < s->n; j++) {
                CHECK_MSG(seen[j], "%s: member %zu sees no result naming member %zu", sc->name, i, j);
                CHECK_MSG(clipped[j] == ((long)j == sc->outlier), "%s: member %zu judges member %zu %s", sc->name,
                          i, j, clipped[j] ? "clipped" : "not clipped");
            }
            if (i == 0) {
                memcpy(first_seen, seen, sizeof seen);
                memcpy(first_clipped, clipped, sizeof clipped);
            }
            CHECK_MSG(!memcmp(first_seen, seen, s->n * sizeof *seen) &&
                          !memcmp(first_clipped, clipped, s->n * sizeof *clipped),
                      "%s: members 0 and %zu judge the clipping differently", sc->name, i);
            bool same = r->num_chunks == s->m[0].r->num_chunks;
            for (size_t gi = 0; same && gi < r->num_chunks; gi++)
                same = r->store_size[gi] == s->m[0].r->store_size[gi] &&
                       !memcmp(r->store[gi], s->m[0].r->store[gi], r->store_size[gi]);
            CHECK_MSG(same, "%s: members 0 and %zu hold different result bytes", sc->name, i);
        }
        printf("%s: %zu members, every member judged member %ld clipped and nobody else\n", sc->name, sc->members,
               sc->outlier);
        goto done;
    }
    if (sc->lie && sc->lie != DL_MISBEHAVE_NO_ATTESTATION) {
        size_t aggregator_banned = 0;
        /* The liar is caught by every other member, on evidence: each
         * applies nothing and bans the liar, and nobody else. (A colluding
         * pair: the accomplice that claimed falsely first, then its
         * aggregator. An accomplice that will not show its chunk: nothing
         * applied, and it is refused for ban_s.) */
        for (size_t i = 0; i < s->n; i++) {
            if ((long)i == sc->liar || s->m[i].state != ALIVE || (colluding(sc) && (long)i == sc->accomplice))
                continue;
            const struct dl_round *r = s->m[i].r;
            char caught[64];
            snprintf(caught, sizeof caught, "caught member %ld", sc->liar);
            if (sc->lie == DL_MISBEHAVE_COLLUDE_SILENT)
                CHECK_MSG(r->status == DL_AVG_UNSURE && strstr(r->reason, "did not disclose"),
                          "%s: member %zu ended %s: %s", sc->name, i, dl_avg_status_name(r->status), r->reason);
            else
                CHECK_MSG(r->status == DL_AVG_FAILED && strstr(r->reason, caught), "%s: member %zu ended %s: %s",
                          sc->name, i, dl_avg_status_name(r->status), r->reason);
            /* A convicted accomplice's chunk is then disclosed by every
             * contributor, and the equation with their chunks convicts
             * its aggregator too; one that will not show it, neither. */
            for (size_t j = 0; j < s->n; j++) {
                bool liar = (long)j == sc->liar || (colluding(sc) && sc->lie != DL_MISBEHAVE_COLLUDE_SILENT &&
                                                    (long)j == sc->accomplice);
                if (sc->lie == DL_MISBEHAVE_COLLUDE_SILENT && (long)j == sc->accomplice) continue;
                /* Two-faced, the accomplice is convicted on its two
                 * signatures, which carry no chunk: a member bans the
                 * aggregator once it holds every contributor's chunk, and the
                 * convicted accomplice may be gone before it answers all
                 * (counted below: at least one bans it). */
                if (sc->lie == DL_MISBEHAVE_COLLUDE_TWO_FACED && (long)j == sc->accomplice) {
                    aggregator_banned += dl_bans_is_banned(&s->m[i].bans, s->m[j].peer_id);
                    continue;
                }
                CHECK_MSG(dl_bans_is_banned(&s->m[i].bans, s->m[j].peer_id) == liar,
                          "%s: member %zu %s member %zu", sc->name, i, liar ? "did not ban" : "banned", j);
            }
        }
        if (sc->lie == DL_MISBEHAVE_COLLUDE_TWO_FACED)
            CHECK_MSG(aggregator_banned > 0, "%s: no honest member banned the aggregator", sc->name);
        printf("%s: %zu members, caught after %.2f s of virtual time\n", sc->name, sc->members,
               s->clock - CLOCK_START);
        goto done;
    }

    for (size_t i = 0; i < s->n; i++) {
        struct member *m = &s->m[i];
        if (m->state != ALIVE) continue;
        CHECK_MSG(m->r->status == DL_AVG_OK, "%s: member %zu ended with %s: %s", sc->name, i,
                  dl_avg_status_name(m->r->status), m->r->reason);
        if (m->r->status != DL_AVG_OK || !m->r->i_receive) continue;
        completed++;
        out[i] = malloc(n * sizeof *out[i]);
        if (!out[i]) abort();
        for (size_t e = 0; e < n; e++) out[i][e] = NAN;
        dl_round_copy_out(m->r, out[i]);
        if (first < 0) {
            first = (long)i;
            continue;
        }
        const struct dl_round *a = s->m[first].r, *b = m->r;
        bool same_store = a->num_chunks == b->num_chunks;
        for (size_t gi = 0; same_store && gi < a->num_chunks; gi++)
            same_store =
                a->store_size[gi] == b->store_size[gi] && !memcmp(a->store[gi], b->store[gi], a->store_size[gi]);
        CHECK_MSG(same_store, "%s: members %ld and %zu hold different result bytes", sc->name, first, i);
        CHECK_MSG(!memcmp(out[first], out[i], n * sizeof(float)), "%s: members %ld and %zu hold different vectors",
                  sc->name, first, i);
    }
    size_t receivers = 0, survivors = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->m[i].state != ALIVE) continue;
        survivors++;
        receivers += sc->roles[i] != 'a';
    }
    CHECK_MSG(completed == receivers, "%s: %zu of %zu receiving members completed", sc->name, completed, receivers);
    for (size_t i = 0; first >= 0 && i < s->n; i++)
        if (s->m[i].state == ALIVE && s->m[i].r->status == DL_AVG_OK && s->m[i].r->i_receive) check_sent(sc, s, i, n);

    /* Each chunk against the reference over its contributors. */
    size_t rereduced = 0, relayed_ok = 0;
    if (first >= 0) {
        const struct dl_round *r = s->m[first].r;
        for (size_t p = 0; p < sc->members; p++)
            for (size_t k = 0; k < dl_round_chunks_of(r, p); k++) {
                struct dl_avg_chunk_info ci;
                dl_round_chunk_info(r, p, k, &ci);
                double weight = 0;
                uint8_t expected_mask[DL_AVG_MAX_MEMBERS / 8] = {0};
                for (size_t j = 0; j < sc->members; j++) {
                    bool sender = sc->roles[j] != 'a';
                    bool in = ci.contributors[j / 8] & (1u << (j % 8));
                    CHECK_MSG(!in || sender, "%s: aux member %zu counted in part %zu chunk %zu", sc->name, j, p, k);
                    if (in) weight += sc->weights[j];
                    bool lost = (long)j == sc->victim;
                    if (sender && !lost) expected_mask[j / 8] |= (uint8_t)(1u << (j % 8));
                }
                CHECK_MSG(ci.weight == weight, "%s: part %zu chunk %zu carries weight %g, its contributors %g",
                          sc->name, p, k, ci.weight, weight);
                if (sc->victim < 0) {
                    CHECK_MSG(ci.generation == 0 && ci.reducer == p && !memcmp(ci.contributors, expected_mask,
                                                                              sizeof expected_mask),
                              "%s: part %zu chunk %zu: generation %u by %u, not everyone's", sc->name, p, k,
                              ci.generation, ci.reducer);
                } else if ((long)p == sc->victim && ci.generation == 1) {
                    rereduced++;
                    CHECK_MSG(ci.reducer == (uint16_t)dl_round_rereducer(r, p),
                              "%s: chunk %zu of the dead part re-reduced by %u", sc->name, k, ci.reducer);
                    /* Re-reduced from the survivors' vectors, all of them. */
                    CHECK_MSG(!memcmp(ci.contributors, expected_mask, sizeof expected_mask),
                              "%s: chunk %zu of the dead part re-reduced without every survivor", sc->name, k);
                } else if ((long)p == sc->victim) {
                    relayed_ok++;
                    CHECK(ci.reducer == p);
                } else {
                    /* A survivor's part: every survivor's vector is in it;
                     * the dead member's, wherever it arrived in time. */
                    bool all = true;
                    for (size_t j = 0; j < sizeof expected_mask; j++)
                        all = all && (ci.contributors[j] & expected_mask[j]) == expected_mask[j];
                    CHECK_MSG(all && ci.generation == 0 && ci.reducer == p,
                              "%s: part %zu chunk %zu lacks a survivor or was re-reduced", sc->name, p, k);
                }
                reference_chunk(sc, s, ci.contributors, ci.offset, (size_t)ci.length, ref);
                CHECK_MSG(!memcmp(ref, out[first] + ci.offset, (size_t)ci.length * sizeof(float)),
                          "%s: part %zu chunk %zu differs from the weighted mean of its contributors", sc->name, p, k);
            }
    }
    if (sc->victim >= 0) {
        /* The victim died after it had sent some results: those reached
         * everyone (relayed where needed), the rest were re-reduced. */
        CHECK_MSG(rereduced > 0, "%s: nothing of the dead part was re-reduced", sc->name);
        CHECK_MSG(relayed_ok > 0, "%s: nothing the victim reduced survived", sc->name);
        CHECK(survivors == sc->members - 1);
    }
    for (int t = 0; sc->probe_bundles && t < 4; t++) {
        struct pending *probe = find_pending(s, bundle_tokens[t]);
        CHECK_MSG(probe && !probe->open && probe->answered_status == DL_NET_REMOTE_ERROR &&
                      !strncmp(probe->answered_text, "refused: a bundle", 17),
                  "%s: malformed bundle %d answered with status %d (%s)", sc->name, t,
                  probe ? probe->answered_status : -1, probe ? probe->answered_text : "no request");
    }
    if (sc->probe_rereduce) {
        struct pending *probe = find_pending(s, probe_token);
        CHECK_MSG(probe && !probe->open && probe->answered_status == DL_NET_REMOTE_ERROR &&
                      !strcmp(probe->answered_text, "aggregator alive"),
                  "%s: the re-reducer answered a re-reduction of a live aggregator's part with status %d (%s)",
                  sc->name, probe ? probe->answered_status : -1, probe ? probe->answered_text : "no request");
    }
    outcome.virtual_s = s->clock - CLOCK_START;
    if (first >= 0) outcome.result_hash = fnv1a(out[first], n * sizeof(float));
    printf("%s: %zu members, %zu elements, codec %s: %zu completed, %.2f s of virtual time, %zu re-reduced\n",
           sc->name, sc->members, n, dl_codec_name(sc->codec), completed, s->clock - CLOCK_START, rereduced);

done:
    for (size_t i = 0; i < s->n; i++) {
        free(out[i]);
        free_events(take_all(&s->m[i]));
        dl_round_free(s->m[i].r);
        dl_bans_destroy(&s->m[i].bans);
        free(s->m[i].input);
    }
    free(out);
    free(ref);
    free(s->pending);
    free(s);
    return outcome;
}

int main(void) {
    if (sodium_init() < 0) return 1;
    static const struct scenario scenarios[] = {
        {.name = "two", .members = 2, .codec = DL_CODEC_NONE, .roles = "tt", .parts = {100003, 99991},
         .weights = {3, 5}, .victim = -1},
        {.name = "eight", .members = 8, .codec = DL_CODEC_NONE, .roles = "tttttttt",
         .parts = {40001, 40003, 39989, 40009, 40013, 39983, 40031, 40037}, .weights = {1, 2, 3, 4, 5, 6, 7, 8},
         .victim = -1},
        {.name = "four_fp16", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK + 5, 2 * CHUNK - 3, 77, CHUNK}, .weights = {2, 3, 5, 7}, .victim = -1},
        /* uneven parts (several chunks, a last chunk of a few elements, a
         * part of 13), a client without a part and an aux peer with one */
        {.name = "uneven_roles_uint8", .members = 5, .codec = DL_CODEC_UINT8, .roles = "ttcat",
         .parts = {2 * CHUNK + 11, 13, 0, CHUNK + 1, 5000}, .weights = {4, 1, 2, 0, 3}, .victim = -1},
        /* an aggregator that dies in the middle of sending its results */
        {.name = "dead_aggregator", .members = 4, .codec = DL_CODEC_NONE, .roles = "tttt",
         .parts = {CHUNK, 3 * CHUNK, CHUNK, 10}, .weights = {1, 2, 3, 4}, .victim = 1, .victim_fate = KILLED},
        /* weights within 4 x the lower median: a larger one is capped (balance.h) */
        {.name = "hung_aggregator_fp16", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK / 2, 3 * CHUNK, 1000, CHUNK}, .weights = {3, 1, 1, 2}, .victim = 1, .victim_fate = HUNG},
        /* a re-reduction asked for while the part's aggregator is alive is refused */
        /* an aggregator that signs its last result after holding every
         * other and grinds it until the directions it can foresee miss its
         * swapped elements: the nonces it could not foresee catch it */
        {.name = "grinding_aggregator", .members = 4, .codec = DL_CODEC_NONE, .roles = "tttt",
         .parts = {CHUNK, CHUNK, 2 * CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = -1,
         .lie = DL_MISBEHAVE_GRIND, .liar = 2},
        /* an aggregator that sends its true results to members 0 and 2
         * and signed wrong ones to 1 and 3: the rosters bring both signed
         * results to everyone */
        /* an aggregator that never attests its part: its results are
         * right, and every member checks them from the senders' own
         * projections (the fast check) instead of waiting for the round's
         * deadline */
        {.name = "silent_attestation", .members = 4, .codec = DL_CODEC_FP16, .roles = "ttct",
         .parts = {CHUNK, 2 * CHUNK + 9, CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = -1,
         .lie = DL_MISBEHAVE_NO_ATTESTATION, .liar = 1, .probe_bundles = true},
        /* an aggregator that signs -1000 times the average and claims, for
         * its own chunk of its part (no one else holds it), an L1 norm of
         * 1e300: the equation's rounding tolerance grows with the claimed
         * norms, so every member would pass the lie; no chunk has that
         * norm at its distance from the result, so the claim convicts it */
        {.name = "own_claim_aggregator", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = -1,
         .lie = DL_MISBEHAVE_OWN_CLAIM, .liar = 1},
        /* member 3 (the heaviest, values around 3) claims for its chunks
         * of the others' parts the smallest L1 norm its projection allows:
         * the mean's norm bound then falls below every honest result (the
         * chunks share a sign), the fast check fails, and the attestations,
         * whose aggregators measured its chunks, convict member 3 and
         * nobody else */
        {.name = "norm_lie_sender", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = -1,
         .lie = DL_MISBEHAVE_NORM_LIE, .liar = 3},
        {.name = "two_faced_aggregator", .members = 4, .codec = DL_CODEC_NONE, .roles = "tttt",
         .parts = {CHUNK, CHUNK, 2 * CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = -1,
         .lie = DL_MISBEHAVE_TWO_FACED, .liar = 2},
        /* the aggregator of part 1 dies while sending its results; the
         * re-reducer of its part (member 2) signs -1000 times the average
         * for the chunks it re-reduces: its attestation, the contributions
         * it reduced, convicts it */
        {.name = "lying_rereducer", .members = 4, .codec = DL_CODEC_NONE, .roles = "tttt",
         .parts = {CHUNK, 3 * CHUNK, CHUNK, 10}, .weights = {1, 2, 3, 4}, .victim = 1, .victim_fate = KILLED,
         .lie = DL_MISBEHAVE_REREDUCE_SCALE, .liar = 2},
        /* the aggregator of part 1 dies while sending its results, and the
         * one member that may re-reduce its part (member 2) with it */
        /* under centered clip, part 1's aggregator delivers its first
         * result and hangs, and member 2 sends everyone false projections
         * of part 1 alone: the delivered result fails the fast check, no
         * attestation will come, and the chunks its contributors disclose
         * show member 2's projections false (without disclosure nobody
         * was banned) */
        {.name = "lying_sender_hung_aggregator", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK, 3 * CHUNK, CHUNK, 1000}, .weights = {1, 2, 3, 4}, .victim = 1, .victim_fate = HUNG,
         .lie = DL_MISBEHAVE_PROJECTION_LIE_PART1, .liar = 2, .clip = true},
        /* centered clip with member 3's values 100 above the others'
         * (tau 5000 per chunk: the others lie within a few hundred of the
         * result, member 3 about 36,000 away): each member judges from
         * the clip weights the results commit to, so all judge alike */
        {.name = "clip_outlier", .members = 4, .codec = DL_CODEC_FP16, .roles = "tttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, CHUNK}, .weights = {1, 2, 3, 4}, .victim = -1, .clip = true,
         .tau = 5000, .outlier = 3, .shift = 100},
        /* under centered clip, part 1's aggregator signs v / 2 + R (R
         * orthogonal to the average v, |R| = |v| / 2: a lie that neither the
         * norm bound nor the alignment check can see) and member 3, its
         * accomplice, signs the projections of part 1 that make every
         * chunk's equation hold (possible claims at its true distance): the checkers drawn for part 1 ask member 3
         * for the chunk its claim pulls hardest with, and its signed chunk
         * convicts it (without the spot checks every member applied the
         * lie); then the same accomplice refusing to show it */
        {.name = "colluding_pair", .members = 5, .codec = DL_CODEC_FP16, .roles = "ttttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 1000, CHUNK}, .weights = {1, 2, 3, 4, 5}, .victim = -1,
         .lie = DL_MISBEHAVE_COLLUDE_SEND, .liar = 3, .accomplice = 1, .clip = true},
        /* the accomplice two-faced: true projections of part 1 to the two
         * checkers the seed names for it, covering ones to everyone else
         * (its aggregator too): each checker's copy, relayed with its
         * verdict, meets the other copy at every member, which bans the
         * accomplice; the aggregator is banned where the chunks disclosed
         * after reach (an honest member drawn by a checker while it answers
         * a disclosure of another chunk of the part is not refused) */
        {.name = "colluding_pair_two_faced", .members = 5, .codec = DL_CODEC_FP16, .roles = "ttttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 1000, CHUNK}, .weights = {1, 2, 3, 4, 5}, .victim = -1,
         .lie = DL_MISBEHAVE_COLLUDE_TWO_FACED, .liar = 3, .accomplice = 1, .clip = true},
        {.name = "colluding_pair_silent", .members = 5, .codec = DL_CODEC_FP16, .roles = "ttttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 1000, CHUNK}, .weights = {1, 2, 3, 4, 5}, .victim = -1,
         .lie = DL_MISBEHAVE_COLLUDE_SILENT, .liar = 3, .accomplice = 1, .clip = true},
        {.name = "dead_rereducer", .members = 5, .codec = DL_CODEC_NONE, .roles = "ttttt",
         .parts = {CHUNK, 3 * CHUNK, CHUNK, 10, 1000}, .weights = {1, 2, 3, 4, 5}, .victim = 1,
         .victim_fate = KILLED, .rereducer_dies = true},
        {.name = "rereduce_alive", .members = 4, .codec = DL_CODEC_NONE, .roles = "tttt",
         .parts = {CHUNK, 2 * CHUNK, CHUNK, 10}, .weights = {1, 2, 3, 4}, .victim = -1, .probe_rereduce = true},
        /* int8 and topk (sparse fp16 results, sized by their bitmaps): the
         * same, and re-reduced results fetched by those who lack them */
        {.name = "uneven_roles_int8", .members = 5, .codec = DL_CODEC_INT8, .roles = "ttcat",
         .parts = {CHUNK + 11, 13, 0, CHUNK + 1, 5000}, .weights = {4, 1, 2, 0, 3}, .victim = -1},
        {.name = "uneven_roles_topk", .members = 5, .codec = DL_CODEC_TOPK, .roles = "ttcat",
         .parts = {2 * CHUNK + 11, 13, 0, CHUNK + 1, 5000}, .weights = {4, 1, 2, 0, 3}, .victim = -1},
        {.name = "dead_aggregator_topk", .members = 4, .codec = DL_CODEC_TOPK, .roles = "tttt",
         .parts = {CHUNK, 3 * CHUNK, CHUNK, 10}, .weights = {1, 2, 3, 4}, .victim = 1, .victim_fate = KILLED},
        {.name = "hung_aggregator_int8", .members = 4, .codec = DL_CODEC_INT8, .roles = "tttt",
         .parts = {CHUNK / 2, 3 * CHUNK, 1000, CHUNK}, .weights = {3, 1, 1, 2}, .victim = 1, .victim_fate = HUNG},
    };
    size_t count = sizeof scenarios / sizeof scenarios[0];
    struct outcome outcomes[sizeof scenarios / sizeof scenarios[0]];
    for (size_t i = 0; i < count; i++) outcomes[i] = run_scenario(&scenarios[i]);
    /* Nothing but the pump decides what happens when: a second run of the
     * failure cases ends at the same virtual time with the same bits. */
    for (size_t i = 0; i < count; i++) {
        if (scenarios[i].victim < 0) continue;
        struct outcome again = run_scenario(&scenarios[i]);
        CHECK_MSG(again.virtual_s == outcomes[i].virtual_s && again.result_hash == outcomes[i].result_hash,
                  "%s: a second run differs (%.2f s, %016llx; first %.2f s, %016llx)", scenarios[i].name,
                  again.virtual_s, (unsigned long long)again.result_hash, outcomes[i].virtual_s,
                  (unsigned long long)outcomes[i].result_hash);
    }
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
