/* Does a shard look like text? A binary file given as --data would otherwise
 * be tokenized quietly into replacement characters and <unk>s. The first
 * bytes of each shard are checked for invalid UTF-8 and NUL bytes; a shard
 * with many of either earns one warning that names it. */
#include <inttypes.h>
#include <string.h>
#include <utf8proc.h>

#include "data/data_internal.h"

/* Enough to judge a file without slowing a large corpus. */
#define TEXT_CHECK_BYTES (64 * 1024)

void dl_text_check_reset(dl_text_check *tc) { memset(tc, 0, sizeof *tc); }

void dl_text_check_line(dl_text_check *tc, const char *line, size_t n) {
    if (tc->done) return;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)line;
    size_t left = n;
    while (left) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t used = utf8proc_iterate(p, (utf8proc_ssize_t)left, &cp);
        if (used <= 0) {
            tc->invalid++;
            used = 1;
        } else if (cp == 0) {
            tc->nul++;
        }
        p += used;
        left -= (size_t)used;
    }
    tc->bytes += n + 1; /* the line's '\n' */
}

bool dl_text_check_due(const dl_text_check *tc) { return !tc->done && tc->bytes >= TEXT_CHECK_BYTES; }

void dl_text_check_judge(dl_text_check *tc, const char *shard, bool warn) {
    if (tc->done) return;
    tc->done = true;
    uint64_t bad = tc->invalid + tc->nul;
    /* Real text has none, or a stray byte or two; 1% is far past either. */
    if (!warn || bad < 8 || bad * 100 < tc->bytes) return;
    DL_WARN("data",
            "%s does not look like UTF-8 text: %" PRIu64 " invalid UTF-8 sequences and %" PRIu64
            " NUL bytes in its first %" PRIu64 " bytes (is it a binary file? --data takes text, JSON lines, "
            "their .gz, or a folder of them)",
            shard, tc->invalid, tc->nul, tc->bytes);
}
