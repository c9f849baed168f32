/* Checkpoints: one safetensors file holding the master weights, the optimizer
 * moments and, in its metadata, everything else needed to resume exactly
 * (docs/checkpoint.md). Every tensor and the metadata carry an xxh64 checksum,
 * so a torn or bit-flipped file is refused rather than trained on. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/safetensors.h"
#include "dedloc/train.h"
#include "dedloc/util.h"

#define CKPT_FORMAT "dedloc-checkpoint"
#define CKPT_VERSION "1"
#define CKPT_PREFIX "checkpoint-"
#define CKPT_SUFFIX ".safetensors"
#define DATA_STATE_TENSOR "data_stream"

/* Metadata entries covered by "metadata_checksum", in this order. */
static const char *const checked_keys[] = {"format", "version", "model_config", "run", "layout",
                                           "optimizer", "state", "checksums"};
enum { CHECKED_KEYS = sizeof checked_keys / sizeof checked_keys[0] };

/* The first three are every checkpoint's; the rest only local-steps ones'. */
enum { CORE_KINDS = 3, ALL_KINDS = 7 };
static const char *const tensor_kinds[ALL_KINDS] = {"params.", "exp_avg.", "exp_avg_sq.", "local.params.",
                                                     "local.exp_avg.", "local.exp_avg_sq.", "local.residual."};
/* The metadata entry of local-steps checkpoints: outside checked_keys (old
 * checkpoints lack it), chained into the metadata checksum when present. */
#define LOCAL_KEY "local"

static void tensor_key(char *out, size_t size, int kind, const dl_train_tensor *t, int index) {
    if (t->name)
        snprintf(out, size, "%s%s", tensor_kinds[kind], t->name);
    else
        snprintf(out, size, "%stensor%d", tensor_kinds[kind], index);
}

static uint64_t metadata_hash(const char *const values[CHECKED_KEYS], const char *local) {
    uint64_t h = 0;
    for (int i = 0; i < CHECKED_KEYS; i++) h = dl_hash64(values[i], strlen(values[i]) + 1, h);
    if (local) h = dl_hash64(local, strlen(local) + 1, h);
    return h;
}

static cJSON *layout_json(const dl_train_layout *l) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < l->count; i++) {
        const dl_train_tensor *t = &l->tensors[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        if (t->name) cJSON_AddStringToObject(o, "name", t->name);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddNumberToObject(o, "offset", (double)t->offset);
        cJSON_AddNumberToObject(o, "numel", (double)t->numel);
        cJSON_AddBoolToObject(o, "no_weight_decay", t->no_weight_decay);
    }
    return arr;
}

static cJSON *optimizer_json(const dl_opt_config *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", dl_opt_kind_name(c->kind));
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddNumberToObject(o, "beta1", c->beta1);
    cJSON_AddNumberToObject(o, "beta2", c->beta2);
    cJSON_AddNumberToObject(o, "eps", c->eps);
    cJSON_AddNumberToObject(o, "weight_decay", c->weight_decay);
    cJSON_AddNumberToObject(o, "clamp_value", c->clamp_value);
    cJSON_AddBoolToObject(o, "debias", c->debias);
    cJSON_AddNumberToObject(o, "max_grad_norm", c->max_grad_norm);
    cJSON_AddNumberToObject(o, "warmup_steps", (double)c->warmup_steps);
    cJSON_AddNumberToObject(o, "total_steps", (double)c->total_steps);
    return o;
}

static void add_hex(cJSON *o, const char *key, uint64_t v) {
    char hex[17];
    dl_hash64_hex(v, hex);
    cJSON_AddStringToObject(o, key, hex);
}

static cJSON *state_json(const dl_checkpoint *ck) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step", (double)ck->step);
    cJSON_AddNumberToObject(o, "samples", (double)ck->progress.samples);
    cJSON_AddNumberToObject(o, "micro_batches", (double)ck->progress.micro_batches);
    add_hex(o, "data_seed", ck->progress.data_seed);
    add_hex(o, "peer_seed", ck->progress.peer_seed);
    cJSON_AddNumberToObject(o, "elapsed_s", ck->progress.elapsed_s);
    cJSON *ls = cJSON_AddObjectToObject(o, "loss_scale");
    cJSON_AddBoolToObject(ls, "enabled", ck->loss_scale.enabled);
    cJSON_AddNumberToObject(ls, "scale", ck->loss_scale.scale);
    cJSON_AddNumberToObject(ls, "growth_factor", ck->loss_scale.growth_factor);
    cJSON_AddNumberToObject(ls, "backoff_factor", ck->loss_scale.backoff_factor);
    cJSON_AddNumberToObject(ls, "growth_interval", (double)ck->loss_scale.growth_interval);
    cJSON_AddNumberToObject(ls, "clean_steps", (double)ck->loss_scale.clean_steps);
    cJSON_AddNumberToObject(ls, "overflows", (double)ck->loss_scale.overflows);
    return o;
}

static cJSON *local_json(const dl_checkpoint_local *l);

static char *print_and_delete(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) dl_fail("out of memory while writing checkpoint metadata");
    return s;
}

/* Collects the tensors and the metadata of a checkpoint into a writer. */
static dl_st_writer *build_writer(const dl_checkpoint *ck) {
    const dl_train_layout *l = &ck->layout;
    dl_st_writer *w = dl_st_writer_new();
    if (!w) return NULL;
    cJSON *sums = cJSON_CreateObject();
    const float *arrays[ALL_KINDS] = {ck->params, ck->exp_avg, ck->exp_avg_sq, ck->local.params,
                                      ck->local.exp_avg, ck->local.exp_avg_sq, ck->local.residual};
    const int kinds = ck->local.params ? ALL_KINDS : CORE_KINDS;
    char key[160];
    int rc = 0;
    for (int kind = 0; rc == 0 && kind < kinds; kind++) {
        for (int i = 0; rc == 0 && i < l->count; i++) {
            const dl_train_tensor *t = &l->tensors[i];
            tensor_key(key, sizeof key, kind, t, i);
            const float *data = arrays[kind] + t->offset;
            rc = dl_st_writer_add(w, key, DL_ST_F32, t->ndim, t->shape, data);
            add_hex(sums, key, dl_hash64(data, t->numel * sizeof(float), 0));
        }
    }
    /* The data stream's position: raw bytes, checksummed like the tensors. */
    if (rc == 0 && ck->data_state) {
        int64_t shape[1] = {(int64_t)ck->data_state_size};
        rc = dl_st_writer_add(w, DATA_STATE_TENSOR, DL_ST_U8, 1, shape, ck->data_state);
        add_hex(sums, DATA_STATE_TENSOR, dl_hash64(ck->data_state, ck->data_state_size, 0));
    }
    char *values[CHECKED_KEYS] = {0};
    char *local = NULL;
    if (rc == 0 && ck->local.params && !(local = print_and_delete(local_json(&ck->local)))) rc = -1;
    if (rc == 0) {
        values[0] = dl_strdup(CKPT_FORMAT);
        values[1] = dl_strdup(CKPT_VERSION);
        values[2] = dl_strdup(ck->model_config_json ? ck->model_config_json : "{}");
        values[3] = dl_strdup(ck->run_json ? ck->run_json : "{}");
        values[4] = print_and_delete(layout_json(l));
        values[5] = print_and_delete(optimizer_json(&ck->opt_config));
        values[6] = print_and_delete(state_json(ck));
        values[7] = print_and_delete(sums);
        sums = NULL;
        for (int i = 0; i < CHECKED_KEYS; i++)
            if (!values[i]) rc = -1;
    }
    for (int i = 0; rc == 0 && i < CHECKED_KEYS; i++) rc = dl_st_writer_metadata(w, checked_keys[i], values[i]);
    if (rc == 0 && local) rc = dl_st_writer_metadata(w, LOCAL_KEY, local);
    if (rc == 0) {
        char hex[17];
        dl_hash64_hex(metadata_hash((const char *const *)values, local), hex);
        rc = dl_st_writer_metadata(w, "metadata_checksum", hex);
    }
    for (int i = 0; i < CHECKED_KEYS; i++) cJSON_free(values[i]);
    cJSON_free(local);
    cJSON_Delete(sums);
    if (rc) {
        dl_st_writer_free(w);
        return NULL;
    }
    return w;
}

int dl_checkpoint_save(const char *path, const dl_checkpoint *ck) {
    dl_st_writer *w = build_writer(ck);
    int rc = w ? dl_st_writer_write(w, path) : -1;
    dl_st_writer_free(w);
    return rc ? dl_fail_context("cannot write checkpoint %s", path) : 0;
}

int dl_checkpoint_serialize(const dl_checkpoint *ck, char **out, size_t *out_size) {
    *out = NULL;
    *out_size = 0;
    dl_st_writer *w = build_writer(ck);
    int rc = w ? dl_st_writer_serialize(w, out, out_size) : -1;
    dl_st_writer_free(w);
    return rc ? dl_fail_context("cannot serialize the training state") : 0;
}

void dl_checkpoint_free(dl_checkpoint *ck) {
    free(ck->model_config_json);
    free(ck->run_json);
    dl_train_layout_free(&ck->layout);
    free(ck->params);
    free(ck->exp_avg);
    free(ck->exp_avg_sq);
    free(ck->data_state);
    free(ck->local.params);
    free(ck->local.exp_avg);
    free(ck->local.exp_avg_sq);
    free(ck->local.residual);
    memset(ck, 0, sizeof *ck);
}

/* ---- loading ------------------------------------------------------------- */

static int get_num(const cJSON *o, const char *key, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it)) return dl_fail("'%s' is missing or not a number", key);
    *out = it->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    double v = 0;
    if (get_num(o, key, &v)) return -1;
    if (!(v >= (double)lo && v <= (double)hi) || v != (double)(int64_t)v)
        return dl_fail("'%s' = %g is not an integer in [%" PRId64 ", %" PRId64 "]", key, v, lo, hi);
    *out = (int64_t)v;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsBool(it)) return dl_fail("'%s' is missing or not a boolean", key);
    *out = cJSON_IsTrue(it);
    return 0;
}

static int get_hex(const cJSON *o, const char *key, uint64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it) || strlen(it->valuestring) != 16) return dl_fail("'%s' is not 16 hex digits", key);
    char *end;
    *out = strtoull(it->valuestring, &end, 16);
    if (*end) return dl_fail("'%s' is not 16 hex digits", key);
    return 0;
}

static int parse_layout(const char *text, dl_train_layout *l) {
    memset(l, 0, sizeof *l);
    cJSON *arr = cJSON_Parse(text);
    int rc = -1;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) <= 0 || cJSON_GetArraySize(arr) > 100000) {
        dl_fail("the layout is not a non-empty JSON array");
        goto done;
    }
    int count = cJSON_GetArraySize(arr);
    const char **names = dl_calloc((size_t)count, sizeof *names);
    size_t *numels = dl_calloc((size_t)count, sizeof *numels);
    bool *nd = dl_calloc((size_t)count, sizeof *nd);
    int64_t (*shapes)[DL_TRAIN_MAX_DIMS] = dl_calloc((size_t)count, sizeof *shapes);
    int *ndims = dl_calloc((size_t)count, sizeof *ndims);
    if (!names || !numels || !nd || !shapes || !ndims) goto free_arrays;
    size_t offset = 0;
    for (int i = 0; i < count; i++) {
        const cJSON *t = cJSON_GetArrayItem(arr, i);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        int64_t numel, off;
        if (!cJSON_IsObject(t) || get_int(t, "numel", 1, (int64_t)1 << 40, &numel) ||
            get_int(t, "offset", 0, (int64_t)1 << 40, &off) || get_bool(t, "no_weight_decay", &nd[i])) {
            dl_fail_context("layout entry %d", i);
            goto free_arrays;
        }
        if ((size_t)off != offset) {
            dl_fail("layout entry %d: offset %" PRId64 ", expected %zu (tensors must be packed in order)", i,
                    off, offset);
            goto free_arrays;
        }
        names[i] = cJSON_IsString(name) ? name->valuestring : NULL;
        numels[i] = (size_t)numel;
        offset += (size_t)numel;
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > DL_TRAIN_MAX_DIMS) {
            dl_fail("layout entry %d: bad shape", i);
            goto free_arrays;
        }
        ndims[i] = cJSON_GetArraySize(shape);
        int64_t prod = 1;
        for (int d = 0; d < ndims[i]; d++) {
            const cJSON *e = cJSON_GetArrayItem(shape, d);
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= (double)numel)) {
                dl_fail("layout entry %d: bad shape", i);
                goto free_arrays;
            }
            shapes[i][d] = (int64_t)e->valuedouble;
            prod *= shapes[i][d];
        }
        if (prod != numel) {
            dl_fail("layout entry %d: shape does not hold %" PRId64 " elements", i, numel);
            goto free_arrays;
        }
    }
    if (dl_train_layout_init(l, count, names, numels, nd) == 0) {
        for (int i = 0; i < count; i++) {
            l->tensors[i].ndim = ndims[i];
            memcpy(l->tensors[i].shape, shapes[i], sizeof shapes[i]);
        }
        rc = 0;
    }
free_arrays:
    free(names);
    free(numels);
    free(nd);
    free(shapes);
    free(ndims);
done:
    cJSON_Delete(arr);
    return rc;
}

static int parse_optimizer_object(const cJSON *o, dl_opt_config *c) {
    memset(c, 0, sizeof *c);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    int rc = -1;
    if (!cJSON_IsObject(o) || !cJSON_IsString(kind)) {
        dl_fail("the optimizer settings are not a JSON object with a kind");
    } else if (dl_opt_kind_parse(kind->valuestring, &c->kind) == 0 && get_num(o, "lr", &c->lr) == 0 &&
               get_num(o, "beta1", &c->beta1) == 0 && get_num(o, "beta2", &c->beta2) == 0 &&
               get_num(o, "eps", &c->eps) == 0 && get_num(o, "weight_decay", &c->weight_decay) == 0 &&
               get_num(o, "clamp_value", &c->clamp_value) == 0 && get_bool(o, "debias", &c->debias) == 0 &&
               get_num(o, "max_grad_norm", &c->max_grad_norm) == 0 &&
               get_int(o, "warmup_steps", 0, INT64_MAX / 2, &c->warmup_steps) == 0 &&
               get_int(o, "total_steps", 0, INT64_MAX / 2, &c->total_steps) == 0) {
        rc = 0;
    }
    return rc ? dl_fail_context("optimizer settings") : 0;
}

static int parse_optimizer(const char *text, dl_opt_config *c) {
    cJSON *o = cJSON_Parse(text);
    int rc = parse_optimizer_object(o, c);
    cJSON_Delete(o);
    return rc;
}

static cJSON *local_json(const dl_checkpoint_local *l) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", "local");
    cJSON_AddNumberToObject(o, "local_steps", (double)l->local_steps);
    cJSON_AddItemToObject(o, "inner_optimizer", optimizer_json(&l->inner_config));
    cJSON_AddNumberToObject(o, "inner_step", (double)l->inner_step);
    cJSON_AddNumberToObject(o, "samples_since_sync", (double)l->samples_since_sync);
    cJSON *sums = cJSON_AddArrayToObject(o, "loss_sum");
    for (int k = 0; k < 3; k++) cJSON_AddItemToArray(sums, cJSON_CreateNumber(l->loss_sum[k]));
    return o;
}

/* The "local" entry (untrusted text): every field typed and bounded. */
static int parse_local(const char *text, dl_checkpoint_local *l) {
    cJSON *o = cJSON_Parse(text);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(o, "loss_sum");
    int rc = -1;
    if (!cJSON_IsObject(o) || !cJSON_IsString(mode) || strcmp(mode->valuestring, "local") != 0) {
        dl_fail("not a JSON object of mode \"local\"");
    } else if (!cJSON_IsArray(sums) || cJSON_GetArraySize(sums) != 3) {
        dl_fail("'loss_sum' is not an array of 3 numbers");
    } else if (get_int(o, "local_steps", 1, INT64_MAX / 2, &l->local_steps) == 0 &&
               get_int(o, "inner_step", 0, INT64_MAX / 2, &l->inner_step) == 0 &&
               get_int(o, "samples_since_sync", 0, INT64_MAX / 2, &l->samples_since_sync) == 0 &&
               parse_optimizer_object(cJSON_GetObjectItemCaseSensitive(o, "inner_optimizer"), &l->inner_config) == 0) {
        rc = 0;
        for (int k = 0; k < 3; k++) {
            const cJSON *e = cJSON_GetArrayItem(sums, k);
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble)) rc = dl_fail("'loss_sum' %d is not a finite number", k);
            else l->loss_sum[k] = e->valuedouble;
        }
    }
    cJSON_Delete(o);
    return rc ? dl_fail_context("local-steps state") : 0;
}

static int parse_state(const char *text, dl_checkpoint *ck) {
    cJSON *o = cJSON_Parse(text);
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(o, "loss_scale");
    double scale, growth, backoff;
    int rc = -1;
    if (!cJSON_IsObject(o) || !cJSON_IsObject(ls)) {
        dl_fail("not a JSON object with a loss_scale");
    } else if (get_int(o, "step", 0, INT64_MAX / 2, &ck->step) == 0 &&
               get_int(o, "samples", 0, INT64_MAX / 2, &ck->progress.samples) == 0 &&
               get_int(o, "micro_batches", 0, INT64_MAX / 2, &ck->progress.micro_batches) == 0 &&
               get_hex(o, "data_seed", &ck->progress.data_seed) == 0 &&
               get_hex(o, "peer_seed", &ck->progress.peer_seed) == 0 &&
               get_num(o, "elapsed_s", &ck->progress.elapsed_s) == 0 &&
               get_bool(ls, "enabled", &ck->loss_scale.enabled) == 0 && get_num(ls, "scale", &scale) == 0 &&
               get_num(ls, "growth_factor", &growth) == 0 && get_num(ls, "backoff_factor", &backoff) == 0 &&
               get_int(ls, "growth_interval", 1, INT64_MAX / 2, &ck->loss_scale.growth_interval) == 0 &&
               get_int(ls, "clean_steps", 0, INT64_MAX / 2, &ck->loss_scale.clean_steps) == 0 &&
               get_int(ls, "overflows", 0, INT64_MAX / 2, &ck->loss_scale.overflows) == 0) {
        if (!(scale > 0 && scale <= 3.4028235e38) || !(growth >= 1 && growth <= 1e3) ||
            !(backoff > 0 && backoff <= 1)) {
            dl_fail("loss scale %g (growth %g, backoff %g) out of range", scale, growth, backoff);
        } else {
            ck->loss_scale.scale = (float)scale;
            ck->loss_scale.growth_factor = (float)growth;
            ck->loss_scale.backoff_factor = (float)backoff;
            rc = 0;
        }
    }
    cJSON_Delete(o);
    return rc ? dl_fail_context("training state") : 0;
}

static int load_tensors(const dl_safetensors *st, const cJSON *sums, dl_checkpoint *ck, bool local) {
    const dl_train_layout *l = &ck->layout;
    float **arrays[ALL_KINDS] = {&ck->params, &ck->exp_avg, &ck->exp_avg_sq, &ck->local.params,
                                 &ck->local.exp_avg, &ck->local.exp_avg_sq, &ck->local.residual};
    char key[160];
    for (int kind = 0; kind < (local ? ALL_KINDS : CORE_KINDS); kind++) {
        *arrays[kind] = dl_malloc(dl_mul_size(l->total, sizeof(float)));
        if (!*arrays[kind]) return -1;
        for (int i = 0; i < l->count; i++) {
            const dl_train_tensor *t = &l->tensors[i];
            tensor_key(key, sizeof key, kind, t, i);
            const dl_st_tensor *stt = dl_st_find(st, key);
            if (!stt) return dl_fail("tensor %s is missing", key);
            if (stt->dtype != DL_ST_F32 || stt->numel != t->numel)
                return dl_fail("tensor %s is %s with %zu elements, expected F32 with %zu", key,
                               dl_st_dtype_name(stt->dtype), stt->numel, t->numel);
            const void *data = dl_st_tensor_data(st, stt);
            uint64_t want;
            if (get_hex(sums, key, &want)) return dl_fail_context("checksum of %s", key);
            uint64_t got = dl_hash64(data, stt->nbytes, 0);
            if (got != want) return dl_fail("tensor %s is corrupted (checksum mismatch)", key);
            memcpy(*arrays[kind] + t->offset, data, stt->nbytes);
        }
    }
    return 0;
}

/* Optional: checkpoints before it (or of runs without a stream) lack it.
 * Listed in the checksums, it must be there and intact. */
static int load_data_state(const dl_safetensors *st, const cJSON *sums, dl_checkpoint *ck) {
    const dl_st_tensor *t = dl_st_find(st, DATA_STATE_TENSOR);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(sums, DATA_STATE_TENSOR);
    if (!t && !sum) return 0;
    if (!t) return dl_fail("tensor %s is missing", DATA_STATE_TENSOR);
    if (t->dtype != DL_ST_U8) return dl_fail("tensor %s is not U8", DATA_STATE_TENSOR);
    uint64_t want;
    if (get_hex(sums, DATA_STATE_TENSOR, &want)) return dl_fail_context("checksum of %s", DATA_STATE_TENSOR);
    const void *data = dl_st_tensor_data(st, t);
    if (dl_hash64(data, t->nbytes, 0) != want)
        return dl_fail("tensor %s is corrupted (checksum mismatch)", DATA_STATE_TENSOR);
    ck->data_state = dl_malloc(t->nbytes ? t->nbytes : 1);
    if (!ck->data_state) return -1;
    memcpy(ck->data_state, data, t->nbytes);
    ck->data_state_size = t->nbytes;
    return 0;
}

static int load_checked(const dl_safetensors *st, dl_checkpoint *ck) {
    const char *format = dl_st_metadata(st, "format");
    if (!format || strcmp(format, CKPT_FORMAT) != 0)
        return dl_fail("not a dedloc checkpoint (a safetensors file without format=%s)", CKPT_FORMAT);
    const char *version = dl_st_metadata(st, "version");
    if (!version || strcmp(version, CKPT_VERSION) != 0)
        return dl_fail("checkpoint format version %s is not supported (this build reads %s)",
                       version ? version : "(none)", CKPT_VERSION);
    const char *values[CHECKED_KEYS];
    for (int i = 0; i < CHECKED_KEYS; i++) {
        values[i] = dl_st_metadata(st, checked_keys[i]);
        if (!values[i]) return dl_fail("metadata entry '%s' is missing", checked_keys[i]);
    }
    const char *local = dl_st_metadata(st, LOCAL_KEY);
    const char *sum_hex = dl_st_metadata(st, "metadata_checksum");
    char hex[17];
    dl_hash64_hex(metadata_hash(values, local), hex);
    if (!sum_hex || strcmp(sum_hex, hex) != 0) return dl_fail("the metadata is corrupted (checksum mismatch)");

    if (parse_layout(values[4], &ck->layout)) return dl_fail_context("layout");
    if (parse_optimizer(values[5], &ck->opt_config)) return -1;
    if (parse_state(values[6], ck)) return -1;
    cJSON *sums = cJSON_Parse(values[7]);
    if (!cJSON_IsObject(sums)) {
        cJSON_Delete(sums);
        return dl_fail("the checksums are not a JSON object");
    }
    /* Local tensors listed in the checksums without their metadata entry:
     * a local-steps checkpoint stripped of it, refused. */
    bool listed = false;
    for (const cJSON *it = sums->child; it && !listed; it = it->next)
        listed = it->string && strncmp(it->string, "local.", 6) == 0;
    int rc = 0;
    if (listed && !local) rc = dl_fail("local-steps tensors without their '%s' metadata entry", LOCAL_KEY);
    if (rc == 0 && local && parse_local(local, &ck->local)) rc = -1;
    if (rc == 0) rc = load_tensors(st, sums, ck, local != NULL);
    if (rc == 0) rc = load_data_state(st, sums, ck);
    cJSON_Delete(sums);
    if (rc) return -1;
    ck->model_config_json = dl_strdup(values[2]);
    ck->run_json = dl_strdup(values[3]);
    return ck->model_config_json && ck->run_json ? 0 : -1;
}

int dl_checkpoint_parse(char *buffer, size_t size, dl_checkpoint *ck) {
    memset(ck, 0, sizeof *ck);
    dl_safetensors *st = NULL;
    if (dl_st_parse(buffer, size, &st)) return dl_fail_context("training state refused");
    int rc = load_checked(st, ck);
    dl_st_free(st);
    if (rc) {
        dl_checkpoint_free(ck);
        return dl_fail_context("training state refused");
    }
    return 0;
}

int dl_checkpoint_load(const char *path, size_t max_size, dl_checkpoint *ck) {
    memset(ck, 0, sizeof *ck);
    dl_safetensors *st = NULL;
    if (dl_st_read(path, max_size ? max_size : ((size_t)64 << 30), &st))
        return dl_fail_context("cannot read checkpoint (truncated or not a checkpoint?)");
    int rc = load_checked(st, ck);
    dl_st_free(st);
    if (rc) {
        dl_checkpoint_free(ck);
        return dl_fail_context("checkpoint %s refused", path);
    }
    return 0;
}

void dl_checkpoint_view(dl_checkpoint *ck, const dl_optimizer *opt, float *params) {
    memset(ck, 0, sizeof *ck);
    ck->layout = opt->layout;
    ck->params = params;
    ck->exp_avg = opt->exp_avg;
    ck->exp_avg_sq = opt->exp_avg_sq;
    ck->opt_config = opt->config;
    ck->step = opt->step;
}

int dl_checkpoint_restore_optimizer(const dl_checkpoint *ck, dl_optimizer *opt) {
    const dl_train_layout *a = &ck->layout, *b = &opt->layout;
    if (a->count != b->count || a->total != b->total)
        return dl_fail("the checkpoint holds %d tensors (%zu parameters), the model %d (%zu)", a->count,
                       a->total, b->count, b->total);
    for (int i = 0; i < a->count; i++) {
        const char *na = a->tensors[i].name ? a->tensors[i].name : "";
        const char *nb = b->tensors[i].name ? b->tensors[i].name : "";
        if (strcmp(na, nb) != 0 || a->tensors[i].numel != b->tensors[i].numel)
            return dl_fail("checkpoint tensor %d is %s (%zu), the model's is %s (%zu)", i, na,
                           a->tensors[i].numel, nb, b->tensors[i].numel);
    }
    memcpy(opt->exp_avg, ck->exp_avg, a->total * sizeof(float));
    memcpy(opt->exp_avg_sq, ck->exp_avg_sq, a->total * sizeof(float));
    opt->step = ck->step;
    return 0;
}

/* ---- folders of checkpoints ------------------------------------------------ */

typedef struct {
    int64_t step;
    char name[64];
} ckpt_entry;

static int parse_name(const char *name, int64_t *step) {
    size_t plen = strlen(CKPT_PREFIX), slen = strlen(CKPT_SUFFIX), len = strlen(name);
    if (len != plen + 10 + slen || strncmp(name, CKPT_PREFIX, plen) != 0 ||
        strcmp(name + plen + 10, CKPT_SUFFIX) != 0)
        return -1;
    int64_t v = 0;
    for (size_t i = plen; i < plen + 10; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return 0;
}

static int by_step(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step;
}

/* Lists dir's checkpoints sorted by ascending step; 1 if dir does not exist. */
static int list_checkpoints(const char *dir, ckpt_entry **out, int *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 1;
        return dl_fail("cannot open checkpoint folder %s: %s", dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step;
        if (parse_name(e->d_name, &step)) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *grown = dl_realloc(*out, sizeof(ckpt_entry) * (size_t)cap);
            if (!grown) {
                closedir(d);
                free(*out);
                *out = NULL;
                return -1;
            }
            *out = grown;
        }
        (*out)[*count].step = step;
        snprintf((*out)[*count].name, sizeof(*out)[*count].name, "%s", e->d_name);
        (*count)++;
    }
    closedir(d);
    if (*count) qsort(*out, (size_t)*count, sizeof(ckpt_entry), by_step);
    return 0;
}

int dl_checkpoint_save_in_dir(const char *dir, const dl_checkpoint *ck, int keep, char *path_out,
                              size_t path_size) {
    if (dl_mkdirs(dir)) return dl_fail_context("checkpoint folder");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%010" PRId64 "%s", dir, CKPT_PREFIX, ck->step, CKPT_SUFFIX);
    if (dl_checkpoint_save(path, ck)) return -1;
    if (path_out) snprintf(path_out, path_size, "%s", path);
    if (keep <= 0) return 0;
    ckpt_entry *list;
    int count;
    if (list_checkpoints(dir, &list, &count) != 0) return 0; /* saved; pruning is best effort */
    for (int i = 0; i + keep < count; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, list[i].name);
        if (unlink(path) != 0) DL_WARN("train", "cannot delete old checkpoint %s: %s", path, strerror(errno));
    }
    free(list);
    return 0;
}

/* Removes checkpoint-<step>.safetensors.tmp.<pid> files whose writer (the pid
 * in the name) no longer runs: a writer killed mid-save leaves one behind, and
 * nothing else would ever delete it. A live pid's file may be in the middle of
 * being written and is left alone. */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    static const char tmp_mark[] = ".tmp.";
    size_t base_len = strlen(CKPT_PREFIX) + 10 + strlen(CKPT_SUFFIX), mark_len = strlen(tmp_mark);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        if (len <= base_len + mark_len || len - base_len - mark_len > 10 ||
            strncmp(name + base_len, tmp_mark, mark_len) != 0)
            continue;
        char base[64];
        snprintf(base, sizeof base, "%.*s", (int)base_len, name);
        int64_t step;
        if (parse_name(base, &step)) continue;
        long pid = 0;
        const char *digits = name + base_len + mark_len;
        for (; *digits >= '0' && *digits <= '9'; digits++) pid = pid * 10 + (*digits - '0');
        if (*digits || pid <= 0 || pid > INT32_MAX) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (unlink(path) == 0)
            DL_INFO("train", "removed %s, left by a checkpoint writer (pid %ld) that no longer runs", path, pid);
        else
            DL_WARN("train", "cannot remove the stale %s: %s", path, strerror(errno));
    }
    closedir(d);
}

int dl_checkpoint_load_latest(const char *dir, dl_checkpoint *ck, char *path_out, size_t path_size) {
    memset(ck, 0, sizeof *ck);
    remove_stale_temps(dir);
    ckpt_entry *list;
    int count;
    int rc = list_checkpoints(dir, &list, &count);
    if (rc) return rc;
    if (count == 0) {
        free(list);
        return 1;
    }
    char path[4096];
    for (int i = count - 1; i >= 0; i--) {
        snprintf(path, sizeof path, "%s/%s", dir, list[i].name);
        if (dl_checkpoint_load(path, 0, ck) == 0) {
            if (path_out) snprintf(path_out, path_size, "%s", path);
            free(list);
            return 0;
        }
        DL_WARN("train", "%s%s", dl_error(), i > 0 ? "; trying the previous checkpoint" : "");
    }
    free(list);
    return dl_fail("none of the %d checkpoints in %s could be loaded (see the warnings above)", count, dir);
}

int dl_checkpoint_model_config(const dl_checkpoint *ck, dl_albert_config *cfg) {
    const char *json = ck->model_config_json ? ck->model_config_json : "";
    return dl_albert_config_parse(json, strlen(json), "the model configuration in the checkpoint", cfg);
}
