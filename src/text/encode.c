/* The encode pipeline and the post-processor. */
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

typedef struct {
    dl_ustr segment, tmp;
    dl_pieces pieces, pieces_tmp;
    dl_unigram_scratch unigram;
    char *utf8;
    size_t utf8_cap;
    int32_t *ids;
    size_t count, cap;
} encode_ctx;

static void ctx_free(encode_ctx *c) {
    dl_ustr_free(&c->segment);
    dl_ustr_free(&c->tmp);
    dl_pieces_free(&c->pieces);
    dl_pieces_free(&c->pieces_tmp);
    dl_unigram_scratch_free(&c->unigram);
    free(c->utf8);
}

static int push_id(encode_ctx *c, int32_t id) {
    if (c->count == c->cap) {
        size_t n = c->cap ? c->cap * 2 : 64;
        int32_t *p = dl_realloc(c->ids, dl_mul_size(n, sizeof(int32_t)));
        if (!p) return -1;
        c->ids = p;
        c->cap = n;
    }
    c->ids[c->count++] = id;
    return 0;
}

/* ---- added tokens ---------------------------------------------------------- */

static bool is_word_char(uint32_t c) { return dl_uc_is_word(c); } /* the \\w of Rust's regex crate */

typedef int (*segment_fn)(const dl_tokenizer *tok, encode_ctx *c, const uint32_t *s, size_t n, size_t origin);

/* Splits s on the added tokens whose 'normalized' flag equals normalized,
 * pushing token ids and handing the text between them to fn. As in HF: the
 * matches are found first (leftmost-longest, non-overlapping, the
 * Aho-Corasick search HF uses), then each is checked for single_word and
 * widened by lstrip/rstrip; a widened match can cover the next matches,
 * which HF still emits, and so do we. */
static int split_added(const dl_tokenizer *tok, encode_ctx *c, const uint32_t *s, size_t n, size_t origin,
                       bool normalized, segment_fn fn) {
    size_t seg_start = 0, i = 0;
    while (i < n) {
        const dl_added_token *best = NULL;
        for (size_t k = 0; k < tok->n_added; k++) {
            const dl_added_token *a = &tok->added[k];
            if (a->normalized != normalized || a->len == 0 || a->content[0] != s[i] || a->len > n - i) continue;
            if (best && a->len <= best->len) continue;
            if (!memcmp(a->content, s + i, a->len * sizeof(uint32_t))) best = a;
        }
        if (!best) {
            i++;
            continue;
        }
        size_t start = i, stop = i + best->len;
        i = stop; /* the search resumes after the match, whatever happens to it */
        if (best->single_word) {
            bool start_ok = start == 0 || !is_word_char(s[start - 1]);
            bool stop_ok = stop == n || !is_word_char(s[stop]);
            if (!start_ok || !stop_ok) continue;
        }
        if (best->lstrip) {
            size_t j = start;
            while (j > 0 && dl_uc_is_whitespace(s[j - 1])) j--;
            start = j > seg_start ? j : seg_start;
        }
        if (best->rstrip)
            while (stop < n && dl_uc_is_whitespace(s[stop])) stop++;
        if (seg_start < start && fn(tok, c, s + seg_start, start - seg_start, dl_origin_from(origin, seg_start)))
            return -1;
        if (push_id(c, best->id)) return -1;
        seg_start = stop;
    }
    if (seg_start < n && fn(tok, c, s + seg_start, n - seg_start, dl_origin_from(origin, seg_start))) return -1;
    return 0;
}

/* ---- segments ------------------------------------------------------------------ */

/* Pre-tokenizes normalized text and runs the model on each pre-token. */
static int encode_normalized(const dl_tokenizer *tok, encode_ctx *c, const uint32_t *s, size_t n, size_t origin) {
    dl_pieces_clear(&c->pieces);
    if (dl_pieces_add(&c->pieces, s, n, origin)) return -1;
    if (tok->pretokenizer && dl_pretokenizer_apply(tok->pretokenizer, &c->pieces, &c->pieces_tmp)) return -1;
    for (size_t i = 0; i < c->pieces.n; i++) {
        const dl_piece *p = &c->pieces.pieces[i];
        size_t len;
        if (dl_utf8_encode(c->pieces.text.cp + p->start, p->end - p->start, &c->utf8, &c->utf8_cap, &len)) return -1;
        if (dl_unigram_encode(&tok->model, c->utf8, len, &c->unigram, &c->ids, &c->count, &c->cap)) return -1;
    }
    return 0;
}

/* Normalizes one raw segment (text between non-normalized added tokens). */
static int encode_raw(const dl_tokenizer *tok, encode_ctx *c, const uint32_t *s, size_t n, size_t origin) {
    c->segment.len = 0;
    if (dl_ustr_append(&c->segment, s, n)) return -1;
    c->segment.origin = origin < n ? origin : n;
    if (tok->normalizer && dl_normalizer_apply(tok->normalizer, &c->segment, &c->tmp)) return -1;
    if (c->segment.len == 0) return 0;
    /* encode_normalized reuses c->pieces, not c->segment, so segment stays valid */
    if (tok->has_normalized_added)
        return split_added(tok, c, c->segment.cp, c->segment.len, c->segment.origin, true, encode_normalized);
    return encode_normalized(tok, c, c->segment.cp, c->segment.len, c->segment.origin);
}

int dl_tokenizer_encode(const dl_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *count,
                        size_t *invalid) {
    *ids = NULL;
    *count = 0;
    encode_ctx c;
    memset(&c, 0, sizeof(c));
    dl_ustr raw = {0};
    size_t bad = 0;
    int rc = dl_utf8_decode(text, len, &raw, &bad);
    if (!rc) {
        if (tok->has_raw_added) rc = split_added(tok, &c, raw.cp, raw.len, 1, false, encode_raw);
        else if (raw.len) rc = encode_raw(tok, &c, raw.cp, raw.len, 1);
    }
    dl_ustr_free(&raw);
    ctx_free(&c);
    if (invalid) *invalid += bad;
    if (rc) {
        free(c.ids);
        return -1;
    }
    if (!c.ids) { /* an empty result is still a valid allocation */
        c.ids = dl_malloc(sizeof(int32_t));
        if (!c.ids) return -1;
    }
    *ids = c.ids;
    *count = c.count;
    return 0;
}

/* ---- post-processor ---------------------------------------------------------- */

int dl_tokenizer_post_process(const dl_tokenizer *tok, const int32_t *a, size_t a_len, const int32_t *b,
                              size_t b_len, int32_t **ids, int32_t **type_ids, size_t *count) {
    *ids = NULL;
    *type_ids = NULL;
    *count = 0;
    const dl_post_processor *p = &tok->post;
    const dl_template_item *items = b ? p->pair : p->single;
    size_t n_items = b ? p->n_pair : p->n_single;
    size_t total = 0;
    if (p->present) {
        for (size_t i = 0; i < n_items; i++)
            total += items[i].kind == 0 ? a_len : items[i].kind == 1 ? (b ? b_len : 0) : items[i].n_ids;
    } else {
        total = a_len + (b ? b_len : 0);
    }
    int32_t *out = dl_malloc(dl_mul_size(total ? total : 1, sizeof(int32_t)));
    int32_t *types = dl_malloc(dl_mul_size(total ? total : 1, sizeof(int32_t)));
    if (!out || !types) {
        free(out);
        free(types);
        return -1;
    }
    size_t k = 0;
    if (p->present) {
        for (size_t i = 0; i < n_items; i++) {
            const dl_template_item *t = &items[i];
            const int32_t *src = t->kind == 0 ? a : t->kind == 1 ? b : t->ids;
            size_t n = t->kind == 0 ? a_len : t->kind == 1 ? (b ? b_len : 0) : t->n_ids;
            for (size_t j = 0; j < n; j++) {
                out[k] = src[j];
                types[k++] = t->type_id;
            }
        }
    } else { /* no post-processor: A with type 0, B with type 1 */
        for (size_t j = 0; j < a_len; j++) {
            out[k] = a[j];
            types[k++] = 0;
        }
        for (size_t j = 0; b && j < b_len; j++) {
            out[k] = b[j];
            types[k++] = 1;
        }
    }
    *ids = out;
    *type_ids = types;
    *count = k;
    return 0;
}
