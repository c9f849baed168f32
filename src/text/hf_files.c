/* The tokenizer files of a Hugging Face model folder: tokenizer.json as it
 * was given, plus tokenizer_config.json and special_tokens_map.json, so that
 * AutoTokenizer.from_pretrained(folder) builds the fast tokenizer from
 * tokenizer.json instead of guessing from config.json's model type (which
 * gives a SentencePiece ALBERT tokenizer without its vocabulary). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/text.h"
#include "dedloc/util.h"

/* The role each special token plays for transformers, by its text. ALBERT's
 * conventions (sahajBERT, albert-base-v2) and BERT's spellings. */
static const struct { const char *content, *role; } special_roles[] = {
    {"<pad>", "pad_token"}, {"[PAD]", "pad_token"}, {"<unk>", "unk_token"}, {"[UNK]", "unk_token"},
    {"[CLS]", "cls_token"}, {"[SEP]", "sep_token"}, {"[MASK]", "mask_token"},
};

static int write_json(const char *dir, const char *name, cJSON *obj) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = obj ? cJSON_Print(obj) : NULL;
    if (!text) return dl_fail("cannot build %s (out of memory)", name);
    size_t len = strlen(text);
    char *with_newline = dl_malloc(len + 2);
    int rc = -1;
    if (with_newline) {
        memcpy(with_newline, text, len);
        with_newline[len] = '\n';
        rc = dl_write_file_atomic(path, with_newline, len + 1);
    }
    free(with_newline);
    cJSON_free(text);
    return rc;
}

int dl_tokenizer_save_hf(const char *json, size_t len, int model_max_length, const char *dir) {
    dl_tokenizer *tok = NULL;
    if (dl_tokenizer_load_json(json, len, &tok)) return dl_fail_context("the tokenizer to export");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (dl_write_file_atomic(path, json, len)) {
        dl_tokenizer_free(tok);
        return -1;
    }
    cJSON *map = cJSON_CreateObject();
    cJSON *config = cJSON_CreateObject();
    int rc = map && config ? 0 : dl_fail("cannot build the tokenizer configuration (out of memory)");
    for (size_t i = 0; !rc && i < sizeof special_roles / sizeof special_roles[0]; i++) {
        int32_t id = dl_tokenizer_token_to_id(tok, special_roles[i].content);
        if (id < 0 || !dl_tokenizer_is_special(tok, id) ||
            cJSON_GetObjectItemCaseSensitive(map, special_roles[i].role))
            continue;
        if (!cJSON_AddStringToObject(map, special_roles[i].role, special_roles[i].content) ||
            !cJSON_AddStringToObject(config, special_roles[i].role, special_roles[i].content))
            rc = dl_fail("cannot build the tokenizer configuration (out of memory)");
    }
    dl_tokenizer_free(tok);
    if (!rc && (!cJSON_AddStringToObject(config, "tokenizer_class", "PreTrainedTokenizerFast") ||
                !cJSON_AddNumberToObject(config, "model_max_length", model_max_length) ||
                !cJSON_AddFalseToObject(config, "clean_up_tokenization_spaces")))
        rc = dl_fail("cannot build the tokenizer configuration (out of memory)");
    if (!rc) rc = write_json(dir, "special_tokens_map.json", map);
    if (!rc) rc = write_json(dir, "tokenizer_config.json", config);
    cJSON_Delete(map);
    cJSON_Delete(config);
    return rc;
}
