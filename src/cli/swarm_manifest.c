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
    a->train.local_steps = m->local_steps;
    a->train.outer_lr = m->outer_lr;
    a->train.outer_momentum = m->outer_momentum;
    a->train.outer_compression = m->outer_compression;
    char signer[CLI_SIGNER_TEXT];
    cli_manifest_signer(m, signer);
    DL_INFO("run", "manifest %s: run %s, manifest hash %.16s..., signed by %s", a->manifest_path, m->run_id,
            m->hash_hex, signer);
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

void cli_manifest_signer(const struct dl_manifest *m, char out[CLI_SIGNER_TEXT]) {
    /* An authority is its public key, as `authority init` prints it and
     * --run-key takes it; a peer is its peer id, as `authority issue --peer`
     * takes it. Never the one written as the other. */
    char pk[DL_AUTHORITY_PK_HEX];
    dl_authority_public_hex(m->authority, pk);
    if (m->has_authority) snprintf(out, CLI_SIGNER_TEXT, "the run authority %s", pk);
    else snprintf(out, CLI_SIGNER_TEXT, "peer %s", m->signer_peer_id);
}

/* The peer id of --identity FILE (created if absent, as the peer would),
 * or "" without one. */
static int identity_peer_id(const struct cli_swarm_args *a, char id[DL_PEER_ID_HEX]) {
    id[0] = 0;
    if (!a->net.identity_path || !*a->net.identity_path) return 0;
    uint8_t pk[DL_NET_PUBLIC_KEY], sk[64];
    int rc = dl_net_identity_keys(a->net.identity_path, pk, sk);
    sodium_memzero(sk, sizeof sk);
    if (!rc) dl_net_peer_id_from_key(pk, id);
    return rc;
}

int cli_swarm_check_token(struct cli_swarm_args *a, const char *cmd) {
    const struct dl_manifest *m = &a->manifest;
    if (!a->has_manifest || !m->has_authority) return 0;
    char id[DL_PEER_ID_HEX], pk[DL_AUTHORITY_PK_HEX];
    if (identity_peer_id(a, id)) {
        fprintf(stderr, "dedloc %s: %s\n", cmd, dl_error());
        return -1;
    }
    dl_authority_public_hex(m->authority, pk);
    const char *token = a->net.token_path;
    if (!token || !*token) {
        fprintf(stderr, "dedloc %s: run %s is closed: its peers admit only peers with a token from the run "
                "authority %s, and this peer has none (--token FILE).\n", cmd, m->run_id, pk);
        if (id[0])
            fprintf(stderr, "This peer's id is %s (--identity %s). Send it to the organiser, who runs\n"
                    "    dedloc authority issue --key run.key --peer %s > peer.token\n"
                    "and start again with --token peer.token.\n", id, a->net.identity_path, id);
        else
            fprintf(stderr, "A token is bound to a peer id: give this peer --identity FILE (created if absent) so\n"
                    "that its id stays the same. For a peer of your own, with the authority key:\n"
                    "    dedloc authority issue --key run.key --identity peer.id > peer.token\n"
                    "    dedloc %s --manifest %s --identity peer.id --token peer.token ...\n", cmd, a->manifest_path);
        fprintf(stderr, "A volunteer with an invite code joins with 'dedloc join HOST:PORT --invite CODE'.\n");
        return -1;
    }
    if (!id[0]) {
        fprintf(stderr, "dedloc %s: run %s is closed and a token admits one peer id: give the --identity FILE "
                "the token %s was issued for\n", cmd, m->run_id, token);
        return -1;
    }
    char *text = NULL;
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n;
    struct dl_token t;
    int rc = dl_read_file(token, 4096, &text, NULL);
    if (!rc) rc = dl_token_from_text(text, bin, &n);
    free(text);
    if (!rc) rc = dl_token_decode(bin, n, &t);
    if (!rc) rc = dl_token_check(&t, m->authority, m->run_id, id, dl_wall_time());
    if (rc) {
        fprintf(stderr, "dedloc %s: the token %s cannot admit this peer (%s) to run %s: %s\n", cmd, token, id,
                m->run_id, dl_error());
        return -1;
    }
    DL_INFO("run", "token %s admits peer %s as %s for %.1f more days%s", token, id, dl_role_name(t.role),
            ((double)t.expires - dl_wall_time()) / 86400, t.delegated ? " (issued through an invite)" : "");
    return 0;
}

int cli_swarm_load_invite(struct cli_swarm_args *a, const char *cmd) {
    const struct dl_manifest *m = &a->manifest;
    if (!a->invite_path) return 0;
    if (!a->has_manifest) {
        fprintf(stderr, "dedloc %s: --invite-file needs --manifest (an invite admits peers to the run a manifest "
                "describes)\n", cmd);
        return -1;
    }
    if (dl_invite_load(a->invite_path, &a->invite)) {
        fprintf(stderr, "dedloc %s: --invite-file: %s\n", cmd, dl_error());
        return -1;
    }
    if (!m->has_authority || memcmp(dl_invite_authority(a->invite), m->authority, DL_AUTHORITY_PK) ||
        strcmp(dl_invite_run_id(a->invite), m->run_id)) {
        fprintf(stderr, "dedloc %s: --invite-file %s is not an invite of this run (%s) and its authority\n", cmd,
                a->invite_path, m->run_id);
        dl_invite_free(a->invite);
        a->invite = NULL;
        return -1;
    }
    return 0;
}

void cli_swarm_args_free(struct cli_swarm_args *a) {
    dl_invite_free(a->invite);
    a->invite = NULL;
    dl_manifest_free(&a->manifest);
    free(a->tokenizer_bytes);
    a->tokenizer_bytes = NULL;
    a->has_manifest = false;
}
