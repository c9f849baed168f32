/* Run authority and admission tokens (docs/protocol.md, "Admission").
 *
 * A token is a short binary body signed by the authority:
 *   "DLT1" | authority pk (32) | peer id (16) | role (1) | issued (u64 BE) |
 *   expires (u64 BE) | run id length (1) | run id | name length (1) | name |
 *   ed25519 signature (64) over "dedloc-token-v1\0" || everything before it.
 * A token issued through an invite ("DLT2") carries, in place of the
 * authority's key, the authority's delegation to the invite's key, which signs
 * it (docs/protocol.md, "Invites").
 * Its text form is "dlt1." followed by the URL-safe base64 of those bytes. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "net/delegation.h"

static const char TOKEN_CONTEXT[] = "dedloc-token-v1";
static const char TOKEN_TEXT_PREFIX[] = "dlt1.";
#define AUTHORITY_MAGIC "dedloc-authority-v1\n"
#define SIG_BYTES crypto_sign_BYTES

static const char *const ROLE_NAMES[] = {
    [DL_ROLE_NONE] = "none", [DL_ROLE_TRAINER] = "trainer", [DL_ROLE_AUX] = "aux", [DL_ROLE_MONITOR] = "monitor",
};
_Static_assert(sizeof ROLE_NAMES / sizeof ROLE_NAMES[0] == DL_ROLE_COUNT, "a role without its name");

const char *dl_role_name(enum dl_role role) {
    /* unsigned: a negative value cast in from an int is out of range too */
    return (unsigned)role < DL_ROLE_COUNT ? ROLE_NAMES[role] : "unknown";
}

int dl_role_from_name(const char *name, enum dl_role *role) {
    for (unsigned r = DL_ROLE_TRAINER; r < DL_ROLE_COUNT; r++)
        if (name && !strcmp(name, ROLE_NAMES[r])) {
            *role = (enum dl_role)r;
            return 0;
        }
    return dl_fail("unknown role '%s' (trainer, aux or monitor)", name ? name : "(null)");
}

bool dl_role_may_send_gradients(enum dl_role role) { return role == DL_ROLE_TRAINER || role == DL_ROLE_AUX; }

/* ---- authority key file ----------------------------------------------------
 * "dedloc-authority-v1\n" | run id length (1) | run id | seed (32). */

int dl_authority_create(const char *path, const char *run_id, struct dl_authority *a) {
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    size_t run_len = strlen(run_id);
    if (run_len == 0 || run_len >= DL_TOKEN_RUN_ID_MAX)
        return dl_fail("run id must be 1..%d bytes", DL_TOKEN_RUN_ID_MAX - 1);
    memset(a, 0, sizeof *a);
    crypto_sign_keypair(a->pk, a->sk);
    memcpy(a->run_id, run_id, run_len);
    uint8_t file[sizeof AUTHORITY_MAGIC - 1 + 1 + DL_TOKEN_RUN_ID_MAX + crypto_sign_SEEDBYTES];
    size_t n = 0;
    memcpy(file, AUTHORITY_MAGIC, sizeof AUTHORITY_MAGIC - 1);
    n += sizeof AUTHORITY_MAGIC - 1;
    file[n++] = (uint8_t)run_len;
    memcpy(file + n, run_id, run_len); /* NOLINT(bugprone-not-null-terminated-result): length-prefixed bytes */
    n += run_len;
    crypto_sign_ed25519_sk_to_seed(file + n, a->sk);
    n += crypto_sign_SEEDBYTES;
    /* O_EXCL with mode 0600: never overwrite an authority, never expose it. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        sodium_memzero(file, sizeof file);
        return dl_fail("cannot create authority file %s: %s%s", path, strerror(errno),
                       errno == EEXIST ? " (an authority is never overwritten; choose another name)" : "");
    }
    ssize_t w = write(fd, file, n);
    int sync_rc = fsync(fd);
    close(fd);
    sodium_memzero(file, sizeof file);
    if (w != (ssize_t)n || sync_rc) {
        unlink(path);
        return dl_fail("cannot write authority file %s", path);
    }
    return 0;
}

int dl_authority_load(const char *path, struct dl_authority *a) {
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    memset(a, 0, sizeof *a);
    struct stat st;
    if (stat(path, &st)) return dl_fail("cannot open authority file %s: %s", path, strerror(errno));
    if (st.st_mode & 077)
        return dl_fail("authority file %s is readable by others (mode %03o); chmod 600 it", path,
                       (unsigned)(st.st_mode & 0777));
    char *data;
    size_t size;
    if (dl_read_file(path, 4096, &data, &size)) return dl_fail_context("authority");
    const uint8_t *p = (const uint8_t *)data;
    size_t magic = sizeof AUTHORITY_MAGIC - 1;
    int ok = size > magic && !memcmp(p, AUTHORITY_MAGIC, magic);
    size_t run_len = ok ? p[magic] : 0;
    ok = ok && run_len > 0 && run_len < DL_TOKEN_RUN_ID_MAX &&
         size == magic + 1 + run_len + crypto_sign_SEEDBYTES && !memchr(p + magic + 1, 0, run_len);
    if (ok) {
        memcpy(a->run_id, p + magic + 1, run_len);
        crypto_sign_seed_keypair(a->pk, a->sk, p + magic + 1 + run_len);
    }
    sodium_memzero(data, size);
    free(data);
    if (!ok) return dl_fail("%s is not a dedloc authority file", path);
    return 0;
}

void dl_authority_clear(struct dl_authority *a) { sodium_memzero(a, sizeof *a); }

void dl_authority_public_hex(const uint8_t pk[DL_AUTHORITY_PK], char out[DL_AUTHORITY_PK_HEX]) {
    sodium_bin2hex(out, DL_AUTHORITY_PK_HEX, pk, DL_AUTHORITY_PK);
}

static int parse_hex_exact(const char *text, size_t text_len, uint8_t *out, size_t n) {
    size_t got = 0;
    const char *end = NULL;
    if (text_len != 2 * n) return -1;
    if (sodium_hex2bin(out, n, text, text_len, NULL, &got, &end) || got != n || end != text + text_len)
        return -1;
    return 0;
}

int dl_authority_parse_public(const char *text, uint8_t pk[DL_AUTHORITY_PK]) {
    if (!parse_hex_exact(text, strlen(text), pk, DL_AUTHORITY_PK)) return 0;
    char *data;
    size_t size;
    if (!dl_file_exists(text))
        return dl_fail("run key '%s' is neither 64 hex digits nor a readable file", text);
    if (dl_read_file(text, 4096, &data, &size)) return dl_fail_context("run key");
    size_t len = 0;
    while (len < size && data[len] != '\n' && data[len] != '\r') len++;
    int rc = parse_hex_exact(data, len, pk, DL_AUTHORITY_PK);
    free(data);
    if (rc) return dl_fail("run key file %s does not start with 64 hex digits", text);
    return 0;
}

/* ---- tokens ------------------------------------------------------------------ */

static void put_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static void token_message(const uint8_t *body, size_t n, crypto_sign_state *st) {
    crypto_sign_init(st);
    crypto_sign_update(st, (const uint8_t *)TOKEN_CONTEXT, sizeof TOKEN_CONTEXT);
    crypto_sign_update(st, body, n);
}

/* The fields after the signer's part (the authority's key, or a delegation):
 * peer id, role, issued, expires, run id, name. Returns the bytes written. */
static int token_tail(const struct dl_token *t, uint8_t *out, size_t *n) {
    size_t run_len = strlen(t->run_id), name_len = strlen(t->name);
    if (run_len == 0 || run_len >= DL_TOKEN_RUN_ID_MAX) return dl_fail("token: bad run id length");
    if (name_len >= DL_TOKEN_NAME_MAX) return dl_fail("token: name longer than %d bytes", DL_TOKEN_NAME_MAX - 1);
    if (t->role < DL_ROLE_TRAINER || t->role >= DL_ROLE_COUNT) return dl_fail("token: bad role");
    uint8_t id[16];
    if (parse_hex_exact(t->peer_id, strlen(t->peer_id), id, sizeof id))
        return dl_fail("token: peer id '%s' is not 32 hex digits", t->peer_id);
    size_t k = *n;
    memcpy(out + k, id, sizeof id);
    k += sizeof id;
    out[k++] = (uint8_t)t->role;
    put_be64(out + k, t->issued);
    k += 8;
    put_be64(out + k, t->expires);
    k += 8;
    out[k++] = (uint8_t)run_len;
    memcpy(out + k, t->run_id, run_len);
    k += run_len;
    out[k++] = (uint8_t)name_len;
    memcpy(out + k, t->name, name_len);
    k += name_len;
    *n = k;
    return 0;
}

int dl_token_sign(const struct dl_authority *a, const struct dl_token *t, uint8_t *out, size_t *size) {
    size_t n = 0;
    memcpy(out, "DLT1", 4); /* NOLINT(bugprone-not-null-terminated-result): 4 magic bytes, no string */
    n += 4;
    memcpy(out + n, a->pk, DL_AUTHORITY_PK);
    n += DL_AUTHORITY_PK;
    if (token_tail(t, out, &n)) return -1;
    crypto_sign_state st;
    token_message(out, n, &st);
    crypto_sign_final_create(&st, out + n, NULL, a->sk);
    *size = n + SIG_BYTES;
    return 0;
}

/* ---- delegations (docs/protocol.md, "Invites") --------------------------------
 * authority pk (32) | delegate pk (32) | role (1) | until (u64 BE) |
 * signature (64) by the authority over "dedloc-delegation-v1\0" || the 73
 * bytes before it || run id. */
static const char DELEGATION_CONTEXT[] = "dedloc-delegation-v1";
#define DELEGATION_BODY (DL_AUTHORITY_PK + DL_AUTHORITY_PK + 1 + 8)

static void delegation_message(const uint8_t *body, const char *run_id, crypto_sign_state *st) {
    crypto_sign_init(st);
    crypto_sign_update(st, (const uint8_t *)DELEGATION_CONTEXT, sizeof DELEGATION_CONTEXT);
    crypto_sign_update(st, body, DELEGATION_BODY);
    crypto_sign_update(st, (const uint8_t *)run_id, strlen(run_id));
}

int dl_delegation_sign(const struct dl_authority *a, const uint8_t delegate_pk[DL_AUTHORITY_PK], enum dl_role role,
                       uint64_t until, uint8_t out[DL_DELEGATION_BYTES]) {
    if (role < DL_ROLE_TRAINER || role >= DL_ROLE_COUNT) return dl_fail("delegation: bad role");
    memcpy(out, a->pk, DL_AUTHORITY_PK);
    memcpy(out + DL_AUTHORITY_PK, delegate_pk, DL_AUTHORITY_PK);
    out[2 * DL_AUTHORITY_PK] = (uint8_t)role;
    put_be64(out + 2 * DL_AUTHORITY_PK + 1, until);
    crypto_sign_state st;
    delegation_message(out, a->run_id, &st);
    crypto_sign_final_create(&st, out + DELEGATION_BODY, NULL, a->sk);
    return 0;
}

int dl_delegation_verify(const uint8_t d[DL_DELEGATION_BYTES], const char *run_id, enum dl_role *role,
                         uint64_t *until) {
    int r = d[2 * DL_AUTHORITY_PK];
    if (r < DL_ROLE_TRAINER || r >= DL_ROLE_COUNT) return dl_fail("delegation: unknown role %d", r);
    crypto_sign_state st;
    delegation_message(d, run_id, &st);
    if (crypto_sign_final_verify(&st, d + DELEGATION_BODY, d))
        return dl_fail("delegation: not signed by the run authority it names (forged, altered, or another run)");
    *role = (enum dl_role)r;
    *until = get_be64(d + 2 * DL_AUTHORITY_PK + 1);
    return 0;
}

int dl_token_sign_delegated(const uint8_t delegation[DL_DELEGATION_BYTES], const uint8_t delegate_sk[64],
                            const struct dl_token *t, uint8_t *out, size_t *size) {
    size_t n = 0;
    memcpy(out, "DLT2", 4); /* NOLINT(bugprone-not-null-terminated-result): 4 magic bytes, no string */
    n += 4;
    memcpy(out + n, delegation, DL_DELEGATION_BYTES);
    n += DL_DELEGATION_BYTES;
    if (token_tail(t, out, &n)) return -1;
    crypto_sign_state st;
    token_message(out, n, &st);
    crypto_sign_final_create(&st, out + n, NULL, delegate_sk);
    *size = n + SIG_BYTES;
    return 0;
}

int dl_token_decode(const uint8_t *bin, size_t size, struct dl_token *t) {
    memset(t, 0, sizeof *t);
    if (size < 4 || size > DL_TOKEN_MAX_BYTES) return dl_fail("token: %zu bytes is not a token's size", size);
    bool delegated = !memcmp(bin, "DLT2", 4);
    if (!delegated && memcmp(bin, "DLT1", 4)) return dl_fail("token: not a dedloc token (bad magic)");
    /* DLT1: the authority's key, then the fields; DLT2: a delegation (which
     * starts with the authority's key), then the same fields. */
    size_t head = 4 + (delegated ? DL_DELEGATION_BYTES : DL_AUTHORITY_PK);
    size_t fixed = head + 16 + 1 + 8 + 8;
    if (size < fixed + 2 + SIG_BYTES) return dl_fail("token: %zu bytes is not a token's size", size);
    size_t body = size - SIG_BYTES;
    size_t pos = fixed;
    size_t run_len = bin[pos++];
    if (run_len == 0 || run_len >= DL_TOKEN_RUN_ID_MAX || pos + run_len >= body)
        return dl_fail("token: bad run id length");
    const uint8_t *run = bin + pos;
    pos += run_len;
    size_t name_len = bin[pos++];
    if (name_len >= DL_TOKEN_NAME_MAX || pos + name_len != body) return dl_fail("token: bad name length");
    const uint8_t *name = bin + pos;
    if (memchr(run, 0, run_len) || (name_len && memchr(name, 0, name_len)))
        return dl_fail("token: NUL inside a string");
    int role = bin[head + 16];
    if (role < DL_ROLE_TRAINER || role >= DL_ROLE_COUNT) return dl_fail("token: unknown role %d", role);
    uint64_t expires = get_be64(bin + head + 25);
    memcpy(t->run_id, run, run_len);
    const uint8_t *signer = bin + 4;
    if (delegated) {
        /* The delegate may sign tokens of its role that end by its date; the
         * authority's signature of the delegation is checked first, then the
         * delegate's of the token. */
        const uint8_t *d = bin + 4;
        if (d[2 * DL_AUTHORITY_PK] != role) return dl_fail("token: a role its invite does not grant");
        if (expires > get_be64(d + 2 * DL_AUTHORITY_PK + 1))
            return dl_fail("token: valid past the end of its invite's delegation");
        enum dl_role granted;
        uint64_t until;
        if (dl_delegation_verify(d, t->run_id, &granted, &until)) {
            memset(t, 0, sizeof *t);
            return dl_fail_context("token");
        }
        signer = d + DL_AUTHORITY_PK;
    }
    /* The signature last: it is the expensive check. */
    crypto_sign_state st;
    token_message(bin, body, &st);
    if (crypto_sign_final_verify(&st, bin + body, signer)) {
        memset(t, 0, sizeof *t);
        return dl_fail("token: signature does not match (forged or altered token)");
    }
    memcpy(t->authority_pk, bin + 4, DL_AUTHORITY_PK);
    sodium_bin2hex(t->peer_id, sizeof t->peer_id, bin + head, 16);
    t->role = role;
    t->issued = get_be64(bin + head + 17);
    t->expires = expires;
    t->delegated = delegated;
    memcpy(t->name, name, name_len);
    return 0;
}

static void format_utc(uint64_t t, char out[32]) {
    time_t tt = t > (uint64_t)INT32_MAX * 1000 ? (time_t)INT32_MAX * 1000 : (time_t)t;
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, 32, "%llu", (unsigned long long)t);
}

int dl_token_check(const struct dl_token *t, const uint8_t authority_pk[DL_AUTHORITY_PK],
                   const char *run_id, const char *peer_id, double now) {
    if (sodium_memcmp(t->authority_pk, authority_pk, DL_AUTHORITY_PK)) {
        char hex[DL_AUTHORITY_PK_HEX];
        dl_authority_public_hex(t->authority_pk, hex);
        return dl_fail("token from an unknown authority (%s)", hex);
    }
    if (strcmp(t->run_id, run_id)) return dl_fail("token for another run ('%s', not '%s')", t->run_id, run_id);
    if (strcmp(t->peer_id, peer_id)) return dl_fail("token for another peer id (%s, not %s)", t->peer_id, peer_id);
    if (now >= (double)t->expires) {
        char when[32];
        format_utc(t->expires, when);
        return dl_fail("token expired at %s", when);
    }
    return 0;
}

int dl_token_to_text(const uint8_t *bin, size_t size, char out[DL_TOKEN_TEXT_MAX]) {
    size_t prefix = sizeof TOKEN_TEXT_PREFIX - 1;
    int variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
    if (size > DL_TOKEN_MAX_BYTES || prefix + sodium_base64_encoded_len(size, variant) > DL_TOKEN_TEXT_MAX)
        return dl_fail("token too long");
    memcpy(out, TOKEN_TEXT_PREFIX, prefix);
    sodium_bin2base64(out + prefix, DL_TOKEN_TEXT_MAX - prefix, bin, size, variant);
    return 0;
}

int dl_token_from_text(const char *text, uint8_t *out, size_t *size) {
    while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r') text++;
    size_t prefix = sizeof TOKEN_TEXT_PREFIX - 1;
    if (strncmp(text, TOKEN_TEXT_PREFIX, prefix)) return dl_fail("not a dedloc token (it starts with 'dlt1.')");
    const char *b64 = text + prefix;
    size_t len = 0;
    while (b64[len] && b64[len] != '\n' && b64[len] != '\r' && b64[len] != ' ') len++;
    const char *end = NULL;
    if (sodium_base642bin(out, DL_TOKEN_MAX_BYTES, b64, len, NULL, size, &end,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) ||
        end != b64 + len)
        return dl_fail("token: bad base64");
    return 0;
}
