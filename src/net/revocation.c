/* The authority's signed revocation list (docs/protocol.md, "Admission").
 *
 * Binary form: "DLR1" | authority pk (32) | serial (u64 BE) | run id length (1) |
 * run id | count (u32 BE) | count raw peer ids (16 each) | ed25519 signature
 * (64) over "dedloc-revocations-v1\0" || everything before it.
 * The file holds "dlr1." followed by the URL-safe base64 of those bytes. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/net.h"
#include "dedloc/util.h"

static const char REVOCATION_CONTEXT[] = "dedloc-revocations-v1";
static const char REVOCATION_TEXT_PREFIX[] = "dlr1.";
#define MAX_REVOKED 100000
#define SIG_BYTES crypto_sign_BYTES
#define ID_BYTES 16

static void put_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static void revocation_message(const uint8_t *body, size_t n, crypto_sign_state *st) {
    crypto_sign_init(st);
    crypto_sign_update(st, (const uint8_t *)REVOCATION_CONTEXT, sizeof REVOCATION_CONTEXT);
    crypto_sign_update(st, body, n);
}

static int peer_id_bytes(const char *peer_id, uint8_t out[ID_BYTES]) {
    size_t got = 0;
    const char *end = NULL;
    size_t len = strlen(peer_id);
    if (len != 2 * ID_BYTES || sodium_hex2bin(out, ID_BYTES, peer_id, len, NULL, &got, &end) ||
        got != ID_BYTES || end != peer_id + len)
        return dl_fail("peer id '%s' is not 32 hex digits", peer_id);
    return 0;
}

int dl_revocations_peek(const uint8_t *bin, size_t size, uint8_t authority_pk[DL_AUTHORITY_PK],
                        char run_id[DL_TOKEN_RUN_ID_MAX], uint64_t *serial) {
    size_t fixed = 4 + DL_AUTHORITY_PK + 8 + 1;
    if (size < fixed || memcmp(bin, "DLR1", 4)) return dl_fail("not a dedloc revocation list");
    size_t run_len = bin[fixed - 1];
    if (run_len >= DL_TOKEN_RUN_ID_MAX || fixed + run_len > size) return dl_fail("revocation list: bad run id length");
    memcpy(authority_pk, bin + 4, DL_AUTHORITY_PK);
    memcpy(run_id, bin + fixed, run_len);
    run_id[run_len] = 0;
    *serial = get_be(bin + 4 + DL_AUTHORITY_PK, 8);
    return 0;
}

int dl_revocations_decode(const uint8_t *bin, size_t size, struct dl_revocations *r) {
    memset(r, 0, sizeof *r);
    size_t fixed = 4 + DL_AUTHORITY_PK + 8 + 1;
    if (size < fixed + 1 + 4 + SIG_BYTES || memcmp(bin, "DLR1", 4))
        return dl_fail("not a dedloc revocation list");
    size_t body = size - SIG_BYTES;
    size_t run_len = bin[fixed - 1];
    if (run_len == 0 || run_len >= DL_TOKEN_RUN_ID_MAX || fixed + run_len + 4 > body)
        return dl_fail("revocation list: bad run id length");
    const uint8_t *run = bin + fixed;
    if (memchr(run, 0, run_len)) return dl_fail("revocation list: NUL in the run id");
    uint64_t count = get_be(bin + fixed + run_len, 4);
    size_t ids_at = fixed + run_len + 4;
    if (count > MAX_REVOKED || ids_at + count * ID_BYTES != body)
        return dl_fail("revocation list: %llu ids do not fit its size", (unsigned long long)count);
    crypto_sign_state st;
    revocation_message(bin, body, &st);
    if (crypto_sign_final_verify(&st, bin + body, bin + 4))
        return dl_fail("revocation list: signature does not match (forged or altered)");
    r->ids = dl_malloc(count ? count * ID_BYTES : 1);
    if (!r->ids) return -1;
    memcpy(r->ids, bin + ids_at, count * ID_BYTES);
    memcpy(r->authority_pk, bin + 4, DL_AUTHORITY_PK);
    r->serial = get_be(bin + 4 + DL_AUTHORITY_PK, 8);
    memcpy(r->run_id, run, run_len);
    r->count = (size_t)count;
    return 0;
}

int dl_revocations_read_file(const char *path, uint8_t **bin, size_t *bin_size) {
    *bin = NULL;
    *bin_size = 0;
    char *text;
    size_t size;
    size_t prefix = sizeof REVOCATION_TEXT_PREFIX - 1;
    if (dl_read_file(path, 4 * MAX_REVOKED * ID_BYTES, &text, &size)) return dl_fail_context("revocation list");
    size_t len = size;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    uint8_t *out = len >= prefix && !memcmp(text, REVOCATION_TEXT_PREFIX, prefix) ? dl_malloc(len + 1) : NULL;
    const char *end = NULL;
    int rc = !out || sodium_base642bin(out, len + 1, text + prefix, len - prefix, NULL, bin_size, &end,
                                       sodium_base64_VARIANT_URLSAFE_NO_PADDING) ||
             end != text + len;
    free(text);
    if (rc) {
        free(out);
        return dl_fail("%s is not a dedloc revocation list", path);
    }
    *bin = out;
    return 0;
}

int dl_revocations_load(const char *path, const uint8_t *authority_pk, struct dl_revocations *r) {
    memset(r, 0, sizeof *r);
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    uint8_t *bin;
    size_t bin_size;
    if (dl_revocations_read_file(path, &bin, &bin_size)) return -1;
    int rc = dl_revocations_decode(bin, bin_size, r);
    free(bin);
    if (rc) return dl_fail_context("%s", path);
    if (authority_pk && sodium_memcmp(authority_pk, r->authority_pk, DL_AUTHORITY_PK)) {
        dl_revocations_free(r);
        return dl_fail("revocation list %s was signed by another authority", path);
    }
    return 0;
}

bool dl_revocations_contains(const struct dl_revocations *r, const char *peer_id) {
    uint8_t id[ID_BYTES];
    if (!r || peer_id_bytes(peer_id, id)) return false;
    for (size_t i = 0; i < r->count; i++)
        if (!memcmp(r->ids[i], id, ID_BYTES)) return true;
    return false;
}

void dl_revocations_free(struct dl_revocations *r) {
    free(r->ids);
    memset(r, 0, sizeof *r);
}

static int write_list(const struct dl_authority *a, const char *path, uint64_t serial,
                      const uint8_t (*ids)[ID_BYTES], size_t count) {
    size_t run_len = strlen(a->run_id);
    size_t body = 4 + DL_AUTHORITY_PK + 8 + 1 + run_len + 4 + count * ID_BYTES;
    uint8_t *bin = dl_malloc(body + SIG_BYTES);
    if (!bin) return -1;
    size_t n = 0;
    memcpy(bin, "DLR1", 4); /* NOLINT(bugprone-not-null-terminated-result): 4 magic bytes, no string */
    n += 4;
    memcpy(bin + n, a->pk, DL_AUTHORITY_PK);
    n += DL_AUTHORITY_PK;
    put_be(bin + n, serial, 8);
    n += 8;
    bin[n++] = (uint8_t)run_len;
    memcpy(bin + n, a->run_id, run_len);
    n += run_len;
    put_be(bin + n, count, 4);
    n += 4;
    if (count) memcpy(bin + n, ids, count * ID_BYTES);
    n += count * ID_BYTES;
    crypto_sign_state st;
    revocation_message(bin, n, &st);
    crypto_sign_final_create(&st, bin + n, NULL, a->sk);
    int variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
    size_t prefix = sizeof REVOCATION_TEXT_PREFIX - 1;
    size_t text_cap = prefix + sodium_base64_encoded_len(n + SIG_BYTES, variant) + 1;
    char *text = dl_malloc(text_cap);
    int rc = -1;
    if (text) {
        memcpy(text, REVOCATION_TEXT_PREFIX, prefix);
        sodium_bin2base64(text + prefix, text_cap - prefix, bin, n + SIG_BYTES, variant);
        size_t len = strlen(text);
        text[len++] = '\n';
        rc = dl_write_file_atomic(path, text, len);
    }
    free(text);
    free(bin);
    return rc;
}

int dl_revocations_add(const struct dl_authority *a, const char *path, const char *peer_id) {
    if (!a || !path || !peer_id) return dl_fail("revocation: an authority, a list file and a peer id are needed");
    uint8_t id[ID_BYTES];
    if (peer_id_bytes(peer_id, id)) return -1;
    struct dl_revocations r;
    memset(&r, 0, sizeof r);
    if (dl_file_exists(path)) {
        if (dl_revocations_load(path, a->pk, &r)) return -1;
        if (strcmp(r.run_id, a->run_id)) {
            dl_revocations_free(&r);
            return dl_fail("revocation list %s belongs to run '%s'", path, r.run_id);
        }
    }
    if (dl_revocations_contains(&r, peer_id)) {
        dl_revocations_free(&r);
        return 0;
    }
    if (r.count >= MAX_REVOKED) {
        dl_revocations_free(&r);
        return dl_fail("revocation list %s is full (%d ids): start a new run authority", path, MAX_REVOKED);
    }
    uint8_t(*ids)[ID_BYTES] = dl_realloc(r.ids, (r.count + 1) * ID_BYTES);
    if (!ids) {
        dl_revocations_free(&r);
        return -1;
    }
    r.ids = ids;
    memcpy(r.ids[r.count++], id, ID_BYTES);
    /* The serial is the wall clock in microseconds, or one more than the last:
     * a list edited later always supersedes. */
    uint64_t serial = (uint64_t)(dl_wall_time() * 1e6);
    if (serial <= r.serial) serial = r.serial + 1;
    int rc = write_list(a, path, serial, (const uint8_t(*)[ID_BYTES])r.ids, r.count);
    dl_revocations_free(&r);
    return rc;
}
