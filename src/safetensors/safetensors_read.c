/* safetensors reader: every field of an untrusted file is checked before use. */
#include "dedloc/safetensors.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as is"
#endif

static const struct {
    const char *name;
    size_t size;
} dtype_info[] = {
    [DL_ST_F32] = {"F32", 4},   [DL_ST_F16] = {"F16", 2},
    [DL_ST_BF16] = {"BF16", 2}, [DL_ST_F64] = {"F64", 8},
    [DL_ST_I64] = {"I64", 8},   [DL_ST_I32] = {"I32", 4},
    [DL_ST_I16] = {"I16", 2},   [DL_ST_I8] = {"I8", 1},
    [DL_ST_U8] = {"U8", 1},     [DL_ST_BOOL] = {"BOOL", 1},
    [DL_ST_U16] = {"U16", 2},   [DL_ST_U32] = {"U32", 4},
    [DL_ST_U64] = {"U64", 8},   [DL_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DL_ST_F8_E5M2] = {"F8_E5M2", 1},
};
enum { DTYPE_COUNT = (int)(sizeof dtype_info / sizeof dtype_info[0]) };

/* Integers in the header are JSON numbers, which cJSON holds as doubles:
 * exact up to 2^53, far above any real tensor size. */
#define MAX_JSON_INTEGER 9007199254740992.0

const char *dl_st_dtype_name(dl_st_dtype dtype) {
    return (int)dtype >= 0 && (int)dtype < DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

size_t dl_st_dtype_size(dl_st_dtype dtype) {
    return (int)dtype >= 0 && (int)dtype < DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

int dl_st_dtype_parse(const char *name, dl_st_dtype *out) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (dl_st_dtype)i;
            return 0;
        }
    }
    return -1;
}

void dl_st_free(dl_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->count; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->metadata_count; i++) {
        free(st->metadata_keys[i]);
        free(st->metadata_values[i]);
    }
    free(st->tensors);
    free(st->by_name);
    free(st->metadata_keys);
    free(st->metadata_values);
    free(st->buffer);
    free(st);
}

/* A non-negative integer JSON number, or -1 with an error naming what. */
static int json_size(const cJSON *item, const char *tensor, const char *what, uint64_t *out) {
    if (!cJSON_IsNumber(item))
        return dl_fail("tensor '%s': %s is not a number", tensor, what);
    double v = item->valuedouble;
    if (!(v >= 0))
        return dl_fail("tensor '%s': %s is negative (%g)", tensor, what, v);
    if (v != floor(v) || v > MAX_JSON_INTEGER)
        return dl_fail("tensor '%s': %s is not an integer below 2^53 (%g)", tensor, what, v);
    *out = (uint64_t)v;
    return 0;
}

static int parse_metadata(const cJSON *meta, dl_safetensors *st) {
    if (!cJSON_IsObject(meta)) return dl_fail("\"__metadata__\" is not an object of strings");
    int n = cJSON_GetArraySize(meta);
    st->metadata_keys = dl_calloc((size_t)n, sizeof(char *));
    st->metadata_values = dl_calloc((size_t)n, sizeof(char *));
    if (!st->metadata_keys || !st->metadata_values) return -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, meta) {
        if (!cJSON_IsString(item))
            return dl_fail("\"__metadata__\" value of '%s' is not a string", item->string);
        int i = st->metadata_count;
        st->metadata_keys[i] = dl_strdup(item->string);
        st->metadata_values[i] = dl_strdup(item->valuestring);
        if (!st->metadata_keys[i] || !st->metadata_values[i]) return -1;
        st->metadata_count++;
    }
    return 0;
}

static int parse_tensor(const cJSON *entry, size_t data_size, dl_st_tensor *t) {
    const char *name = entry->string;
    if (!name[0]) return dl_fail("a tensor has an empty name");
    if (!cJSON_IsObject(entry)) return dl_fail("tensor '%s': entry is not an object", name);

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dtype))
        return dl_fail("tensor '%s': \"dtype\" is missing or not a string", name);
    if (dl_st_dtype_parse(dtype->valuestring, &t->dtype) != 0)
        return dl_fail("tensor '%s': unknown dtype \"%.32s\"", name, dtype->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!cJSON_IsArray(shape))
        return dl_fail("tensor '%s': \"shape\" is missing or not an array", name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DL_ST_MAX_DIMS)
        return dl_fail("tensor '%s': %d dimensions, at most %d supported", name, ndim,
                       DL_ST_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t extent;
        if (json_size(dim, name, "a shape dimension", &extent) != 0) return -1;
        t->shape[d++] = (int64_t)extent;
        /* extent <= 2^53, so numel * extent overflows only if numel is large */
        if (extent && numel > UINT64_MAX / extent)
            return dl_fail("tensor '%s': element count overflows", name);
        numel *= extent;
    }
    size_t elem = dl_st_dtype_size(t->dtype);
    if (numel > SIZE_MAX / elem) return dl_fail("tensor '%s': byte size overflows", name);
    t->numel = (size_t)numel;
    t->nbytes = (size_t)numel * elem;

    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return dl_fail("tensor '%s': \"data_offsets\" is missing or not [begin, end]", name);
    uint64_t begin, end;
    if (json_size(cJSON_GetArrayItem(offsets, 0), name, "data_offsets begin", &begin) != 0 ||
        json_size(cJSON_GetArrayItem(offsets, 1), name, "data_offsets end", &end) != 0)
        return -1;
    if (begin > end)
        return dl_fail("tensor '%s': data_offsets [%llu, %llu] end before begin", name,
                       (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return dl_fail("tensor '%s': data_offsets [%llu, %llu] beyond the %zu data bytes "
                       "(truncated file?)",
                       name, (unsigned long long)begin, (unsigned long long)end, data_size);
    if (end - begin != t->nbytes)
        return dl_fail("tensor '%s': %llu data bytes but %s shape needs %zu", name,
                       (unsigned long long)(end - begin), dtype_info[t->dtype].name, t->nbytes);
    t->offset = (size_t)begin;
    return 0;
}

/* qsort comparators need the tensor array; parsing is single-threaded per
 * call but callers may parse on several threads, hence _Thread_local. */
static _Thread_local const dl_st_tensor *sort_tensors;

static int by_name_cmp(const void *a, const void *b) {
    return strcmp(sort_tensors[*(const int *)a].name, sort_tensors[*(const int *)b].name);
}

static int by_offset_cmp(const void *a, const void *b) {
    const dl_st_tensor *x = &sort_tensors[*(const int *)a], *y = &sort_tensors[*(const int *)b];
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

/* Unique names; the byte ranges tile [0, data_size) exactly: no overlap (two
 * tensors aliasing one range) and no hole (bytes no tensor accounts for,
 * which the Python library refuses to keep files from being polyglots). */
static int check_layout(dl_safetensors *st) {
    int n = st->count;
    st->by_name = dl_malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *order = dl_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!st->by_name || !order) {
        free(order);
        return -1;
    }
    for (int i = 0; i < n; i++) st->by_name[i] = order[i] = i;
    sort_tensors = st->tensors;
    qsort(st->by_name, (size_t)n, sizeof(int), by_name_cmp);
    qsort(order, (size_t)n, sizeof(int), by_offset_cmp);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++) {
        const dl_st_tensor *a = &st->tensors[st->by_name[i - 1]], *b = &st->tensors[st->by_name[i]];
        if (strcmp(a->name, b->name) == 0) rc = dl_fail("tensor '%s' appears twice", a->name);
    }
    size_t covered = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const dl_st_tensor *t = &st->tensors[order[i]];
        if (t->offset < covered) {
            const dl_st_tensor *prev = &st->tensors[order[i - 1]];
            rc = dl_fail("tensors '%s' and '%s' overlap (bytes %zu..%zu and %zu..%zu)", prev->name,
                         t->name, prev->offset, prev->offset + prev->nbytes, t->offset,
                         t->offset + t->nbytes);
        } else if (t->offset > covered) {
            rc = dl_fail("data bytes %zu..%zu belong to no tensor (before '%s')", covered,
                         t->offset, t->name);
        } else {
            covered = t->offset + t->nbytes;
        }
    }
    if (rc == 0 && covered != st->data_size)
        rc = dl_fail("data bytes %zu..%zu after the last tensor belong to no tensor", covered,
                     st->data_size);
    free(order);
    return rc;
}

static int parse_header(dl_safetensors *st, const char *header, size_t header_len) {
    /* The Python library requires the header to start with '{'; trailing
     * spaces are its padding. */
    if (header_len == 0 || header[0] != '{')
        return dl_fail("header is not a JSON object (does not start with '{')");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, header_len, &end, 0);
    if (!root) {
        size_t at = end && end >= header ? (size_t)(end - header) : 0;
        return dl_fail("header is not valid JSON (error near byte %zu of %zu)", at, header_len);
    }
    int rc = 0;
    for (const char *p = end; p < header + header_len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = dl_fail("header has bytes after its JSON object (at byte %zu)",
                         (size_t)(p - header));
            break;
        }
    }
    if (rc == 0 && !cJSON_IsObject(root)) rc = dl_fail("header is not a JSON object");
    int entries = rc == 0 ? cJSON_GetArraySize(root) : 0;
    if (rc == 0) {
        st->tensors = dl_calloc((size_t)(entries ? entries : 1), sizeof(dl_st_tensor));
        if (!st->tensors) rc = -1;
    }
    const cJSON *entry;
    if (rc == 0) {
        cJSON_ArrayForEach(entry, root) {
            if (strcmp(entry->string, "__metadata__") == 0) {
                if (st->metadata_keys) {
                    rc = dl_fail("\"__metadata__\" appears twice");
                    break;
                }
                if ((rc = parse_metadata(entry, st)) != 0) break;
                continue;
            }
            dl_st_tensor *t = &st->tensors[st->count];
            if ((rc = parse_tensor(entry, st->data_size, t)) != 0) break;
            if (!(t->name = dl_strdup(entry->string))) {
                rc = -1;
                break;
            }
            st->count++;
        }
    }
    cJSON_Delete(root);
    if (rc == 0) rc = check_layout(st);
    return rc;
}

int dl_st_parse(char *buffer, size_t size, dl_safetensors **out) {
    *out = NULL;
    dl_safetensors *st = dl_calloc(1, sizeof *st);
    if (!st) {
        free(buffer);
        return -1;
    }
    st->buffer = buffer;
    st->buffer_size = size;
    if (size < 8) {
        dl_st_free(st);
        return dl_fail("safetensors: %zu bytes, too short for the 8-byte header length", size);
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | (unsigned char)buffer[i];
    if (header_len > DL_ST_MAX_HEADER) {
        dl_st_free(st);
        return dl_fail("safetensors: header length %llu exceeds the %d-byte limit "
                       "(not a safetensors file?)",
                       (unsigned long long)header_len, DL_ST_MAX_HEADER);
    }
    if (header_len > size - 8) {
        dl_st_free(st);
        return dl_fail("safetensors: header length %llu exceeds the file (%zu bytes; truncated?)",
                       (unsigned long long)header_len, size);
    }
    st->data = buffer + 8 + header_len;
    st->data_size = size - 8 - (size_t)header_len;
    if (parse_header(st, buffer + 8, (size_t)header_len) != 0) {
        dl_st_free(st);
        return dl_fail_context("safetensors");
    }
    *out = st;
    return 0;
}

int dl_st_read(const char *path, size_t max_size, dl_safetensors **out) {
    *out = NULL;
    char *buffer;
    size_t size;
    if (max_size == 0) max_size = (size_t)16 << 30;
    if (dl_read_file(path, max_size, &buffer, &size) != 0) return -1;
    if (dl_st_parse(buffer, size, out) != 0) return dl_fail_context("%s", path);
    return 0;
}

const dl_st_tensor *dl_st_find(const dl_safetensors *st, const char *name) {
    int lo = 0, hi = st->count - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const dl_st_tensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const void *dl_st_tensor_data(const dl_safetensors *st, const dl_st_tensor *t) {
    return st->data + t->offset;
}

const char *dl_st_metadata(const dl_safetensors *st, const char *key) {
    for (int i = 0; i < st->metadata_count; i++)
        if (strcmp(st->metadata_keys[i], key) == 0) return st->metadata_values[i];
    return NULL;
}

static const dl_st_tensor *find_checked(const dl_safetensors *st, const char *name,
                                        size_t expected_numel) {
    const dl_st_tensor *t = dl_st_find(st, name);
    if (!t) {
        dl_fail("tensor '%s' is missing", name);
        return NULL;
    }
    if (t->numel != expected_numel) {
        dl_fail("tensor '%s' has %zu elements, expected %zu", name, t->numel, expected_numel);
        return NULL;
    }
    return t;
}

int dl_st_get_f32(const dl_safetensors *st, const char *name, float *out, size_t expected_numel) {
    const dl_st_tensor *t = find_checked(st, name, expected_numel);
    if (!t) return -1;
    const unsigned char *src = dl_st_tensor_data(st, t);
    switch (t->dtype) {
    case DL_ST_F32:
        memcpy(out, src, t->nbytes);
        return 0;
    case DL_ST_F16:
    case DL_ST_BF16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = t->dtype == DL_ST_F16 ? dl_f16_to_f32(h) : dl_bf16_to_f32(h);
        }
        return 0;
    case DL_ST_F64:
        for (size_t i = 0; i < t->numel; i++) {
            double v;
            memcpy(&v, src + 8 * i, 8);
            out[i] = (float)v;
        }
        return 0;
    default:
        return dl_fail("tensor '%s' is %s, expected a floating-point tensor (F32, F16, BF16, F64)",
                       name, dl_st_dtype_name(t->dtype));
    }
}

int dl_st_get_i64(const dl_safetensors *st, const char *name, int64_t *out, size_t expected_numel) {
    const dl_st_tensor *t = find_checked(st, name, expected_numel);
    if (!t) return -1;
    const unsigned char *src = dl_st_tensor_data(st, t);
    for (size_t i = 0; i < t->numel; i++) {
        switch (t->dtype) {
        case DL_ST_I64: memcpy(&out[i], src + 8 * i, 8); break;
        case DL_ST_I32: { int32_t v; memcpy(&v, src + 4 * i, 4); out[i] = v; break; }
        case DL_ST_I16: { int16_t v; memcpy(&v, src + 2 * i, 2); out[i] = v; break; }
        case DL_ST_I8: out[i] = (int8_t)src[i]; break;
        case DL_ST_U8: out[i] = src[i]; break;
        case DL_ST_BOOL:
            if (src[i] > 1)
                return dl_fail("tensor '%s': BOOL element %zu is %u, not 0 or 1", name, i, src[i]);
            out[i] = src[i];
            break;
        case DL_ST_U16: { uint16_t v; memcpy(&v, src + 2 * i, 2); out[i] = v; break; }
        case DL_ST_U32: { uint32_t v; memcpy(&v, src + 4 * i, 4); out[i] = v; break; }
        case DL_ST_U64: {
            uint64_t v;
            memcpy(&v, src + 8 * i, 8);
            if (v > (uint64_t)INT64_MAX)
                return dl_fail("tensor '%s': U64 element %zu does not fit in int64", name, i);
            out[i] = (int64_t)v;
            break;
        }
        default:
            return dl_fail("tensor '%s' is %s, expected an integer tensor", name,
                           dl_st_dtype_name(t->dtype));
        }
    }
    return 0;
}
