/* --manifest for the swarm commands: the run's settings come from a signed
 * manifest (docs/manifest.md), and the tokenizer file beside it is checked
 * against the hash the manifest holds before anything trains on it. */
#include <libgen.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/swarm_args.h"
#include "dedloc/util.h"

/* Where the tokenizer is: the option, the manifest's path, or beside the manifest. */
static int find_tokenizer(struct cli_swarm_args *a, const char *given) {
    const struct dl_manifest *m = &a->manifest;
    if (given) {
        snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "%s", given);
        return 0;
    }
    if (dl_file_exists(m->tokenizer_file)) {
        snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "%s", m->tokenizer_file);
        return 0;
    }
    char dir[4096], name[256];
    snprintf(dir, sizeof dir, "%s", a->manifest_path);
    snprintf(name, sizeof name, "%s", m->tokenizer_file);
    int n = snprintf(a->tokenizer_path, sizeof a->tokenizer_path, "%s/%s", dirname(dir), basename(name));
    if (n < 0 || (size_t)n >= sizeof a->tokenizer_path || !dl_file_exists(a->tokenizer_path))
        return dl_fail("the manifest's tokenizer %s is neither there nor beside the manifest; pass --tokenizer FILE",
                       m->tokenizer_file);
    return 0;
}

int cli_swarm_load_manifest(struct cli_swarm_args *a, const char *tokenizer_path, const char *cmd) {
    if (a->run_option_given) {
        fprintf(stderr, "dedloc %s: --%s is a run setting: with --manifest it comes from the manifest\n", cmd,
                a->run_option_given);
        return -1;
    }
    struct dl_manifest *m = &a->manifest;
    if (dl_manifest_load(a->manifest_path, m)) goto fail;
    a->has_manifest = true;
    if (find_tokenizer(a, tokenizer_path)) goto fail;
    if (dl_read_file(a->tokenizer_path, DL_MANIFEST_TOKENIZER_MAX, &a->tokenizer_bytes, &a->tokenizer_size)) goto fail;
    uint8_t h[32];
    crypto_generichash(h, sizeof h, (const uint8_t *)a->tokenizer_bytes, a->tokenizer_size, NULL, 0);
    if (memcmp(h, m->tokenizer_hash, sizeof h) || a->tokenizer_size != m->tokenizer_size) {
        dl_fail("%s is not the manifest's tokenizer (its BLAKE2b-256 or size differs)", a->tokenizer_path);
        goto fail;
    }
    a->any = true;
    a->net.run_id = m->run_id;
    a->net.manifest_hash = m->hash;
    if (m->has_authority) {
        dl_authority_public_hex(m->authority, a->run_key_hex);
        a->net.run_key = a->run_key_hex;
    }
    a->train.compression = m->compression;
    a->train.aggregation = m->aggregation;
    a->train.clip_tau = m->clip_tau;
    a->train.clip_iterations = m->clip_iterations;
    a->collab.clip_ban_rounds = m->clip_ban_rounds;
    DL_INFO("run", "manifest %s: run %s, manifest hash %.16s..., signed by %s %s", a->manifest_path, m->run_id,
            m->hash_hex, m->has_authority ? "the run authority" : "peer", m->signer_peer_id);
    return 0;
fail:
    fprintf(stderr, "dedloc %s: %s\n", cmd, dl_error());
    return -1;
}

bool cli_data_is_url(const char *source) {
    const char *colon = strchr(source, ':');
    if (colon && strncmp(colon, "://", 3) != 0) source = colon + 1;
    return strncmp(source, "http://", 7) == 0 || strncmp(source, "https://", 8) == 0;
}

void cli_swarm_args_free(struct cli_swarm_args *a) {
    dl_manifest_free(&a->manifest);
    free(a->tokenizer_bytes);
    a->tokenizer_bytes = NULL;
    a->has_manifest = false;
}
