/* Serving the run files: any peer started from a manifest answers requests
 * for the manifest and the tokenizer file, so a newcomer needs only one
 * address (`dedloc join`). Both are public (nothing secret is in them) and
 * bounded in size (DL_MANIFEST_MAX_BYTES, DL_MANIFEST_TOKENIZER_MAX). They
 * are compressed once, here: a request costs a copy, never a compression
 * on the network thread (the network layer bounds how often one address
 * may ask). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/collab.h"
#include "dedloc/util.h"

struct dl_run_files {
    dl_net *net;
    dl_net_prepared *manifest, *tokenizer;
};

static void respond(dl_net *net, uint64_t token, const dl_net_prepared *file) {
    if (dl_net_respond_prepared(net, token, file)) {
        const char *why = "cannot send the run file";
        dl_net_respond(net, token, DL_NET_REMOTE_ERROR, why, strlen(why));
    }
}

static void on_manifest(void *user, dl_net *net, const struct dl_net_incoming *in) {
    const struct dl_run_files *rf = user;
    respond(net, in->token, rf->manifest);
}

static void on_tokenizer(void *user, dl_net *net, const struct dl_net_incoming *in) {
    const struct dl_run_files *rf = user;
    respond(net, in->token, rf->tokenizer);
}

int dl_run_files_serve(dl_net *net, const struct dl_manifest *m, const void *tokenizer, size_t tokenizer_size,
                       dl_run_files **out) {
    *out = NULL;
    if (tokenizer_size > DL_MANIFEST_TOKENIZER_MAX || m->size > DL_MANIFEST_MAX_BYTES)
        return dl_fail("run files too large to serve");
    struct dl_run_files *rf = dl_calloc(1, sizeof *rf);
    if (!rf) return -1;
    rf->net = net;
    if (dl_net_prepare(m->text, m->size, &rf->manifest) || dl_net_prepare(tokenizer, tokenizer_size, &rf->tokenizer)) {
        dl_run_files_stop(rf);
        return dl_fail_context("serving the run files");
    }
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
    dl_net_prepared_free(rf->manifest);
    dl_net_prepared_free(rf->tokenizer);
    free(rf);
}
