/* Invites (docs/protocol.md, "Invites"): the invite file, redeeming a code
 * (unknown, malformed, expired, used up, the same peer again), the count
 * kept across a reload, and the delegated tokens an invite signs: admitted
 * by a peer that holds only the authority's public key, refused when any
 * part of the chain is altered or goes beyond what the delegation grants. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/delegation.h"
#include "net/trust.h"

static char tmpdir[256];
static const char PEER_A[] = "00112233445566778899aabbccddeeff";
static const char PEER_B[] = "ffeeddccbbaa99887766554433221100";
static const char PEER_C[] = "0123456789abcdef0123456789abcdef";

static void path_in_tmp(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* Decodes a token's text form and checks it as a peer of a's run would. */
static int admits(const struct dl_authority *a, const char *text, const char *peer, double now, struct dl_token *t) {
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n;
    if (dl_token_from_text(text, bin, &n) || dl_token_decode(bin, n, t)) return -1;
    return dl_token_check(t, a->pk, a->run_id, peer, now);
}

static int error_has(const char *needle) { return strstr(dl_error(), needle) != NULL; }

static void test_invite_file(const struct dl_authority *a) {
    char path[300], code[DL_INVITE_CODE_MAX], code2[DL_INVITE_CODE_MAX];
    path_in_tmp(path, sizeof path, "one.invite");
    CHECK_OK(dl_invite_create(a, path, DL_ROLE_TRAINER, 2, 3600, 86400, code));
    CHECK(!strncmp(code, "dli1.", 5) && strlen(code) == 5 + 22);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    /* never overwritten; a second invite has another code */
    CHECK(dl_invite_create(a, path, DL_ROLE_TRAINER, 2, 3600, 86400, code2) != 0 && error_has("never overwritten"));
    char path2[300];
    path_in_tmp(path2, sizeof path2, "two.invite");
    CHECK_OK(dl_invite_create(a, path2, DL_ROLE_TRAINER, 2, 3600, 86400, code2));
    CHECK(strcmp(code, code2) != 0);
    CHECK(dl_invite_create(a, path2, DL_ROLE_TRAINER, 0, 3600, 86400, code2) != 0);

    dl_invite *inv;
    CHECK_OK(dl_invite_load(path, &inv));
    if (!inv) return;
    CHECK(!memcmp(dl_invite_authority(inv), a->pk, 32) && !strcmp(dl_invite_run_id(inv), a->run_id));
    double now = dl_wall_time();
    char token[DL_TOKEN_TEXT_MAX];
    CHECK(dl_invite_redeem(inv, "hello", PEER_A, now, token) != 0 && error_has("not an invite code"));
    CHECK(dl_invite_redeem(inv, "dli1.AAAA", PEER_A, now, token) != 0 && error_has("not an invite code"));
    CHECK(dl_invite_redeem(inv, code2, PEER_A, now, token) != 0 && error_has("unknown invite code"));

    /* A's token: bound to A, a trainer's, valid a day, admitted with the
     * authority's public key alone. */
    CHECK_OK(dl_invite_redeem(inv, code, PEER_A, now, token));
    struct dl_token t;
    CHECK_OK(admits(a, token, PEER_A, now, &t));
    CHECK(t.delegated && t.role == DL_ROLE_TRAINER && t.expires == (uint64_t)now + 86400);
    CHECK(admits(a, token, PEER_B, now, &t) != 0 && error_has("another peer id"));
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    char pk_hex[DL_AUTHORITY_PK_HEX];
    dl_authority_public_hex(a->pk, pk_hex);
    cfg.run_key = pk_hex;
    struct dl_trust trust;
    CHECK_OK(dl_trust_init(&trust, &cfg, a->run_id, PEER_C, now));
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    CHECK_OK(dl_token_from_text(token, bin, &n));
    enum dl_role role;
    double until;
    CHECK_OK(dl_trust_admit(&trust, a->run_id, PEER_A, bin, n, now, &role, &until));
    CHECK(role == DL_ROLE_TRAINER && until == (double)t.expires);
    dl_trust_free(&trust);

    /* A again takes no second place; B takes the last one; C finds none. */
    CHECK_OK(dl_invite_redeem(inv, code, PEER_A, now, token));
    CHECK_OK(dl_invite_redeem(inv, code, PEER_B, now, token));
    CHECK(dl_invite_redeem(inv, code, PEER_C, now, token) != 0 && error_has("used up (2 of 2"));
    dl_invite_free(inv);

    /* The count survives a restart (the file of uses), and so does A's place. */
    CHECK_OK(dl_invite_load(path, &inv));
    if (!inv) return;
    CHECK(dl_invite_redeem(inv, code, PEER_C, now, token) != 0 && error_has("used up"));
    CHECK_OK(dl_invite_redeem(inv, code, PEER_B, now, token));
    /* Past its end: refused, even to a peer that redeemed it before. */
    CHECK(dl_invite_redeem(inv, code, PEER_A, now + 3601, token) != 0 && error_has("expired at"));
    dl_invite_free(inv);

    /* A damaged record of uses is an error, not a fresh count. */
    char used[320];
    snprintf(used, sizeof used, "%s.used", path);
    FILE *f = fopen(used, "a");
    if (f) {
        fputs("not a peer id\n", f);
        fclose(f);
    }
    CHECK(dl_invite_load(path, &inv) != 0 && error_has("damaged"));
    /* A file that is not an invite */
    CHECK(dl_invite_load(used, &inv) != 0 && error_has("not a dedloc invite file"));
}

/* Delegated tokens built by hand: each overreach is refused. */
static void test_delegated_tokens(const struct dl_authority *a, const struct dl_authority *other) {
    uint8_t dpk[32], dsk[64], d[DL_DELEGATION_BYTES];
    crypto_sign_keypair(dpk, dsk);
    CHECK_OK(dl_delegation_sign(a, dpk, DL_ROLE_TRAINER, 5000, d));
    enum dl_role role;
    uint64_t until;
    CHECK_OK(dl_delegation_verify(d, a->run_id, &role, &until));
    CHECK(role == DL_ROLE_TRAINER && until == 5000);
    CHECK(dl_delegation_verify(d, "another-run", &role, &until) != 0);

    struct dl_token t, got;
    memset(&t, 0, sizeof t);
    snprintf(t.run_id, sizeof t.run_id, "%s", a->run_id);
    snprintf(t.peer_id, sizeof t.peer_id, "%s", PEER_A);
    t.role = DL_ROLE_TRAINER;
    t.issued = 1000;
    t.expires = 5000;
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n = 0;
    CHECK_OK(dl_token_sign_delegated(d, dsk, &t, bin, &n));
    CHECK(n <= DL_TOKEN_MAX_BYTES && !memcmp(bin, "DLT2", 4));
    CHECK_OK(dl_token_decode(bin, n, &got));
    CHECK(got.delegated && !memcmp(got.authority_pk, a->pk, 32) && !strcmp(got.peer_id, PEER_A));
    CHECK_OK(dl_token_check(&got, a->pk, a->run_id, PEER_A, 4999));
    CHECK(dl_token_check(&got, other->pk, a->run_id, PEER_A, 4999) != 0);
    /* the authority named whole, as `authority init` prints it */
    char a_hex[DL_AUTHORITY_PK_HEX];
    dl_authority_public_hex(a->pk, a_hex);
    CHECK_MSG(error_has(a_hex), "the refusal names the authority otherwise: %s", dl_error());
    /* the longest token fits the documented bound and the text form */
    char text[DL_TOKEN_TEXT_MAX];
    memset(t.run_id, 'r', DL_TOKEN_RUN_ID_MAX - 1);
    memset(t.name, 'n', DL_TOKEN_NAME_MAX - 1);
    uint8_t long_bin[DL_TOKEN_MAX_BYTES];
    size_t long_n = 0;
    CHECK_OK(dl_token_sign_delegated(d, dsk, &t, long_bin, &long_n));
    CHECK_OK(dl_token_to_text(long_bin, long_n, text));
    snprintf(t.run_id, sizeof t.run_id, "%s", a->run_id);
    t.name[0] = 0;

    /* every byte of the delegation and of the token is covered */
    for (size_t i = 4; i < n; i++) {
        bin[i] ^= 0x01;
        int rc = dl_token_decode(bin, n, &got);
        bin[i] ^= 0x01;
        CHECK_MSG(rc != 0, "a delegated token with byte %zu altered decodes", i);
    }
    /* beyond what the delegation grants: another role, a later expiry, another
     * run, a key the delegation does not name */
    t.role = DL_ROLE_AUX;
    CHECK_OK(dl_token_sign_delegated(d, dsk, &t, bin, &n));
    CHECK(dl_token_decode(bin, n, &got) != 0 && error_has("role"));
    t.role = DL_ROLE_TRAINER;
    t.expires = 5001;
    CHECK_OK(dl_token_sign_delegated(d, dsk, &t, bin, &n));
    CHECK(dl_token_decode(bin, n, &got) != 0 && error_has("past the end"));
    t.expires = 5000;
    snprintf(t.run_id, sizeof t.run_id, "another-run");
    CHECK_OK(dl_token_sign_delegated(d, dsk, &t, bin, &n));
    CHECK(dl_token_decode(bin, n, &got) != 0 && error_has("delegation"));
    snprintf(t.run_id, sizeof t.run_id, "%s", a->run_id);
    uint8_t xpk[32], xsk[64];
    crypto_sign_keypair(xpk, xsk);
    CHECK_OK(dl_token_sign_delegated(d, xsk, &t, bin, &n));
    CHECK(dl_token_decode(bin, n, &got) != 0 && error_has("signature does not match"));
    /* a delegation another authority signed while naming ours */
    uint8_t forged[DL_DELEGATION_BYTES];
    CHECK_OK(dl_delegation_sign(other, dpk, DL_ROLE_TRAINER, 5000, forged));
    memcpy(forged, a->pk, 32);
    CHECK(dl_delegation_verify(forged, a->run_id, &role, &until) != 0);
}

int main(void) {
    CHECK(sodium_init() >= 0);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dedloc-invite-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    char key[300], key2[300];
    path_in_tmp(key, sizeof key, "run.key");
    path_in_tmp(key2, sizeof key2, "other.key");
    struct dl_authority a, other;
    CHECK_OK(dl_authority_create(key, "run-inv", &a));
    CHECK_OK(dl_authority_create(key2, "run-inv", &other));
    test_invite_file(&a);
    test_delegated_tokens(&a, &other);
    dl_authority_clear(&a);
    dl_authority_clear(&other);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
    return dl_test_finish("net_invite");
}
