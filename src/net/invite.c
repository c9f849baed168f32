/* Invites (docs/protocol.md, "Invites"): a code that a volunteer trades, over
 * its authenticated connection, for a token bound to its own peer id.
 *
 * The invite file, mode 0600:
 *   "dedloc-invite-v1\n" | delegation (137) | the invite key's seed (32) |
 *   BLAKE2b-256 of the code's 16 secret bytes (32) | uses (u32 BE) |
 *   redeem until (u64 BE, Unix seconds) | token validity (u64 BE, seconds) |
 *   run id length (1) | run id.
 * FILE.used lists the peer ids that redeemed it, one per line, appended and
 * synced before each token is handed out. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "net/delegation.h"

#define INVITE_MAGIC "dedloc-invite-v1\n"
#define INVITE_MAGIC_LEN (sizeof INVITE_MAGIC - 1)
#define CODE_PREFIX "dli1."
#define CODE_SECRET 16
#define INVITE_FIXED (INVITE_MAGIC_LEN + DL_DELEGATION_BYTES + 32 + 32 + 4 + 8 + 8 + 1)

struct dl_invite {
    char used_path[4200];
    uint8_t delegation[DL_DELEGATION_BYTES];
    uint8_t pk[32], sk[64];          /* the invite's own key (the delegate) */
    uint8_t code_hash[32];
    uint32_t uses;
    uint64_t redeem_until, valid_s, until;
    enum dl_role role;
    char run_id[DL_TOKEN_RUN_ID_MAX];
    uint8_t (*used)[16];             /* peer ids that redeemed it, uses entries */
    size_t num_used;
};

static void put_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static uint64_t get_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static void format_utc(uint64_t t, char out[32]) {
    time_t tt = (time_t)(t > (uint64_t)INT32_MAX * 1000 ? (uint64_t)INT32_MAX * 1000 : t);
    struct tm tm;
    if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, 32, "%llu", (unsigned long long)t);
}

int dl_invite_create(const struct dl_authority *a, const char *path, enum dl_role role, uint32_t uses,
                     double redeem_s, double valid_s, char code[DL_INVITE_CODE_MAX]) {
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    if (uses < 1 || uses > DL_INVITE_MAX_USES) return dl_fail("an invite admits 1 to %d peers", DL_INVITE_MAX_USES);
    if (!(redeem_s > 0 && valid_s > 0)) return dl_fail("an invite needs a positive lifetime and token validity");
    double now = dl_wall_time();
    uint64_t redeem_until = (uint64_t)(now + redeem_s), valid = (uint64_t)valid_s;
    uint8_t pk[32], sk[64], secret[CODE_SECRET];
    crypto_sign_keypair(pk, sk);
    randombytes_buf(secret, sizeof secret);
    size_t run_len = strlen(a->run_id);
    uint8_t file[INVITE_FIXED + DL_TOKEN_RUN_ID_MAX];
    size_t n = 0;
    memcpy(file, INVITE_MAGIC, INVITE_MAGIC_LEN);
    n += INVITE_MAGIC_LEN;
    /* A token redeemed on the last day is valid valid_s more: the delegation
     * covers both. */
    if (dl_delegation_sign(a, pk, role, redeem_until + valid, file + n)) return -1;
    n += DL_DELEGATION_BYTES;
    crypto_sign_ed25519_sk_to_seed(file + n, sk);
    n += 32;
    crypto_generichash(file + n, 32, secret, sizeof secret, NULL, 0);
    n += 32;
    put_be(file + n, uses, 4);
    n += 4;
    put_be(file + n, redeem_until, 8);
    n += 8;
    put_be(file + n, valid, 8);
    n += 8;
    file[n++] = (uint8_t)run_len;
    memcpy(file + n, a->run_id, run_len);
    n += run_len;
    int rc = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        rc = dl_fail("cannot create invite file %s: %s%s", path, strerror(errno),
                     errno == EEXIST ? " (an invite is never overwritten; choose another name)" : "");
    } else {
        ssize_t w = write(fd, file, n);
        int sync_rc = fsync(fd);
        close(fd);
        if (w != (ssize_t)n || sync_rc) {
            unlink(path);
            rc = dl_fail("cannot write invite file %s", path);
        }
    }
    if (!rc) {
        memcpy(code, CODE_PREFIX, sizeof CODE_PREFIX - 1);
        sodium_bin2base64(code + sizeof CODE_PREFIX - 1, DL_INVITE_CODE_MAX - (sizeof CODE_PREFIX - 1), secret,
                          sizeof secret, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    }
    sodium_memzero(file, sizeof file);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(secret, sizeof secret);
    return rc;
}

/* FILE.used: one peer id per line, at most uses of them. */
static int load_used(dl_invite *inv) {
    inv->used = dl_calloc(inv->uses, 16);
    if (!inv->used) return -1;
    if (!dl_file_exists(inv->used_path)) return 0;
    char *text;
    size_t size;
    if (dl_read_file(inv->used_path, (size_t)inv->uses * 33 + 4096, &text, &size))
        return dl_fail_context("the invite's record of uses");
    int rc = 0;
    for (size_t pos = 0; pos < size && !rc;) {
        size_t eol = pos;
        while (eol < size && text[eol] != '\n') eol++;
        size_t got = 0;
        const char *end = NULL;
        if (eol == pos + 32 && inv->num_used < inv->uses &&
            !sodium_hex2bin(inv->used[inv->num_used], 16, text + pos, 32, NULL, &got, &end) && got == 16)
            inv->num_used++;
        else
            rc = dl_fail("%s: line %.*s is not a peer id (the record of the invite's uses is damaged)",
                         inv->used_path, (int)(eol - pos < 40 ? eol - pos : 40), text + pos);
        pos = eol + 1;
    }
    free(text);
    return rc;
}

int dl_invite_load(const char *path, dl_invite **invite) {
    *invite = NULL;
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    char *data;
    size_t size;
    if (dl_read_file(path, 4096, &data, &size)) return dl_fail_context("invite");
    dl_invite *inv = dl_calloc(1, sizeof *inv);
    if (!inv) {
        free(data);
        return -1;
    }
    const uint8_t *p = (const uint8_t *)data;
    int ok = size > INVITE_FIXED && !memcmp(p, INVITE_MAGIC, INVITE_MAGIC_LEN);
    size_t run_len = ok ? p[INVITE_FIXED - 1] : 0;
    ok = ok && run_len > 0 && run_len < DL_TOKEN_RUN_ID_MAX && size == INVITE_FIXED + run_len &&
         !memchr(p + INVITE_FIXED, 0, run_len);
    if (ok) {
        size_t n = INVITE_MAGIC_LEN;
        memcpy(inv->delegation, p + n, DL_DELEGATION_BYTES);
        n += DL_DELEGATION_BYTES;
        crypto_sign_seed_keypair(inv->pk, inv->sk, p + n);
        n += 32;
        memcpy(inv->code_hash, p + n, 32);
        n += 32;
        inv->uses = (uint32_t)get_be(p + n, 4);
        n += 4;
        inv->redeem_until = get_be(p + n, 8);
        n += 8;
        inv->valid_s = get_be(p + n, 8);
        memcpy(inv->run_id, p + INVITE_FIXED, run_len);
    }
    sodium_memzero(data, size);
    free(data);
    int rc = 0;
    if (!ok || inv->uses < 1 || inv->uses > DL_INVITE_MAX_USES)
        rc = dl_fail("%s is not a dedloc invite file", path);
    else if (dl_delegation_verify(inv->delegation, inv->run_id, &inv->role, &inv->until))
        rc = dl_fail_context("invite %s", path);
    else if (memcmp(inv->delegation + DL_AUTHORITY_PK, inv->pk, 32))
        rc = dl_fail("invite %s: its key is not the one its delegation names", path);
    else if ((size_t)snprintf(inv->used_path, sizeof inv->used_path, "%s.used", path) >= sizeof inv->used_path)
        rc = dl_fail("invite path too long");
    else if (load_used(inv))
        rc = -1;
    if (rc) {
        dl_invite_free(inv);
        return -1;
    }
    *invite = inv;
    return 0;
}

void dl_invite_free(dl_invite *inv) {
    if (!inv) return;
    free(inv->used);
    sodium_memzero(inv, sizeof *inv);
    free(inv);
}

const uint8_t *dl_invite_authority(const dl_invite *inv) { return inv->delegation; }
const char *dl_invite_run_id(const dl_invite *inv) { return inv->run_id; }

/* Appends peer id to FILE.used and syncs it: a use is on disk before its
 * token leaves, so a restart never hands out more than the invite allows. */
static int record_use(dl_invite *inv, const uint8_t id[16]) {
    char line[34];
    sodium_bin2hex(line, 33, id, 16);
    line[32] = '\n';
    int fd = open(inv->used_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0) return dl_fail("cannot record the invite's use in %s: %s", inv->used_path, strerror(errno));
    ssize_t w = write(fd, line, 33);
    int sync_rc = fsync(fd);
    close(fd);
    if (w != 33 || sync_rc) return dl_fail("cannot record the invite's use in %s", inv->used_path);
    memcpy(inv->used[inv->num_used++], id, 16);
    return 0;
}

int dl_invite_redeem(dl_invite *inv, const char *code, const char *peer_id, double now,
                     char token[DL_TOKEN_TEXT_MAX]) {
    size_t prefix = sizeof CODE_PREFIX - 1, got = 0;
    uint8_t secret[CODE_SECRET], hash[32], id[16];
    const char *end = NULL;
    if (strncmp(code, CODE_PREFIX, prefix) ||
        sodium_base642bin(secret, sizeof secret, code + prefix, strlen(code + prefix), NULL, &got, &end,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) ||
        got != sizeof secret || *end)
        return dl_fail("not an invite code (they start with '" CODE_PREFIX "')");
    crypto_generichash(hash, sizeof hash, secret, sizeof secret, NULL, 0);
    sodium_memzero(secret, sizeof secret);
    if (sodium_memcmp(hash, inv->code_hash, sizeof hash)) return dl_fail("unknown invite code");
    if (now >= (double)inv->redeem_until) {
        char when[32];
        format_utc(inv->redeem_until, when);
        return dl_fail("invite code expired at %s", when);
    }
    if (strlen(peer_id) != 32 || sodium_hex2bin(id, sizeof id, peer_id, 32, NULL, &got, &end) || got != 16)
        return dl_fail("bad peer id");
    bool again = false;
    for (size_t i = 0; i < inv->num_used && !again; i++) again = !memcmp(inv->used[i], id, 16);
    if (!again && inv->num_used >= inv->uses)
        return dl_fail("invite code used up (%zu of %u peers admitted)", inv->num_used, (unsigned)inv->uses);
    if (!again && record_use(inv, id)) return -1;
    struct dl_token t;
    memset(&t, 0, sizeof t);
    t.role = inv->role;
    t.issued = (uint64_t)now;
    t.expires = t.issued + inv->valid_s < inv->until ? t.issued + inv->valid_s : inv->until;
    snprintf(t.run_id, sizeof t.run_id, "%s", inv->run_id);
    snprintf(t.peer_id, sizeof t.peer_id, "%s", peer_id);
    snprintf(t.name, sizeof t.name, "invited");
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n;
    if (dl_token_sign_delegated(inv->delegation, inv->sk, &t, bin, &n) || dl_token_to_text(bin, n, token)) return -1;
    DL_INFO("invite", "token for peer %s (%s), %s; %zu of %u places taken", peer_id, dl_role_name(t.role),
            again ? "a peer that redeemed the code before" : "a new peer", inv->num_used, (unsigned)inv->uses);
    return 0;
}

static void on_invite(void *user, dl_net *net, const struct dl_net_incoming *req) {
    dl_invite *inv = user;
    char code[DL_INVITE_CODE_MAX + 8];
    char token[DL_TOKEN_TEXT_MAX];
    int rc;
    if (req->size >= sizeof code) {
        rc = dl_fail("not an invite code (too long)");
    } else {
        memcpy(code, req->payload, req->size);
        code[req->size] = 0;
        rc = dl_invite_redeem(inv, code, req->peer_id, dl_wall_time(), token);
    }
    if (rc) {
        const char *why = dl_error();
        DL_WARN("invite", "refused peer %s: %s", req->peer_id, why);
        dl_net_respond(net, req->token, DL_NET_REMOTE_ERROR, why, strlen(why));
        return;
    }
    dl_net_respond(net, req->token, DL_NET_OK, token, strlen(token));
}

int dl_net_serve_invite(dl_net *net, dl_invite *inv) {
    char until[32];
    format_utc(inv->redeem_until, until);
    DL_INFO("invite", "serving an invite of run %s: %zu of %u places taken, redeemable until %s", inv->run_id,
            inv->num_used, (unsigned)inv->uses, until);
    return dl_net_set_handler(net, DL_NET_METHOD_INVITE, on_invite, inv);
}

/* The answer, error text included (the sync request form keeps only
 * successful answers, and a volunteer needs to hear why it was refused). */
struct redeem_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int status;
    char text[DL_TOKEN_TEXT_MAX];
    size_t size;
};

static void on_redeem_answer(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    (void)id;
    struct redeem_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->size = size < sizeof w->text ? size : sizeof w->text;
    if (status == DL_NET_OK && size >= sizeof w->text) w->size = 0; /* not a token: refused below */
    /* Printable ASCII only: the text comes from another machine and ends up
     * on a terminal. */
    for (size_t i = 0; i < w->size && i + 1 < sizeof w->text; i++)
        w->text[i] = payload[i] >= 0x20 && payload[i] < 0x7f ? (char)payload[i] : '?';
    if (w->size >= sizeof w->text) w->size = sizeof w->text - 1;
    w->text[w->size] = 0;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int dl_net_redeem_invite(dl_net *net, const char *peer_id, const char *code, double timeout_s,
                         char token[DL_TOKEN_TEXT_MAX]) {
    struct redeem_wait w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    if (!dl_net_request(net, peer_id, DL_NET_METHOD_INVITE, code, strlen(code), timeout_s, on_redeem_answer, &w)) {
        w.status = DL_NET_DISCONNECTED;
    } else {
        /* The callback always runs (on timeout at the latest). */
        pthread_mutex_lock(&w.lock);
        while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    int st = w.status;
    if (st == DL_NET_NO_HANDLER)
        return dl_fail("peer %s holds no invite (it was started without --invite-file): ask the organiser for the "
                       "address of the peer that holds it", peer_id);
    if (st == DL_NET_REMOTE_ERROR) return dl_fail("peer %s refused the invite: %.200s", peer_id, w.text);
    if (st != DL_NET_OK) return dl_fail("peer %s did not answer the invite (%s)", peer_id, dl_net_status_name(st));
    if (w.size == 0) return dl_fail("peer %s answered the invite with something that is not a token", peer_id);
    memcpy(token, w.text, w.size + 1);
    return 0;
}
