/* msgpack helpers shared by the encoders and decoders of src/net. */
#ifndef DEDLOC_NET_MSGPACK_FIELDS_H
#define DEDLOC_NET_MSGPACK_FIELDS_H

#include <msgpack.h>

/* Elements (of any nesting) a message body may hold: a RECORDS message of
 * 1024 records is the largest (1025). */
#define DL_MSGPACK_MAX_OBJECTS 2048
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Walks a buffer without allocating and refuses anything a decoder would be
 * unwise to trust: containers that claim more elements than bytes remain,
 * nesting deeper than 16, reserved byte 0xC1, trailing bytes. Every decoder
 * runs it first, so msgpack-c never allocates more than a small multiple of
 * the input. */
int dl_msgpack_check(const uint8_t *data, size_t size);

/* ---- encoding: a growing buffer and a packer over it ---- */
struct dl_enc {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
};
void dl_enc_init(struct dl_enc *e);
/* The packed bytes in a malloc'd buffer (NULL on allocation failure); frees e. */
uint8_t *dl_enc_finish(struct dl_enc *e, size_t *size);
void dl_pack_str(msgpack_packer *pk, const char *s);
void dl_pack_bin(msgpack_packer *pk, const void *p, size_t n);

/* ---- decoding: one msgpack array, fields checked by type and bound ---- */
struct dl_dec {
    msgpack_unpacked und;
    const msgpack_object *fields;
    uint32_t count;
    const uint8_t *data;
    size_t size;
};
/* Decodes one array of at least min_fields (extra trailing fields are
 * ignored so later versions may append); `what` names it in errors. */
int dl_dec_begin(struct dl_dec *d, const uint8_t *data, size_t size, uint32_t min_fields, const char *what);
void dl_dec_end(struct dl_dec *d);
int dl_dec_u64(const struct dl_dec *d, uint32_t i, uint64_t *v, const char *what);
int dl_dec_u32(const struct dl_dec *d, uint32_t i, uint32_t *v, const char *what);
/* A finite number within +-1e300 (integers accepted). */
int dl_dec_f64(const struct dl_dec *d, uint32_t i, double *v, const char *what);
int dl_dec_bool(const struct dl_dec *d, uint32_t i, bool *v, const char *what);
/* A string copied into out (NUL-terminated), refusing NULs and overlength. */
int dl_dec_str(const struct dl_dec *d, uint32_t i, char *out, size_t cap, const char *what);
/* A binary field pointing into the decoded buffer. */
int dl_dec_bin(const struct dl_dec *d, uint32_t i, const uint8_t **p, size_t *n, const char *what);
int dl_dec_bin_exact(const struct dl_dec *d, uint32_t i, uint8_t *out, size_t n, const char *what);

#endif
