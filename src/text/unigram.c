/* The Unigram model: pieces with log-probability scores in a byte trie, and
 * Viterbi segmentation exactly as HF tokenizers' Unigram::encode_optimized:
 * scores in double, ties keep the first (shortest) candidate, a char no piece
 * covers becomes <unk> with score min_score - 10, consecutive <unk> fuse into
 * one, and with byte_fallback an unknown span becomes its <0xXX> byte pieces. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define UNK_PENALTY 10.0
#define MAX_VOCAB (1u << 24)
#define MAX_PIECE_BYTES 4096
#define DENSE_MIN_CHILDREN 16

/* Construction-time trie: transitions in an open-addressing hash table. */
typedef struct {
    uint64_t *keys; /* (node << 8 | byte) + 1, 0 = empty */
    uint32_t *child;
    size_t mask;
} build_trie;

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static uint32_t build_child(const build_trie *t, uint32_t node, unsigned char b) {
    uint64_t key = ((uint64_t)node << 8 | b) + 1;
    for (size_t h = mix(key) & t->mask;; h = (h + 1) & t->mask) {
        if (t->keys[h] == key) return t->child[h];
        if (t->keys[h] == 0) return 0;
    }
}

static void build_insert(build_trie *t, dl_unigram *m, const char *s, size_t len, int32_t id) {
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        uint32_t child = build_child(t, node, b);
        if (!child) {
            child = (uint32_t)m->n_nodes++;
            m->node_id[child] = -1;
            uint64_t key = ((uint64_t)node << 8 | b) + 1;
            size_t h = mix(key) & t->mask;
            while (t->keys[h]) h = (h + 1) & t->mask;
            t->keys[h] = key;
            t->child[h] = child;
        }
        node = child;
    }
    m->node_id[node] = id; /* a repeated piece maps to its last id, as in HF's hash map */
}

/* Child of node for byte b, or 0 (the root is never a child). */
static inline uint32_t trie_child(const dl_unigram *m, uint32_t node, unsigned char b) {
    uint32_t d = m->node_dense[node];
    if (d != UINT32_MAX) return m->dense[(size_t)d * 256 + b];
    uint32_t lo = m->node_first[node], hi = m->node_first[node + 1];
    while (hi - lo > 8) { /* wide nodes (the root, common prefixes): binary search */
        uint32_t mid = (lo + hi) / 2;
        if (m->edge_byte[mid] < b) lo = mid + 1;
        else if (m->edge_byte[mid] > b) hi = mid;
        else return m->edge_child[mid];
    }
    for (; lo < hi; lo++)
        if (m->edge_byte[lo] == b) return m->edge_child[lo];
    return 0;
}

/* Turns the hash-table trie into compressed rows (one counting sort by parent). */
static int compress_trie(dl_unigram *m, const build_trie *t) {
    size_t n_edges = m->n_nodes - 1;
    m->node_first = dl_calloc(m->n_nodes + 1, sizeof(uint32_t));
    m->edge_byte = dl_malloc(n_edges ? n_edges : 1);
    m->edge_child = dl_malloc(dl_mul_size(n_edges ? n_edges : 1, sizeof(uint32_t)));
    uint32_t *fill = dl_calloc(m->n_nodes + 1, sizeof(uint32_t));
    if (!m->node_first || !m->edge_byte || !m->edge_child || !fill) {
        free(fill);
        return -1;
    }
    for (size_t h = 0; h <= t->mask; h++)
        if (t->keys[h]) m->node_first[((t->keys[h] - 1) >> 8) + 1]++;
    for (size_t n = 0; n < m->n_nodes; n++) m->node_first[n + 1] += m->node_first[n];
    for (size_t h = 0; h <= t->mask; h++) {
        uint64_t k = t->keys[h];
        if (!k) continue;
        size_t parent = (size_t)((k - 1) >> 8);
        uint32_t at = m->node_first[parent] + fill[parent]++;
        m->edge_byte[at] = (uint8_t)((k - 1) & 0xFF);
        m->edge_child[at] = t->child[h];
    }
    /* bytes in increasing order within each row (insertion sort: rows are short) */
    for (size_t n = 0; n < m->n_nodes; n++)
        for (uint32_t i = m->node_first[n] + 1; i < m->node_first[n + 1]; i++) {
            uint8_t byte = m->edge_byte[i];
            uint32_t child = m->edge_child[i], j = i;
            for (; j > m->node_first[n] && m->edge_byte[j - 1] > byte; j--) {
                m->edge_byte[j] = m->edge_byte[j - 1];
                m->edge_child[j] = m->edge_child[j - 1];
            }
            m->edge_byte[j] = byte;
            m->edge_child[j] = child;
        }
    free(fill);
    /* dense rows for nodes with many children */
    size_t n_dense = 0;
    m->node_dense = dl_malloc(dl_mul_size(m->n_nodes, sizeof(uint32_t)));
    if (!m->node_dense) return -1;
    for (size_t n = 0; n < m->n_nodes; n++) {
        bool wide = m->node_first[n + 1] - m->node_first[n] > DENSE_MIN_CHILDREN;
        m->node_dense[n] = wide ? (uint32_t)n_dense++ : UINT32_MAX;
    }
    m->dense = dl_calloc(n_dense ? n_dense * 256 : 1, sizeof(uint32_t));
    if (!m->dense) return -1;
    for (size_t n = 0; n < m->n_nodes; n++) {
        if (m->node_dense[n] == UINT32_MAX) continue;
        uint32_t *row = m->dense + (size_t)m->node_dense[n] * 256;
        for (uint32_t e = m->node_first[n]; e < m->node_first[n + 1]; e++) row[m->edge_byte[e]] = m->edge_child[e];
    }
    return 0;
}

int32_t dl_unigram_piece_id(const dl_unigram *m, const char *s, size_t len) {
    if (!m->node_first) return -1;
    uint32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        node = trie_child(m, node, (unsigned char)s[i]);
        if (!node) return -1;
    }
    return len ? m->node_id[node] : -1;
}

/* The score HF holds for a JSON number. serde_json (without its
 * float_roundtrip feature, as tokenizers builds it) reads "-3.8017570164508996"
 * as the digits as an integer, converted to double, then divided by the power
 * of ten: two roundings, so about one score in four ends 1 ulp away from the
 * correctly rounded value strtod gives. Ties in the Viterbi lattice depend on
 * those last bits, so we redo serde's arithmetic on the number's shortest
 * decimal form (the form both HF and Python write). */
static double serde_json_double(double v) {
    if (v == 0.0 || v != v || v - v != 0.0) return v;
    char buf[64];
    int p = 15; /* most scores need 15..17 digits: search from there */
    snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
    if (strtod(buf, NULL) == v) {
        while (p > 1) {
            char shorter[64];
            snprintf(shorter, sizeof(shorter), "%.*e", p - 2, v);
            if (strtod(shorter, NULL) != v) break;
            memcpy(buf, shorter, sizeof(buf));
            p--;
        }
    } else {
        for (p = 16; p <= 17; p++) {
            snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
            if (strtod(buf, NULL) == v) break;
        }
        if (p > 17) return v;
    }
    /* buf: [-]d.ddddde[+-]XX -> integer significand and decimal exponent */
    const char *c = buf;
    bool negative = *c == '-';
    if (negative) c++;
    uint64_t significand = 0;
    int digits = 0;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') {
            significand = significand * 10 + (uint64_t)(*c - '0');
            digits++;
        }
    int exponent = (*c == 'e' ? atoi(c + 1) : 0) - (digits - 1);
    double f = (double)significand;
    char pow_text[16];
    while (exponent < -308) {
        f /= 1e308;
        exponent += 308;
    }
    snprintf(pow_text, sizeof(pow_text), "1e%d", exponent < 0 ? -exponent : exponent);
    double pow10 = strtod(pow_text, NULL); /* the correctly rounded literal, as serde's table */
    f = exponent >= 0 ? f * pow10 : f / pow10;
    return negative ? -f : f;
}

int dl_unigram_parse(const cJSON *json, dl_unigram *m) {
    memset(m, 0, sizeof(*m));
    m->unk_id = -1;
    for (int i = 0; i < 256; i++) m->byte_ids[i] = -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return dl_fail("model without a 'type'");
    if (strcmp(type->valuestring, "Unigram"))
        return dl_fail("model '%s' is not supported (only Unigram)", type->valuestring);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(json, "vocab");
    if (!cJSON_IsArray(vocab)) return dl_fail("Unigram model: 'vocab' must be an array");
    int n = cJSON_GetArraySize(vocab);
    if (n <= 0 || (unsigned)n > MAX_VOCAB) return dl_fail("Unigram model: vocab of %d pieces (allowed 1..%u)", n, MAX_VOCAB);
    m->size = (size_t)n;
    m->pieces = dl_calloc(m->size, sizeof(char *));
    m->scores = dl_calloc(m->size, sizeof(double));
    if (!m->pieces || !m->scores) return -1;
    size_t total_bytes = 0;
    m->min_score = 1e300;
    size_t i = 0;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, vocab) {
        const cJSON *piece = cJSON_GetArrayItem(entry, 0), *score = cJSON_GetArrayItem(entry, 1);
        if (!cJSON_IsArray(entry) || !cJSON_IsString(piece) || !cJSON_IsNumber(score))
            return dl_fail("Unigram model: vocab entry %zu is not [piece, score]", i);
        size_t len = strlen(piece->valuestring);
        if (len > MAX_PIECE_BYTES) return dl_fail("Unigram model: piece %zu is %zu bytes long", i, len);
        m->pieces[i] = dl_strdup(piece->valuestring);
        if (!m->pieces[i]) return -1;
        m->scores[i] = serde_json_double(score->valuedouble);
        if (m->scores[i] < m->min_score) m->min_score = m->scores[i];
        total_bytes += len;
        i++;
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(json, "unk_id");
    if (cJSON_IsNumber(unk)) {
        if (unk->valuedouble < 0 || unk->valuedouble >= (double)m->size)
            return dl_fail("Unigram model: unk_id %g out of range", unk->valuedouble);
        m->unk_id = (int32_t)unk->valuedouble;
    }
    m->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(json, "byte_fallback"));

    size_t max_nodes = total_bytes + 1, slots = 16;
    while (slots < 2 * max_nodes) slots *= 2;
    build_trie t = {dl_calloc(slots, sizeof(uint64_t)), dl_calloc(slots, sizeof(uint32_t)), slots - 1};
    m->node_id = dl_malloc(dl_mul_size(max_nodes, sizeof(int32_t)));
    int rc = -1;
    if (t.keys && t.child && m->node_id) {
        m->n_nodes = 1;
        m->node_id[0] = -1;
        for (size_t k = 0; k < m->size; k++) build_insert(&t, m, m->pieces[k], strlen(m->pieces[k]), (int32_t)k);
        rc = compress_trie(m, &t);
    }
    free(t.keys);
    free(t.child);
    if (rc) return -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        m->byte_ids[b] = dl_unigram_piece_id(m, name, 6);
    }
    return 0;
}

void dl_unigram_free(dl_unigram *m) {
    if (m->pieces)
        for (size_t i = 0; i < m->size; i++) free(m->pieces[i]);
    free(m->pieces);
    free(m->scores);
    free(m->node_first);
    free(m->edge_byte);
    free(m->edge_child);
    free(m->node_dense);
    free(m->dense);
    free(m->node_id);
    memset(m, 0, sizeof(*m));
}

void dl_unigram_scratch_free(dl_unigram_scratch *s) {
    free(s->utf8);
    free(s->best_score);
    free(s->best_start);
    free(s->best_id);
    memset(s, 0, sizeof(*s));
}

static int push_id(int32_t **ids, size_t *count, size_t *cap, int32_t id) {
    if (*count == *cap) {
        size_t n = *cap ? *cap * 2 : 64;
        int32_t *p = dl_realloc(*ids, dl_mul_size(n, sizeof(int32_t)));
        if (!p) return -1;
        *ids = p;
        *cap = n;
    }
    (*ids)[(*count)++] = id;
    return 0;
}

static size_t utf8_len(unsigned char b) {
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Emits the ids of one span the lattice marked unknown (possibly fused). */
static int emit_unknown(const dl_unigram *m, const char *s, size_t len, int32_t **ids, size_t *count,
                        size_t *cap) {
    int32_t id = dl_unigram_piece_id(m, s, len);
    if (id >= 0) return push_id(ids, count, cap, id);
    if (m->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < len && all; i++) all = m->byte_ids[(unsigned char)s[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < len; i++)
                if (push_id(ids, count, cap, m->byte_ids[(unsigned char)s[i]])) return -1;
            return 0;
        }
    }
    if (m->unk_id < 0) return dl_fail("text has a character no piece covers and the model has no unk_id");
    return push_id(ids, count, cap, m->unk_id);
}

int dl_unigram_encode(const dl_unigram *m, const char *s, size_t len, dl_unigram_scratch *sc, int32_t **ids,
                      size_t *count, size_t *cap) {
    if (len == 0) return 0;
    if (len + 1 > sc->lattice_cap) {
        size_t n = len + 1;
        free(sc->best_score);
        free(sc->best_start);
        free(sc->best_id);
        sc->best_score = dl_malloc(dl_mul_size(n, sizeof(double)));
        sc->best_start = dl_malloc(dl_mul_size(n, sizeof(int32_t)));
        sc->best_id = dl_malloc(dl_mul_size(n, sizeof(int32_t)));
        if (!sc->best_score || !sc->best_start || !sc->best_id) {
            sc->lattice_cap = 0;
            return -1;
        }
        sc->lattice_cap = n;
    }
    if (len > INT32_MAX) return dl_fail("pre-token of %zu bytes is too long", len);
    double *best = sc->best_score;
    int32_t *from = sc->best_start, *best_id = sc->best_id;
    for (size_t i = 0; i <= len; i++) from[i] = -1;
    best[0] = 0.0;
    double unk_score = m->min_score - UNK_PENALTY;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t start = 0; start < len;) {
        size_t mblen = utf8_len(u[start]);
        if (start + mblen > len) mblen = len - start;
        double base = best[start];
        bool has_single = false;
        uint32_t node = 0;
        for (size_t end = start; end < len;) {
            node = trie_child(m, node, u[end]);
            if (!node) break;
            end++;
            int32_t id = m->node_id[node];
            if (id < 0) continue;
            double cand = base + m->scores[id];
            if (from[end] < 0 || cand > best[end]) {
                best[end] = cand;
                from[end] = (int32_t)start;
                best_id[end] = id;
            }
            if (end - start == mblen) has_single = true;
        }
        if (!has_single) {
            size_t end = start + mblen;
            double cand = base + unk_score;
            if (from[end] < 0 || cand > best[end]) {
                best[end] = cand;
                from[end] = (int32_t)start;
                best_id[end] = m->unk_id; /* -1 without unk_id: reported when emitted */
            }
        }
        start += mblen;
    }
    /* Backtrack, collecting pieces end-first; then append them in order. */
    size_t first = *count;
    size_t unk_end = 0; /* end of a pending run of unknown spans, 0 if none */
    size_t end = len;
    /* Collected in reverse into ids, reversed at the end. An unknown run is
     * emitted as a unit (its byte pieces reversed too, then restored). */
    while (end > 0) {
        size_t start = (size_t)from[end];
        int32_t id = best_id[end];
        bool unknown = m->unk_id >= 0 ? id == m->unk_id : id < 0;
        if (unknown) {
            if (!unk_end) unk_end = end;
        } else {
            if (unk_end) {
                size_t before = *count;
                if (emit_unknown(m, s + end, unk_end - end, ids, count, cap)) return -1;
                for (size_t a = before, b = *count; a + 1 < b; a++, b--) {
                    int32_t t = (*ids)[a];
                    (*ids)[a] = (*ids)[b - 1];
                    (*ids)[b - 1] = t;
                }
                unk_end = 0;
            }
            if (push_id(ids, count, cap, id)) return -1;
        }
        end = start;
    }
    if (unk_end) {
        size_t before = *count;
        if (emit_unknown(m, s, unk_end, ids, count, cap)) return -1;
        for (size_t a = before, b = *count; a + 1 < b; a++, b--) {
            int32_t t = (*ids)[a];
            (*ids)[a] = (*ids)[b - 1];
            (*ids)[b - 1] = t;
        }
    }
    for (size_t a = first, b = *count; a + 1 < b; a++, b--) {
        int32_t t = (*ids)[a];
        (*ids)[a] = (*ids)[b - 1];
        (*ids)[b - 1] = t;
    }
    return 0;
}
