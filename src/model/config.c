/* ALBERT configuration: presets, validation, HF config.json text parsed and
 * written in memory, and as files. Part of the model module (model ->
 * device -> util). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/util.h"

enum { CONFIG_JSON_MAX = 1 << 20, SIZE_LIMIT = 1 << 20 };

int dl_albert_config_preset(const char *name, dl_albert_config *cfg) {
    if (name && !strcmp(name, "tiny")) {
        *cfg = (dl_albert_config){.vocab_size = 8000, .embedding_size = 64, .hidden_size = 128,
                                  .num_hidden_layers = 4, .num_hidden_groups = 1,
                                  .inner_group_num = 1, .num_attention_heads = 4,
                                  .intermediate_size = 512, .max_position_embeddings = 128,
                                  .type_vocab_size = 2, .pad_token_id = 0,
                                  .layer_norm_eps = 1e-12f, .initializer_range = 0.02f};
        return 0;
    }
    if (name && !strcmp(name, "sahajbert")) {
        *cfg = (dl_albert_config){.vocab_size = 32000, .embedding_size = 128, .hidden_size = 1024,
                                  .num_hidden_layers = 24, .num_hidden_groups = 1,
                                  .inner_group_num = 1, .num_attention_heads = 16,
                                  .intermediate_size = 4096, .max_position_embeddings = 512,
                                  .type_vocab_size = 2, .pad_token_id = 0,
                                  .layer_norm_eps = 1e-12f, .initializer_range = 0.02f};
        return 0;
    }
    return dl_fail("unknown model preset '%s' (known: tiny, sahajbert)", name ? name : "(null)");
}

int dl_albert_config_validate(const dl_albert_config *c) {
    struct { const char *name; int value; } sizes[] = {
        {"vocab_size", c->vocab_size},
        {"embedding_size", c->embedding_size},
        {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_hidden_groups", c->num_hidden_groups},
        {"inner_group_num", c->inner_group_num},
        {"num_attention_heads", c->num_attention_heads},
        {"intermediate_size", c->intermediate_size},
        {"max_position_embeddings", c->max_position_embeddings},
        {"type_vocab_size", c->type_vocab_size},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value <= 0 || sizes[i].value > SIZE_LIMIT)
            return dl_fail("model config: %s = %d is outside 1..%d", sizes[i].name,
                           sizes[i].value, SIZE_LIMIT);
    if (c->hidden_size % c->num_attention_heads)
        return dl_fail("model config: hidden_size %d is not a multiple of num_attention_heads %d",
                       c->hidden_size, c->num_attention_heads);
    if (c->num_hidden_groups > c->num_hidden_layers)
        return dl_fail("model config: num_hidden_groups %d exceeds num_hidden_layers %d",
                       c->num_hidden_groups, c->num_hidden_layers);
    if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size)
        return dl_fail("model config: pad_token_id %d is outside the vocabulary of %d",
                       c->pad_token_id, c->vocab_size);
    if (!(c->layer_norm_eps > 0 && c->layer_norm_eps < 1))
        return dl_fail("model config: layer_norm_eps %g is not in (0, 1)", c->layer_norm_eps);
    if (!(c->initializer_range >= 0 && c->initializer_range < 10))
        return dl_fail("model config: initializer_range %g is not in [0, 10)",
                       c->initializer_range);
    /* Parameter count must stay addressable with int offsets in kernels. */
    dl_param_layout layout;
    if (dl_param_layout_build(c, &layout)) return -1;
    size_t total = layout.total;
    dl_param_layout_free(&layout);
    if (total > (size_t)1 << 31)
        return dl_fail("model config: %zu parameters exceed the 2^31 this build supports", total);
    return 0;
}

static int get_int(const cJSON *root, const char *key, int *out, int fallback, bool required) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item || cJSON_IsNull(item)) {
        if (required) return dl_fail("config.json: '%s' is missing", key);
        *out = fallback;
        return 0;
    }
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) ||
        fabs(item->valuedouble) > 1e9) {
        char got[48] = "a value that is not a number";
        if (cJSON_IsNumber(item)) snprintf(got, sizeof got, "%.17g", item->valuedouble);
        return dl_fail("config.json: '%s' must be a whole number from -1000000000 to 1000000000 (sizes at least 1), "
                       "got %s", key, got);
    }
    *out = (int)item->valuedouble;
    return 0;
}

static int get_float(const cJSON *root, const char *key, float *out, float fallback) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!item || cJSON_IsNull(item)) {
        *out = fallback;
        return 0;
    }
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return dl_fail("config.json: '%s' must be a number", key);
    *out = (float)item->valuedouble;
    return 0;
}

int dl_albert_config_parse(const char *json, size_t size, const char *origin, dl_albert_config *cfg) {
    cJSON *root = cJSON_ParseWithLength(json, size);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dl_fail("%s: not a JSON object", origin);
    }
    dl_albert_config c = {0};
    int rc = 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "albert")))
        rc = dl_fail("model_type is not \"albert\"");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (!rc && act && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu_new")))
        rc = dl_fail("hidden_act must be \"gelu_new\" (the only activation implemented)");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(root, "position_embedding_type");
    if (!rc && pos && (!cJSON_IsString(pos) || strcmp(pos->valuestring, "absolute")))
        rc = dl_fail("position_embedding_type must be \"absolute\"");
    /* Defaults are HF AlbertConfig's. */
    if (!rc) rc = get_int(root, "vocab_size", &c.vocab_size, 30000, true);
    if (!rc) rc = get_int(root, "embedding_size", &c.embedding_size, 128, false);
    if (!rc) rc = get_int(root, "hidden_size", &c.hidden_size, 4096, true);
    if (!rc) rc = get_int(root, "num_hidden_layers", &c.num_hidden_layers, 12, true);
    if (!rc) rc = get_int(root, "num_hidden_groups", &c.num_hidden_groups, 1, false);
    if (!rc) rc = get_int(root, "inner_group_num", &c.inner_group_num, 1, false);
    if (!rc) rc = get_int(root, "num_attention_heads", &c.num_attention_heads, 64, true);
    if (!rc) rc = get_int(root, "intermediate_size", &c.intermediate_size, 16384, true);
    if (!rc) rc = get_int(root, "max_position_embeddings", &c.max_position_embeddings, 512, false);
    if (!rc) rc = get_int(root, "type_vocab_size", &c.type_vocab_size, 2, false);
    if (!rc) rc = get_int(root, "pad_token_id", &c.pad_token_id, 0, false);
    if (!rc) rc = get_float(root, "layer_norm_eps", &c.layer_norm_eps, 1e-12f);
    if (!rc) rc = get_float(root, "initializer_range", &c.initializer_range, 0.02f);
    const char *dropouts[] = {"hidden_dropout_prob", "attention_probs_dropout_prob"};
    for (int i = 0; !rc && i < 2; i++) {
        float p;
        rc = get_float(root, dropouts[i], &p, 0);
        if (!rc && p != 0)
            DL_WARN("model", "%s: %s = %g is ignored (dedloc trains without dropout)", origin,
                    dropouts[i], p);
    }
    cJSON_Delete(root);
    if (!rc) rc = dl_albert_config_validate(&c);
    if (rc) return dl_fail_context("%s", origin);
    *cfg = c;
    return 0;
}

int dl_albert_config_load(const char *path, dl_albert_config *cfg) {
    char *text;
    size_t size;
    if (dl_read_file(path, CONFIG_JSON_MAX, &text, &size)) return -1;
    int rc = dl_albert_config_parse(text, size, path, cfg);
    free(text);
    return rc;
}

int dl_albert_config_to_json(const dl_albert_config *c, char **json) {
    *json = NULL;
    if (dl_albert_config_validate(c)) return -1;
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("AlbertForPreTraining"));
    cJSON_AddNumberToObject(root, "attention_probs_dropout_prob", 0);
    cJSON_AddNumberToObject(root, "bos_token_id", 2);
    cJSON_AddNumberToObject(root, "classifier_dropout_prob", 0.1);
    cJSON_AddNumberToObject(root, "embedding_size", c->embedding_size);
    cJSON_AddNumberToObject(root, "eos_token_id", 3);
    cJSON_AddStringToObject(root, "hidden_act", "gelu_new");
    cJSON_AddNumberToObject(root, "hidden_dropout_prob", 0);
    cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
    /* Print the float's shortest decimal so 0.02f reads back as 0.02. */
    char num[32];
    snprintf(num, sizeof num, "%.9g", c->initializer_range);
    cJSON_AddNumberToObject(root, "initializer_range", strtod(num, NULL));
    cJSON_AddNumberToObject(root, "inner_group_num", c->inner_group_num);
    cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
    snprintf(num, sizeof num, "%.9g", c->layer_norm_eps);
    cJSON_AddNumberToObject(root, "layer_norm_eps", strtod(num, NULL));
    cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddStringToObject(root, "model_type", "albert");
    cJSON_AddNumberToObject(root, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(root, "num_hidden_groups", c->num_hidden_groups);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(root, "pad_token_id", c->pad_token_id);
    cJSON_AddStringToObject(root, "position_embedding_type", "absolute");
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    cJSON_AddNumberToObject(root, "type_vocab_size", c->type_vocab_size);
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return dl_fail("cannot format config.json (out of memory)");
    size_t len = strlen(text);
    char *with_newline = dl_malloc(len + 2);
    if (with_newline) {
        memcpy(with_newline, text, len);
        with_newline[len] = '\n';
        with_newline[len + 1] = 0;
    }
    cJSON_free(text);
    *json = with_newline;
    return with_newline ? 0 : -1;
}

int dl_albert_config_save(const char *path, const dl_albert_config *c) {
    char *text;
    if (dl_albert_config_to_json(c, &text)) return -1;
    int rc = dl_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

void dl_albert_config_describe(const dl_albert_config *c, char *buf, size_t size) {
    snprintf(buf, size,
             "ALBERT vocab %d, embedding %d, hidden %d, %d layers in %d group(s) x %d, %d heads, "
             "intermediate %d, %d positions",
             c->vocab_size, c->embedding_size, c->hidden_size, c->num_hidden_layers,
             c->num_hidden_groups, c->inner_group_num, c->num_attention_heads,
             c->intermediate_size, c->max_position_embeddings);
}

int dl_precision_parse(const char *name, dl_precision *out) {
    if (name && !strcmp(name, "fp32")) *out = DL_PRECISION_FP32;
    else if (name && !strcmp(name, "fp16")) *out = DL_PRECISION_FP16;
    else if (name && !strcmp(name, "bf16")) *out = DL_PRECISION_BF16;
    else return dl_fail("unknown precision '%s' (fp32, fp16 or bf16)", name ? name : "(null)");
    return 0;
}

const char *dl_precision_name(dl_precision p) {
    switch (p) {
    case DL_PRECISION_FP32: return "fp32";
    case DL_PRECISION_FP16: return "fp16";
    case DL_PRECISION_BF16: return "bf16";
    }
    return "?";
}
