/* A HELLO from the other side (first byte: are we the dialler?), then an
 * AUTH signature: refused or accepted without crashing, and a forged
 * signature is never accepted. */
#include "fuzz.h"
#include "net/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    static struct dl_identity id;
    static bool have_id;
    if (!have_id) {
        if (dl_identity_load(NULL, &id)) abort();
        have_id = true;
    }
    if (size < 1) return 0;
    struct dl_handshake hs;
    if (dl_handshake_begin(&hs, data[0] & 1, &id, "fuzz-run", data[0] & 2)) abort();
    size_t n = size - 1;
    uint8_t *body = (uint8_t *)fuzz_copy(data + 1, n, false);
    struct dl_seal rx, tx;
    if (dl_handshake_on_hello(&hs, body, n, &rx, &tx) == 0) {
        /* A signature taken from the input itself is a forgery: the
         * transcript holds our fresh nonce. */
        uint8_t sig[DL_WIRE_SIG];
        memset(sig, 0, sizeof sig);
        memcpy(sig, body, n < DL_WIRE_SIG ? n : DL_WIRE_SIG);
        FUZZ_ASSERT(dl_handshake_verify(&hs, sig) != 0);
    }
    dl_handshake_clear(&hs);
    free(body);
    return 0;
}
