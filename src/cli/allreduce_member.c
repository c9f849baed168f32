/* One member process of `dedloc bench allreduce` and of the multi-process
 * averaging tests: a peer that averages a random vector (drawn from its
 * seed) with the others for a number of rounds, printing one JSON line per
 * round. Not a user command: the bench starts it (internal subcommand
 * `dedloc bench allreduce-member`, absent from --help).
 *
 * Test-hook builds (DEDLOC_TEST_HOOKS) also take a vector model closer to
 * gradients (--common-seed S --spread X: a vector shared by every member
 * plus X times the member's own draws; --sparse F: only a fraction F of
 * rows of 64 values non-zero, drawn per member, as in an embedding's
 * gradient) and --attack MODE, a member that
 * misbehaves on purpose with well-formed data, to test robust aggregation:
 *   sign-flip  its honest vector times -1000
 *   noise      uniform noise in [-100, 100)
 *   stale      its honest vector of 5 rounds earlier
 *   replay     another member's honest vector (--replay-seed: that member's seed)
 * None of this is reachable from a normal build. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/opt_table.h"
#include "collab/collab_internal.h"
#include "collab/round_async.h"
#include "collab/wirecodec.h"
#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/util.h"

static void emit(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        printf("%s\n", s);
        fflush(stdout);
    }
    free(s);
    cJSON_Delete(o);
}

/* Deterministic test vector: splitmix64 draws, uniform in [-1, 1). */
static void fill_vector(float *v, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        v[i] = (float)((double)(z >> 40) / 8388608.0 - 1.0);
    }
}

/* The vector a member contributes in a round: its own draws, or with a
 * common seed the shared vector plus `spread` times its own draws; with
 * `sparse` > 0 only that fraction of its rows of 64 values (drawn from its
 * seed and the round) non-zero. */
struct vector_model {
    bool common;
    uint64_t common_seed;
    double spread;
    double sparse;
};

static void keep_rows(float *v, size_t n, uint64_t seed, double fraction) {
    for (size_t row = 0; row * 64 < n; row++) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + row * 0xBF58476D1CE4E5B9ull + 1;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        if ((double)(z >> 11) / 9007199254740992.0 < fraction) continue;
        for (size_t i = row * 64; i < n && i < row * 64 + 64; i++) v[i] = 0;
    }
}

static void honest_vector(float *v, float *scratch, size_t n, uint64_t seed, uint64_t round,
                          const struct vector_model *vm) {
    if (!vm->common) {
        fill_vector(v, n, seed * 1000003u + round);
        return;
    }
    fill_vector(v, n, vm->common_seed * 1000003u + round);
    fill_vector(scratch, n, seed * 1000003u + round);
    for (size_t i = 0; i < n; i++) v[i] = (float)((double)v[i] + vm->spread * (double)scratch[i]);
    if (vm->sparse > 0) keep_rows(v, n, seed * 1000003u + round, vm->sparse);
}

#ifdef DEDLOC_TEST_HOOKS
enum attack { ATTACK_NONE, ATTACK_SIGN_FLIP, ATTACK_NOISE, ATTACK_STALE, ATTACK_REPLAY };

static int parse_attack(const char *s, int *out) {
    if (!strcmp(s, "sign-flip")) *out = ATTACK_SIGN_FLIP;
    else if (!strcmp(s, "noise")) *out = ATTACK_NOISE;
    else if (!strcmp(s, "stale")) *out = ATTACK_STALE;
    else if (!strcmp(s, "replay")) *out = ATTACK_REPLAY;
    else return -1;
    return 0;
}

static void attack_vector(int attack, float *v, float *scratch, size_t n, uint64_t seed, uint64_t replay_seed,
                          uint64_t round, const struct vector_model *vm) {
    switch (attack) {
    case ATTACK_SIGN_FLIP:
        honest_vector(v, scratch, n, seed, round, vm);
        for (size_t i = 0; i < n; i++) v[i] *= -1000.0f;
        break;
    case ATTACK_NOISE:
        fill_vector(v, n, seed * 1000003u + round + 0x5EED0000ull);
        for (size_t i = 0; i < n; i++) v[i] *= 100.0f;
        break;
    case ATTACK_STALE: honest_vector(v, scratch, n, seed, round - 5, vm); break;
    case ATTACK_REPLAY: honest_vector(v, scratch, n, replay_seed, round, vm); break;
    default: honest_vector(v, scratch, n, seed, round, vm); break;
    }
}
#endif

static int write_floats(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return dl_fail("cannot write %s", path);
    size_t w = fwrite(v, sizeof(float), n, f);
    int rc = fclose(f);
    return (w != n || rc) ? dl_fail("short write to %s", path) : 0;
}

static void mask_hex(const uint8_t *mask, size_t n, char *out) {
    static const char hex[] = "0123456789abcdef";
    size_t bytes = (n + 7) / 8;
    for (size_t i = 0; i < bytes; i++) {
        out[2 * i] = hex[mask[i] >> 4];
        out[2 * i + 1] = hex[mask[i] & 15];
    }
    out[2 * bytes] = 0;
}

static int wait_for_peers(dl_net *net, uint64_t epoch, size_t peers, double timeout_s) {
    double until = dl_now() + timeout_s;
    while (dl_now() < until) {
        struct dl_swarm_view v;
        if (!dl_net_swarm_view(net, &v)) {
            size_t at = 0;
            for (size_t i = 0; i < v.num_peers; i++) at += v.peers[i].epoch == epoch;
            dl_swarm_view_free(&v);
            if (at >= peers) return 0;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static long peak_rss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss;
}

static void report_round(int round, const struct dl_avg_result *res, const float *vec, size_t n,
                         const char *self_id) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "round");
    cJSON_AddNumberToObject(o, "round", round);
    cJSON_AddStringToObject(o, "peer_id", self_id);
    cJSON_AddStringToObject(o, "status", dl_avg_status_name(res->status));
    cJSON_AddStringToObject(o, "reason", res->reason);
    cJSON_AddNumberToObject(o, "my_index", (double)res->my_index);
    cJSON *members = cJSON_AddArrayToObject(o, "members");
    for (size_t i = 0; i < res->num_members; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "peer_id", res->members[i].peer_id);
        cJSON_AddNumberToObject(m, "weight", res->members[i].weight);
        cJSON_AddNumberToObject(m, "role", res->members[i].role);
        cJSON_AddNumberToObject(m, "bandwidth_mbit", res->members[i].bandwidth_mbit);
        cJSON_AddNumberToObject(m, "part_elems", (double)res->members[i].part_elems);
        cJSON_AddItemToArray(members, m);
    }
    cJSON *chunks = cJSON_AddArrayToObject(o, "chunks");
    for (size_t i = 0; i < res->num_chunks; i++) {
        const struct dl_avg_chunk_info *ci = &res->chunks[i];
        char hex[DL_AVG_MAX_MEMBERS / 4 + 1];
        mask_hex(ci->contributors, res->num_members, hex);
        cJSON *c = cJSON_CreateArray();
        cJSON_AddItemToArray(c, cJSON_CreateNumber((double)ci->offset));
        cJSON_AddItemToArray(c, cJSON_CreateNumber((double)ci->length));
        cJSON_AddItemToArray(c, cJSON_CreateNumber(ci->generation));
        cJSON_AddItemToArray(c, cJSON_CreateNumber(ci->reducer));
        cJSON_AddItemToArray(c, cJSON_CreateString(hex));
        cJSON_AddItemToArray(c, cJSON_CreateNumber(ci->weight));
        cJSON_AddItemToArray(chunks, c);
    }
    char hash[17] = "";
    /* An aux member receives no result: it has nothing to hash. */
    bool has_result = res->status == DL_AVG_OK && res->num_members && res->members[res->my_index].role != DL_MEMBER_AUX;
    if (has_result) dl_hash64_hex(dl_hash64(vec, n * sizeof(float), 0), hash);
    cJSON_AddStringToObject(o, "hash", hash);
    cJSON_AddStringToObject(o, "compression", dl_codec_name(res->compression));
    cJSON_AddStringToObject(o, "aggregation", dl_aggregation_name(res->aggregation));
    char clipped[DL_AVG_MAX_MEMBERS / 4 + 1];
    mask_hex(res->clipped, res->num_members, clipped);
    cJSON_AddStringToObject(o, "clipped", clipped);
    char accused[DL_AVG_MAX_MEMBERS / 4 + 1];
    mask_hex(res->accused, res->num_members, accused);
    cJSON_AddStringToObject(o, "accused", accused);
    cJSON_AddNumberToObject(o, "audit_chunks", res->audit_chunks);
    cJSON_AddNumberToObject(o, "total_s", res->total_s);
    cJSON_AddNumberToObject(o, "matchmaking_s", res->matchmaking_s);
    cJSON_AddNumberToObject(o, "allreduce_s", res->allreduce_s);
    cJSON_AddNumberToObject(o, "lp_bound_s", res->lp_bound_s);
    cJSON_AddNumberToObject(o, "handoff_wait_s", res->handoff_wait_s);
    cJSON_AddNumberToObject(o, "total_weight", res->total_weight);
    cJSON_AddNumberToObject(o, "bytes_sent", (double)res->bytes_sent);
    cJSON_AddNumberToObject(o, "bytes_received", (double)res->bytes_received);
    cJSON_AddNumberToObject(o, "bytes_resent", (double)res->bytes_resent);
    cJSON_AddNumberToObject(o, "reduce_s", res->reduce_s);
    cJSON_AddNumberToObject(o, "reduced_elems", (double)res->reduced_elems);
    cJSON_AddNumberToObject(o, "peak_rss_kb", (double)peak_rss_kb());
    emit(o);
}

static int parse_num(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* What draws a member's vector of a round. */
struct vector_input {
    struct vector_model vm;
    uint64_t seed;
#ifdef DEDLOC_TEST_HOOKS
    int attack;
    uint64_t replay_seed;
#endif
};

/* Draws the round's vector; the first round's is also written to PREFIX.in.bin. */
static int make_vector(float *vec, float *scratch, size_t n, int round, const char *out_prefix,
                       const struct vector_input *vi) {
#ifdef DEDLOC_TEST_HOOKS
    attack_vector(vi->attack, vec, scratch, n, vi->seed, vi->replay_seed, (uint64_t)round, &vi->vm);
#else
    honest_vector(vec, scratch, n, vi->seed, (uint64_t)round, &vi->vm);
#endif
    if (!out_prefix || round != 0) return 0;
    char path[1024];
    snprintf(path, sizeof path, "%s.in.bin", out_prefix);
    return write_floats(path, vec, n);
}

int bench_allreduce_member(int argc, char **argv) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "dedloc-bench-allreduce";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    cfg.expiry_s = 20;
    cfg.min_refresh_s = 0.2;
    cfg.max_refresh_s = 1;
    cfg.max_frame = 4u << 20;
    struct dl_collab_config ccfg;
    dl_collab_config_default(&ccfg);
    struct dl_avg_options opt;
    dl_avg_options_default(&opt);
    opt.deadline_s = 30;
    double size = 1 << 20, seed = 1, rounds = 1, peers = 1, v = 0, delay = 0, linger = 30;
    double tau = DL_CLIP_DEFAULT_TAU, iterations = DL_CLIP_DEFAULT_ITERATIONS;
    double join_weight = -1, hand_over = 0;
    const char *out_prefix = NULL, *misbehave = NULL;
    struct vector_model vm = {false, 0, 0, 0};
    enum { O_LISTEN = 256, O_INITIAL, O_SIZE, O_SEED, O_WEIGHT, O_COMP, O_DEADLINE, O_STALL, O_ROUNDS,
           O_PEERS, O_CLIENT, O_AUX, O_BW, O_MAXUP, O_MISB, O_OUT, O_DELAY, O_LINGER, O_AGG, O_TAU, O_ITERS,
           O_CWARN, O_CBAN, O_ATTACK, O_COMMON, O_SPREAD, O_REPLAY, O_JOINW, O_HANDOVER, O_SAME_EPOCH,
           O_IDENTITY, O_TOKEN, O_RUN_KEY, O_SPARSE };
    bool same_epoch = false; /* every round retries epoch 1 with round 0's vector */
#ifdef DEDLOC_TEST_HOOKS
    int attack = ATTACK_NONE;
    double common_seed = 0, replay_seed = 0;
#endif
    static const struct option opts[] = {
        {"listen", required_argument, NULL, O_LISTEN}, {"initial-peers", required_argument, NULL, O_INITIAL},
        {"identity", required_argument, NULL, O_IDENTITY}, {"token", required_argument, NULL, O_TOKEN},
        {"run-key", required_argument, NULL, O_RUN_KEY},
        {"size", required_argument, NULL, O_SIZE}, {"seed", required_argument, NULL, O_SEED},
        {"weight", required_argument, NULL, O_WEIGHT}, {"compression", required_argument, NULL, O_COMP},
        {"deadline", required_argument, NULL, O_DEADLINE}, {"stall", required_argument, NULL, O_STALL},
        {"rounds", required_argument, NULL, O_ROUNDS}, {"peers", required_argument, NULL, O_PEERS},
        {"client-mode", no_argument, NULL, O_CLIENT}, {"aux", no_argument, NULL, O_AUX},
        {"bandwidth", required_argument, NULL, O_BW}, {"max-upload", required_argument, NULL, O_MAXUP},
        {"misbehave", required_argument, NULL, O_MISB}, {"out", required_argument, NULL, O_OUT},
        {"delay", required_argument, NULL, O_DELAY}, {"linger", required_argument, NULL, O_LINGER},
        {"aggregation", required_argument, NULL, O_AGG}, {"tau", required_argument, NULL, O_TAU},
        {"clip-iterations", required_argument, NULL, O_ITERS}, {"clip-warn", required_argument, NULL, O_CWARN},
        {"clip-ban", required_argument, NULL, O_CBAN},
        {"join-weight", required_argument, NULL, O_JOINW}, {"hand-over", required_argument, NULL, O_HANDOVER},
#ifdef DEDLOC_TEST_HOOKS
        {"attack", required_argument, NULL, O_ATTACK}, {"common-seed", required_argument, NULL, O_COMMON},
        {"spread", required_argument, NULL, O_SPREAD}, {"replay-seed", required_argument, NULL, O_REPLAY},
        {"same-epoch", no_argument, NULL, O_SAME_EPOCH}, {"sparse", required_argument, NULL, O_SPARSE},
#endif
        {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "", opts, "bench allreduce-member")) != -1) {
        int bad = 0;
        switch (c) {
        case O_LISTEN: cfg.listen = optarg; break;
        case O_IDENTITY: cfg.identity_path = optarg; break;
        case O_TOKEN: cfg.token_path = optarg; break;
        case O_RUN_KEY: cfg.run_key = optarg; break;
        case O_INITIAL: cfg.initial_peers = optarg; break;
        case O_SIZE: bad = parse_num(optarg, 1, 1e10, &size); break;
        case O_SEED: bad = parse_num(optarg, 0, 1e15, &seed); break;
        case O_WEIGHT: bad = parse_num(optarg, 0, 1e15, &opt.weight); break;
        case O_COMP: bad = dl_codec_from_name(optarg, &opt.compression); break;
        case O_DEADLINE: bad = parse_num(optarg, 0.1, 86400, &opt.deadline_s); break;
        case O_STALL: bad = parse_num(optarg, 0.1, 3600, &opt.stall_s); break;
        case O_ROUNDS: bad = parse_num(optarg, 1, 1e6, &rounds); break;
        case O_PEERS: bad = parse_num(optarg, 1, DL_AVG_MAX_MEMBERS + 64, &peers); break;
        case O_CLIENT: cfg.client_mode = ccfg.client_mode = true; break;
        case O_AUX: ccfg.aux = true; break;
        case O_BW: bad = parse_num(optarg, 0, 1e6, &v); ccfg.bandwidth_mbit = cfg.bandwidth_mbit = v; break;
        case O_MAXUP: bad = parse_num(optarg, 0.001, 1e6, &cfg.max_upload_mbit); break;
        case O_MISB: misbehave = optarg; break;
        case O_OUT: out_prefix = optarg; break;
        case O_DELAY: bad = parse_num(optarg, 0, 3600, &delay); break;
        case O_LINGER: bad = parse_num(optarg, 0, 3600, &linger); break;
        case O_AGG: bad = dl_aggregation_from_name(optarg, &opt.aggregation); break;
        case O_TAU: bad = parse_num(optarg, 1e-30, 1e30, &tau); break;
        case O_ITERS: bad = parse_num(optarg, 0, DL_CLIP_MAX_ITERATIONS, &iterations); break;
        case O_CWARN: bad = parse_num(optarg, 0, 1e6, &v); ccfg.clip_warn_rounds = (int)v; break;
        case O_CBAN: bad = parse_num(optarg, 0, 1e6, &v); ccfg.clip_ban_rounds = (int)v; break;
        case O_JOINW: bad = parse_num(optarg, 0, 1e15, &join_weight); break;
        case O_HANDOVER: bad = parse_num(optarg, 0, 3600, &hand_over); break;
#ifdef DEDLOC_TEST_HOOKS
        case O_ATTACK: bad = parse_attack(optarg, &attack); break;
        case O_COMMON: bad = parse_num(optarg, 0, 1e15, &common_seed); vm.common = true; break;
        case O_SPREAD: bad = parse_num(optarg, 0, 1e6, &vm.spread); break;
        case O_REPLAY: bad = parse_num(optarg, 0, 1e15, &replay_seed); break;
        case O_SAME_EPOCH: same_epoch = true; break;
        case O_SPARSE: bad = parse_num(optarg, 0, 1, &vm.sparse); break;
#endif
        default: return DL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "allreduce-member: bad value '%s'\n", optarg);
            return DL_EXIT_USAGE;
        }
    }
    int mode = DL_MISBEHAVE_NONE;
    if (misbehave) {
        if (!strcmp(misbehave, "nan")) mode = DL_MISBEHAVE_NAN;
        else if (!strcmp(misbehave, "wrong-size")) mode = DL_MISBEHAVE_WRONG_SIZE;
        else if (!strcmp(misbehave, "wrong-part")) mode = DL_MISBEHAVE_WRONG_PART;
        else if (!strcmp(misbehave, "garbage")) mode = DL_MISBEHAVE_GARBAGE;
        else if (!strcmp(misbehave, "weight-nan")) mode = DL_MISBEHAVE_WEIGHT_NAN;
        else if (!strcmp(misbehave, "weight-negative")) mode = DL_MISBEHAVE_WEIGHT_NEGATIVE;
        else if (!strcmp(misbehave, "weight-huge")) mode = DL_MISBEHAVE_WEIGHT_HUGE;
#ifdef DEDLOC_TEST_HOOKS
        else if (!strcmp(misbehave, "huge-values")) mode = DL_MISBEHAVE_HUGE_VALUES;
        else if (!strcmp(misbehave, "dictate")) mode = DL_MISBEHAVE_DICTATE;
        else if (!strcmp(misbehave, "stall-leader")) mode = DL_MISBEHAVE_STALL_LEADER;
        else if (!strcmp(misbehave, "result-scale")) mode = DL_MISBEHAVE_RESULT_SCALE;
        else if (!strcmp(misbehave, "result-flip")) mode = DL_MISBEHAVE_RESULT_FLIP;
        else if (!strcmp(misbehave, "projection-lie")) mode = DL_MISBEHAVE_PROJECTION_LIE;
        else if (!strcmp(misbehave, "own-claim")) mode = DL_MISBEHAVE_OWN_CLAIM;
        else if (!strcmp(misbehave, "own-pull")) mode = DL_MISBEHAVE_OWN_PULL;
        else if (!strcmp(misbehave, "scale-then-silent")) mode = DL_MISBEHAVE_SCALE_THEN_SILENT;
        else if (!strcmp(misbehave, "then-silent")) mode = DL_MISBEHAVE_THEN_SILENT;
        else if (!strcmp(misbehave, "grind")) mode = DL_MISBEHAVE_GRIND;
        else if (!strcmp(misbehave, "two-faced")) mode = DL_MISBEHAVE_TWO_FACED;
        else if (!strcmp(misbehave, "slow-record")) mode = DL_MISBEHAVE_SLOW_RECORD;
        else if (!strcmp(misbehave, "skip-audit")) mode = DL_MISBEHAVE_SKIP_AUDIT;
        else if (!strcmp(misbehave, "attest-only")) mode = DL_MISBEHAVE_ATTEST_ONLY;
        else if (!strcmp(misbehave, "no-attestation")) mode = DL_MISBEHAVE_NO_ATTESTATION;
        else if (!strcmp(misbehave, "skip-spot")) mode = DL_MISBEHAVE_SKIP_SPOT;
        else if (!strcmp(misbehave, "collude")) mode = DL_MISBEHAVE_COLLUDE;
        else if (!strcmp(misbehave, "cover")) mode = DL_MISBEHAVE_COVER;
#endif
        else {
            fprintf(stderr, "allreduce-member: unknown --misbehave %s\n", misbehave);
            return DL_EXIT_USAGE;
        }
    }
    opt.clip_tau = tau;
    opt.clip_iterations = (int)iterations;
#ifdef DEDLOC_TEST_HOOKS
    vm.common_seed = (uint64_t)common_seed;
#endif
    signal(SIGPIPE, SIG_IGN);
    size_t n = (size_t)size;
    float *vec = dl_malloc(n * sizeof(float));
    float *scratch = vm.common ? dl_malloc(n * sizeof(float)) : NULL;
    /* With --out, what the aggregators decoded from us goes beside the
     * result (PREFIX.sentR.bin), for the tests to hold against it. */
    float *sent = out_prefix ? dl_malloc(n * sizeof(float)) : NULL;
    if (!vec || (vm.common && !scratch) || (out_prefix && !sent)) {
        fprintf(stderr, "allreduce-member: %s\n", dl_error());
        free(vec);
        free(scratch);
        free(sent);
        return DL_EXIT_FAILURE;
    }
    opt.sent = sent;
    dl_net *net;
    dl_collab *collab;
    if (dl_net_start(&cfg, &net)) {
        fprintf(stderr, "allreduce-member: %s\n", dl_error());
        free(vec);
        free(scratch);
        free(sent);
        return DL_EXIT_FAILURE;
    }
    if (dl_collab_start(net, &ccfg, &collab)) {
        fprintf(stderr, "allreduce-member: %s\n", dl_error());
        dl_net_stop(net);
        free(vec);
        free(scratch);
        free(sent);
        return DL_EXIT_FAILURE;
    }
    collab->misbehaviour = mode;
    cJSON *ready = cJSON_CreateObject();
    cJSON_AddStringToObject(ready, "event", "ready");
    cJSON_AddStringToObject(ready, "peer_id", dl_net_peer_id(net));
    cJSON_AddStringToObject(ready, "listen", dl_net_listen_address(net));
    cJSON_AddNumberToObject(ready, "pid", (double)getpid());
    emit(ready);
    int rc = DL_EXIT_OK;
    struct vector_input vi = {.vm = vm, .seed = (uint64_t)seed};
#ifdef DEDLOC_TEST_HOOKS
    vi.attack = attack;
    vi.replay_seed = (uint64_t)replay_seed;
#endif
    const double weight = opt.weight;
    for (int round = 0; round < (int)rounds; round++) {
        /* --same-epoch: a failed round retried, as a trainer keeps its
         * gradient and matchmakes again at the same epoch. */
        uint64_t epoch = same_epoch ? 1 : (uint64_t)round + 1;
        int draw = same_epoch ? 0 : round;
        /* --hand-over: the vector is drawn only after matchmaking has begun
         * (NaN until then, so that a round reading it early would fail). */
        if (hand_over > 0)
            for (size_t i = 0; i < n; i++) vec[i] = NAN;
        else if (make_vector(vec, scratch, n, draw, out_prefix, &vi))
            fprintf(stderr, "allreduce-member: %s\n", dl_error());
        dl_net_publish_progress(net, epoch, weight, 0);
        if (wait_for_peers(net, epoch, (size_t)peers, 30))
            DL_WARN("bench", "fewer than %zu peers at epoch %llu after 30 s; averaging with those seen",
                    (size_t)peers, (unsigned long long)epoch);
        opt.epoch = epoch;
        opt.expected_peers = (size_t)peers;
        if (delay > 0) { /* a latecomer: ready, but it calls the round late */
            struct timespec late = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
            nanosleep(&late, NULL);
        }
        cJSON *start = cJSON_CreateObject();
        cJSON_AddStringToObject(start, "event", "start");
        cJSON_AddNumberToObject(start, "round", round);
        emit(start);
        struct dl_avg_result res;
        if (hand_over > 0) {
            /* Matchmaking ahead of the vector, as a trainer ending its
             * accumulation does: the join carries --join-weight, the
             * chunks --weight. */
            struct dl_avg_handoff handoff;
            dl_avg_handoff_init(&handoff);
            opt.handoff = &handoff;
            opt.weight = join_weight >= 0 ? join_weight : weight;
            dl_async_round a = {0};
            if (dl_async_round_start(&a, collab, vec, n, &opt, NULL, NULL)) {
                fprintf(stderr, "allreduce-member: %s\n", dl_error());
                rc = DL_EXIT_FAILURE;
                break;
            }
            struct timespec ts = {(time_t)hand_over, (long)((hand_over - (double)(time_t)hand_over) * 1e9)};
            nanosleep(&ts, NULL);
            if (make_vector(vec, scratch, n, draw, out_prefix, &vi)) fprintf(stderr, "allreduce-member: %s\n", dl_error());
            if (dl_collab_hand_over(collab, &handoff, weight))
                DL_WARN("bench", "round %d: %s", round, dl_error());
            dl_async_round_join(&a, &res);
            opt.handoff = NULL;
        } else {
            opt.weight = join_weight >= 0 ? join_weight : weight;
            dl_collab_average(collab, vec, n, &opt, &res);
        }
        if (out_prefix && res.status == DL_AVG_OK && !ccfg.aux) {
            char path[1024];
            snprintf(path, sizeof path, "%s.out%d.bin", out_prefix, round);
            if (write_floats(path, vec, n)) fprintf(stderr, "allreduce-member: %s\n", dl_error());
            snprintf(path, sizeof path, "%s.sent%d.bin", out_prefix, round);
            if (write_floats(path, sent, n)) fprintf(stderr, "allreduce-member: %s\n", dl_error());
        }
        report_round(round, &res, vec, n, dl_net_peer_id(net));
        if (res.status != DL_AVG_OK) rc = DL_EXIT_FAILURE;
        dl_avg_result_free(&res);
    }
    /* Stay up, as a training peer would, so that members still in the last
     * round can fetch results from us; whoever started us ends us. */
    struct timespec ts = {(time_t)linger, (long)((linger - (double)(time_t)linger) * 1e9)};
    nanosleep(&ts, NULL);
    dl_collab_stop(collab);
    dl_net_stop(net);
    free(vec);
    free(scratch);
    free(sent);
    cJSON *done = cJSON_CreateObject();
    cJSON_AddStringToObject(done, "event", "done");
    emit(done);
    return rc;
}
