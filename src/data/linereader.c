/* Splits the decoded byte stream into lines ("\n" or "\r\n"). Lines longer
 * than max_line are skipped whole and counted, so one runaway line cannot
 * exhaust memory. */
#include <string.h>

#include "data/data_internal.h"

enum { LR_CHUNK = 64 * 1024 };

struct dl_linereader {
    dl_gzreader *gz;
    size_t max_line;
    uint64_t *skipped;
    char *buf;        /* [cap + 1] */
    size_t cap, start, len; /* unread bytes are buf[start, len) */
    bool eof;
    bool overlong;    /* dropping the rest of an over-long line */
};

int dl_linereader_new(dl_gzreader *gz, size_t max_line, uint64_t *skipped_lines,
                      dl_linereader **out) {
    dl_linereader *lr = dl_calloc(1, sizeof *lr);
    if (!lr) return -1;
    lr->gz = gz;
    lr->max_line = max_line ? max_line : (size_t)4 << 20;
    lr->skipped = skipped_lines;
    lr->cap = LR_CHUNK * 2;
    lr->buf = dl_malloc(lr->cap + 1);
    if (!lr->buf) {
        free(lr);
        return -1;
    }
    *out = lr;
    return 0;
}

/* Reads more bytes after the unread ones; *reset when the unread bytes were
 * dropped for a discontinuity. 0 ok, -1 failure. */
static int fill(dl_linereader *lr, bool *reset) {
    if (lr->start > 0) {
        memmove(lr->buf, lr->buf + lr->start, lr->len - lr->start);
        lr->len -= lr->start;
        lr->start = 0;
    }
    if (lr->cap - lr->len < LR_CHUNK) {
        size_t cap = lr->cap * 2;
        char *grown = dl_realloc(lr->buf, cap + 1);
        if (!grown) return -1;
        lr->buf = grown;
        lr->cap = cap;
    }
    long n = dl_gzreader_read(lr->gz, lr->buf + lr->len, lr->cap - lr->len);
    if (n < 0) return -1;
    *reset = false;
    if (dl_gzreader_take_discontinuity(lr->gz)) {
        /* The partial line before the damage is not trustworthy; what was
         * just read comes after it and starts afresh. */
        memmove(lr->buf, lr->buf + lr->len, (size_t)n);
        lr->start = lr->len = 0;
        lr->overlong = false;
        *reset = true;
    }
    if (n == 0) lr->eof = true;
    lr->len += (size_t)n;
    return 0;
}

int dl_linereader_next(dl_linereader *lr, const char **line, size_t *len) {
    size_t scanned = 0; /* bytes of the current line already searched for '\n' */
    for (;;) {
        char *begin = lr->buf + lr->start;
        size_t avail = lr->len - lr->start;
        char *nl = memchr(begin + scanned, '\n', avail - scanned);
        if (nl || (lr->eof && avail > 0)) {
            size_t n = nl ? (size_t)(nl - begin) : avail;
            lr->start += nl ? n + 1 : n;
            if (lr->overlong) {
                lr->overlong = false;
                scanned = 0;
                continue;
            }
            if (n > 0 && begin[n - 1] == '\r') n--;
            /* A long line that arrived whole in one read is over the limit too. */
            if (n > lr->max_line) {
                if (lr->skipped) (*lr->skipped)++;
                scanned = 0;
                continue;
            }
            begin[n] = 0;
            *line = begin;
            *len = n;
            return 1;
        }
        if (lr->eof) return 0;
        scanned = avail;
        if (avail > lr->max_line) {
            if (!lr->overlong && lr->skipped) (*lr->skipped)++;
            lr->overlong = true;
            lr->start = lr->len; /* drop what we have of it */
            scanned = 0;
        }
        bool reset;
        if (fill(lr, &reset)) return -1;
        if (reset) scanned = 0;
    }
}

void dl_linereader_free(dl_linereader *lr) {
    if (!lr) return;
    free(lr->buf);
    free(lr);
}
