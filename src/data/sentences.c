/* Sentence splitting, kept simple on purpose (no abbreviation lists):
 * a sentence ends
 *   - after a run of Bengali dandas U+0964 '।' / U+0965 '॥', whatever follows;
 *   - after a run of '.', '!', '?' that is followed by white space or the end
 *     ("3.14" and "e.g.x" stay whole; "Dr. Roy" is split: a known limitation);
 *   - at a newline.
 * Sentences are trimmed of ASCII white space; empty ones are dropped. */
#include <string.h>

#include "data/data_internal.h"

static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* Length of a danda at p (3 bytes of UTF-8), else 0. */
static size_t danda_at(const char *p, size_t left) {
    if (left >= 3 && (unsigned char)p[0] == 0xE0 && (unsigned char)p[1] == 0xA5 &&
        ((unsigned char)p[2] == 0xA4 || (unsigned char)p[2] == 0xA5))
        return 3;
    return 0;
}

static bool is_stop(char c) { return c == '.' || c == '!' || c == '?'; }

static int emit(const char *text, size_t start, size_t end, dl_span **spans, size_t *count,
                size_t *cap) {
    while (start < end && is_space((unsigned char)text[start])) start++;
    while (end > start && is_space((unsigned char)text[end - 1])) end--;
    if (end == start) return 0;
    if (*count == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 16;
        dl_span *grown = dl_realloc(*spans, grown_cap * sizeof *grown);
        if (!grown) return -1;
        *spans = grown;
        *cap = grown_cap;
    }
    (*spans)[(*count)++] = (dl_span){start, end - start};
    return 0;
}

int dl_split_sentences(const char *text, size_t len, dl_span **spans, size_t *count) {
    *spans = NULL;
    *count = 0;
    size_t cap = 0, start = 0, i = 0;
    while (i < len) {
        size_t d = danda_at(text + i, len - i);
        if (d) {
            i += d;
            while (i < len && (d = danda_at(text + i, len - i))) i += d;
            if (emit(text, start, i, spans, count, &cap)) goto fail;
            start = i;
            continue;
        }
        if (is_stop(text[i])) {
            size_t j = i;
            while (j < len && is_stop(text[j])) j++;
            if (j == len || is_space((unsigned char)text[j])) {
                if (emit(text, start, j, spans, count, &cap)) goto fail;
                start = j;
            }
            i = j;
            continue;
        }
        if (text[i] == '\n') {
            if (emit(text, start, i, spans, count, &cap)) goto fail;
            start = i + 1;
        }
        i++;
    }
    if (emit(text, start, len, spans, count, &cap)) goto fail;
    return 0;
fail:
    free(*spans);
    *spans = NULL;
    *count = 0;
    return -1;
}
