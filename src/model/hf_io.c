/* Import and export of a Hugging Face model folder (config.json +
 * model.safetensors, as AlbertForPreTraining.save_pretrained writes them) and
 * of batch files in the same format. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"

enum { BATCH_FILE_MAX = 256 << 20, BATCH_TOKENS_MAX = 1 << 24 };

int dl_albert_load_hf(const char *dir, dl_albert_config *cfg, float **params) {
    *params = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    dl_albert_config c;
    if (dl_albert_config_load(path, &c)) return -1;
    dl_param_layout layout;
    if (dl_param_layout_build(&c, &layout)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    dl_safetensors *st = NULL;
    float *p = NULL;
    int rc = dl_st_read(path, 0, &st);
    if (!rc) p = dl_malloc(layout.total * sizeof *p);
    if (!p) rc = -1;
    for (int i = 0; !rc && i < layout.count; i++) {
        const dl_param_entry *e = &layout.entries[i];
        const dl_st_tensor *t = dl_st_find(st, e->name);
        if (!t) {
            rc = dl_fail("tensor %s is missing", e->name);
            break;
        }
        bool shape_ok = t->ndim == e->ndim && t->shape[0] == e->shape[0] &&
                        (e->ndim == 1 || t->shape[1] == e->shape[1]);
        if (!shape_ok) {
            rc = dl_fail("tensor %s has shape [%lld%s%lld] but the config needs [%lld%s%lld]",
                         e->name, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                         t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)e->shape[0],
                         e->ndim > 1 ? ", " : "", e->ndim > 1 ? (long long)e->shape[1] : 0LL);
            break;
        }
        rc = dl_st_get_f32(st, e->name, p + e->offset, e->numel);
    }
    dl_st_free(st);
    dl_param_layout_free(&layout);
    if (rc) {
        free(p);
        return dl_fail_context("%s", path);
    }
    *cfg = c;
    *params = p;
    return 0;
}

int dl_albert_save_hf(const char *dir, const dl_albert_config *cfg, const float *params) {
    if (dl_mkdirs(dir)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (dl_albert_config_save(path, cfg)) return -1;
    dl_param_layout layout;
    if (dl_param_layout_build(cfg, &layout)) return -1;
    dl_st_writer *w = dl_st_writer_new();
    int rc = w ? dl_st_writer_metadata(w, "format", "pt") : -1;
    for (int i = 0; !rc && i < layout.count; i++) {
        const dl_param_entry *e = &layout.entries[i];
        rc = dl_st_writer_add(w, e->name, DL_ST_F32, e->ndim, e->shape, params + e->offset);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc) rc = dl_st_writer_write(w, path);
    dl_st_writer_free(w);
    dl_param_layout_free(&layout);
    return rc;
}

static int load_int_tensor(const dl_safetensors *st, const char *name, int ndim, int B, int T,
                           int32_t *out) {
    const dl_st_tensor *t = dl_st_find(st, name);
    if (!t) return dl_fail("tensor %s is missing", name);
    if (t->ndim != ndim || t->shape[0] != B || (ndim == 2 && t->shape[1] != T))
        return dl_fail("tensor %s has %d dimension(s) [%lld%s] but [%d%s] is expected", name,
                       t->ndim, (long long)t->shape[0], t->ndim > 1 ? ", ..." : "", B,
                       ndim == 2 ? ", T" : "");
    size_t n = (size_t)B * (ndim == 2 ? (size_t)T : 1);
    int64_t *tmp = dl_malloc(n * sizeof *tmp);
    if (!tmp) return -1;
    if (dl_st_get_i64(st, name, tmp, n)) {
        free(tmp);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (tmp[i] < INT32_MIN || tmp[i] > INT32_MAX) {
            long long bad = (long long)tmp[i];
            free(tmp);
            return dl_fail("tensor %s: value %lld at %zu does not fit 32 bits", name, bad, i);
        }
        out[i] = (int32_t)tmp[i];
    }
    free(tmp);
    return 0;
}

int dl_albert_load_batch(const char *path, dl_batch *batch) {
    memset(batch, 0, sizeof *batch);
    dl_safetensors *st;
    if (dl_st_read(path, BATCH_FILE_MAX, &st)) return -1;
    const dl_st_tensor *ids = dl_st_find(st, "input_ids");
    int rc = 0;
    if (!ids) rc = dl_fail("tensor input_ids is missing");
    else if (ids->ndim != 2 || ids->shape[0] <= 0 || ids->shape[1] <= 0 ||
             ids->shape[0] * ids->shape[1] > BATCH_TOKENS_MAX)
        rc = dl_fail("input_ids must be [B, T] with at most %d tokens", BATCH_TOKENS_MAX);
    if (!rc) rc = dl_batch_alloc(batch, (int)ids->shape[0], (int)ids->shape[1]);
    int B = batch->batch, T = batch->seq;
    if (!rc) rc = load_int_tensor(st, "input_ids", 2, B, T, batch->input_ids);
    if (!rc) rc = load_int_tensor(st, "token_type_ids", 2, B, T, batch->token_type_ids);
    if (!rc) rc = load_int_tensor(st, "attention_mask", 2, B, T, batch->attention_mask);
    if (!rc) rc = load_int_tensor(st, "labels", 2, B, T, batch->labels);
    if (!rc) rc = load_int_tensor(st, "sentence_order_label", 1, B, T, batch->sentence_order_label);
    dl_st_free(st);
    if (rc) {
        dl_batch_free(batch);
        return dl_fail_context("%s", path);
    }
    return 0;
}
