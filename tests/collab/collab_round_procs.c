/* Averaging rounds between real member processes on loopback
 * (`dedloc bench allreduce-member`), with faults: killed, stalled and
 * misbehaving members, garbage on a port. Checks, against a weighted mean
 * computed here in double from the inputs the members wrote:
 *   - every surviving member finished, with byte-identical results;
 *   - each chunk equals the weighted mean of the contributors its mask names
 *     (within fp32 rounding, or the codec's bound);
 *   - misbehaving members are in no chunk they did not reduce themselves;
 *   - each chunk's result header carries the sum of its contributors' own
 *     weights. In the weights_* cases members matchmake before their vectors
 *     exist (NaN until handed over) and their chunks carry other weights than
 *     their joins: the reference mean uses the chunks' (what counts); in the
 *     weight_* cases a client's chunk headers carry NaN or a negative weight,
 *     and it must be left out ("dropped"), or a huge one (1e12), which counts
 *     as 4 times the chunk's lower median weight: every reference mean here
 *     uses the weights so capped;
 *   - bandwidth_liar: the member declaring 1e6 Mbit/s aggregates at most
 *     2 / (A + 1) of the vector; huge_values: finite values near FLT_MAX are
 *     refused like NaN; dictating_leader: a group record with other settings
 *     than the run's is refused by every member; monitor_trainer: in a run
 *     with an authority, a monitor-role peer that joins as a trainer is
 *     refused at the leader and its vector is in no chunk.
 * The robust_* cases (test-hook builds) run 8 members of which 3 attack with
 * well-formed data (sign-flipped x1000, noise, stale, replayed vectors) and
 * check the result against the weighted mean of the honest members' inputs:
 * close with centered clip, far with the plain mean.
 * Usage: collab_round_procs CASE (the scenarios: collab_round_scenarios.h). */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <sodium.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collab/wirecodec.h"
#include "collab_round_scenarios.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define MAX_MEMBERS 8

struct member {
    pid_t pid;
    int fd;
    char buf[1 << 18];
    size_t len;
    char peer_id[40], listen[64];
    bool ready, started, done;
    cJSON *round;
    double weight;         /* what its chunks carry (what counts) */
    double join_weight;    /* what its join says (the group record's estimate) */
    const char *role;      /* "trainer" "client" "aux" */
    const char *misbehave; /* NULL or the mode */
    const char *attack;    /* NULL or the attack mode (robust_* cases) */
    bool victim;           /* killed or stopped by the test */
};

static struct member members[MAX_MEMBERS];
static int num_members;
static int rounds_run = 1;
/* A run with an authority (scenario .tokens): its public key, each
 * member's identity and token files. */
static char run_key_hex[80];
static char identity_path[MAX_MEMBERS][300], token_path[MAX_MEMBERS][300];
static char workdir[256];

static void kill_all(void) {
    for (int i = 0; i < num_members; i++)
        if (members[i].pid > 0) {
            kill(members[i].pid, SIGCONT);
            kill(members[i].pid, SIGKILL);
            waitpid(members[i].pid, NULL, 0);
            members[i].pid = 0;
        }
}

static void on_signal(int sig) {
    kill_all();
    _exit(128 + sig);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static const char *compression_of(const struct scenario *sc) {
    return sc->compression ? sc->compression : "none";
}

static int spawn(int i, const struct scenario *sc, const char *initial) {
    struct member *m = &members[i];
    char size[32], seed[32], weight[32], peers[32], out[300], up[32], log_path[300];
    snprintf(size, sizeof size, "%zu", sc->vector_size);
    snprintf(seed, sizeof seed, "%d", 101 + i);
    snprintf(weight, sizeof weight, "%g", m->weight);
    snprintf(peers, sizeof peers, "%d", sc->member_count);
    snprintf(out, sizeof out, "%s/m%d", workdir, i);
    snprintf(up, sizeof up, "%g", sc->upload_mbit);
    snprintf(log_path, sizeof log_path, "%s/m%d.log", workdir, i);
    const char *argv[48];
    int k = 0;
    argv[k++] = DEDLOC_BINARY;
    argv[k++] = "bench";
    argv[k++] = "allreduce-member";
    argv[k++] = "--size"; argv[k++] = size;
    argv[k++] = "--seed"; argv[k++] = seed;
    argv[k++] = "--weight"; argv[k++] = weight;
    argv[k++] = "--peers"; argv[k++] = peers;
    argv[k++] = "--out"; argv[k++] = out;
    argv[k++] = "--compression"; argv[k++] = compression_of(sc);
    char deadline[32], rounds[32];
    snprintf(deadline, sizeof deadline, "%g", sc->deadline > 0 ? sc->deadline : 40);
    argv[k++] = "--deadline"; argv[k++] = deadline;
    if (sc->rounds > 1) {
        snprintf(rounds, sizeof rounds, "%d", sc->rounds);
        argv[k++] = "--rounds"; argv[k++] = rounds;
        argv[k++] = "--same-epoch";
    }
    argv[k++] = "--stall"; argv[k++] = "2";
    char liar_bw[32];
    if (sc->victim_bandwidth > 0) {
        /* The others declare 100 Mbit/s (an undeclared bandwidth would
         * count as the median declared one: the liar's own). */
        snprintf(liar_bw, sizeof liar_bw, "%g", i == sc->victim ? sc->victim_bandwidth : 100.0);
        argv[k++] = "--bandwidth"; argv[k++] = liar_bw;
    }
    if (sc->upload_mbit > 0) {
        argv[k++] = "--max-upload"; argv[k++] = up;
        if (!(sc->victim_bandwidth > 0)) {
            argv[k++] = "--bandwidth"; argv[k++] = up;
        }
    }
    if (!strcmp(m->role, "client")) argv[k++] = "--client-mode";
    if (!strcmp(m->role, "aux")) argv[k++] = "--aux";
    if (m->misbehave) {
        argv[k++] = "--misbehave"; argv[k++] = m->misbehave;
    }
    char tau[32];
    if (sc->aggregation) {
        argv[k++] = "--aggregation"; argv[k++] = sc->aggregation;
    }
    if (sc->tau > 0) {
        snprintf(tau, sizeof tau, "%g", sc->tau);
        argv[k++] = "--tau"; argv[k++] = tau;
    }
    char sparse[32];
    if (sc->attacks || sc->sparse > 0) {
        /* gradient-like vectors: a common one plus 0.1 x each member's own */
        argv[k++] = "--common-seed"; argv[k++] = "5";
        argv[k++] = "--spread"; argv[k++] = "0.1";
        if (sc->sparse > 0) {
            snprintf(sparse, sizeof sparse, "%g", sc->sparse);
            argv[k++] = "--sparse"; argv[k++] = sparse;
        }
        if (m->attack) {
            argv[k++] = "--attack"; argv[k++] = m->attack;
            argv[k++] = "--replay-seed"; argv[k++] = "102"; /* member 1's, an honest one */
        }
    }
    char join_weight[32], hand_over[32];
    if (m->join_weight != m->weight) {
        snprintf(join_weight, sizeof join_weight, "%g", m->join_weight);
        argv[k++] = "--join-weight"; argv[k++] = join_weight;
    }
    if (sc->hand_over > 0) {
        snprintf(hand_over, sizeof hand_over, "%g", sc->hand_over + 0.25 * i);
        argv[k++] = "--hand-over"; argv[k++] = hand_over;
    }
    char delay[32];
    if (sc->victim_delay > 0 && i == sc->victim) {
        snprintf(delay, sizeof delay, "%g", sc->victim_delay);
        argv[k++] = "--delay"; argv[k++] = delay;
    }
    if (initial) {
        argv[k++] = "--initial-peers"; argv[k++] = initial;
    }
    if (sc->tokens) {
        argv[k++] = "--identity"; argv[k++] = identity_path[i];
        argv[k++] = "--token"; argv[k++] = token_path[i];
        argv[k++] = "--run-key"; argv[k++] = run_key_hex;
    }
    argv[k] = NULL;
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        int err = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err >= 0) dup2(err, 2);
        close(fds[0]);
        close(fds[1]);
        setenv("DEDLOC_LOG", "info", 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    m->pid = pid;
    m->fd = fds[0];
    return 0;
}

static void pump(struct member *m) {
    for (;;) {
        if (m->len == sizeof m->buf) m->len = 0;
        ssize_t k = read(m->fd, m->buf + m->len, sizeof m->buf - m->len);
        if (k <= 0) break;
        m->len += (size_t)k;
    }
    char *nl;
    while ((nl = memchr(m->buf, '\n', m->len))) {
        *nl = 0;
        cJSON *j = cJSON_Parse(m->buf);
        const char *ev = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")) : NULL;
        if (ev && !strcmp(ev, "ready")) {
            snprintf(m->peer_id, sizeof m->peer_id, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(j, "peer_id")));
            snprintf(m->listen, sizeof m->listen, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(j, "listen")));
            m->ready = true;
        } else if (ev && !strcmp(ev, "start")) {
            m->started = true;
        } else if (ev && !strcmp(ev, "round") && !m->round &&
                   cJSON_GetNumberValue(cJSON_GetObjectItem(j, "round")) == (double)(rounds_run - 1)) {
            m->round = j; /* the last round's report */
            j = NULL;
        } else if (ev && !strcmp(ev, "done")) {
            m->done = true;
        }
        cJSON_Delete(j);
        size_t used = (size_t)(nl + 1 - m->buf);
        memmove(m->buf, nl + 1, m->len - used);
        m->len -= used;
    }
}

static float *read_floats(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(n * sizeof(float));
    size_t got = v ? fread(v, sizeof(float), n, f) : 0;
    fclose(f);
    if (got != n) {
        free(v);
        return NULL;
    }
    return v;
}

static int member_by_id(const char *peer_id) {
    for (int i = 0; i < num_members; i++)
        if (!strcmp(members[i].peer_id, peer_id)) return i;
    return -1;
}

/* The leader of an epoch as every member computes it (matchmaking.c):
 * the non-client member first by BLAKE2b-128(run id, NUL, epoch u64 LE,
 * peer id). */
static int leader_of_epoch(uint64_t epoch) {
    static const char run_id[] = "dedloc-bench-allreduce";
    uint8_t best[16], rank[16], e[8];
    int leader = -1;
    for (int b = 0; b < 8; b++) e[b] = (uint8_t)(epoch >> (8 * b));
    for (int i = 0; i < num_members; i++) {
        if (!strcmp(members[i].role, "client")) continue;
        crypto_generichash_state st;
        crypto_generichash_init(&st, NULL, 0, 16);
        crypto_generichash_update(&st, (const uint8_t *)run_id, sizeof run_id);
        crypto_generichash_update(&st, e, sizeof e);
        crypto_generichash_update(&st, (const uint8_t *)members[i].peer_id, strlen(members[i].peer_id));
        crypto_generichash_final(&st, rank, 16);
        int cmp = leader < 0 ? -1 : memcmp(rank, best, 16);
        if (cmp < 0 || (cmp == 0 && strcmp(members[i].peer_id, members[leader].peer_id) < 0)) {
            leader = i;
            memcpy(best, rank, 16);
        }
    }
    return leader;
}

/* An identity file as dedloc writes it (magic, then the ed25519 seed; mode
 * 0600), and its peer id: hex of BLAKE2b-128 of the public key. */
static int write_identity(const char *path, char peer_id[40]) {
    static const char magic[] = "dedloc-ed25519-v1\n";
    uint8_t seed[crypto_sign_SEEDBYTES], pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES], h[16];
    randombytes_buf(seed, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return -1;
    bool ok = write(fd, magic, sizeof magic - 1) == (ssize_t)(sizeof magic - 1) &&
              write(fd, seed, sizeof seed) == (ssize_t)sizeof seed;
    close(fd);
    crypto_generichash(h, sizeof h, pk, sizeof pk, NULL, 0);
    sodium_bin2hex(peer_id, 33, h, sizeof h);
    return ok ? 0 : -1;
}

/* The authority, identities and tokens of a run with roles. A monitor is
 * kept from leading epoch 1 (its key is drawn again): a member cannot tell
 * a leader's role from its answer, so the test is about the door, where the
 * leader refuses a monitor's join. */
static int make_tokens(const struct scenario *sc) {
    char key[300], pub[300], cmd[1200];
    snprintf(key, sizeof key, "%s/run.key", workdir);
    snprintf(pub, sizeof pub, "%s/run.pub", workdir);
    snprintf(cmd, sizeof cmd, "'%s' authority init --run-id dedloc-bench-allreduce --out '%s' > '%s' 2>/dev/null",
             DEDLOC_BINARY, key, pub);
    if (system(cmd)) return -1;
    FILE *f = fopen(pub, "r");
    if (!f || !fgets(run_key_hex, sizeof run_key_hex, f)) {
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    run_key_hex[strcspn(run_key_hex, "\r\n")] = 0;
    for (int i = 0; i < num_members; i++) {
        snprintf(identity_path[i], sizeof identity_path[i], "%s/m%d.id", workdir, i);
        if (write_identity(identity_path[i], members[i].peer_id)) return -1;
    }
    for (int tries = 0; tries < 100; tries++) {
        int leader = leader_of_epoch(1);
        if (sc->tokens[leader] != 'm') break;
        if (write_identity(identity_path[leader], members[leader].peer_id)) return -1;
    }
    for (int i = 0; i < num_members; i++) {
        snprintf(token_path[i], sizeof token_path[i], "%s/m%d.token", workdir, i);
        snprintf(cmd, sizeof cmd, "'%s' authority issue --key '%s' --peer %s --role %s --expires 1d > '%s' 2>/dev/null",
                 DEDLOC_BINARY, key, members[i].peer_id, sc->tokens[i] == 'm' ? "monitor" : "trainer", token_path[i]);
        if (system(cmd)) return -1;
    }
    return 0;
}

static const char *status_of(const struct member *m) {
    return m->round ? cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "status")) : "(no report)";
}

/* Worst error the codec allows between an average of inputs in [-1, 1)
 * and its decoded value (input rounding plus output rounding). */
static double codec_bound(const char *compression) {
    if (!strcmp(compression, "fp16")) return 2 * 0x1p-11;
    if (!strcmp(compression, "uint8")) return 2 * 12 * 0.5774 / 256 + 1e-3;
    if (!strcmp(compression, "int8")) return 2.0 / 253 + 1e-6;
    return 0;
}

/* How far a result may be from the weighted mean of what its contributors
 * sent (their decoded chunks): the rounding of the result's own encoding
 * alone, given the chunk's decoded result q (its largest |q_e|: qmax). */
static double result_tolerance(const char *compression, double want, double qmax) {
    if (!strcmp(compression, "fp16") || !strcmp(compression, "topk"))
        return (0x1p-11 + 0x1p-23) * fabs(want) + 0x1p-25;
    if (!strcmp(compression, "int8")) return qmax / 253 + 0x1p-23 * fabs(want) + 1e-30;
    if (!strcmp(compression, "uint8")) return codec_bound(compression);
    return 0x1p-23 * fabs(want) + 1e-30;
}

/* Error feedback (options->sent): each member's sent file holds, per chunk
 * whose mask names it, exactly its input encoded and decoded by the round's
 * codec (what the aggregator decoded from it), and 0 in every other chunk. */
static void check_sent_chunk(const char *compression, const float *input, const float *sent, size_t off, size_t len,
                             bool in_mask, int who, int ci) {
    if (!in_mask) {
        size_t nonzero = 0;
        for (size_t e = off; e < off + len; e++) nonzero += sent[e] != 0 || signbit(sent[e]);
        CHECK_MSG(nonzero == 0, "member %d: chunk %d does not hold its data, yet its sent has %zu non-zeros", who, ci,
                  nonzero);
        return;
    }
    enum dl_codec codec;
    CHECK(dl_codec_from_name(compression, &codec) == 0);
    size_t size = dl_codec_size(codec, len);
    uint8_t *wire = malloc(size + 1);
    float *want = malloc(sizeof(float) * len);
    CHECK(wire && want && dl_codec_encode(codec, input + off, len, wire) == 0 &&
          dl_codec_decode(codec, wire, size, len, want) == 0);
    CHECK_MSG(want && !memcmp(want, sent + off, sizeof(float) * len),
              "member %d: its sent of chunk %d is not its input through the %s codec", who, ci, compression);
    free(wire);
    free(want);
}

static void verify(const struct scenario *sc) {
    if (sc->victim_status)
        CHECK_MSG(!strcmp(status_of(&members[sc->victim]), sc->victim_status), "member %d reported %s, not %s",
                  sc->victim, status_of(&members[sc->victim]), sc->victim_status);
    if (sc->victim_reason) {
        const cJSON *vr = members[sc->victim].round;
        const char *reason = vr ? cJSON_GetStringValue(cJSON_GetObjectItem(vr, "reason")) : NULL;
        CHECK_MSG(reason && strstr(reason, sc->victim_reason), "member %d's reason: %s (expected \"%s\")", sc->victim,
                  reason ? reason : "(none)", sc->victim_reason);
    }
    /* Which members must have succeeded. */
    int reference = -1;
    for (int i = 0; sc->no_resend && i < num_members; i++) {
        const cJSON *resent = members[i].round ? cJSON_GetObjectItem(members[i].round, "bytes_resent") : NULL;
        CHECK_MSG(cJSON_IsNumber(resent) && cJSON_GetNumberValue(resent) == 0, "member %d sent %.0f bytes twice", i,
                  cJSON_IsNumber(resent) ? cJSON_GetNumberValue(resent) : -1.0);
    }
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        bool must = !m->victim && strcmp(m->role, "aux");
        if (!must) continue;
        CHECK_MSG(m->round && !strcmp(status_of(m), "ok"), "member %d (%s) ended with %s: %s", i, m->role,
                  status_of(m), m->round ? cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "reason")) : "");
        if (reference < 0 && m->round && !strcmp(status_of(m), "ok")) reference = i;
    }
    if (reference < 0) return;
    const cJSON *ref_round = members[reference].round;
    const cJSON *chunks = cJSON_GetObjectItem(ref_round, "chunks");
    const cJSON *group = cJSON_GetObjectItem(ref_round, "members");
    const char *ref_hash = cJSON_GetStringValue(cJSON_GetObjectItem(ref_round, "hash"));
    char *ref_chunks = cJSON_PrintUnformatted(chunks);
    char path[300];
    snprintf(path, sizeof path, "%s/m%d.out%d.bin", workdir, reference, rounds_run - 1);
    float *ref_out = read_floats(path, sc->vector_size);
    CHECK_MSG(ref_out != NULL, "no result file from member %d", reference);
    /* Identical bits on every member that applied the round (a victim may
     * apply it too, but then with the same bits). */
    int applied = 0, audited = 0;
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        if (!m->round || strcmp(status_of(m), "ok") || !strcmp(m->role, "aux")) continue;
        applied++;
        CHECK_MSG(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "hash")), ref_hash),
                  "member %d holds different bits", i);
        char *c = cJSON_PrintUnformatted(cJSON_GetObjectItem(m->round, "chunks"));
        CHECK_MSG(c && ref_chunks && !strcmp(c, ref_chunks), "member %d has a different chunk table", i);
        free(c);
        snprintf(path, sizeof path, "%s/m%d.out%d.bin", workdir, i, rounds_run - 1);
        float *out = read_floats(path, sc->vector_size);
        CHECK_MSG(out && ref_out && !memcmp(out, ref_out, sc->vector_size * sizeof(float)),
                  "member %d: result bytes differ", i);
        free(out);
        /* Accountable aggregation: every chunk another member reduced was
         * checked and found right: in projection, or (re-reduced) from what
         * its re-reducer attested. */
        int me = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(m->round, "my_index")), due = 0;
        for (int ci = 0; ci < cJSON_GetArraySize(chunks); ci++) {
            const cJSON *c = cJSON_GetArrayItem(chunks, ci);
            due += (int)cJSON_GetNumberValue(cJSON_GetArrayItem(c, 3)) != me;
        }
        int checked = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(m->round, "audit_chunks"));
        CHECK_MSG(checked == due, "member %d checked %d chunks in projection, %d were due", i, checked, due);
        const char *accused = cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "accused"));
        CHECK_MSG(accused && strspn(accused, "0") == strlen(accused), "member %d accused %s in a clean round", i,
                  accused ? accused : "?");
        audited += checked;
    }
    printf("%d members applied identical bits, %d chunks checked in projection\n", applied, audited);
    /* Group order -> our member index, inputs, weights. */
    int n = cJSON_GetArraySize(group);
    CHECK(n >= 1 && n <= MAX_MEMBERS);
    float *inputs[MAX_MEMBERS] = {0}, *sents[MAX_MEMBERS] = {0};
    int index_of[MAX_MEMBERS];
    double weight[MAX_MEMBERS];
    for (int g = 0; g < n && g < MAX_MEMBERS; g++) {
        const cJSON *gm = cJSON_GetArrayItem(group, g);
        index_of[g] = member_by_id(cJSON_GetStringValue(cJSON_GetObjectItem(gm, "peer_id")));
        weight[g] = cJSON_GetNumberValue(cJSON_GetObjectItem(gm, "weight"));
        CHECK(index_of[g] >= 0);
        if (index_of[g] >= 0) {
            /* The group record holds the joins' estimates; the chunk
             * headers' weights, which count, are the members' own. */
            CHECK(weight[g] == members[index_of[g]].join_weight);
            weight[g] = members[index_of[g]].weight;
            snprintf(path, sizeof path, "%s/m%d.in.bin", workdir, index_of[g]);
            inputs[g] = read_floats(path, sc->vector_size);
            const struct member *gm_ = &members[index_of[g]];
            if (gm_->round && !strcmp(status_of(gm_), "ok") && strcmp(gm_->role, "aux")) {
                snprintf(path, sizeof path, "%s/m%d.sent%d.bin", workdir, index_of[g], rounds_run - 1);
                sents[g] = read_floats(path, sc->vector_size);
                CHECK_MSG(sents[g] != NULL, "member %d applied the round but wrote no sent file", index_of[g]);
            }
        }
    }
    if (sc->victim_bandwidth > 0) {
        /* The liar's part: at most 2 / (A + 1) of the vector (A members
         * that can aggregate), whatever it declared. */
        int able = 0;
        for (int g = 0; g < n; g++) able += cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(group, g), "role")) != 1; /* not a client */
        for (int g = 0; g < n; g++) {
            const cJSON *gm = cJSON_GetArrayItem(group, g);
            double part = cJSON_GetNumberValue(cJSON_GetObjectItem(gm, "part_elems"));
            double limit = 2.0 / (able + 1) * (double)sc->vector_size + 1;
            printf("member %d aggregates %.0f of %zu elements (cap %.0f)\n", index_of[g], part, sc->vector_size, limit);
            CHECK_MSG(part <= limit, "member %d aggregates %.0f elements, above the cap %.0f", index_of[g], part, limit);
        }
    }
    /* Under centered clip with three senders or more, no reducer counts
     * its own contribution (round.h, dl_round_reducer_sits_out). */
    int senders = 0;
    for (int g = 0; g < n; g++) senders += index_of[g] < 0 || strcmp(members[index_of[g]].role, "aux") != 0;
    bool sits_out = sc->aggregation && !strcmp(sc->aggregation, "centered-clip") && senders >= 3;
    double bound = codec_bound(compression_of(sc));
    double worst = 0, worst_sent = 0;
    size_t covered = 0;
    int rereduced = 0;
    for (int ci = 0; ci < cJSON_GetArraySize(chunks); ci++) {
        const cJSON *c = cJSON_GetArrayItem(chunks, ci);
        size_t off = (size_t)cJSON_GetNumberValue(cJSON_GetArrayItem(c, 0));
        size_t len = (size_t)cJSON_GetNumberValue(cJSON_GetArrayItem(c, 1));
        int gen = (int)cJSON_GetNumberValue(cJSON_GetArrayItem(c, 2));
        int reducer = (int)cJSON_GetNumberValue(cJSON_GetArrayItem(c, 3));
        const char *mask = cJSON_GetStringValue(cJSON_GetArrayItem(c, 4));
        double chunk_weight = cJSON_GetNumberValue(cJSON_GetArrayItem(c, 5));
        rereduced += gen;
        CHECK(off + len <= sc->vector_size);
        covered += len;
        bool in[MAX_MEMBERS] = {false};
        double total = 0;
        int count = 0;
        for (int g = 0; g < n; g++) {
            unsigned byte;
            if (sscanf(mask + 2 * (g / 8), "%2x", &byte) != 1) continue;
            in[g] = (byte >> (g % 8)) & 1;
            if (!in[g]) continue;
            CHECK_MSG(inputs[g] != NULL, "chunk %d names member %d, which has no input file", ci, g);
            count++;
            int who = index_of[g];
            bool welcome = who >= 0 && members[who].misbehave && (!strcmp(members[who].misbehave, "weight-huge") ||
                                                                  !strcmp(members[who].misbehave, "slow-record") ||
                                                                  !strcmp(members[who].misbehave, "then-silent"));
            if (who >= 0 && members[who].misbehave && g != reducer && !welcome)
                CHECK_MSG(false, "chunk %d holds the misbehaving member's data", ci);
            if (who >= 0 && !strcmp(members[who].role, "aux")) CHECK_MSG(false, "chunk %d holds an aux member", ci);
            if (who >= 0 && sc->tokens && sc->tokens[who] == 'm')
                CHECK_MSG(false, "chunk %d holds the vector of monitor-role member %d", ci, who);
        }
        CHECK_MSG(count > 0, "chunk %d has no contributor", ci);
        if (sits_out && reducer >= 0 && reducer < n)
            CHECK_MSG(!in[reducer], "chunk %d: under centered clip its reducer (member %d) counted itself", ci,
                      index_of[reducer]);
        /* Each weight counts up to 4 times the lower median of the chunk's
         * positive weights (docs/protocol.md, "Bounded claims"). */
        double capped[MAX_MEMBERS], positive[MAX_MEMBERS];
        int num_positive = 0;
        for (int g = 0; g < n; g++)
            if (in[g] && weight[g] > 0) positive[num_positive++] = weight[g];
        for (int a = 1; a < num_positive; a++)
            for (int b = a; b > 0 && positive[b - 1] > positive[b]; b--) {
                double t = positive[b];
                positive[b] = positive[b - 1];
                positive[b - 1] = t;
            }
        double cap = num_positive ? 4 * positive[(num_positive - 1) / 2] : 0;
        for (int g = 0; g < n; g++) {
            capped[g] = in[g] ? fmin(weight[g], cap) : 0;
            total += capped[g];
        }
        CHECK_MSG(chunk_weight == total, "chunk %d: its result header says weight %g, its contributors hold %g", ci,
                  chunk_weight, total);
        for (int g = 0; g < n; g++)
            if (sents[g] && inputs[g])
                check_sent_chunk(compression_of(sc), inputs[g], sents[g], off, len, in[g], index_of[g], ci);
        /* Centered clip is no weighted mean: its results were checked by
         * the members themselves (audit_chunks above). */
        if (!count || !ref_out || sc->aggregation) continue;
        bool equal = !(total > 0);
        if (equal) total = count;
        /* The result against what its contributors sent: only the rounding
         * of the result's encoding between them. */
        bool all_sent = true;
        for (int g = 0; g < n; g++) all_sent &= !in[g] || sents[g] != NULL;
        double qmax = 0;
        for (size_t e = off; e < off + len; e++) qmax = fmax(qmax, fabs((double)ref_out[e]));
        for (size_t e = off; all_sent && e < off + len; e++) {
            double acc = 0;
            for (int g = 0; g < n; g++)
                if (in[g]) acc += (equal ? 1.0 : capped[g]) * (double)sents[g][e];
            double want = acc / total, err = fabs((double)ref_out[e] - want);
            worst_sent = fmax(worst_sent, err);
            if (err > result_tolerance(compression_of(sc), want, qmax)) {
                CHECK_MSG(false, "element %zu: %.9g, the weighted mean of what was sent is %.9g (chunk %d)", e,
                          (double)ref_out[e], want, ci);
                break;
            }
        }
        /* topk sends 1 value in 64: the inputs' mean is far from the result
         * by design (the rest waits in the senders' residuals); so does a
         * sparse vector through uint8, whose contributions clamp most
         * non-zeros into the end bins of their mean +- 6 sigma grid. */
        if (!strcmp(compression_of(sc), "topk") || sc->sparse > 0) continue;
        for (size_t e = off; e < off + len; e++) {
            double acc = 0;
            for (int g = 0; g < n; g++)
                if (in[g] && inputs[g]) acc += (equal ? 1.0 : capped[g]) * (double)inputs[g][e];
            double want = acc / total, got = ref_out[e];
            double err = fabs(got - want);
            double tol = bound > 0 ? bound : 1.2e-7 * fabs(want) + 1e-30;
            if (err > worst) worst = err;
            if (err > tol) {
                CHECK_MSG(false, "element %zu: %.9g, the weighted mean is %.9g (chunk %d)", e, got, want, ci);
                break;
            }
        }
    }
    CHECK_MSG(covered == sc->vector_size, "chunks cover %zu of %zu elements", covered, sc->vector_size);
    printf("%d chunks (%d re-reduced), worst error %.3g, against what was sent %.3g\n", cJSON_GetArraySize(chunks),
           rereduced, worst, worst_sent);
    for (int g = 0; g < n; g++) {
        free(inputs[g]);
        free(sents[g]);
    }
    free(ref_out);
    free(ref_chunks);
}

/* Robust aggregation: every member (attackers follow the protocol) applies
 * the same bits; the distance of the result from the weighted mean of the
 * honest members' inputs, relative to that mean's norm, is below
 * `close` with centered clip and above `far` with the mean. */
static void verify_robust(const struct scenario *sc) {
    const double close = 0.1, far = 10;
    char path[300];
    float *ref_out = NULL;
    const char *ref_hash = NULL;
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        CHECK_MSG(m->round && !strcmp(status_of(m), "ok"), "member %d ended with %s: %s", i, status_of(m),
                  m->round ? cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "reason")) : "");
        if (!m->round || strcmp(status_of(m), "ok")) continue;
        const char *agg = cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "aggregation"));
        CHECK_MSG(agg && !strcmp(agg, sc->aggregation ? sc->aggregation : "mean"), "member %d ran %s", i,
                  agg ? agg : "?");
        const char *hash = cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "hash"));
        snprintf(path, sizeof path, "%s/m%d.out0.bin", workdir, i);
        float *out = read_floats(path, sc->vector_size);
        CHECK_MSG(out != NULL, "no result file from member %d", i);
        if (!ref_out) {
            ref_out = out;
            ref_hash = hash;
            continue;
        }
        CHECK_MSG(hash && ref_hash && !strcmp(hash, ref_hash), "member %d holds different bits", i);
        CHECK_MSG(out && !memcmp(out, ref_out, sc->vector_size * sizeof(float)), "member %d: result bytes differ", i);
        free(out);
    }
    if (!ref_out) return;
    /* The honest weighted mean, in double, from the inputs they wrote. */
    double *honest = calloc(sc->vector_size, sizeof(double));
    double total = 0;
    CHECK(honest != NULL);
    for (int i = 0; i < num_members && honest; i++) {
        if (members[i].attack) continue;
        snprintf(path, sizeof path, "%s/m%d.in.bin", workdir, i);
        float *in = read_floats(path, sc->vector_size);
        CHECK_MSG(in != NULL, "no input file from member %d", i);
        if (!in) continue;
        for (size_t e = 0; e < sc->vector_size; e++) honest[e] += members[i].weight * (double)in[e];
        total += members[i].weight;
        free(in);
    }
    double d2 = 0, h2 = 0;
    for (size_t e = 0; honest && e < sc->vector_size; e++) {
        double h = honest[e] / total, d = (double)ref_out[e] - h;
        d2 += d * d;
        h2 += h * h;
    }
    double rel = sqrt(d2 / h2);
    bool clip = sc->aggregation && !strcmp(sc->aggregation, "centered-clip");
    printf("%s with attackers %s: result is %.4g (relative L2) from the honest weighted mean\n",
           clip ? "centered clip" : "mean", sc->attacks, rel);
    if (clip) CHECK_MSG(rel < close, "centered clip: %.4g from the honest mean (bound %g)", rel, close);
    else CHECK_MSG(rel > far, "mean: only %.4g from the honest mean: the attack had no effect (expected > %g)", rel, far);
    if (clip) {
        /* The blatant attackers are reported clipped by the aggregators that saw them. */
        const cJSON *group = cJSON_GetObjectItem(members[0].round, "members");
        for (int g = 0; g < cJSON_GetArraySize(group); g++) {
            int who = member_by_id(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(group, g), "peer_id")));
            /* With a tau above the honest spread nobody honest is clipped;
             * every attacker whose vector is far off is. */
            bool blatant = who >= 0 && members[who].attack && strcmp(members[who].attack, "replay");
            if (who < 0 || (sc->tau > 0 ? false : !blatant || strcmp(members[who].attack, "sign-flip"))) continue;
            int seen = 0;
            for (int i = 0; i < num_members; i++) {
                const char *mask = members[i].round ? cJSON_GetStringValue(cJSON_GetObjectItem(members[i].round, "clipped")) : NULL;
                unsigned byte;
                if (mask && strlen(mask) >= (size_t)(2 * (g / 8) + 2) && sscanf(mask + 2 * (g / 8), "%2x", &byte) == 1)
                    seen += (byte >> (g % 8)) & 1;
            }
            if (blatant)
                CHECK_MSG(seen >= num_members - 1, "attacker %d (%s) was clipped by %d aggregators", who,
                          members[who].attack, seen);
            else
                CHECK_MSG(seen == 0, "honest member %d was clipped by %d aggregators (tau %g)", who, seen, sc->tau);
        }
    }
    free(honest);
    free(ref_out);
}

/* A leader's attack: nobody applies the round, and every member but the
 * leader (which cannot refuse its own record) names the refusal. */
static void verify_refused(const struct scenario *sc) {
    int refused = 0;
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        CHECK_MSG(m->round && strcmp(status_of(m), "ok"), "member %d applied the round (%s)", i, status_of(m));
        const char *reason = m->round ? cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "reason")) : NULL;
        if (reason && strstr(reason, sc->refusal)) refused++;
    }
    CHECK_MSG(refused >= num_members - 1, "%d of %d members refused with \"%s\"", refused, num_members,
              sc->refusal);
    printf("%d members refused the round with \"%s\"\n", refused, sc->refusal);
}

/* Whether the file at path holds text. */
static bool file_has(const char *path, const char *text) {
    char *data = NULL;
    size_t size = 0;
    if (dl_read_file(path, (size_t)1 << 26, &data, &size)) return false;
    bool found = data && strstr(data, text) != NULL;
    free(data);
    return found;
}

/* Accountable aggregation: the liar (member `victim`) is caught by every
 * other member, which applies nothing and bans the liar and nobody else. */
static void verify_caught(const struct scenario *sc) {
    const struct member *liar = &members[sc->victim];
    const struct member *accomplice = sc->accomplice_misbehave ? &members[sc->accomplice] : NULL;
    int caught_by = 0;
    for (int i = 0; i < num_members; i++) {
        const struct member *m = &members[i];
        if (i == sc->victim || (accomplice && i == sc->accomplice)) continue;
        CHECK_MSG(m->round != NULL, "member %d did not report", i);
        if (!m->round) continue;
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "reason"));
        CHECK_MSG(strcmp(status_of(m), "ok"), "member %d applied the round", i);
        CHECK_MSG(reason && strstr(reason, "accountable aggregation caught"), "member %d ended with %s: %s", i,
                  status_of(m), reason ? reason : "");
        const cJSON *group = cJSON_GetObjectItem(m->round, "members");
        const char *accused = cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "accused"));
        for (int g = 0; g < cJSON_GetArraySize(group); g++) {
            const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(group, g), "peer_id"));
            unsigned byte = 0;
            bool banned = accused && strlen(accused) >= 2 * (size_t)(g / 8) + 2 &&
                          sscanf(accused + 2 * (g / 8), "%2x", &byte) == 1 && ((byte >> (g % 8)) & 1);
            bool is_accomplice = id && accomplice && !strcmp(id, accomplice->peer_id);
            bool is_liar = id && !strcmp(id, liar->peer_id);
            if (is_accomplice) CHECK_MSG(banned, "member %d did not ban the accomplice (member %d)", i, sc->accomplice);
            if (is_accomplice) continue;
            if (is_liar) {
                CHECK_MSG(banned, "member %d did not ban the liar (member %d)", i, sc->victim);
                caught_by += banned;
                /* for the run, not for ban_s: signed evidence is no glitch */
                char path[300], want[120];
                snprintf(path, sizeof path, "%s/m%d.log", workdir, i);
                snprintf(want, sizeof want, "refusing peer %s for the rest of the run", liar->peer_id);
                CHECK_MSG(!banned || file_has(path, want), "member %d did not refuse the liar for the run", i);
            } else {
                CHECK_MSG(!banned, "member %d banned %s, who did not lie", i, id ? id : "?");
            }
        }
    }
    printf("the liar (member %d, %s) was caught and banned by %d members, nobody else\n", sc->victim,
           liar->misbehave, caught_by);
}

static void garbage_on_port(const char *listen) {
    char host[64];
    snprintf(host, sizeof host, "%s", listen);
    char *colon = strrchr(host, ':');
    if (!colon) return;
    *colon = 0;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, host, &sa.sin_addr);
    for (int round = 0; round < 3; round++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return;
        if (!connect(s, (struct sockaddr *)&sa, sizeof sa)) {
            uint8_t junk[4096];
            for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(rand() & 0xFF);
            if (round == 1) junk[0] = 0xD1, junk[1] = 0x0C; /* a plausible magic, then nonsense */
            ssize_t w = write(s, junk, sizeof junk);
            (void)w;
        }
        close(s);
    }
}

static int run(const struct scenario *sc) {
    snprintf(workdir, sizeof workdir, "/tmp/dedloc-collab-%s-%d", sc->name, (int)getpid());
    mkdir(workdir, 0755);
    num_members = sc->member_count;
    rounds_run = sc->rounds > 1 ? sc->rounds : 1;
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        memset(m, 0, sizeof *m);
        char r = sc->roles ? sc->roles[i] : 't';
        m->role = r == 'c' ? "client" : r == 'a' ? "aux" : "trainer";
        m->join_weight = r == 'a' ? 0 : 1 + i % 3;
        m->weight = r == 'a' ? 0 : sc->join_differs ? 5 + 3 * i : m->join_weight;
        if (sc->misbehave && (i == sc->victim || sc->everyone_misbehaves)) m->misbehave = sc->misbehave;
        if (sc->accomplice_misbehave && i == sc->accomplice) m->misbehave = sc->accomplice_misbehave;
        /* Its chunks claim 1e12 samples (src/collab/round.c), its join the usual. */
        if (m->misbehave && !strcmp(m->misbehave, "weight-huge")) m->weight = 1e12;
        char a = sc->attacks ? sc->attacks[i] : '-';
        m->attack = a == 's' ? "sign-flip" : a == 'n' ? "noise" : a == 't' ? "stale" : a == 'r' ? "replay" : NULL;
        if (m->attack && sc->attacker_weight > 0) m->weight = m->join_weight = sc->attacker_weight;
        bool honest_mode = m->misbehave && !strcmp(m->misbehave, "slow-record");
        m->victim = (sc->fault && strcmp(sc->fault, "port") && i == sc->victim) || (m->misbehave && !honest_mode) ||
                    (sc->victim_delay > 0 && i == sc->victim) || (sc->tokens && sc->tokens[i] == 'm');
    }
    if (sc->tokens && make_tokens(sc)) {
        fprintf(stderr, "cannot make the run authority, identities and tokens\n");
        return 1;
    }
    double t0 = now_s();
    for (int i = 0; i < num_members; i++) {
        if (spawn(i, sc, i ? members[0].listen : NULL)) {
            fprintf(stderr, "cannot start member %d\n", i);
            return 1;
        }
        if (i == 0) {
            while (!members[0].ready && now_s() - t0 < 20) {
                pump(&members[0]);
                sleep_s(0.02);
            }
            if (!members[0].ready) {
                fprintf(stderr, "member 0 did not start\n");
                return 1;
            }
        }
    }
    double started = 0, limit = t0 + 120;
    int victim = sc->victim;
    bool fault_done = !sc->fault, resumed = true;
    double resume_at = 0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < num_members; i++) {
            struct member *m = &members[i];
            pump(m);
            if (m->pid > 0) {
                int st;
                if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
                    pump(m);
                    m->pid = 0;
                }
            }
            /* Members stay up after their round (to serve the others);
             * once every one has reported, the test ends them. */
            if (m->pid > 0 && !m->round) all = false;
        }
        if (!started) {
            bool every = true;
            for (int i = 0; i < num_members; i++) every &= members[i].started;
            if (every) started = now_s();
        }
        if (started && !fault_done && now_s() >= started + sc->fault_at) {
            /* Never hit the leader: on a slow machine the group may still be
             * forming, and without its leader nobody would average at all.
             * Any other victim is fine for the round. */
            int leader = leader_of_epoch(1);
            if (victim == leader && sc->fault && strcmp(sc->fault, "port")) {
                members[victim].victim = false;
                do victim = (victim + 1) % num_members;
                while (victim == leader || strcmp(members[victim].role, "trainer"));
                members[victim].victim = true;
            }
            struct member *v = &members[victim];
            if (!strcmp(sc->fault, "kill") && v->pid > 0) {
                printf("SIGKILL member %d (%s) at +%.2f s\n", victim, v->role, now_s() - started);
                kill(v->pid, SIGKILL);
            } else if (!strcmp(sc->fault, "stop") && v->pid > 0) {
                printf("SIGSTOP member %d (%s) at +%.2f s\n", victim, v->role, now_s() - started);
                kill(v->pid, SIGSTOP);
                resumed = false;
                resume_at = now_s() + 9;
            } else if (!strcmp(sc->fault, "port")) {
                garbage_on_port(members[victim].listen);
            }
            fault_done = true;
        }
        if (!resumed) {
            bool others = true;
            for (int i = 0; i < num_members; i++)
                if (i != victim && !members[i].round && members[i].pid > 0) others = false;
            if (others || now_s() >= resume_at) {
                printf("SIGCONT member %d at +%.2f s\n", victim, now_s() - started);
                kill(members[victim].pid, SIGCONT);
                resumed = true;
            }
        }
        if (all || now_s() > limit) break;
        sleep_s(0.02);
    }
    for (int i = 0; i < num_members; i++) {
        struct member *m = &members[i];
        printf("member %d %-7s %-6s %s %s\n", i, m->role, status_of(m), m->peer_id,
               m->round ? cJSON_GetStringValue(cJSON_GetObjectItem(m->round, "reason")) : "");
    }
    if (sc->misbehave && !strcmp(sc->misbehave, "stall-leader")) {
        /* Only the first round's leader stalls (the others never led first). */
        int staller = leader_of_epoch(1);
        for (int i = 0; i < num_members; i++) {
            members[i].victim = i == staller;
            if (i != staller) members[i].misbehave = NULL;
        }
        printf("member %d led the first round and stalls\n", staller);
    }
    if (sc->attacks) verify_robust(sc);
    else if (sc->refusal) verify_refused(sc);
    else if (sc->caught) verify_caught(sc);
    else verify(sc);
    kill_all();
    for (int i = 0; i < num_members; i++) cJSON_Delete(members[i].round);
    if (!dl_test_failed) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
        if (system(cmd)) fprintf(stderr, "cannot remove %s\n", workdir);
    } else {
        fprintf(stderr, "logs kept in %s\n", workdir);
    }
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}

int main(int argc, char **argv) {
    atexit(kill_all);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGALRM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    alarm(170);
    srand(7);
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (!strcmp(argv[1], scenarios[i].name)) return run(&scenarios[i]);
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
