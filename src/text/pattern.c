/* Patterns of Replace normalizers and Split pre-tokenizers: a literal string
 * or a regex. HF tokenizers uses Oniguruma; we use PCRE2 (32-bit code units,
 * so offsets are code point indices) with UTF and Unicode properties, which
 * agree on the patterns tokenizer files use (classes, lookbehind, \p{..}). */
#include <cjson/cJSON.h>
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

static int hex_value(uint32_t c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (int)((c | 0x20) - 'a' + 10);
    return -1;
}

/* Oniguruma's Unicode \w: letters, marks, decimal and letter numbers,
 * connector punctuation, the join controls and the alphabetic symbols
 * (as dl_uc_is_word). PCRE2's \w lacks the marks, which Bengali words need. */
static const char WORD_CLASS[] =
    "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}"
    "\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}";

static size_t put_ascii(uint32_t *out, size_t k, const char *s) {
    for (; *s; s++) out[k++] = (uint32_t)(unsigned char)*s;
    return k;
}

/* Rewrites the Oniguruma spellings PCRE2 reads differently: \uHHHH becomes
 * \x{HHHH}, \w and \W become Oniguruma's Unicode word class. */
static int translate_escapes(uint32_t **cps, size_t *n) {
    uint32_t *in = *cps;
    size_t cap = dl_mul_size(*n + 1, sizeof(WORD_CLASS) + 4);
    uint32_t *out = cap == SIZE_MAX ? NULL : dl_malloc(dl_mul_size(cap, sizeof(uint32_t)));
    if (!out) {
        free(in);
        return -1;
    }
    size_t k = 0;
    int class_depth = 0;
    for (size_t i = 0; i < *n; i++) {
        uint32_t c = in[i];
        if (c == '\\' && i + 1 < *n) {
            uint32_t e = in[i + 1];
            if (e == 'u' && i + 5 < *n && hex_value(in[i + 2]) >= 0 && hex_value(in[i + 3]) >= 0 &&
                hex_value(in[i + 4]) >= 0 && hex_value(in[i + 5]) >= 0) {
                k = put_ascii(out, k, "\\x{");
                for (int j = 2; j <= 5; j++) out[k++] = in[i + j];
                out[k++] = '}';
                i += 5;
                continue;
            }
            if (e == 'w' && class_depth > 0) {
                k = put_ascii(out, k, WORD_CLASS);
                i++;
                continue;
            }
            if ((e == 'w' || e == 'W') && class_depth == 0) {
                k = put_ascii(out, k, e == 'w' ? "[" : "[^");
                k = put_ascii(out, k, WORD_CLASS);
                out[k++] = ']';
                i++;
                continue;
            }
            out[k++] = in[i++]; /* keep any other escape pair intact */
            out[k++] = in[i];
            continue;
        }
        if (c == '[') {
            class_depth++;
            out[k++] = c;
            if (i + 1 < *n && in[i + 1] == '^') out[k++] = in[++i];
            if (i + 1 < *n && in[i + 1] == ']') out[k++] = in[++i]; /* a leading ] is literal */
            continue;
        }
        if (c == ']' && class_depth > 0) class_depth--;
        out[k++] = c;
    }
    free(in);
    *cps = out;
    *n = k;
    return 0;
}

int dl_pattern_parse(const cJSON *json, dl_pattern *p, const char *what) {
    memset(p, 0, sizeof(*p));
    const cJSON *lit = cJSON_GetObjectItemCaseSensitive(json, "String");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(json, "Regex");
    if (cJSON_IsString(lit)) return dl_utf8_to_cps(lit->valuestring, &p->literal, &p->literal_len);
    if (!cJSON_IsString(re)) return dl_fail("%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", what);
    uint32_t *cps;
    size_t n;
    if (dl_utf8_to_cps(re->valuestring, &cps, &n)) return -1;
    if (translate_escapes(&cps, &n)) return -1;
    int err;
    PCRE2_SIZE erroff;
    p->re = pcre2_compile((PCRE2_SPTR)cps, n, PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
    free(cps);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        char msg8[256];
        pcre2_get_error_message(err, msg, 256);
        size_t k = 0;
        for (; k < 255 && msg[k]; k++) msg8[k] = msg[k] < 128 ? (char)msg[k] : '?';
        msg8[k] = 0;
        return dl_fail("%s: regex '%s' does not compile at offset %zu: %s", what, re->valuestring,
                       (size_t)erroff, msg8);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return 0;
}

void dl_pattern_free(dl_pattern *p) {
    free(p->literal);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof(*p));
}

int dl_pattern_find(const dl_pattern *p, const uint32_t *s, size_t n, dl_match_fn fn, void *ctx) {
    if (p->literal) {
        size_t m = p->literal_len;
        if (m == 0 || m > n) return 0;
        for (size_t i = 0; i + m <= n;) {
            if (s[i] == p->literal[0] && !memcmp(s + i, p->literal, m * sizeof(uint32_t))) {
                if (fn(ctx, i, i + m)) return -1;
                i += m;
            } else {
                i++;
            }
        }
        return 0;
    }
    if (!p->re) return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md) return dl_fail("out of memory for regex match data");
    static const uint32_t empty = 0;
    PCRE2_SPTR subject = n ? (PCRE2_SPTR)s : (PCRE2_SPTR)&empty;
    size_t pos = 0;
    int rc = 0;
    while (pos <= n) {
        int r = pcre2_match(p->re, subject, n, pos, 0, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            rc = dl_fail("regex match failed (PCRE2 error %d)", r);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (end <= start) { /* empty match: no piece; step over one char */
            pos = start + 1;
            continue;
        }
        if (fn(ctx, start, end)) {
            rc = -1;
            break;
        }
        pos = end;
    }
    pcre2_match_data_free(md);
    return rc;
}
