/* Shards as the data pipeline reads them: plain or gzip (corrupt members
 * included), split into lines of bounded length. Every line handed out is
 * NUL-terminated, holds no newline and respects the limit. */
#include "data/data_internal.h"
#include "fuzz.h"

struct mem_src {
    dl_bytesrc base;
    const uint8_t *data;
    size_t size, pos, step;
};

/* Small, varying reads exercise the readers' buffer boundaries. */
static long mem_read(dl_bytesrc *s, void *buf, size_t cap) {
    struct mem_src *m = (struct mem_src *)s;
    size_t n = m->size - m->pos;
    if (n > cap) n = cap;
    if (n > m->step) n = m->step;
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    return (long)n;
}

static void mem_close(dl_bytesrc *s) { (void)s; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 2) return 0;
    struct mem_src src;
    memset(&src, 0, sizeof src);
    src.base.read = mem_read;
    src.base.close = mem_close;
    src.size = size - 2;
    src.step = 1 + (size_t)data[0] * 64;
    uint8_t *copy = (uint8_t *)fuzz_copy(data + 2, size - 2, false);
    src.data = copy;
    size_t max_line = 16 + (size_t)data[1] * 16;
    uint64_t bad_members = 0, skipped = 0;
    dl_gzreader *gz = NULL;
    dl_linereader *lr = NULL;
    if (dl_gzreader_new(&src.base, &bad_members, &gz) || dl_linereader_new(gz, max_line, &skipped, &lr)) abort();
    const char *line;
    size_t len;
    int r;
    size_t lines = 0;
    while ((r = dl_linereader_next(lr, &line, &len)) == 1) {
        FUZZ_ASSERT(len <= max_line && line[len] == 0 && !memchr(line, '\n', len));
        if (++lines > 1000000) break;
    }
    dl_linereader_free(lr);
    dl_gzreader_free(gz);
    free(copy);
    return 0;
}
