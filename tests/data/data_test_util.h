/* Helpers for the data tests: temporary folders, files, gzip members and a
 * tiny hand-made text model that stands in for a tokenizer.
 *
 * The model: ids 0..4 are <pad> <unk> [CLS] [SEP] [MASK], 5..9 more special
 * tokens; a whitespace-separated word that is a number N < 490 becomes the
 * single piece 10 + N (so numbers keep their order in ids); any other word
 * becomes a word-start piece in [10, 500) and, if longer than 4 bytes, a
 * continuation piece in [500, 1000). Trailing . ! ? and dandas are dropped. */
#ifndef DEDLOC_DATA_TEST_UTIL_H
#define DEDLOC_DATA_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_internal.h"

enum { FAKE_VOCAB = 1000, FAKE_PAD = 0, FAKE_CLS = 2, FAKE_SEP = 3, FAKE_MASK = 4 };

static inline uint64_t fake_hash(const char *s, size_t n, uint64_t seed) {
    return dl_hash64(s, n, seed);
}

static int fake_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *count) {
    int32_t *out = malloc((len + 1) * 2 * sizeof *out);
    size_t n = 0, i = 0;
    while (i < len) {
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) i++;
        size_t start = i;
        while (i < len && text[i] != ' ' && text[i] != '\t' && text[i] != '\n') i++;
        size_t end = i;
        for (;;) {
            if (end > start && (text[end - 1] == '.' || text[end - 1] == '!' || text[end - 1] == '?'))
                end--;
            else if (end >= start + 3 && !memcmp(text + end - 3, "\xE0\xA5\xA4", 3))
                end -= 3;
            else
                break;
        }
        if (end == start) continue;
        bool number = true;
        long value = 0;
        for (size_t k = start; k < end; k++) {
            if (text[k] < '0' || text[k] > '9' || value > 100000) number = false;
            else value = value * 10 + (text[k] - '0');
        }
        if (number && value < 490) {
            out[n++] = (int32_t)(10 + value);
        } else {
            out[n++] = (int32_t)(10 + fake_hash(text + start, end - start, 1) % 490);
            if (end - start > 4) out[n++] = (int32_t)(500 + fake_hash(text + start, end - start, 2) % 500);
        }
    }
    *ids = out;
    *count = n;
    return 0;
}

static int fake_post_process(void *ctx, const int32_t *a, size_t a_len, const int32_t *b,
                             size_t b_len, int32_t **ids, int32_t **type_ids, size_t *count) {
    size_t n = a_len + b_len + 3;
    int32_t *o = malloc(n * sizeof *o), *t = malloc(n * sizeof *t);
    size_t k = 0;
    o[k] = FAKE_CLS, t[k++] = 0;
    for (size_t i = 0; i < a_len; i++) o[k] = a[i], t[k++] = 0;
    o[k] = FAKE_SEP, t[k++] = 0;
    for (size_t i = 0; i < b_len; i++) o[k] = b[i], t[k++] = 1;
    o[k] = FAKE_SEP, t[k++] = 1;
    *ids = o;
    *type_ids = t;
    *count = k;
    return 0;
}

static uint8_t fake_special[FAKE_VOCAB], fake_word_start[FAKE_VOCAB];

static inline dl_data_text fake_text(void) {
    for (int i = 0; i < FAKE_VOCAB; i++) {
        fake_special[i] = i < 10;
        fake_word_start[i] = i >= 10 && i < 500;
    }
    return (dl_data_text){NULL, fake_encode, fake_post_process, FAKE_VOCAB, fake_special,
                          fake_word_start, FAKE_PAD, FAKE_MASK};
}

/* ---- files ---------------------------------------------------------------- */
static inline char *test_tmpdir(void) {
    static char tmpl[64];
    snprintf(tmpl, sizeof tmpl, "/tmp/dedloc-data-XXXXXX");
    return mkdtemp(tmpl);
}

static inline void write_bytes(const char *path, const void *data, size_t n, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

/* One gzip member of data, malloc'd. */
static inline unsigned char *gzip_member(const char *data, size_t n, size_t *out_len) {
    z_stream zs = {0};
    deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    size_t cap = deflateBound(&zs, n) + 64;
    unsigned char *out = malloc(cap);
    zs.next_in = (unsigned char *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    deflate(&zs, Z_FINISH);
    *out_len = cap - zs.avail_out;
    deflateEnd(&zs);
    return out;
}

static inline void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
}

/* Reads every document of a source spec into one newline-joined string. */
static inline char *read_all_documents(const char *spec, enum dl_data_format format,
                                       dl_data_stats *stats, const dl_data_io *io_in) {
    dl_data_io io = io_in ? *io_in
                          : (dl_data_io){.timeout_s = 5, .max_retries = 3, .retry_base_s = 0.01,
                                         .retry_max_s = 0.05};
    io.counters = stats;
    char **shards;
    size_t count;
    if (dl_data_list_shards(spec, &io, &shards, &count)) return NULL;
    dl_docreader *dr;
    if (dl_docreader_new(shards, count, 0, format, "text", 1 << 20, &io, &dr)) return NULL;
    size_t cap = 1024, len = 0;
    char *all = malloc(cap);
    all[0] = 0;
    const char *doc;
    size_t n;
    while (dl_docreader_next(dr, &doc, &n) == 1) {
        while (len + n + 2 > cap) all = realloc(all, cap *= 2);
        memcpy(all + len, doc, n);
        len += n;
        all[len++] = '\n';
        all[len] = 0;
    }
    dl_docreader_free(dr);
    dl_data_free_shards(shards, count);
    return all;
}

#endif
