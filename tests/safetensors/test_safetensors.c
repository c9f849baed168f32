/* safetensors: what the reader accepts (files written by the Python library,
 * our own writer), what it refuses (malformed and hostile files, each with a
 * clear message), and that the writer's bytes are the Python library's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/safetensors.h"
#include "dedloc/util.h"
#include "dl_test.h"

static char tmp_dir[] = "/tmp/dl_test_safetensors_XXXXXX";

static void fixture_path(char *out, size_t size, const char *fixture, const char *file) {
    snprintf(out, size, "%s/tests/fixtures/%s/%s", DEDLOC_SOURCE_DIR, fixture, file);
}

/* A file image: 8-byte length, the header text as given, then data_size bytes
 * of a repeating pattern. */
static char *make_image(const char *header, size_t data_size, size_t *size) {
    size_t header_len = strlen(header);
    *size = 8 + header_len + data_size;
    char *buf = malloc(*size + 1);
    for (int i = 0; i < 8; i++) buf[i] = (char)((uint64_t)header_len >> (8 * i));
    memcpy(buf + 8, header, header_len);
    for (size_t i = 0; i < data_size; i++) buf[8 + header_len + i] = (char)(i * 7 + 1);
    return buf;
}

/* Parses an image expected to be refused; checks the message mentions `expect`. */
static void expect_refused(const char *what, char *image, size_t size, const char *expect) {
    dl_clear_error();
    dl_safetensors *st = (dl_safetensors *)0x1;
    int rc = dl_st_parse(image, size, &st);
    CHECK_MSG(rc == -1, "%s: accepted", what);
    CHECK_MSG(st == NULL, "%s: output not cleared", what);
    CHECK_MSG(strstr(dl_error(), expect) != NULL, "%s: message '%s' lacks '%s'", what, dl_error(),
              expect);
    if (rc == 0) dl_st_free(st);
    if (getenv("DL_TEST_VERBOSE")) printf("%-28s %s\n", what, dl_error());
}

static void refuse_header(const char *what, const char *header, size_t data_size,
                          const char *expect) {
    size_t size;
    char *image = make_image(header, data_size, &size);
    expect_refused(what, image, size, expect);
}

static void test_malformed(void) {
    size_t size;
    char *image;

    image = malloc(5);
    memcpy(image, "\x10\0\0\0\0", 5);
    expect_refused("truncated header length", image, 5, "too short");

    image = make_image("{}", 0, &size);
    memset(image, 0xff, 8);
    expect_refused("header length 2^64-1", image, size, "exceeds the 100000000-byte limit");

    image = make_image("{}", 0, &size);
    image[0] = 100; /* 100 > the 2 header bytes in the file */
    expect_refused("header longer than file", image, size, "exceeds the file");

    image = make_image("{}", 0, &size);
    memset(image, 0, 8);
    expect_refused("empty header", image, size, "not a JSON object");

    refuse_header("not JSON", "{\"a\": nope}", 0, "not valid JSON");
    refuse_header("unterminated JSON", "{\"a\": {\"dtype\": \"F32\"", 0, "not valid JSON");
    refuse_header("JSON array", "[1, 2, 3]", 0, "not a JSON object");
    refuse_header("JSON string", "\"x\"", 0, "not a JSON object");
    refuse_header("garbage after JSON", "{}  x", 0, "bytes after its JSON object");
    refuse_header("entry not object", "{\"w\": 3}", 0, "'w': entry is not an object");
    refuse_header("bad dtype", "{\"w\": {\"dtype\": \"F31\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                  4, "'w': unknown dtype \"F31\"");
    refuse_header("dtype not string", "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}",
                  4, "'w': \"dtype\" is missing");
    refuse_header("missing dtype", "{\"w\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                  "'w': \"dtype\" is missing");
    refuse_header("negative shape",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
                  "'w': a shape dimension is negative");
    refuse_header("fractional shape",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4,
                  "not an integer");
    refuse_header("string shape",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 4,
                  "not a number");
    refuse_header("missing shape", "{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
                  "'w': \"shape\" is missing");
    refuse_header("nine dimensions",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
                  "\"data_offsets\": [0, 4]}}",
                  4, "9 dimensions");
    refuse_header("element count overflow",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
                  "\"data_offsets\": [0, 4]}}",
                  4, "overflows");
    refuse_header("byte size overflow",
                  "{\"w\": {\"dtype\": \"F64\", \"shape\": [2147483648, 2147483648, 2], "
                  "\"data_offsets\": [0, 4]}}",
                  4, "overflows");
    refuse_header("offsets out of range",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
                  "beyond the 4 data bytes");
    refuse_header("huge offsets",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], "
                  "\"data_offsets\": [18446744073709551612, 18446744073709551616]}}",
                  4, "not an integer below 2^53");
    refuse_header("offsets reversed",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 4,
                  "end before begin");
    refuse_header("negative offset",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 4,
                  "negative");
    refuse_header("missing data_offsets", "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
                  "'w': \"data_offsets\" is missing");
    refuse_header("three data_offsets",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8,
                  "\"data_offsets\" is missing or not [begin, end]");
    refuse_header("size mismatch",
                  "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                  "'w': 8 data bytes but F32 shape needs 12");
    refuse_header("overlapping tensors",
                  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
                  12, "'a' and 'b' overlap");
    refuse_header("aliased tensors",
                  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
                  8, "overlap");
    refuse_header("hole between tensors",
                  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                  " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
                  12, "bytes 4..8 belong to no tensor");
    refuse_header("trailing data",
                  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 9,
                  "after the last tensor");
    refuse_header("duplicate name",
                  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                  " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                  8, "'a' appears twice");
    refuse_header("empty name", "{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                  4, "empty name");
    refuse_header("metadata not object", "{\"__metadata__\": [\"x\"]}", 0,
                  "\"__metadata__\" is not an object");
    refuse_header("metadata value not string", "{\"__metadata__\": {\"format\": 1}}", 0,
                  "value of 'format' is not a string");
    refuse_header("metadata twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0,
                  "appears twice");
}

/* Flipping bytes of a valid file must give either a valid parse or an error,
 * never a crash or an out-of-bounds read (the sanitizer build checks that). */
static void test_mutations(void) {
    char path[512];
    fixture_path(path, sizeof path, "albert_tiny", "batch.safetensors");
    char *original;
    size_t size;
    CHECK_OK(dl_read_file(path, 1 << 20, &original, &size));
    if (!original) return;
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | (unsigned char)original[i];
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    int accepted = 0, refused = 0;
    for (int round = 0; round < 3000; round++) {
        char *copy = malloc(size);
        memcpy(copy, original, size);
        size_t cut = size;
        int flips = 1 + (int)dl_rng_below(&rng, 4);
        for (int f = 0; f < flips; f++) {
            /* mostly inside the header, where the structure is */
            size_t at = dl_rng_below(&rng, 4) ? dl_rng_below(&rng, 8 + header_len)
                                              : dl_rng_below(&rng, size);
            static const char interesting[] = "{}[]\",:-09e.   \xff";
            copy[at] = dl_rng_below(&rng, 2) ? interesting[dl_rng_below(&rng, sizeof interesting - 1)]
                                             : (char)dl_rng_next(&rng);
        }
        if (dl_rng_below(&rng, 8) == 0) cut = dl_rng_below(&rng, size + 1);
        dl_safetensors *st;
        if (dl_st_parse(copy, cut, &st) == 0) {
            accepted++;
            /* whatever was accepted must be internally consistent */
            for (int i = 0; i < st->count; i++) {
                const dl_st_tensor *t = &st->tensors[i];
                if (t->offset + t->nbytes > st->data_size) refused += 1000000;
            }
            dl_st_free(st);
        } else {
            refused++;
        }
    }
    free(original);
    CHECK_MSG(refused >= 1000 && refused < 1000000, "%d refused, %d accepted", refused, accepted);
    if (getenv("DL_TEST_VERBOSE")) printf("mutations: %d refused, %d accepted\n", refused, accepted);
}

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmp_dir);
    dl_st_writer *w = dl_st_writer_new();
    CHECK(w != NULL);
    if (!w) return;

    const float f32[6] = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 1e30f};
    const int64_t shape23[2] = {2, 3};
    uint16_t f16[3], bf16[3];
    const float halves[3] = {1.0f, -0.5f, 1024.0f};
    dl_f32_to_f16_array(f16, halves, 3);
    dl_f32_to_bf16_array(bf16, halves, 3);
    const double f64[2] = {0.1, -1e40};
    const int64_t i64[4] = {-100, 0, INT64_MAX, INT64_MIN};
    const int32_t i32[3] = {-7, 0, 2147483647};
    const int8_t i8[2] = {-128, 127};
    const uint8_t u8[2] = {0, 255};
    const uint8_t flags[3] = {1, 0, 1};
    const float scalar = 42.0f;
    const int64_t n2 = 2, n3 = 3, n4 = 4, zero_shape[2] = {0, 5};

    CHECK_OK(dl_st_writer_add(w, "weight", DL_ST_F32, 2, shape23, f32));
    CHECK_OK(dl_st_writer_add(w, "half", DL_ST_F16, 1, &n3, f16));
    CHECK_OK(dl_st_writer_add(w, "brain", DL_ST_BF16, 1, &n3, bf16));
    CHECK_OK(dl_st_writer_add(w, "double", DL_ST_F64, 1, &n2, f64));
    CHECK_OK(dl_st_writer_add(w, "ids", DL_ST_I64, 1, &n4, i64));
    CHECK_OK(dl_st_writer_add(w, "i32", DL_ST_I32, 1, &n3, i32));
    CHECK_OK(dl_st_writer_add(w, "i8", DL_ST_I8, 1, &n2, i8));
    CHECK_OK(dl_st_writer_add(w, "u8", DL_ST_U8, 1, &n2, u8));
    CHECK_OK(dl_st_writer_add(w, "flags", DL_ST_BOOL, 1, &n3, flags));
    CHECK_OK(dl_st_writer_add(w, "scalar", DL_ST_F32, 0, NULL, &scalar));
    CHECK_OK(dl_st_writer_add(w, "empty", DL_ST_F32, 2, zero_shape, NULL));
    CHECK_OK(dl_st_writer_metadata(w, "format", "pt"));
    CHECK_OK(dl_st_writer_metadata(w, "note", "quote \" and \\ and \xc3\xa9"));
    CHECK_OK(dl_st_writer_metadata(w, "format", "dedloc")); /* replaces */

    /* refused additions */
    CHECK(dl_st_writer_add(w, "weight", DL_ST_F32, 1, &n2, f32) == -1);
    CHECK(strstr(dl_error(), "added twice") != NULL);
    CHECK(dl_st_writer_add(w, "__metadata__", DL_ST_F32, 1, &n2, f32) == -1);
    CHECK(dl_st_writer_add(w, "", DL_ST_F32, 1, &n2, f32) == -1);
    const int64_t negative = -1;
    CHECK(dl_st_writer_add(w, "neg", DL_ST_F32, 1, &negative, f32) == -1);
    CHECK(dl_st_writer_add(w, "deep", DL_ST_F32, 9, shape23, f32) == -1);
    const int64_t huge[3] = {INT64_MAX, INT64_MAX, 2};
    CHECK(dl_st_writer_add(w, "huge", DL_ST_F32, 3, huge, f32) == -1);

    CHECK_OK(dl_st_writer_write(w, path));
    dl_st_writer_free(w);

    /* header padded with spaces to 8 bytes, as the Python library does */
    char *raw;
    size_t raw_size;
    CHECK_OK(dl_read_file(path, 1 << 20, &raw, &raw_size));
    if (raw) {
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; i--) header_len = header_len << 8 | (unsigned char)raw[i];
        CHECK(header_len % 8 == 0);
        CHECK(raw[8] == '{');
        CHECK(strncmp(raw + 8, "{\"__metadata__\":{\"format\":\"dedloc\"", 34) == 0);
        CHECK(strstr(raw + 8, "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") !=
              NULL);
        free(raw);
    }

    dl_safetensors *st = NULL;
    CHECK_OK(dl_st_read(path, 0, &st));
    if (!st) return;
    CHECK(st->count == 11);
    CHECK(strcmp(st->tensors[0].name, "weight") == 0 && strcmp(st->tensors[10].name, "empty") == 0);
    CHECK(st->metadata_count == 2);
    CHECK(dl_st_metadata(st, "format") && strcmp(dl_st_metadata(st, "format"), "dedloc") == 0);
    CHECK(dl_st_metadata(st, "note") &&
          strcmp(dl_st_metadata(st, "note"), "quote \" and \\ and \xc3\xa9") == 0);
    CHECK(dl_st_metadata(st, "absent") == NULL);

    const dl_st_tensor *t = dl_st_find(st, "weight");
    CHECK(t && t->dtype == DL_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
          t->numel == 6 && t->nbytes == 24 && t->offset == 0);
    float got[6];
    CHECK_OK(dl_st_get_f32(st, "weight", got, 6));
    CHECK(memcmp(got, f32, sizeof f32) == 0);
    CHECK_OK(dl_st_get_f32(st, "half", got, 3));
    CHECK(got[0] == 1.0f && got[1] == -0.5f && got[2] == 1024.0f);
    CHECK_OK(dl_st_get_f32(st, "brain", got, 3));
    CHECK(got[0] == 1.0f && got[1] == -0.5f && got[2] == 1024.0f);
    CHECK_OK(dl_st_get_f32(st, "double", got, 2));
    CHECK(got[0] == 0.1f && isinf(got[1]) && got[1] < 0);
    CHECK_OK(dl_st_get_f32(st, "scalar", got, 1));
    CHECK(got[0] == 42.0f);
    t = dl_st_find(st, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1);
    t = dl_st_find(st, "empty");
    CHECK(t && t->ndim == 2 && t->numel == 0 && t->nbytes == 0);
    CHECK_OK(dl_st_get_f32(st, "empty", got, 0));

    int64_t ints[4];
    CHECK_OK(dl_st_get_i64(st, "ids", ints, 4));
    CHECK(memcmp(ints, i64, sizeof i64) == 0);
    CHECK_OK(dl_st_get_i64(st, "i32", ints, 3));
    CHECK(ints[0] == -7 && ints[1] == 0 && ints[2] == 2147483647);
    CHECK_OK(dl_st_get_i64(st, "i8", ints, 2));
    CHECK(ints[0] == -128 && ints[1] == 127);
    CHECK_OK(dl_st_get_i64(st, "u8", ints, 2));
    CHECK(ints[0] == 0 && ints[1] == 255);
    CHECK_OK(dl_st_get_i64(st, "flags", ints, 3));
    CHECK(ints[0] == 1 && ints[1] == 0 && ints[2] == 1);

    /* wrong kind, wrong count, missing: clear errors naming the tensor */
    CHECK(dl_st_get_f32(st, "ids", got, 4) == -1);
    CHECK(strstr(dl_error(), "'ids' is I64") != NULL);
    CHECK(dl_st_get_i64(st, "weight", ints, 6) == -1 ? 1 : 0);
    CHECK(strstr(dl_error(), "'weight' is F32, expected an integer") != NULL);
    CHECK(dl_st_get_f32(st, "weight", got, 5) == -1);
    CHECK(strstr(dl_error(), "'weight' has 6 elements, expected 5") != NULL);
    CHECK(dl_st_get_f32(st, "nope", got, 1) == -1);
    CHECK(strstr(dl_error(), "'nope' is missing") != NULL);
    CHECK(dl_st_find(st, "nope") == NULL);
    dl_st_free(st);

    /* an empty writer gives a valid empty file */
    w = dl_st_writer_new();
    CHECK_OK(dl_st_writer_write(w, path));
    dl_st_writer_free(w);
    CHECK_OK(dl_st_read(path, 0, &st));
    if (st) {
        CHECK(st->count == 0 && st->data_size == 0);
        dl_st_free(st);
    }
    unlink(path);

    /* missing file and size limit */
    CHECK(dl_st_read("/nonexistent/x.safetensors", 0, &st) == -1 && st == NULL);
    CHECK(strstr(dl_error(), "/nonexistent/x.safetensors") != NULL);
}

/* The batch and reference files written by scripts/make_reference.py. */
static void test_fixtures(void) {
    char path[512];
    dl_safetensors *st = NULL;

    fixture_path(path, sizeof path, "albert_tiny", "batch.safetensors");
    CHECK_OK(dl_st_read(path, 0, &st));
    if (st) {
        CHECK(st->count == 5);
        const char *source = dl_st_metadata(st, "source");
        CHECK(source && strstr(source, "transformers=4.40.2") != NULL);
        const dl_st_tensor *ids = dl_st_find(st, "input_ids");
        CHECK(ids && ids->dtype == DL_ST_I64 && ids->ndim == 2 && ids->shape[0] == 2 &&
              ids->shape[1] == 16);
        int64_t input_ids[32], labels[32], types[32], order[2];
        CHECK_OK(dl_st_get_i64(st, "input_ids", input_ids, 32));
        CHECK(input_ids[0] == 30 && input_ids[1] == 79 && input_ids[2] == 78 && input_ids[5] == 69);
        CHECK_OK(dl_st_get_i64(st, "labels", labels, 32));
        int masked = 0;
        for (int i = 0; i < 32; i++) masked += labels[i] != -100;
        CHECK(masked == 4 && labels[10] == 4 && labels[13] == 18);
        CHECK_OK(dl_st_get_i64(st, "token_type_ids", types, 32));
        CHECK(types[16 + 6] == 0 && types[16 + 7] == 1 && types[31] == 1);
        CHECK_OK(dl_st_get_i64(st, "sentence_order_label", order, 2));
        CHECK(order[0] == 0 && order[1] == 1);
        dl_st_free(st);
    }

    fixture_path(path, sizeof path, "albert_tiny", "expected.safetensors");
    CHECK_OK(dl_st_read(path, 0, &st));
    if (st) {
        CHECK(st->count == 42);
        float loss[3];
        CHECK_OK(dl_st_get_f32(st, "loss", &loss[0], 1));
        CHECK_OK(dl_st_get_f32(st, "mlm_loss", &loss[1], 1));
        CHECK_OK(dl_st_get_f32(st, "sop_loss", &loss[2], 1));
        CHECK(loss[0] == 5.194107532501221f && loss[1] == 4.499373912811279f &&
              loss[2] == 0.6947335004806519f);
        const dl_st_tensor *t = dl_st_find(st, "albert.embeddings.word_embeddings.weight");
        CHECK(t && t->dtype == DL_ST_F32 && t->shape[0] == 97 && t->shape[1] == 16);
        /* the tied decoder appears only under the embedding's name */
        CHECK(dl_st_find(st, "predictions.decoder.weight") == NULL);
        CHECK(dl_st_find(st, "predictions.decoder.bias") == NULL);
        float bias[97];
        CHECK_OK(dl_st_get_f32(st, "predictions.bias", bias, 97));
        CHECK(bias[0] == 0.010294444859027863f);
        t = dl_st_find(st, "prediction_logits");
        CHECK(t && t->ndim == 3 && t->shape[0] == 2 && t->shape[1] == 16 && t->shape[2] == 97);
        dl_st_free(st);
    }

    fixture_path(path, sizeof path, "albert_tiny", "model.safetensors");
    CHECK_OK(dl_st_read(path, 0, &st));
    if (st) {
        CHECK(st->count == 32);
        CHECK(dl_st_metadata(st, "format") && strcmp(dl_st_metadata(st, "format"), "pt") == 0);
        float w[16];
        CHECK_OK(dl_st_get_f32(st, "albert.embeddings.LayerNorm.weight", w, 16));
        CHECK(w[0] == 1.0870102643966675f && w[2] == 1.1434412002563477f);
        dl_st_free(st);
    }

    fixture_path(path, sizeof path, "albert_odd", "batch.safetensors");
    CHECK_OK(dl_st_read(path, 0, &st));
    if (st) {
        int64_t mask[3 * 37];
        CHECK_OK(dl_st_get_i64(st, "attention_mask", mask, 3 * 37));
        int lengths[3] = {0, 0, 0};
        for (int i = 0; i < 3 * 37; i++) lengths[i / 37] += (int)mask[i];
        CHECK(lengths[0] == 37 && lengths[1] == 20 && lengths[2] == 29);
        dl_st_free(st);
    }
}

/* Each fixture's expected.safetensors holds one gradient per weight in its
 * model.safetensors, same name and shape, and the losses as [1]. */
static void test_fixture_consistency(const char *fixture) {
    char path[512];
    dl_safetensors *model = NULL, *expected = NULL;
    fixture_path(path, sizeof path, fixture, "model.safetensors");
    CHECK_OK(dl_st_read(path, 0, &model));
    fixture_path(path, sizeof path, fixture, "expected.safetensors");
    CHECK_OK(dl_st_read(path, 0, &expected));
    if (model && expected) {
        int matched = 0;
        for (int i = 0; i < model->count; i++) {
            const dl_st_tensor *w = &model->tensors[i];
            const dl_st_tensor *g = dl_st_find(expected, w->name);
            int same = g && g->dtype == DL_ST_F32 && g->ndim == w->ndim &&
                       memcmp(g->shape, w->shape, sizeof(int64_t) * (size_t)w->ndim) == 0;
            CHECK_MSG(same, "%s: no gradient of the shape of %s", fixture, w->name);
            matched += same;
        }
        CHECK(matched == model->count);
        static const char *losses[] = {"loss", "mlm_loss", "sop_loss"};
        for (int i = 0; i < 3; i++) {
            const dl_st_tensor *t = dl_st_find(expected, losses[i]);
            CHECK_MSG(t && t->ndim == 1 && t->shape[0] == 1, "%s: %s", fixture, losses[i]);
        }
    }
    dl_st_free(model);
    dl_st_free(expected);
}

/* Re-writing a Python-written file with our writer (same order, same
 * metadata) must give the same bytes: same JSON layout, padding and data. */
static void rewrite_identical(const char *fixture, const char *file) {
    char path[512], out_path[512];
    fixture_path(path, sizeof path, fixture, file);
    snprintf(out_path, sizeof out_path, "%s/rewrite.safetensors", tmp_dir);
    dl_safetensors *st = NULL;
    CHECK_OK(dl_st_read(path, 0, &st));
    if (!st) return;
    dl_st_writer *w = dl_st_writer_new();
    for (int i = 0; i < st->metadata_count; i++)
        CHECK_OK(dl_st_writer_metadata(w, st->metadata_keys[i], st->metadata_values[i]));
    for (int i = 0; i < st->count; i++) {
        const dl_st_tensor *t = &st->tensors[i];
        CHECK_OK(dl_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, dl_st_tensor_data(st, t)));
    }
    char *image;
    size_t size;
    CHECK_OK(dl_st_writer_serialize(w, &image, &size));
    dl_st_writer_free(w);
    CHECK_MSG(size == st->buffer_size && memcmp(image, st->buffer, size) == 0,
              "%s/%s: rewritten bytes differ (%zu vs %zu bytes)", fixture, file, size,
              st->buffer_size);
    free(image);
    dl_st_free(st);
}

int main(void) {
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_malformed();
    test_round_trip();
    test_fixtures();
    test_fixture_consistency("albert_tiny");
    test_fixture_consistency("albert_groups");
    test_fixture_consistency("albert_odd");
    rewrite_identical("albert_tiny", "batch.safetensors");
    rewrite_identical("albert_odd", "model.safetensors");
    test_mutations();
    rmdir(tmp_dir);
    return dl_test_finish("test_safetensors");
}
