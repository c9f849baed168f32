/* Admission tokens and revocation lists: the documented byte layout, the
 * signature, and every refusal (tamper, expiry, other run, other peer, other
 * authority, revoked), plus the authority file's permissions. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/trust.h"

static char tmpdir[256];

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

static const char PEER_A[] = "00112233445566778899aabbccddeeff";
static const char PEER_B[] = "ffeeddccbbaa99887766554433221100";

static void make_token(const struct dl_authority *a, const char *peer, enum dl_role role, uint64_t expires,
                       uint8_t *bin, size_t *n) {
    struct dl_token t;
    memset(&t, 0, sizeof t);
    snprintf(t.run_id, sizeof t.run_id, "%s", a->run_id);
    snprintf(t.peer_id, sizeof t.peer_id, "%s", peer);
    snprintf(t.name, sizeof t.name, "alice");
    t.role = role;
    t.issued = 1000;
    t.expires = expires;
    CHECK_OK(dl_token_sign(a, &t, bin, n));
}

/* The byte layout of docs/protocol.md, built by hand, and the signature
 * checked with libsodium directly. */
static void test_layout(const struct dl_authority *a) {
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    make_token(a, PEER_A, DL_ROLE_AUX, 0x0102030405060708ull, bin, &n);
    uint8_t want[256];
    size_t k = 0;
    memcpy(want, "DLT1", 4), k += 4;
    memcpy(want + k, a->pk, 32), k += 32;
    for (int i = 0; i < 16; i++) want[k++] = (uint8_t)(0x00 + 0x11 * i);
    want[k++] = 2; /* aux */
    const uint8_t issued[8] = {0, 0, 0, 0, 0, 0, 0x03, 0xe8};
    const uint8_t expires[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memcpy(want + k, issued, 8), k += 8;
    memcpy(want + k, expires, 8), k += 8;
    want[k++] = 6;
    memcpy(want + k, "run-xy", 6), k += 6;
    want[k++] = 5;
    memcpy(want + k, "alice", 5), k += 5;
    CHECK(n == k + 64);
    CHECK(n >= k && !memcmp(bin, want, k));
    crypto_sign_state st;
    crypto_sign_init(&st);
    crypto_sign_update(&st, (const uint8_t *)"dedloc-token-v1", 16); /* with its NUL */
    crypto_sign_update(&st, want, k);
    CHECK(crypto_sign_final_verify(&st, bin + k, a->pk) == 0);

    struct dl_token t;
    CHECK_OK(dl_token_decode(bin, n, &t));
    CHECK(!strcmp(t.peer_id, PEER_A) && !strcmp(t.run_id, "run-xy") && !strcmp(t.name, "alice"));
    CHECK(t.role == DL_ROLE_AUX && t.issued == 1000 && t.expires == 0x0102030405060708ull);
    CHECK(!memcmp(t.authority_pk, a->pk, 32));

    /* text form round trip */
    char text[DL_TOKEN_TEXT_MAX];
    uint8_t back[DL_TOKEN_MAX_BYTES];
    size_t back_n = 0;
    CHECK_OK(dl_token_to_text(bin, n, text));
    CHECK(!strncmp(text, "dlt1.", 5));
    char padded[DL_TOKEN_TEXT_MAX + 8];
    snprintf(padded, sizeof padded, "  %s\n", text);
    CHECK_OK(dl_token_from_text(padded, back, &back_n));
    CHECK(back_n == n && !memcmp(back, bin, n));
    CHECK(dl_token_from_text("dlt2.AAAA", back, &back_n) != 0);
    CHECK(dl_token_from_text("dlt1.*notbase64*", back, &back_n) != 0);
}

static void test_tamper(const struct dl_authority *a) {
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    make_token(a, PEER_A, DL_ROLE_TRAINER, 5000, bin, &n);
    int refused = 0;
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            bin[i] ^= (uint8_t)(1 << bit);
            struct dl_token t;
            refused += dl_token_decode(bin, n, &t) != 0;
            bin[i] ^= (uint8_t)(1 << bit);
        }
    CHECK_MSG(refused == (int)n * 3, "%d of %zu altered tokens refused", refused, n * 3);
    struct dl_token t;
    for (size_t cut = 0; cut < n; cut++) CHECK(dl_token_decode(bin, cut, &t) != 0);
    CHECK_OK(dl_token_decode(bin, n, &t));
}

static void test_checks(const struct dl_authority *a, const struct dl_authority *other) {
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    struct dl_token t;
    make_token(a, PEER_A, DL_ROLE_TRAINER, 5000, bin, &n);
    CHECK_OK(dl_token_decode(bin, n, &t));
    CHECK_OK(dl_token_check(&t, a->pk, "run-xy", PEER_A, 4999.5));
    CHECK(dl_token_check(&t, a->pk, "run-xy", PEER_A, 5000) != 0);
    CHECK(strstr(dl_error(), "expired") != NULL);
    CHECK(dl_token_check(&t, a->pk, "run-zz", PEER_A, 10) != 0);
    CHECK(strstr(dl_error(), "another run") != NULL);
    CHECK(dl_token_check(&t, a->pk, "run-xy", PEER_B, 10) != 0);
    CHECK(strstr(dl_error(), "another peer id") != NULL);
    CHECK(dl_token_check(&t, other->pk, "run-xy", PEER_A, 10) != 0);
    CHECK(strstr(dl_error(), "unknown authority") != NULL);
    /* A token signed by another authority that names ours is a forgery. */
    uint8_t forged[DL_TOKEN_MAX_BYTES];
    size_t fn = 0;
    make_token(other, PEER_A, DL_ROLE_TRAINER, 5000, forged, &fn);
    memcpy(forged + 4, a->pk, 32);
    CHECK(dl_token_decode(forged, fn, &t) != 0);

    enum dl_role parsed_role = DL_ROLE_NONE;
    CHECK(dl_role_from_name("monitor", &parsed_role) == 0 && parsed_role == DL_ROLE_MONITOR);
    CHECK(dl_role_from_name("boss", &parsed_role) < 0);
    CHECK(dl_role_may_send_gradients(DL_ROLE_TRAINER) && dl_role_may_send_gradients(DL_ROLE_AUX));
    CHECK(!dl_role_may_send_gradients(DL_ROLE_MONITOR) && !dl_role_may_send_gradients(DL_ROLE_NONE));
}

static void test_authority_file(void) {
    char path[512];
    path_in_tmp(path, sizeof path, "run.key");
    struct dl_authority a, b;
    CHECK_OK(dl_authority_create(path, "run-file", &a));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(dl_authority_create(path, "run-file", &b) != 0); /* never overwritten */
    CHECK_OK(dl_authority_load(path, &b));
    CHECK(!memcmp(a.pk, b.pk, 32) && !memcmp(a.sk, b.sk, 64) && !strcmp(b.run_id, "run-file"));
    chmod(path, 0640);
    CHECK(dl_authority_load(path, &b) != 0 && strstr(dl_error(), "readable by others"));
    chmod(path, 0600);
    /* the public key: hex, or a file holding it */
    char hex[DL_AUTHORITY_PK_HEX], pub[512];
    uint8_t pk[32];
    dl_authority_public_hex(a.pk, hex);
    CHECK_OK(dl_authority_parse_public(hex, pk));
    CHECK(!memcmp(pk, a.pk, 32));
    path_in_tmp(pub, sizeof pub, "run.pub");
    FILE *f = fopen(pub, "w");
    fprintf(f, "%s\n", hex);
    fclose(f);
    memset(pk, 0, sizeof pk);
    CHECK_OK(dl_authority_parse_public(pub, pk));
    CHECK(!memcmp(pk, a.pk, 32));
    hex[10] = 'x';
    CHECK(dl_authority_parse_public(hex, pk) != 0);
    /* a file that is not an authority */
    char bad[512];
    path_in_tmp(bad, sizeof bad, "bad.key");
    f = fopen(bad, "w");
    fprintf(f, "dedloc-authority-v1\n\x05short");
    fclose(f);
    chmod(bad, 0600);
    CHECK(dl_authority_load(bad, &b) != 0);
    dl_authority_clear(&a);
    dl_authority_clear(&b);
}

static void test_revocations(const struct dl_authority *a, const struct dl_authority *other) {
    char path[512];
    path_in_tmp(path, sizeof path, "revoked.list");
    struct dl_revocations r;
    CHECK_OK(dl_revocations_add(a, path, PEER_A));
    CHECK_OK(dl_revocations_load(path, a->pk, &r));
    CHECK(r.count == 1 && dl_revocations_contains(&r, PEER_A) && !dl_revocations_contains(&r, PEER_B));
    CHECK(!strcmp(r.run_id, "run-xy"));
    uint64_t serial1 = r.serial;
    dl_revocations_free(&r);
    CHECK_OK(dl_revocations_add(a, path, PEER_B));
    CHECK_OK(dl_revocations_add(a, path, PEER_A)); /* already there: unchanged */
    CHECK_OK(dl_revocations_load(path, a->pk, &r));
    CHECK(r.count == 2 && dl_revocations_contains(&r, PEER_A) && dl_revocations_contains(&r, PEER_B));
    CHECK(r.serial > serial1);
    dl_revocations_free(&r);
    /* another authority can neither load it as its own nor extend it */
    CHECK(dl_revocations_load(path, other->pk, &r) != 0);
    CHECK(dl_revocations_add(other, path, PEER_A) != 0);
    CHECK(dl_revocations_add(a, path, "nothex") != 0);
    /* a flipped character in the file is refused */
    char *text;
    size_t size;
    CHECK_OK(dl_read_file(path, 1 << 20, &text, &size));
    text[20] = text[20] == 'A' ? 'B' : 'A';
    CHECK_OK(dl_write_file_atomic(path, text, size));
    free(text);
    CHECK(dl_revocations_load(path, a->pk, &r) != 0);
}

/* The admission policy: token, roles, allowlist, revocations, open run. */
static void test_policy(const struct dl_authority *a) {
    char hex[DL_AUTHORITY_PK_HEX], allow[512], revoked[512];
    dl_authority_public_hex(a->pk, hex);
    path_in_tmp(allow, sizeof allow, "allow.txt");
    FILE *f = fopen(allow, "w");
    fprintf(f, "# friends\n  %s  # bob\n\n", PEER_B);
    fclose(f);
    path_in_tmp(revoked, sizeof revoked, "policy.revoked");
    const char PEER_C[] = "0123456789abcdef0123456789abcdef";
    CHECK_OK(dl_revocations_add(a, revoked, PEER_C));

    struct dl_net_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct dl_trust t;
    enum dl_role role;
    double until;
    /* open run: everyone, no role */
    CHECK_OK(dl_trust_init(&t, &cfg, "run-xy", PEER_A, 10));
    CHECK(!t.closed);
    CHECK_OK(dl_trust_admit(&t, "run-xy", PEER_B, NULL, 0, 10, &role, &until));
    CHECK(role == DL_ROLE_NONE && until == 0);
    dl_trust_free(&t);

    cfg.run_key = hex;
    cfg.allow_path = allow;
    cfg.revoked_path = revoked;
    cfg.admit_roles = DL_ROLE_BIT(DL_ROLE_TRAINER) | DL_ROLE_BIT(DL_ROLE_AUX);
    CHECK_OK(dl_trust_init(&t, &cfg, "run-xy", PEER_A, 10));
    CHECK(t.closed && t.have_key && t.num_allowed == 1);
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n;
    make_token(a, PEER_A, DL_ROLE_AUX, 5000, bin, &n);
    CHECK_OK(dl_trust_admit(&t, "run-xy", PEER_A, bin, n, 10, &role, &until));
    CHECK(role == DL_ROLE_AUX && until == 5000);
    CHECK(dl_trust_admit(&t, "run-xy", PEER_A, bin, n, 6000, &role, &until) != 0 && strstr(dl_error(), "expired"));
    CHECK(dl_trust_admit(&t, "run-xy", PEER_A, NULL, 0, 10, &role, &until) != 0 && strstr(dl_error(), "no token"));
    /* on the allowlist: admitted without a token */
    CHECK_OK(dl_trust_admit(&t, "run-xy", PEER_B, NULL, 0, 10, &role, &until));
    /* monitors are not admitted here */
    make_token(a, PEER_A, DL_ROLE_MONITOR, 5000, bin, &n);
    CHECK(dl_trust_admit(&t, "run-xy", PEER_A, bin, n, 10, &role, &until) != 0 && strstr(dl_error(), "role monitor"));
    /* revoked, even with a valid token */
    make_token(a, PEER_C, DL_ROLE_TRAINER, 5000, bin, &n);
    CHECK(dl_trust_admit(&t, "run-xy", PEER_C, bin, n, 10, &role, &until) != 0 && strstr(dl_error(), "revoked"));
    /* a later list is picked up; an unchanged file is not re-read */
    CHECK(!dl_trust_reload(&t, "run-xy"));
    CHECK(!dl_trust_is_revoked(&t, PEER_A));
    usleep(20000);
    CHECK_OK(dl_revocations_add(a, revoked, PEER_A));
    CHECK(dl_trust_reload(&t, "run-xy"));
    CHECK(dl_trust_is_revoked(&t, PEER_A));
    /* lists from peers: an older one is ignored, a newer one put in force,
     * a forged one refused */
    uint8_t *older_bin = NULL, *newer_bin = NULL;
    size_t older_n = 0, newer_n = 0;
    CHECK_OK(dl_revocations_read_file(revoked, &older_bin, &older_n));
    CHECK(dl_trust_offer_revocations(&t, "run-xy", older_bin, older_n) == 0);
    usleep(20000);
    CHECK_OK(dl_revocations_add(a, revoked, PEER_B));
    CHECK_OK(dl_revocations_read_file(revoked, &newer_bin, &newer_n));
    CHECK(!dl_trust_is_revoked(&t, PEER_B));
    newer_bin[newer_n - 1] ^= 1;
    CHECK(dl_trust_offer_revocations(&t, "run-xy", newer_bin, newer_n) < 0 && strstr(dl_error(), "signature"));
    newer_bin[newer_n - 1] ^= 1;
    CHECK(dl_trust_offer_revocations(&t, "run-xy", newer_bin, newer_n) == 1);
    CHECK(dl_trust_is_revoked(&t, PEER_B) && t.revoked_bin_size == newer_n);
    CHECK(dl_trust_offer_revocations(&t, "run-other", newer_bin, newer_n) == 0);
    /* a replayed list (the one in force, an older one even with its
     * signature broken, one for another run) costs no signature check,
     * however often it comes */
    uint64_t checks = t.revocation_checks;
    for (int i = 0; i < 1000; i++) {
        CHECK(dl_trust_offer_revocations(&t, "run-xy", newer_bin, newer_n) == 0);
        CHECK(dl_trust_offer_revocations(&t, "run-xy", older_bin, older_n) == 0);
    }
    /* a newer list, but for another run */
    uint8_t *newest_bin = NULL;
    size_t newest_n = 0;
    usleep(20000);
    CHECK_OK(dl_revocations_add(a, revoked, "fedcba9876543210fedcba9876543210"));
    CHECK_OK(dl_revocations_read_file(revoked, &newest_bin, &newest_n));
    for (int i = 0; i < 1000; i++) CHECK(dl_trust_offer_revocations(&t, "run-other", newest_bin, newest_n) == 0);
    free(newest_bin);
    older_bin[older_n - 1] ^= 1;
    CHECK(dl_trust_offer_revocations(&t, "run-xy", older_bin, older_n) == 0 && strstr(dl_error(), "not newer"));
    CHECK_MSG(t.revocation_checks == checks, "%llu signature checks for 3001 replayed lists",
              (unsigned long long)(t.revocation_checks - checks));
    CHECK(dl_trust_is_revoked(&t, PEER_B) && t.revoked_bin_size == newer_n);
    free(older_bin);
    free(newer_bin);
    dl_trust_free(&t);

    /* allowlist only: a token does not help */
    cfg.run_key = NULL;
    cfg.revoked_path = NULL;
    CHECK_OK(dl_trust_init(&t, &cfg, "run-xy", PEER_A, 10));
    CHECK(dl_trust_admit(&t, "run-xy", PEER_A, bin, n, 10, &role, &until) != 0 && strstr(dl_error(), "allowlist"));
    CHECK_OK(dl_trust_admit(&t, "run-xy", PEER_B, NULL, 0, 10, &role, &until));
    dl_trust_free(&t);
    /* a malformed allowlist is an error at start, naming the line */
    f = fopen(allow, "w");
    fprintf(f, "%s\nnot-a-peer\n", PEER_B);
    fclose(f);
    CHECK(dl_trust_init(&t, &cfg, "run-xy", PEER_A, 10) != 0 && strstr(dl_error(), "line 2"));
}

int main(void) {
    if (sodium_init() < 0) return 1;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dedloc_token_test_%d", (int)getpid());
    mkdir(tmpdir, 0700);
    struct dl_authority a, other;
    memset(&a, 0, sizeof a);
    crypto_sign_keypair(a.pk, a.sk);
    snprintf(a.run_id, sizeof a.run_id, "run-xy");
    other = a;
    crypto_sign_keypair(other.pk, other.sk);
    test_layout(&a);
    test_tamper(&a);
    test_checks(&a, &other);
    test_authority_file();
    test_revocations(&a, &other);
    test_policy(&a);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
