/* Metaspace prepend_scheme "first": which pieces count as the start of the
 * original text after normalizers and added tokens moved things (expected ids
 * from HF tokenizers 0.19.1 on these small tokenizer files). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/text.h"
#include "dedloc/util.h"
#include "dl_test.h"

static const char *texts[] = {"a b", "  a b", "``a b", "`a b", "x [MASK]a", "[MASK] a b"};

struct origin_case {
    const char *what;
    const char *json;
    int32_t ids[6][8];
    size_t n[6];
};

static const struct origin_case cases[] = {
    {"Prepend(' ') then WhitespaceSplit: the prepended space and 'a' both align with the start",
     "{\"added_tokens\":[{\"id\":12,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"Prepend\",\"prepend\":\" \"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Metaspace\",\"replacement\":\"\xe2""\x96""\x81""\",\"prepend_scheme\":\"first\",\"split\":true}]},\"post_processor\":null,\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"\xe2""\x96""\x81""\",-2.0],[\"a\",-3.0],[\"b\",-3.0],[\"\xe2""\x96""\x81""a\",-2.5],[\"\xe2""\x96""\x81""b\",-2.5],[\"#\",-4.0],[\"\xe2""\x96""\x81""#\",-3.5],[\"\\\"\",-3.0],[\"\xe2""\x96""\x81""\\\"\",-2.9],[\"x\",-3.0],[\"\xe2""\x96""\x81""x\",-2.8]],\"byte_fallback\":false}}",
     {{4, 3}, {2, 3}, {1, 0, 2, 3}, {1, 0, 2, 3}, {11, 12, 2}, {12, 2, 3}},
     {2, 2, 4, 4, 3, 3}},
    {"a two-char match replaced at the start takes its last char's alignment",
     "{\"added_tokens\":[{\"id\":12,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"``\"},\"content\":\"\\\"\"},\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2""\x96""\x81""\",\"prepend_scheme\":\"first\",\"split\":true},\"post_processor\":null,\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"\xe2""\x96""\x81""\",-2.0],[\"a\",-3.0],[\"b\",-3.0],[\"\xe2""\x96""\x81""a\",-2.5],[\"\xe2""\x96""\x81""b\",-2.5],[\"#\",-4.0],[\"\xe2""\x96""\x81""#\",-3.5],[\"\\\"\",-3.0],[\"\xe2""\x96""\x81""\\\"\",-2.9],[\"x\",-3.0],[\"\xe2""\x96""\x81""x\",-2.8]],\"byte_fallback\":false}}",
     {{4, 5}, {1, 4, 5}, {8, 2, 5}, {1, 0, 2, 5}, {11, 1, 12, 2}, {12, 4, 5}},
     {2, 3, 3, 4, 4, 3}},
    {"a one-char match replaced at the start stays at the start",
     "{\"added_tokens\":[{\"id\":12,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"`\"},\"content\":\"\\\"\"},\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2""\x96""\x81""\",\"prepend_scheme\":\"first\",\"split\":true},\"post_processor\":null,\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"\xe2""\x96""\x81""\",-2.0],[\"a\",-3.0],[\"b\",-3.0],[\"\xe2""\x96""\x81""a\",-2.5],[\"\xe2""\x96""\x81""b\",-2.5],[\"#\",-4.0],[\"\xe2""\x96""\x81""#\",-3.5],[\"\\\"\",-3.0],[\"\xe2""\x96""\x81""\\\"\",-2.9],[\"x\",-3.0],[\"\xe2""\x96""\x81""x\",-2.8]],\"byte_fallback\":false}}",
     {{4, 5}, {1, 4, 5}, {9, 8, 2, 5}, {9, 2, 5}, {11, 1, 12, 2}, {12, 4, 5}},
     {2, 3, 4, 3, 4, 3}},
    {"Strip moves the start past the removed spaces",
     "{\"added_tokens\":[{\"id\":12,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Metaspace\",\"replacement\":\"\xe2""\x96""\x81""\",\"prepend_scheme\":\"first\",\"split\":true}]},\"post_processor\":null,\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"\xe2""\x96""\x81""\",-2.0],[\"a\",-3.0],[\"b\",-3.0],[\"\xe2""\x96""\x81""a\",-2.5],[\"\xe2""\x96""\x81""b\",-2.5],[\"#\",-4.0],[\"\xe2""\x96""\x81""#\",-3.5],[\"\\\"\",-3.0],[\"\xe2""\x96""\x81""\\\"\",-2.9],[\"x\",-3.0],[\"\xe2""\x96""\x81""x\",-2.8]],\"byte_fallback\":false}}",
     {{4, 3}, {2, 3}, {1, 0, 2, 3}, {1, 0, 2, 3}, {11, 12, 2}, {12, 2, 3}},
     {2, 2, 4, 4, 3, 3}},
};

int main(void) {
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        dl_tokenizer *tok;
        CHECK_OK(dl_tokenizer_load_json(cases[c].json, strlen(cases[c].json), &tok));
        if (!tok) continue;
        for (size_t t = 0; t < 6; t++) {
            int32_t *ids;
            size_t n;
            CHECK_OK(dl_tokenizer_encode(tok, texts[t], strlen(texts[t]), &ids, &n, NULL));
            bool same = n == cases[c].n[t] && (n == 0 || !memcmp(ids, cases[c].ids[t], n * sizeof(int32_t)));
            CHECK_MSG(same, "%s: text '%s'", cases[c].what, texts[t]);
            free(ids);
        }
        dl_tokenizer_free(tok);
    }
    return dl_test_finish("test_tokenizer_origin");
}
