/* Frame headers and the AEAD that seals every frame after the handshake. */
#include <string.h>

#include "net/wire.h"

void dl_frame_write_header(uint8_t out[DL_WIRE_HEADER], uint8_t type, uint32_t length) {
    out[0] = DL_WIRE_MAGIC0;
    out[1] = DL_WIRE_MAGIC1;
    out[2] = DL_WIRE_VERSION;
    out[3] = type;
    out[4] = (uint8_t)(length >> 24);
    out[5] = (uint8_t)(length >> 16);
    out[6] = (uint8_t)(length >> 8);
    out[7] = (uint8_t)length;
}

int dl_frame_parse_header(const uint8_t *data, size_t size, uint32_t max_body,
                          struct dl_frame_header *header) {
    /* The magic is judged on the first bytes alone so garbage is refused
     * without waiting for a full header. */
    if (size >= 1 && data[0] != DL_WIRE_MAGIC0) return DL_FRAME_BAD_MAGIC;
    if (size >= 2 && data[1] != DL_WIRE_MAGIC1) return DL_FRAME_BAD_MAGIC;
    if (size < DL_WIRE_HEADER) return DL_FRAME_NEED_MORE;
    header->version = data[2];
    header->type = data[3];
    header->length = (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 |
                     (uint32_t)data[7];
    if (header->version != DL_WIRE_VERSION) return DL_FRAME_BAD_VERSION;
    if (header->length > max_body) return DL_FRAME_TOO_LARGE;
    return DL_FRAME_OK;
}

static void counter_nonce(uint64_t counter, uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES]) {
    memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
    for (int i = 0; i < 8; i++) nonce[4 + i] = (uint8_t)(counter >> (8 * i));
}

void dl_frame_seal(struct dl_seal *seal, uint8_t type, const uint8_t *body, size_t size,
                   uint8_t *out) {
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    counter_nonce(seal->counter++, nonce);
    dl_frame_write_header(out, type, (uint32_t)(size + DL_WIRE_TAG));
    unsigned long long clen = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt(out + DL_WIRE_HEADER, &clen, body, size, out,
                                              DL_WIRE_HEADER, NULL, nonce, seal->key);
}

int dl_frame_open(struct dl_seal *seal, const uint8_t header[DL_WIRE_HEADER], uint8_t *body,
                  size_t *size) {
    if (*size < DL_WIRE_TAG) return -1;
    uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];
    counter_nonce(seal->counter, nonce);
    unsigned long long plen = 0;
    if (crypto_aead_chacha20poly1305_ietf_decrypt(body, &plen, NULL, body, *size, header,
                                                  DL_WIRE_HEADER, nonce, seal->key) != 0)
        return -1;
    seal->counter++;
    *size = (size_t)plen;
    return 0;
}
