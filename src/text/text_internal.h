/* Private structures of the text module: code point strings, the normalizer
 * and pre-tokenizer trees, the Unigram model and the added vocabulary.
 *
 * Text travels between the stages as arrays of Unicode code points. HF
 * tokenizers tracks a full alignment with the original text; the ids depend on
 * it in one place only (Metaspace with prepend_scheme "first" prepends only to
 * a piece that starts at original offset 0), so a string carries one number,
 * origin: how many of its leading chars align to offset 0 of the original
 * text (usually 0 or 1; a Prepend normalizer adds its chars to it). */
#ifndef DEDLOC_TEXT_INTERNAL_H
#define DEDLOC_TEXT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include "dedloc/text.h"

/* Longest input we accept in one call, in bytes (a bound on allocations). */
#define DL_TEXT_MAX_INPUT ((size_t)1 << 30)

/* ---- code point strings (ustr.c) ---------------------------------------- */
typedef struct {
    uint32_t *cp;
    size_t len, cap;
    size_t origin; /* leading chars aligned to offset 0 of the original text */
} dl_ustr;

int dl_ustr_reserve(dl_ustr *s, size_t cap);
int dl_ustr_push(dl_ustr *s, uint32_t c);
int dl_ustr_append(dl_ustr *s, const uint32_t *cp, size_t n);
void dl_ustr_free(dl_ustr *s);
void dl_ustr_swap(dl_ustr *a, dl_ustr *b);
/* Decodes UTF-8; each maximal invalid subpart becomes one U+FFFD (the
 * "replace" policy of Python and of the WHATWG encoding standard), counted in
 * *invalid. Appends to out. */
int dl_utf8_decode(const char *text, size_t len, dl_ustr *out, size_t *invalid);
/* Encodes n code points as UTF-8 into a buffer grown as needed (NUL-terminated). */
int dl_utf8_encode(const uint32_t *cp, size_t n, char **buf, size_t *cap, size_t *len);
/* Parses a UTF-8 C string (from JSON, trusted to be valid) into a malloc'd array. */
int dl_utf8_to_cps(const char *s, uint32_t **cp, size_t *n);

/* Character classes as Rust's char methods / HF tokenizers define them. */
bool dl_uc_is_whitespace(uint32_t c);  /* White_Space property */
bool dl_uc_is_punctuation(uint32_t c); /* ASCII punctuation or general category P* */
bool dl_uc_is_numeric(uint32_t c);     /* Nd, Nl, No */
bool dl_uc_is_alphanumeric(uint32_t c);
bool dl_uc_is_word(uint32_t c);        /* Oniguruma's Unicode \w */
bool dl_uc_is_mark(uint32_t c);        /* Mn, Mc, Me */
bool dl_uc_is_nonspacing_mark(uint32_t c); /* Mn */
bool dl_uc_is_control(uint32_t c);     /* Cc, Cf, Cn, Co (BertNormalizer) */
bool dl_uc_is_cjk(uint32_t c);
/* Code points where HF tokenizers' (older) Unicode tables disagree with
 * utf8proc for one class (unicode_compat.c, generated): the class is flipped. */
enum dl_uc_table { DL_UC_PUNCT, DL_UC_MARK, DL_UC_NONSPACING, DL_UC_CONTROL, DL_UC_NORM_UNCHANGED, DL_UC_CCC_ZERO };
bool dl_uc_compat(enum dl_uc_table table, uint32_t c);
/* Full lowercase mapping of one char (Rust char::to_lowercase); returns count (1 or 2). */
int dl_uc_lower(uint32_t c, uint32_t out[2]);

/* ---- patterns: a literal string or a PCRE2 regex on code points (pattern.c) */
typedef struct {
    uint32_t *literal; /* literal pattern, or NULL for a regex */
    size_t literal_len;
    pcre2_code *re;
} dl_pattern;

/* JSON object {"String": s} or {"Regex": r}. */
struct cJSON;
int dl_pattern_parse(const struct cJSON *json, dl_pattern *p, const char *what);
void dl_pattern_free(dl_pattern *p);
/* Finds matches in s[0..n): calls fn(ctx, start, end) for each non-overlapping
 * match, left to right. Returns 0, or -1 on a regex engine error. */
typedef int (*dl_match_fn)(void *ctx, size_t start, size_t end);
int dl_pattern_find(const dl_pattern *p, const uint32_t *s, size_t n, dl_match_fn fn, void *ctx);

/* ---- normalizers (normalizer.c) ------------------------------------------ */
enum dl_norm_kind {
    DL_NORM_SEQUENCE, DL_NORM_NMT, DL_NORM_NFC, DL_NORM_NFD, DL_NORM_NFKC, DL_NORM_NFKD,
    DL_NORM_REPLACE, DL_NORM_LOWERCASE, DL_NORM_STRIP, DL_NORM_STRIP_ACCENTS, DL_NORM_PREPEND,
    DL_NORM_BERT, DL_NORM_PRECOMPILED,
};

typedef struct dl_normalizer {
    enum dl_norm_kind kind;
    struct dl_normalizer *children; /* Sequence */
    size_t n_children;
    dl_pattern pattern;             /* Replace */
    uint32_t *content;              /* Replace content, Prepend text */
    size_t content_len;
    bool strip_left, strip_right;   /* Strip */
    bool clean_text, handle_chinese, strip_accents, lowercase; /* BertNormalizer */
    struct dl_precompiled *precompiled;
} dl_normalizer;

int dl_normalizer_parse(const struct cJSON *json, dl_normalizer *n);
void dl_normalizer_free(dl_normalizer *n);
/* Normalizes s in place (tmp is scratch space). */
int dl_normalizer_apply(const dl_normalizer *n, dl_ustr *s, dl_ustr *tmp);

/* ---- pre-tokenizers (pretokenizer.c) ------------------------------------- */
/* A list of pieces over one code point buffer. */
typedef struct {
    size_t start, end;
    size_t origin; /* as dl_ustr.origin, for this piece */
} dl_piece;

typedef struct {
    dl_ustr text;
    dl_piece *pieces;
    size_t n, cap;
} dl_pieces;

int dl_pieces_add(dl_pieces *p, const uint32_t *cp, size_t n, size_t origin);
/* The origin of a part starting at index start of a string with origin o. */
static inline size_t dl_origin_from(size_t o, size_t start) { return o > start ? o - start : 0; }
void dl_pieces_clear(dl_pieces *p);
void dl_pieces_free(dl_pieces *p);

enum dl_split_behavior {
    DL_SPLIT_REMOVED, DL_SPLIT_ISOLATED, DL_SPLIT_MERGED_WITH_PREVIOUS,
    DL_SPLIT_MERGED_WITH_NEXT, DL_SPLIT_CONTIGUOUS,
};

enum dl_pretok_kind {
    DL_PRETOK_SEQUENCE, DL_PRETOK_METASPACE, DL_PRETOK_DIGITS, DL_PRETOK_PUNCTUATION,
    DL_PRETOK_WHITESPACE_SPLIT, DL_PRETOK_WHITESPACE, DL_PRETOK_SPLIT, DL_PRETOK_BERT,
    DL_PRETOK_CHAR_DELIMITER,
};

enum dl_prepend_scheme { DL_PREPEND_ALWAYS, DL_PREPEND_FIRST, DL_PREPEND_NEVER };

typedef struct dl_pretokenizer {
    enum dl_pretok_kind kind;
    struct dl_pretokenizer *children;
    size_t n_children;
    uint32_t replacement;            /* Metaspace */
    enum dl_prepend_scheme prepend;  /* Metaspace */
    bool split;                      /* Metaspace */
    bool individual_digits;          /* Digits */
    enum dl_split_behavior behavior; /* Punctuation, Split */
    dl_pattern pattern;              /* Split */
    bool invert;                     /* Split */
    uint32_t delimiter;              /* CharDelimiterSplit */
} dl_pretokenizer;

int dl_pretokenizer_parse(const struct cJSON *json, dl_pretokenizer *p);
void dl_pretokenizer_free(dl_pretokenizer *p);
/* Splits every piece of *p further; tmp is scratch space. */
int dl_pretokenizer_apply(const dl_pretokenizer *pt, dl_pieces *p, dl_pieces *tmp);

/* ---- Unigram model (unigram.c) -------------------------------------------- */
typedef struct {
    char **pieces;   /* id -> piece (UTF-8) */
    double *scores;
    size_t size;
    int32_t unk_id;  /* -1 if none */
    bool byte_fallback;
    double min_score;
    int32_t byte_ids[256]; /* ids of <0xXX>, -1 if absent */
    /* byte trie in compressed rows: the children of node n are
     * edge_byte/edge_child[node_first[n] .. node_first[n+1]), sorted by byte */
    uint32_t *node_first;
    uint8_t *edge_byte;
    uint32_t *edge_child;
    /* wide nodes (the root, the lead bytes of a script) also get a direct
     * 256-entry child table: node_dense[n] indexes dense, or is UINT32_MAX */
    uint32_t *node_dense;
    uint32_t *dense;
    int32_t *node_id; /* id ending at a node, -1 if none */
    size_t n_nodes;
} dl_unigram;

int dl_unigram_parse(const struct cJSON *json, dl_unigram *m);
void dl_unigram_free(dl_unigram *m);
int32_t dl_unigram_piece_id(const dl_unigram *m, const char *s, size_t len);

/* Scratch buffers of one encode call (the tokenizer itself stays immutable). */
typedef struct {
    char *utf8;
    size_t utf8_cap;
    double *best_score;
    int32_t *best_start; /* -1: unreached */
    int32_t *best_id;
    size_t lattice_cap;
} dl_unigram_scratch;

/* Appends the ids of one pre-token (UTF-8 bytes) to *ids. */
int dl_unigram_encode(const dl_unigram *m, const char *s, size_t len, dl_unigram_scratch *scratch,
                      int32_t **ids, size_t *count, size_t *cap);
void dl_unigram_scratch_free(dl_unigram_scratch *scratch);

/* ---- added vocabulary ------------------------------------------------------ */
typedef struct {
    uint32_t *content;
    size_t len;
    int32_t id;
    char *utf8;
    bool single_word, lstrip, rstrip, normalized, special;
} dl_added_token;

/* ---- post-processor ------------------------------------------------------- */
typedef struct {
    int kind;          /* 0: sequence A, 1: sequence B, 2: special token */
    int32_t type_id;
    int32_t *ids;      /* special token ids */
    size_t n_ids;
} dl_template_item;

typedef struct {
    bool present;
    dl_template_item *single, *pair;
    size_t n_single, n_pair;
} dl_post_processor;

struct dl_tokenizer {
    dl_normalizer *normalizer;     /* NULL: none */
    dl_pretokenizer *pretokenizer; /* NULL: none */
    dl_unigram model;
    dl_added_token *added;
    size_t n_added;
    bool has_normalized_added, has_raw_added;
    dl_post_processor post;
    size_t vocab_size;
    char **id_to_token; /* vocab_size entries (added tokens included), borrowed pointers */
    bool *is_special;
    bool *starts_word;
    uint32_t word_prefix; /* Metaspace replacement, 0 if none */
};

/* ---- precompiled charsmap normalizer (precompiled.c) ---------------------- */
struct dl_precompiled;
int dl_precompiled_parse(const char *base64, struct dl_precompiled **out);
void dl_precompiled_free(struct dl_precompiled *p);
int dl_precompiled_apply(const struct dl_precompiled *p, dl_ustr *s, dl_ustr *tmp);

#endif
