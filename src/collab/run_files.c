/* Serving the run files: any peer started from a manifest answers requests
 * for the manifest and the tokenizer file, so a newcomer needs only one
 * address (`dedloc join`). Both are public (nothing secret is in them) and
 * bounded in size (DL_MANIFEST_MAX_BYTES, DL_MANIFEST_TOKENIZER_MAX). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/collab.h"
#include "dedloc/util.h"

struct dl_run_files {
    dl_net *net;
    char *manifest;
    size_t manifest_size;
    uint8_t *tokenizer;
    size_t tokenizer_size;
};

static void on_manifest(void *user, dl_net *net, const struct dl_net_incoming *in) {
    const struct dl_run_files *rf = user;
    dl_net_respond(net, in->token, DL_NET_OK, rf->manifest, rf->manifest_size);
}

static void on_tokenizer(void *user, dl_net *net, const struct dl_net_incoming *in) {
    const struct dl_run_files *rf = user;
    dl_net_respond(net, in->token, DL_NET_OK, rf->tokenizer, rf->tokenizer_size);
}

int dl_run_files_serve(dl_net *net, const struct dl_manifest *m, const void *tokenizer, size_t tokenizer_size,
                       dl_run_files **out) {
    *out = NULL;
    if (tokenizer_size > DL_MANIFEST_TOKENIZER_MAX || m->size > DL_MANIFEST_MAX_BYTES)
        return dl_fail("run files too large to serve");
    struct dl_run_files *rf = dl_calloc(1, sizeof *rf);
    if (!rf) return -1;
    rf->net = net;
    rf->manifest = dl_malloc(m->size + 1);
    rf->tokenizer = dl_malloc(tokenizer_size + 1);
    if (!rf->manifest || !rf->tokenizer) {
        dl_run_files_stop(rf);
        return -1;
    }
    memcpy(rf->manifest, m->text, m->size);
    rf->manifest_size = m->size;
    memcpy(rf->tokenizer, tokenizer, tokenizer_size);
    rf->tokenizer_size = tokenizer_size;
    if (dl_net_set_handler(net, DL_NET_METHOD_MANIFEST, on_manifest, rf) ||
        dl_net_set_handler(net, DL_NET_METHOD_TOKENIZER, on_tokenizer, rf)) {
        /* A handler may be registered: rf stays allocated until the net
         * stops (the caller's dl_run_files_stop after dl_net_stop). */
        *out = rf;
        return dl_fail_context("serving the run files");
    }
    *out = rf;
    return 0;
}

void dl_run_files_stop(dl_run_files *rf) {
    if (!rf) return;
    free(rf->manifest);
    free(rf->tokenizer);
    free(rf);
}
