/* Signed progress records: encoding, signing, verification. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/swarm.h"

static const char RECORD_CONTEXT[] = "dedloc-record-v1";

static void pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_bool(msgpack_packer *pk, bool b) {
    if (b) msgpack_pack_true(pk);
    else msgpack_pack_false(pk);
}

static void sign_record_bytes(const uint8_t *bytes, size_t n, const struct dl_identity *id,
                              uint8_t sig[DL_WIRE_SIG]) {
    crypto_sign_state st;
    crypto_sign_init(&st);
    crypto_sign_update(&st, (const uint8_t *)RECORD_CONTEXT, sizeof RECORD_CONTEXT);
    crypto_sign_update(&st, bytes, n);
    /* sk is an array inside *id, which the caller has already read: the
     * analyzer's "NULL sk" (seen only in optimised builds) cannot happen. */
    crypto_sign_final_create(&st, sig, NULL, id->sk); /* NOLINT(clang-analyzer-core.NonNullParamChecker) */
}

uint8_t *dl_record_sign(const struct dl_record *r, const char *run_id, const struct dl_identity *id,
                        size_t *size) {
    msgpack_sbuffer rb;
    msgpack_sbuffer_init(&rb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &rb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 12);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_bin(&pk, DL_WIRE_PK);
    msgpack_pack_bin_body(&pk, id->pk, DL_WIRE_PK);
    pack_str(&pk, run_id);
    msgpack_pack_uint64(&pk, r->seq);
    msgpack_pack_uint64(&pk, r->epoch);
    msgpack_pack_double(&pk, r->samples);
    msgpack_pack_double(&pk, r->samples_per_second);
    msgpack_pack_double(&pk, r->time);
    pack_bool(&pk, r->client_mode);
    pack_bool(&pk, r->goodbye);
    pack_str(&pk, r->address);
    msgpack_pack_double(&pk, r->bandwidth_mbit);
    uint8_t sig[DL_WIRE_SIG];
    sign_record_bytes((const uint8_t *)rb.data, rb.size, id, sig);

    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_bin(&pk, rb.size);
    msgpack_pack_bin_body(&pk, rb.data, rb.size);
    msgpack_pack_bin(&pk, DL_WIRE_SIG);
    msgpack_pack_bin_body(&pk, sig, DL_WIRE_SIG);
    msgpack_sbuffer_destroy(&rb);
    uint8_t *blob = dl_malloc(out.size);
    if (blob) memcpy(blob, out.data, out.size);
    *size = out.size;
    msgpack_sbuffer_destroy(&out);
    return blob;
}

static int as_double(const msgpack_object *o, double *v) {
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) *v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) *v = (double)o->via.u64;
    else return -1;
    return (*v == *v && *v < 1e300 && *v > -1e300) ? 0 : -1;
}

static int as_str(const msgpack_object *o, char *out, size_t cap) {
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap) return -1;
    if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size)) return -1;
    memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = 0;
    return 0;
}

int dl_record_verify(const uint8_t *blob, size_t size, const char *run_id, struct dl_record *r) {
    if (size > 1024) return dl_fail("record: %zu bytes, at most 1024", size);
    if (dl_msgpack_check(blob, size)) return dl_fail_context("record");
    msgpack_unpacked und;
    msgpack_unpacked_init(&und);
    size_t off = 0;
    int rc = -1;
    if (msgpack_unpack_next(&und, (const char *)blob, size, &off) != MSGPACK_UNPACK_SUCCESS) {
        dl_fail("record: msgpack does not parse");
        goto done;
    }
    const msgpack_object *o = &und.data;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_BIN || o->via.array.ptr[1].type != MSGPACK_OBJECT_BIN ||
        o->via.array.ptr[1].via.bin.size != DL_WIRE_SIG) {
        dl_fail("record: expected [bin record, bin64 signature]");
        goto done;
    }
    const uint8_t *bytes = (const uint8_t *)o->via.array.ptr[0].via.bin.ptr;
    size_t nbytes = o->via.array.ptr[0].via.bin.size;
    const uint8_t *sig = (const uint8_t *)o->via.array.ptr[1].via.bin.ptr;
    if (bytes < blob || bytes + nbytes > blob + size || sig < blob || sig + DL_WIRE_SIG > blob + size) {
        dl_fail("record: fields outside the blob");
        goto done;
    }
    if (dl_msgpack_check(bytes, nbytes)) {
        dl_fail_context("record body");
        goto done;
    }
    msgpack_unpacked inner;
    msgpack_unpacked_init(&inner);
    off = 0;
    if (msgpack_unpack_next(&inner, (const char *)bytes, nbytes, &off) != MSGPACK_UNPACK_SUCCESS ||
        inner.data.type != MSGPACK_OBJECT_ARRAY || inner.data.via.array.size < 12) {
        msgpack_unpacked_destroy(&inner);
        dl_fail("record body: expected an array of 12 fields");
        goto done;
    }
    const msgpack_object *f = inner.data.via.array.ptr;
    char rid[DL_WIRE_RUN_ID_MAX];
    memset(r, 0, sizeof *r);
    int bad = f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[0].via.u64 != 1 ||
              f[1].type != MSGPACK_OBJECT_BIN || f[1].via.bin.size != DL_WIRE_PK ||
              as_str(&f[2], rid, sizeof rid) || f[3].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
              f[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER || as_double(&f[5], &r->samples) ||
              as_double(&f[6], &r->samples_per_second) || as_double(&f[7], &r->time) ||
              f[8].type != MSGPACK_OBJECT_BOOLEAN || f[9].type != MSGPACK_OBJECT_BOOLEAN ||
              as_str(&f[10], r->address, sizeof r->address) || as_double(&f[11], &r->bandwidth_mbit);
    if (!bad) {
        memcpy(r->pk, f[1].via.bin.ptr, DL_WIRE_PK);
        r->seq = f[3].via.u64;
        r->epoch = f[4].via.u64;
        r->client_mode = f[8].via.boolean;
        r->goodbye = f[9].via.boolean;
    }
    msgpack_unpacked_destroy(&inner);
    if (bad) {
        dl_fail("record body: a field has the wrong type or size");
        goto done;
    }
    if (strcmp(rid, run_id)) {
        dl_fail("record: belongs to run '%s'", rid);
        goto done;
    }
    if (r->samples < 0 || r->samples_per_second < 0) {
        dl_fail("record: negative samples");
        goto done;
    }
    crypto_sign_state st;
    crypto_sign_init(&st);
    crypto_sign_update(&st, (const uint8_t *)RECORD_CONTEXT, sizeof RECORD_CONTEXT);
    crypto_sign_update(&st, bytes, nbytes);
    if (crypto_sign_final_verify(&st, sig, r->pk)) {
        dl_fail("record: forged signature");
        goto done;
    }
    dl_peer_id_from_pk(r->pk, r->peer_id);
    rc = 0;
done:
    msgpack_unpacked_destroy(&und);
    return rc;
}
