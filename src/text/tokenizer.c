/* Loading tokenizer.json and the encode pipeline: added tokens split out of
 * the raw text first, normalizer on each remaining segment, then the added
 * tokens marked "normalized" split out of the normalized text, pre-tokenizer,
 * Unigram model per pre-token (HF tokenizers' AddedVocabulary order). */
#include <cjson/cJSON.h>
#include <string.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

#define MAX_JSON_BYTES ((size_t)512 << 20)
#define MAX_ADDED 100000

/* Added tokens, with ids assigned the way HF's AddedVocabulary assigns them
 * when it loads a file: a token whose content is already a model piece takes
 * that piece's id, a repeated content is ignored, any other token takes the
 * next id after the model vocabulary and the added ids so far. (The "id"
 * fields of the file agree with this for every file HF writes.) */
static int parse_added(dl_tokenizer *tok, const cJSON *list) {
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) return dl_fail("'added_tokens' must be an array");
    int n = cJSON_GetArraySize(list);
    if (n > MAX_ADDED) return dl_fail("%d added tokens (limit %d)", n, MAX_ADDED);
    tok->added = dl_calloc((size_t)(n ? n : 1), sizeof(dl_added_token));
    if (!tok->added) return -1;
    int64_t max_id = -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        dl_added_token *a = &tok->added[tok->n_added];
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        if (!cJSON_IsString(content))
            return dl_fail("added token %zu: needs a string 'content'", tok->n_added);
        if (cJSON_IsNumber(id) && (id->valuedouble < 0 || id->valuedouble >= (1u << 24)))
            return dl_fail("added token %zu: id %g out of range", tok->n_added, id->valuedouble);
        const char *text = content->valuestring;
        bool repeated = false;
        for (size_t k = 0; k < tok->n_added && !repeated; k++) repeated = !strcmp(tok->added[k].utf8, text);
        if (!*text || repeated) continue;
        int32_t model_id = dl_unigram_piece_id(&tok->model, text, strlen(text));
        if (model_id >= 0) {
            a->id = model_id;
        } else {
            a->id = max_id >= (int64_t)tok->model.size ? (int32_t)(max_id + 1) : (int32_t)tok->model.size;
        }
        if (a->id > max_id) max_id = a->id;
        if (cJSON_IsNumber(id) && (int32_t)id->valuedouble != a->id)
            DL_WARN("text", "added token '%s' is listed with id %d but gets id %d (as in HF tokenizers)", text,
                    (int)id->valuedouble, (int)a->id);
        a->utf8 = dl_strdup(text);
        if (!a->utf8 || dl_utf8_to_cps(text, &a->content, &a->len)) return -1;
        a->single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "single_word"));
        a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "lstrip"));
        a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "rstrip"));
        a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "special"));
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(item, "normalized");
        a->normalized = cJSON_IsBool(norm) ? cJSON_IsTrue(norm) : !a->special;
        tok->n_added++;
        if (a->normalized) tok->has_normalized_added = true;
        else tok->has_raw_added = true;
    }
    return 0;
}

/* Added tokens marked "normalized" are matched against normalized text, so
 * their patterns are the normalized content (as HF's AddedVocabulary does). */
static int normalize_added(dl_tokenizer *tok) {
    if (!tok->normalizer) return 0;
    dl_ustr s = {0}, tmp = {0};
    int rc = 0;
    for (size_t i = 0; i < tok->n_added && !rc; i++) {
        dl_added_token *a = &tok->added[i];
        if (!a->normalized || a->len == 0) continue;
        s.len = 0;
        rc = dl_ustr_append(&s, a->content, a->len);
        if (!rc) rc = dl_normalizer_apply(tok->normalizer, &s, &tmp);
        if (rc) break;
        uint32_t *cp = dl_malloc((s.len ? s.len : 1) * sizeof(uint32_t));
        if (!cp) {
            rc = -1;
            break;
        }
        if (s.len) memcpy(cp, s.cp, s.len * sizeof(uint32_t));
        free(a->content);
        a->content = cp;
        a->len = s.len;
    }
    dl_ustr_free(&s);
    dl_ustr_free(&tmp);
    return rc;
}

static int parse_template_list(const cJSON *list, const cJSON *specials, dl_template_item **items, size_t *n,
                               const char *what) {
    if (!cJSON_IsArray(list)) return dl_fail("TemplateProcessing: '%s' must be an array", what);
    int count = cJSON_GetArraySize(list);
    *items = dl_calloc((size_t)(count ? count : 1), sizeof(dl_template_item));
    if (!*items) return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        dl_template_item *t = &(*items)[*n];
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *body = seq ? seq : sp;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(body, "id");
        const cJSON *type_id = cJSON_GetObjectItemCaseSensitive(body, "type_id");
        if (!body || !cJSON_IsString(id))
            return dl_fail("TemplateProcessing '%s': items must be {Sequence:{id}} or {SpecialToken:{id}}", what);
        t->type_id = cJSON_IsNumber(type_id) ? (int32_t)type_id->valuedouble : 0;
        if (seq) {
            if (!strcmp(id->valuestring, "A")) t->kind = 0;
            else if (!strcmp(id->valuestring, "B")) t->kind = 1;
            else return dl_fail("TemplateProcessing '%s': unknown sequence '%s'", what, id->valuestring);
        } else {
            t->kind = 2;
            const cJSON *entry = cJSON_GetObjectItemCaseSensitive(specials, id->valuestring);
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
            if (!cJSON_IsArray(ids))
                return dl_fail("TemplateProcessing: special token '%s' missing from 'special_tokens'", id->valuestring);
            int k = cJSON_GetArraySize(ids);
            t->ids = dl_calloc((size_t)(k ? k : 1), sizeof(int32_t));
            if (!t->ids) return -1;
            const cJSON *v;
            cJSON_ArrayForEach(v, ids) {
                if (!cJSON_IsNumber(v)) return dl_fail("TemplateProcessing: ids of '%s' must be numbers", id->valuestring);
                t->ids[t->n_ids++] = (int32_t)v->valuedouble;
            }
        }
        (*n)++;
    }
    return 0;
}

/* [CLS] A [SEP] / [CLS] A [SEP] B [SEP] (BertProcessing) as a template. */
static int bert_template(dl_tokenizer *tok, const cJSON *json) {
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(json, "cls");
    const cJSON *sep = cJSON_GetObjectItemCaseSensitive(json, "sep");
    const cJSON *cls_id = cJSON_GetArrayItem(cls, 1), *sep_id = cJSON_GetArrayItem(sep, 1);
    if (!cJSON_IsNumber(cls_id) || !cJSON_IsNumber(sep_id)) return dl_fail("BertProcessing: needs cls and sep [token, id]");
    dl_post_processor *p = &tok->post;
    p->single = dl_calloc(3, sizeof(dl_template_item));
    p->pair = dl_calloc(5, sizeof(dl_template_item));
    if (!p->single || !p->pair) return -1;
    int32_t c = (int32_t)cls_id->valuedouble, s = (int32_t)sep_id->valuedouble;
    int kinds[5] = {2, 0, 2, 1, 2};
    int32_t tokens[5] = {c, 0, s, 0, s}, types[5] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; i++) {
        dl_template_item *t = &p->pair[i];
        t->kind = kinds[i];
        t->type_id = types[i];
        if (kinds[i] == 2) {
            t->ids = dl_malloc(sizeof(int32_t));
            if (!t->ids) return -1;
            t->ids[0] = tokens[i];
            t->n_ids = 1;
        }
        if (i < 3) {
            p->single[i] = *t;
            if (t->ids) {
                p->single[i].ids = dl_malloc(sizeof(int32_t));
                if (!p->single[i].ids) return -1;
                p->single[i].ids[0] = tokens[i];
            }
        }
    }
    p->n_single = 3;
    p->n_pair = 5;
    p->present = true;
    return 0;
}

static int parse_post(dl_tokenizer *tok, const cJSON *json) {
    if (!json || cJSON_IsNull(json)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    if (!cJSON_IsString(type)) return dl_fail("post_processor without a 'type'");
    const char *t = type->valuestring;
    if (!strcmp(t, "BertProcessing")) return bert_template(tok, json);
    if (!strcmp(t, "ByteLevel")) return 0; /* changes offsets only */
    if (strcmp(t, "TemplateProcessing"))
        return dl_fail("post-processor '%s' is not supported (TemplateProcessing, BertProcessing, ByteLevel)", t);
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(json, "special_tokens");
    tok->post.present = true;
    if (parse_template_list(cJSON_GetObjectItemCaseSensitive(json, "single"), specials, &tok->post.single,
                            &tok->post.n_single, "single"))
        return -1;
    return parse_template_list(cJSON_GetObjectItemCaseSensitive(json, "pair"), specials, &tok->post.pair,
                               &tok->post.n_pair, "pair");
}

static int build_vocab(dl_tokenizer *tok) {
    size_t size = tok->model.size;
    for (size_t i = 0; i < tok->n_added; i++)
        if ((size_t)tok->added[i].id + 1 > size) size = (size_t)tok->added[i].id + 1;
    tok->vocab_size = size;
    tok->id_to_token = dl_calloc(size, sizeof(char *));
    tok->is_special = dl_calloc(size, sizeof(bool));
    if (!tok->id_to_token || !tok->is_special) return -1;
    for (size_t i = 0; i < tok->model.size; i++) tok->id_to_token[i] = tok->model.pieces[i];
    for (size_t i = 0; i < tok->n_added; i++) {
        tok->id_to_token[tok->added[i].id] = tok->added[i].utf8;
        tok->is_special[tok->added[i].id] = tok->added[i].special;
    }
    return 0;
}

static uint32_t find_metaspace(const dl_pretokenizer *p) {
    if (!p) return 0;
    if (p->kind == DL_PRETOK_METASPACE) return p->replacement;
    for (size_t i = 0; i < p->n_children; i++) {
        uint32_t r = find_metaspace(&p->children[i]);
        if (r) return r;
    }
    return 0;
}

/* Which pieces begin with the Metaspace replacement (whole-word masking asks often). */
static int mark_word_starts(dl_tokenizer *tok) {
    tok->starts_word = dl_calloc(tok->vocab_size, sizeof(bool));
    if (!tok->starts_word) return -1;
    if (!tok->word_prefix) return 0;
    char *prefix = NULL;
    size_t cap = 0, plen;
    if (dl_utf8_encode(&tok->word_prefix, 1, &prefix, &cap, &plen)) return -1;
    for (size_t i = 0; i < tok->vocab_size; i++) {
        const char *t = tok->id_to_token[i];
        tok->starts_word[i] = t && !tok->is_special[i] && !strncmp(t, prefix, plen);
    }
    free(prefix);
    return 0;
}

int dl_tokenizer_load_json(const char *json, size_t len, dl_tokenizer **out) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return dl_fail("tokenizer JSON does not parse (near byte %zu)",
                              cJSON_GetErrorPtr() ? (size_t)(cJSON_GetErrorPtr() - json) : (size_t)0);
    dl_tokenizer *tok = dl_calloc(1, sizeof(*tok));
    int rc = -1;
    if (!tok) goto done;
    if (!cJSON_IsObject(root)) {
        dl_fail("tokenizer JSON is not an object");
        goto done;
    }
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if (trunc && !cJSON_IsNull(trunc)) DL_WARN("text", "tokenizer.json asks for truncation; ignored (sequences are cut by the data pipeline)");
    if (pad && !cJSON_IsNull(pad)) DL_WARN("text", "tokenizer.json asks for padding; ignored (batches are padded by the data pipeline)");
    if (dl_unigram_parse(cJSON_GetObjectItemCaseSensitive(root, "model"), &tok->model)) {
        dl_fail_context("model");
        goto done;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        tok->normalizer = dl_calloc(1, sizeof(dl_normalizer));
        if (!tok->normalizer || dl_normalizer_parse(norm, tok->normalizer)) goto done;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre)) {
        tok->pretokenizer = dl_calloc(1, sizeof(dl_pretokenizer));
        if (!tok->pretokenizer || dl_pretokenizer_parse(pre, tok->pretokenizer)) goto done;
    }
    if (parse_added(tok, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"))) goto done;
    if (normalize_added(tok)) goto done;
    if (build_vocab(tok)) goto done;
    if (parse_post(tok, cJSON_GetObjectItemCaseSensitive(root, "post_processor"))) goto done;
    tok->word_prefix = find_metaspace(tok->pretokenizer);
    if (mark_word_starts(tok)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) {
        dl_tokenizer_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}

int dl_tokenizer_load(const char *path, dl_tokenizer **out) {
    char *data;
    size_t size;
    *out = NULL;
    if (dl_read_file(path, MAX_JSON_BYTES, &data, &size)) return dl_fail_context("tokenizer %s", path);
    int rc = dl_tokenizer_load_json(data, size, out);
    free(data);
    if (rc) return dl_fail_context("tokenizer %s", path);
    return 0;
}

static void free_items(dl_template_item *items, size_t n) {
    for (size_t i = 0; i < n; i++) free(items[i].ids);
    free(items);
}

void dl_tokenizer_free(dl_tokenizer *tok) {
    if (!tok) return;
    if (tok->normalizer) dl_normalizer_free(tok->normalizer);
    free(tok->normalizer);
    if (tok->pretokenizer) dl_pretokenizer_free(tok->pretokenizer);
    free(tok->pretokenizer);
    dl_unigram_free(&tok->model);
    for (size_t i = 0; i < tok->n_added; i++) {
        free(tok->added[i].content);
        free(tok->added[i].utf8);
    }
    free(tok->added);
    free_items(tok->post.single, tok->post.n_single);
    free_items(tok->post.pair, tok->post.n_pair);
    free(tok->id_to_token);
    free(tok->is_special);
    free(tok->starts_word);
    free(tok);
}

size_t dl_tokenizer_vocab_size(const dl_tokenizer *tok) { return tok->vocab_size; }

int32_t dl_tokenizer_token_to_id(const dl_tokenizer *tok, const char *token) {
    for (size_t i = 0; i < tok->n_added; i++)
        if (!strcmp(tok->added[i].utf8, token)) return tok->added[i].id;
    return dl_unigram_piece_id(&tok->model, token, strlen(token));
}

const char *dl_tokenizer_id_to_token(const dl_tokenizer *tok, int32_t id) {
    if (id < 0 || (size_t)id >= tok->vocab_size) return NULL;
    return tok->id_to_token[id];
}

bool dl_tokenizer_is_special(const dl_tokenizer *tok, int32_t id) {
    return id >= 0 && (size_t)id < tok->vocab_size && tok->is_special[id];
}

bool dl_tokenizer_starts_word(const dl_tokenizer *tok, int32_t id) {
    return id >= 0 && (size_t)id < tok->vocab_size && tok->starts_word[id];
}
