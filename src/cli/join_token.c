/* The token of a volunteer joining a closed run: kept from an earlier join,
 * or got for an invite code from the peer that holds the invite
 * (docs/protocol.md, "Invites"); without either, what to ask the organiser. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/join_token.h"
#include "dedloc/util.h"

/* Whether the token in path admits peer_id to the run now (the reason in
 * dl_error() when not). */
static bool token_admits(const char *path, const struct dl_manifest *m, const char *peer_id) {
    char *text = NULL;
    uint8_t bin[DL_TOKEN_MAX_BYTES];
    size_t n;
    struct dl_token t;
    int rc = dl_read_file(path, 4096, &text, NULL);
    if (!rc) rc = dl_token_from_text(text, bin, &n);
    free(text);
    if (!rc) rc = dl_token_decode(bin, n, &t);
    if (!rc) rc = dl_token_check(&t, m->authority, m->run_id, peer_id, dl_wall_time());
    return rc == 0;
}

/* Redeems the invite over an authenticated fetch-only connection made with
 * our own identity: the token is bound to the peer id that connection proved. */
static int redeem(const struct cli_join_token *j, const struct dl_manifest *m, char token[DL_TOKEN_TEXT_MAX]) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = m->run_id;
    cfg.listen = "";
    cfg.client_mode = true;
    cfg.fetch_only = true;
    cfg.identity_path = j->identity_path;
    cfg.initial_peers = j->address;
    cfg.use_dht = j->dht != NULL;
    cfg.dht_bootstrap = j->dht;
    dl_net *net;
    if (dl_net_start(&cfg, &net)) return -1;
    char peer[DL_PEER_ID_HEX] = "";
    double deadline = dl_now() + j->timeout_s;
    while (!dl_net_connected_peer(net, peer) && dl_now() < deadline) usleep(50000);
    if (!peer[0]) {
        dl_net_stop(net);
        return dl_fail("no peer of the run answered within %.0f s to redeem the invite", j->timeout_s);
    }
    /* A peer rate-limits run-file requests per address: "busy" is asked
     * again after a pause while the deadline allows. */
    int rc;
    for (;;) {
        double left = deadline - dl_now();
        rc = dl_net_redeem_invite(net, peer, j->invite, left > 1 ? left : 1, token);
        if (!rc || !strstr(dl_error(), "refused the invite: busy:") || dl_now() + 2.5 >= deadline) break;
        DL_INFO("join", "%s: asking again in 2.5 s", dl_error());
        usleep(2500000);
    }
    dl_net_stop(net);
    return rc;
}

int cli_join_token(const struct cli_join_token *j, const struct dl_manifest *m, char path[4200]) {
    path[0] = 0;
    if (!m->has_authority) {
        if (j->invite) DL_WARN("join", "run %s is open: the invite code is not needed, ignored", m->run_id);
        return 0;
    }
    uint8_t pk[DL_NET_PUBLIC_KEY], sk[64];
    char id[DL_PEER_ID_HEX], auth[DL_AUTHORITY_PK_HEX];
    int bad = dl_net_identity_keys(j->identity_path, pk, sk);
    sodium_memzero(sk, sizeof sk);
    if (bad) return -1;
    dl_net_peer_id_from_key(pk, id);
    dl_authority_public_hex(m->authority, auth);
    snprintf(path, 4200, "%s/token", j->dir);
    if (dl_file_exists(path)) {
        if (token_admits(path, m, id)) {
            DL_INFO("join", "run %s is closed; the token kept in %s admits peer %s", m->run_id, path, id);
            return 0;
        }
        DL_WARN("join", "the token kept in %s no longer admits peer %s: %s", path, id, dl_error());
        dl_clear_error();
    }
    if (!j->invite) {
        const char *where = j->address ? j->address : "HOST:PORT";
        fprintf(stderr,
                "dedloc join: run %s is closed: its peers admit only peers with a token from the run authority %s.\n"
                "Your peer id is %s. Send it to the organiser of the run, who runs\n"
                "    dedloc authority issue --key run.key --peer %s > peer.token\n"
                "and join again with the file they send back:\n"
                "    dedloc join %s --token peer.token\n"
                "or, with an invite code from the organiser:\n"
                "    dedloc join %s --invite CODE\n",
                m->run_id, auth, id, id, where, where);
        path[0] = 0;
        return 1;
    }
    char token[DL_TOKEN_TEXT_MAX];
    DL_INFO("join", "run %s is closed: redeeming the invite for peer %s", m->run_id, id);
    if (redeem(j, m, token)) {
        path[0] = 0;
        return -1;
    }
    size_t n = strlen(token);
    token[n] = '\n'; /* the NUL becomes the file's final newline */
    int wrote = dl_write_file_atomic(path, token, n + 1);
    token[n] = 0;
    if (wrote || !token_admits(path, m, id)) {
        if (!wrote) unlink(path); /* a token that does not admit us is not kept */
        dl_fail_context("the token the invite gave (%s)", path);
        path[0] = 0;
        return -1;
    }
    DL_INFO("join", "got a token through the invite for peer %s, kept in %s", id, path);
    return 0;
}
