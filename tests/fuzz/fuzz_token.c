/* Admission tokens (binary and text form) and revocation lists: refused or
 * accepted without crashing; an accepted token re-encodes to itself. */
#include "dedloc/net.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 1) return 0;
    size_t n = size - 1;
    uint8_t *body = (uint8_t *)fuzz_copy(data + 1, n, false);
    switch (data[0] % 3) {
    case 0: {
        struct dl_token t;
        if (dl_token_decode(body, n, &t) == 0) {
            FUZZ_ASSERT(t.role >= DL_ROLE_TRAINER && t.role <= DL_ROLE_MONITOR && strlen(t.peer_id) == 32);
            char text[DL_TOKEN_TEXT_MAX];
            uint8_t back[DL_TOKEN_MAX_BYTES];
            size_t back_n = 0;
            FUZZ_ASSERT(dl_token_to_text(body, n, text) == 0 && dl_token_from_text(text, back, &back_n) == 0);
            FUZZ_ASSERT(back_n == n && !memcmp(back, body, n));
            dl_token_check(&t, t.authority_pk, t.run_id, t.peer_id, 0);
        }
        break;
    }
    case 1: {
        char *text = fuzz_copy(data + 1, n, true);
        uint8_t bin[DL_TOKEN_MAX_BYTES];
        size_t bin_n = 0;
        struct dl_token t;
        if (dl_token_from_text(text, bin, &bin_n) == 0) {
            FUZZ_ASSERT(bin_n <= DL_TOKEN_MAX_BYTES);
            dl_token_decode(bin, bin_n, &t);
        }
        free(text);
        break;
    }
    case 2: {
        struct dl_revocations r;
        if (dl_revocations_decode(body, n, &r) == 0) {
            FUZZ_ASSERT(r.count * 16 < n);
            dl_revocations_contains(&r, "00112233445566778899aabbccddeeff");
            dl_revocations_free(&r);
        }
        break;
    }
    }
    free(body);
    return 0;
}
