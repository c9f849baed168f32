/* dedloc run: the run manifest. init writes one (signed by the run authority
 * or a peer identity), show verifies and prints one. docs/manifest.md. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "cli/swarm_args.h"
#include "dedloc/collab.h"
#include "dedloc/model.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc run init --model M --tokenizer FILE --data SOURCE [--data SOURCE...] [options]\n"
            "                       (--key AUTHORITY_FILE | --identity FILE) --out run.json\n"
            "       dedloc run show [--run-key PUBKEY] run.json\n\n"
            "A run manifest holds every setting the peers of a run share (docs/manifest.md); peers\n"
            "started with --manifest take them from it, and 'dedloc join HOST:PORT' fetches it.\n\n"
            "init:\n"
            "  --model M            tiny, sahajbert, or a config.json (embedded whole)\n"
            "  --tokenizer FILE     tokenizer.json (recorded by BLAKE2b-256 and size)\n"
            "  --data SOURCE        text source every peer reads: an http(s):// URL (dedloc serve-data\n"
            "                       DIR serves a folder); repeat for more: each peer reads one, chosen\n"
            "                       by its peer seed\n"
            "  --data-shared        the --data paths are files or folders that every peer has at the\n"
            "                       same path (a shared file system): accept them (without it a path\n"
            "                       is refused, since volunteers' machines do not have it)\n"
            "  --run-id ID          the run (default: the authority's run id)\n"
            "  --seq T --batch B    tokens per sequence (tiny 128, otherwise 512); largest micro-batch\n"
            "                       a peer takes (8; dedloc join picks what fits its device)\n"
            "  --target-batch N --max-steps S --seed K --shuffle-buffer N\n"
            "  --optimizer O --lr X --warmup-steps N --total-steps N --weight-decay X --max-grad-norm X\n"
            "                       as in dedloc train, with its defaults\n"
            "  --compression C      none (default), fp16, uint8, int8, topk\n"
            "  --local-steps H      low-communication mode (DiLoCo; docs/collab_training.md): H inner\n"
            "                       steps per peer between syncs, --max-steps counting syncs and the\n"
            "                       inner schedule spanning max-steps x H; with --outer-lr X (0.7),\n"
            "                       --outer-momentum M (0.9), --outer-compression C (none)\n"
            "  --aggregation A      mean (default) or centered-clip, with --clip-tau T (1),\n"
            "                       --clip-iterations N (20), --clip-ban-rounds N (10)\n"
            "  --precisions LIST    allowed compute precisions, the first the default (fp32,fp16,bf16)\n"
            "  --key FILE           sign as the run authority (dedloc authority init): peers then admit\n"
            "                       only token holders\n"
            "  --identity FILE      sign with this peer identity instead (an open run)\n"
            "  --out FILE           where to write the manifest (never overwritten)\n"
            "show: verifies the signature and prints the settings, the signer and the manifest hash;\n"
            "  --run-key PUBKEY     also require this authority (64 hex digits or a file)\n"
            "exit status: 0 ok, 1 failure (show: the manifest does not verify), 2 usage\n");
}

enum {
    R_MODEL = 256, R_TOKENIZER, R_DATA, R_RUN, R_SEQ, R_BATCH, R_TARGET, R_STEPS, R_SEED, R_SHUFFLE, R_OPT, R_LR,
    R_WARMUP, R_TOTAL, R_WD, R_CLIP, R_COMP, R_AGG, R_TAU, R_CLIPIT, R_CLIPBAN, R_PREC, R_KEY, R_IDENTITY, R_OUT,
    R_RUNKEY, R_DATA_SHARED, R_LOCAL, R_OUTER_LR, R_OUTER_MOM, R_OUTER_COMP, R_HELP
};

struct init_args {
    const char *model, *tokenizer, *run_id, *optimizer, *compression, *aggregation, *precisions, *key, *identity,
        *out, *run_key, *outer_compression;
    const char *data[DL_MANIFEST_MAX_DATA];
    int num_data;
    double v[R_HELP]; /* numeric options by code */
    bool given[R_HELP];
};

static int number(const char *s, double lo, double hi, double *out, const char *name) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "dedloc run: --%s must be a number in [%g, %g], got '%s'\n", name, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse(int argc, char **argv, struct init_args *a) {
    static const struct option opts[] = {
        {"model", required_argument, NULL, R_MODEL}, {"tokenizer", required_argument, NULL, R_TOKENIZER},
        {"data", required_argument, NULL, R_DATA}, {"run-id", required_argument, NULL, R_RUN},
        {"seq", required_argument, NULL, R_SEQ}, {"batch", required_argument, NULL, R_BATCH},
        {"target-batch", required_argument, NULL, R_TARGET}, {"max-steps", required_argument, NULL, R_STEPS},
        {"seed", required_argument, NULL, R_SEED}, {"shuffle-buffer", required_argument, NULL, R_SHUFFLE},
        {"optimizer", required_argument, NULL, R_OPT}, {"lr", required_argument, NULL, R_LR},
        {"warmup-steps", required_argument, NULL, R_WARMUP}, {"total-steps", required_argument, NULL, R_TOTAL},
        {"weight-decay", required_argument, NULL, R_WD}, {"max-grad-norm", required_argument, NULL, R_CLIP},
        {"compression", required_argument, NULL, R_COMP}, {"aggregation", required_argument, NULL, R_AGG},
        {"clip-tau", required_argument, NULL, R_TAU}, {"clip-iterations", required_argument, NULL, R_CLIPIT},
        {"clip-ban-rounds", required_argument, NULL, R_CLIPBAN}, {"precisions", required_argument, NULL, R_PREC},
        {"key", required_argument, NULL, R_KEY}, {"identity", required_argument, NULL, R_IDENTITY},
        {"out", required_argument, NULL, R_OUT}, {"run-key", required_argument, NULL, R_RUNKEY},
        {"data-shared", no_argument, NULL, R_DATA_SHARED},
        {"local-steps", required_argument, NULL, R_LOCAL}, {"outer-lr", required_argument, NULL, R_OUTER_LR},
        {"outer-momentum", required_argument, NULL, R_OUTER_MOM},
        {"outer-compression", required_argument, NULL, R_OUTER_COMP},
        {"help", no_argument, NULL, R_HELP}, {0, 0, 0, 0}};
    /* Numeric options: range and name. */
    static const struct { int code; double lo, hi; const char *name; } nums[] = {
        {R_SEQ, 8, 65536, "seq"}, {R_BATCH, 1, 65536, "batch"}, {R_TARGET, 1, 1e9, "target-batch"},
        {R_STEPS, 1, 1e9, "max-steps"}, {R_SEED, 0, 9007199254740991.0, "seed"},
        {R_SHUFFLE, 1, 1e8, "shuffle-buffer"}, {R_LR, 1e-12, 10, "lr"}, {R_WARMUP, 0, 1e9, "warmup-steps"},
        {R_TOTAL, 1, 1e9, "total-steps"}, {R_WD, 0, 10, "weight-decay"}, {R_CLIP, 0, 1e6, "max-grad-norm"},
        {R_TAU, 1e-30, 1e30, "clip-tau"}, {R_CLIPIT, 1, DL_CLIP_MAX_ITERATIONS, "clip-iterations"},
        {R_CLIPBAN, 0, 1e6, "clip-ban-rounds"}, {R_LOCAL, 1, 1e9, "local-steps"},
        {R_OUTER_LR, 1e-9, 100, "outer-lr"}, {R_OUTER_MOM, 0, 0.999999, "outer-momentum"}};
    memset(a, 0, sizeof *a);
    a->model = "tiny";
    a->optimizer = "lamb";
    a->compression = "none";
    a->aggregation = "mean";
    a->precisions = "fp32,fp16,bf16";
    optind = 1;
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", opts, "run")) != -1) {
        if (c > 0 && c < R_HELP) a->given[c] = true;
        bool numeric = false;
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
            if (nums[i].code == c) {
                numeric = true;
                if (number(optarg, nums[i].lo, nums[i].hi, &a->v[c], nums[i].name)) return -1;
            }
        if (numeric) continue;
        switch (c) {
        case R_MODEL: a->model = optarg; break;
        case R_TOKENIZER: a->tokenizer = optarg; break;
        case R_DATA:
            if (a->num_data == DL_MANIFEST_MAX_DATA) {
                fprintf(stderr, "dedloc run: at most %d --data sources\n", DL_MANIFEST_MAX_DATA);
                return -1;
            }
            a->data[a->num_data++] = optarg;
            break;
        case R_RUN: a->run_id = optarg; break;
        case R_OPT: a->optimizer = optarg; break;
        case R_COMP: a->compression = optarg; break;
        case R_AGG: a->aggregation = optarg; break;
        case R_PREC: a->precisions = optarg; break;
        case R_KEY: a->key = optarg; break;
        case R_IDENTITY: a->identity = optarg; break;
        case R_OUT: a->out = optarg; break;
        case R_RUNKEY: a->run_key = optarg; break;
        case R_OUTER_COMP: a->outer_compression = optarg; break;
        case R_DATA_SHARED: break; /* given[] holds it */
        case 'h':
        case R_HELP: help(stdout); return 1;
        default: help(stderr); return -1;
        }
    }
    return 0;
}

/* The settings as JSON, without signer and signature; train's defaults. */
static cJSON *manifest_body(const struct init_args *a, const char *run_id) {
    bool tiny = !strcmp(a->model, "tiny");
    const double *v = a->v;
    double steps = a->given[R_STEPS] ? v[R_STEPS] : tiny ? 300 : 125000;
    bool lamb = !strcmp(a->optimizer, "lamb");
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "format", DL_MANIFEST_FORMAT);
    cJSON_AddStringToObject(o, "run_id", run_id);
    dl_albert_config cfg;
    if (dl_albert_config_preset(a->model, &cfg) == 0) {
        cJSON_AddStringToObject(o, "model", a->model);
    } else {
        dl_clear_error();
        char *text = NULL;
        size_t n;
        cJSON *model = NULL;
        if (dl_read_file(a->model, 1 << 20, &text, &n) == 0 && dl_albert_config_parse(text, n, a->model, &cfg) == 0)
            model = cJSON_ParseWithLength(text, n);
        free(text);
        if (!model) {
            if (!dl_error()[0]) dl_fail("%s: not a preset or a config.json", a->model);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, "model", model);
    }
    uint8_t hash[32];
    uint64_t size;
    if (dl_file_blake2b(a->tokenizer, DL_MANIFEST_TOKENIZER_MAX, hash, &size)) {
        dl_fail_context("tokenizer %s (at most %u bytes)", a->tokenizer, DL_MANIFEST_TOKENIZER_MAX);
        cJSON_Delete(o);
        return NULL;
    }
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
    cJSON *tok = cJSON_AddObjectToObject(o, "tokenizer");
    cJSON_AddStringToObject(tok, "file", a->tokenizer);
    cJSON_AddStringToObject(tok, "blake2b", hex);
    cJSON_AddNumberToObject(tok, "size", (double)size);
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < a->num_data; i++) cJSON_AddItemToArray(data, cJSON_CreateString(a->data[i]));
    cJSON_AddNumberToObject(o, "seq", a->given[R_SEQ] ? v[R_SEQ] : tiny ? 128 : 512);
    cJSON_AddNumberToObject(o, "micro_batch", a->given[R_BATCH] ? v[R_BATCH] : 8);
    cJSON_AddNumberToObject(o, "target_batch", a->given[R_TARGET] ? v[R_TARGET] : tiny ? 32 : 4096);
    cJSON_AddNumberToObject(o, "max_steps", steps);
    cJSON_AddNumberToObject(o, "seed", v[R_SEED]);
    cJSON_AddNumberToObject(o, "shuffle_buffer", a->given[R_SHUFFLE] ? v[R_SHUFFLE] : 10000);
    cJSON *opt = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddStringToObject(opt, "name", a->optimizer);
    /* Local-steps mode: the inner schedule spans the inner steps, H per sync. */
    double inner_steps = a->given[R_LOCAL] ? steps * v[R_LOCAL] : steps;
    dl_opt_config preset = dl_opt_config_preset(tiny, lamb ? DL_OPT_LAMB : DL_OPT_ADAMW, (int64_t)inner_steps);
    cJSON_AddNumberToObject(opt, "lr", a->given[R_LR] ? v[R_LR] : preset.lr);
    cJSON_AddNumberToObject(opt, "warmup_steps", a->given[R_WARMUP] ? v[R_WARMUP] : (double)preset.warmup_steps);
    cJSON_AddNumberToObject(opt, "total_steps", a->given[R_TOTAL] ? v[R_TOTAL] : (double)preset.total_steps);
    cJSON_AddNumberToObject(opt, "weight_decay", a->given[R_WD] ? v[R_WD] : 0.01);
    cJSON_AddNumberToObject(opt, "max_grad_norm", a->given[R_CLIP] ? v[R_CLIP] : 1.0);
    cJSON_AddStringToObject(o, "compression", a->compression);
    cJSON *agg = cJSON_AddObjectToObject(o, "aggregation");
    cJSON_AddStringToObject(agg, "rule", a->aggregation);
    if (!strcmp(a->aggregation, dl_aggregation_name(DL_AGG_CENTERED_CLIP))) {
        cJSON_AddNumberToObject(agg, "tau", a->given[R_TAU] ? v[R_TAU] : DL_CLIP_DEFAULT_TAU);
        cJSON_AddNumberToObject(agg, "iterations", a->given[R_CLIPIT] ? v[R_CLIPIT] : DL_CLIP_DEFAULT_ITERATIONS);
        cJSON_AddNumberToObject(agg, "ban_rounds", a->given[R_CLIPBAN] ? v[R_CLIPBAN] : 10);
    }
    if (a->given[R_LOCAL]) {
        cJSON *l = cJSON_AddObjectToObject(o, "local_steps");
        cJSON_AddNumberToObject(l, "steps", v[R_LOCAL]);
        cJSON_AddNumberToObject(l, "outer_lr", a->given[R_OUTER_LR] ? v[R_OUTER_LR] : 0.7);
        cJSON_AddNumberToObject(l, "outer_momentum", a->given[R_OUTER_MOM] ? v[R_OUTER_MOM] : 0.9);
        cJSON_AddStringToObject(l, "outer_compression", a->outer_compression ? a->outer_compression : "none");
    }
    cJSON *prec = cJSON_AddArrayToObject(o, "precisions");
    char list[64];
    snprintf(list, sizeof list, "%s", a->precisions);
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
        cJSON_AddItemToArray(prec, cJSON_CreateString(p));
    return o;
}

/* A closed run admits token holders only: say how the organiser's own peer
 * gets one and how volunteers will (docs/manifest.md, README "Join a run"). */
static void print_next_steps(const struct init_args *a, const struct dl_manifest *m) {
    printf("\nRun %s is closed: its peers admit only peers with a token from the run authority (%s). Next:\n"
           "  1. an invite for volunteers (prints CODE; the file goes to your first peer):\n"
           "       dedloc authority invite --key %s --uses 20 --expires 7d --out invite.key\n"
           "  2. your first peer, with a token for its own identity (peer.id is created):\n"
           "       dedloc authority issue --key %s --identity peer.id > peer.token\n"
           "       dedloc train --manifest %s --identity peer.id --token peer.token --invite-file invite.key \\\n"
           "           --listen 0.0.0.0:7000 --announce YOUR.PUBLIC.IP:7000\n"
           "  3. each volunteer runs\n"
           "       dedloc join YOUR.PUBLIC.IP:7000 --invite CODE\n"
           "     or, without an invite, 'dedloc join YOUR.PUBLIC.IP:7000' prints their peer id, for which you run\n"
           "       dedloc authority issue --key %s --peer PEER_ID > their.token   (they add --token their.token)\n",
           m->run_id, a->key, a->key, a->key, a->out, a->key);
}

static int run_init(int argc, char **argv) {
    struct init_args a;
    int p = parse(argc, argv, &a);
    if (p) return p > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    if (!a.tokenizer || !a.num_data || !a.out || !a.key == !a.identity) {
        fprintf(stderr, "dedloc run init: needs --tokenizer, --data, --out and one of --key or --identity; "
                        "see 'dedloc run --help'\n");
        return DL_EXIT_USAGE;
    }
    for (int i = 0; i < a.num_data && !a.given[R_DATA_SHARED]; i++)
        if (!cli_data_is_url(a.data[i])) {
            fprintf(stderr, "dedloc run init: --data %s is a path on this machine, which volunteers' machines do "
                    "not have: serve it with 'dedloc serve-data DIR' and give --data http://HOST:PORT/, or pass "
                    "--data-shared if every peer has this same path (a shared file system)\n", a.data[i]);
            return DL_EXIT_USAGE;
        }
    if (dl_file_exists(a.out)) {
        fprintf(stderr, "dedloc run init: %s exists; a manifest is never overwritten (a new one is a new run)\n", a.out);
        return DL_EXIT_FAILURE;
    }
    struct dl_authority auth;
    memset(&auth, 0, sizeof auth);
    uint8_t pk[32], sk[64];
    int rc = DL_EXIT_FAILURE;
    char *body = NULL, *signed_text = NULL;
    cJSON *o = NULL;
    if (a.key) {
        if (dl_authority_load(a.key, &auth)) goto fail;
        if (a.run_id && strcmp(a.run_id, auth.run_id)) {
            dl_fail("--run-id %s, but the authority %s is for run '%s'", a.run_id, a.key, auth.run_id);
            goto fail;
        }
        a.run_id = auth.run_id;
        memcpy(sk, auth.sk, sizeof sk);
        memcpy(pk, auth.pk, sizeof pk);
    } else {
        if (!a.run_id) {
            fprintf(stderr, "dedloc run init: an open run (--identity) needs --run-id ID\n");
            return DL_EXIT_USAGE;
        }
        if (dl_net_identity_keys(a.identity, pk, sk)) goto fail;
    }
    o = manifest_body(&a, a.run_id);
    if (!o) goto fail;
    if (a.key) {
        char hex[DL_AUTHORITY_PK_HEX];
        dl_authority_public_hex(pk, hex);
        cJSON_AddStringToObject(o, "authority", hex);
    }
    body = cJSON_PrintUnformatted(o);
    if (!body || dl_manifest_sign(body, sk, &signed_text)) goto fail;
    size_t n = strlen(signed_text);
    signed_text[n] = '\n'; /* the terminating NUL becomes the file's final newline */
    if (dl_write_file_atomic(a.out, signed_text, n + 1)) goto fail;
    struct dl_manifest m;
    if (dl_manifest_load(a.out, &m)) goto fail;
    char signer[CLI_SIGNER_TEXT];
    cli_manifest_signer(&m, signer);
    printf("wrote %s: run %s, manifest hash %s, signed by %s\n", a.out, m.run_id, m.hash_hex, signer);
    if (a.key) print_next_steps(&a, &m);
    dl_manifest_free(&m);
    rc = DL_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "dedloc run init: %s\n", dl_error());
done:
    sodium_memzero(sk, sizeof sk);
    dl_authority_clear(&auth);
    cJSON_Delete(o);
    cJSON_free(body);
    free(signed_text);
    return rc;
}

static int run_show(int argc, char **argv) {
    struct init_args a;
    int p = parse(argc, argv, &a);
    if (p) return p > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    if (optind != argc - 1) {
        fprintf(stderr, "dedloc run show: give one manifest file; see 'dedloc run --help'\n");
        return DL_EXIT_USAGE;
    }
    struct dl_manifest m;
    if (dl_manifest_load(argv[optind], &m)) {
        fprintf(stderr, "dedloc run show: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    int rc = DL_EXIT_OK;
    if (a.run_key) {
        uint8_t want[DL_AUTHORITY_PK];
        if (dl_authority_parse_public(a.run_key, want)) {
            fprintf(stderr, "dedloc run show: --run-key: %s\n", dl_error());
            rc = DL_EXIT_USAGE;
        } else if (!m.has_authority || memcmp(want, m.authority, sizeof want)) {
            fprintf(stderr, "dedloc run show: %s is not signed by the run authority given with --run-key\n",
                    argv[optind]);
            rc = DL_EXIT_FAILURE;
        }
    }
    if (rc == DL_EXIT_OK) {
        char signer[CLI_SIGNER_TEXT];
        cli_manifest_signer(&m, signer);
        printf("manifest %s: signature ok\n", argv[optind]);
        printf("  run id         %s\n  manifest hash  %s\n", m.run_id, m.hash_hex);
        printf("  signed by      %s\n", signer);
        printf("  model          %s\n", m.model_preset[0] ? m.model_preset : m.model_config_json);
        char th[65];
        sodium_bin2hex(th, sizeof th, m.tokenizer_hash, sizeof m.tokenizer_hash);
        printf("  tokenizer      %s (%llu bytes, BLAKE2b-256 %s)\n", m.tokenizer_file,
               (unsigned long long)m.tokenizer_size, th);
        for (size_t i = 0; i < m.num_data; i++) printf("  data           %s\n", m.data[i]);
        printf("  batch          seq %lld, micro-batch up to %lld, target batch %lld, %lld steps, seed %lld\n",
               (long long)m.seq, (long long)m.micro_batch, (long long)m.target_batch, (long long)m.max_steps,
               (long long)m.seed);
        printf("  optimizer      %s, lr %g, warmup %lld, total %lld, weight decay %g, max grad norm %g\n",
               m.optimizer, m.lr, (long long)m.warmup_steps, (long long)m.total_steps, m.weight_decay,
               m.max_grad_norm);
        printf("  averaging      compression %s, aggregation %s", dl_codec_name(m.compression),
               dl_aggregation_name(m.aggregation));
        if (m.aggregation == DL_AGG_CENTERED_CLIP)
            printf(" (tau %g, %d iterations, ban after %d)", m.clip_tau, m.clip_iterations, m.clip_ban_rounds);
        if (m.local_steps > 0)
            printf("\n  local steps    %lld inner steps per sync, outer Nesterov lr %g momentum %g, pseudo-gradient "
                   "codec %s", (long long)m.local_steps, m.outer_lr, m.outer_momentum,
                   dl_codec_name(m.outer_compression));
        printf("\n  precisions     ");
        for (int pr = 0; pr < 8; pr++)
            if (m.precisions & (1u << pr)) printf("%s ", dl_precision_name((dl_precision)pr));
        printf("(default %s)\n", m.precision_default);
    }
    dl_manifest_free(&m);
    return rc;
}

int cmd_run(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help(argc < 2 ? stderr : stdout);
        return argc < 2 ? DL_EXIT_USAGE : DL_EXIT_OK;
    }
    if (!strcmp(argv[1], "init")) return run_init(argc - 1, argv + 1);
    if (!strcmp(argv[1], "show")) return run_show(argc - 1, argv + 1);
    fprintf(stderr, "dedloc run: unknown action '%s' (init or show)\n", argv[1]);
    return DL_EXIT_USAGE;
}
