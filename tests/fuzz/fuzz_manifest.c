/* Run manifests (what `dedloc join` gets from a peer, what --manifest reads):
 * refused or accepted without crashing. The canonical form is a fixed point
 * (its own canonical form), and an accepted manifest's hash is BLAKE2b-256 of
 * the canonical bytes. */
#include "dedloc/collab.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    char *text = fuzz_copy(data, size, true);
    char *canon = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    if (dl_manifest_canonical(text, size, &canon, &n) == 0) {
        FUZZ_ASSERT(dl_manifest_canonical(canon, n, &again, &n2) == 0);
        FUZZ_ASSERT(n2 == n && !memcmp(again, canon, n));
    }
    struct dl_manifest m;
    if (dl_manifest_parse(text, size, &m) == 0) {
        FUZZ_ASSERT(canon != NULL && m.run_id[0] && m.num_data >= 1 && m.precisions != 0);
        uint8_t h[32];
        crypto_generichash(h, sizeof h, (const uint8_t *)canon, n, NULL, 0);
        FUZZ_ASSERT(!memcmp(h, m.hash, sizeof h));
        dl_manifest_free(&m);
    }
    free(canon);
    free(again);
    free(text);
    return 0;
}
