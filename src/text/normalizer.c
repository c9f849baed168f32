/* Normalizers of tokenizer.json, applied to code point strings the way HF
 * tokenizers applies them to its NormalizedString. */
#include <cjson/cJSON.h>
#include <string.h>
#include <utf8proc.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define MAX_DEPTH 16

static int parse(const cJSON *json, dl_normalizer *n, int depth);

static int parse_sequence(const cJSON *list, dl_normalizer *n, int depth) {
    if (!cJSON_IsArray(list)) return dl_fail("normalizer Sequence: 'normalizers' must be an array");
    int count = cJSON_GetArraySize(list);
    n->children = dl_calloc((size_t)(count ? count : 1), sizeof(dl_normalizer));
    if (!n->children) return -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (parse(item, &n->children[n->n_children], depth + 1)) return -1;
        n->n_children++;
    }
    return 0;
}

static bool get_bool(const cJSON *json, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static int parse(const cJSON *json, dl_normalizer *n, int depth) {
    memset(n, 0, sizeof(*n));
    if (depth > MAX_DEPTH) return dl_fail("normalizer nesting deeper than %d", MAX_DEPTH);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return dl_fail("normalizer without a 'type'");
    const char *t = type->valuestring;
    if (!strcmp(t, "Sequence")) {
        n->kind = DL_NORM_SEQUENCE;
        return parse_sequence(cJSON_GetObjectItemCaseSensitive(json, "normalizers"), n, depth);
    }
    if (!strcmp(t, "Nmt")) n->kind = DL_NORM_NMT;
    else if (!strcmp(t, "NFC")) n->kind = DL_NORM_NFC;
    else if (!strcmp(t, "NFD")) n->kind = DL_NORM_NFD;
    else if (!strcmp(t, "NFKC")) n->kind = DL_NORM_NFKC;
    else if (!strcmp(t, "NFKD")) n->kind = DL_NORM_NFKD;
    else if (!strcmp(t, "Lowercase")) n->kind = DL_NORM_LOWERCASE;
    else if (!strcmp(t, "StripAccents")) n->kind = DL_NORM_STRIP_ACCENTS;
    else if (!strcmp(t, "Strip")) {
        n->kind = DL_NORM_STRIP;
        n->strip_left = get_bool(json, "strip_left", true);
        n->strip_right = get_bool(json, "strip_right", true);
    } else if (!strcmp(t, "Replace")) {
        n->kind = DL_NORM_REPLACE;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(json, "content");
        if (!cJSON_IsString(content)) return dl_fail("normalizer Replace: 'content' must be a string");
        if (dl_pattern_parse(cJSON_GetObjectItemCaseSensitive(json, "pattern"), &n->pattern, "normalizer Replace"))
            return -1;
        return dl_utf8_to_cps(content->valuestring, &n->content, &n->content_len);
    } else if (!strcmp(t, "Prepend")) {
        n->kind = DL_NORM_PREPEND;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(json, "prepend");
        if (!cJSON_IsString(p)) return dl_fail("normalizer Prepend: 'prepend' must be a string");
        return dl_utf8_to_cps(p->valuestring, &n->content, &n->content_len);
    } else if (!strcmp(t, "BertNormalizer")) {
        n->kind = DL_NORM_BERT;
        n->clean_text = get_bool(json, "clean_text", true);
        n->handle_chinese = get_bool(json, "handle_chinese_chars", true);
        n->lowercase = get_bool(json, "lowercase", true);
        /* strip_accents: null means "same as lowercase" */
        n->strip_accents = get_bool(json, "strip_accents", n->lowercase);
    } else if (!strcmp(t, "Precompiled")) {
        n->kind = DL_NORM_PRECOMPILED;
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(json, "precompiled_charsmap");
        if (!cJSON_IsString(map)) return dl_fail("normalizer Precompiled: 'precompiled_charsmap' must be a string");
        return dl_precompiled_parse(map->valuestring, &n->precompiled);
    } else {
        return dl_fail("normalizer '%s' is not supported (supported: Sequence, Nmt, NFC, NFD, NFKC, NFKD, "
                       "Replace, Lowercase, Strip, StripAccents, Prepend, BertNormalizer, Precompiled)", t);
    }
    return 0;
}

int dl_normalizer_parse(const cJSON *json, dl_normalizer *n) { return parse(json, n, 0); }

void dl_normalizer_free(dl_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_children; i++) dl_normalizer_free(&n->children[i]);
    free(n->children);
    dl_pattern_free(&n->pattern);
    free(n->content);
    if (n->precompiled) dl_precompiled_free(n->precompiled);
    memset(n, 0, sizeof(*n));
}

/* ---- the transformations ---------------------------------------------------- */

static bool nmt_removed(uint32_t c) {
    return (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F ||
           c == 0x9F;
}

static bool nmt_space(uint32_t c) {
    return c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
           c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
}

static void apply_nmt(dl_ustr *s) {
    size_t k = 0, origin = 0;
    for (size_t i = 0; i < s->len; i++) {
        uint32_t c = s->cp[i];
        if (nmt_removed(c)) continue;
        if (i < s->origin) origin++;
        s->cp[k++] = nmt_space(c) ? ' ' : c;
    }
    s->len = k;
    s->origin = origin;
}

static int apply_lowercase(dl_ustr *s, dl_ustr *tmp) {
    tmp->len = 0;
    tmp->origin = 0;
    if (dl_ustr_reserve(tmp, s->len + 8)) return -1;
    for (size_t i = 0; i < s->len; i++) {
        uint32_t o[2];
        int k = dl_uc_lower(s->cp[i], o);
        for (int j = 0; j < k; j++)
            if (dl_ustr_push(tmp, o[j])) return -1;
        if (i < s->origin) tmp->origin += (size_t)k;
    }
    dl_ustr_swap(s, tmp);
    return 0;
}

static bool is_ascii(const dl_ustr *s) {
    for (size_t i = 0; i < s->len; i++)
        if (s->cp[i] >= 0x80) return false;
    return true;
}

static uint8_t combining_class(uint32_t c) {
    if (dl_uc_compat(DL_UC_CCC_ZERO, c)) return 0; /* unknown to HF's tables: a starter there */
    return (uint8_t)utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
}

/* Unicode normalization: decompose each char (canonically or compatibly),
 * put marks in canonical order, then compose for the C forms. */
/* True when no normalization form changes s: no char decomposes (Hangul
 * syllables decompose algorithmically), none is a mark with a combining
 * class, and no two neighbours could compose. Most text takes this path. */
static bool is_normalization_stable(const dl_ustr *s) {
    utf8proc_uint16_t prev_comb = UINT16_MAX;
    for (size_t i = 0; i < s->len; i++) {
        uint32_t c = s->cp[i];
        if (c < 0x80) {
            prev_comb = UINT16_MAX; /* ASCII letters do start compositions, but only with marks */
            if (i + 1 < s->len && s->cp[i + 1] >= 0x80) prev_comb = 0;
            continue;
        }
        if (c > 0x10FFFF || (c >= 0x1100 && c <= 0x11FF) || (c >= 0xA960 && c <= 0xA97F) ||
            (c >= 0xAC00 && c <= 0xD7FF))
            return false;
        const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
        if (p->decomp_seqindex != UINT16_MAX || p->combining_class) return false;
        if (p->comb_index != UINT16_MAX && prev_comb != UINT16_MAX) return false;
        prev_comb = p->comb_index;
    }
    return true;
}

static int apply_unicode(dl_ustr *s, dl_ustr *tmp, bool compat, bool compose) {
    if (is_ascii(s) || is_normalization_stable(s)) return 0;
    tmp->len = 0;
    tmp->origin = 0;
    utf8proc_option_t opt = UTF8PROC_DECOMPOSE | UTF8PROC_STABLE | (compat ? UTF8PROC_COMPAT : 0);
    for (size_t i = 0; i < s->len; i++) {
        uint32_t c = s->cp[i];
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
        if (dl_ustr_reserve(tmp, tmp->len + 32)) return -1;
        if (i == s->origin) tmp->origin = tmp->len; /* chars decomposed from the origin chars */
        if (dl_uc_compat(DL_UC_NORM_UNCHANGED, c)) {
            tmp->cp[tmp->len++] = c;
            continue;
        }
        int last = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, (utf8proc_int32_t *)tmp->cp + tmp->len,
                                                     32, opt, &last);
        if (n < 0 || n > 32) return dl_fail("Unicode decomposition of U+%04X failed", (unsigned)c);
        tmp->len += (size_t)n;
    }
    if (s->origin >= s->len) tmp->origin = tmp->len;
    bool had_origin = s->origin > 0;
    /* canonical ordering: stable sort of each run of non-starters by class */
    for (size_t i = 1; i < tmp->len; i++) {
        uint32_t c = tmp->cp[i];
        uint8_t cc = combining_class(c);
        if (!cc) continue;
        size_t j = i;
        while (j > 0) {
            uint8_t pc = combining_class(tmp->cp[j - 1]);
            if (pc <= cc) break;
            tmp->cp[j] = tmp->cp[j - 1];
            j--;
        }
        tmp->cp[j] = c;
    }
    if (compose && tmp->origin > 0 && tmp->origin < tmp->len) {
        /* the origin chars after composition: compose them alone and count */
        uint32_t prefix[64];
        size_t n0 = tmp->origin < 64 ? tmp->origin : 64;
        memcpy(prefix, tmp->cp, n0 * sizeof(uint32_t));
        utf8proc_ssize_t n1 = utf8proc_normalize_utf32((utf8proc_int32_t *)prefix, (utf8proc_ssize_t)n0,
                                                       UTF8PROC_COMPOSE | UTF8PROC_STABLE);
        if (n1 > 0) tmp->origin = (size_t)n1;
    }
    if (compose) {
        utf8proc_ssize_t n = utf8proc_normalize_utf32((utf8proc_int32_t *)tmp->cp, (utf8proc_ssize_t)tmp->len,
                                                      UTF8PROC_COMPOSE | UTF8PROC_STABLE);
        if (n < 0) return dl_fail("Unicode composition failed");
        tmp->len = (size_t)n;
    }
    /* composition may merge origin chars: keep the count within bounds */
    if (tmp->origin > tmp->len) tmp->origin = tmp->len;
    if (had_origin && tmp->len && !tmp->origin) tmp->origin = 1;
    dl_ustr_swap(s, tmp);
    return 0;
}

struct replace_ctx {
    const dl_normalizer *n;
    const dl_ustr *src;
    dl_ustr *dst;
    size_t last;
};

static int replace_match(void *ctx, size_t start, size_t end) {
    struct replace_ctx *r = ctx;
    if (dl_ustr_append(r->dst, r->src->cp + r->last, start - r->last)) return -1;
    if (dl_ustr_append(r->dst, r->n->content, r->n->content_len)) return -1;
    /* Copied origin chars count; HF inserts the content with the alignment of
     * the match's last char, so it counts only if that char did. */
    size_t o = r->src->origin;
    r->dst->origin += (start < o ? start : o) - (r->last < o ? r->last : o);
    if (end <= o) r->dst->origin += r->n->content_len;
    r->last = end;
    return 0;
}

static int apply_replace(const dl_normalizer *n, dl_ustr *s, dl_ustr *tmp) {
    if (n->pattern.literal) { /* fast path: no occurrence of the first char */
        bool found = false;
        for (size_t i = 0; i < s->len && !found; i++) found = s->cp[i] == n->pattern.literal[0];
        if (!found) return 0;
    }
    tmp->len = 0;
    tmp->origin = 0;
    struct replace_ctx r = {n, s, tmp, 0};
    if (dl_pattern_find(&n->pattern, s->cp, s->len, replace_match, &r)) return -1;
    if (r.last == 0 && tmp->len == 0) return 0; /* no match */
    if (dl_ustr_append(tmp, s->cp + r.last, s->len - r.last)) return -1;
    if (r.last < s->origin) tmp->origin += s->origin - r.last;
    dl_ustr_swap(s, tmp);
    return 0;
}

static void apply_strip(dl_ustr *s, bool left, bool right) {
    size_t a = 0, b = s->len;
    if (left)
        while (a < b && dl_uc_is_whitespace(s->cp[a])) a++;
    if (right)
        while (b > a && dl_uc_is_whitespace(s->cp[b - 1])) b--;
    if (a > 0) {
        s->origin = dl_origin_from(s->origin, a);
        memmove(s->cp, s->cp + a, (b - a) * sizeof(uint32_t));
    }
    s->len = b - a;
}

/* StripAccents drops every mark (Mn, Mc, Me); BertNormalizer only Mn. */
static void apply_strip_accents(dl_ustr *s, bool nonspacing_only) {
    size_t k = 0, origin = 0;
    for (size_t i = 0; i < s->len; i++) {
        uint32_t c = s->cp[i];
        if (nonspacing_only ? dl_uc_is_nonspacing_mark(c) : dl_uc_is_mark(c)) continue;
        if (i < s->origin) origin++;
        s->cp[k++] = s->cp[i];
    }
    s->len = k;
    s->origin = origin;
}

static int apply_prepend(const dl_normalizer *n, dl_ustr *s, dl_ustr *tmp) {
    if (s->len == 0) return 0;
    tmp->len = 0;
    /* the prepended chars align with the first char (HF's prepend) */
    tmp->origin = s->origin ? s->origin + n->content_len : 0;
    if (dl_ustr_append(tmp, n->content, n->content_len) || dl_ustr_append(tmp, s->cp, s->len)) return -1;
    dl_ustr_swap(s, tmp);
    return 0;
}

static int apply_bert(const dl_normalizer *n, dl_ustr *s, dl_ustr *tmp) {
    if (n->clean_text) {
        size_t k = 0, origin = 0;
        for (size_t i = 0; i < s->len; i++) {
            uint32_t c = s->cp[i];
            if (c == 0 || c == 0xFFFD || dl_uc_is_control(c)) continue;
            if (i < s->origin) origin++;
            s->cp[k++] = dl_uc_is_whitespace(c) ? ' ' : c;
        }
        s->len = k;
        s->origin = origin;
    }
    if (n->handle_chinese) {
        tmp->len = 0;
        tmp->origin = 0;
        for (size_t i = 0; i < s->len; i++) {
            uint32_t c = s->cp[i];
            if (dl_uc_is_cjk(c)) {
                if (dl_ustr_push(tmp, ' ') || dl_ustr_push(tmp, c) || dl_ustr_push(tmp, ' ')) return -1;
            } else if (dl_ustr_push(tmp, c)) {
                return -1;
            }
            if (i < s->origin) tmp->origin = tmp->len;
        }
        dl_ustr_swap(s, tmp);
    }
    if (n->strip_accents) {
        if (apply_unicode(s, tmp, false, false)) return -1;
        apply_strip_accents(s, true);
    }
    if (n->lowercase) return apply_lowercase(s, tmp);
    return 0;
}

int dl_normalizer_apply(const dl_normalizer *n, dl_ustr *s, dl_ustr *tmp) {
    switch (n->kind) {
    case DL_NORM_SEQUENCE:
        for (size_t i = 0; i < n->n_children; i++)
            if (dl_normalizer_apply(&n->children[i], s, tmp)) return -1;
        return 0;
    case DL_NORM_NMT: apply_nmt(s); return 0;
    case DL_NORM_NFC: return apply_unicode(s, tmp, false, true);
    case DL_NORM_NFD: return apply_unicode(s, tmp, false, false);
    case DL_NORM_NFKC: return apply_unicode(s, tmp, true, true);
    case DL_NORM_NFKD: return apply_unicode(s, tmp, true, false);
    case DL_NORM_REPLACE: return apply_replace(n, s, tmp);
    case DL_NORM_LOWERCASE: return apply_lowercase(s, tmp);
    case DL_NORM_STRIP: apply_strip(s, n->strip_left, n->strip_right); return 0;
    case DL_NORM_STRIP_ACCENTS: apply_strip_accents(s, false); return 0;
    case DL_NORM_PREPEND: return apply_prepend(n, s, tmp);
    case DL_NORM_BERT: return apply_bert(n, s, tmp);
    case DL_NORM_PRECOMPILED: return dl_precompiled_apply(n->precompiled, s, tmp);
    }
    return dl_fail("unknown normalizer kind %d", (int)n->kind);
}
