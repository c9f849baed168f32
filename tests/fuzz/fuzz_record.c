/* Signed progress records as they arrive in RECORDS: parsed, prechecked
 * against the table (duplicates, tombstones, time, rates), verified (or
 * refused) and merged into a small swarm table without crashing; an accepted
 * record holds only finite, non-negative numbers and a bounded token. */
#include <math.h>

#include "fuzz.h"
#include "net/swarm.h"
#include "net/wire.h"

static int apply_blob(void *user, const uint8_t *blob, size_t n) {
    struct dl_swarm *sw = user;
    struct dl_record r;
    if (dl_record_parse(blob, n, "fuzz-run", &r)) return 0;
    FUZZ_ASSERT(r.token_size <= sizeof r.token);
    if (dl_swarm_precheck(sw, &r, 1.0, r.time, 60) != DL_SWARM_NEWS) return 0;
    if (dl_record_check_signature(blob, n, &r) == 0) {
        FUZZ_ASSERT(isfinite(r.samples) && r.samples >= 0 && isfinite(r.samples_per_second) &&
                    r.samples_per_second >= 0 && isfinite(r.time));
        dl_swarm_apply(sw, &r, blob, n, 1.0);
        dl_swarm_expire(sw, 100.0, 60, NULL); /* tombstones */
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
