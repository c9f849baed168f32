/* The authenticated handshake (docs/protocol.md, "Handshake"). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/wire.h"

static const char AUTH_CONTEXT[] = "dedloc-auth-v1";

int dl_handshake_begin(struct dl_handshake *hs, bool outbound, const struct dl_identity *id,
                       const char *run_id, bool client_mode) {
    return dl_handshake_begin_ex(hs, outbound, id, run_id, client_mode, NULL, false);
}

int dl_handshake_begin_ex(struct dl_handshake *hs, bool outbound, const struct dl_identity *id,
                          const char *run_id, bool client_mode, const uint8_t *manifest_hash, bool fetch_only) {
    memset(hs, 0, sizeof *hs);
    hs->outbound = outbound;
    crypto_kx_keypair(hs->kx_pk, hs->kx_sk);
    struct dl_msg_hello h;
    memset(&h, 0, sizeof h);
    h.version = DL_WIRE_VERSION;
    if (strlen(run_id) >= sizeof h.run_id) return dl_fail("run id longer than %zu bytes", sizeof h.run_id - 1);
    memcpy(h.run_id, run_id, strlen(run_id) + 1); /* length checked above */
    memcpy(h.sign_pk, id->pk, DL_WIRE_PK);
    memcpy(h.kx_pk, hs->kx_pk, DL_WIRE_PK);
    randombytes_buf(h.nonce, sizeof h.nonce);
    h.client_mode = client_mode;
    h.fetch_only = fetch_only;
    if (manifest_hash) {
        h.has_manifest = true;
        memcpy(h.manifest_hash, manifest_hash, sizeof h.manifest_hash);
    }
    hs->my_hello = dl_msg_hello_encode(&h, &hs->my_hello_size);
    return hs->my_hello ? 0 : -1;
}

int dl_handshake_on_hello(struct dl_handshake *hs, const uint8_t *body, size_t size,
                          struct dl_seal *rx, struct dl_seal *tx) {
    if (dl_msg_hello_decode(body, size, &hs->peer)) return -1;
    if (!memcmp(hs->peer.kx_pk, hs->kx_pk, DL_WIRE_PK)) return dl_fail("HELLO: reflected key");
    int rc = hs->outbound ? crypto_kx_client_session_keys(rx->key, tx->key, hs->kx_pk, hs->kx_sk,
                                                          hs->peer.kx_pk)
                          : crypto_kx_server_session_keys(rx->key, tx->key, hs->kx_pk, hs->kx_sk,
                                                          hs->peer.kx_pk);
    if (rc) return dl_fail("HELLO: unusable key exchange key");
    rx->counter = tx->counter = 0;
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, sizeof hs->transcript);
    if (hs->outbound) {
        crypto_generichash_update(&st, hs->my_hello, hs->my_hello_size);
        crypto_generichash_update(&st, body, size);
    } else {
        crypto_generichash_update(&st, body, size);
        crypto_generichash_update(&st, hs->my_hello, hs->my_hello_size);
    }
    crypto_generichash_final(&st, hs->transcript, sizeof hs->transcript);
    return 0;
}

static void signed_message(uint8_t out[sizeof AUTH_CONTEXT + 1 + 32], bool dialler,
                           const uint8_t transcript[32]) {
    memcpy(out, AUTH_CONTEXT, sizeof AUTH_CONTEXT);
    out[sizeof AUTH_CONTEXT] = dialler ? 'D' : 'L';
    memcpy(out + sizeof AUTH_CONTEXT + 1, transcript, 32);
}

void dl_handshake_sign(const struct dl_handshake *hs, const struct dl_identity *id,
                       uint8_t sig[DL_WIRE_SIG]) {
    uint8_t m[sizeof AUTH_CONTEXT + 1 + 32];
    signed_message(m, hs->outbound, hs->transcript);
    crypto_sign_detached(sig, NULL, m, sizeof m, id->sk);
}

int dl_handshake_verify(const struct dl_handshake *hs, const uint8_t sig[DL_WIRE_SIG]) {
    uint8_t m[sizeof AUTH_CONTEXT + 1 + 32];
    signed_message(m, !hs->outbound, hs->transcript);
    if (crypto_sign_verify_detached(sig, m, sizeof m, hs->peer.sign_pk))
        return dl_fail("AUTH: signature does not match the peer's key");
    return 0;
}

void dl_handshake_clear(struct dl_handshake *hs) {
    free(hs->my_hello);
    hs->my_hello = NULL;
    sodium_memzero(hs->kx_sk, sizeof hs->kx_sk);
}
