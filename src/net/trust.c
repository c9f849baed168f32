/* Admission policy: run key, our token, allowlist, revocations. */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dedloc/util.h"
#include "net/trust.h"

static int hex_id(const char *text, size_t len, uint8_t out[16]) {
    size_t got = 0;
    const char *end = NULL;
    if (len != 32 || sodium_hex2bin(out, 16, text, len, NULL, &got, &end) || got != 16 || end != text + len)
        return -1;
    return 0;
}

/* One peer id per line; blank lines and '#' comments are skipped. */
static int load_allowlist(struct dl_trust *t, const char *path) {
    char *data;
    size_t size;
    if (dl_read_file(path, 16u << 20, &data, &size)) return dl_fail_context("allowlist");
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    t->allowed = dl_calloc(lines, 16);
    if (!t->allowed) {
        free(data);
        return -1;
    }
    size_t pos = 0, line_no = 0;
    int rc = 0;
    while (pos < size && !rc) {
        size_t eol = pos;
        while (eol < size && data[eol] != '\n') eol++;
        line_no++;
        size_t a = pos, b = eol;
        while (a < b && (data[a] == ' ' || data[a] == '\t')) a++;
        for (size_t k = a; k < b; k++)
            if (data[k] == '#') b = k;
        while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\r')) b--;
        if (b > a) {
            if (hex_id(data + a, b - a, t->allowed[t->num_allowed]))
                rc = dl_fail("allowlist %s line %zu: '%.*s' is not a peer id (32 hex digits)", path, line_no,
                             (int)(b - a < 40 ? b - a : 40), data + a);
            else t->num_allowed++;
        }
        pos = eol + 1;
    }
    free(data);
    return rc;
}

static int load_my_token(struct dl_trust *t, const char *path, const char *run_id, const char *my_peer_id,
                         double now) {
    char *text;
    size_t size;
    if (dl_read_file(path, 4096, &text, &size)) return dl_fail_context("token");
    int rc = dl_token_from_text(text, t->my_token, &t->my_token_size);
    free(text);
    struct dl_token tok;
    if (rc || dl_token_decode(t->my_token, t->my_token_size, &tok)) return dl_fail_context("token %s", path);
    /* A token that cannot admit us is still presented (peers will say why
     * they refuse it), but the user hears about it now. */
    const uint8_t *pk = t->have_key ? t->authority_pk : tok.authority_pk;
    if (dl_token_check(&tok, pk, run_id, my_peer_id, now))
        DL_WARN("net", "our token %s will be refused: %s%s", path, dl_error(),
                strcmp(tok.peer_id, my_peer_id) ? " (start with the --identity it was issued for)" : "");
    else t->my_token_expires = tok.expires; /* warned again when it runs out */
    return 0;
}

static bool stat_revoked(const struct dl_trust *t, struct stat *st) {
    return stat(t->revoked_path, st) == 0;
}

int dl_trust_init(struct dl_trust *t, const struct dl_net_config *config, const char *run_id,
                  const char *my_peer_id, double now) {
    memset(t, 0, sizeof *t);
    t->admit_roles = config->admit_roles ? config->admit_roles : DL_ROLES_ALL;
    if (config->run_key && *config->run_key) {
        if (dl_authority_parse_public(config->run_key, t->authority_pk)) goto fail;
        t->have_key = t->closed = true;
    }
    if (config->allow_path && *config->allow_path) {
        if (load_allowlist(t, config->allow_path)) goto fail;
        t->closed = true;
    }
    if (config->token_path && *config->token_path &&
        load_my_token(t, config->token_path, run_id, my_peer_id, now))
        goto fail;
    if (config->revoked_path && *config->revoked_path) {
        if (!t->have_key) {
            dl_fail("a revocation list needs the run key (--run-key) to check its signature");
            goto fail;
        }
        t->revoked_path = dl_strdup(config->revoked_path);
        if (!t->revoked_path) goto fail;
        struct stat st;
        if (!stat_revoked(t, &st)) {
            dl_fail("cannot read revocation list %s: %s", t->revoked_path, strerror(errno));
            goto fail;
        }
        uint8_t *bin;
        size_t size;
        if (dl_revocations_read_file(t->revoked_path, &bin, &size)) goto fail;
        int rc = dl_trust_offer_revocations(t, run_id, bin, size);
        free(bin);
        if (rc != 1) {
            if (rc == 0) dl_fail("revocation list %s is not for this run and run key", t->revoked_path);
            dl_fail_context("%s", t->revoked_path);
            goto fail;
        }
        t->revoked_mtime = st.st_mtim;
        t->revoked_size = st.st_size;
    }
    return 0;
fail:
    dl_trust_free(t);
    return -1;
}

void dl_trust_free(struct dl_trust *t) {
    free(t->allowed);
    free(t->revoked_path);
    free(t->revoked_bin);
    dl_revocations_free(&t->revoked);
    sodium_memzero(t, sizeof *t);
}

bool dl_trust_is_revoked(const struct dl_trust *t, const char *peer_id) {
    return t->have_revoked && dl_revocations_contains(&t->revoked, peer_id);
}

int dl_trust_admit(const struct dl_trust *t, const char *run_id, const char *peer_id,
                   const uint8_t *token, size_t token_size, double now, enum dl_role *role, double *expires) {
    *role = DL_ROLE_NONE;
    *expires = 0;
    if (dl_trust_is_revoked(t, peer_id)) return dl_fail("peer %s is revoked by the run authority", peer_id);
    uint8_t id[16];
    if (t->num_allowed && !hex_id(peer_id, strlen(peer_id), id))
        for (size_t i = 0; i < t->num_allowed; i++)
            if (!memcmp(t->allowed[i], id, 16)) return 0;
    if (!t->have_key) {
        if (t->closed) return dl_fail("peer %s is not on the allowlist", peer_id);
        return 0;
    }
    if (!token || !token_size)
        return dl_fail("no token: this run admits only peers with a token from its authority");
    struct dl_token tok;
    if (dl_token_decode(token, token_size, &tok)) return -1;
    if (dl_token_check(&tok, t->authority_pk, run_id, peer_id, now)) return -1;
    if (!(t->admit_roles & DL_ROLE_BIT(tok.role))) return dl_fail("role %s is not admitted here", dl_role_name(tok.role));
    *role = tok.role;
    *expires = (double)tok.expires;
    return 0;
}

int dl_trust_offer_revocations(struct dl_trust *t, const char *run_id, const uint8_t *bin, size_t size) {
    if (!t->have_key) return 0;
    /* Cheapest first (docs/protocol.md, "Limits against floods"): a list of
     * another authority or run, or whose claimed serial is not newer than
     * the list in force (that list itself, replayed), is dropped before its
     * signature is checked. The claims are unproven, but a lie here only
     * gets the sender's own list ignored. */
    uint8_t claimed_pk[DL_AUTHORITY_PK];
    char claimed_run[DL_TOKEN_RUN_ID_MAX];
    uint64_t claimed_serial;
    if (dl_revocations_peek(bin, size, claimed_pk, claimed_run, &claimed_serial)) return -1;
    if (sodium_memcmp(claimed_pk, t->authority_pk, DL_AUTHORITY_PK) || strcmp(claimed_run, run_id)) {
        dl_fail("revocation list of another authority or run");
        return 0;
    }
    if (t->have_revoked && claimed_serial <= t->revoked.serial) {
        dl_fail("revocation list not newer than ours");
        return 0;
    }
    struct dl_revocations fresh;
    t->revocation_checks++;
    if (dl_revocations_decode(bin, size, &fresh)) return -1;
    int rc = 0;
    if (sodium_memcmp(fresh.authority_pk, t->authority_pk, DL_AUTHORITY_PK) || strcmp(fresh.run_id, run_id))
        dl_fail("revocation list of another authority or run");
    /* An older list (a restored backup, a slow peer) never un-revokes anyone. */
    else if (t->have_revoked && fresh.serial <= t->revoked.serial)
        dl_fail("revocation list not newer than ours");
    else rc = 1;
    uint8_t *copy = rc == 1 ? dl_malloc(size) : NULL;
    if (!copy) {
        dl_revocations_free(&fresh);
        return 0;
    }
    memcpy(copy, bin, size);
    dl_revocations_free(&t->revoked);
    free(t->revoked_bin);
    t->revoked = fresh;
    t->revoked_bin = copy;
    t->revoked_bin_size = size;
    t->have_revoked = true;
    return 1;
}

bool dl_trust_reload(struct dl_trust *t, const char *run_id) {
    if (!t->revoked_path) return false;
    struct stat st;
    if (!stat_revoked(t, &st)) return false;
    if (st.st_size == t->revoked_size && st.st_mtim.tv_sec == t->revoked_mtime.tv_sec &&
        st.st_mtim.tv_nsec == t->revoked_mtime.tv_nsec)
        return false;
    t->revoked_mtime = st.st_mtim;
    t->revoked_size = st.st_size;
    uint8_t *bin = NULL;
    size_t size = 0;
    int rc = dl_revocations_read_file(t->revoked_path, &bin, &size) ? -1
                                                                    : dl_trust_offer_revocations(t, run_id, bin, size);
    free(bin);
    if (rc < 0) {
        DL_WARN("net", "keeping the revocation list in force: %s", dl_error());
        return false;
    }
    if (rc == 0) {
        DL_WARN("net", "ignoring %s: %s", t->revoked_path, dl_error());
        return false;
    }
    DL_INFO("net", "loaded revocation list %s (%zu peers revoked)", t->revoked_path, t->revoked.count);
    return true;
}
