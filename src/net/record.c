/* Signed progress records: encoding, signing, verification. The msgpack
 * field helpers are the ones every message body uses (msgpack_fields.h). */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/msgpack_fields.h"
#include "net/swarm.h"

static const char RECORD_CONTEXT[] = "dedloc-record-v1";
/* Field 12, the parameter hash, and field 13, the owner's token, came
 * later: records of 12 fields stay valid. */
#define RECORD_FIELDS 14
#define RECORD_MIN_FIELDS 12

static void pack_bool(msgpack_packer *pk, bool b) {
    if (b) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
}

void dl_signed_state(crypto_sign_state *st, const char *context, const uint8_t *bytes, size_t n) {
    crypto_sign_init(st);
    crypto_sign_update(st, (const uint8_t *)context, strlen(context) + 1);
    crypto_sign_update(st, bytes, n);
}

uint8_t *dl_signed_wrap(const char *context, uint8_t *bytes, size_t nbytes, const struct dl_identity *id,
                        size_t *size) {
    if (!bytes) return NULL;
    uint8_t sig[DL_WIRE_SIG];
    crypto_sign_state st;
    dl_signed_state(&st, context, bytes, nbytes);
    /* sk is an array inside *id, which the caller has already read: the
     * analyzer's "NULL sk" (seen only in optimised builds) cannot happen. */
    crypto_sign_final_create(&st, sig, NULL, id->sk); /* NOLINT(clang-analyzer-core.NonNullParamChecker) */
    struct dl_enc out;
    dl_enc_init(&out);
    msgpack_pack_array(&out.pk, 2);
    dl_pack_bin(&out.pk, bytes, nbytes);
    dl_pack_bin(&out.pk, sig, DL_WIRE_SIG);
    free(bytes);
    return dl_enc_finish(&out, size);
}

uint8_t *dl_record_sign(const struct dl_record *r, const char *run_id, const struct dl_identity *id,
                        size_t *size) {
    struct dl_enc body;
    dl_enc_init(&body);
    msgpack_packer *pk = &body.pk;
    msgpack_pack_array(pk, RECORD_FIELDS);
    msgpack_pack_uint32(pk, 1);
    dl_pack_bin(pk, id->pk, DL_WIRE_PK);
    dl_pack_str(pk, run_id);
    msgpack_pack_uint64(pk, r->seq);
    msgpack_pack_uint64(pk, r->epoch);
    msgpack_pack_double(pk, r->samples);
    msgpack_pack_double(pk, r->samples_per_second);
    msgpack_pack_double(pk, r->time);
    pack_bool(pk, r->client_mode);
    pack_bool(pk, r->goodbye);
    dl_pack_str(pk, r->address);
    msgpack_pack_double(pk, r->bandwidth_mbit);
    dl_pack_bin(pk, r->param_hash, r->has_param_hash ? sizeof r->param_hash : 0);
    dl_pack_bin(pk, r->token, r->token_size);
    size_t nbytes;
    uint8_t *bytes = dl_enc_finish(&body, &nbytes);
    return dl_signed_wrap(RECORD_CONTEXT, bytes, nbytes, id, size);
}

/* Fields of the record body, in order (docs/protocol.md). */
static int decode_body(const uint8_t *bytes, size_t nbytes, struct dl_record *r, char *run_id, size_t run_id_cap) {
    struct dl_dec d;
    const char *what = "record body";
    if (dl_dec_begin(&d, bytes, nbytes, RECORD_MIN_FIELDS, what)) return -1;
    uint32_t version = 0;
    int bad = dl_dec_u32(&d, 0, &version, what) || dl_dec_bin_exact(&d, 1, r->pk, DL_WIRE_PK, what) ||
              dl_dec_str(&d, 2, run_id, run_id_cap, what) || dl_dec_u64(&d, 3, &r->seq, what) ||
              dl_dec_u64(&d, 4, &r->epoch, what) || dl_dec_f64(&d, 5, &r->samples, what) ||
              dl_dec_f64(&d, 6, &r->samples_per_second, what) || dl_dec_f64(&d, 7, &r->time, what) ||
              dl_dec_bool(&d, 8, &r->client_mode, what) || dl_dec_bool(&d, 9, &r->goodbye, what) ||
              dl_dec_str(&d, 10, r->address, sizeof r->address, what) ||
              dl_dec_f64(&d, 11, &r->bandwidth_mbit, what);
    if (!bad && d.count > 12) {
        const uint8_t *hash;
        size_t hash_size;
        bad = dl_dec_bin(&d, 12, &hash, &hash_size, what);
        if (!bad && hash_size == sizeof r->param_hash) {
            memcpy(r->param_hash, hash, hash_size);
            r->has_param_hash = true;
        } else if (!bad && hash_size) {
            bad = dl_fail("%s: a parameter hash of %zu bytes (32 or none)", what, hash_size);
        }
    }
    if (!bad && d.count > 13) {
        const uint8_t *token;
        bad = dl_dec_bin(&d, 13, &token, &r->token_size, what);
        if (!bad && r->token_size > sizeof r->token)
            bad = dl_fail("%s: a token of %zu bytes (at most %zu)", what, r->token_size, sizeof r->token);
        else if (!bad && r->token_size) memcpy(r->token, token, r->token_size);
    }
    dl_dec_end(&d);
    if (bad) return -1;
    if (version != 1) return dl_fail("record: version %u, expected 1", version);
    return 0;
}

/* The signed bytes and the signature inside a blob. */
static int split_blob(const uint8_t *blob, size_t size, const uint8_t **bytes, size_t *nbytes, uint8_t sig[DL_WIRE_SIG]) {
    if (size > 1024) return dl_fail("record: %zu bytes, at most 1024", size);
    struct dl_dec outer;
    if (dl_dec_begin(&outer, blob, size, 2, "record")) return -1;
    int bad = outer.count != 2 || dl_dec_bin(&outer, 0, bytes, nbytes, "record") ||
              dl_dec_bin_exact(&outer, 1, sig, DL_WIRE_SIG, "record");
    dl_dec_end(&outer);
    return bad ? dl_fail("record: expected [bin record, bin64 signature]") : 0;
}

int dl_record_parse(const uint8_t *blob, size_t size, const char *run_id, struct dl_record *r) {
    memset(r, 0, sizeof *r);
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    uint8_t sig[DL_WIRE_SIG];
    if (split_blob(blob, size, &bytes, &nbytes, sig)) return -1;
    char rid[DL_WIRE_RUN_ID_MAX];
    if (decode_body(bytes, nbytes, r, rid, sizeof rid)) return -1;
    if (strcmp(rid, run_id)) return dl_fail("record: belongs to run '%s'", rid);
    if (r->samples < 0 || r->samples_per_second < 0) return dl_fail("record: negative samples");
    dl_peer_id_from_pk(r->pk, r->peer_id);
    return 0;
}

int dl_record_check_signature(const uint8_t *blob, size_t size, const struct dl_record *r) {
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    uint8_t sig[DL_WIRE_SIG];
    if (split_blob(blob, size, &bytes, &nbytes, sig)) return -1;
    crypto_sign_state st;
    dl_signed_state(&st, RECORD_CONTEXT, bytes, nbytes);
    if (crypto_sign_final_verify(&st, sig, r->pk)) return dl_fail("record: forged signature");
    return 0;
}

int dl_record_verify(const uint8_t *blob, size_t size, const char *run_id, struct dl_record *r) {
    if (dl_record_parse(blob, size, run_id, r)) return -1;
    return dl_record_check_signature(blob, size, r);
}
