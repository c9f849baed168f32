/* dedloc join HOST:PORT: a newcomer's one command. It asks a peer of the run
 * for the run manifest and the tokenizer (a fetch-only connection), verifies
 * both, keeps them in a folder of this run, picks the device and the
 * micro-batch, and trains as a peer (dedloc train --manifest), downloading
 * the swarm's state first like any newcomer. docs/manifest.md. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
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
            "  --fetch-timeout S    how long to wait for a peer to answer (30); an address that answers\n"
            "                       in another protocol is given up at once\n"
            "this machine's choices (passed to dedloc train):\n"
            "  --device D           OpenCL device (default: first GPU, else the first device)\n"
            "  --precision P        one of the precisions the manifest allows (default: its first)\n"
            "  --batch B            micro-batch (default: the largest that fits, at most the manifest's)\n"
            "  --data SOURCE        this machine's copy of the run's data instead of the manifest's source;\n"
            "                       needed when the manifest names a path rather than a URL (a manifest\n"
            "                       from the network may not make this machine read its files)\n"
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
            "Ctrl-C stops it at once while it fetches the run's files (nothing is saved then), and\n"
            "once it trains as dedloc train's Ctrl-C does.\n"
            "exit status: as dedloc train; 1 also when the run files cannot be fetched or verified,\n"
            "130 when stopped before they arrived\n");
}

enum {
    J_RUNKEY = 256, J_DIR, J_RUNID, J_DHT, J_TIMEOUT, J_DEVICE, J_PRECISION, J_BATCH, J_IDENTITY, J_HELP, J_DATA, J_INVITE,
    /* this machine's choices passed on to train as they are given */
    J_PASS_FIRST, J_PASS_LAST = J_PASS_FIRST + 63,
};

struct join_args {
    const char *address, *run_key, *dir, *run_id, *dht, *device, *precision, *identity, *data;
    const char *invite; /* --invite CODE (a closed run) */
    double timeout_s;
    long long batch;
    const char *pass[32]; /* "--NAME" and, for an option with one, its argument */
    char pass_names[16][40];
    int num_pass, num_pass_names;
};

/* The option itself is appended to the arguments of train by the parse loop,
 * which knows its name; this only makes the table say it takes an argument. */
static int pass_value(void *settings, const char *arg) {
    (void)settings;
    (void)arg;
    return 0;
}

#define J_FIELD(f) offsetof(struct join_args, f)
static const struct cli_opt join_opts[] = {
    {"run-key", J_RUNKEY, CLI_OPT_STRING, J_FIELD(run_key), 0, 0, NULL},
    {"dir", J_DIR, CLI_OPT_STRING, J_FIELD(dir), 0, 0, NULL},
    {"run-id", J_RUNID, CLI_OPT_STRING, J_FIELD(run_id), 0, 0, NULL},
    {"dht-bootstrap", J_DHT, CLI_OPT_STRING, J_FIELD(dht), 0, 0, NULL},
    {"fetch-timeout", J_TIMEOUT, CLI_OPT_DOUBLE, J_FIELD(timeout_s), 1, 3600, NULL},
    {"device", J_DEVICE, CLI_OPT_STRING, J_FIELD(device), 0, 0, NULL},
    {"precision", J_PRECISION, CLI_OPT_STRING, J_FIELD(precision), 0, 0, NULL},
    {"batch", J_BATCH, CLI_OPT_LLONG, J_FIELD(batch), 1, 65536, NULL},
    {"identity", J_IDENTITY, CLI_OPT_STRING, J_FIELD(identity), 0, 0, NULL},
    {"help", J_HELP, CLI_OPT_OTHER, 0, 0, 0, NULL},
    {"data", J_DATA, CLI_OPT_STRING, J_FIELD(data), 0, 0, NULL},
    {"invite", J_INVITE, CLI_OPT_STRING, J_FIELD(invite), 0, 0, NULL},
    {"listen", J_PASS_FIRST + 0, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"announce", J_PASS_FIRST + 1, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"max-upload", J_PASS_FIRST + 2, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"bandwidth", J_PASS_FIRST + 3, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"name", J_PASS_FIRST + 4, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"token", J_PASS_FIRST + 5, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"log", J_PASS_FIRST + 6, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"checkpoint-dir", J_PASS_FIRST + 7, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"max-minutes", J_PASS_FIRST + 8, CLI_OPT_SETTER, 0, 0, 0, pass_value},
    {"client-mode", J_PASS_FIRST + 9, CLI_OPT_OTHER, 0, 0, 0, NULL},
    {"quiet", J_PASS_FIRST + 10, CLI_OPT_OTHER, 0, 0, 0, NULL},
};
enum { N_JOIN_OPTS = sizeof join_opts / sizeof join_opts[0] };

/* Appends --NAME [ARG] to what train is given; train checks the value. */
static int pass_on(struct join_args *a, const struct cli_opt *e, const char *arg) {
    if (a->num_pass + 2 > (int)(sizeof a->pass / sizeof a->pass[0]) ||
        a->num_pass_names == (int)(sizeof a->pass_names / sizeof a->pass_names[0])) {
        fprintf(stderr, "dedloc join: too many options\n");
        return -1;
    }
    char *name = a->pass_names[a->num_pass_names++];
    snprintf(name, sizeof a->pass_names[0], "--%s", e->name);
    a->pass[a->num_pass++] = name;
    if (e->kind == CLI_OPT_SETTER) a->pass[a->num_pass++] = arg;
    return 0;
}

static int parse(int argc, char **argv, struct join_args *a) {
    memset(a, 0, sizeof *a);
    a->timeout_s = 30;
    struct option opts[N_JOIN_OPTS + 1];
    cli_opt_fill(join_opts, N_JOIN_OPTS, opts);
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", opts, "join")) != -1) {
        const struct cli_opt *e = cli_opt_find(join_opts, N_JOIN_OPTS, c);
        if (c == 'h' || c == J_HELP) {
            help(stdout);
            return 1;
        }
        if (!e) {
            help(stderr);
            return -1;
        }
        if (c >= J_PASS_FIRST && c <= J_PASS_LAST) {
            if (pass_on(a, e, optarg)) return -1;
        } else if (cli_opt_assign(e, a, optarg)) {
            if (c == J_TIMEOUT) fprintf(stderr, "dedloc join: --fetch-timeout must be 1 to 3600 seconds\n");
            else if (c == J_BATCH) fprintf(stderr, "dedloc join: --batch must be 1 to 65536\n");
            else fprintf(stderr, "dedloc join: bad value '%s' for --%s\n", optarg, e->name);
            return -1;
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

/* SIGINT / SIGTERM while the run's files are fetched: the waits below end
 * at once (the default action would be as quick, but a shell starts a
 * background job with SIGINT ignored, and a volunteer's script may too). */
static volatile sig_atomic_t join_stop;

static void on_stop_signal(int sig) {
    (void)sig;
    join_stop = 1;
}

/* An answer awaited by the main thread, which checks join_stop meanwhile. */
struct pending_answer {
    pthread_mutex_t lock;
    bool done;
    int status;
    uint8_t *data;
    size_t size;
};

static void answer_cb(void *user, uint64_t request_id, int status, const uint8_t *payload, size_t size) {
    (void)request_id;
    struct pending_answer *p = user;
    uint8_t *copy = size ? malloc(size) : NULL;
    if (copy) memcpy(copy, payload, size);
    pthread_mutex_lock(&p->lock);
    p->status = copy || !size ? status : DL_NET_REMOTE_ERROR;
    p->data = copy;
    p->size = copy ? size : 0;
    p->done = true;
    pthread_mutex_unlock(&p->lock);
}

/* dl_net_request_sync that a signal interrupts: DL_NET_CANCELLED then. */
static int ask(dl_net *net, const char *peer, const char *method, double timeout_s, uint8_t **out, size_t *n) {
    struct pending_answer p = {.status = DL_NET_DISCONNECTED};
    pthread_mutex_init(&p.lock, NULL);
    *out = NULL;
    *n = 0;
    uint64_t id = dl_net_request(net, peer, method, NULL, 0, timeout_s, answer_cb, &p);
    bool cancelled = false;
    for (bool done = id == 0; !done;) {
        if (join_stop && !cancelled) {
            dl_net_cancel(net, id);
            cancelled = true;
        }
        pthread_mutex_lock(&p.lock);
        done = p.done;
        pthread_mutex_unlock(&p.lock);
        if (!done) usleep(20000);
    }
    pthread_mutex_destroy(&p.lock);
    *out = p.data;
    *n = p.size;
    return join_stop ? DL_NET_CANCELLED : p.status;
}

/* A peer rate-limits the run files per address (docs/protocol.md, "Limits
 * against floods"): a "busy" answer is asked again after a pause, as long
 * as the deadline allows. */
#define BUSY_RETRY_S 2.5

static int ask_patiently(dl_net *net, const char *peer, const char *method, double deadline, uint8_t **out,
                         size_t *n) {
    for (;;) {
        double left = deadline - dl_now();
        int st = ask(net, peer, method, left > 1 ? left : 1, out, n);
        bool busy = st == DL_NET_REMOTE_ERROR && *out && *n >= 5 && !memcmp(*out, "busy:", 5);
        if (!busy || join_stop || dl_now() + BUSY_RETRY_S >= deadline) return st;
        DL_INFO("join", "peer %s is busy (%.*s): asking again in %.1f s", peer, (int)(*n < 120 ? *n : 120),
                (const char *)*out, BUSY_RETRY_S);
        free(*out);
        *out = NULL;
        *n = 0;
        for (double until = dl_now() + BUSY_RETRY_S; dl_now() < until && !join_stop;) usleep(50000);
        if (join_stop) return DL_NET_CANCELLED;
    }
}

/* Asks the first peer that answers for the manifest and the tokenizer.
 * -2 when a signal stopped it. */
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
    char refusal[160] = "";
    /* A peer named on the command line that speaks another protocol is
     * given up at once; found through the DHT, others may still answer. */
    while (!dl_net_connected_peer(net, peer) && dl_now() < deadline && !join_stop &&
           !(a->address && !a->dht && dl_net_dial_refused(net, refusal, sizeof refusal)))
        usleep(20000);
    int rc = -1;
    uint8_t *text = NULL;
    size_t n = 0;
    const char *where = a->address ? a->address : "the DHT";
    if (join_stop) {
        rc = -2;
        goto done;
    }
    if (!peer[0] && refusal[0]) {
        dl_fail("%s; check the address and port the run gave", refusal);
        goto done;
    }
    if (!peer[0]) {
        dl_fail("no peer of the run answered through %s within %.0f s (is the address right, and the peer up?)",
                where, a->timeout_s);
        goto done;
    }
    DL_INFO("join", "asking peer %s for the run manifest", peer);
    int st = ask_patiently(net, peer, DL_NET_METHOD_MANIFEST, deadline, &text, &n);
    if (join_stop) {
        rc = -2;
        goto done;
    }
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
    st = ask_patiently(net, peer, DL_NET_METHOD_TOKENIZER, deadline, tok, tok_size);
    if (join_stop) {
        rc = -2;
        goto done;
    }
    if (st != DL_NET_OK) {
        dl_fail("peer %s gave no tokenizer (%s%s%.*s)", peer, dl_net_status_name(st), *tok ? ": " : "",
                *tok ? (int)(*tok_size < 200 ? *tok_size : 200) : 0, *tok ? (const char *)*tok : "");
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

/* A manifest that came over the network names the files this machine
 * reads: only URLs are taken from it. A path (the organiser's file, or
 * one that every peer of a shared file system has) needs the volunteer's
 * own --data, so that a manifest cannot make us read a local file. */
static int check_data_sources(const struct dl_manifest *m) {
    for (size_t i = 0; i < m->num_data; i++)
        if (!cli_data_is_url(m->data[i]))
            return dl_fail("the run manifest names the data source %s, a path on a machine, not a URL: refused "
                           "(a manifest from the network may not make this machine read its files); pass --data "
                           "with your own copy of the run's data, or ask the organiser to serve it (dedloc "
                           "serve-data) and name its URL", m->data[i]);
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
static int pick_micro_batch(const struct join_args *a, const struct dl_manifest *m, long long *batch) {
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
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int fetched = fetch_run_files(&a, &m, &tok, &tok_size);
    /* From here a signal ends the program at once until train, once it
     * trains, stops at the next micro-batch and saves what there is. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (fetched == -2 || join_stop) {
        fprintf(stderr, "dedloc join: stopped before the run's files arrived; nothing was saved\n");
        dl_manifest_free(&m);
        free(tok);
        return 130;
    }
    if (fetched) goto fail;
    if (a.run_id && strcmp(a.run_id, m.run_id)) {
        dl_fail("the peer serves run '%s', not '%s' (--run-id)", m.run_id, a.run_id);
        goto fail;
    }
    char dir[4096], name[DL_TOKEN_RUN_ID_MAX];
    safe_name(m.run_id, name, sizeof name);
    if (a.dir) snprintf(dir, sizeof dir, "%s", a.dir);
    else snprintf(dir, sizeof dir, "%s/runs/%s", dl_cache_dir(), name);
    if (check_signer(&a, &m, dir)) goto fail;
    if (!a.data && check_data_sources(&m)) goto fail;
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
    long long batch;
    if (pick_micro_batch(&a, &m, &batch)) goto fail;

    /* dedloc train --manifest, with this machine's choices. */
    char batch_text[24];
    snprintf(batch_text, sizeof batch_text, "%lld", batch);
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
    if (a.data) {
        targv[n++] = "--data";
        targv[n++] = a.data;
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
