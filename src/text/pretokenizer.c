/* Pre-tokenizers of tokenizer.json: each splits every current piece into
 * smaller ones (and Metaspace also rewrites spaces), with the split behaviours
 * of HF tokenizers' NormalizedString::split. Empty pieces are dropped. */
#include <cjson/cJSON.h>
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define MAX_DEPTH 16

int dl_pieces_add(dl_pieces *p, const uint32_t *cp, size_t n, size_t origin) {
    if (n == 0) return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        dl_piece *np = dl_realloc(p->pieces, dl_mul_size(cap, sizeof(dl_piece)));
        if (!np) return -1;
        p->pieces = np;
        p->cap = cap;
    }
    size_t start = p->text.len;
    if (dl_ustr_append(&p->text, cp, n)) return -1;
    p->pieces[p->n++] = (dl_piece){start, start + n, origin < n ? origin : n};
    return 0;
}

void dl_pieces_clear(dl_pieces *p) {
    p->n = 0;
    p->text.len = 0;
}

void dl_pieces_free(dl_pieces *p) {
    dl_ustr_free(&p->text);
    free(p->pieces);
    memset(p, 0, sizeof(*p));
}

static int parse_behavior(const cJSON *json, enum dl_split_behavior *b, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, "behavior");
    if (!v) return 0;
    if (!cJSON_IsString(v)) return dl_fail("%s: 'behavior' must be a string", what);
    const char *s = v->valuestring;
    if (!strcmp(s, "Removed")) *b = DL_SPLIT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = DL_SPLIT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = DL_SPLIT_MERGED_WITH_PREVIOUS;
    else if (!strcmp(s, "MergedWithNext")) *b = DL_SPLIT_MERGED_WITH_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = DL_SPLIT_CONTIGUOUS;
    else return dl_fail("%s: unknown behavior '%s'", what, s);
    return 0;
}

static int parse(const cJSON *json, dl_pretokenizer *p, int depth) {
    memset(p, 0, sizeof(*p));
    if (depth > MAX_DEPTH) return dl_fail("pre-tokenizer nesting deeper than %d", MAX_DEPTH);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return dl_fail("pre-tokenizer without a 'type'");
    const char *t = type->valuestring;
    if (!strcmp(t, "Sequence")) {
        p->kind = DL_PRETOK_SEQUENCE;
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers");
        if (!cJSON_IsArray(list)) return dl_fail("pre-tokenizer Sequence: 'pretokenizers' must be an array");
        int count = cJSON_GetArraySize(list);
        p->children = dl_calloc((size_t)(count ? count : 1), sizeof(dl_pretokenizer));
        if (!p->children) return -1;
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
            if (parse(item, &p->children[p->n_children], depth + 1)) return -1;
            p->n_children++;
        }
    } else if (!strcmp(t, "Metaspace")) {
        p->kind = DL_PRETOK_METASPACE;
        p->replacement = 0x2581;
        p->prepend = DL_PREPEND_ALWAYS;
        p->split = true;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(json, "replacement");
        if (cJSON_IsString(r)) {
            uint32_t *cps;
            size_t n;
            if (dl_utf8_to_cps(r->valuestring, &cps, &n)) return -1;
            if (n != 1) {
                free(cps);
                return dl_fail("pre-tokenizer Metaspace: 'replacement' must be one character");
            }
            p->replacement = cps[0];
            free(cps);
        }
        const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(json, "prepend_scheme");
        const cJSON *add_prefix = cJSON_GetObjectItemCaseSensitive(json, "add_prefix_space");
        if (cJSON_IsString(scheme)) {
            const char *s = scheme->valuestring;
            if (!strcmp(s, "always")) p->prepend = DL_PREPEND_ALWAYS;
            else if (!strcmp(s, "first")) p->prepend = DL_PREPEND_FIRST;
            else if (!strcmp(s, "never")) p->prepend = DL_PREPEND_NEVER;
            else return dl_fail("pre-tokenizer Metaspace: unknown prepend_scheme '%s'", s);
        } else if (cJSON_IsBool(add_prefix)) {
            p->prepend = cJSON_IsTrue(add_prefix) ? DL_PREPEND_ALWAYS : DL_PREPEND_NEVER;
        }
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(json, "split");
        if (cJSON_IsBool(split)) p->split = cJSON_IsTrue(split);
    } else if (!strcmp(t, "Digits")) {
        p->kind = DL_PRETOK_DIGITS;
        p->individual_digits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "individual_digits"));
    } else if (!strcmp(t, "Punctuation")) {
        p->kind = DL_PRETOK_PUNCTUATION;
        p->behavior = DL_SPLIT_ISOLATED;
        return parse_behavior(json, &p->behavior, "pre-tokenizer Punctuation");
    } else if (!strcmp(t, "WhitespaceSplit")) {
        p->kind = DL_PRETOK_WHITESPACE_SPLIT;
    } else if (!strcmp(t, "Whitespace")) {
        p->kind = DL_PRETOK_WHITESPACE;
    } else if (!strcmp(t, "BertPreTokenizer")) {
        p->kind = DL_PRETOK_BERT;
    } else if (!strcmp(t, "CharDelimiterSplit")) {
        p->kind = DL_PRETOK_CHAR_DELIMITER;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(json, "delimiter");
        uint32_t *cps;
        size_t n;
        if (!cJSON_IsString(d)) return dl_fail("pre-tokenizer CharDelimiterSplit: 'delimiter' must be a string");
        if (dl_utf8_to_cps(d->valuestring, &cps, &n)) return -1;
        p->delimiter = n ? cps[0] : 0;
        free(cps);
    } else if (!strcmp(t, "Split")) {
        p->kind = DL_PRETOK_SPLIT;
        p->behavior = DL_SPLIT_REMOVED;
        p->invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "invert"));
        if (parse_behavior(json, &p->behavior, "pre-tokenizer Split")) return -1;
        return dl_pattern_parse(cJSON_GetObjectItemCaseSensitive(json, "pattern"), &p->pattern,
                                "pre-tokenizer Split");
    } else {
        return dl_fail("pre-tokenizer '%s' is not supported (supported: Sequence, Metaspace, Digits, Punctuation, "
                       "WhitespaceSplit, Whitespace, BertPreTokenizer, CharDelimiterSplit, Split)", t);
    }
    return 0;
}

int dl_pretokenizer_parse(const cJSON *json, dl_pretokenizer *p) { return parse(json, p, 0); }

void dl_pretokenizer_free(dl_pretokenizer *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_children; i++) dl_pretokenizer_free(&p->children[i]);
    free(p->children);
    dl_pattern_free(&p->pattern);
    memset(p, 0, sizeof(*p));
}

/* ---- splitting ----------------------------------------------------------------
 * A splitter turns one piece into a sequence of (range, is_match) spans that
 * cover it; emit_spans then applies the behaviour, as HF's split does. */

typedef struct {
    size_t start, end;
    bool match;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *s, size_t start, size_t end, bool match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *p = dl_realloc(s->v, dl_mul_size(cap, sizeof(span)));
        if (!p) return -1;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = (span){start, end, match};
    return 0;
}

/* Spans of a char predicate: each matching char is its own match; runs of
 * other chars are one non-match. */
static int char_spans(const uint32_t *s, size_t n, bool (*pred)(uint32_t, const dl_pretokenizer *),
                      const dl_pretokenizer *pt, spans *out) {
    size_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (!pred(s[i], pt)) continue;
        if (last < i && spans_push(out, last, i, false)) return -1;
        if (spans_push(out, i, i + 1, true)) return -1;
        last = i + 1;
    }
    if (last < n && spans_push(out, last, n, false)) return -1;
    return 0;
}

struct regex_spans_ctx {
    spans *out;
    size_t last;
};

static int regex_span(void *ctx, size_t start, size_t end) {
    struct regex_spans_ctx *r = ctx;
    if (r->last < start && spans_push(r->out, r->last, start, false)) return -1;
    if (spans_push(r->out, start, end, true)) return -1;
    r->last = end;
    return 0;
}

/* Applies behaviour to the spans of piece [base, base+n) of src and appends
 * the resulting pieces to dst. */
static int emit_spans(const uint32_t *s, spans *sp, enum dl_split_behavior behavior, size_t origin,
                      dl_pieces *dst) {
    /* merge spans in place according to the behaviour */
    size_t k = 0;
    bool prev_match = false;
    switch (behavior) {
    case DL_SPLIT_REMOVED:
    case DL_SPLIT_ISOLATED:
        for (size_t i = 0; i < sp->n; i++) {
            if (behavior == DL_SPLIT_REMOVED && sp->v[i].match) continue;
            sp->v[k] = sp->v[i];
            sp->v[k++].match = false;
        }
        break;
    case DL_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < sp->n; i++) {
            if (sp->v[i].match && !prev_match && k > 0) {
                sp->v[k - 1].end = sp->v[i].end;
            } else {
                sp->v[k++] = sp->v[i];
            }
            prev_match = sp->v[i].match;
        }
        break;
    case DL_SPLIT_MERGED_WITH_NEXT: {
        /* walk backwards: a match joins the span after it unless that is a match */
        size_t w = sp->n;
        for (size_t i = sp->n; i-- > 0;) {
            bool m = sp->v[i].match;
            if (m && !prev_match && w < sp->n) {
                sp->v[w].start = sp->v[i].start;
            } else {
                sp->v[--w] = sp->v[i];
            }
            prev_match = m;
        }
        if (w < sp->n) memmove(sp->v, sp->v + w, (sp->n - w) * sizeof(span)); /* sp->v is NULL when empty */
        k = sp->n - w;
        break;
    }
    case DL_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sp->n; i++) {
            if (sp->v[i].match == prev_match && k > 0) {
                sp->v[k - 1].end = sp->v[i].end;
            } else {
                sp->v[k++] = sp->v[i];
            }
            prev_match = sp->v[i].match;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        if (dl_pieces_add(dst, s + sp->v[i].start, sp->v[i].end - sp->v[i].start,
                          dl_origin_from(origin, sp->v[i].start)))
            return -1;
    return 0;
}

static bool pred_digit(uint32_t c, const dl_pretokenizer *pt) { (void)pt; return dl_uc_is_numeric(c); }
static bool pred_punct(uint32_t c, const dl_pretokenizer *pt) { (void)pt; return dl_uc_is_punctuation(c); }
static bool pred_space(uint32_t c, const dl_pretokenizer *pt) { (void)pt; return dl_uc_is_whitespace(c); }
static bool pred_delim(uint32_t c, const dl_pretokenizer *pt) { return c == pt->delimiter; }
static bool pred_replacement(uint32_t c, const dl_pretokenizer *pt) { return c == pt->replacement; }

/* Whitespace: the regex \w+|[^\w\s]+ keeps its matches and drops the rest. */
static int whitespace_spans(const uint32_t *s, size_t n, spans *out) {
    size_t i = 0;
    while (i < n) {
        if (dl_uc_is_whitespace(s[i])) {
            i++;
            continue;
        }
        bool word = dl_uc_is_word(s[i]);
        size_t j = i + 1;
        while (j < n && !dl_uc_is_whitespace(s[j]) && dl_uc_is_word(s[j]) == word) j++;
        if (spans_push(out, i, j, false)) return -1;
        i = j;
    }
    return 0;
}

static int split_piece(const dl_pretokenizer *pt, const uint32_t *s, size_t n, size_t origin, dl_pieces *dst,
                       spans *sp, dl_ustr *scratch) {
    sp->n = 0;
    switch (pt->kind) {
    case DL_PRETOK_DIGITS:
        if (char_spans(s, n, pred_digit, pt, sp)) return -1;
        return emit_spans(s, sp, pt->individual_digits ? DL_SPLIT_ISOLATED : DL_SPLIT_CONTIGUOUS, origin, dst);
    case DL_PRETOK_PUNCTUATION:
        if (char_spans(s, n, pred_punct, pt, sp)) return -1;
        return emit_spans(s, sp, pt->behavior, origin, dst);
    case DL_PRETOK_WHITESPACE_SPLIT:
        if (char_spans(s, n, pred_space, pt, sp)) return -1;
        return emit_spans(s, sp, DL_SPLIT_REMOVED, origin, dst);
    case DL_PRETOK_CHAR_DELIMITER:
        if (char_spans(s, n, pred_delim, pt, sp)) return -1;
        return emit_spans(s, sp, DL_SPLIT_REMOVED, origin, dst);
    case DL_PRETOK_WHITESPACE:
        if (whitespace_spans(s, n, sp)) return -1;
        return emit_spans(s, sp, DL_SPLIT_ISOLATED, origin, dst);
    case DL_PRETOK_BERT: {
        /* whitespace split, then every punctuation char isolated */
        if (char_spans(s, n, pred_space, pt, sp)) return -1;
        spans words = {0};
        int rc = 0;
        for (size_t i = 0; i < sp->n && !rc; i++) {
            if (sp->v[i].match) continue;
            words.n = 0;
            size_t a = sp->v[i].start;
            rc = char_spans(s + a, sp->v[i].end - a, pred_punct, pt, &words);
            if (!rc) rc = emit_spans(s + a, &words, DL_SPLIT_ISOLATED, dl_origin_from(origin, a), dst);
        }
        free(words.v);
        return rc;
    }
    case DL_PRETOK_SPLIT: {
        struct regex_spans_ctx ctx = {sp, 0};
        if (dl_pattern_find(&pt->pattern, s, n, regex_span, &ctx)) return -1;
        if (ctx.last < n && spans_push(sp, ctx.last, n, false)) return -1;
        if (pt->invert)
            for (size_t i = 0; i < sp->n; i++) sp->v[i].match = !sp->v[i].match;
        return emit_spans(s, sp, pt->behavior, origin, dst);
    }
    case DL_PRETOK_METASPACE: {
        scratch->len = 0;
        bool prepend = false;
        if (!(n > 0 && s[0] == pt->replacement) && !(n > 0 && s[0] == ' ')) {
            if (pt->prepend == DL_PREPEND_ALWAYS) prepend = true;
            else if (pt->prepend == DL_PREPEND_FIRST) prepend = origin > 0;
        }
        if (prepend && dl_ustr_push(scratch, pt->replacement)) return -1;
        if (dl_ustr_reserve(scratch, scratch->len + n)) return -1;
        for (size_t i = 0; i < n; i++) scratch->cp[scratch->len++] = s[i] == ' ' ? pt->replacement : s[i];
        if (prepend && origin) origin++; /* the prepended char aligns with the first one */
        if (!pt->split) return dl_pieces_add(dst, scratch->cp, scratch->len, origin);
        if (char_spans(scratch->cp, scratch->len, pred_replacement, pt, sp)) return -1;
        return emit_spans(scratch->cp, sp, DL_SPLIT_MERGED_WITH_NEXT, origin, dst);
    }
    case DL_PRETOK_SEQUENCE:
        break;
    }
    return dl_fail("internal: pre-tokenizer kind %d cannot split", (int)pt->kind);
}

int dl_pretokenizer_apply(const dl_pretokenizer *pt, dl_pieces *p, dl_pieces *tmp) {
    if (pt->kind == DL_PRETOK_SEQUENCE) {
        for (size_t i = 0; i < pt->n_children; i++)
            if (dl_pretokenizer_apply(&pt->children[i], p, tmp)) return -1;
        return 0;
    }
    dl_pieces_clear(tmp);
    spans sp = {0};
    dl_ustr scratch = {0};
    int rc = 0;
    for (size_t i = 0; i < p->n && !rc; i++) {
        const dl_piece *pc = &p->pieces[i];
        rc = split_piece(pt, p->text.cp + pc->start, pc->end - pc->start, pc->origin, tmp, &sp, &scratch);
    }
    free(sp.v);
    dl_ustr_free(&scratch);
    if (rc) return -1;
    dl_pieces t = *p;
    *p = *tmp;
    *tmp = t;
    return 0;
}
