/* Parameter layout (HF named_parameters order, packed), initialisation,
 * batch checks and the GEMM flop count of a step. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/util.h"

typedef struct layout_builder {
    dl_param_layout *layout;
    int capacity;
} layout_builder;

static int add(layout_builder *b, const char *name, int64_t rows, int64_t cols, bool no_decay) {
    dl_param_layout *l = b->layout;
    if (l->count == b->capacity) {
        int cap = b->capacity ? b->capacity * 2 : 64;
        dl_param_entry *e = dl_realloc(l->entries, (size_t)cap * sizeof *e);
        if (!e) return -1;
        l->entries = e;
        b->capacity = cap;
    }
    dl_param_entry *e = &l->entries[l->count++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = cols ? 2 : 1;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->numel = (size_t)rows * (size_t)(cols ? cols : 1);
    e->offset = l->total;
    e->no_weight_decay = no_decay;
    l->total += e->numel;
    return 0;
}

static int add_linear(layout_builder *b, const char *prefix, int out, int in) {
    char name[DL_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (add(b, name, out, in, false)) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return add(b, name, out, 0, true);
}

static int add_layernorm(layout_builder *b, const char *prefix, int size) {
    char name[DL_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (add(b, name, size, 0, true)) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return add(b, name, size, 0, true);
}

int dl_param_layout_build(const dl_albert_config *c, dl_param_layout *layout) {
    memset(layout, 0, sizeof *layout);
    layout_builder b = {layout, 0};
    int E = c->embedding_size, H = c->hidden_size, I = c->intermediate_size;
    int rc = add(&b, "albert.embeddings.word_embeddings.weight", c->vocab_size, E, false);
    if (!rc) rc = add(&b, "albert.embeddings.position_embeddings.weight",
                      c->max_position_embeddings, E, false);
    if (!rc) rc = add(&b, "albert.embeddings.token_type_embeddings.weight", c->type_vocab_size,
                      E, false);
    if (!rc) rc = add_layernorm(&b, "albert.embeddings.LayerNorm", E);
    if (!rc) rc = add_linear(&b, "albert.encoder.embedding_hidden_mapping_in", H, E);
    for (int g = 0; !rc && g < c->num_hidden_groups; g++)
        for (int j = 0; !rc && j < c->inner_group_num; j++) {
            char p[DL_PARAM_NAME_MAX], q[DL_PARAM_NAME_MAX];
            snprintf(p, sizeof p, "albert.encoder.albert_layer_groups.%d.albert_layers.%d", g, j);
            snprintf(q, sizeof q, "%s.full_layer_layer_norm", p);
            rc = add_layernorm(&b, q, H);
            const char *att[] = {"query", "key", "value", "dense"};
            for (int k = 0; !rc && k < 4; k++) {
                snprintf(q, sizeof q, "%s.attention.%s", p, att[k]);
                rc = add_linear(&b, q, H, H);
            }
            snprintf(q, sizeof q, "%s.attention.LayerNorm", p);
            if (!rc) rc = add_layernorm(&b, q, H);
            snprintf(q, sizeof q, "%s.ffn", p);
            if (!rc) rc = add_linear(&b, q, I, H);
            snprintf(q, sizeof q, "%s.ffn_output", p);
            if (!rc) rc = add_linear(&b, q, H, I);
        }
    if (!rc) rc = add_linear(&b, "albert.pooler", H, H);
    if (!rc) rc = add(&b, "predictions.bias", c->vocab_size, 0, true);
    if (!rc) rc = add_layernorm(&b, "predictions.LayerNorm", E);
    if (!rc) rc = add_linear(&b, "predictions.dense", E, H);
    if (!rc) rc = add_linear(&b, "sop_classifier.classifier", 2, H);
    if (rc) dl_param_layout_free(layout);
    return rc;
}

void dl_param_layout_free(dl_param_layout *layout) {
    free(layout->entries);
    memset(layout, 0, sizeof *layout);
}

const dl_param_entry *dl_param_layout_find(const dl_param_layout *layout, const char *name) {
    for (int i = 0; i < layout->count; i++)
        if (!strcmp(layout->entries[i].name, name)) return &layout->entries[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int dl_albert_init_params(const dl_albert_config *cfg, uint64_t seed, float *params) {
    dl_param_layout layout;
    if (dl_param_layout_build(cfg, &layout)) return -1;
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (int i = 0; i < layout.count; i++) {
        const dl_param_entry *e = &layout.entries[i];
        float *p = params + e->offset;
        bool layernorm_weight = strstr(e->name, "LayerNorm.weight") ||
                                strstr(e->name, "layer_norm.weight");
        if (layernorm_weight) {
            for (size_t j = 0; j < e->numel; j++) p[j] = 1.0f;
        } else if (e->no_weight_decay) {
            memset(p, 0, e->numel * sizeof *p);
        } else {
            for (size_t j = 0; j < e->numel; j++)
                p[j] = dl_rng_normal(&rng) * cfg->initializer_range;
        }
        if (ends_with(e->name, "word_embeddings.weight"))
            memset(p + (size_t)cfg->pad_token_id * (size_t)e->shape[1], 0,
                   (size_t)e->shape[1] * sizeof *p);
    }
    dl_param_layout_free(&layout);
    return 0;
}

int dl_albert_check_batch(const dl_albert_config *c, const dl_batch *b, int max_batch,
                          int max_seq) {
    if (b->batch <= 0 || b->seq <= 0)
        return dl_fail("batch shape %d x %d is not positive", b->batch, b->seq);
    if (max_batch > 0 && b->batch > max_batch)
        return dl_fail("batch of %d sequences exceeds the %d this model was sized for", b->batch,
                       max_batch);
    if (max_seq > 0 && b->seq > max_seq)
        return dl_fail("sequence length %d exceeds the %d this model was sized for", b->seq,
                       max_seq);
    if (b->seq > c->max_position_embeddings)
        return dl_fail("sequence length %d exceeds max_position_embeddings %d", b->seq,
                       c->max_position_embeddings);
    size_t n = (size_t)b->batch * (size_t)b->seq;
    for (size_t i = 0; i < n; i++) {
        int row = (int)(i / (size_t)b->seq), col = (int)(i % (size_t)b->seq);
        if (b->input_ids[i] < 0 || b->input_ids[i] >= c->vocab_size)
            return dl_fail("input_ids[%d][%d] = %d is outside the vocabulary of %d", row, col,
                           b->input_ids[i], c->vocab_size);
        if (b->token_type_ids[i] < 0 || b->token_type_ids[i] >= c->type_vocab_size)
            return dl_fail("token_type_ids[%d][%d] = %d is outside 0..%d", row, col,
                           b->token_type_ids[i], c->type_vocab_size - 1);
        if (b->attention_mask[i] != 0 && b->attention_mask[i] != 1)
            return dl_fail("attention_mask[%d][%d] = %d is not 0 or 1", row, col,
                           b->attention_mask[i]);
        if (b->labels[i] != -100 && (b->labels[i] < 0 || b->labels[i] >= c->vocab_size))
            return dl_fail("labels[%d][%d] = %d is neither -100 nor inside the vocabulary of %d",
                           row, col, b->labels[i], c->vocab_size);
    }
    for (int i = 0; i < b->batch; i++)
        if (b->sentence_order_label[i] != 0 && b->sentence_order_label[i] != 1)
            return dl_fail("sentence_order_label[%d] = %d is not 0 or 1", i,
                           b->sentence_order_label[i]);
    return 0;
}

double dl_albert_step_flops(const dl_albert_config *c, int batch, int seq, int masked) {
    double N = (double)batch * seq, E = c->embedding_size, H = c->hidden_size,
           I = c->intermediate_size, V = c->vocab_size, T = seq, M = masked;
    double layers = (double)c->num_hidden_layers * c->inner_group_num;
    /* Forward GEMMs; the backward pass costs twice the forward (input and weight
     * gradients of each linear; dP, dV, dQ and dK for attention). */
    double linear = 2 * N * E * H + layers * (2 * N * H * H * 4 + 2 * N * H * I * 2) +
                    2 * batch * H * H + 2 * batch * H * 2 + 2 * M * H * E + 2 * M * E * V;
    double attention = layers * (2.0 * batch * T * T * H * 2);
    return 3 * linear + 3 * attention;
}
