/* Response heads of the HTTP data source: any status, Content-Range and
 * Content-Length (split from the input at NUL bytes) give a decision that
 * keeps its invariants: a usable 206 continues exactly at the asked byte. */
#include "data/data_internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 10) return 0;
    int status = 100 + (int)((data[0] << 8 | data[1]) % 500);
    uint64_t from = 0;
    for (int i = 2; i < 10; i++) from = from << 8 | data[i];
    if (data[2] & 0x80) from &= 0xffff; /* small offsets matter most */
    char *text = fuzz_copy(data + 10, size - 10, true);
    const char *range = text;
    const char *length = text + strlen(text) + 1 <= text + (size - 10) ? text + strlen(text) + 1 : NULL;
    dl_http_head head;
    dl_http_read_head(status, range, length, from, &head);
    if (head.body_usable) {
        FUZZ_ASSERT(status == 200 || status == 206);
        FUZZ_ASSERT(head.why[0] == 0);
        if (status == 206) {
            /* the first byte the server claims is the one we asked for */
            char want[32];
            snprintf(want, sizeof want, "%llu-", (unsigned long long)from);
            FUZZ_ASSERT(strstr(range, want) != NULL && head.skip == 0);
        } else {
            FUZZ_ASSERT(head.skip == from);
        }
    } else if (status != 416) {
        FUZZ_ASSERT(head.why[0] != 0);
    }
    FUZZ_ASSERT(head.total >= -1);
    free(text);
    return 0;
}
