/* Wire format of the dedloc protocol (docs/protocol.md): frame headers,
 * authenticated encryption of frame bodies, and the msgpack bodies of every
 * message. Pure functions on byte buffers, shared by the event loop and the
 * tests (which play hostile peers with them). */
#ifndef DEDLOC_NET_WIRE_H
#define DEDLOC_NET_WIRE_H

#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/net.h"
#include "net/msgpack_fields.h"

#define DL_WIRE_MAGIC0 0xD1
#define DL_WIRE_MAGIC1 0x0C
/* 2: the averaging round's audit messages changed size (projections carry
 * r = x.q, docs/protocol.md, accountable aggregation): a peer of version 1
 * would read them as malformed, so the two are refused at the handshake. */
#define DL_WIRE_VERSION 2
#define DL_WIRE_HEADER 8
#define DL_WIRE_TAG crypto_aead_chacha20poly1305_ietf_ABYTES
#define DL_WIRE_PK 32
#define DL_WIRE_SIG 64
#define DL_WIRE_NONCE 32
#define DL_WIRE_METHOD_MAX 64
#define DL_WIRE_RUN_ID_MAX 128
#define DL_WIRE_MAX_RECORDS 1024

enum dl_msg_type {
    DL_MSG_HELLO = 0x01,     /* clear: identity, ephemeral kx key, nonce */
    DL_MSG_AUTH = 0x02,      /* sealed: signature over the handshake transcript */
    DL_MSG_ERROR = 0x03,     /* clear before auth, sealed after: code, text, our version */
    DL_MSG_PING = 0x10,
    DL_MSG_PONG = 0x11,
    DL_MSG_RECORDS = 0x12,   /* signed progress/peer records (exchange and gossip) */
    DL_MSG_REVOCATIONS = 0x13, /* the run authority's signed revocation list (gossip) */
    DL_MSG_REQUEST = 0x20,
    DL_MSG_RESPONSE = 0x21,
    DL_MSG_CANCEL = 0x22,
};

enum dl_wire_error {
    DL_ERR_VERSION = 1,      /* unsupported protocol version */
    DL_ERR_RUN = 2,          /* different run id */
    DL_ERR_PROTOCOL = 3,     /* malformed or unexpected message */
    DL_ERR_AUTH = 4,         /* handshake signature invalid */
    DL_ERR_BANNED = 5,
    DL_ERR_SELF = 6,         /* connected to ourselves */
    DL_ERR_DUPLICATE = 7,    /* a connection to this peer exists already */
    DL_ERR_BUSY = 8,         /* too many connections */
    DL_ERR_ADMISSION = 9,
    DL_ERR_MANIFEST = 10,    /* a different run manifest (or none where the other has one) */    /* not admitted: no valid token, revoked, not on the allowlist */
};

struct dl_frame_header {
    uint8_t version;
    uint8_t type;
    uint32_t length;         /* body bytes that follow (ciphertext + tag when sealed) */
};

/* Parse results of dl_frame_parse_header. */
enum { DL_FRAME_OK = 0, DL_FRAME_NEED_MORE = 1, DL_FRAME_BAD_MAGIC = -1,
       DL_FRAME_BAD_VERSION = -2, DL_FRAME_TOO_LARGE = -3 };

void dl_frame_write_header(uint8_t out[DL_WIRE_HEADER], uint8_t type, uint32_t length);
/* Checks magic, version and the length against max_body before anything is
 * allocated. On DL_FRAME_BAD_VERSION the header is still filled in. */
int dl_frame_parse_header(const uint8_t *data, size_t size, uint32_t max_body,
                          struct dl_frame_header *header);

/* Per-direction AEAD state (ChaCha20-Poly1305 IETF, nonce = counter). */
struct dl_seal {
    uint8_t key[crypto_kx_SESSIONKEYBYTES];
    uint64_t counter;
};
/* Writes header + ciphertext + tag into out (DL_WIRE_HEADER + size + DL_WIRE_TAG
 * bytes); the header is authenticated as associated data. */
void dl_frame_seal(struct dl_seal *seal, uint8_t type, const uint8_t *body, size_t size,
                   uint8_t *out);
/* Decrypts a sealed body in place; -1 if it was tampered with (or reordered).
 * *size becomes the plaintext length. */
int dl_frame_open(struct dl_seal *seal, const uint8_t header[DL_WIRE_HEADER], uint8_t *body,
                  size_t *size);


/* ---- messages ---------------------------------------------------------- */
struct dl_msg_hello {
    uint32_t version;
    char run_id[DL_WIRE_RUN_ID_MAX];
    uint8_t sign_pk[DL_WIRE_PK];
    uint8_t kx_pk[DL_WIRE_PK];
    uint8_t nonce[DL_WIRE_NONCE];
    bool client_mode;
    bool has_manifest;        /* manifest_hash is set (docs/manifest.md) */
    uint8_t manifest_hash[32];
    bool fetch_only;          /* a newcomer asking only for the run files */
};
struct dl_msg_error {
    uint32_t code;
    uint32_t version;
    char text[128];
};
struct dl_msg_request {
    uint64_t id;
    char method[DL_WIRE_METHOD_MAX];
    double timeout_s;
    bool compressed;
    uint64_t raw_size;        /* size after decompression */
    const uint8_t *payload;   /* points into the decoded buffer */
    size_t size;
};
struct dl_msg_response {
    uint64_t id;
    uint32_t status;
    bool compressed;
    uint64_t raw_size;
    const uint8_t *payload;
    size_t size;
};

/* Encoders return a malloc'd msgpack body (*size bytes) or NULL. */
uint8_t *dl_msg_hello_encode(const struct dl_msg_hello *m, size_t *size);
int dl_msg_hello_decode(const uint8_t *data, size_t size, struct dl_msg_hello *m);
/* AUTH carries the handshake signature and our admission token (binary
 * form; token_size 0 = none). The decoded token points into data. */
uint8_t *dl_msg_auth_encode(const uint8_t sig[DL_WIRE_SIG], const uint8_t *token, size_t token_size,
                            size_t *size);
int dl_msg_auth_decode(const uint8_t *data, size_t size, uint8_t sig[DL_WIRE_SIG], const uint8_t **token,
                       size_t *token_size);
uint8_t *dl_msg_error_encode(const struct dl_msg_error *m, size_t *size);
int dl_msg_error_decode(const uint8_t *data, size_t size, struct dl_msg_error *m);
uint8_t *dl_msg_ping_encode(uint64_t nonce, size_t *size);
int dl_msg_ping_decode(const uint8_t *data, size_t size, uint64_t *nonce);
/* RECORDS: an array of signed record blobs. The decoder calls fn for each
 * blob (pointing into data) and stops at the first nonzero return. */
uint8_t *dl_msg_records_encode(const uint8_t *const *blobs, const size_t *sizes, size_t count,
                               size_t *size);
int dl_msg_records_decode(const uint8_t *data, size_t size,
                          int (*fn)(void *user, const uint8_t *blob, size_t blob_size), void *user);
uint8_t *dl_msg_request_encode(const struct dl_msg_request *m, size_t *size);
/* m->payload points into data. */
int dl_msg_request_decode(const uint8_t *data, size_t size, struct dl_msg_request *m);
uint8_t *dl_msg_response_encode(const struct dl_msg_response *m, size_t *size);
int dl_msg_response_decode(const uint8_t *data, size_t size, struct dl_msg_response *m);
/* REVOCATIONS: [list bin], the list's binary form (points into data). */
uint8_t *dl_msg_revocations_encode(const uint8_t *list, size_t list_size, size_t *size);
int dl_msg_revocations_decode(const uint8_t *data, size_t size, const uint8_t **list, size_t *list_size);
uint8_t *dl_msg_cancel_encode(uint64_t id, size_t *size);
int dl_msg_cancel_decode(const uint8_t *data, size_t size, uint64_t *id);

/* zlib for bulk payloads: compresses when it saves at least an eighth (else
 * returns 1 and leaves *out NULL). dl_wire_inflate refuses output larger than
 * raw_size or different from it. */
int dl_wire_deflate(const uint8_t *data, size_t size, uint8_t **out, size_t *out_size);
int dl_wire_inflate(const uint8_t *data, size_t size, uint64_t raw_size, uint64_t max_size,
                    uint8_t **out);

/* ---- identity ------------------------------------------------------------ */
struct dl_identity {
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    uint8_t sk[crypto_sign_SECRETKEYBYTES];
    char peer_id[DL_PEER_ID_HEX];
};
/* Loads the identity file, or creates it (mode 0600) when absent. path NULL:
 * a fresh key kept in memory only. Refuses files readable by others. */
int dl_identity_load(const char *path, struct dl_identity *id);
void dl_peer_id_from_pk(const uint8_t pk[DL_WIRE_PK], char out[DL_PEER_ID_HEX]);

/* ---- handshake -------------------------------------------------------------
 * Both sides send HELLO at once, derive session keys with crypto_kx (the
 * dialler is the kx client), then send AUTH: an ed25519 signature over
 * "dedloc-auth-v1", the signer's role and BLAKE2b(hello_dialler || hello_listener).
 * The transcript covers both nonces and both ephemeral keys, so a signature
 * proves possession of the identity key for this very connection. */
struct dl_handshake {
    bool outbound;
    uint8_t kx_pk[crypto_kx_PUBLICKEYBYTES];
    uint8_t kx_sk[crypto_kx_SECRETKEYBYTES];
    uint8_t *my_hello;        /* encoded body of our HELLO */
    size_t my_hello_size;
    uint8_t transcript[32];
    struct dl_msg_hello peer;
};
/* Prepares our HELLO (generates the ephemeral key and nonce). */
int dl_handshake_begin(struct dl_handshake *hs, bool outbound, const struct dl_identity *id,
                       const char *run_id, bool client_mode);
/* The same with the run manifest's hash (NULL: none) and the fetch-only flag
 * of dl_net_config. */
int dl_handshake_begin_ex(struct dl_handshake *hs, bool outbound, const struct dl_identity *id,
                          const char *run_id, bool client_mode, const uint8_t *manifest_hash, bool fetch_only);
/* Takes the peer's HELLO body: derives rx/tx and the transcript. */
int dl_handshake_on_hello(struct dl_handshake *hs, const uint8_t *body, size_t size,
                          struct dl_seal *rx, struct dl_seal *tx);
void dl_handshake_sign(const struct dl_handshake *hs, const struct dl_identity *id,
                       uint8_t sig[DL_WIRE_SIG]);
/* Verifies the peer's AUTH signature against its HELLO key. */
int dl_handshake_verify(const struct dl_handshake *hs, const uint8_t sig[DL_WIRE_SIG]);
void dl_handshake_clear(struct dl_handshake *hs);

#endif
