/* The device model: parameter offsets, kernels, buffers sized once for
 * (max_batch, max_seq), parameter upload and gradient download. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

static int find_offset(const dl_param_layout *layout, const char *name, size_t *out) {
    const dl_param_entry *e = dl_param_layout_find(layout, name);
    if (!e) return dl_fail("parameter %s is missing from the layout", name);
    *out = e->offset;
    return 0;
}

static int fill_offsets(dl_model *m) {
    const dl_param_layout *l = &m->layout;
    model_offsets *o = &m->off;
    int groups = m->cfg.num_hidden_groups, inner = m->cfg.inner_group_num;
    o->layers = dl_calloc((size_t)groups * (size_t)inner, sizeof *o->layers);
    if (!o->layers) return -1;
    struct { const char *name; size_t *dst; } top[] = {
        {"albert.embeddings.word_embeddings.weight", &o->word},
        {"albert.embeddings.position_embeddings.weight", &o->position},
        {"albert.embeddings.token_type_embeddings.weight", &o->token_type},
        {"albert.embeddings.LayerNorm.weight", &o->emb_ln_g},
        {"albert.embeddings.LayerNorm.bias", &o->emb_ln_b},
        {"albert.encoder.embedding_hidden_mapping_in.weight", &o->map_w},
        {"albert.encoder.embedding_hidden_mapping_in.bias", &o->map_b},
        {"albert.pooler.weight", &o->pool_w},
        {"albert.pooler.bias", &o->pool_b},
        {"predictions.bias", &o->pred_bias},
        {"predictions.LayerNorm.weight", &o->pred_ln_g},
        {"predictions.LayerNorm.bias", &o->pred_ln_b},
        {"predictions.dense.weight", &o->pred_dense_w},
        {"predictions.dense.bias", &o->pred_dense_b},
        {"sop_classifier.classifier.weight", &o->sop_w},
        {"sop_classifier.classifier.bias", &o->sop_b},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (find_offset(l, top[i].name, top[i].dst)) return -1;
    for (int g = 0; g < groups; g++)
        for (int j = 0; j < inner; j++) {
            layer_offsets *lo = &o->layers[g * inner + j];
            struct { const char *suffix; size_t *dst; } per[] = {
                {"full_layer_layer_norm.weight", &lo->full_ln_g},
                {"full_layer_layer_norm.bias", &lo->full_ln_b},
                {"attention.query.weight", &lo->q_w}, {"attention.query.bias", &lo->q_b},
                {"attention.key.weight", &lo->k_w}, {"attention.key.bias", &lo->k_b},
                {"attention.value.weight", &lo->v_w}, {"attention.value.bias", &lo->v_b},
                {"attention.dense.weight", &lo->dense_w}, {"attention.dense.bias", &lo->dense_b},
                {"attention.LayerNorm.weight", &lo->att_ln_g},
                {"attention.LayerNorm.bias", &lo->att_ln_b},
                {"ffn.weight", &lo->ffn_w}, {"ffn.bias", &lo->ffn_b},
                {"ffn_output.weight", &lo->ffn_out_w}, {"ffn_output.bias", &lo->ffn_out_b},
            };
            for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
                char name[DL_PARAM_NAME_MAX];
                snprintf(name, sizeof name, "albert.encoder.albert_layer_groups.%d.albert_layers.%d.%s",
                         g, j, per[i].suffix);
                if (find_offset(l, name, per[i].dst)) return -1;
            }
        }
    /* HF AlbertTransformer: application i of num_hidden_layers runs group
     * int(i / (L / G)) (a float division), all of its inner layers in order. */
    int L = m->cfg.num_hidden_layers;
    m->layer_count = L * inner;
    m->layer_weights = dl_calloc((size_t)m->layer_count, sizeof *m->layer_weights);
    if (!m->layer_weights) return -1;
    for (int i = 0; i < L; i++) {
        int g = (int)((double)i / ((double)L / (double)groups));
        if (g >= groups) g = groups - 1;
        for (int j = 0; j < inner; j++) m->layer_weights[i * inner + j] = g * inner + j;
    }
    return 0;
}

/* Whether the kernels take a CPU's shapes (below) or a GPU's: the
 * device's type, unless DEDLOC_KERNEL_SHAPE=cpu|gpu says otherwise (the
 * cross-vendor test and the CLBlast reference test run a GPU's shapes on
 * PoCL). */
static bool cpu_shapes(const dl_device_info *info) {
    const char *env = getenv("DEDLOC_KERNEL_SHAPE");
    if (env && !strcmp(env, "gpu")) return false;
    if (env && !strcmp(env, "cpu")) return true;
    if (env && *env) DL_WARN("model", "DEDLOC_KERNEL_SHAPE=%s ignored: cpu or gpu", env);
    return info->is_cpu;
}

/* The work-group of the row kernels (one group per row): a power of two
 * within the device's work-group and local-memory limits; wide on a GPU so
 * a row's loads coalesce, narrow on a CPU, where a group's items run in a
 * loop and a wide tree only adds barriers. */
static int row_group_size(const dl_device_info *info, bool cpu) {
    size_t want = cpu ? 16 : 256, limit = info->max_work_group;
    if (info->local_mem / sizeof(float) < limit) limit = (size_t)(info->local_mem / sizeof(float));
    size_t g = 1;
    while (g * 2 <= want && g * 2 <= limit) g *= 2;
    return (int)g;
}

/* Columns per work item of the column reductions (cl/common.cl,
 * DL_COL_VEC): one on a GPU, where adjacent items reading adjacent columns
 * coalesce; a 64-byte vector on a CPU, where an item per column would read
 * each row's cache line once per column. */
static int column_vector(bool cpu) { return cpu ? 16 : 1; }

static int create_kernels(dl_model *m) {
    const dl_device_info *info = dl_device_get_info(m->dev);
    bool cpu = cpu_shapes(info);
    m->row_group = row_group_size(info, cpu);
    m->col_vec = column_vector(cpu);
    /* On a CPU a 16-item group becomes one item with 16 lanes: the same
     * sums, without a work-group per row (cl/common.cl, DL_ROW_LANES). */
    m->row_lanes = cpu && m->row_group == 16;
    char opts[80];
    snprintf(opts, sizeof opts, "-DDL_ROW_GROUP=%d -DDL_COL_VEC=%d%s", m->row_group, m->col_vec,
             m->row_lanes ? " -DDL_ROW_LANES" : "");
    struct { const char *file, *name; cl_kernel *dst; } list[] = {
        {"embedding.cl", "embedding_forward", &m->k.embedding_forward},
        {"embedding.cl", "embedding_backward_word", &m->k.embedding_backward_word},
        {"embedding.cl", "embedding_backward_position", &m->k.embedding_backward_position},
        {"embedding.cl", "embedding_backward_type", &m->k.embedding_backward_type},
        {"layernorm.cl", "layernorm_forward", &m->k.layernorm_forward},
        {"layernorm.cl", "layernorm_backward_input", &m->k.layernorm_backward_input},
        {"layernorm.cl", "layernorm_backward_params", &m->k.layernorm_backward_params},
        {"layernorm.cl", "bias_residual_layernorm_forward", &m->k.bias_residual_layernorm_forward},
        {"layernorm.cl", "layernorm_backward_params_bias", &m->k.layernorm_backward_params_bias},
        {"activation.cl", "gelu_forward", &m->k.gelu_forward},
        {"activation.cl", "gelu_backward", &m->k.gelu_backward},
        {"activation.cl", "tanh_forward", &m->k.tanh_forward},
        {"activation.cl", "tanh_backward", &m->k.tanh_backward},
        {"activation.cl", "bias_gelu_forward", &m->k.bias_gelu_forward},
        {"softmax.cl", "attention_softmax_forward", &m->k.softmax_forward},
        {"softmax.cl", "attention_softmax_backward", &m->k.softmax_backward},
        {"elementwise.cl", "bias_add", &m->k.bias_add},
        {"elementwise.cl", "bias_residual_add", &m->k.bias_residual_add},
        {"elementwise.cl", "bias_backward", &m->k.bias_backward},
        {"elementwise.cl", "gather_rows", &m->k.gather_rows},
        {"elementwise.cl", "scatter_add_rows", &m->k.scatter_add_rows},
        {"loss.cl", "cross_entropy_forward_backward", &m->k.cross_entropy},
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (dl_kernel_create(m->dev, list[i].file, opts, list[i].name, list[i].dst)) return -1;
    const char *storage = m->precision == DL_PRECISION_FP16   ? "-DDL_STORE_F16"
                          : m->precision == DL_PRECISION_BF16 ? "-DDL_STORE_BF16"
                                                              : "";
    if (dl_kernel_create(m->dev, "storage.cl", storage, "storage_keep", &m->k.storage_keep) ||
        dl_kernel_create(m->dev, "storage.cl", storage, "storage_load", &m->k.storage_load))
        return -1;
    return 0;
}

static void release_kernels(model_kernels *k) {
    cl_kernel *all = (cl_kernel *)k;
    for (size_t i = 0; i < sizeof *k / sizeof(cl_kernel); i++)
        if (all[i]) clReleaseKernel(all[i]);
}

/* Every buffer of the model, for allocation and release in one place. */
typedef struct buffer_spec { dl_buffer *buf; size_t elements, element_size; } buffer_spec;

static int for_each_buffer(dl_model *m, buffer_spec *specs, int capacity) {
    const dl_albert_config *c = &m->cfg;
    size_t B = (size_t)m->max_batch, T = (size_t)m->max_seq, N = B * T;
    size_t E = (size_t)c->embedding_size, H = (size_t)c->hidden_size,
           I = (size_t)c->intermediate_size, V = (size_t)c->vocab_size,
           heads = (size_t)c->num_attention_heads;
    int n = 0;
    size_t stored = m->staged ? 2 : 4; /* bytes of one stored activation */
#define SPEC_SIZED(b, count, size)                                        \
    do {                                                                  \
        if (n < capacity) specs[n] = (buffer_spec){(b), (count), (size)}; \
        n++;                                                              \
    } while (0)
#define SPEC(b, count) SPEC_SIZED(b, count, 4)
#define STORED(b, count) SPEC_SIZED(b, count, stored)
    SPEC(&m->params, m->layout.total);
    SPEC(&m->grads, m->layout.total);
    SPEC(&m->input_ids, N);
    SPEC(&m->token_type_ids, N);
    SPEC(&m->attention_mask, N);
    SPEC(&m->word_sorted_rows, N);
    SPEC(&m->word_seg_ids, N);
    SPEC(&m->word_seg_start, N + 1);
    SPEC(&m->mlm_rows, N);
    SPEC(&m->mlm_targets, N);
    SPEC(&m->sop_rows, B);
    SPEC(&m->sop_targets, B);
    SPEC(&m->emb_sum, N * E);
    SPEC(&m->emb_ln, N * E);
    SPEC(&m->emb_mean, N);
    SPEC(&m->emb_rstd, N);
    for (int l = 0; l < m->layer_count; l++) STORED(&m->hidden[l], N * H);
    SPEC(&m->hidden[m->layer_count], N * H);
    for (int l = 0; l < m->layer_count && !m->recompute; l++) {
        layer_acts *a = &m->layers[l];
        STORED(&a->q, N * H);
        STORED(&a->k, N * H);
        STORED(&a->v, N * H);
        STORED(&a->ctx, N * H);
        STORED(&a->att_pre, N * H);
        STORED(&a->att_out, N * H);
        STORED(&a->full_pre, N * H);
        STORED(&a->ffn_pre, N * I);
        STORED(&a->att, B * heads * T * T);
        SPEC(&a->att_mean, N);
        SPEC(&a->att_rstd, N);
        SPEC(&a->full_mean, N);
        SPEC(&a->full_rstd, N);
    }
    SPEC(&m->mlm_in, N * H);
    SPEC(&m->mlm_pre, N * E);
    SPEC(&m->mlm_act, N * E);
    SPEC(&m->mlm_ln, N * E);
    SPEC(&m->mlm_mean, N);
    SPEC(&m->mlm_rstd, N);
    SPEC(&m->logits, model_mlm_chunk_rows(N) * V);
    SPEC(&m->mlm_losses, N);
    SPEC(&m->pool_in, B * H);
    SPEC(&m->pooled, B * H);
    SPEC(&m->sop_logits, B * 2);
    SPEC(&m->sop_losses, B);
    SPEC(&m->d_hidden_a, N * H);
    SPEC(&m->d_hidden_b, N * H);
    SPEC(&m->d_ctx, N * H);
    SPEC(&m->d_q, N * H);
    SPEC(&m->d_k, N * H);
    SPEC(&m->d_v, N * H);
    SPEC(&m->ffn_act, N * I);
    SPEC(&m->d_ffn, N * I);
    SPEC(&m->d_att, B * heads * T * T);
    SPEC(&m->d_emb, N * E);
    SPEC(&m->d_emb_ln, N * E);
    SPEC(&m->d_mlm_ln, N * E);
    SPEC(&m->d_mlm_pre, N * E);
    SPEC(&m->d_mlm_in, N * H);
    SPEC(&m->d_pooled, B * H);
    SPEC(&m->d_pool_in, B * H);
    if (m->use_work) {
        layer_acts *w = &m->work;
        SPEC(&m->x_work, N * H);
        SPEC(&w->q, N * H);
        SPEC(&w->k, N * H);
        SPEC(&w->v, N * H);
        SPEC(&w->ctx, N * H);
        SPEC(&w->att_pre, N * H);
        SPEC(&w->att_out, N * H);
        SPEC(&w->full_pre, N * H);
        SPEC(&w->ffn_pre, N * I);
        SPEC(&w->att, B * heads * T * T);
        if (m->recompute) {
            SPEC(&w->att_mean, N);
            SPEC(&w->att_rstd, N);
            SPEC(&w->full_mean, N);
            SPEC(&w->full_rstd, N);
        }
    }
#undef SPEC
#undef STORED
#undef SPEC_SIZED
    return n;
}

void dl_model_free(dl_model *m) {
    if (!m) return;
    if (m->hidden && m->layers) {
        int n = for_each_buffer(m, NULL, 0);
        buffer_spec *specs = dl_calloc((size_t)n, sizeof *specs);
        if (specs) {
            for_each_buffer(m, specs, n);
            for (int i = 0; i < n; i++)
                if (specs[i].buf->mem) dl_buffer_free(m->dev, specs[i].buf);
            free(specs);
        }
    }
    model_half_close(m);
    model_bf16_close(m);
    release_kernels(&m->k);
    free(m->hidden);
    free(m->layers);
    free(m->layer_weights);
    free(m->off.layers);
    free(m->host_ints);
    free(m->host_losses);
    free(m->profile);
    dl_param_layout_free(&m->layout);
    free(m);
}

int dl_model_create(dl_device *dev, const dl_albert_config *cfg, int max_batch, int max_seq,
                    dl_precision precision, dl_model **out) {
    dl_model_options opts = {.max_batch = max_batch, .max_seq = max_seq, .precision = precision};
    return dl_model_create_with(dev, cfg, &opts, out);
}

int dl_model_create_with(dl_device *dev, const dl_albert_config *cfg, const dl_model_options *opts,
                         dl_model **out) {
    int max_batch = opts->max_batch, max_seq = opts->max_seq;
    dl_precision precision = opts->precision;
    *out = NULL;
    if (dl_albert_config_validate(cfg)) return -1;
    if (max_batch <= 0 || max_seq <= 0 || max_seq > cfg->max_position_embeddings)
        return dl_fail("model shape %d x %d: batch must be positive and the sequence within "
                       "1..%d (max_position_embeddings)", max_batch, max_seq,
                       cfg->max_position_embeddings);
    if ((size_t)max_batch * (size_t)max_seq * (size_t)cfg->vocab_size > ((size_t)1 << 31) ||
        (size_t)max_batch * cfg->num_attention_heads * (size_t)max_seq * max_seq >
            ((size_t)1 << 31))
        return dl_fail("model shape %d x %d is too large for 32-bit kernel indexing", max_batch,
                       max_seq);
    if (precision != DL_PRECISION_FP32 && precision != DL_PRECISION_FP16 &&
        precision != DL_PRECISION_BF16)
        return dl_fail("unknown precision %d", (int)precision);
    dl_model *m = dl_calloc(1, sizeof *m);
    if (!m) return -1;
    m->dev = dev;
    m->cfg = *cfg;
    m->precision = precision;
    m->staged = precision != DL_PRECISION_FP32;
    m->recompute = opts->recompute;
    m->use_work = m->staged || m->recompute;
    m->max_batch = max_batch;
    m->max_seq = max_seq;
    if (dl_param_layout_build(cfg, &m->layout) || fill_offsets(m) || create_kernels(m) ||
        model_half_open(m) || model_bf16_open(m))
        goto fail;
    m->hidden = dl_calloc((size_t)m->layer_count + 1, sizeof *m->hidden);
    m->layers = dl_calloc((size_t)m->layer_count, sizeof *m->layers);
    size_t N = (size_t)max_batch * (size_t)max_seq;
    m->host_ints = dl_calloc(7 * N + 1 + 2 * (size_t)max_batch, sizeof *m->host_ints);
    m->host_losses = dl_calloc(N + 1, sizeof *m->host_losses);
    if (!m->hidden || !m->layers || !m->host_ints || !m->host_losses) goto fail;
    int n = for_each_buffer(m, NULL, 0);
    buffer_spec *specs = dl_calloc((size_t)n, sizeof *specs);
    if (!specs) goto fail;
    for_each_buffer(m, specs, n);
    for (int i = 0; i < n; i++) {
        size_t bytes = (specs[i].elements ? specs[i].elements : 1) * specs[i].element_size;
        if (dl_buffer_alloc(dev, bytes, specs[i].buf)) {
            free(specs);
            dl_fail_context("allocating the model's device memory (batch %d x %d); try a "
                            "smaller batch", max_batch, max_seq);
            goto fail;
        }
    }
    free(specs);
    if (model_half_reserve(m) || dl_model_zero_grad(m)) goto fail;
    *out = m;
    return 0;
fail:
    dl_model_free(m);
    return -1;
}

const dl_albert_config *dl_model_config(const dl_model *m) { return &m->cfg; }
const dl_param_layout *dl_model_layout(const dl_model *m) { return &m->layout; }

int dl_model_set_params(dl_model *m, const float *params) {
    if (m->precision == DL_PRECISION_FP32)
        return dl_buffer_upload(m->dev, &m->params, 0, params, m->layout.total * sizeof(float));
    /* The weights take the storage format's values; the device keeps them as
     * fp32 because CLBlast's SGEMM needs fp32 operands where cl_khr_fp16 is
     * missing (and they are a small share of the memory). */
    float *rounded = dl_malloc(m->layout.total * sizeof *rounded);
    if (!rounded) return -1;
    for (size_t i = 0; i < m->layout.total; i++)
        rounded[i] = m->precision == DL_PRECISION_FP16 ? dl_f16_to_f32(dl_f32_to_f16(params[i]))
                                                       : dl_bf16_to_f32(dl_f32_to_bf16(params[i]));
    int rc = dl_buffer_upload(m->dev, &m->params, 0, rounded, m->layout.total * sizeof(float));
    if (!rc) rc = model_half_params(m);
    if (!rc) rc = model_bf16_params(m, rounded);
    free(rounded);
    return rc;
}

static int storage_kernel(dl_model *m, cl_kernel k, const dl_buffer *dst, const dl_buffer *src,
                          size_t n) {
    int count = (int)n;
    size_t global = n;
    if (DL_ARG(k, 0, dst->mem) || DL_ARG(k, 1, src->mem) || DL_ARG(k, 2, count)) return -1;
    return model_launch(m, k, 1, &global);
}

int model_keep(dl_model *m, dl_buffer *work, dl_buffer *stored, size_t n) {
    if (!m->use_work || !stored->mem) return 0;
    return storage_kernel(m, m->k.storage_keep, stored, work, n);
}

int model_load(dl_model *m, dl_buffer *work, const dl_buffer *stored, size_t n) {
    if (!m->use_work || !stored->mem) return 0;
    return storage_kernel(m, m->k.storage_load, work, stored, n);
}

void model_layer_view(dl_model *m, int l, layer_acts *view, dl_buffer **x) {
    if (!m->use_work) {
        *view = m->layers[l];
        *x = &m->hidden[l];
        return;
    }
    *view = m->work;
    *x = &m->x_work;
    if (m->recompute) return;
    view->att_mean = m->layers[l].att_mean;
    view->att_rstd = m->layers[l].att_rstd;
    view->full_mean = m->layers[l].full_mean;
    view->full_rstd = m->layers[l].full_rstd;
    *x = &m->x_work;
}

int dl_model_get_params(dl_model *m, float *params) {
    return dl_buffer_download(m->dev, &m->params, 0, params, m->layout.total * sizeof(float));
}

int dl_model_zero_grad(dl_model *m) {
    double t0 = model_profile_begin(m);
    if (dl_buffer_fill32(m->dev, &m->grads, 0, m->layout.total * sizeof(float), 0)) return -1;
    return model_profile_end(m, "zero gradient (fill)", t0);
}

int dl_model_get_grads(dl_model *m, float loss_scale, float *grads) {
    if (!(loss_scale > 0)) return dl_fail("loss scale %g is not positive", loss_scale);
    if (dl_buffer_download(m->dev, &m->grads, 0, grads, m->layout.total * sizeof(float)))
        return -1;
    if (loss_scale != 1.0f) {
        float inv = 1.0f / loss_scale;
        for (size_t i = 0; i < m->layout.total; i++) grads[i] *= inv;
    }
    return 0;
}

size_t dl_model_memory_bytes(const dl_model *m) {
    int n = for_each_buffer((dl_model *)m, NULL, 0);
    buffer_spec *specs = dl_calloc((size_t)n, sizeof *specs);
    if (!specs) return 0;
    for_each_buffer((dl_model *)m, specs, n);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += specs[i].buf->size;
    free(specs);
    return total + model_half_bytes(m);
}

static int run(dl_model *m, const dl_batch *batch, float loss_scale, bool backward,
               dl_losses *out) {
    if (dl_albert_check_batch(&m->cfg, batch, m->max_batch, m->max_seq)) return -1;
    if (!(loss_scale > 0) || !isfinite(loss_scale))
        return dl_fail("loss scale %g is not a positive finite number", loss_scale);
    dl_losses losses;
    m->logits_valid = false;
    double t0 = model_profile_begin(m);
    if (model_upload_batch(m, batch) || model_profile_end(m, "batch upload (host)", t0) ||
        model_forward_pass(m, loss_scale, backward))
        return -1;
    if (backward && model_backward_pass(m)) return -1;
    if (model_read_losses(m, &losses)) return -1;
    if (dl_device_finish(m->dev)) return -1;
    if (out) *out = losses;
    m->logits_valid = !backward;
    return 0;
}

int dl_model_get_logits(dl_model *m, float *sop_logits, float *mlm_logits) {
    if (!m->logits_valid)
        return dl_fail("no logits: call dl_model_forward first (forward_backward replaces them "
                       "by their gradients)");
    if (dl_buffer_download(m->dev, &m->sop_logits, 0, sop_logits, (size_t)m->B * 2 * sizeof(float)))
        return -1;
    if (mlm_logits && m->M > 0) return model_mlm_logits_download(m, mlm_logits);
    return 0;
}

int dl_model_forward_backward(dl_model *m, const dl_batch *batch, float loss_scale,
                              dl_losses *out) {
    return run(m, batch, loss_scale, true, out);
}

int dl_model_forward(dl_model *m, const dl_batch *batch, dl_losses *out) {
    return run(m, batch, 1.0f, false, out);
}
