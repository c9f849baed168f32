/* Signed progress records as they arrive in RECORDS: verified (or refused)
 * and merged into a small swarm table without crashing; an accepted record
 * holds only finite, non-negative numbers. */
#include <math.h>

#include "fuzz.h"
#include "net/swarm.h"
#include "net/wire.h"

static int apply_blob(void *user, const uint8_t *blob, size_t n) {
    struct dl_swarm *sw = user;
    struct dl_record r;
    if (dl_record_verify(blob, n, "fuzz-run", &r) == 0) {
        FUZZ_ASSERT(isfinite(r.samples) && r.samples >= 0 && isfinite(r.samples_per_second) &&
                    r.samples_per_second >= 0 && isfinite(r.time));
        dl_swarm_apply(sw, &r, blob, n, 1.0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    uint8_t *body = (uint8_t *)fuzz_copy(data, size, false);
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    /* the input as one blob, then as a RECORDS body */
    apply_blob(&sw, body, size);
    dl_msg_records_decode(body, size, apply_blob, &sw);
    struct dl_swarm_view v;
    if (dl_swarm_compute(&sw, 2.0, 4096, NULL, &v) == 0) dl_swarm_view_free(&v);
    dl_swarm_free(&sw);
    free(body);
    return 0;
}
