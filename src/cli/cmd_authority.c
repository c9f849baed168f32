/* dedloc authority: the run authority that decides who may join a
 * collaboration. init makes its key, issue signs a token for one peer id,
 * revoke adds a peer id to the signed revocation list. */
#include <getopt.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/net.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc authority init --run-id ID --out FILE\n"
            "       dedloc authority issue --key FILE (--peer PEER_ID | --identity FILE) [--expires 30d] [--role ROLE]\n"
            "                              [--name NAME]\n"
            "       dedloc authority invite --key FILE --out INVITE_FILE [--uses N] [--expires 7d] [--valid 30d]\n"
            "                               [--role ROLE]\n"
            "       dedloc authority revoke --key FILE --peer PEER_ID --out LIST\n"
            "       dedloc authority show --key FILE\n\n"
            "A run authority decides who may join the collaboration. Peers started with\n"
            "--run-key PUBKEY admit only peers presenting a token signed by it.\n\n"
            "  init     creates the authority key (mode 0600, never overwritten) and prints its\n"
            "           public key: pass it to every peer as --run-key\n"
            "  issue    prints a token for PEER_ID (the peer id a peer logs, and that train or join\n"
            "           print when a closed run refuses them); the peer passes the file as --token\n"
            "             --expires D   validity: N followed by s, m, h or d (default 30d)\n"
            "             --role ROLE   trainer (default), aux, or monitor (never sends gradients)\n"
            "             --name NAME   a label for people (at most 63 bytes)\n"
            "             --identity F  the peer id of this identity file (created if absent), for\n"
            "                           a peer of your own\n"
            "  invite   writes INVITE_FILE (mode 0600) and prints a code: a peer that runs\n"
            "           'dedloc join HOST:PORT --invite CODE' gets a token for its own peer id from\n"
            "           the peer HOST:PORT, started with --invite-file INVITE_FILE. The file holds a\n"
            "           key that the authority lets sign such tokens, never the authority's key;\n"
            "           keep it secret all the same (docs/protocol.md, \"Invites\")\n"
            "             --uses N      peers it admits (default 1; one that redeemed it may again)\n"
            "             --expires D   how long the code may be redeemed (default 7d)\n"
            "             --valid D     how long each token it gives stays valid (default 30d)\n"
            "             --role ROLE   the role of its tokens (default trainer)\n"
"  revoke   adds PEER_ID to the signed revocation list LIST (created if absent);\n"
            "           peers started with --revoked LIST re-read it when it changes and\n"
            "           disconnect revoked peers\n"
            "  show     prints the run id and public key of an authority file\n");
}

/* "30d", "12h", "90m", "45s" or plain seconds. */
static int parse_duration(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    double unit = 1;
    if (*end == 'd') unit = 86400, end++;
    else if (*end == 'h') unit = 3600, end++;
    else if (*end == 'm') unit = 60, end++;
    else if (*end == 's') end++;
    if (end == s || *end || !(v > 0) || v * unit > 100.0 * 365 * 86400) return -1;
    *out = v * unit;
    return 0;
}

static int fail(const char *what) {
    fprintf(stderr, "dedloc authority %s: %s\n", what, dl_error());
    return DL_EXIT_FAILURE;
}

/* authority invite: the code on stdout (all a script needs), what to do with
 * it on stderr. */
static int make_invite(const char *key, const char *out, const char *role_name, uint32_t uses, double expires_s,
                       double valid_s) {
    if (!out) {
        fprintf(stderr, "dedloc authority invite: --out INVITE_FILE is required (the file the inviting peer holds)\n");
        return DL_EXIT_USAGE;
    }
    enum dl_role role;
    if (dl_role_from_name(role_name, &role)) return fail("invite");
    struct dl_authority a;
    if (dl_authority_load(key, &a)) return fail("invite");
    char code[DL_INVITE_CODE_MAX];
    int bad = dl_invite_create(&a, out, role, uses, expires_s, valid_s, code);
    dl_authority_clear(&a);
    if (bad) return fail("invite");
    printf("%s\n", code);
    fprintf(stderr,
            "wrote invite %s: %u peer%s may join as %s with the code above within %.3g days; their tokens are valid\n"
            "%.3g days. Start the peer volunteers dial with --invite-file %s (it needs no authority key); a\n"
            "volunteer then runs\n"
            "    dedloc join HOST:PORT --invite %s\n",
            out, (unsigned)uses, uses == 1 ? "" : "s", role_name, expires_s / 86400, valid_s / 86400, out, code);
    return DL_EXIT_OK;
}

int cmd_authority(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? DL_EXIT_USAGE : DL_EXIT_OK;
    }
    const char *action = argv[1];
    const char *run_id = NULL, *out = NULL, *key = NULL, *peer = NULL, *name = "", *role_name = "trainer";
    const char *identity = NULL;
    bool invite = !strcmp(action, "invite");
    double expires_s = invite ? 7 * 86400 : 30 * 86400, valid_s = 30 * 86400, uses = 1;
    char identity_peer[DL_PEER_ID_HEX];
    enum { O_RUN = 256, O_OUT, O_KEY, O_PEER, O_EXPIRES, O_ROLE, O_NAME, O_IDENTITY, O_USES, O_VALID };
    static const struct option opts[] = {
        {"run-id", required_argument, NULL, O_RUN}, {"out", required_argument, NULL, O_OUT},
        {"key", required_argument, NULL, O_KEY}, {"peer", required_argument, NULL, O_PEER},
        {"expires", required_argument, NULL, O_EXPIRES}, {"role", required_argument, NULL, O_ROLE},
        {"name", required_argument, NULL, O_NAME}, {"identity", required_argument, NULL, O_IDENTITY},
        {"uses", required_argument, NULL, O_USES}, {"valid", required_argument, NULL, O_VALID},
        {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 2;
    while ((c = cli_getopt_long(argc, argv, "h", opts, "authority")) != -1) {
        switch (c) {
        case O_RUN: run_id = optarg; break;
        case O_OUT: out = optarg; break;
        case O_KEY: key = optarg; break;
        case O_PEER: peer = optarg; break;
        case O_EXPIRES:
            if (parse_duration(optarg, &expires_s)) {
                fprintf(stderr, "dedloc authority: bad duration '%s' (e.g. 30d, 12h, 90m, 3600)\n", optarg);
                return DL_EXIT_USAGE;
            }
            break;
        case O_VALID:
            if (parse_duration(optarg, &valid_s)) {
                fprintf(stderr, "dedloc authority: bad duration '%s' (e.g. 30d, 12h, 90m, 3600)\n", optarg);
                return DL_EXIT_USAGE;
            }
            break;
        case O_USES: {
            char *end;
            uses = strtod(optarg, &end);
            if (end == optarg || *end || !(uses >= 1 && uses <= DL_INVITE_MAX_USES) || uses != (double)(long)uses) {
                fprintf(stderr, "dedloc authority: --uses must be a whole number from 1 to %d\n", DL_INVITE_MAX_USES);
                return DL_EXIT_USAGE;
            }
            break;
        }
        case O_ROLE: role_name = optarg; break;
        case O_NAME: name = optarg; break;
        case O_IDENTITY: identity = optarg; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc authority: unexpected argument '%s'\n", argv[optind]);
        return DL_EXIT_USAGE;
    }
    struct dl_authority a;
    char hex[DL_AUTHORITY_PK_HEX];
    if (!strcmp(action, "init")) {
        if (!run_id || !out) {
            fprintf(stderr, "dedloc authority init: --run-id and --out are required\n");
            return DL_EXIT_USAGE;
        }
        if (dl_authority_create(out, run_id, &a)) return fail(action);
        dl_authority_public_hex(a.pk, hex);
        dl_authority_clear(&a);
        printf("%s\n", hex);
        fprintf(stderr, "created run authority %s for run '%s'; give every peer --run-key %s\n", out, run_id, hex);
        return DL_EXIT_OK;
    }
    if (!key) {
        fprintf(stderr, "dedloc authority %s: --key is required\n", action);
        return DL_EXIT_USAGE;
    }
    if (!strcmp(action, "show")) {
        if (dl_authority_load(key, &a)) return fail(action);
        dl_authority_public_hex(a.pk, hex);
        printf("run_id %s\npublic_key %s\n", a.run_id, hex);
        dl_authority_clear(&a);
        return DL_EXIT_OK;
    }
    if (invite) return make_invite(key, out, role_name, (uint32_t)uses, expires_s, valid_s);
    if (strcmp(action, "issue") && strcmp(action, "revoke")) {
        fprintf(stderr, "dedloc authority: unknown action '%s' (init, issue, invite, revoke, show)\n", action);
        return DL_EXIT_USAGE;
    }
    if (identity && peer) {
        fprintf(stderr, "dedloc authority %s: --peer or --identity, not both\n", action);
        return DL_EXIT_USAGE;
    }
    if (identity) {
        /* The peer id is the one the peer prints and logs: derived from the
         * identity's public key, as the peer derives it. */
        uint8_t pk[DL_NET_PUBLIC_KEY], sk[64];
        int bad = dl_net_identity_keys(identity, pk, sk);
        sodium_memzero(sk, sizeof sk);
        if (bad) return fail(action);
        dl_net_peer_id_from_key(pk, identity_peer);
        peer = identity_peer;
    }
    if (!peer || (!strcmp(action, "revoke") && !out)) {
        fprintf(stderr, "dedloc authority %s: --peer%s is required\n", action, strcmp(action, "revoke") ? "" : " and --out");
        return DL_EXIT_USAGE;
    }
    if (dl_authority_load(key, &a)) return fail(action);
    int rc = DL_EXIT_OK;
    if (!strcmp(action, "revoke")) {
        if (dl_revocations_add(&a, out, peer)) rc = fail(action);
        else fprintf(stderr, "revoked %s in %s\n", peer, out);
    } else {
        struct dl_token t;
        memset(&t, 0, sizeof t);
        int bad_role = dl_role_from_name(role_name, &t.role);
        double now = dl_wall_time();
        t.issued = (uint64_t)now;
        t.expires = (uint64_t)(now + expires_s);
        snprintf(t.run_id, sizeof t.run_id, "%s", a.run_id);
        snprintf(t.peer_id, sizeof t.peer_id, "%s", peer);
        uint8_t bin[DL_TOKEN_MAX_BYTES];
        size_t n;
        char text[DL_TOKEN_TEXT_MAX];
        if (bad_role) rc = fail(action);
        else if (strlen(peer) != DL_PEER_ID_HEX - 1) {
            dl_fail("--peer wants a peer id (32 hex digits), not '%s'", peer);
            rc = fail(action);
        } else if (strlen(name) >= sizeof t.name) {
            dl_fail("--name is longer than %zu bytes", sizeof t.name - 1);
            rc = fail(action);
        } else {
            snprintf(t.name, sizeof t.name, "%s", name);
            if (dl_token_sign(&a, &t, bin, &n) || dl_token_to_text(bin, n, text)) rc = fail(action);
            else printf("%s\n", text);
        }
    }
    dl_authority_clear(&a);
    return rc;
}
