/* Patterns as tokenizer.json writes them (Oniguruma syntax) and what they
 * match: \w and \W take Unicode's word characters, combining marks included
 * (so a Bengali word with vowel signs is one word, where PCRE2's own \w would
 * cut it at every sign), inside and outside brackets; \uHHHH in either case
 * of hex; literal strings match without overlap; patterns that do not
 * compile or are not patterns fail with a message naming where they came
 * from. Expected spans are code point offsets worked out by hand. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "dl_test.h"
#include "text/text_internal.h"

typedef struct spans {
    size_t start[16], end[16];
    int n;
} spans;

static int collect(void *ctx, size_t start, size_t end) {
    spans *s = ctx;
    if (s->n < 16) {
        s->start[s->n] = start;
        s->end[s->n] = end;
    }
    s->n++;
    return 0;
}

static int stop_at_first(void *ctx, size_t start, size_t end) {
    (void)ctx, (void)start, (void)end;
    return 1;
}

/* Parses json as a pattern, runs it over text; spans "a-b a-b ...", or
 * "error: <message>" when parsing fails. */
static void run(const char *json, const char *text, char *out, size_t cap) {
    cJSON *j = cJSON_Parse(json);
    dl_pattern p;
    if (!j || dl_pattern_parse(j, &p, "test pattern")) {
        snprintf(out, cap, "error: %s", j ? dl_error() : "bad JSON in the test");
        cJSON_Delete(j);
        return;
    }
    cJSON_Delete(j);
    uint32_t *cps = NULL;
    size_t n = 0;
    spans s = {0};
    out[0] = 0;
    if (dl_utf8_to_cps(text, &cps, &n) || dl_pattern_find(&p, cps, n, collect, &s)) {
        snprintf(out, cap, "error: %s", dl_error());
    } else {
        size_t used = 0;
        for (int i = 0; i < s.n && i < 16 && used < cap; i++)
            used += (size_t)snprintf(out + used, cap - used, "%s%zu-%zu", i ? " " : "", s.start[i],
                                     s.end[i]);
    }
    free(cps);
    dl_pattern_free(&p);
}

#define EXPECT(json, text, want)                                                         \
    do {                                                                                 \
        char got_[512];                                                                  \
        run(json, text, got_, sizeof got_);                                              \
        CHECK_MSG(!strcmp(got_, want), "%s on '%s': got '%s', expected '%s'", json, text, \
                  got_, want);                                                           \
    } while (0)

/* "কিছু ভালো" : KA, VOWEL SIGN I (a mark), CHA, VOWEL SIGN U, space, BHA, AA SIGN,
 * LA, O SIGN: two words of four code points */
#define BN "\xe0\xa6\x95\xe0\xa6\xbf\xe0\xa6\x9b\xe0\xa7\x81 \xe0\xa6\xad\xe0\xa6\xbe\xe0\xa6\xb2\xe0\xa7\x8b"

static void test_word_classes(void) {
    EXPECT("{\"Regex\": \"\\\\w+\"}", BN, "0-4 5-9");
    EXPECT("{\"Regex\": \"\\\\W+\"}", BN, "4-5");
    EXPECT("{\"Regex\": \"\\\\w+\"}", "it's 42_x", "0-2 3-4 5-9");
    /* \w inside brackets keeps the class open for the other members */
    EXPECT("{\"Regex\": \"[\\\\w']+\"}", "it's " BN, "0-4 5-9 10-14");
    EXPECT("{\"Regex\": \"[^\\\\w\\\\s]+\"}", "a, b!? " BN "।", "1-2 4-6 16-17");
    /* a leading ] inside brackets is a literal ] */
    EXPECT("{\"Regex\": \"[]a]+\"}", "x]a]y", "1-4");
    /* \W outside brackets: everything but word characters */
    EXPECT("{\"Regex\": \"\\\\W\"}", "a-b", "1-2");
    /* other escapes pass through untouched */
    EXPECT("{\"Regex\": \"\\\\d+\\\\.\\\\d+\"}", "v 3.14 and 2", "2-6");
}

static void test_unicode_escapes(void) {
    /* \u00e9 and \u00E9 are both e-acute; \u0980-\u09ff is the Bengali block */
    EXPECT("{\"Regex\": \"\\\\u00e9\"}", "caf\xc3\xa9 \xc3\xa9", "3-4 5-6");
    EXPECT("{\"Regex\": \"\\\\u00E9+\"}", "\xc3\xa9\xc3\xa9x", "0-2");
    EXPECT("{\"Regex\": \"[\\\\u0980-\\\\u09ff]+\"}", "ab " BN, "3-7 8-12");
    /* too few hex digits: not an escape Oniguruma or PCRE2 reads */
    char got[512];
    run("{\"Regex\": \"\\\\u12\"}", "x", got, sizeof got);
    CHECK_MSG(strstr(got, "error: test pattern: regex '\\u12' does not compile at offset"), "%s",
              got);
}

static void test_literals(void) {
    EXPECT("{\"String\": \"aa\"}", "aaaaa", "0-2 2-4"); /* no overlap */
    EXPECT("{\"String\": \"\xe0\xa5\xa4\"}", BN "\xe0\xa5\xa4" BN "\xe0\xa5\xa4", "9-10 19-20");
    EXPECT("{\"String\": \"\"}", "abc", "");          /* an empty literal matches nothing */
    EXPECT("{\"String\": \"abcd\"}", "abc", "");      /* longer than the text */
    EXPECT("{\"Regex\": \"x*\"}", "abc", "");         /* only empty matches: no pieces */
    EXPECT("{\"Regex\": \"b*\"}", "abbc", "1-3");
    EXPECT("{\"Regex\": \"a\"}", "", "");
}

static void test_bad_patterns(void) {
    char got[512];
    static const char *not_patterns[] = {"{}", "{\"Regex\": 5}", "{\"String\": null}",
                                         "{\"regex\": \"a\"}", "[\"a\"]"};
    for (size_t i = 0; i < sizeof not_patterns / sizeof *not_patterns; i++) {
        run(not_patterns[i], "a", got, sizeof got);
        CHECK_MSG(strstr(got, "error: test pattern: pattern must be {\"String\": ...} or"), "%s: %s",
                  not_patterns[i], got);
    }
    static const char *broken[] = {"(", "[a-", "a{2,1}", "(?<name>a)(?<name>b)", "a\\"};
    for (size_t i = 0; i < sizeof broken / sizeof *broken; i++) {
        char json[128];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "Regex", broken[i]);
        char *text = cJSON_PrintUnformatted(j);
        snprintf(json, sizeof json, "%s", text ? text : "");
        free(text);
        cJSON_Delete(j);
        run(json, "a", got, sizeof got);
        CHECK_MSG(strstr(got, "error: test pattern: regex '") && strstr(got, "does not compile"),
                  "%s: %s", broken[i], got);
    }
    /* a callback that stops the search: -1, and no more calls */
    cJSON *j = cJSON_Parse("{\"Regex\": \"a\"}");
    dl_pattern p;
    CHECK_OK(dl_pattern_parse(j, &p, "stop"));
    const uint32_t aaa[] = {'a', 'a', 'a'};
    CHECK(dl_pattern_find(&p, aaa, 3, stop_at_first, NULL) == -1);
    dl_pattern_free(&p);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"String\": \"a\"}");
    CHECK_OK(dl_pattern_parse(j, &p, "stop"));
    CHECK(dl_pattern_find(&p, aaa, 3, stop_at_first, NULL) == -1);
    dl_pattern_free(&p);
    cJSON_Delete(j);
}

int main(void) {
    test_word_classes();
    test_unicode_escapes();
    test_literals();
    test_bad_patterns();
    return dl_test_finish("test_text_patterns");
}
