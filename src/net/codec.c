/* msgpack bodies of every message. Decoders trust nothing: the buffer is
 * walked by dl_msgpack_check before msgpack-c sees it, every field's type is
 * checked, strings and binaries are bounded, and pointers handed back are
 * checked to lie inside the caller's buffer. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/msgpack_fields.h"
#include "net/wire.h"

/* ---- messages ---------------------------------------------------------- */

uint8_t *dl_msg_hello_encode(const struct dl_msg_hello *m, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 8);
    msgpack_pack_uint32(&e.pk, m->version);
    dl_pack_str(&e.pk, m->run_id);
    dl_pack_bin(&e.pk, m->sign_pk, DL_WIRE_PK);
    dl_pack_bin(&e.pk, m->kx_pk, DL_WIRE_PK);
    dl_pack_bin(&e.pk, m->nonce, DL_WIRE_NONCE);
    if (m->client_mode) msgpack_pack_true(&e.pk);
    else msgpack_pack_false(&e.pk);
    dl_pack_bin(&e.pk, m->manifest_hash, m->has_manifest ? sizeof m->manifest_hash : 0);
    if (m->fetch_only) msgpack_pack_true(&e.pk);
    else msgpack_pack_false(&e.pk);
    return dl_enc_finish(&e, size);
}

int dl_msg_hello_decode(const uint8_t *data, size_t size, struct dl_msg_hello *m) {
    const char *w = "HELLO";
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 6, w)) return -1;
    memset(m, 0, sizeof *m);
    int rc = dl_dec_u32(&d, 0, &m->version, w) || dl_dec_str(&d, 1, m->run_id, sizeof m->run_id, w) ||
             dl_dec_bin_exact(&d, 2, m->sign_pk, DL_WIRE_PK, w) ||
             dl_dec_bin_exact(&d, 3, m->kx_pk, DL_WIRE_PK, w) ||
             dl_dec_bin_exact(&d, 4, m->nonce, DL_WIRE_NONCE, w) || dl_dec_bool(&d, 5, &m->client_mode, w);
    /* Fields 6 and 7 (manifest hash, fetch only) are absent in peers
     * without manifest support: they read as no manifest. */
    if (!rc && d.count > 6) {
        const uint8_t *mh;
        size_t mn;
        rc = dl_dec_bin(&d, 6, &mh, &mn, w);
        if (!rc && mn != 0 && mn != sizeof m->manifest_hash) rc = dl_fail("HELLO: manifest hash of %zu bytes", mn);
        if (!rc && mn) {
            memcpy(m->manifest_hash, mh, mn);
            m->has_manifest = true;
        }
    }
    if (!rc && d.count > 7) rc = dl_dec_bool(&d, 7, &m->fetch_only, w);
    dl_dec_end(&d);
    return rc ? -1 : 0;
}

uint8_t *dl_msg_auth_encode(const uint8_t sig[DL_WIRE_SIG], const uint8_t *token, size_t token_size,
                            size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 2);
    dl_pack_bin(&e.pk, sig, DL_WIRE_SIG);
    dl_pack_bin(&e.pk, token, token_size);
    return dl_enc_finish(&e, size);
}

int dl_msg_auth_decode(const uint8_t *data, size_t size, uint8_t sig[DL_WIRE_SIG], const uint8_t **token,
                       size_t *token_size) {
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 1, "AUTH")) return -1;
    int rc = dl_dec_bin_exact(&d, 0, sig, DL_WIRE_SIG, "AUTH");
    *token = NULL;
    *token_size = 0;
    /* The token field is optional: a peer without a token may leave it out. */
    if (!rc && d.count > 1) rc = dl_dec_bin(&d, 1, token, token_size, "AUTH");
    if (!rc && *token_size > DL_TOKEN_MAX_BYTES) rc = dl_fail("AUTH: token of %zu bytes", *token_size);
    dl_dec_end(&d);
    return rc;
}

uint8_t *dl_msg_error_encode(const struct dl_msg_error *m, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 3);
    msgpack_pack_uint32(&e.pk, m->code);
    dl_pack_str(&e.pk, m->text);
    msgpack_pack_uint32(&e.pk, m->version);
    return dl_enc_finish(&e, size);
}

int dl_msg_error_decode(const uint8_t *data, size_t size, struct dl_msg_error *m) {
    const char *w = "ERROR";
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 3, w)) return -1;
    int rc = dl_dec_u32(&d, 0, &m->code, w) || dl_dec_str(&d, 1, m->text, sizeof m->text, w) ||
             dl_dec_u32(&d, 2, &m->version, w);
    dl_dec_end(&d);
    return rc ? -1 : 0;
}

uint8_t *dl_msg_ping_encode(uint64_t nonce, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_uint64(&e.pk, nonce);
    return dl_enc_finish(&e, size);
}

int dl_msg_ping_decode(const uint8_t *data, size_t size, uint64_t *nonce) {
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 1, "PING")) return -1;
    int rc = dl_dec_u64(&d, 0, nonce, "PING");
    dl_dec_end(&d);
    return rc;
}

uint8_t *dl_msg_records_encode(const uint8_t *const *blobs, const size_t *sizes, size_t count,
                               size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, count);
    for (size_t i = 0; i < count; i++) dl_pack_bin(&e.pk, blobs[i], sizes[i]);
    return dl_enc_finish(&e, size);
}

int dl_msg_records_decode(const uint8_t *data, size_t size,
                          int (*fn)(void *user, const uint8_t *blob, size_t blob_size), void *user) {
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 0, "RECORDS")) return -1;
    int rc = 0;
    if (d.count > DL_WIRE_MAX_RECORDS) rc = dl_fail("RECORDS: %u records, at most %d", d.count, DL_WIRE_MAX_RECORDS);
    for (uint32_t i = 0; !rc && i < d.count; i++) {
        const uint8_t *p = NULL;
        size_t n = 0;
        rc = dl_dec_bin(&d, i, &p, &n, "RECORDS");
        if (!rc) rc = fn(user, p, n);
    }
    dl_dec_end(&d);
    return rc ? -1 : 0;
}

uint8_t *dl_msg_request_encode(const struct dl_msg_request *m, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 6);
    msgpack_pack_uint64(&e.pk, m->id);
    dl_pack_str(&e.pk, m->method);
    msgpack_pack_double(&e.pk, m->timeout_s);
    if (m->compressed) msgpack_pack_true(&e.pk);
    else msgpack_pack_false(&e.pk);
    msgpack_pack_uint64(&e.pk, m->raw_size);
    dl_pack_bin(&e.pk, m->payload, m->size);
    return dl_enc_finish(&e, size);
}

int dl_msg_request_decode(const uint8_t *data, size_t size, struct dl_msg_request *m) {
    const char *w = "REQUEST";
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 6, w)) return -1;
    int rc = dl_dec_u64(&d, 0, &m->id, w) || dl_dec_str(&d, 1, m->method, sizeof m->method, w) ||
             dl_dec_f64(&d, 2, &m->timeout_s, w) || dl_dec_bool(&d, 3, &m->compressed, w) ||
             dl_dec_u64(&d, 4, &m->raw_size, w) || dl_dec_bin(&d, 5, &m->payload, &m->size, w);
    dl_dec_end(&d);
    if (!rc && !m->compressed && m->raw_size != m->size) rc = dl_fail("REQUEST: size mismatch");
    return rc ? -1 : 0;
}

uint8_t *dl_msg_response_encode(const struct dl_msg_response *m, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 5);
    msgpack_pack_uint64(&e.pk, m->id);
    msgpack_pack_uint32(&e.pk, m->status);
    if (m->compressed) msgpack_pack_true(&e.pk);
    else msgpack_pack_false(&e.pk);
    msgpack_pack_uint64(&e.pk, m->raw_size);
    dl_pack_bin(&e.pk, m->payload, m->size);
    return dl_enc_finish(&e, size);
}

int dl_msg_response_decode(const uint8_t *data, size_t size, struct dl_msg_response *m) {
    const char *w = "RESPONSE";
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 5, w)) return -1;
    int rc = dl_dec_u64(&d, 0, &m->id, w) || dl_dec_u32(&d, 1, &m->status, w) ||
             dl_dec_bool(&d, 2, &m->compressed, w) || dl_dec_u64(&d, 3, &m->raw_size, w) ||
             dl_dec_bin(&d, 4, &m->payload, &m->size, w);
    dl_dec_end(&d);
    if (!rc && !m->compressed && m->raw_size != m->size) rc = dl_fail("RESPONSE: size mismatch");
    return rc ? -1 : 0;
}

uint8_t *dl_msg_cancel_encode(uint64_t id, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 1);
    msgpack_pack_uint64(&e.pk, id);
    return dl_enc_finish(&e, size);
}

int dl_msg_cancel_decode(const uint8_t *data, size_t size, uint64_t *id) {
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 1, "CANCEL")) return -1;
    int rc = dl_dec_u64(&d, 0, id, "CANCEL");
    dl_dec_end(&d);
    return rc;
}

uint8_t *dl_msg_revocations_encode(const uint8_t *list, size_t list_size, size_t *size) {
    struct dl_enc e;
    dl_enc_init(&e);
    msgpack_pack_array(&e.pk, 1);
    dl_pack_bin(&e.pk, list, list_size);
    return dl_enc_finish(&e, size);
}

int dl_msg_revocations_decode(const uint8_t *data, size_t size, const uint8_t **list, size_t *list_size) {
    struct dl_dec d;
    if (dl_dec_begin(&d, data, size, 1, "REVOCATIONS")) return -1;
    int rc = dl_dec_bin(&d, 0, list, list_size, "REVOCATIONS");
    dl_dec_end(&d);
    return rc;
}
