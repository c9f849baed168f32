/* State transfer with real processes on loopback. This program re-executes
 * itself (/proc/self/exe) as donor processes ("donor SEED_EPOCH...") and as
 * newcomer processes ("fetch ..."); the parent fetches from them and checks:
 * exact bits drawn from three donors at once, an older epoch still served,
 * wrong hash / epoch / layout refused, a corrupt chunk detected and fetched
 * again elsewhere, a donor SIGKILLed midway, a donor stalled (SIGSTOP), and
 * six newcomers fetching at once. Also: the param hash against BLAKE2b-256
 * values from Python's hashlib, and garbage descriptions refused. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collab/state_transfer.h"
#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "collab_test_net.h"
#include "dl_test.h"

#define RUN_ID "state-test"
#define EPOCH 7
#define OLD_EPOCH 6
#define PARAMS 400000  /* floats per buffer: 1.6 MB, three buffers */
#define CHUNK 65536
#define NUM_DONORS 4   /* 0..2 honest, 3 corrupts its first chunk */
#define NEWCOMERS 6

/* ---- the state every donor holds (same seed, same bits) ------------------------ */

struct test_state {
    float *buf[3];
    size_t size[3];
    char meta[64];
};

static void state_make(struct test_state *s, uint64_t epoch) {
    dl_rng rng;
    dl_rng_seed(&rng, 1000 + epoch);
    size_t counts[3] = {PARAMS, PARAMS, PARAMS / 2 + 3}; /* odd last buffer: a short last chunk */
    for (int b = 0; b < 3; b++) {
        s->size[b] = counts[b] * 4;
        s->buf[b] = malloc(s->size[b]);
        for (size_t i = 0; i < counts[b]; i++)
            s->buf[b][i] = b == 2 ? 1e-6f * dl_rng_uniform(&rng) : 0.02f * dl_rng_normal(&rng);
    }
    snprintf(s->meta, sizeof s->meta, "epoch=%llu;loss_scale=65536;lr_step=%llu", (unsigned long long)epoch,
             (unsigned long long)epoch * 10);
}

static void state_free(struct test_state *s) {
    for (int b = 0; b < 3; b++) free(s->buf[b]);
}

static dl_net *start_net(const char *initial) { return collab_test_net(RUN_ID, initial); }

/* Waits (bounded) until every peer id is in the swarm view. */
static bool wait_for_peers(dl_net *net, char ids[][DL_PEER_ID_HEX], size_t n, double seconds) {
    double end = dl_now() + seconds;
    while (dl_now() < end) {
        struct dl_swarm_view view;
        if (dl_net_swarm_view(net, &view) == 0) {
            size_t seen = 0;
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < view.num_peers; j++)
                    if (!strcmp(view.peers[j].peer_id, ids[i]) && !view.peers[j].is_self) {
                        seen++;
                        break;
                    }
            dl_swarm_view_free(&view);
            if (seen == n) return true;
        }
        usleep(50000);
    }
    return false;
}

/* ---- donor process ----------------------------------------------------------- */

static int donor_main(unsigned corrupt) {
    dl_net *net = start_net(NULL);
    if (!net) return 1;
    dl_state_donor *donor;
    struct dl_state_donor_config cfg;
    dl_state_donor_config_default(&cfg);
    cfg.chunk_size = CHUNK;
    if (dl_state_donor_start(net, &cfg, &donor)) {
        fprintf(stderr, "donor: %s\n", dl_error());
        return 1;
    }
    for (uint64_t epoch = OLD_EPOCH; epoch <= EPOCH; epoch++) {
        struct test_state s;
        state_make(&s, epoch);
        struct dl_state_span spans[3];
        for (int b = 0; b < 3; b++) spans[b] = (struct dl_state_span){s.buf[b], s.size[b]};
        if (dl_state_donor_publish(donor, epoch, spans, 3, s.meta, strlen(s.meta))) {
            fprintf(stderr, "donor publish: %s\n", dl_error());
            return 1;
        }
        state_free(&s); /* the donor serves its own copy */
    }
    if (corrupt) dl_state_donor_test_corrupt(donor, corrupt);
    dl_net_publish_progress(net, EPOCH, 0, 0);
    printf("READY %s %s\n", dl_net_peer_id(net), dl_net_listen_address(net));
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {} /* until the parent closes our stdin */
    dl_state_donor_stop(donor);
    dl_net_stop(net);
    return 0;
}

/* ---- fetching ----------------------------------------------------------------- */

struct fetched {
    struct test_state got;
    struct dl_state_fetch_result result;
    int rc;
    char error[600];
};

static void fetch_prepare(struct test_state *got, size_t extra_bytes) {
    size_t counts[3] = {PARAMS, PARAMS, PARAMS / 2 + 3};
    for (int b = 0; b < 3; b++) {
        got->size[b] = counts[b] * 4 + (b == 1 ? extra_bytes : 0);
        got->buf[b] = calloc(1, got->size[b]);
    }
}

static void do_fetch(dl_net *net, const char *const *donors, size_t n, uint64_t epoch, const uint8_t *hash,
                     double request_timeout, void (*progress)(void *, size_t, size_t), size_t extra_bytes,
                     struct fetched *out) {
    memset(out, 0, sizeof *out);
    fetch_prepare(&out->got, extra_bytes);
    struct dl_state_fetch_config cfg;
    dl_state_fetch_config_default(&cfg);
    cfg.epoch = epoch;
    cfg.donors = donors;
    cfg.num_donors = n;
    cfg.expected_param_hash = hash;
    cfg.max_in_flight_per_donor = 2;
    cfg.request_timeout_s = request_timeout;
    cfg.timeout_s = 60;
    cfg.progress = progress;
    struct dl_state_buffer bufs[3];
    for (int b = 0; b < 3; b++) bufs[b] = (struct dl_state_buffer){out->got.buf[b], out->got.size[b]};
    out->rc = dl_state_fetch(net, &cfg, bufs, 3, &out->result);
    snprintf(out->error, sizeof out->error, "%s", out->rc ? dl_error() : "");
}

static bool same_bits(const struct test_state *a, const struct test_state *b) {
    for (int i = 0; i < 3; i++)
        if (a->size[i] != b->size[i] || memcmp(a->buf[i], b->buf[i], a->size[i])) return false;
    return true;
}

static void fetched_free(struct fetched *f) {
    state_free(&f->got);
    dl_state_fetch_result_free(&f->result);
}

/* Newcomer process: fetch ID@ADDR... ; checks the bits itself. */
static int fetch_main(int argc, char **argv) {
    char initial[1024] = "", ids[8][DL_PEER_ID_HEX];
    const char *donors[8];
    size_t n = 0;
    for (int i = 2; i < argc && n < 8; i++) {
        char *at = strchr(argv[i], '@');
        if (!at) return 2;
        snprintf(ids[n], sizeof ids[n], "%.*s", (int)(at - argv[i]), argv[i]);
        donors[n] = ids[n];
        size_t len = strlen(initial);
        snprintf(initial + len, sizeof initial - len, "%s%s", n ? "," : "", at + 1);
        n++;
    }
    dl_net *net = start_net(initial);
    if (!net || !wait_for_peers(net, ids, n, 30)) {
        fprintf(stderr, "newcomer: donors not reached\n");
        return 1;
    }
    struct test_state want;
    state_make(&want, EPOCH);
    uint8_t hash[32];
    dl_collab_param_hash(want.buf[0], want.size[0] / 4, hash);
    struct fetched f;
    do_fetch(net, donors, n, EPOCH, hash, 20, NULL, 0, &f);
    int rc = 0;
    if (f.rc) {
        fprintf(stderr, "newcomer: %s\n", f.error);
        rc = 1;
    } else if (!same_bits(&f.got, &want)) {
        fprintf(stderr, "newcomer: bits differ\n");
        rc = 1;
    }
    printf("%s", rc ? "FAIL" : "OK");
    for (size_t i = 0; i < f.result.num_donors; i++) printf(" %llu", (unsigned long long)f.result.donors[i].chunks);
    printf("\n");
    fflush(stdout);
    fetched_free(&f);
    state_free(&want);
    dl_net_stop(net);
    return rc;
}

/* ---- child processes ----------------------------------------------------------- */

struct child {
    pid_t pid;
    int in_fd, out_fd;
    char peer_id[DL_PEER_ID_HEX];
    char addr[64];
};

/* Children not reaped yet, by pid: the struct child of a test lives on its
 * function's stack, gone by the time the exit handler runs. A pid stays
 * here until wait_exit reaps it, so it cannot have been reused. */
static pid_t unreaped[32];
static int num_children;

static void kill_children(void) {
    for (int i = 0; i < num_children; i++)
        if (unreaped[i] > 0) {
            kill(unreaped[i], SIGKILL);
            waitpid(unreaped[i], NULL, 0);
            unreaped[i] = 0;
        }
}

static void on_signal(int sig) {
    kill_children();
    _exit(128 + sig);
}

static int spawn(struct child *c, char *const argv[]) {
    int in[2], out[2];
    /* Close-on-exec: a later child must not hold an earlier donor's stdin open. */
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) return -1;
    memset(c, 0, sizeof *c);
    c->pid = fork();
    if (c->pid < 0) return -1;
    if (c->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        setenv("DEDLOC_LOG", "warn", 0);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->in_fd = in[1];
    c->out_fd = out[0];
    if (num_children < 32) unreaped[num_children++] = c->pid;
    return 0;
}

/* One line from the child's stdout within the time limit. */
static bool read_line(struct child *c, char *buf, size_t cap, double seconds) {
    size_t len = 0;
    double end = dl_now() + seconds;
    while (len + 1 < cap) {
        struct pollfd p = {c->out_fd, POLLIN, 0};
        int left = (int)((end - dl_now()) * 1000);
        if (left <= 0 || poll(&p, 1, left) <= 0) return false;
        ssize_t k = read(c->out_fd, buf + len, 1);
        if (k <= 0) return false;
        if (buf[len] == '\n') break;
        len++;
    }
    buf[len] = 0;
    return true;
}

static int wait_exit(struct child *c, double seconds) {
    double end = dl_now() + seconds;
    while (dl_now() < end) {
        int status;
        pid_t r = waitpid(c->pid, &status, WNOHANG);
        if (r == c->pid) {
            for (int i = 0; i < num_children; i++)
                if (unreaped[i] == c->pid) unreaped[i] = 0;
            c->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20000);
    }
    return -1;
}

/* ---- tests ----------------------------------------------------------------------- */

/* A request whose answer (error text included, unlike dl_net_request_sync)
 * lands in msg. */
struct call {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
    char msg[256];
};

static void call_cb(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct call *c = user;
    pthread_mutex_lock(&c->lock);
    c->status = status;
    snprintf(c->msg, sizeof c->msg, "%.*s", (int)(size < 255 ? size : 255), payload ? (const char *)payload : "");
    c->done = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static int call(dl_net *net, const char *peer, const char *method, const void *payload, size_t size, char *msg,
                size_t cap) {
    struct call c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, -1, ""};
    if (!dl_net_request(net, peer, method, payload, size, 10, call_cb, &c)) return -1;
    pthread_mutex_lock(&c.lock);
    while (!c.done) pthread_cond_wait(&c.cond, &c.lock);
    pthread_mutex_unlock(&c.lock);
    snprintf(msg, cap, "%s", c.msg);
    return c.status;
}

static struct child donor_procs[NUM_DONORS];
static pid_t victim;
static int victim_signal;
static bool victim_hit;

static void hit_victim_at_third(void *user, size_t done, size_t total) {
    if (!victim_hit && done * 3 >= total) {
        kill(victim, victim_signal);
        victim_hit = true;
    }
}

static void test_param_hash(void) {
    static const char *want[2] = {"e612fc4a65fffcf5070596705d075ffb060ef495ef3c17db4821d460a0873ca9",
                                  "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8"};
    const float x[3] = {1.0f, 2.0f, -0.5f};
    for (int t = 0; t < 2; t++) {
        uint8_t h[32];
        char hex[65];
        dl_collab_param_hash(x, t ? 0 : 3, h);
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
        CHECK_MSG(!strcmp(hex, want[t]), "param hash %s, hashlib says %s", hex, want[t]);
    }
}

static void test_description_garbage(void) {
    struct dl_state_desc d = {0};
    d.epoch = 3;
    d.chunk_size = 4096;
    d.num_buffers = 2;
    d.sizes[0] = 10000;
    d.sizes[1] = 5;
    d.meta_size = 3;
    CHECK_OK(dl_state_count_chunks(d.sizes, 2, 4096, &d.num_chunks));
    CHECK(d.num_chunks == 4);
    uint64_t hashes[4] = {1, 2, 3, 4};
    size_t size;
    uint8_t *blob = dl_state_desc_encode(&d, hashes, "abc", &size);
    struct dl_state_desc back;
    CHECK_OK(dl_state_desc_decode(blob, size, 100, &back));
    CHECK(back.num_chunks == 4 && dl_state_chunk_hash(&back, 3) == 4 && !memcmp(back.meta, "abc", 3));
    CHECK(dl_state_desc_decode(blob, size - 1, 100, &back) == -1);
    CHECK(dl_state_desc_decode(blob, size, 2, &back) == -1); /* metadata over the limit */
    uint8_t *bad = malloc(size);
    memcpy(bad, blob, size);
    bad[32] = 5; /* claims 5 chunks */
    CHECK(dl_state_desc_decode(bad, size, 100, &back) == -1);
    memcpy(bad, blob, size);
    bad[16] = 1; /* chunk size 4097 - still fine, but then the count is wrong */
    bad[17] = 0;
    bad[18] = 0;
    CHECK(dl_state_desc_decode(bad, size, 100, &back) == -1);
    dl_rng rng;
    dl_rng_seed(&rng, 5);
    int accepted = 0;
    for (int rep = 0; rep < 20000; rep++) {
        memcpy(bad, blob, size);
        size_t k = (size_t)dl_rng_below(&rng, size);
        bad[k] = (uint8_t)dl_rng_next(&rng);
        size_t cut = rep % 4 == 0 ? (size_t)dl_rng_below(&rng, size + 1) : size;
        if (dl_state_desc_decode(bad, cut, 100, &back) == 0) {
            accepted++;
            /* Whatever is accepted is self-consistent. */
            uint64_t count;
            CHECK(dl_state_count_chunks(back.sizes, back.num_buffers, back.chunk_size, &count) == 0 &&
                  count == back.num_chunks);
        }
    }
    CHECK(accepted > 0); /* flips in hashes or epoch are not structural */
    free(bad);
    free(blob);
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "donor")) return donor_main((unsigned)atoi(argv[2]));
    if (argc >= 2 && !strcmp(argv[1], "fetch")) return fetch_main(argc, argv);

    test_param_hash();
    test_description_garbage();

    atexit(kill_children);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGALRM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    alarm(150);

    char ids[NUM_DONORS][DL_PEER_ID_HEX], initial[512] = "";
    for (int i = 0; i < NUM_DONORS; i++) {
        char *args[] = {argv[0], "donor", i == 3 ? "1" : "0", NULL};
        char line[256];
        if (spawn(&donor_procs[i], args) || !read_line(&donor_procs[i], line, sizeof line, 30) ||
            sscanf(line, "READY %32s %63s", donor_procs[i].peer_id, donor_procs[i].addr) != 2) {
            fprintf(stderr, "donor %d did not start\n", i);
            return 1;
        }
        snprintf(ids[i], sizeof ids[i], "%s", donor_procs[i].peer_id);
        size_t len = strlen(initial);
        snprintf(initial + len, sizeof initial - len, "%s%s", i ? "," : "", donor_procs[i].addr);
    }
    dl_net *net = start_net(initial);
    if (!net || !wait_for_peers(net, ids, NUM_DONORS, 30)) {
        fprintf(stderr, "donors not reached\n");
        return 1;
    }
    struct test_state want, want_old;
    state_make(&want, EPOCH);
    state_make(&want_old, OLD_EPOCH);
    uint8_t hash[32], hash_old[32], wrong[32];
    dl_collab_param_hash(want.buf[0], want.size[0] / 4, hash);
    dl_collab_param_hash(want_old.buf[0], want_old.size[0] / 4, hash_old);
    memcpy(wrong, hash, 32);
    wrong[0] ^= 1;
    const char *honest[3] = {ids[0], ids[1], ids[2]};
    struct fetched f;

    /* Bad requests get clear error answers; the donor goes on serving. */
    char msg[256];
    uint8_t req[16];
    int st = call(net, ids[0], "state.chunk", "abc", 3, msg, sizeof msg);
    CHECK_MSG(st == DL_NET_REMOTE_ERROR && strstr(msg, "malformed"), "short request: %d '%s'", st, msg);
    dl_state_put_u64(req, EPOCH);
    dl_state_put_u64(req + 8, 1000000000);
    st = call(net, ids[0], "state.chunk", req, 16, msg, sizeof msg);
    CHECK_MSG(st == DL_NET_REMOTE_ERROR && strstr(msg, "out of range"), "chunk out of range: %d '%s'", st, msg);
    dl_state_put_u64(req, 99);
    st = call(net, ids[0], "state.info", req, 8, msg, sizeof msg);
    CHECK_MSG(st == DL_NET_REMOTE_ERROR && strstr(msg, "not served; serving: 7 6"), "unknown epoch: %d '%s'", st, msg);

    /* Publication refuses what cannot be served. */
    dl_state_donor *local;
    CHECK_OK(dl_state_donor_start(net, NULL, &local));
    struct dl_state_span odd = {want.buf[0], 6}, many[DL_STATE_MAX_BUFFERS + 1];
    for (int i = 0; i <= DL_STATE_MAX_BUFFERS; i++) many[i] = (struct dl_state_span){want.buf[0], 4};
    CHECK(dl_state_donor_publish(local, 1, &odd, 1, NULL, 0) == -1 && strstr(dl_error(), "multiple of 4"));
    CHECK(dl_state_donor_publish(local, 1, many, DL_STATE_MAX_BUFFERS + 1, NULL, 0) == -1);
    CHECK(dl_state_donor_publish(local, 1, many, 1, "x", DL_STATE_MAX_META + 1) == -1);
    CHECK_OK(dl_state_donor_publish(local, 1, many, 2, "x", 1));
    struct dl_state_donor_stats stats;
    dl_state_donor_get_stats(local, &stats);
    CHECK(stats.newest_epoch == 1 && stats.snapshots == 1);
    dl_state_donor_stop(local);

    /* Drawn from three donors at once: exact bits, every donor served. */
    do_fetch(net, honest, 3, EPOCH, hash, 20, NULL, 0, &f);
    CHECK_MSG(f.rc == 0, "three donors: %s", f.error);
    CHECK(same_bits(&f.got, &want));
    CHECK(f.result.meta_size == strlen(want.meta) && !memcmp(f.result.meta, want.meta, f.result.meta_size));
    uint64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(f.result.donors[i].chunks > 0 && f.result.donors[i].used && !f.result.donors[i].dropped,
                  "donor %d served %llu chunks", i, (unsigned long long)f.result.donors[i].chunks);
        sum += f.result.donors[i].chunks;
    }
    CHECK(sum == f.result.num_chunks && f.result.num_chunks == 25 + 25 + 13 && f.result.chunks_refetched == 0);
    fetched_free(&f);

    /* The previous epoch is still served (keep_snapshots 2). */
    do_fetch(net, honest, 1, OLD_EPOCH, hash_old, 20, NULL, 0, &f);
    CHECK_MSG(f.rc == 0 && same_bits(&f.got, &want_old), "older epoch: %s", f.error);
    fetched_free(&f);

    /* Refusals: wrong expected hash, an epoch nobody serves, another layout. */
    do_fetch(net, honest, 3, EPOCH, wrong, 20, NULL, 0, &f);
    CHECK_MSG(f.rc == -1 && strstr(f.error, "expected param hash"), "wrong hash: %s", f.error);
    CHECK(!f.result.donors[0].used && strstr(f.result.donors[0].reason, "hash"));
    fetched_free(&f);
    do_fetch(net, honest, 2, 5, hash, 20, NULL, 0, &f);
    CHECK_MSG(f.rc == -1 && strstr(f.error, "not served"), "unknown epoch: %s", f.error);
    fetched_free(&f);
    do_fetch(net, honest, 1, EPOCH, hash, 20, NULL, 8, &f);
    CHECK_MSG(f.rc == -1 && strstr(f.error, "buffer 1"), "other layout: %s", f.error);
    fetched_free(&f);

    /* A corrupt chunk: detected, asked again from the other donor, reported. */
    const char *with_corrupt[2] = {ids[3], ids[0]};
    do_fetch(net, with_corrupt, 2, EPOCH, hash, 20, NULL, 0, &f);
    CHECK_MSG(f.rc == 0, "corrupt donor: %s", f.error);
    CHECK(same_bits(&f.got, &want));
    CHECK_MSG(f.result.donors[0].corrupt == 1 && f.result.donors[0].dropped && f.result.chunks_refetched >= 1,
              "corrupt %u dropped %d refetched %zu", f.result.donors[0].corrupt, f.result.donors[0].dropped,
              f.result.chunks_refetched);
    CHECK(f.result.donors[1].corrupt == 0 && f.result.donors[1].chunks > 0);
    fetched_free(&f);

    /* A donor SIGKILLed a third of the way: the others finish. */
    victim = donor_procs[2].pid;
    victim_signal = SIGKILL;
    victim_hit = false;
    do_fetch(net, honest, 3, EPOCH, hash, 20, hit_victim_at_third, 0, &f);
    CHECK(victim_hit);
    CHECK_MSG(f.rc == 0, "killed donor: %s", f.error);
    CHECK(same_bits(&f.got, &want));
    /* (Whether it delivered any chunk before dying depends on scheduling.) */
    CHECK_MSG(f.result.donors[2].dropped && f.result.donors[2].chunks < f.result.num_chunks,
              "killed donor: dropped %d, %llu chunks (%s)", f.result.donors[2].dropped,
              (unsigned long long)f.result.donors[2].chunks, f.result.donors[2].reason);
    CHECK(f.result.donors[0].chunks + f.result.donors[1].chunks + f.result.donors[2].chunks == f.result.num_chunks);
    fetched_free(&f);
    wait_exit(&donor_procs[2], 5);

    /* A donor that stalls (SIGSTOP) a third of the way through: the other
     * finishes with the exact bits. Whether the stalled donor's requests
     * reach their timeout before the other donor has served every chunk
     * depends on scheduling, so its drop is checked only by its reason. */
    victim = donor_procs[1].pid;
    victim_signal = SIGSTOP;
    victim_hit = false;
    const char *two[2] = {ids[0], ids[1]};
    do_fetch(net, two, 2, EPOCH, hash, 3, hit_victim_at_third, 0, &f);
    kill(donor_procs[1].pid, SIGCONT);
    CHECK_MSG(f.rc == 0 && same_bits(&f.got, &want), "stalled donor: %s", f.error);
    CHECK_MSG(!f.result.donors[1].dropped || strstr(f.result.donors[1].reason, "timeout"), "stalled donor: %s",
              f.result.donors[1].reason);
    CHECK(f.result.donors[0].chunks + f.result.donors[1].chunks == f.result.num_chunks);
    fetched_free(&f);

    /* A donor stalled from the start: its description never comes within
     * the request timeout, it serves nothing, the other donor serves all. */
    kill(donor_procs[1].pid, SIGSTOP);
    do_fetch(net, two, 2, EPOCH, hash, 2, NULL, 0, &f);
    kill(donor_procs[1].pid, SIGCONT);
    CHECK_MSG(f.rc == 0 && same_bits(&f.got, &want), "donor stalled from the start: %s", f.error);
    CHECK_MSG(f.result.donors[1].chunks == 0 && f.result.donors[0].chunks == f.result.num_chunks &&
                  (!f.result.donors[1].used || f.result.donors[1].dropped) && f.result.donors[1].reason[0],
              "donor stalled from the start: used %d dropped %d, %llu chunks (%s)", f.result.donors[1].used,
              f.result.donors[1].dropped, (unsigned long long)f.result.donors[1].chunks, f.result.donors[1].reason);
    printf("stalled from the start: %s\n", f.result.donors[1].reason);
    fetched_free(&f);

    /* Six newcomers at once from the three donors left. */
    struct child newcomers[NEWCOMERS];
    char spec[3][128];
    int live[3] = {0, 1, 3};
    for (int i = 0; i < 3; i++)
        snprintf(spec[i], sizeof spec[i], "%s@%s", donor_procs[live[i]].peer_id, donor_procs[live[i]].addr);
    for (int i = 0; i < NEWCOMERS; i++) {
        char *args[] = {argv[0], "fetch", spec[0], spec[1], spec[2], NULL};
        CHECK(spawn(&newcomers[i], args) == 0);
    }
    int ok = 0;
    for (int i = 0; i < NEWCOMERS; i++) {
        char line[256] = "";
        bool got = read_line(&newcomers[i], line, sizeof line, 90);
        int rc = wait_exit(&newcomers[i], 30);
        unsigned long long c[3] = {0};
        int fields = sscanf(line, "OK %llu %llu %llu", &c[0], &c[1], &c[2]);
        if (got && rc == 0 && fields == 3 && c[0] && c[1] && c[2]) ok++;
        else fprintf(stderr, "newcomer %d: exit %d, said '%s'\n", i, rc, line);
    }
    CHECK_MSG(ok == NEWCOMERS, "%d of %d newcomers fetched exact bits from all three donors", ok, NEWCOMERS);

    dl_net_stop(net);
    for (int i = 0; i < NUM_DONORS; i++)
        if (donor_procs[i].pid > 0) {
            close(donor_procs[i].in_fd); /* the donor stops cleanly */
            CHECK_MSG(wait_exit(&donor_procs[i], 10) == 0, "donor %d did not stop cleanly", i);
        }
    state_free(&want);
    state_free(&want_old);
    return dl_test_finish("test_collab_state");
}
