/* Admission with real `dedloc peer` processes on loopback: peers holding
 * tokens from the run authority form a swarm; a peer without a token, with
 * an expired token, and with a token issued for another peer id is refused,
 * and its own log says why; a member whose token runs out during the
 * connection is disconnected; a member revoked while connected is
 * disconnected by the peer that reads the list and, through the list's
 * gossip, by the peer that does not. The authority and tokens are made with
 * the `dedloc authority` command itself (the expired token with the library,
 * since the command issues no token already expired). */
#include <sys/stat.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/wire.h"
#include "peer_procs.h"

static char tmpdir[] = "/tmp/dl_net_admission_XXXXXX";
static char run_key_hex[DL_AUTHORITY_PK_HEX];
static char key_path[300], revoked_path[300];

enum { A, B, F, G_SHORT, C_NO_TOKEN, D_EXPIRED, E_OTHER_ID, NUM };
static struct peer_proc procs[NUM];
static char ids[NUM][DL_PEER_ID_HEX];
static char ident_path[NUM][300], token_path[NUM][300], log_path[NUM][300];

static int run_cmd(const char *fmt, ...) {
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

static void spawn(int i, const char *initial) {
    const char *a[24];
    int n = 0;
    a[n++] = "--run-id"; a[n++] = "adm";
    a[n++] = "--listen"; a[n++] = "127.0.0.1:0";
    a[n++] = "--no-dht";
    a[n++] = "--status-every"; a[n++] = "0.2";
    a[n++] = "--expiry"; a[n++] = "4";
    a[n++] = "--identity"; a[n++] = ident_path[i];
    a[n++] = "--run-key"; a[n++] = run_key_hex;
    if (token_path[i][0]) { a[n++] = "--token"; a[n++] = token_path[i]; }
    if (i == A) { a[n++] = "--revoked"; a[n++] = revoked_path; } /* B learns revocations from A */
    if (initial) { a[n++] = "--initial-peers"; a[n++] = initial; }
    while (n < 24) a[n++] = NULL;
    proc_spawn(&procs[i], log_path[i], a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
               a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], NULL);
}

static bool log_contains(int i, const char *needle) {
    char *text;
    size_t size;
    if (dl_read_file(log_path[i], 1 << 24, &text, &size)) return false;
    bool found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* Keeps every peer's pipe drained while waiting for a line in one log. */
static bool wait_log(int i, const char *needle, double timeout_s) {
    double end = mono_now() + timeout_s;
    while (mono_now() < end) {
        for (int k = 0; k < NUM; k++) proc_pump(&procs[k]);
        if (log_contains(i, needle)) return true;
        usleep(100000);
    }
    fprintf(stderr, "log %s lacks '%s'\n", log_path[i], needle);
    return false;
}

static void write_expired_token(int i) {
    struct dl_authority auth;
    struct dl_token t;
    memset(&t, 0, sizeof t);
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    char text[DL_TOKEN_TEXT_MAX];
    CHECK_OK(dl_authority_load(key_path, &auth));
    snprintf(t.run_id, sizeof t.run_id, "adm");
    snprintf(t.peer_id, sizeof t.peer_id, "%s", ids[i]);
    t.role = DL_ROLE_TRAINER;
    t.issued = (uint64_t)dl_wall_time() - 7200;
    t.expires = (uint64_t)dl_wall_time() - 3600;
    CHECK_OK(dl_token_sign(&auth, &t, bin, &n));
    CHECK_OK(dl_token_to_text(bin, n, text));
    CHECK_OK(dl_write_file_atomic(token_path[i], text, strlen(text)));
    dl_authority_clear(&auth);
}

int main(void) {
    procs_init();
    alarm(120);
    if (!mkdtemp(tmpdir)) return 1;
    snprintf(key_path, sizeof key_path, "%s/run.key", tmpdir);
    snprintf(revoked_path, sizeof revoked_path, "%s/revoked.list", tmpdir);
    char pub_path[300];
    snprintf(pub_path, sizeof pub_path, "%s/run.pub", tmpdir);
    CHECK(run_cmd("%s authority init --run-id adm --out %s > %s 2>/dev/null", DEDLOC_BINARY, key_path, pub_path) == 0);
    CHECK_OK(dl_authority_parse_public(pub_path, (uint8_t[DL_AUTHORITY_PK]){0}));
    FILE *f = fopen(pub_path, "r");
    if (!f || !fgets(run_key_hex, sizeof run_key_hex, f)) return 1;
    fclose(f);

    for (int i = 0; i < NUM; i++) {
        struct dl_identity id;
        snprintf(ident_path[i], sizeof ident_path[i], "%s/peer%d.id", tmpdir, i);
        snprintf(log_path[i], sizeof log_path[i], "%s/peer%d.log", tmpdir, i);
        CHECK_OK(dl_identity_load(ident_path[i], &id));
        snprintf(ids[i], sizeof ids[i], "%s", id.peer_id);
    }
    for (int i = 0; i < NUM; i++) {
        if (i == C_NO_TOKEN) continue;
        snprintf(token_path[i], sizeof token_path[i], "%s/peer%d.token", tmpdir, i);
        if (i == D_EXPIRED) continue;
        /* E holds a valid token, but it names B */
        const char *for_id = i == E_OTHER_ID ? ids[B] : ids[i];
        /* G's token runs out a few seconds after it joined */
        CHECK(run_cmd("%s authority issue --key %s --peer %s --expires %s --name peer%d > %s", DEDLOC_BINARY,
                      key_path, for_id, i == G_SHORT ? "12s" : "1d", i, token_path[i]) == 0);
    }
    write_expired_token(D_EXPIRED);
    /* The list exists from the start (revoking someone else). */
    CHECK(run_cmd("%s authority revoke --key %s --peer %s --out %s 2>/dev/null", DEDLOC_BINARY, key_path,
                  "0123456789abcdef0123456789abcdef", revoked_path) == 0);

    /* Members form a swarm. */
    spawn(A, NULL);
    CHECK(proc_wait_first_line(&procs[A], 20));
    char initial[64];
    snprintf(initial, sizeof initial, "%s", procs[A].listen);
    spawn(B, initial);
    spawn(F, initial);
    spawn(G_SHORT, initial);
    struct expect_view four = {4, 0, 0};
    CHECK_MSG(procs_wait_views(procs, G_SHORT + 1, &four, 30), "the members did not form a swarm");

    /* Outsiders are refused, each told why. */
    spawn(C_NO_TOKEN, initial);
    spawn(D_EXPIRED, initial);
    spawn(E_OTHER_ID, initial);
    CHECK(wait_log(C_NO_TOKEN, "refused us: not admitted: no token", 20));
    CHECK(wait_log(D_EXPIRED, "refused us: not admitted: token expired", 20));
    CHECK(wait_log(E_OTHER_ID, "refused us: not admitted: token for another peer id", 20));
    CHECK(wait_log(D_EXPIRED, "will be refused: token expired", 1)); /* warned at start */
    CHECK(wait_log(A, "not admitted: no token", 5));
    for (int i = C_NO_TOKEN; i < NUM; i++) {
        proc_pump(&procs[i]);
        CHECK_MSG(json_num(procs[i].last, "num_peers") == 1, "outsider %d sees %g peers", i,
                  json_num(procs[i].last, "num_peers"));
        for (int m = A; m <= G_SHORT; m++) CHECK(!json_peers_contain(procs[m].last, ids[i]));
    }

    /* G's token runs out: every member drops it. */
    CHECK(wait_log(G_SHORT, "refused us: not admitted: token expired during the connection", 20));
    struct expect_view three = {3, 0, 0};
    CHECK_MSG(procs_wait_views(procs, F + 1, &three, 20), "the expired member is still in the view");

    /* A member revoked while connected is disconnected and stays out. */
    CHECK(run_cmd("%s authority revoke --key %s --peer %s --out %s 2>/dev/null", DEDLOC_BINARY, key_path, ids[F],
                  revoked_path) == 0);
    CHECK(wait_log(F, "not admitted: revoked", 20));
    CHECK(wait_log(B, "put in force (2 peers revoked)", 20)); /* gossiped by A */
    struct expect_view two = {2, 0, 0};
    CHECK_MSG(procs_wait_views(procs, B + 1, &two, 20), "the revoked member is still in the view");
    CHECK(!json_peers_contain(procs[A].last, ids[F]) && !json_peers_contain(procs[B].last, ids[F]));

    for (int i = 0; i < NUM; i++) proc_stop(&procs[i], SIGTERM);
    if (!dl_test_failed && !getenv("DEDLOC_KEEP_LOGS")) run_cmd("rm -rf %s", tmpdir);
    else fprintf(stderr, "logs kept in %s\n", tmpdir);
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
