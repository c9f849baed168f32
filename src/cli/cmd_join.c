/* dedloc join HOST:PORT: a newcomer's one command. It asks a peer of the run
 * for the run manifest and the tokenizer (a fetch-only connection), verifies
 * both, keeps them in a folder of this run, picks the device and the
 * micro-batch, and trains as a peer (dedloc train --manifest), downloading
 * the swarm's state first like any newcomer. docs/manifest.md. */
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/join_token.h"
#include "cli/swarm_args.h"
#include "dedloc/collab.h"
#include "dedloc/device.h"
#include "dedloc/model.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc join HOST:PORT [options]\n"
            "       dedloc join --run-id ID --dht-bootstrap HOST:PORT[,...] [options]\n\n"
            "Joins a run with nothing but the address of one of its peers: fetches the run\n"
            "manifest from it and verifies the signature, fetches the tokenizer and checks its\n"
            "hash, keeps both in DIR, picks the device (first GPU, else the first device) and the\n"
            "largest micro-batch that fits it, downloads the swarm's state and trains\n"
            "(dedloc train --manifest DIR/manifest.json). Every run setting comes from the manifest.\n\n"
            "  --run-key PUBKEY     accept only a manifest signed by this run authority (64 hex digits\n"
            "                       or a file); without it the signer is trusted on first use: a later\n"
            "                       join of the same run from DIR must find the same signer\n"
            "  --dir DIR            where the run's files go (default: the cache folder's runs/RUN_ID)\n"
            "  --run-id ID          the run to find through the DHT (with --dht-bootstrap), or to\n"
            "                       require of the peer at HOST:PORT\n"
            "  --dht-bootstrap LIST DHT nodes to find the run's peers through\n"
            "  --fetch-timeout S    how long to wait for a peer to answer (30)\n"
            "this machine's choices (passed to dedloc train):\n"
            "  --device D           OpenCL device (default: first GPU, else the first device)\n"
            "  --precision P        one of the precisions the manifest allows (default: its first)\n"
            "  --batch B            micro-batch (default: the largest that fits, at most the manifest's)\n"
            "  --listen ADDR:PORT   --announce ADDR:PORT   --client-mode   --max-upload MBIT\n"
            "  --bandwidth MBIT     --name NAME   --token FILE   --log FILE   --checkpoint-dir DIR\n"
            "  --max-minutes M      --quiet       (as in dedloc train)\n"
            "  --identity FILE      peer identity (default DIR/identity: the same peer id on every join)\n"
            "a closed run (its manifest names a run authority) admits token holders only:\n"
            "  --invite CODE        get a token for this peer's id from the peer at HOST:PORT, which\n"
            "                       holds the invite (dedloc authority invite); kept in DIR/token and\n"
            "                       used again by later joins\n"
            "  without --token or --invite (and no token in DIR), join stops and prints this peer's id\n"
            "  and what to send the organiser\n"
            "exit status: as dedloc train; 1 also when the run files cannot be fetched or verified\n");
}

enum {
    J_RUNKEY = 256, J_DIR, J_RUNID, J_DHT, J_TIMEOUT, J_DEVICE, J_PRECISION, J_BATCH, J_IDENTITY, J_HELP, J_INVITE,
    /* passed on to train with their argument or alone */
    J_PASS_ARG, J_PASS_FLAG = J_PASS_ARG + 100,
};

struct join_args {
    const char *address, *run_key, *dir, *run_id, *dht, *device, *precision, *identity;
    const char *invite; /* --invite CODE (a closed run) */
    double timeout_s;
    long batch;
    const char *pass[32];
    int num_pass;
};

static const struct option opts[] = {
    {"run-key", required_argument, NULL, J_RUNKEY}, {"dir", required_argument, NULL, J_DIR},
    {"run-id", required_argument, NULL, J_RUNID}, {"dht-bootstrap", required_argument, NULL, J_DHT},
    {"fetch-timeout", required_argument, NULL, J_TIMEOUT}, {"device", required_argument, NULL, J_DEVICE},
    {"precision", required_argument, NULL, J_PRECISION}, {"batch", required_argument, NULL, J_BATCH},
    {"identity", required_argument, NULL, J_IDENTITY}, {"help", no_argument, NULL, J_HELP},
    {"invite", required_argument, NULL, J_INVITE},
    {"listen", required_argument, NULL, J_PASS_ARG}, {"announce", required_argument, NULL, J_PASS_ARG + 1},
    {"max-upload", required_argument, NULL, J_PASS_ARG + 2}, {"bandwidth", required_argument, NULL, J_PASS_ARG + 3},
    {"name", required_argument, NULL, J_PASS_ARG + 4}, {"token", required_argument, NULL, J_PASS_ARG + 5},
    {"log", required_argument, NULL, J_PASS_ARG + 6}, {"checkpoint-dir", required_argument, NULL, J_PASS_ARG + 7},
    {"max-minutes", required_argument, NULL, J_PASS_ARG + 8},
    {"client-mode", no_argument, NULL, J_PASS_FLAG}, {"quiet", no_argument, NULL, J_PASS_FLAG + 1},
    {0, 0, 0, 0}};

static int parse(int argc, char **argv, struct join_args *a) {
    memset(a, 0, sizeof *a);
    a->timeout_s = 30;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case J_RUNKEY: a->run_key = optarg; break;
        case J_DIR: a->dir = optarg; break;
        case J_RUNID: a->run_id = optarg; break;
        case J_DHT: a->dht = optarg; break;
        case J_TIMEOUT:
            a->timeout_s = strtod(optarg, &end);
            if (*end || !(a->timeout_s >= 1 && a->timeout_s <= 3600)) {
                fprintf(stderr, "dedloc join: --fetch-timeout must be 1 to 3600 seconds\n");
                return -1;
            }
            break;
        case J_DEVICE: a->device = optarg; break;
        case J_PRECISION: a->precision = optarg; break;
        case J_BATCH:
            a->batch = strtol(optarg, &end, 10);
            if (*end || a->batch < 1 || a->batch > 65536) {
                fprintf(stderr, "dedloc join: --batch must be 1 to 65536\n");
                return -1;
            }
            break;
        case J_IDENTITY: a->identity = optarg; break;
        case J_INVITE: a->invite = optarg; break;
        case 'h':
        case J_HELP: help(stdout); return 1;
        default:
            if (c >= J_PASS_ARG && c < J_PASS_ARG + 9 && a->num_pass < 30) {
                static const char *const pass_names[] = {"--listen", "--announce", "--max-upload", "--bandwidth",
                                                         "--name", "--token", "--log", "--checkpoint-dir",
                                                         "--max-minutes"};
                a->pass[a->num_pass++] = pass_names[c - J_PASS_ARG];
                a->pass[a->num_pass++] = optarg;
            } else if (c >= J_PASS_FLAG && a->num_pass < 31) {
                a->pass[a->num_pass++] = c == J_PASS_FLAG ? "--client-mode" : "--quiet";
            } else {
                help(stderr);
                return -1;
            }
        }
    }
    if (optind < argc) a->address = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "dedloc join: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!a->address && !(a->dht && a->run_id)) {
        fprintf(stderr, "dedloc join: give HOST:PORT of a peer of the run, or --run-id ID --dht-bootstrap LIST; "
                        "see 'dedloc join --help'\n");
        return -1;
    }
    if (a->address && dl_net_check_address(a->address)) {
        fprintf(stderr, "dedloc join: %s\n", dl_error());
        return -1;
    }
    return 0;
}

/* Asks the first peer that answers for the manifest and the tokenizer. */
static int fetch_run_files(const struct join_args *a, struct dl_manifest *m, uint8_t **tok, size_t *tok_size) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = a->run_id ? a->run_id : "dedloc-join";
    cfg.listen = "";
    cfg.client_mode = true;
    cfg.fetch_only = true;
    cfg.initial_peers = a->address;
    cfg.use_dht = a->dht != NULL;
    cfg.dht_bootstrap = a->dht;
    dl_net *net;
    if (dl_net_start(&cfg, &net)) return -1;
    char peer[DL_PEER_ID_HEX] = "";
    double deadline = dl_now() + a->timeout_s;
    while (!dl_net_connected_peer(net, peer) && dl_now() < deadline) usleep(50000);
    int rc = -1;
    uint8_t *text = NULL;
    size_t n = 0;
    const char *where = a->address ? a->address : "the DHT";
    if (!peer[0]) {
        dl_fail("no peer of the run answered through %s within %.0f s (is the address right, and the peer up?)",
                where, a->timeout_s);
        goto done;
    }
    DL_INFO("join", "asking peer %s for the run manifest", peer);
    int st = dl_net_request_sync(net, peer, DL_NET_METHOD_MANIFEST, NULL, 0, a->timeout_s, &text, &n);
    if (st == DL_NET_NO_HANDLER) {
        dl_fail("peer %s serves no run manifest (it was started without --manifest): ask the run for the "
                "address of a peer started from its manifest", peer);
        goto done;
    }
    if (st != DL_NET_OK) {
        dl_fail("peer %s gave no manifest (%s%s%.*s)", peer, dl_net_status_name(st), text ? ": " : "",
                text ? (int)(n < 200 ? n : 200) : 0, text ? (const char *)text : "");
        goto done;
    }
    if (dl_manifest_parse((const char *)text, n, m)) {
        dl_fail_context("the manifest from peer %s", peer);
        goto done;
    }
    DL_INFO("join", "manifest of run %s (hash %.16s...), signature ok", m->run_id, m->hash_hex);
    st = dl_net_request_sync(net, peer, DL_NET_METHOD_TOKENIZER, NULL, 0, a->timeout_s, tok, tok_size);
    if (st != DL_NET_OK) {
        dl_fail("peer %s gave no tokenizer (%s)", peer, dl_net_status_name(st));
        goto done;
    }
    uint8_t h[32];
    crypto_generichash(h, sizeof h, *tok, *tok_size, NULL, 0);
    if (*tok_size != m->tokenizer_size || memcmp(h, m->tokenizer_hash, sizeof h)) {
        dl_fail("the tokenizer from peer %s does not match the manifest's hash: refused", peer);
        goto done;
    }
    DL_INFO("join", "tokenizer: %zu bytes, BLAKE2b-256 matches the manifest", *tok_size);
    rc = 0;
done:
    free(text);
    dl_net_stop(net);
    if (rc) {
        dl_manifest_free(m);
        free(*tok);
        *tok = NULL;
    }
    return rc;
}

/* --run-key, or trust on first use: the signer of an earlier join kept in dir. */
static int check_signer(const struct join_args *a, const struct dl_manifest *m, const char *dir) {
    if (a->run_key) {
        uint8_t want[DL_AUTHORITY_PK];
        if (dl_authority_parse_public(a->run_key, want)) return dl_fail_context("--run-key");
        if (!m->has_authority || memcmp(want, m->authority, sizeof want))
            return dl_fail("the manifest is not signed by the run authority given with --run-key: refused");
        DL_INFO("join", "the manifest is signed by the run authority given with --run-key");
        return 0;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!dl_file_exists(path)) {
        char who[CLI_SIGNER_TEXT];
        cli_manifest_signer(m, who);
        DL_WARN("join", "trusting the manifest's signer on first use (%s; no --run-key given): later joins "
                "from %s will require the same signer", who, dir);
        return 0;
    }
    struct dl_manifest old;
    if (dl_manifest_load(path, &old)) {
        DL_WARN("join", "the earlier manifest %s does not verify (%s); trusting the new signer on first use", path,
                dl_error());
        return 0;
    }
    int same = !memcmp(old.signer, m->signer, sizeof old.signer);
    dl_manifest_free(&old);
    if (!same)
        return dl_fail("the manifest of run %s is signed by another key than when this machine first joined it "
                       "(%s): refused; if the run really changed hands, delete that folder or pass --run-key",
                       m->run_id, path);
    DL_INFO("join", "the manifest's signer is the one trusted on first use (%s)", path);
    return 0;
}

/* A folder name from a run id: anything but [A-Za-z0-9._-] becomes '_'. */
static void safe_name(const char *run_id, char *out, size_t cap) {
    size_t i = 0;
    for (; run_id[i] && i + 1 < cap; i++) {
        char ch = run_id[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                  ch == '_' || (ch == '.' && i > 0);
        out[i] = ok ? ch : '_';
    }
    out[i] = 0;
}

/* The micro-batch: --batch, else the largest whose device memory (the
 * closed form of dl_model_memory_estimate, the one `train --batch auto`
 * uses) fits the device's budget, at most the manifest's. */
static int pick_micro_batch(const struct join_args *a, const struct dl_manifest *m, long *batch) {
    if (a->batch) {
        *batch = a->batch;
        return 0;
    }
    dl_albert_config cfg;
    if (m->model_config_json ? dl_albert_config_parse(m->model_config_json, strlen(m->model_config_json),
                                                      "the manifest's model", &cfg)
                             : dl_albert_config_preset(m->model_preset, &cfg))
        return -1;
    dl_precision precision = DL_PRECISION_FP32;
    if (dl_precision_parse(a->precision ? a->precision : m->precision_default, &precision)) return -1;
    dl_device *dev;
    if (dl_device_open(a->device, &dev)) return -1;
    const dl_device_info *di = dl_device_get_info(dev);
    int seq = (int)m->seq < cfg.max_position_embeddings ? (int)m->seq : cfg.max_position_embeddings;
    dl_model_options mo = {.max_batch = 1, .max_seq = seq, .precision = precision};
    size_t budget = dl_model_memory_budget(di, 0);
    dl_model_memory est;
    int b = 0;
    int rc = dl_model_fp16_compute(di, precision, &mo.fp16_compute_elem);
    if (rc == 0) rc = dl_model_fit_batch(&cfg, &mo, budget, (size_t)di->max_alloc, (int)m->micro_batch, &b, &est);
    if (rc == 0)
        DL_INFO("join", "device %s: %.2f GiB budget; micro-batch %d of at most %lld (estimate %.2f GiB)",
                di->name, (double)budget / 1073741824.0, b, (long long)m->micro_batch,
                (double)est.total / 1073741824.0);
    dl_device_close(dev);
    if (rc) return -1;
    *batch = b;
    return 0;
}

int cmd_join(int argc, char **argv) {
    struct join_args a;
    int p = parse(argc, argv, &a);
    if (p) return p > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    struct dl_manifest m;
    memset(&m, 0, sizeof m);
    uint8_t *tok = NULL;
    size_t tok_size = 0;
    int rc = DL_EXIT_FAILURE;
    if (fetch_run_files(&a, &m, &tok, &tok_size)) goto fail;
    if (a.run_id && strcmp(a.run_id, m.run_id)) {
        dl_fail("the peer serves run '%s', not '%s' (--run-id)", m.run_id, a.run_id);
        goto fail;
    }
    char dir[4096], name[DL_TOKEN_RUN_ID_MAX];
    safe_name(m.run_id, name, sizeof name);
    if (a.dir) snprintf(dir, sizeof dir, "%s", a.dir);
    else snprintf(dir, sizeof dir, "%s/runs/%s", dl_cache_dir(), name);
    if (check_signer(&a, &m, dir)) goto fail;
    char manifest_path[4200], tok_path[4200], id_path[4200];
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", dir);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    snprintf(id_path, sizeof id_path, "%s/identity", dir);
    if (dl_mkdirs(dir) || dl_write_file_atomic(manifest_path, m.text, m.size) ||
        dl_write_file_atomic(tok_path, tok, tok_size))
        goto fail;
    DL_INFO("join", "run files kept in %s", dir);
    /* A closed run: the token to train with, before any device work. */
    bool token_given = false;
    for (int i = 0; i < a.num_pass; i++)
        if (a.pass[i] && !strcmp(a.pass[i], "--token")) token_given = true;
    char token_path[4200] = "";
    if (!token_given) {
        struct cli_join_token jt = {a.address, a.dht, a.identity ? a.identity : id_path, dir, a.invite, a.timeout_s};
        int t = cli_join_token(&jt, &m, token_path);
        if (t > 0) {
            dl_manifest_free(&m);
            free(tok);
            return DL_EXIT_FAILURE;
        }
        if (t < 0) goto fail;
    }
    long batch;
    if (pick_micro_batch(&a, &m, &batch)) goto fail;

    /* dedloc train --manifest, with this machine's choices. */
    char batch_text[24];
    snprintf(batch_text, sizeof batch_text, "%ld", batch);
    const char *targv[64];
    int n = 0;
    targv[n++] = "train";
    targv[n++] = "--manifest";
    targv[n++] = manifest_path;
    targv[n++] = "--tokenizer";
    targv[n++] = tok_path;
    targv[n++] = "--batch";
    targv[n++] = batch_text;
    targv[n++] = "--identity";
    targv[n++] = a.identity ? a.identity : id_path;
    if (a.address) {
        targv[n++] = "--initial-peers";
        targv[n++] = a.address;
    }
    if (a.dht) {
        targv[n++] = "--dht-bootstrap";
        targv[n++] = a.dht;
    } else {
        targv[n++] = "--no-dht"; /* a DHT node with nobody to bootstrap from finds nobody */
    }
    if (a.device) {
        targv[n++] = "--device";
        targv[n++] = a.device;
    }
    if (a.precision) {
        targv[n++] = "--precision";
        targv[n++] = a.precision;
    }
    if (token_path[0]) {
        targv[n++] = "--token";
        targv[n++] = token_path;
    }
    for (int i = 0; i < a.num_pass; i++) targv[n++] = a.pass[i];
    targv[n] = NULL;
    dl_manifest_free(&m);
    free(tok);
    optind = 0; /* getopt starts over for train's options */
    return cmd_train(n, (char **)targv);
fail:
    fprintf(stderr, "dedloc join: %s\n", dl_error());
    dl_manifest_free(&m);
    free(tok);
    return rc;
}
