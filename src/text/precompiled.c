/* The Precompiled normalizer: a SentencePiece normalization charsmap (used by
 * tokenizers converted from SentencePiece models, e.g. albert-base-v2, T5).
 *
 * Layout of the decoded blob: u32 little-endian trie size in bytes, the
 * Darts double-array trie (u32 units), then NUL-separated replacement strings;
 * a trie value is the offset of the replacement. HF applies it per extended
 * grapheme cluster: a cluster shorter than 6 bytes is looked up whole (the
 * first, i.e. shortest, prefix match replaces the whole cluster), otherwise,
 * or when nothing matches, char by char. We reproduce that exactly. */
#include <string.h>
#include <utf8proc.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define MAX_CHARSMAP_BYTES ((size_t)64 << 20)

struct dl_precompiled {
    uint32_t *units;
    size_t n_units;
    char *normalized;
    size_t normalized_len;
};

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

static int b64_decode(const char *in, unsigned char **out, size_t *out_len) {
    size_t n = strlen(in);
    if (n / 4 * 3 > MAX_CHARSMAP_BYTES) return dl_fail("precompiled_charsmap larger than %zu bytes", MAX_CHARSMAP_BYTES);
    unsigned char *buf = dl_malloc(n / 4 * 3 + 3);
    if (!buf) return -1;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
        int v = b64_value(c);
        if (v < 0) {
            free(buf);
            return dl_fail("precompiled_charsmap is not base64 (byte %zu)", i);
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = buf;
    *out_len = k;
    return 0;
}

int dl_precompiled_parse(const char *base64, struct dl_precompiled **out) {
    *out = NULL;
    unsigned char *blob = NULL;
    size_t len = 0;
    if (b64_decode(base64, &blob, &len)) return -1;
    if (len < 4) {
        free(blob);
        return dl_fail("precompiled_charsmap too short (%zu bytes)", len);
    }
    uint32_t trie_bytes = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24;
    if (trie_bytes % 4 || trie_bytes > len - 4 || trie_bytes == 0) {
        free(blob);
        return dl_fail("precompiled_charsmap: trie size %u does not fit the %zu-byte blob", trie_bytes, len);
    }
    struct dl_precompiled *p = dl_calloc(1, sizeof(*p));
    if (!p) {
        free(blob);
        return -1;
    }
    p->n_units = trie_bytes / 4;
    p->units = dl_malloc(trie_bytes);
    p->normalized_len = len - 4 - trie_bytes;
    p->normalized = dl_malloc(p->normalized_len + 1);
    if (!p->units || !p->normalized) {
        free(blob);
        dl_precompiled_free(p);
        return -1;
    }
    for (size_t i = 0; i < p->n_units; i++) {
        const unsigned char *u = blob + 4 + 4 * i;
        p->units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    memcpy(p->normalized, blob + 4 + trie_bytes, p->normalized_len);
    p->normalized[p->normalized_len] = 0;
    free(blob);
    *out = p;
    return 0;
}

void dl_precompiled_free(struct dl_precompiled *p) {
    if (!p) return;
    free(p->units);
    free(p->normalized);
    free(p);
}

/* Darts unit fields. */
static bool unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xFFu); }
static uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

/* The replacement of the shortest key that prefixes s[0..n), or NULL. */
static const char *lookup(const struct dl_precompiled *p, const unsigned char *s, size_t n, size_t *out_len) {
    size_t pos = 0;
    uint32_t unit = p->units[0];
    pos ^= unit_offset(unit);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= p->n_units) return NULL;
        unit = p->units[pos];
        if (unit_label(unit) != c) return NULL;
        pos ^= unit_offset(unit);
        if (pos >= p->n_units) return NULL;
        if (unit_has_leaf(unit)) {
            uint32_t index = unit_value(p->units[pos]);
            if (index >= p->normalized_len) return NULL;
            const char *r = p->normalized + index;
            *out_len = strnlen(r, p->normalized_len - index);
            return r;
        }
    }
    return NULL;
}

static int append_utf8(dl_ustr *out, const char *s, size_t n) {
    size_t bad = 0;
    return dl_utf8_decode(s, n, out, &bad);
}

int dl_precompiled_apply(const struct dl_precompiled *p, dl_ustr *s, dl_ustr *tmp) {
    if (s->len == 0) return 0;
    char *utf8 = NULL;
    size_t cap = 0, len;
    if (dl_utf8_encode(s->cp, s->len, &utf8, &cap, &len)) return -1;
    tmp->len = 0;
    tmp->origin = 0;
    int rc = 0;
    /* byte offset of each char, to cut clusters out of the UTF-8 copy */
    size_t *off = dl_malloc(dl_mul_size(s->len + 1, sizeof(size_t)));
    if (!off) {
        free(utf8);
        return -1;
    }
    for (size_t i = 0, b = 0; i <= s->len; i++) {
        off[i] = b;
        if (i < s->len) b += s->cp[i] < 0x80 ? 1 : s->cp[i] < 0x800 ? 2 : s->cp[i] < 0x10000 ? 3 : 4;
    }
    size_t start = 0;
    utf8proc_int32_t state = 0;
    for (size_t i = 1; i <= s->len && !rc; i++) {
        bool brk = i == s->len ||
                   utf8proc_grapheme_break_stateful((utf8proc_int32_t)s->cp[i - 1], (utf8proc_int32_t)s->cp[i], &state);
        if (!brk) continue;
        const unsigned char *g = (const unsigned char *)utf8 + off[start];
        size_t glen = off[i] - off[start], rlen;
        const char *r = glen < 6 ? lookup(p, g, glen, &rlen) : NULL;
        if (r) {
            rc = append_utf8(tmp, r, rlen);
        } else {
            for (size_t j = start; j < i && !rc; j++) {
                const char *rc_r = lookup(p, (const unsigned char *)utf8 + off[j], off[j + 1] - off[j], &rlen);
                rc = rc_r ? append_utf8(tmp, rc_r, rlen) : dl_ustr_push(tmp, s->cp[j]);
            }
        }
        /* The first cluster holds the origin chars. When it maps to nothing HF
         * loses the removal and aligns the next output char with offset 0. */
        if (start == 0 && s->origin) tmp->origin = tmp->len ? tmp->len : SIZE_MAX;
        start = i;
    }
    free(off);
    free(utf8);
    if (rc) return -1;
    if (tmp->origin == SIZE_MAX) tmp->origin = tmp->len ? 1 : 0;
    dl_ustr_swap(s, tmp);
    return 0;
}
