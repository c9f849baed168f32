/* safetensors writer: compact JSON header built with cJSON, space padding to a
 * multiple of 8 bytes (as the Python library writes it), data without gaps. */
#include "dedloc/safetensors.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"

typedef struct writer_tensor {
    char *name;
    dl_st_dtype dtype;
    int ndim;
    int64_t shape[DL_ST_MAX_DIMS];
    void *data;
    size_t nbytes;
} writer_tensor;

struct dl_st_writer {
    writer_tensor *tensors;
    int count, capacity;
    char **metadata_keys, **metadata_values;
    int metadata_count, metadata_capacity;
};

dl_st_writer *dl_st_writer_new(void) { return dl_calloc(1, sizeof(dl_st_writer)); }

void dl_st_writer_free(dl_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    for (int i = 0; i < w->metadata_count; i++) {
        free(w->metadata_keys[i]);
        free(w->metadata_values[i]);
    }
    free(w->tensors);
    free(w->metadata_keys);
    free(w->metadata_values);
    free(w);
}

int dl_st_writer_add(dl_st_writer *w, const char *name, dl_st_dtype dtype, int ndim,
                     const int64_t *shape, const void *data) {
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return dl_fail("safetensors writer: bad tensor name '%s'", name ? name : "(null)");
    size_t elem = dl_st_dtype_size(dtype);
    if (elem == 0) return dl_fail("safetensors writer: tensor '%s': unknown dtype %d", name, dtype);
    if (ndim < 0 || ndim > DL_ST_MAX_DIMS)
        return dl_fail("safetensors writer: tensor '%s': %d dimensions (0..%d allowed)", name, ndim,
                       DL_ST_MAX_DIMS);
    size_t nbytes = elem;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return dl_fail("safetensors writer: tensor '%s': negative extent %" PRId64, name,
                           shape[d]);
        nbytes = dl_mul_size(nbytes, (size_t)shape[d]);
        if (nbytes == SIZE_MAX) return dl_fail_context("safetensors writer: tensor '%s'", name);
    }
    /* Linear scan: writers hold at most a few thousand tensors. */
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return dl_fail("safetensors writer: tensor '%s' added twice", name);
    if (w->count == w->capacity) {
        int capacity = w->capacity ? 2 * w->capacity : 16;
        writer_tensor *grown = dl_realloc(w->tensors, sizeof(writer_tensor) * (size_t)capacity);
        if (!grown) return -1;
        w->tensors = grown;
        w->capacity = capacity;
    }
    writer_tensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    t->name = dl_strdup(name);
    t->data = dl_malloc(nbytes);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return -1;
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = nbytes;
    w->count++;
    return 0;
}

int dl_st_writer_metadata(dl_st_writer *w, const char *key, const char *value) {
    if (!key || !value) return dl_fail("safetensors writer: metadata key and value needed");
    for (int i = 0; i < w->metadata_count; i++) {
        if (strcmp(w->metadata_keys[i], key) == 0) {
            char *copy = dl_strdup(value);
            if (!copy) return -1;
            free(w->metadata_values[i]);
            w->metadata_values[i] = copy;
            return 0;
        }
    }
    if (w->metadata_count == w->metadata_capacity) {
        int capacity = w->metadata_capacity ? 2 * w->metadata_capacity : 4;
        char **keys = dl_realloc(w->metadata_keys, sizeof(char *) * (size_t)capacity);
        if (!keys) return -1;
        w->metadata_keys = keys;
        char **values = dl_realloc(w->metadata_values, sizeof(char *) * (size_t)capacity);
        if (!values) return -1;
        w->metadata_values = values;
        w->metadata_capacity = capacity;
    }
    char *k = dl_strdup(key), *v = dl_strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    w->metadata_keys[w->metadata_count] = k;
    w->metadata_values[w->metadata_count] = v;
    w->metadata_count++;
    return 0;
}

/* cJSON prints numbers above INT_MAX in %g form; sizes are written as raw
 * decimal integers so that they stay exact. */
static cJSON *json_integer(uint64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%" PRIu64, v);
    return cJSON_CreateRaw(text);
}

static char *build_header(const dl_st_writer *w) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = 1;
    if (w->metadata_count) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < w->metadata_count; i++)
            ok = cJSON_AddStringToObject(meta, w->metadata_keys[i], w->metadata_values[i]) != NULL;
    }
    uint64_t offset = 0;
    for (int i = 0; ok && i < w->count; i++) {
        const writer_tensor *t = &w->tensors[i];
        /* key order as the Python library writes it: dtype, shape, data_offsets */
        cJSON *entry = cJSON_AddObjectToObject(root, t->name);
        ok = entry && cJSON_AddStringToObject(entry, "dtype", dl_st_dtype_name(t->dtype));
        cJSON *shape = ok ? cJSON_AddArrayToObject(entry, "shape") : NULL;
        cJSON *offsets = shape ? cJSON_AddArrayToObject(entry, "data_offsets") : NULL;
        ok = offsets != NULL;
        for (int d = 0; ok && d < t->ndim; d++) {
            cJSON *extent = json_integer((uint64_t)t->shape[d]);
            ok = extent && cJSON_AddItemToArray(shape, extent);
        }
        if (ok) {
            cJSON *begin = json_integer(offset);
            ok = begin && cJSON_AddItemToArray(offsets, begin);
            cJSON *end = ok ? json_integer(offset + t->nbytes) : NULL;
            ok = end && cJSON_AddItemToArray(offsets, end);
        }
        offset += t->nbytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

int dl_st_writer_serialize(dl_st_writer *w, char **out, size_t *out_size) {
    *out = NULL;
    *out_size = 0;
    char *header = build_header(w);
    if (!header) return dl_fail("safetensors writer: cannot build the JSON header (out of memory?)");
    size_t header_len = strlen(header);
    size_t padded = (header_len + 7) / 8 * 8;
    if (padded > DL_ST_MAX_HEADER) {
        cJSON_free(header);
        return dl_fail("safetensors writer: header of %zu bytes exceeds the %d-byte limit", padded,
                       DL_ST_MAX_HEADER);
    }
    size_t total = 8 + padded;
    for (int i = 0; i < w->count; i++) {
        if (w->tensors[i].nbytes > SIZE_MAX - total) {
            cJSON_free(header);
            return dl_fail("safetensors writer: file size overflows");
        }
        total += w->tensors[i].nbytes;
    }
    char *image = dl_malloc(total);
    if (!image) {
        cJSON_free(header);
        return -1;
    }
    for (int i = 0; i < 8; i++) image[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(image + 8, header, header_len);
    memset(image + 8 + header_len, ' ', padded - header_len);
    cJSON_free(header);
    size_t at = 8 + padded;
    for (int i = 0; i < w->count; i++) {
        if (w->tensors[i].nbytes) memcpy(image + at, w->tensors[i].data, w->tensors[i].nbytes);
        at += w->tensors[i].nbytes;
    }
    *out = image;
    *out_size = total;
    return 0;
}

int dl_st_writer_write(dl_st_writer *w, const char *path) {
    char *image;
    size_t size;
    if (dl_st_writer_serialize(w, &image, &size) != 0) return dl_fail_context("%s", path);
    int rc = dl_write_file_atomic(path, image, size);
    free(image);
    return rc;
}
