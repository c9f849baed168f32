/* Byte strings for the stream's saved state (stream.c): little-endian
 * integers whatever the host, examples and document positions. Reading is
 * defensive: the bytes come from a checkpoint file, so every count is
 * bounded and a short or inconsistent string fails instead of crashing. */
#include <string.h>

#include "data/data_internal.h"

static void reserve(dl_pos_out *o, size_t n) {
    if (o->failed) return;
    if (o->len + n <= o->cap) return;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + n) cap *= 2;
    uint8_t *grown = dl_realloc(o->data, cap);
    if (!grown) {
        o->failed = true;
        return;
    }
    o->data = grown;
    o->cap = cap;
}

void dl_pos_put_bytes(dl_pos_out *o, const void *p, size_t n) {
    reserve(o, n);
    if (o->failed) return;
    if (n) memcpy(o->data + o->len, p, n);
    o->len += n;
}

void dl_pos_put_u64(dl_pos_out *o, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    dl_pos_put_bytes(o, b, 8);
}

void dl_pos_put_i32s(dl_pos_out *o, const int32_t *v, size_t n) {
    reserve(o, n * 4);
    if (o->failed) return;
    uint8_t *d = o->data + o->len;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)v[i];
        d[4 * i] = (uint8_t)u;
        d[4 * i + 1] = (uint8_t)(u >> 8);
        d[4 * i + 2] = (uint8_t)(u >> 16);
        d[4 * i + 3] = (uint8_t)(u >> 24);
    }
    o->len += n * 4;
}

void dl_pos_get_bytes(dl_pos_in *in, void *p, size_t n) {
    if (in->failed || n > in->len - in->pos) {
        in->failed = true;
        memset(p, 0, n);
        return;
    }
    memcpy(p, in->data + in->pos, n);
    in->pos += n;
}

uint64_t dl_pos_get_u64(dl_pos_in *in) {
    uint8_t b[8];
    dl_pos_get_bytes(in, b, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

uint64_t dl_pos_get_count(dl_pos_in *in, uint64_t max) {
    uint64_t v = dl_pos_get_u64(in);
    if (v > max) {
        in->failed = true;
        return 0;
    }
    return v;
}

void dl_pos_get_i32s(dl_pos_in *in, int32_t *v, size_t n) {
    if (in->failed || n > (in->len - in->pos) / 4) {
        in->failed = true;
        memset(v, 0, n * sizeof *v);
        return;
    }
    const uint8_t *d = in->data + in->pos;
    for (size_t i = 0; i < n; i++)
        v[i] = (int32_t)((uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 |
                         (uint32_t)d[4 * i + 2] << 16 | (uint32_t)d[4 * i + 3] << 24);
    in->pos += n * 4;
}

void dl_pos_put_example(dl_pos_out *o, const dl_example *ex) {
    dl_pos_put_u64(o, (uint64_t)ex->len);
    dl_pos_put_u64(o, (uint64_t)ex->sop);
    dl_pos_put_i32s(o, ex->ids, (size_t)ex->len);
    dl_pos_put_i32s(o, ex->type_ids, (size_t)ex->len);
}

int dl_pos_get_example(dl_pos_in *in, size_t max_len, size_t vocab_size, dl_example *ex) {
    memset(ex, 0, sizeof *ex);
    size_t len = (size_t)dl_pos_get_count(in, max_len);
    uint64_t sop = dl_pos_get_u64(in);
    if (in->failed || sop > 1) return dl_fail("the saved state is truncated or malformed (an example)");
    ex->len = (int32_t)len;
    ex->sop = (int32_t)sop;
    /* One allocation for both arrays, as dl_make_pairs makes them. */
    ex->ids = dl_malloc((len ? 2 * len : 2) * sizeof *ex->ids);
    if (!ex->ids) return -1;
    ex->type_ids = ex->ids + len;
    dl_pos_get_i32s(in, ex->ids, len);
    dl_pos_get_i32s(in, ex->type_ids, len);
    for (size_t i = 0; i < len && !in->failed; i++)
        if (ex->ids[i] < 0 || (size_t)ex->ids[i] >= vocab_size || ex->type_ids[i] < 0 ||
            ex->type_ids[i] > 1)
            in->failed = true;
    if (in->failed) {
        dl_example_free(ex);
        return dl_fail("the saved state is truncated or malformed (an example)");
    }
    return 0;
}

void dl_pos_put_position(dl_pos_out *o, const dl_doc_position *p) {
    dl_pos_put_u64(o, p->pos);
    dl_pos_put_u64(o, (uint64_t)p->first_pass | (uint64_t)p->open << 1 | (uint64_t)p->gzip << 2 |
                            (uint64_t)p->check.done << 3);
    dl_pos_put_u64(o, p->offset);
    dl_pos_put_u64(o, p->tail_len);
    dl_pos_put_bytes(o, p->tail, p->tail_len);
    dl_pos_put_u64(o, p->check.bytes);
    dl_pos_put_u64(o, p->check.invalid);
    dl_pos_put_u64(o, p->check.nul);
}

void dl_pos_get_position(dl_pos_in *in, dl_doc_position *p) {
    memset(p, 0, sizeof *p);
    p->pos = dl_pos_get_u64(in);
    uint64_t flags = dl_pos_get_count(in, 15);
    p->first_pass = flags & 1;
    p->open = flags >> 1 & 1;
    p->gzip = flags >> 2 & 1;
    p->check.done = flags >> 3 & 1;
    p->offset = dl_pos_get_u64(in);
    p->tail_len = (uint32_t)dl_pos_get_count(in, DL_LINE_TAIL);
    dl_pos_get_bytes(in, p->tail, p->tail_len);
    p->check.bytes = dl_pos_get_u64(in);
    p->check.invalid = dl_pos_get_u64(in);
    p->check.nul = dl_pos_get_u64(in);
}
