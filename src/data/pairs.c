/* Segment pairs for sentence-order prediction, following ALBERT's
 * create_instances_from_document: a target length (the maximum, or with
 * probability short_seq_prob a uniform draw in [2, max]) drawn for each pair
 * (ALBERT draws once per document; with very long documents, e.g. paragraph
 * mode over a file without blank lines, that would make all or none short);
 * sentences accumulate into a chunk until it reaches the target or the
 * document ends; the chunk splits at a random sentence boundary into A and B;
 * a pair over the limit loses tokens from its longer side, from the front or
 * the back at random; then A and B are swapped with probability sop_swap_prob
 * (label 1). Unlike ALBERT, which borrows B from another document when a
 * chunk holds one sentence, a single sentence is split at a random token so
 * the stream needs no random access; a one-token chunk is dropped. */
#include <string.h>

#include "data/data_internal.h"

void dl_example_free(dl_example *ex) {
    free(ex->ids);
    ex->ids = ex->type_ids = NULL;
}

typedef struct {
    int32_t *ids;
    size_t len, cap;
} id_vec;

static int vec_push(id_vec *v, const int32_t *ids, size_t n) {
    if (n == 0) return 0; /* an empty segment: memcpy may not be given a NULL v->ids */
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->len + n) cap *= 2;
        int32_t *grown = dl_realloc(v->ids, cap * sizeof *grown);
        if (!grown) return -1;
        v->ids = grown;
        v->cap = cap;
    }
    memcpy(v->ids + v->len, ids, n * sizeof *ids);
    v->len += n;
    return 0;
}

static void truncate_pair(id_vec *a, id_vec *b, size_t max, dl_rng *rng) {
    size_t a_start = 0, b_start = 0;
    while ((a->len - a_start) + (b->len - b_start) > max) {
        bool trunc_a = (a->len - a_start) > (b->len - b_start);
        id_vec *v = trunc_a ? a : b;
        size_t *vstart = trunc_a ? &a_start : &b_start;
        if (dl_rng_uniform(rng) < 0.5f)
            (*vstart)++;
        else
            v->len--;
    }
    memmove(a->ids, a->ids + a_start, (a->len - a_start) * sizeof *a->ids);
    a->len -= a_start;
    memmove(b->ids, b->ids + b_start, (b->len - b_start) * sizeof *b->ids);
    b->len -= b_start;
}

static int add_example(const dl_pair_params *p, const dl_data_text *text, dl_rng *rng, id_vec *a,
                       id_vec *b, dl_example **examples, size_t *count, size_t *cap) {
    truncate_pair(a, b, p->max_pair_tokens, rng);
    if (!a->len || !b->len) return 0;
    int32_t sop = dl_rng_uniform(rng) < p->sop_swap_prob;
    if (sop) {
        id_vec t = *a;
        *a = *b;
        *b = t;
    }
    int32_t *ids = NULL, *type_ids = NULL;
    size_t n = 0;
    if (text->post_process(text->ctx, a->ids, a->len, b->ids, b->len, &ids, &type_ids, &n))
        return -1;
    /* One allocation holds both arrays, so an example frees with one call. */
    int32_t *both = dl_malloc(dl_mul_size(n ? 2 * n : 2, sizeof *both));
    if (!both) {
        free(ids);
        free(type_ids);
        return -1;
    }
    memcpy(both, ids, n * sizeof *both);
    memcpy(both + n, type_ids, n * sizeof *both);
    free(ids);
    free(type_ids);
    if (*count == *cap) {
        size_t grown_cap = *cap ? *cap * 2 : 16;
        dl_example *grown = dl_realloc(*examples, grown_cap * sizeof *grown);
        if (!grown) {
            free(both);
            return -1;
        }
        *examples = grown;
        *cap = grown_cap;
    }
    (*examples)[(*count)++] = (dl_example){(int32_t)n, sop, both, both + n};
    return 0;
}

static size_t draw_target(const dl_pair_params *p, dl_rng *rng) {
    size_t max_tokens = p->max_pair_tokens;
    if (dl_rng_uniform(rng) < p->short_seq_prob) return 2 + (size_t)dl_rng_below(rng, max_tokens - 1);
    return max_tokens;
}

int dl_make_pairs(const dl_segments *doc, const dl_pair_params *p, const dl_data_text *text,
                  dl_rng *rng, dl_example **examples, size_t *count, size_t *cap) {
    size_t max_tokens = p->max_pair_tokens;
    if (max_tokens < 2) return dl_fail("max_seq_len leaves fewer than 2 tokens for a pair");
    id_vec a = {0}, b = {0};
    size_t target = draw_target(p, rng);
    int rc = 0;
    size_t chunk_first = 0, chunk_tokens = 0;
    for (size_t i = 0; i < doc->count && rc == 0; i++) {
        chunk_tokens += doc->lens[i];
        if (i + 1 < doc->count && chunk_tokens < target) continue;
        size_t chunk_count = i + 1 - chunk_first;
        a.len = b.len = 0;
        if (chunk_count >= 2) {
            size_t a_end = 1 + (size_t)dl_rng_below(rng, chunk_count - 1);
            for (size_t k = 0; k < chunk_count && rc == 0; k++) {
                size_t s = chunk_first + k;
                rc = vec_push(k < a_end ? &a : &b, doc->ids[s], doc->lens[s]);
            }
        } else if (doc->lens[chunk_first] >= 2) {
            size_t n = doc->lens[chunk_first];
            size_t split = 1 + (size_t)dl_rng_below(rng, n - 1);
            rc = vec_push(&a, doc->ids[chunk_first], split);
            if (!rc) rc = vec_push(&b, doc->ids[chunk_first] + split, n - split);
        }
        if (!rc && a.len && b.len) rc = add_example(p, text, rng, &a, &b, examples, count, cap);
        chunk_first = i + 1;
        chunk_tokens = 0;
        target = draw_target(p, rng);
    }
    free(a.ids);
    free(b.ids);
    return rc;
}
