/* Model configuration and parameter layout: presets, config.json round trip
 * (files and in memory), HF parameter names and sizes, initialisation, batch
 * checks. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/model.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void test_presets_and_layout(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("sahajbert", &cfg));
    CHECK_OK(dl_albert_config_validate(&cfg));
    dl_param_layout layout;
    CHECK_OK(dl_param_layout_build(&cfg, &layout));
    /* albert-large with a 32000 vocabulary: about 18M parameters. */
    CHECK_MSG(layout.total > 17000000 && layout.total < 19000000, "total %zu", layout.total);
    CHECK(layout.count == 5 + 2 + 16 + 2 + 1 + 2 + 2 + 2);
    CHECK(!strcmp(layout.entries[0].name, "albert.embeddings.word_embeddings.weight"));
    const dl_param_entry *q = dl_param_layout_find(
        &layout, "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight");
    CHECK(q && q->ndim == 2 && q->shape[0] == 1024 && q->shape[1] == 1024 && !q->no_weight_decay);
    const dl_param_entry *ffn = dl_param_layout_find(
        &layout, "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight");
    CHECK(ffn && ffn->shape[0] == 4096 && ffn->shape[1] == 1024);
    const dl_param_entry *bias = dl_param_layout_find(&layout, "predictions.bias");
    CHECK(bias && bias->numel == 32000 && bias->no_weight_decay);
    CHECK(dl_param_layout_find(&layout, "predictions.decoder.weight") == NULL);
    size_t sum = 0;
    for (int i = 0; i < layout.count; i++) {
        CHECK(layout.entries[i].offset == sum);
        sum += layout.entries[i].numel;
    }
    CHECK(sum == layout.total);
    dl_param_layout_free(&layout);
    CHECK(dl_albert_config_preset("huge", &cfg) == -1);
}

static void test_groups_layout(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    cfg.num_hidden_groups = 2;
    cfg.inner_group_num = 3;
    dl_param_layout layout;
    CHECK_OK(dl_param_layout_build(&cfg, &layout));
    CHECK(dl_param_layout_find(&layout, "albert.encoder.albert_layer_groups.1.albert_layers.2."
                                        "ffn_output.bias") != NULL);
    CHECK(layout.count == 7 + 6 * 16 + 9);
    dl_param_layout_free(&layout);
}

static void test_config_roundtrip(void) {
    char dir[] = "/tmp/dedloc_config_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    dl_albert_config cfg, back;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    cfg.num_hidden_groups = 2;
    cfg.pad_token_id = 3;
    CHECK_OK(dl_albert_config_save(path, &cfg));
    CHECK_OK(dl_albert_config_load(path, &back));
    CHECK(!memcmp(&cfg, &back, sizeof cfg));

    const char *bad[] = {
        "[1, 2]",
        "{\"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 5, \"intermediate_size\": 8}",
        "{\"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 4, \"intermediate_size\": 8, \"hidden_act\": \"relu\"}",
        "{\"vocab_size\": \"ten\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 4, \"intermediate_size\": 8}",
        "{\"vocab_size\": 10, \"hidden_size\": 32, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 4, \"intermediate_size\": -8}",
        "{\"vocab_size\": 10, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_OK(dl_write_file_atomic(path, bad[i], strlen(bad[i])));
        CHECK_MSG(dl_albert_config_load(path, &back) == -1, "bad config %zu accepted", i);
        CHECK(strlen(dl_error()) > 0);
    }
    unlink(path);
    rmdir(dir);
}

/* In memory, against the config.json transformers 4.40.2 wrote for the odd
 * fixture: the parser reads exactly `size` bytes (the buffer goes on with
 * garbage, no NUL), and our text carries the same value for every key HF
 * wrote, except the ones we do not model (classifier dropout, version). */
static void test_config_in_memory(void) {
    char path[512], *hf_text;
    size_t hf_size;
    snprintf(path, sizeof path, "%s/tests/fixtures/albert_odd/config.json", DEDLOC_SOURCE_DIR);
    CHECK_OK(dl_read_file(path, 1 << 20, &hf_text, &hf_size));
    char *buffer = malloc(hf_size + 8);
    memcpy(buffer, hf_text, hf_size);
    memcpy(buffer + hf_size, "}garbage", 8);
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_parse(buffer, hf_size, "odd", &cfg));
    CHECK(cfg.vocab_size == 131 && cfg.embedding_size == 24 && cfg.hidden_size == 48);
    CHECK(cfg.num_hidden_layers == 3 && cfg.num_hidden_groups == 1 && cfg.inner_group_num == 1);
    CHECK(cfg.num_attention_heads == 4 && cfg.intermediate_size == 80);
    CHECK(cfg.max_position_embeddings == 48 && cfg.type_vocab_size == 2 && cfg.pad_token_id == 0);
    CHECK(cfg.layer_norm_eps == 1e-12f && cfg.initializer_range == 0.02f);

    char *ours;
    CHECK_OK(dl_albert_config_to_json(&cfg, &ours));
    CHECK(ours[strlen(ours) - 1] == '\n');
    cJSON *hf = cJSON_ParseWithLength(hf_text, hf_size), *mine = cJSON_Parse(ours);
    CHECK(cJSON_IsObject(hf) && cJSON_IsObject(mine));
    const cJSON *item;
    cJSON_ArrayForEach(item, hf) {
        if (!strcmp(item->string, "transformers_version") || !strcmp(item->string, "classifier_dropout_prob"))
            continue;
        const cJSON *other = cJSON_GetObjectItemCaseSensitive(mine, item->string);
        /* numbers as the float they configure: we print floats with 9 digits */
        bool same = other && (cJSON_IsNumber(item) && cJSON_IsNumber(other)
                                  ? (float)item->valuedouble == (float)other->valuedouble
                                  : cJSON_Compare(item, other, true));
        CHECK_MSG(same, "key %s differs from HF's", item->string);
    }
    cJSON_Delete(hf);
    cJSON_Delete(mine);
    dl_albert_config back;
    CHECK_OK(dl_albert_config_parse(ours, strlen(ours), "ours", &back));
    CHECK(!memcmp(&cfg, &back, sizeof cfg));

    const char *bad = "{\"vocab_size\": 10, \"hidden_size\": 32, \"hidden_act\": \"relu\"}";
    CHECK(dl_albert_config_parse(bad, strlen(bad), "the checkpoint", &back) == -1);
    CHECK_MSG(!strncmp(dl_error(), "the checkpoint: ", 16), "error '%s' does not name the origin", dl_error());
    CHECK(dl_albert_config_parse(hf_text, hf_size / 2, "half", &back) == -1);
    free(ours);
    free(buffer);
    free(hf_text);
}

static void test_init(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    cfg.pad_token_id = 5;
    dl_param_layout layout;
    CHECK_OK(dl_param_layout_build(&cfg, &layout));
    float *a = malloc(layout.total * sizeof *a), *b = malloc(layout.total * sizeof *b);
    CHECK_OK(dl_albert_init_params(&cfg, 42, a));
    CHECK_OK(dl_albert_init_params(&cfg, 42, b));
    CHECK(!memcmp(a, b, layout.total * sizeof *a));
    const dl_param_entry *word = dl_param_layout_find(&layout,
                                                      "albert.embeddings.word_embeddings.weight");
    double sum2 = 0;
    for (size_t i = 0; i < word->numel; i++) sum2 += (double)a[i] * a[i];
    double std = sqrt(sum2 / (double)word->numel);
    CHECK_MSG(fabs(std - 0.02) < 0.001, "std %g", std);
    for (int j = 0; j < cfg.embedding_size; j++) CHECK(a[word->offset + 5 * 64 + (size_t)j] == 0);
    const dl_param_entry *ln = dl_param_layout_find(&layout, "predictions.LayerNorm.weight");
    const dl_param_entry *lnb = dl_param_layout_find(&layout, "predictions.LayerNorm.bias");
    CHECK(a[ln->offset] == 1.0f && a[lnb->offset] == 0.0f);
    free(a);
    free(b);
    dl_param_layout_free(&layout);
}

static void test_check_batch(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    dl_batch b;
    CHECK_OK(dl_batch_alloc(&b, 2, 7));
    for (int i = 0; i < 14; i++) b.attention_mask[i] = 1;
    CHECK_OK(dl_albert_check_batch(&cfg, &b, 2, 7));
    CHECK(dl_albert_check_batch(&cfg, &b, 1, 7) == -1);
    b.input_ids[3] = 8000;
    CHECK(dl_albert_check_batch(&cfg, &b, 0, 0) == -1);
    CHECK(strstr(dl_error(), "input_ids[0][3]") != NULL);
    b.input_ids[3] = 1;
    b.labels[9] = -1;
    CHECK(dl_albert_check_batch(&cfg, &b, 0, 0) == -1);
    b.labels[9] = 7999;
    b.sentence_order_label[1] = 2;
    CHECK(dl_albert_check_batch(&cfg, &b, 0, 0) == -1);
    dl_batch_free(&b);
}

int main(void) {
    test_presets_and_layout();
    test_groups_layout();
    test_config_roundtrip();
    test_config_in_memory();
    test_init();
    test_check_batch();
    return dl_test_finish("test_config");
}
