/* The demo tokenizer: known ids (from HF tokenizers 0.19.1), the template,
 * vocabulary queries and invalid UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/text.h"
#include "dedloc/util.h"
#include "dl_test.h"

static int ids_equal(const int32_t *got, size_t n, const int32_t *want, size_t m) {
    return n == m && (n == 0 || !memcmp(got, want, n * sizeof(int32_t)));
}

static void test_known_sentence(const dl_tokenizer *tok) {
    /* HF: Tokenizer.from_file("assets/tokenizer_bn_demo.json").encode(text, add_special_tokens=False) */
    const char *text = "আমি বাংলায় গান গাই। Hello, World! 123 ৪৫৬";
    static const int32_t want[] = {3790, 2927, 32, 5, 2108, 5, 1154, 41, 6, 5, 2262, 938, 14,
                                   5, 2233, 1680, 419, 5, 147, 392, 616, 5, 407, 378, 780};
    int32_t *ids;
    size_t n, bad = 0;
    CHECK_OK(dl_tokenizer_encode(tok, text, strlen(text), &ids, &n, &bad));
    CHECK(ids_equal(ids, n, want, sizeof(want) / sizeof(want[0])));
    CHECK(bad == 0);
    free(ids);
}

static void test_template(const dl_tokenizer *tok) {
    int32_t a[] = {10, 11}, b[] = {12};
    int32_t *ids, *types;
    size_t n;
    int32_t cls = dl_tokenizer_token_to_id(tok, "[CLS]"), sep = dl_tokenizer_token_to_id(tok, "[SEP]");
    CHECK(cls == 2 && sep == 3);
    CHECK_OK(dl_tokenizer_post_process(tok, a, 2, b, 1, &ids, &types, &n));
    int32_t want[] = {cls, 10, 11, sep, 12, sep}, want_types[] = {0, 0, 0, 0, 1, 1};
    CHECK(ids_equal(ids, n, want, 6));
    CHECK(ids_equal(types, n, want_types, 6));
    free(ids);
    free(types);
    CHECK_OK(dl_tokenizer_post_process(tok, a, 2, NULL, 0, &ids, &types, &n));
    int32_t want1[] = {cls, 10, 11, sep};
    CHECK(ids_equal(ids, n, want1, 4));
    free(ids);
    free(types);
}

static void test_vocab(const dl_tokenizer *tok) {
    CHECK(dl_tokenizer_vocab_size(tok) == 8000);
    CHECK(dl_tokenizer_is_special(tok, dl_tokenizer_token_to_id(tok, "[MASK]")));
    CHECK(!dl_tokenizer_is_special(tok, 3790));
    CHECK(dl_tokenizer_starts_word(tok, 3790)); /* "▁আমি" */
    CHECK(!dl_tokenizer_starts_word(tok, 32));  /* "য়" */
    CHECK(strcmp(dl_tokenizer_id_to_token(tok, 3790), "\xe2\x96\x81\xe0\xa6\x86\xe0\xa6\xae\xe0\xa6\xbf") == 0);
    CHECK(dl_tokenizer_id_to_token(tok, 8000) == NULL);
    CHECK(dl_tokenizer_id_to_token(tok, -1) == NULL);
    CHECK(dl_tokenizer_token_to_id(tok, "no such piece") == -1);
}

static void test_special_tokens_in_text(const dl_tokenizer *tok) {
    const char *text = "[CLS]আমি[MASK] [SEP]";
    int32_t *ids;
    size_t n;
    CHECK_OK(dl_tokenizer_encode(tok, text, strlen(text), &ids, &n, NULL));
    CHECK(n >= 4 && ids[0] == 2 && ids[n - 1] == 3);
    bool has_mask = false;
    for (size_t i = 0; i < n; i++) has_mask |= ids[i] == 4;
    CHECK(has_mask);
    free(ids);
}

static void test_invalid_utf8(const dl_tokenizer *tok) {
    /* truncated 3-byte sequence, lone continuation, overlong, surrogate, 0xFF */
    const char text[] = "a\xe0\xa6 b\x80 c\xc0\xaf d\xed\xa0\x80 e\xff";
    int32_t *ids;
    size_t n, bad = 0;
    CHECK_OK(dl_tokenizer_encode(tok, text, sizeof(text) - 1, &ids, &n, &bad));
    CHECK(bad == 1 + 1 + 2 + 3 + 1); /* maximal subparts, as Python's errors="replace" */
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < 8000);
    free(ids);
    CHECK_OK(dl_tokenizer_encode(tok, "", 0, &ids, &n, NULL));
    CHECK(n == 0);
    free(ids);
}

static void test_bad_files(void) {
    dl_tokenizer *tok;
    CHECK(dl_tokenizer_load_json("{", 1, &tok) == -1 && tok == NULL);
    const char *bpe = "{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}";
    CHECK(dl_tokenizer_load_json(bpe, strlen(bpe), &tok) == -1);
    CHECK(strstr(dl_error(), "BPE") != NULL);
    const char *badnorm = "{\"normalizer\":{\"type\":\"Fancy\"},\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}";
    CHECK(dl_tokenizer_load_json(badnorm, strlen(badnorm), &tok) == -1);
    CHECK(strstr(dl_error(), "Fancy") != NULL);
    CHECK(dl_tokenizer_load("/nonexistent/tokenizer.json", &tok) == -1);
}

int main(void) {
    dl_tokenizer *tok = NULL;
    CHECK_OK(dl_tokenizer_load_demo(&tok));
    if (!tok) return dl_test_finish("test_tokenizer_basic");
    test_known_sentence(tok);
    test_template(tok);
    test_vocab(tok);
    test_special_tokens_in_text(tok);
    test_invalid_utf8(tok);
    test_bad_files();
    dl_tokenizer_free(tok);
    return dl_test_finish("test_tokenizer_basic");
}
