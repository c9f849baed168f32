/* Documents from a shard file: JSON lines (the document in "text"), plain
 * lines or paragraphs, chosen by the first byte. Every document handed out is
 * non-empty and bounded. The shard is an in-memory file (memfd). */
#include <sys/mman.h>
#include <unistd.h>

#include "data/data_internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 1) return 0;
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz-shard", 0);
    if (fd < 0) abort();
    if (ftruncate(fd, 0) || (size > 1 && pwrite(fd, data + 1, size - 1, 0) != (ssize_t)(size - 1))) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *shards[1] = {path};
    static const enum dl_data_format formats[] = {DL_DATA_JSONL, DL_DATA_TEXT, DL_DATA_PARAGRAPHS};
    size_t max_line = 4096;
    dl_data_stats counters;
    memset(&counters, 0, sizeof counters);
    dl_data_io io = {.timeout_s = 5, .max_retries = 0, .retry_base_s = 0.01, .retry_max_s = 0.01,
                     .counters = &counters};
    dl_docreader *dr = NULL;
    if (dl_docreader_new(shards, 1, 0, formats[data[0] % 3], "text", max_line, &io, &dr)) abort();
    const char *text;
    size_t len;
    int r, docs = 0;
    while ((r = dl_docreader_next(dr, &text, &len)) == 1 && docs++ < 100000)
        FUZZ_ASSERT(len > 0 && len <= size + max_line);
    dl_docreader_free(dr);
    return 0;
}
