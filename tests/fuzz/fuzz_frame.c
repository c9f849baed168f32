/* Frame headers and sealed bodies from the network: the header parser never
 * reads past the input and agrees with the documented layout; opening a body
 * either fails or yields exactly what was sealed. */
#include "fuzz.h"
#include "net/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    struct dl_frame_header h;
    int rc = dl_frame_parse_header(data, size, 1u << 20, &h);
    if (rc == DL_FRAME_OK) {
        /* independent reading of docs/protocol.md's header */
        FUZZ_ASSERT(size >= DL_WIRE_HEADER && data[0] == DL_WIRE_MAGIC0 && data[1] == DL_WIRE_MAGIC1);
        uint32_t len = (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7];
        FUZZ_ASSERT(h.type == data[3] && h.length == len && len <= (1u << 20));
    }
    if (size < DL_WIRE_HEADER) return 0;
    /* The rest as a sealed body under a fixed key: garbage never opens. */
    struct dl_seal rx;
    memset(&rx, 0x5a, sizeof rx.key);
    rx.counter = 0;
    size_t n = size - DL_WIRE_HEADER;
    uint8_t *body = (uint8_t *)fuzz_copy(data + DL_WIRE_HEADER, n, false);
    if (dl_frame_open(&rx, data, body, &n) == 0) FUZZ_ASSERT(n + DL_WIRE_TAG == size - DL_WIRE_HEADER);
    free(body);
    /* Sealing the input and opening it again gives it back. */
    struct dl_seal tx;
    memset(&tx, 0x33, sizeof tx.key);
    tx.counter = 7;
    struct dl_seal rx2 = tx;
    size_t plain = size > 4096 ? 4096 : size;
    uint8_t *frame = malloc(DL_WIRE_HEADER + plain + DL_WIRE_TAG);
    if (!frame) abort();
    dl_frame_seal(&tx, data[0], data, plain, frame);
    size_t opened = plain + DL_WIRE_TAG;
    FUZZ_ASSERT(dl_frame_open(&rx2, frame, frame + DL_WIRE_HEADER, &opened) == 0);
    FUZZ_ASSERT(opened == plain && (plain == 0 || !memcmp(frame + DL_WIRE_HEADER, data, plain)));
    free(frame);
    return 0;
}
