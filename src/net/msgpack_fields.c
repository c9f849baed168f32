/* msgpack helpers shared by every encoder and decoder of src/net (message
 * bodies in codec.c, signed records in record.c): a structural walk that
 * runs before msgpack-c sees a buffer, and typed, bounded field access. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/msgpack_fields.h"

/* ---- structural check ------------------------------------------------------ */

static int need(size_t pos, size_t n, size_t size) { return n <= size && pos <= size - n; }

static uint64_t read_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

int dl_msgpack_check(const uint8_t *data, size_t size) {
    enum { MAX_DEPTH = 16 };
    uint64_t stack[MAX_DEPTH + 1];
    int sp = 1;
    stack[0] = 1;
    uint64_t pending = 1; /* items still expected; each needs at least one byte */
    size_t pos = 0, objects = 0;
    while (sp > 0) {
        if (stack[sp - 1] == 0) {
            sp--;
            continue;
        }
        stack[sp - 1]--;
        pending--;
        /* msgpack-c allocates one object (24 bytes) per element: bounding
         * the count bounds what unpacking allocates, whatever the size. */
        if (++objects > DL_MSGPACK_MAX_OBJECTS)
            return dl_fail("msgpack: more than %d elements", DL_MSGPACK_MAX_OBJECTS);
        if (pos >= size) return dl_fail("msgpack: truncated");
        uint8_t b = data[pos++];
        uint64_t skip = 0, items = 0;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        } else if (b >= 0x80 && b <= 0x8f) {
            items = 2ull * (b & 0x0f);
        } else if (b >= 0x90 && b <= 0x9f) {
            items = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            int lenbytes = 0, fixed = 0, ext = 0, kind = 0; /* kind 1 array, 2 map */
            switch (b) {
            case 0xc4: case 0xd9: lenbytes = 1; break;
            case 0xc5: case 0xda: lenbytes = 2; break;
            case 0xc6: case 0xdb: lenbytes = 4; break;
            case 0xc7: lenbytes = 1; ext = 1; break;
            case 0xc8: lenbytes = 2; ext = 1; break;
            case 0xc9: lenbytes = 4; ext = 1; break;
            case 0xca: fixed = 4; break;
            case 0xcb: fixed = 8; break;
            case 0xcc: case 0xd0: fixed = 1; break;
            case 0xcd: case 0xd1: fixed = 2; break;
            case 0xce: case 0xd2: fixed = 4; break;
            case 0xcf: case 0xd3: fixed = 8; break;
            case 0xd4: fixed = 2; break;
            case 0xd5: fixed = 3; break;
            case 0xd6: fixed = 5; break;
            case 0xd7: fixed = 9; break;
            case 0xd8: fixed = 17; break;
            case 0xdc: lenbytes = 2; kind = 1; break;
            case 0xdd: lenbytes = 4; kind = 1; break;
            case 0xde: lenbytes = 2; kind = 2; break;
            case 0xdf: lenbytes = 4; kind = 2; break;
            default: return dl_fail("msgpack: invalid byte 0x%02x", b);
            }
            if (lenbytes) {
                if (!need(pos, (size_t)lenbytes, size)) return dl_fail("msgpack: truncated length");
                uint64_t n = read_be(data + pos, lenbytes);
                pos += (size_t)lenbytes;
                if (kind == 1) items = n;
                else if (kind == 2) items = 2 * n;
                else skip = n + (uint64_t)ext;
            } else {
                skip = (uint64_t)fixed;
            }
        }
        if (skip > size - pos) return dl_fail("msgpack: a field claims %llu bytes, %zu remain",
                                              (unsigned long long)skip, size - pos);
        pos += (size_t)skip;
        if (items) {
            if (pending + items > size - pos)
                return dl_fail("msgpack: a container claims %llu elements, %zu bytes remain",
                               (unsigned long long)items, size - pos);
            if (sp > MAX_DEPTH) return dl_fail("msgpack: nested deeper than %d", MAX_DEPTH);
            stack[sp++] = items;
            pending += items;
        }
    }
    if (pos != size) return dl_fail("msgpack: %zu trailing bytes", size - pos);
    return 0;
}

/* ---- encoding helpers ------------------------------------------------------ */


void dl_enc_init(struct dl_enc *e) {
    msgpack_sbuffer_init(&e->sbuf);
    msgpack_packer_init(&e->pk, &e->sbuf, msgpack_sbuffer_write);
}

uint8_t *dl_enc_finish(struct dl_enc *e, size_t *size) {
    *size = e->sbuf.size;
    uint8_t *out = dl_malloc(e->sbuf.size ? e->sbuf.size : 1);
    if (out) memcpy(out, e->sbuf.data, e->sbuf.size);
    msgpack_sbuffer_destroy(&e->sbuf);
    return out;
}

void dl_pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void dl_pack_bin(msgpack_packer *pk, const void *p, size_t n) {
    msgpack_pack_bin(pk, n);
    /* An empty field may come with a NULL pointer, which memcpy must not see. */
    if (n) msgpack_pack_bin_body(pk, p, n);
}

/* ---- decoding helpers ------------------------------------------------------ */


/* Decodes one array of at least min_fields; extra trailing fields are
 * ignored so later versions may append. */
int dl_dec_begin(struct dl_dec *d, const uint8_t *data, size_t size, uint32_t min_fields,
                     const char *what) {
    msgpack_unpacked_init(&d->und);
    d->data = data;
    d->size = size;
    if (dl_msgpack_check(data, size)) {
        msgpack_unpacked_destroy(&d->und);
        return dl_fail_context("%s", what);
    }
    size_t off = 0;
    if (msgpack_unpack_next(&d->und, (const char *)data, size, &off) != MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&d->und);
        return dl_fail("%s: msgpack does not parse", what);
    }
    if (d->und.data.type != MSGPACK_OBJECT_ARRAY || d->und.data.via.array.size < min_fields) {
        msgpack_unpacked_destroy(&d->und);
        return dl_fail("%s: expected an array of at least %u fields", what, min_fields);
    }
    d->fields = d->und.data.via.array.ptr;
    d->count = d->und.data.via.array.size;
    return 0;
}

void dl_dec_end(struct dl_dec *d) { msgpack_unpacked_destroy(&d->und); }

int dl_dec_u64(const struct dl_dec *d, uint32_t i, uint64_t *v, const char *what) {
    if (d->fields[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return dl_fail("%s: field %u must be an unsigned integer", what, i);
    *v = d->fields[i].via.u64;
    return 0;
}

int dl_dec_u32(const struct dl_dec *d, uint32_t i, uint32_t *v, const char *what) {
    uint64_t x = 0;
    if (dl_dec_u64(d, i, &x, what)) return -1;
    if (x > UINT32_MAX) return dl_fail("%s: field %u out of range", what, i);
    *v = (uint32_t)x;
    return 0;
}

int dl_dec_f64(const struct dl_dec *d, uint32_t i, double *v, const char *what) {
    const msgpack_object *o = &d->fields[i];
    if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) *v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) *v = (double)o->via.u64;
    else return dl_fail("%s: field %u must be a number", what, i);
    if (!(*v == *v) || *v > 1e300 || *v < -1e300) return dl_fail("%s: field %u is not finite", what, i);
    return 0;
}

int dl_dec_bool(const struct dl_dec *d, uint32_t i, bool *v, const char *what) {
    if (d->fields[i].type != MSGPACK_OBJECT_BOOLEAN) return dl_fail("%s: field %u must be a boolean", what, i);
    *v = d->fields[i].via.boolean;
    return 0;
}

/* A string copied into out (NUL-terminated), refusing NULs and overlength. */
int dl_dec_str(const struct dl_dec *d, uint32_t i, char *out, size_t cap, const char *what) {
    const msgpack_object *o = &d->fields[i];
    if (o->type != MSGPACK_OBJECT_STR) return dl_fail("%s: field %u must be a string", what, i);
    if (o->via.str.size >= cap) return dl_fail("%s: field %u longer than %zu bytes", what, i, cap - 1);
    if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size))
        return dl_fail("%s: field %u contains NUL", what, i);
    /* msgpack-c gives an empty string a NULL pointer, which memcpy must not see. */
    if (o->via.str.size) memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = 0;
    return 0;
}

/* A binary field pointing into the caller's buffer. */
int dl_dec_bin(const struct dl_dec *d, uint32_t i, const uint8_t **p, size_t *n, const char *what) {
    const msgpack_object *o = &d->fields[i];
    if (o->type != MSGPACK_OBJECT_BIN) return dl_fail("%s: field %u must be binary", what, i);
    const uint8_t *ptr = (const uint8_t *)o->via.bin.ptr;
    if (o->via.bin.size && (ptr < d->data || ptr + o->via.bin.size > d->data + d->size))
        return dl_fail("%s: field %u outside the message", what, i);
    *p = ptr;
    *n = o->via.bin.size;
    return 0;
}

int dl_dec_bin_exact(const struct dl_dec *d, uint32_t i, uint8_t *out, size_t n, const char *what) {
    const uint8_t *p = NULL;
    size_t len = 0;
    if (dl_dec_bin(d, i, &p, &len, what)) return -1;
    if (len != n) return dl_fail("%s: field %u must be %zu bytes, not %zu", what, i, n, len);
    memcpy(out, p, n);
    return 0;
}
