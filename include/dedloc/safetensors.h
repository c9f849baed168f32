/* dedloc safetensors: read and write the Hugging Face safetensors format
 * (8-byte little-endian header length, JSON header via cJSON, raw
 * little-endian data). Everything read is validated before use: header length,
 * JSON shape, dtypes, shapes against sizes, offsets inside the file, no
 * overlapping tensors.
 *
 * Lives in src/safetensors/ as its own module because two modules use it:
 * model (HF model folders, batch and gradient files) and train
 * (checkpoints). It depends on util only. */
#ifndef DEDLOC_SAFETENSORS_H
#define DEDLOC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DL_ST_F32, DL_ST_F16, DL_ST_BF16, DL_ST_F64, DL_ST_I64, DL_ST_I32, DL_ST_I16, DL_ST_I8,
    DL_ST_U8, DL_ST_BOOL,
    /* Known to the format, so files holding them are read; no conversions. */
    DL_ST_U16, DL_ST_U32, DL_ST_U64, DL_ST_F8_E4M3, DL_ST_F8_E5M2
} dl_st_dtype;

enum {
    DL_ST_MAX_DIMS = 8,
    /* Largest JSON header accepted, as the Python library allows. */
    DL_ST_MAX_HEADER = 100000000
};

typedef struct dl_st_tensor {
    char *name;
    dl_st_dtype dtype;
    int ndim;
    int64_t shape[DL_ST_MAX_DIMS];
    size_t numel;
    size_t offset;   /* bytes from the start of the data section */
    size_t nbytes;
} dl_st_tensor;

typedef struct dl_safetensors {
    char *buffer;        /* whole file */
    size_t buffer_size;
    const char *data;    /* start of the data section inside buffer */
    size_t data_size;
    dl_st_tensor *tensors;   /* in the order the header lists them */
    int count;
    int *by_name;            /* indices into tensors, sorted by name (for dl_st_find) */
    char **metadata_keys;    /* the "__metadata__" string map, header order */
    char **metadata_values;
    int metadata_count;
} dl_safetensors;

const char *dl_st_dtype_name(dl_st_dtype dtype);   /* "F32", ... */
size_t dl_st_dtype_size(dl_st_dtype dtype);
/* Parses a dtype name ("F32", "I64", ...); -1 if unknown (no error recorded). */
int dl_st_dtype_parse(const char *name, dl_st_dtype *out);

/* Reads and validates a file (at most max_size bytes; 0 = 16 GiB). Errors
 * start with the path. Validation is that of the Python library: header length
 * at most DL_ST_MAX_HEADER and inside the file, the header a JSON object,
 * each tensor with a known dtype, a shape of at most DL_ST_MAX_DIMS
 * non-negative integers and data_offsets [begin, end] whose length is the
 * shape's byte size; tensors unique by name, not overlapping and covering the
 * data section without holes; "__metadata__" a map of strings. */
int dl_st_read(const char *path, size_t max_size, dl_safetensors **out);
/* Validates a file image already in memory; takes ownership of buffer (malloc'd;
 * freed here on failure too). */
int dl_st_parse(char *buffer, size_t size, dl_safetensors **out);
void dl_st_free(dl_safetensors *st);

/* NULL if absent (no error recorded). */
const dl_st_tensor *dl_st_find(const dl_safetensors *st, const char *name);
/* The raw little-endian bytes. Not necessarily aligned for the dtype: copy
 * with memcpy, or use dl_st_get_f32 / dl_st_get_i64. */
const void *dl_st_tensor_data(const dl_safetensors *st, const dl_st_tensor *t);
/* A "__metadata__" value; NULL if absent. */
const char *dl_st_metadata(const dl_safetensors *st, const char *key);
/* Copies a tensor as fp32 (from F32, F16, BF16 or F64); fails with a clear
 * message if it is missing, of another kind, or numel != expected_numel. */
int dl_st_get_f32(const dl_safetensors *st, const char *name, float *out, size_t expected_numel);
/* Copies an integer tensor (I64, I32, I16, I8, U8, BOOL) as int64. */
int dl_st_get_i64(const dl_safetensors *st, const char *name, int64_t *out, size_t expected_numel);

/* Writer: collects tensors (the data is copied) and writes the file atomically,
 * tensors in the order added, with an optional {"format": "pt"}-style
 * metadata map given as key/value pairs. The header is compact JSON
 * ("__metadata__" first), padded with spaces to a multiple of 8 bytes as the
 * Python library pads it; data follows without gaps. Names must be unique and
 * non-empty; ndim 0..DL_ST_MAX_DIMS (0 = scalar). */
typedef struct dl_st_writer dl_st_writer;
dl_st_writer *dl_st_writer_new(void);
int dl_st_writer_add(dl_st_writer *w, const char *name, dl_st_dtype dtype, int ndim,
                     const int64_t *shape, const void *data);
int dl_st_writer_metadata(dl_st_writer *w, const char *key, const char *value);
int dl_st_writer_write(dl_st_writer *w, const char *path);
/* The file image in memory (malloc'd; free() it), as _write would write it. */
int dl_st_writer_serialize(dl_st_writer *w, char **out, size_t *out_size);
void dl_st_writer_free(dl_st_writer *w);

#endif
