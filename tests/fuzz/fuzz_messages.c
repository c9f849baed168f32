/* The msgpack body of every message type (the first byte picks the type):
 * decoders refuse garbage without crashing, and whatever they accept
 * encodes back to a body that decodes to the same fields. */
#include "fuzz.h"
#include "net/wire.h"

static int count_blob(void *user, const uint8_t *blob, size_t n) {
    (void)blob;
    size_t *total = user;
    *total += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 1) return 0;
    uint8_t which = data[0] % 10;
    size_t n = size - 1;
    uint8_t *body = (uint8_t *)fuzz_copy(data + 1, n, false);
    uint8_t *again = NULL;
    size_t again_n = 0;
    switch (which) {
    case 0: dl_msgpack_check(body, n); break;
    case 1: {
        struct dl_msg_hello m, m2;
        if (dl_msg_hello_decode(body, n, &m) == 0) {
            again = dl_msg_hello_encode(&m, &again_n);
            FUZZ_ASSERT(again && dl_msg_hello_decode(again, again_n, &m2) == 0);
            FUZZ_ASSERT(m.version == m2.version && !strcmp(m.run_id, m2.run_id) &&
                        !memcmp(m.sign_pk, m2.sign_pk, DL_WIRE_PK) && !memcmp(m.kx_pk, m2.kx_pk, DL_WIRE_PK) &&
                        !memcmp(m.nonce, m2.nonce, DL_WIRE_NONCE) && m.client_mode == m2.client_mode);
        }
        break;
    }
    case 2: {
        uint8_t sig[DL_WIRE_SIG], sig2[DL_WIRE_SIG];
        const uint8_t *tok, *tok2;
        size_t tn, tn2;
        if (dl_msg_auth_decode(body, n, sig, &tok, &tn) == 0) {
            FUZZ_ASSERT(tn <= DL_TOKEN_MAX_BYTES && (tn == 0 || (tok >= body && tok + tn <= body + n)));
            again = dl_msg_auth_encode(sig, tok, tn, &again_n);
            FUZZ_ASSERT(again && dl_msg_auth_decode(again, again_n, sig2, &tok2, &tn2) == 0);
            FUZZ_ASSERT(!memcmp(sig, sig2, DL_WIRE_SIG) && tn == tn2 && (tn == 0 || !memcmp(tok, tok2, tn)));
        }
        break;
    }
    case 3: {
        struct dl_msg_error m, m2;
        if (dl_msg_error_decode(body, n, &m) == 0) {
            again = dl_msg_error_encode(&m, &again_n);
            FUZZ_ASSERT(again && dl_msg_error_decode(again, again_n, &m2) == 0);
            FUZZ_ASSERT(m.code == m2.code && m.version == m2.version && !strcmp(m.text, m2.text));
        }
        break;
    }
    case 4:
    case 8: {
        uint64_t v, v2;
        int rc = which == 4 ? dl_msg_ping_decode(body, n, &v) : dl_msg_cancel_decode(body, n, &v);
        if (rc == 0) {
            again = which == 4 ? dl_msg_ping_encode(v, &again_n) : dl_msg_cancel_encode(v, &again_n);
            FUZZ_ASSERT(again);
            rc = which == 4 ? dl_msg_ping_decode(again, again_n, &v2) : dl_msg_cancel_decode(again, again_n, &v2);
            FUZZ_ASSERT(rc == 0 && v == v2);
        }
        break;
    }
    case 5: {
        size_t total = 0;
        if (dl_msg_records_decode(body, n, count_blob, &total) == 0) FUZZ_ASSERT(total <= n);
        break;
    }
    case 6: {
        struct dl_msg_request m, m2;
        if (dl_msg_request_decode(body, n, &m) == 0) {
            FUZZ_ASSERT(m.size <= n && (m.size == 0 || (m.payload >= body && m.payload + m.size <= body + n)));
            again = dl_msg_request_encode(&m, &again_n);
            FUZZ_ASSERT(again && dl_msg_request_decode(again, again_n, &m2) == 0);
            FUZZ_ASSERT(m.id == m2.id && !strcmp(m.method, m2.method) && m.size == m2.size &&
                        m.compressed == m2.compressed && m.raw_size == m2.raw_size &&
                        (m.size == 0 || !memcmp(m.payload, m2.payload, m.size)));
        }
        break;
    }
    case 7: {
        struct dl_msg_response m, m2;
        if (dl_msg_response_decode(body, n, &m) == 0) {
            FUZZ_ASSERT(m.size <= n);
            again = dl_msg_response_encode(&m, &again_n);
            FUZZ_ASSERT(again && dl_msg_response_decode(again, again_n, &m2) == 0);
            FUZZ_ASSERT(m.id == m2.id && m.status == m2.status && m.size == m2.size &&
                        (m.size == 0 || !memcmp(m.payload, m2.payload, m.size)));
            /* A compressed payload is inflated with the claimed size as the bound. */
            uint8_t *raw = NULL;
            if (m.compressed && dl_wire_inflate(m.payload, m.size, m.raw_size, 1u << 20, &raw) == 0) free(raw);
        }
        break;
    }
    case 9: {
        const uint8_t *list, *list2;
        size_t ln, ln2;
        if (dl_msg_revocations_decode(body, n, &list, &ln) == 0) {
            again = dl_msg_revocations_encode(list, ln, &again_n);
            FUZZ_ASSERT(again && dl_msg_revocations_decode(again, again_n, &list2, &ln2) == 0);
            FUZZ_ASSERT(ln == ln2 && (ln == 0 || !memcmp(list, list2, ln)));
        }
        break;
    }
    }
    free(again);
    free(body);
    return 0;
}
