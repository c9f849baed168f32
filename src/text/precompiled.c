/* The Precompiled normalizer (a SentencePiece charsmap, used by tokenizers
 * converted from SentencePiece models such as albert-base-v2). */
#include <stdlib.h>

#include "dedloc/util.h"
#include "text/text_internal.h"

struct dl_precompiled {
    int unused;
};

int dl_precompiled_parse(const char *base64, struct dl_precompiled **out) {
    (void)base64;
    *out = NULL;
    return dl_fail("normalizer 'Precompiled' (SentencePiece charsmap) is not supported yet");
}

void dl_precompiled_free(struct dl_precompiled *p) { free(p); }

int dl_precompiled_apply(const struct dl_precompiled *p, dl_ustr *s, dl_ustr *tmp) {
    (void)p;
    (void)s;
    (void)tmp;
    return dl_fail("normalizer 'Precompiled' is not supported yet");
}
