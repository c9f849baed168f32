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
    /* Positions, for resuming: buf[0] is at decoded offset base; tail holds
     * the last bytes before buf[0] (those fill() moved out), tail_len many. */
    uint64_t base;
    uint8_t tail[DL_LINE_TAIL];
    size_t tail_len;
    /* The byte the last line's terminating NUL replaced, put back before the
     * buffer is read again, so positions see the file's own bytes. */
    size_t nul_at;
    char nul_was;
    bool nul_set;
};

static void restore_terminated_byte(dl_linereader *lr) {
    if (!lr->nul_set) return;
    lr->buf[lr->nul_at] = lr->nul_was;
    lr->nul_set = false;
}

/* Appends bytes leaving the buffer to the tail, keeping its last DL_LINE_TAIL. */
static void keep_tail(dl_linereader *lr, const char *p, size_t n) {
    if (n >= DL_LINE_TAIL) {
        memcpy(lr->tail, p + n - DL_LINE_TAIL, DL_LINE_TAIL);
        lr->tail_len = DL_LINE_TAIL;
        return;
    }
    size_t keep = lr->tail_len + n > DL_LINE_TAIL ? DL_LINE_TAIL - n : lr->tail_len;
    memmove(lr->tail, lr->tail + lr->tail_len - keep, keep);
    memcpy(lr->tail + keep, p, n);
    lr->tail_len = keep + n;
}

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
    restore_terminated_byte(lr);
    if (lr->start > 0) {
        keep_tail(lr, lr->buf, lr->start);
        lr->base += lr->start;
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
        lr->base += lr->len;
        lr->tail_len = 0;
        lr->start = lr->len = 0;
        lr->overlong = false;
        *reset = true;
    }
    if (n == 0) lr->eof = true;
    lr->len += (size_t)n;
    return 0;
}

int dl_linereader_next(dl_linereader *lr, const char **line, size_t *len) {
    restore_terminated_byte(lr);
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
            lr->nul_at = (size_t)(begin - lr->buf) + n;
            lr->nul_was = begin[n];
            lr->nul_set = true;
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

uint64_t dl_linereader_position(const dl_linereader *lr, uint8_t *tail, size_t *tail_len) {
    /* The last DL_LINE_TAIL bytes before buf + start: from the buffer, topped
     * up from the saved tail. */
    size_t from_buf = lr->start < DL_LINE_TAIL ? lr->start : DL_LINE_TAIL;
    size_t from_tail = DL_LINE_TAIL - from_buf < lr->tail_len ? DL_LINE_TAIL - from_buf : lr->tail_len;
    memcpy(tail, lr->tail + lr->tail_len - from_tail, from_tail);
    memcpy(tail + from_tail, lr->buf + lr->start - from_buf, from_buf);
    if (lr->nul_set && lr->nul_at < lr->start && lr->nul_at >= lr->start - from_buf)
        tail[from_tail + lr->nul_at - (lr->start - from_buf)] = (uint8_t)lr->nul_was;
    *tail_len = from_tail + from_buf;
    return lr->base + lr->start;
}

void dl_linereader_set_base(dl_linereader *lr, uint64_t base) { lr->base = base; }

int dl_linereader_skip_to(dl_linereader *lr, uint64_t offset) {
    restore_terminated_byte(lr);
    for (;;) {
        uint64_t at = lr->base + lr->start;
        if (at > offset) return dl_fail("cannot go back to byte %llu (at %llu)",
                                        (unsigned long long)offset, (unsigned long long)at);
        uint64_t want = offset - at;
        size_t avail = lr->len - lr->start;
        size_t take = want < avail ? (size_t)want : avail;
        lr->start += take;
        if (take == want) return 0;
        if (lr->eof)
            return dl_fail("the data ends at byte %llu, before byte %llu",
                           (unsigned long long)(lr->base + lr->len), (unsigned long long)offset);
        bool reset;
        if (fill(lr, &reset)) return -1;
    }
}
