/* The pieces of the text pipeline one by one: UTF-8 decoding with
 * replacement, each normalizer, each pre-tokenizer and split behaviour.
 * Expected strings are what HF tokenizers 0.19.1 gives (normalize_str /
 * pre_tokenize_str on the same component). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "dl_test.h"
#include "text/text_internal.h"

static char *to_utf8(const uint32_t *cp, size_t n) {
    char *buf = NULL;
    size_t cap = 0, len;
    if (dl_utf8_encode(cp, n, &buf, &cap, &len)) return NULL;
    return buf;
}

static void check_normalizer(const char *json, const char *in, const char *want) {
    cJSON *j = cJSON_Parse(json);
    dl_normalizer n;
    CHECK_OK(dl_normalizer_parse(j, &n));
    dl_ustr s = {0}, tmp = {0};
    size_t bad = 0;
    CHECK_OK(dl_utf8_decode(in, strlen(in), &s, &bad));
    CHECK_OK(dl_normalizer_apply(&n, &s, &tmp));
    char *got = to_utf8(s.cp, s.len);
    CHECK_MSG(got && !strcmp(got, want), "%s on '%s': got '%s', want '%s'", json, in, got ? got : "(null)", want);
    free(got);
    dl_ustr_free(&s);
    dl_ustr_free(&tmp);
    dl_normalizer_free(&n);
    cJSON_Delete(j);
}

/* want: the pieces joined by '|' */
static void check_pretokenizer(const char *json, const char *in, const char *want) {
    cJSON *j = cJSON_Parse(json);
    dl_pretokenizer p;
    CHECK_OK(dl_pretokenizer_parse(j, &p));
    dl_pieces pieces = {0}, tmp = {0};
    dl_ustr s = {0};
    CHECK_OK(dl_utf8_decode(in, strlen(in), &s, NULL));
    CHECK_OK(dl_pieces_add(&pieces, s.cp, s.len, true));
    CHECK_OK(dl_pretokenizer_apply(&p, &pieces, &tmp));
    char joined[1024] = "";
    for (size_t i = 0; i < pieces.n; i++) {
        char *t = to_utf8(pieces.text.cp + pieces.pieces[i].start, pieces.pieces[i].end - pieces.pieces[i].start);
        if (i) strncat(joined, "|", sizeof(joined) - strlen(joined) - 1);
        strncat(joined, t, sizeof(joined) - strlen(joined) - 1);
        free(t);
    }
    CHECK_MSG(!strcmp(joined, want), "%s on '%s': got '%s', want '%s'", json, in, joined, want);
    dl_ustr_free(&s);
    dl_pieces_free(&pieces);
    dl_pieces_free(&tmp);
    dl_pretokenizer_free(&p);
    cJSON_Delete(j);
}

static void check_decode(const char *in, size_t len, const char *want, size_t want_bad) {
    dl_ustr s = {0};
    size_t bad = 0;
    CHECK_OK(dl_utf8_decode(in, len, &s, &bad));
    char *got = to_utf8(s.cp, s.len);
    CHECK_MSG(got && !strcmp(got, want) && bad == want_bad, "decode: got '%s' (%zu bad), want '%s' (%zu)", got, bad,
              want, want_bad);
    free(got);
    dl_ustr_free(&s);
}

#define FFFD "\xef\xbf\xbd"

static void test_utf8(void) {
    check_decode("abc", 3, "abc", 0);
    check_decode("\xf0\x9f\x98", 3, FFFD, 1);               /* truncated 4-byte sequence: one */
    check_decode("\xe0\x80\x80", 3, FFFD FFFD FFFD, 3);     /* overlong: each byte */
    check_decode("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 4); /* above U+10FFFF */
    check_decode("\xc2", 1, FFFD, 1);
    check_decode("ab\xe0\xa6\xae\xe0", 6, "ab\xe0\xa6\xae" FFFD, 1);
    check_decode("\xed\xa0\x80", 3, FFFD FFFD FFFD, 3);     /* surrogate */
    check_decode("a\0b", 3, "a", 0);                         /* NUL is a character (string ends here) */
}

static void test_normalizers(void) {
    check_normalizer("{\"type\":\"Nmt\"}", "a\x01" "b\tc\xe2\x80\x8b" "d\xe2\x96\x81" "e" FFFD, "ab c d e ");
    check_normalizer("{\"type\":\"NFKC\"}", "\xef\xac\x81\xe2\x91\xa0 \xef\xbd\x86 \xe0\xa7\x9f e\xcc\x81",
                     "fi1 f \xe0\xa6\xaf\xe0\xa6\xbc \xc3\xa9");
    check_normalizer("{\"type\":\"NFD\"}", "\xc3\xa9", "e\xcc\x81");
    check_normalizer("{\"type\":\"NFC\"}", "e\xcc\x81", "\xc3\xa9");
    check_normalizer("{\"type\":\"Lowercase\"}", "\xc4\xb0STANBUL \xce\xa3\xce\x91 Stra\xc3\x9f" "e",
                     "i\xcc\x87stanbul \xcf\x83\xce\xb1 stra\xc3\x9f" "e");
    check_normalizer("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", "  a b \t", "a b");
    check_normalizer("{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}", "  a ", "  a");
    check_normalizer("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}", "a   b  c d",
                     "a b c d");
    check_normalizer("{\"type\":\"Replace\",\"pattern\":{\"String\":\"|\"},\"content\":\"\xe0\xa5\xa4\"}", "a|b||",
                     "a\xe0\xa5\xa4" "b\xe0\xa5\xa4\xe0\xa5\xa4");
    /* ':' after a Bengali letter becomes the visarga; elsewhere it stays */
    check_normalizer("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(?<=[\\u0980-\\u09ff]):\"},\"content\":\"\xe0\xa6\x83\"}",
                     "\xe0\xa6\xa6\xe0\xa7\x81:\xe0\xa6\x96 a: \xe0\xa6\x95:",
                     "\xe0\xa6\xa6\xe0\xa7\x81\xe0\xa6\x83\xe0\xa6\x96 a: \xe0\xa6\x95\xe0\xa6\x83");
    check_normalizer("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"}]}",
                     "caf\xc3\xa9 \xe0\xa6\xac\xe0\xa6\xbe\xe0\xa6\x82\xe0\xa6\xb2\xe0\xa6\xbe",
                     "cafe \xe0\xa6\xac\xe0\xa6\xb2");
    check_normalizer("{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"}", "ab", "\xe2\x96\x81" "ab");
    check_normalizer("{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"}", "", "");
    check_normalizer("{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
                     "\"strip_accents\":null,\"lowercase\":true}",
                     "A\x01\tB\xe4\xb8\xad\xc3\xa9", "a b \xe4\xb8\xad e");
}

static void test_pretokenizers(void) {
    check_pretokenizer("{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true}",
                       "hello  world ", "\xe2\x96\x81hello|\xe2\x96\x81|\xe2\x96\x81world|\xe2\x96\x81");
    check_pretokenizer("{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"never\",\"split\":true}",
                       "a b", "a|\xe2\x96\x81" "b");
    check_pretokenizer("{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"add_prefix_space\":false}", "a b",
                       "a|\xe2\x96\x81" "b");
    check_pretokenizer("{\"type\":\"Digits\",\"individual_digits\":true}", "ab12\xe0\xa7\xa9\xe0\xa7\xaa" "c",
                       "ab|1|2|\xe0\xa7\xa9|\xe0\xa7\xaa|c");
    check_pretokenizer("{\"type\":\"Digits\",\"individual_digits\":false}", "ab12\xe0\xa7\xa9\xe0\xa7\xaa" "c",
                       "ab|12\xe0\xa7\xa9\xe0\xa7\xaa|c");
    check_pretokenizer("{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"}", "a,b...c!", "a|,|b|.|.|.|c|!");
    check_pretokenizer("{\"type\":\"Punctuation\",\"behavior\":\"MergedWithPrevious\"}", "a,b...c!", "a,|b.|.|.|c!");
    check_pretokenizer("{\"type\":\"Punctuation\",\"behavior\":\"MergedWithNext\"}", "a,b...c!", "a|,b|.|.|.c|!");
    check_pretokenizer("{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"}", "a,b...c!", "a|,|b|...|c|!");
    check_pretokenizer("{\"type\":\"Punctuation\",\"behavior\":\"Removed\"}", "a,b...c!", "a|b|c");
    check_pretokenizer("{\"type\":\"WhitespaceSplit\"}", " a  b\tc ", "a|b|c");
    check_pretokenizer("{\"type\":\"Whitespace\"}", "\xe0\xa6\x86\xe0\xa6\xae\xe0\xa6\xbf, hello!! x_y",
                       "\xe0\xa6\x86\xe0\xa6\xae\xe0\xa6\xbf|,|hello|!!|x_y");
    check_pretokenizer("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\d+\"},\"behavior\":\"Isolated\",\"invert\":false}",
                       "ab12cd345", "ab|12|cd|345");
    check_pretokenizer("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\d+\"},\"behavior\":\"Removed\",\"invert\":true}",
                       "ab12cd345", "12|345");
}

static void test_bad_components(void) {
    const char *bad[] = {
        "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"\"}",
        "{\"type\":\"Replace\",\"pattern\":{},\"content\":\"\"}",
        "{\"type\":\"Sequence\",\"normalizers\":5}",
        "{\"normalizers\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        dl_normalizer n;
        CHECK_MSG(dl_normalizer_parse(j, &n) == -1, "accepted %s", bad[i]);
        dl_normalizer_free(&n);
        cJSON_Delete(j);
    }
    cJSON *j = cJSON_Parse("{\"type\":\"Metaspace\",\"replacement\":\"ab\"}");
    dl_pretokenizer p;
    CHECK(dl_pretokenizer_parse(j, &p) == -1);
    dl_pretokenizer_free(&p);
    cJSON_Delete(j);
}

int main(void) {
    test_utf8();
    test_normalizers();
    test_pretokenizers();
    test_bad_components();
    return dl_test_finish("test_text_units");
}
