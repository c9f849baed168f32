/* Helper of scripts/make_unicode_compat.py: prints, for every code point, the
 * character classes and normalization forms of src/text together with the
 * current compatibility flips. Built by that script against build/libdedloc.a. */
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "text/text_internal.h"

int main(void) {
    enum dl_norm_kind kinds[4] = {DL_NORM_NFC, DL_NORM_NFD, DL_NORM_NFKC, DL_NORM_NFKD};
    dl_ustr s = {0}, tmp = {0};
    for (uint32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        printf("%x %d %d%d%d%d %d%d%d%d%d%d", c, utf8proc_get_property((utf8proc_int32_t)c)->combining_class, dl_uc_is_punctuation(c), dl_uc_is_mark(c), dl_uc_is_nonspacing_mark(c),
               dl_uc_is_control(c), dl_uc_compat(DL_UC_PUNCT, c), dl_uc_compat(DL_UC_MARK, c),
               dl_uc_compat(DL_UC_NONSPACING, c), dl_uc_compat(DL_UC_CONTROL, c),
               dl_uc_compat(DL_UC_NORM_UNCHANGED, c), dl_uc_compat(DL_UC_CCC_ZERO, c));
        for (int k = 0; k < 4; k++) {
            dl_normalizer n;
            memset(&n, 0, sizeof(n));
            n.kind = kinds[k];
            s.len = 0;
            if (dl_ustr_push(&s, c) || dl_normalizer_apply(&n, &s, &tmp)) return 1;
            putchar(' ');
            for (size_t i = 0; i < s.len; i++) printf("%s%x", i ? "," : "", s.cp[i]);
        }
        putchar('\n');
    }
    dl_ustr_free(&s);
    dl_ustr_free(&tmp);
    return 0;
}
