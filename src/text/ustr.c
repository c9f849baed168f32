/* Code point strings, UTF-8 conversion with replacement of invalid input, and
 * the character classes HF tokenizers takes from Rust's char methods. */
#include <string.h>
#include <utf8proc.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

int dl_ustr_reserve(dl_ustr *s, size_t cap) {
    if (cap <= s->cap) return 0;
    size_t n = s->cap ? s->cap : 64;
    while (n < cap) n *= 2;
    uint32_t *p = dl_realloc(s->cp, dl_mul_size(n, sizeof(uint32_t)));
    if (!p) return -1;
    s->cp = p;
    s->cap = n;
    return 0;
}

int dl_ustr_push(dl_ustr *s, uint32_t c) {
    if (s->len == s->cap && dl_ustr_reserve(s, s->len + 1)) return -1;
    s->cp[s->len++] = c;
    return 0;
}

int dl_ustr_append(dl_ustr *s, const uint32_t *cp, size_t n) {
    if (dl_ustr_reserve(s, s->len + n)) return -1;
    if (n) memcpy(s->cp + s->len, cp, n * sizeof(uint32_t));
    s->len += n;
    return 0;
}

void dl_ustr_free(dl_ustr *s) {
    free(s->cp);
    memset(s, 0, sizeof(*s));
}

void dl_ustr_swap(dl_ustr *a, dl_ustr *b) {
    dl_ustr t = *a;
    *a = *b;
    *b = t;
}

/* Length of the valid prefix of a UTF-8 sequence starting at p (Unicode 15
 * Table 3-7); returns the full length when valid, else the length of the
 * maximal subpart (>= 1) with *valid = false. */
static size_t utf8_sequence(const unsigned char *p, size_t avail, uint32_t *cp, bool *valid) {
    unsigned char b0 = p[0];
    *valid = false;
    if (b0 < 0x80) {
        *cp = b0;
        *valid = true;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
        c = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 1;
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= avail) return i;
        unsigned char b = p[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    *valid = true;
    return need;
}

int dl_utf8_decode(const char *text, size_t len, dl_ustr *out, size_t *invalid) {
    if (len > DL_TEXT_MAX_INPUT) return dl_fail("text of %zu bytes is too long (limit %zu)", len, DL_TEXT_MAX_INPUT);
    if (dl_ustr_reserve(out, out->len + len)) return -1;
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            out->cp[out->len++] = p[i++];
            continue;
        }
        uint32_t c = 0;
        bool valid;
        size_t n = utf8_sequence(p + i, len - i, &c, &valid);
        if (!valid) {
            c = 0xFFFD;
            if (invalid) (*invalid)++;
        }
        out->cp[out->len++] = c;
        i += n;
    }
    return 0;
}

int dl_utf8_encode(const uint32_t *cp, size_t n, char **buf, size_t *cap, size_t *len) {
    size_t need = dl_mul_size(n, 4);
    if (need == SIZE_MAX) return -1;
    need += 1;
    if (need > *cap) {
        char *p = dl_realloc(*buf, need);
        if (!p) return -1;
        *buf = p;
        *cap = need;
    }
    unsigned char *o = (unsigned char *)*buf;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        if (c < 0x80) {
            o[k++] = (unsigned char)c;
        } else if (c < 0x800) {
            o[k++] = (unsigned char)(0xC0 | (c >> 6));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            o[k++] = (unsigned char)(0xE0 | (c >> 12));
            o[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        } else {
            o[k++] = (unsigned char)(0xF0 | (c >> 18));
            o[k++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            o[k++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            o[k++] = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    o[k] = 0;
    *len = k;
    return 0;
}

int dl_utf8_to_cps(const char *s, uint32_t **cp, size_t *n) {
    dl_ustr u = {0};
    size_t bad = 0;
    if (dl_utf8_decode(s, strlen(s), &u, &bad)) return -1;
    if (!u.cp && dl_ustr_reserve(&u, 1)) return -1;
    *cp = u.cp;
    *n = u.len;
    return 0;
}

/* ---- character classes ------------------------------------------------------ */

bool dl_uc_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static utf8proc_category_t category(uint32_t c) {
    return c > 0x10FFFF ? UTF8PROC_CATEGORY_CN : utf8proc_category((utf8proc_int32_t)c);
}

bool dl_uc_is_punctuation(uint32_t c) {
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    utf8proc_category_t k = category(c);
    return (k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO) != dl_uc_compat(DL_UC_PUNCT, c);
}

bool dl_uc_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool dl_uc_is_alphanumeric(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    utf8proc_category_t k = category(c);
    /* Rust's is_alphabetic is the Alphabetic property: letters, Nl and the
     * Other_Alphabetic marks; approximated by L*, Nl and spacing/nonspacing marks. */
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool dl_uc_is_mark(uint32_t c) {
    utf8proc_category_t k = category(c);
    return (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) != dl_uc_compat(DL_UC_MARK, c);
}

bool dl_uc_is_nonspacing_mark(uint32_t c) {
    return (category(c) == UTF8PROC_CATEGORY_MN) != dl_uc_compat(DL_UC_NONSPACING, c);
}

bool dl_uc_is_word(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
    if (c == 0x200C || c == 0x200D) return true; /* Join_Control */
    /* Other_Alphabetic symbols: circled and squared Latin letters */
    if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
        (c >= 0x1F170 && c <= 0x1F189))
        return true;
    utf8proc_category_t k = category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

bool dl_uc_is_control(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    utf8proc_category_t k = category(c);
    return (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO) !=
           dl_uc_compat(DL_UC_CONTROL, c);
}

bool dl_uc_is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int dl_uc_lower(uint32_t c, uint32_t out[2]) {
    if (c < 0x80) {
        out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return 1;
    }
    if (c == 0x130) { /* the one char whose full lowercase mapping is two chars */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    out[0] = c > 0x10FFFF ? c : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}
