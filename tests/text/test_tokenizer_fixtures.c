/* Id-for-id agreement with HF tokenizers 0.19.1 on the committed fixtures
 * (scripts/make_tokenizer_fixtures.py): five tokenizer files with different
 * normalizers, pre-tokenizers, added tokens and post-processors, ~1000 texts
 * each (Bengali, English, digits, punctuation, spaces, danda variants, emoji,
 * combining marks, empty and long lines, invalid UTF-8, random code points). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/text.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define FIXTURES DEDLOC_SOURCE_DIR "/tests/fixtures/text/"

static size_t hex_decode(const char *hex, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        char b[3] = {hex[i], hex[i + 1], 0};
        v = (unsigned)strtoul(b, NULL, 16);
        out[k++] = (char)v;
    }
    return k;
}

static size_t parse_ids(const char *s, size_t n, int32_t *out) {
    size_t k = 0;
    const char *end = s + n;
    while (s < end) {
        char *next;
        long v = strtol(s, &next, 10);
        if (next == s) break;
        out[k++] = (int32_t)v;
        s = next;
    }
    return k;
}

static bool same(const int32_t *a, size_t n, const int32_t *b, size_t m) {
    return n == m && (n == 0 || !memcmp(a, b, n * sizeof(int32_t)));
}

static void check_file(const char *name, const dl_tokenizer *tok) {
    char path[512];
    snprintf(path, sizeof(path), FIXTURES "%s.ids", name);
    char *data;
    size_t size;
    CHECK_OK(dl_read_file(path, 64u << 20, &data, &size));
    if (!data) return;
    char *text = malloc(size + 1);
    int32_t *want = malloc((size + 1) * sizeof(int32_t)), *want_types = malloc((size + 1) * sizeof(int32_t));
    size_t cases = 0, ids_compared = 0, bad = 0;
    char *line = data;
    while (line < data + size) {
        char *nl = memchr(line, '\n', (size_t)(data + size - line));
        if (!nl) nl = data + size;
        char *f[5];
        size_t nf = 0;
        f[nf++] = line;
        for (char *p = line; p < nl && nf < 5; p++)
            if (*p == '\t') f[nf++] = p + 1;
#define FLEN(i) ((size_t)((i + 1 < (int)nf ? f[i + 1] - 1 : nl) - f[i]))
        int32_t *ids = NULL, *ids_b = NULL, *out = NULL, *types = NULL;
        size_t n = 0, n_b = 0, n_out = 0;
        if (nf == 2) {
            size_t len = hex_decode(f[0], FLEN(0), text);
            size_t m = parse_ids(f[1], FLEN(1), want);
            CHECK_OK(dl_tokenizer_encode(tok, text, len, &ids, &n, NULL));
            ids_compared += m;
            if (!same(ids, n, want, m)) {
                if (bad++ < 5) {
                    text[len] = 0;
                    fprintf(stderr, "%s: case %zu '%.80s': %zu ids, HF %zu\n", name, cases, text, n, m);
                    for (size_t i = 0; i < n && i < 30; i++) fprintf(stderr, "%d ", ids[i]);
                    fprintf(stderr, "\n");
                    for (size_t i = 0; i < m && i < 30; i++) fprintf(stderr, "%d ", want[i]);
                    fprintf(stderr, "\n");
                }
            }
        } else if (nf == 5 && f[0][0] == 'P') {
            size_t la = hex_decode(f[1], FLEN(1), text);
            char *tb = malloc(FLEN(2) / 2 + 1);
            size_t lb = hex_decode(f[2], FLEN(2), tb);
            size_t m = parse_ids(f[3], FLEN(3), want);
            size_t mt = parse_ids(f[4], FLEN(4), want_types);
            CHECK_OK(dl_tokenizer_encode(tok, text, la, &ids, &n, NULL));
            CHECK_OK(dl_tokenizer_encode(tok, tb, lb, &ids_b, &n_b, NULL));
            CHECK_OK(dl_tokenizer_post_process(tok, ids, n, ids_b, n_b, &out, &types, &n_out));
            ids_compared += m;
            if (!same(out, n_out, want, m) || !same(types, n_out, want_types, mt)) {
                if (bad++ < 5) fprintf(stderr, "%s: pair case %zu differs\n", name, cases);
            }
            free(tb);
        } else {
            CHECK_MSG(0, "%s: malformed fixture line %zu", name, cases);
        }
        free(ids);
        free(ids_b);
        free(out);
        free(types);
        cases++;
        line = nl + 1;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu cases differ from HF", name, bad, cases);
    CHECK(cases > 900);
    printf("%s: %zu cases, %zu ids compared, %zu differ\n", name, cases, ids_compared, bad);
    free(text);
    free(want);
    free(want_types);
    free(data);
}

int main(void) {
    static const char *files[] = {"tok_mixed_bytefb", "tok_bert_style", "tok_split_regex", "tok_spm_albert"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), FIXTURES "%s.json", files[i]);
        dl_tokenizer *tok;
        CHECK_OK(dl_tokenizer_load(path, &tok));
        if (!tok) continue;
        check_file(files[i], tok);
        dl_tokenizer_free(tok);
    }
    dl_tokenizer *demo;
    CHECK_OK(dl_tokenizer_load_demo(&demo));
    if (demo) {
        check_file("tokenizer_bn_demo", demo);
        dl_tokenizer_free(demo);
    }
    return dl_test_finish("test_tokenizer_fixtures");
}
