/* dedloc train: one peer trains ALBERT on a text stream, no network. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "cli/swarm_args.h"
#include "dedloc/collab.h"
#include "dedloc/data.h"
#include "dedloc/device.h"
#include "dedloc/model.h"
#include "dedloc/text.h"
#include "dedloc/train.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc train --data SOURCE [options]\n\n"
            "Trains ALBERT (MLM + sentence order) on one device: micro-batches of --batch\n"
            "sequences are accumulated until --target-batch samples, then one LAMB step runs\n"
            "on the host over the fp32 master weights, and the weights go back to the device.\n"
            "With --checkpoint-dir, a run resumes from the newest valid checkpoint there,\n"
            "with the settings it was started with (options given now override them).\n\n"
            "model and data:\n"
            "  --model M            tiny (default), sahajbert, a config.json, or a Hugging Face\n"
            "                       model folder (config.json + model.safetensors: its weights\n"
            "                       are the starting point)\n"
            "  --tokenizer FILE     tokenizer.json (default: the built-in Bengali demo tokenizer)\n"
            "  --data SOURCE        text / JSON-lines file (.gz ok), shard folder, or http(s):// URL;\n"
            "                       beside --manifest: this machine's own copy of the run's data\n"
            "  --ca-file FILE       https data: trust the PEM CA certificates in FILE, not the system's\n"
            "  --insecure-tls       https data without certificate checks (anyone on the path can\n"
            "                       alter the data; warned)\n"
            "  --batch B|auto       sequences per micro-batch (8); auto: the largest that fits the\n"
            "                       device's memory (estimated per micro-batch: weights, gradients,\n"
            "                       activations of every layer; less a safety margin of a tenth)\n"
            "  --max-device-memory MB  device memory the model may use (implies --batch auto unless\n"
            "                       --batch is given)\n"
            "  --recompute          keep only each layer's input in the forward pass and recompute its\n"
            "                       activations in the backward pass: a fraction of the activation\n"
            "                       memory (sahajbert at --seq 512 on a 4 GB card) for ~1/3 more compute\n"
            "  --seq T              tokens per sequence (tiny 128, otherwise 512)\n"
            "  --shuffle-buffer N   examples in the shuffle buffer (10000)\n"
            "  --seed K             seed of the initial weights and of the data stream (0)\n"
            "  --peer-seed K        this peer's data order (0)\n"
            "optimization (sahajBERT's recipe; tiny scales it down):\n"
            "  --target-batch N     samples per optimizer step (tiny 32, otherwise 4096); whole\n"
            "                       micro-batches are accumulated, so a step takes at least --batch\n"
            "  --max-steps S        optimizer steps to reach (tiny 300, otherwise 125000)\n"
            "  --max-minutes M      also stop (and save) after the first step past M minutes\n"
            "  --optimizer O        lamb (default) or adamw\n"
            "  --lr X               peak learning rate (tiny: 0.1 with lamb, 0.005 with adamw;\n"
            "                       otherwise 0.00176)\n"
            "  --warmup-steps N     linear warmup (tiny 10%% of --max-steps, otherwise 5000)\n"
            "  --total-steps N      where the linear decay reaches 0 (tiny --max-steps, otherwise 125000)\n"
            "  --weight-decay X     (0.01; never on biases and LayerNorm weights)\n"
            "  --max-grad-norm X    global gradient clipping (1.0; 0 disables)\n"
            "  --precision P        fp32 (default), fp16 (half storage, dynamic loss scaling) or bf16\n"
            "  --device D           OpenCL device: index or part of its name (default: first GPU,\n"
            "                       else the first device; see dedloc devices)\n"
            "output:\n"
            "  --checkpoint-dir DIR checkpoints (checkpoint-<step>.safetensors, docs/checkpoint.md)\n"
            "  --save-every S       steps between checkpoints (100; 0: only at the end)\n"
            "  --keep N             newest checkpoints kept, older ones deleted (3; 0 keeps them all)\n"
            "  --resume FILE        continue from this checkpoint file instead of the newest\n"
            "  --replay-data        on resuming, re-read the data stream up to the checkpoint instead\n"
            "                       of opening it at the position the checkpoint recorded (for a\n"
            "                       source that changed since; the batches then differ)\n"
            "  --log FILE           JSON lines, one per optimizer step: step, loss, mlm_loss, sop_loss,\n"
            "                       lr, samples, samples_per_second, grad_norm, loss_scale, param_hash\n"
            "  --quiet              no progress line\n"
            "  --synthetic-compute S  no device and no data: a micro-batch sleeps S seconds and yields a\n"
            "                       full-size pseudo-random gradient (measures the network alone)\n\n");
    cli_swarm_help(out);
    fprintf(out,
            "\nThe checkpoint folder and the log are checked at start (a test write); a save that\n"
            "fails later (disk full) does not stop training: the last good checkpoint stays, the\n"
            "failure is reported and the next save point tries again.\n"
            "Progress goes to stderr: one live line on a terminal, moving with every micro-batch\n"
            "(samples accumulated / target, samples/s, time to the next step); otherwise a line\n"
            "per step, and one per 30 s while a step accumulates.\n"
            "SIGINT / SIGTERM stop at the next micro-batch: the state after the last complete\n"
            "step is saved to --checkpoint-dir and the exit status is 0. Without --checkpoint-dir,\n"
            "or for a swarm peer stopped before the swarm's state arrived, nothing is saved, the\n"
            "message says so and the exit status is 130. A second signal ends the program at once.\n"
            "exit status: 0 done (or stopped and saved), 1 failure (also: the final checkpoint or a\n"
            "log record could not be written), 2 usage, 130 stopped unsaved\n");
}

enum {
    OPT_MODEL = 256, OPT_TOKENIZER, OPT_DATA, OPT_BATCH, OPT_SEQ, OPT_TARGET, OPT_MAX_STEPS, OPT_PRECISION,
    OPT_CKDIR, OPT_KEEP, OPT_LOG, OPT_SEED, OPT_PEER_SEED, OPT_DEVICE, OPT_LR, OPT_WARMUP, OPT_TOTAL, OPT_WD,
    OPT_CLIP, OPT_OPTIMIZER, OPT_SAVE_EVERY, OPT_RESUME, OPT_SHUFFLE, OPT_QUIET, OPT_MAX_MINUTES, OPT_CA_FILE, OPT_INSECURE_TLS,
    OPT_SYNTHETIC, OPT_RECOMPUTE, OPT_MAX_DEVICE_MEMORY, OPT_REPLAY_DATA, OPT_HELP, OPT_COUNT
};

typedef struct {
    const char *model, *tokenizer, *data, *precision, *ckdir, *log, *device, *optimizer, *resume;
    const char *ca_file; /* TLS settings are this machine's, never stored in the run settings */
    bool insecure_tls;
    long long batch, seq, target, max_steps, keep, seed, peer_seed, warmup, total, save_every, shuffle;
    double lr, wd, clip, max_minutes, synthetic;
    long long max_device_mb;
    bool quiet, recompute, replay_data;
    bool data_from_manifest;           /* a->data is the manifest's, not given */
    struct cli_swarm_args swarm;
    bool given[OPT_COUNT];
} train_args;

static volatile sig_atomic_t stop_flag;
/* What the first signal answers: whether anything will be saved, and where
 * (written before the handler is installed; a handler cannot format). */
static char stop_ack[4400];
static size_t stop_ack_len;

static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
    /* Said at once: the current micro-batch may take minutes. write() is
     * async-signal-safe; its result does not matter here. */
    ssize_t ignored = write(STDERR_FILENO, stop_ack, stop_ack_len);
    (void)ignored;
}

static void set_stop_ack(const char *ckdir) {
    int n = ckdir ? snprintf(stop_ack, sizeof stop_ack, "\ndedloc train: stopping after this micro-batch; the last "
                             "complete step will be saved in %s. Ctrl-C again to quit now\n", ckdir)
                  : snprintf(stop_ack, sizeof stop_ack, "\ndedloc train: stopping after this micro-batch; nothing "
                             "will be saved (no --checkpoint-dir: give one to keep the progress and resume). "
                             "Ctrl-C again to quit now\n");
    stop_ack_len = n < 0 ? 0 : (size_t)n < sizeof stop_ack ? (size_t)n : sizeof stop_ack - 1;
}

/* --batch B|auto: auto (0) is chosen from the device's memory. */
static int set_batch(void *settings, const char *arg) {
    train_args *a = settings;
    if (!strcmp(arg, "auto")) {
        a->batch = 0;
        return 0;
    }
    return cli_parse_llong(arg, 1, 1 << 16, &a->batch);
}

#define T_FIELD(f) offsetof(train_args, f)
#define T_MAX_SEED ((double)((1LL << 53) - 1))
/* In the order getopt_long lists the candidates of an ambiguous prefix. */
static const struct cli_opt train_opts[] = {
    {"model", OPT_MODEL, CLI_OPT_STRING, T_FIELD(model), 0, 0, NULL},
    {"tokenizer", OPT_TOKENIZER, CLI_OPT_STRING, T_FIELD(tokenizer), 0, 0, NULL},
    {"data", OPT_DATA, CLI_OPT_STRING, T_FIELD(data), 0, 0, NULL},
    {"batch", OPT_BATCH, CLI_OPT_SETTER, 0, 1, 1 << 16, set_batch},
    {"seq", OPT_SEQ, CLI_OPT_LLONG, T_FIELD(seq), 8, 1 << 16, NULL},
    {"target-batch", OPT_TARGET, CLI_OPT_LLONG, T_FIELD(target), 1, (double)(1LL << 40), NULL},
    {"max-steps", OPT_MAX_STEPS, CLI_OPT_LLONG, T_FIELD(max_steps), 0, (double)(1LL << 40), NULL},
    {"precision", OPT_PRECISION, CLI_OPT_STRING, T_FIELD(precision), 0, 0, NULL},
    {"checkpoint-dir", OPT_CKDIR, CLI_OPT_STRING, T_FIELD(ckdir), 0, 0, NULL},
    {"keep", OPT_KEEP, CLI_OPT_LLONG, T_FIELD(keep), 0, 1 << 20, NULL},
    {"log", OPT_LOG, CLI_OPT_STRING, T_FIELD(log), 0, 0, NULL},
    {"seed", OPT_SEED, CLI_OPT_LLONG, T_FIELD(seed), 0, T_MAX_SEED, NULL},
    {"peer-seed", OPT_PEER_SEED, CLI_OPT_LLONG, T_FIELD(peer_seed), 0, T_MAX_SEED, NULL},
    {"device", OPT_DEVICE, CLI_OPT_STRING, T_FIELD(device), 0, 0, NULL},
    {"lr", OPT_LR, CLI_OPT_DOUBLE, T_FIELD(lr), 1e-12, 10, NULL},
    {"warmup-steps", OPT_WARMUP, CLI_OPT_LLONG, T_FIELD(warmup), 0, (double)(1LL << 40), NULL},
    {"total-steps", OPT_TOTAL, CLI_OPT_LLONG, T_FIELD(total), 1, (double)(1LL << 40), NULL},
    {"weight-decay", OPT_WD, CLI_OPT_DOUBLE, T_FIELD(wd), 0, 10, NULL},
    {"max-grad-norm", OPT_CLIP, CLI_OPT_DOUBLE, T_FIELD(clip), 0, 1e9, NULL},
    {"optimizer", OPT_OPTIMIZER, CLI_OPT_STRING, T_FIELD(optimizer), 0, 0, NULL},
    {"save-every", OPT_SAVE_EVERY, CLI_OPT_LLONG, T_FIELD(save_every), 0, (double)(1LL << 40), NULL},
    {"resume", OPT_RESUME, CLI_OPT_STRING, T_FIELD(resume), 0, 0, NULL},
    {"shuffle-buffer", OPT_SHUFFLE, CLI_OPT_LLONG, T_FIELD(shuffle), 1, 1 << 24, NULL},
    {"quiet", OPT_QUIET, CLI_OPT_FLAG, T_FIELD(quiet), 0, 0, NULL},
    {"max-minutes", OPT_MAX_MINUTES, CLI_OPT_DOUBLE, T_FIELD(max_minutes), 0, 1e9, NULL},
    {"ca-file", OPT_CA_FILE, CLI_OPT_STRING, T_FIELD(ca_file), 0, 0, NULL},
    {"insecure-tls", OPT_INSECURE_TLS, CLI_OPT_FLAG, T_FIELD(insecure_tls), 0, 0, NULL},
    {"synthetic-compute", OPT_SYNTHETIC, CLI_OPT_DOUBLE, T_FIELD(synthetic), 0, 3600, NULL},
    {"recompute", OPT_RECOMPUTE, CLI_OPT_FLAG, T_FIELD(recompute), 0, 0, NULL},
    {"replay-data", OPT_REPLAY_DATA, CLI_OPT_FLAG, T_FIELD(replay_data), 0, 0, NULL},
    {"max-device-memory", OPT_MAX_DEVICE_MEMORY, CLI_OPT_LLONG, T_FIELD(max_device_mb), 1, (double)(1LL << 30), NULL},
    {"help", OPT_HELP, CLI_OPT_OTHER, 0, 0, 0, NULL},
};
enum { N_TRAIN_OPTS = sizeof train_opts / sizeof train_opts[0] };

/* What a bad value of e prints: its range, in the kind of number it takes. */
static void bad_value(const struct cli_opt *e, const char *arg) {
    const char *unit = e->id == OPT_MAX_DEVICE_MEMORY ? " (MiB)" : "";
    if (e->kind == CLI_OPT_DOUBLE)
        fprintf(stderr, "dedloc train: --%s%s must be a number in [%g, %g], got '%s'\n", e->name, unit, e->lo, e->hi,
                arg);
    else
        fprintf(stderr, "dedloc train: --%s%s must be an integer in [%lld, %lld], got '%s'\n", e->name, unit,
                (long long)e->lo, (long long)e->hi, arg);
}

static int parse_args(int argc, char **argv, train_args *a) {
    struct option all[N_TRAIN_OPTS + CLI_SWARM_MAX_OPTS + 1];
    size_t n_all = cli_opt_fill(train_opts, N_TRAIN_OPTS, all);
    for (const struct option *so = cli_swarm_options(); so->name && n_all < N_TRAIN_OPTS + CLI_SWARM_MAX_OPTS; so++)
        all[n_all++] = *so;
    memset(&all[n_all], 0, sizeof all[n_all]);
    memset(a, 0, sizeof *a);
    cli_swarm_args_default(&a->swarm);
    a->model = "tiny";
    a->precision = "fp32";
    a->optimizer = "lamb";
    a->batch = 8;
    a->keep = 3;
    a->save_every = 100;
    a->shuffle = 10000;
    a->wd = 0.01;
    a->clip = 1.0;
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", all, "train")) != -1) {
        int sw = cli_swarm_option(&a->swarm, c, optarg, "train");
        if (sw < 0) {
            fprintf(stderr, "see 'dedloc train --help'\n");
            return -1;
        }
        if (sw == 0) continue;
        if (c >= OPT_MODEL && c < OPT_COUNT) a->given[c] = true;
        if (c == 'h' || c == OPT_HELP) {
            help(stdout);
            return 1;
        }
        const struct cli_opt *e = cli_opt_find(train_opts, N_TRAIN_OPTS, c);
        if (!e || cli_opt_assign(e, a, optarg)) {
            if (e) bad_value(e, optarg);
            fprintf(stderr, "see 'dedloc train --help'\n");
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc train: unexpected argument '%s'; see 'dedloc train --help'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* Options not given now are taken from the checkpoint's run settings, so
 * `dedloc train --checkpoint-dir DIR` continues the same run. */
static int adopt_run_settings(train_args *a, const char *run_json, char **owned, int *n_owned) {
    cJSON *run = cJSON_Parse(run_json);
    if (!cJSON_IsObject(run)) {
        cJSON_Delete(run);
        return dl_fail("the checkpoint's run settings are not a JSON object");
    }
    struct { int opt; const char *key; const char **str; long long *num; } fields[] = {
        {OPT_MODEL, "model", &a->model, NULL}, {OPT_TOKENIZER, "tokenizer", &a->tokenizer, NULL},
        {OPT_DATA, "data", &a->data, NULL}, {OPT_PRECISION, "precision", &a->precision, NULL},
        {OPT_BATCH, "batch", NULL, &a->batch}, {OPT_SEQ, "seq", NULL, &a->seq},
        {OPT_TARGET, "target_batch", NULL, &a->target}, {OPT_MAX_STEPS, "max_steps", NULL, &a->max_steps},
        {OPT_SEED, "seed", NULL, &a->seed}, {OPT_PEER_SEED, "peer_seed", NULL, &a->peer_seed},
        {OPT_SHUFFLE, "shuffle_buffer", NULL, &a->shuffle},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (a->given[fields[i].opt]) continue;
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(run, fields[i].key);
        if (fields[i].str && cJSON_IsString(it)) {
            owned[*n_owned] = dl_strdup(it->valuestring);
            *fields[i].str = owned[(*n_owned)++];
            a->given[fields[i].opt] = true;
        } else if (fields[i].num && cJSON_IsNumber(it)) {
            /* The file is untrusted: a NaN or 1e300 cast to an integer is undefined. */
            if (!(it->valuedouble >= -9e15 && it->valuedouble <= 9e15)) {
                cJSON_Delete(run);
                return dl_fail("the checkpoint's run setting '%s' is out of range", fields[i].key);
            }
            *fields[i].num = (long long)it->valuedouble;
            a->given[fields[i].opt] = true;
        }
    }
    cJSON_Delete(run);
    return 0;
}

/* --manifest: the run settings come from it; only this machine's choices
 * (device, precision among those allowed, micro-batch, outputs) stay options.
 * The data source: peer k of a manifest with n sources reads source
 * (peer seed mod n), set once the peer seed is known. */
static int apply_manifest(train_args *a) {
    static const int run_opts[] = {OPT_MODEL, OPT_SEQ, OPT_TARGET, OPT_MAX_STEPS, OPT_OPTIMIZER, OPT_LR,
                                   OPT_WARMUP, OPT_TOTAL, OPT_WD, OPT_CLIP, OPT_SEED, OPT_SHUFFLE};
    static const char *const names[] = {"model", "seq", "target-batch", "max-steps", "optimizer", "lr",
                                        "warmup-steps", "total-steps", "weight-decay", "max-grad-norm", "seed",
                                        "shuffle-buffer"};
    for (size_t i = 0; i < sizeof run_opts / sizeof run_opts[0]; i++)
        if (a->given[run_opts[i]]) {
            fprintf(stderr, "dedloc train: --%s is a run setting: with --manifest it comes from the manifest\n",
                    names[i]);
            return -1;
        }
    if (cli_swarm_load_manifest(&a->swarm, a->tokenizer, "train") || cli_swarm_check_token(&a->swarm, "train") ||
        cli_swarm_load_invite(&a->swarm, "train"))
        return -1;
    const struct dl_manifest *m = &a->swarm.manifest;
    a->model = m->model_preset[0] ? m->model_preset : "manifest";
    a->tokenizer = a->swarm.tokenizer_path;
    /* --data beside a manifest: this machine's copy of the run's data (a
     * volunteer's own, or what `join` was given for a manifest naming a
     * path on the organiser's machine). */
    a->data_from_manifest = !a->given[OPT_DATA];
    if (a->data_from_manifest) a->data = m->data[0];
    a->seq = m->seq;
    a->target = m->target_batch;
    a->max_steps = m->max_steps;
    a->optimizer = m->optimizer;
    a->lr = m->lr;
    a->warmup = m->warmup_steps;
    a->total = m->total_steps;
    a->wd = m->weight_decay;
    a->clip = m->max_grad_norm;
    a->seed = m->seed;
    a->shuffle = m->shuffle_buffer;
    static const int set[] = {OPT_MODEL, OPT_TOKENIZER, OPT_DATA, OPT_SEQ, OPT_TARGET, OPT_MAX_STEPS, OPT_OPTIMIZER,
                              OPT_LR, OPT_WARMUP, OPT_TOTAL, OPT_WD, OPT_CLIP, OPT_SEED, OPT_SHUFFLE};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) a->given[set[i]] = true;
    if (!a->given[OPT_BATCH]) a->batch = m->micro_batch;
    if (!a->given[OPT_PRECISION]) {
        a->precision = m->precision_default;
        a->given[OPT_PRECISION] = true;
    }
    dl_precision p;
    if (dl_precision_parse(a->precision, &p) || !(m->precisions & (1u << p))) {
        fprintf(stderr, "dedloc train: --precision %s is not allowed by the manifest\n", a->precision);
        return -1;
    }
    return 0;
}

static char *run_settings_json(const train_args *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    if (a->tokenizer) cJSON_AddStringToObject(o, "tokenizer", a->tokenizer);
    cJSON_AddStringToObject(o, "data", a->data ? a->data : "");
    cJSON_AddStringToObject(o, "precision", a->precision);
    cJSON_AddNumberToObject(o, "batch", (double)a->batch);
    cJSON_AddNumberToObject(o, "seq", (double)a->seq);
    cJSON_AddNumberToObject(o, "target_batch", (double)a->target);
    cJSON_AddNumberToObject(o, "max_steps", (double)a->max_steps);
    cJSON_AddNumberToObject(o, "seed", (double)a->seed);
    cJSON_AddNumberToObject(o, "peer_seed", (double)a->peer_seed);
    cJSON_AddNumberToObject(o, "shuffle_buffer", (double)a->shuffle);
    if (a->swarm.train.shard_count > 1) {
        /* A swarm peer's position in the stream depends on its share: a
         * resume with another --data-shard re-reads instead of seeking. */
        cJSON_AddNumberToObject(o, "data_shard_index", (double)a->swarm.train.shard_index);
        cJSON_AddNumberToObject(o, "data_shard_count", (double)a->swarm.train.shard_count);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Whether the checkpoint's run read the same share of the stream as this
 * one (--data-shard; a checkpoint without one read all of it). */
static bool same_data_shard(const char *run_json, const train_args *a) {
    cJSON *run = cJSON_Parse(run_json);
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(run, "data_shard_index");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(run, "data_shard_count");
    double was_index = cJSON_IsNumber(i) ? i->valuedouble : 0, was_count = cJSON_IsNumber(k) ? k->valuedouble : 1;
    cJSON_Delete(run);
    int64_t count = a->swarm.train.shard_count > 1 ? a->swarm.train.shard_count : 1;
    int64_t index = count > 1 ? a->swarm.train.shard_index : 0;
    return (was_count <= 1 ? 1.0 : was_count) == (double)count && (was_count <= 1 ? 0.0 : was_index) == (double)index;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* What one run of `dedloc train` holds; train_run_free releases all of it. */
typedef struct {
    train_args a;
    char *owned[16];                /* run settings adopted from the checkpoint */
    int n_owned;
    dl_checkpoint ck;
    bool resuming;
    char ck_path[4096];
    bool synthetic, tiny;
    dl_precision precision;
    dl_opt_kind kind;
    dl_opt_config opt;
    dl_albert_config cfg;
    float *params;                  /* fp32 master weights */
    dl_tokenizer *tok;
    dl_device_backend be;
    dl_synthetic_backend syn;
    bool data_resumed;              /* the stream goes on at the checkpoint's position */
    bool stopped_joining;           /* a swarm peer stopped before the swarm's state arrived */
    dl_train_layout layout;
    char *config_json, *run_json;
} train_run;

/* The steps below return 0 to go on, -1 on a failure whose message
 * dl_error() holds, or DL_EXIT_USAGE once they have said what to change. */

/* 1. A checkpoint to continue (--resume FILE, else the newest in
 * --checkpoint-dir): its model, and its run settings for the options not
 * given now. */
static int resume_checkpoint(train_run *r) {
    train_args *a = &r->a;
    if (a->resume) {
        if (dl_checkpoint_load(a->resume, 0, &r->ck)) return -1;
        snprintf(r->ck_path, sizeof r->ck_path, "%s", a->resume);
        r->resuming = true;
    } else if (a->ckdir) {
        int rc = dl_checkpoint_load_latest(a->ckdir, &r->ck, r->ck_path, sizeof r->ck_path);
        if (rc < 0) return -1;
        r->resuming = rc == 0;
    }
    if (!r->resuming) return 0;
    if (a->given[OPT_MODEL] && !a->swarm.has_manifest)
        DL_WARN("train", "--model %s ignored: a resumed run keeps the checkpoint's model", a->model);
    a->given[OPT_MODEL] = false;
    if (adopt_run_settings(a, r->ck.run_json, r->owned, &r->n_owned)) return -1;
    if (dl_checkpoint_model_config(&r->ck, &r->cfg)) return -1;
    DL_INFO("train", "resuming from %s (step %" PRId64 ")", r->ck_path, r->ck.step);
    return 0;
}

/* The data source, the precision and the optimizer, once the checkpoint's
 * settings are in. */
static int check_choices(train_run *r) {
    train_args *a = &r->a;
    r->synthetic = a->given[OPT_SYNTHETIC];
    if (!a->data && !r->synthetic) {
        fprintf(stderr, "dedloc train: --data SOURCE is required; see 'dedloc train --help'\n");
        return DL_EXIT_USAGE;
    }
    if (dl_precision_parse(a->precision, &r->precision)) {
        fprintf(stderr, "dedloc train: --precision must be fp32, fp16 or bf16, got '%s'\n", a->precision);
        return DL_EXIT_USAGE;
    }
    if (dl_opt_kind_parse(a->optimizer, &r->kind)) {
        fprintf(stderr, "dedloc train: %s\n", dl_error());
        return DL_EXIT_USAGE;
    }
    return 0;
}

/* 2. The model configuration and, from a Hugging Face folder, the initial
 * weights (a resumed run has its configuration from the checkpoint). */
static int load_model(train_run *r) {
    const train_args *a = &r->a;
    r->tiny = !strcmp(a->model, "tiny");
    if (r->resuming) return 0;
    if (a->swarm.manifest.model_config_json) {
        const char *j = a->swarm.manifest.model_config_json;
        return dl_albert_config_parse(j, strlen(j), "the manifest's model", &r->cfg) ? -1 : 0;
    }
    if (is_dir(a->model)) return dl_albert_load_hf(a->model, &r->cfg, &r->params) ? -1 : 0;
    if (dl_albert_config_preset(a->model, &r->cfg) == 0) return 0;
    dl_clear_error();
    return dl_albert_config_load(a->model, &r->cfg) ? -1 : 0;
}

/* Sequence length, target batch, steps and micro-batch: the defaults of the
 * model's size where not given. */
static int settle_sizes(train_run *r) {
    train_args *a = &r->a;
    if (!a->given[OPT_SEQ]) a->seq = r->tiny ? 128 : 512;
    if (a->seq > r->cfg.max_position_embeddings) {
        if (a->given[OPT_SEQ])
            DL_WARN("train", "--seq %lld exceeds the model's %d positions; using %d", a->seq,
                    r->cfg.max_position_embeddings, r->cfg.max_position_embeddings);
        a->seq = r->cfg.max_position_embeddings;
    }
    if (!a->given[OPT_TARGET]) a->target = r->tiny ? 32 : 4096;
    if (!a->given[OPT_MAX_STEPS]) a->max_steps = r->tiny ? 300 : 125000;
    if (a->given[OPT_MAX_DEVICE_MEMORY] && !a->given[OPT_BATCH]) a->batch = 0;
    if (a->batch == 0 && r->synthetic) {
        fprintf(stderr, "dedloc train: --batch auto needs a device; give --batch with --synthetic-compute\n");
        return DL_EXIT_USAGE;
    }
    if (a->batch > 0 && a->target < a->batch)
        DL_WARN("train", "--target-batch %lld is smaller than --batch %lld: micro-batches are whole, so each step "
                "takes %lld samples; pass --batch %lld for steps of %lld", a->target, a->batch, a->batch, a->target,
                a->target);
    return 0;
}

/* A swarm peer: the swarm settings checked against the target batch, this
 * peer's data order and, from a manifest of several sources, its source. */
static int settle_swarm(train_run *r) {
    train_args *a = &r->a;
    if (!a->swarm.any) return 0;
    if (cli_swarm_finish(&a->swarm, "train", (double)a->target)) return DL_EXIT_USAGE;
    if (!a->given[OPT_PEER_SEED] && !r->resuming && a->swarm.train.shard_count <= 1) {
        /* Each peer of a swarm reads the stream in its own order. 53 bits:
         * the run settings keep it as a JSON number, exact only up to 2^53,
         * and a resumed run must read back the same seed. */
        a->peer_seed = (long long)(dl_hash64(&(double){dl_wall_time()}, sizeof(double), (uint64_t)getpid()) >> 11);
        DL_INFO("train", "peer seed %lld (the data order of this peer)", a->peer_seed);
    }
    if (a->swarm.has_manifest && a->data_from_manifest && a->swarm.manifest.num_data > 1) {
        a->data = a->swarm.manifest.data[(unsigned long long)a->peer_seed % a->swarm.manifest.num_data];
        DL_INFO("train", "data source %s (one of the manifest's %zu, by the peer seed)", a->data,
                a->swarm.manifest.num_data);
    }
    return 0;
}

/* The optimizer: the recipe's defaults, then the options given; a resumed
 * run keeps the checkpoint's settings except those given now. */
static int settle_optimizer(train_run *r) {
    const train_args *a = &r->a;
    r->opt = cli_train_opt_defaults(r->tiny, r->kind, a->max_steps);
    if (a->given[OPT_LR]) r->opt.lr = a->lr;
    r->opt.weight_decay = a->wd;
    r->opt.max_grad_norm = a->clip;
    if (a->given[OPT_TOTAL]) r->opt.total_steps = a->total;
    if (a->given[OPT_WARMUP]) r->opt.warmup_steps = a->warmup;
    if (!r->resuming) return 0;
    /* The trainer continues with the optimizer settings stored in the
     * checkpoint; the ones given now override them (as --help says). */
    dl_opt_config *kept = &r->ck.opt_config;
    if (a->given[OPT_OPTIMIZER] && kept->kind != r->kind) {
        fprintf(stderr, "dedloc train: --optimizer %s: the checkpoint was trained with %s and its moments "
                        "belong to it; resume without --optimizer\n", a->optimizer, dl_opt_kind_name(kept->kind));
        return DL_EXIT_USAGE;
    }
    if (a->given[OPT_LR]) kept->lr = a->lr;
    if (a->given[OPT_WD]) kept->weight_decay = a->wd;
    if (a->given[OPT_CLIP]) kept->max_grad_norm = a->clip;
    if (a->given[OPT_TOTAL]) kept->total_steps = a->total;
    if (a->given[OPT_WARMUP]) kept->warmup_steps = a->warmup;
    if (a->max_steps > kept->total_steps)
        DL_WARN("train", "--max-steps %lld is past the schedule's end (total steps %" PRId64
                "): later steps run at learning rate 0; pass --total-steps to extend the schedule",
                a->max_steps, kept->total_steps);
    return 0;
}

/* 3a. --synthetic-compute: no device, no data; the layout from the model. */
static int open_synthetic(train_run *r) {
    dl_param_layout pl;
    if (dl_param_layout_build(&r->cfg, &pl)) return -1;
    int lrc = dl_train_layout_from_model(&pl, &r->layout);
    dl_param_layout_free(&pl);
    if (lrc) return -1;
    dl_synthetic_backend_init(&r->syn, r->layout.total, r->a.synthetic, (int)r->a.batch, (uint64_t)r->a.peer_seed + 1);
    return 0;
}

/* The data stream's settings; returns whether it is to continue at the
 * checkpoint's recorded position (no re-reading, whatever the step). */
static bool data_config(const train_run *r, dl_data_config *dc) {
    const train_args *a = &r->a;
    dl_data_config_default(dc);
    dc->source = a->data;
    dc->batch_size = (int)a->batch;
    dc->max_seq_len = (int)a->seq;
    dc->seed = (uint64_t)a->seed;
    dc->peer_seed = (uint64_t)a->peer_seed;
    dc->shuffle_buffer = (int)a->shuffle;
    dc->loop = true;
    dc->tls_ca_file = a->ca_file;
    dc->tls_insecure = a->insecure_tls;
    bool seek_data = r->resuming && r->ck.data_state && !a->replay_data;
    if (seek_data && a->swarm.any && !same_data_shard(r->ck.run_json, a)) {
        DL_WARN("train", "%s was written for another --data-shard: its data position does not apply; the "
                "stream is re-read up to this peer's position", r->ck_path);
        seek_data = false;
    }
    if (seek_data) {
        dc->resume_state = r->ck.data_state;
        dc->resume_state_size = r->ck.data_state_size;
    }
    return seek_data;
}

/* A data source that fails to open, named by the run manifest: the error
 * says where the name came from, since the volunteer never typed it
 * ("data source bn.txt (from the run manifest M): No such file ..."). */
static void name_manifest_source(const train_args *a) {
    char said[4200];
    int n = snprintf(said, sizeof said, "data source %s", a->data);
    char *err = dl_strdup(dl_error());
    if (!err) return;
    const char *rest = n > 0 && strncmp(err, said, (size_t)n) == 0 ? err + n : NULL;
    const char *advice = cli_data_is_url(a->data) ? ""
                         : "; the manifest names a path on its organiser's machine: ask for a URL every peer can "
                           "reach (dedloc serve-data), or pass --data with your own copy";
    if (rest) dl_fail("%s (from the run manifest %s)%s%s", said, a->swarm.manifest_path, rest, advice);
    else dl_fail("the data source %s (from the run manifest %s): %s%s", a->data, a->swarm.manifest_path, err, advice);
    free(err);
}

/* 3b. Tokenizer, data stream, device and model. */
static int open_device(train_run *r) {
    train_args *a = &r->a;
    if (a->tokenizer ? dl_tokenizer_load(a->tokenizer, &r->tok) : dl_tokenizer_load_demo(&r->tok)) return -1;
    if ((size_t)r->cfg.vocab_size < dl_tokenizer_vocab_size(r->tok))
        return dl_fail("the tokenizer has %zu pieces but the model only %d embeddings",
                       dl_tokenizer_vocab_size(r->tok), r->cfg.vocab_size);
    dl_data_config dc;
    bool seek_data = data_config(r, &dc);
    dl_model_options mo = {.max_batch = (int)a->batch, .max_seq = (int)a->seq,
                           .precision = r->precision, .recompute = a->recompute};
    /* An automatic micro-batch need not exceed the target batch. */
    int limit = a->target < 4096 ? (int)a->target : 4096, used = 0;
    int opened = dl_device_backend_open_with(&r->be, &dc, r->tok, a->device, &r->cfg, &mo, a->max_device_mb, limit,
                                             &used);
    if (opened && seek_data && a->swarm.any) {
        /* A swarm peer's share of the stream is its own: rather than stop
         * a volunteer, it re-reads (what --replay-data does). */
        DL_WARN("train", "the data stream cannot continue where %s left it (%s): re-reading it from the start "
                "up to this peer's position instead", r->ck_path, dl_error());
        dl_clear_error();
        seek_data = false;
        dc.resume_state = NULL;
        dc.resume_state_size = 0;
        opened = dl_device_backend_open_with(&r->be, &dc, r->tok, a->device, &r->cfg, &mo, a->max_device_mb, limit,
                                             &used);
    }
    if (opened) {
        if (seek_data)
            dl_fail_context("the data stream cannot continue where %s left it; --replay-data re-reads "
                            "it from the start instead", r->ck_path);
        else if (a->data_from_manifest)
            name_manifest_source(a);
        return -1;
    }
    r->data_resumed = seek_data;
    a->batch = used;
    const dl_param_layout *ml = dl_model_layout(r->be.model);
    if (r->precision == DL_PRECISION_FP16)
        DL_INFO("train", "fp16: GEMMs compute in %s", dl_model_compute_name(r->be.model));
    return dl_train_layout_from_model(ml, &r->layout) ? -1 : 0;
}

/* 3. The backend, then the initial weights where neither a checkpoint nor a
 * Hugging Face folder gave them. */
static int open_backend(train_run *r) {
    if (r->synthetic ? open_synthetic(r) : open_device(r)) return -1;
    if (!r->params) {
        r->params = dl_malloc(dl_mul_size(r->layout.total, sizeof(float)));
        if (!r->params || dl_albert_init_params(&r->cfg, (uint64_t)r->a.seed, r->params)) return -1;
    }
    char desc[256];
    dl_albert_config_describe(&r->cfg, desc, sizeof desc);
    DL_INFO("train", "model: %s; %zu parameters; micro-batch %lld x %lld, target batch %lld, %s, %s",
            desc, r->layout.total, r->a.batch, r->a.seq, r->a.target, dl_precision_name(r->precision),
            dl_opt_kind_name(r->kind));
    return 0;
}

/* 4. Train, alone or as a peer of a swarm; SIGINT and SIGTERM stop at the
 * next micro-batch meanwhile. */
static int run_training(train_run *r, dl_trainer_result *res) {
    train_args *a = &r->a;
    if (dl_albert_config_to_json(&r->cfg, &r->config_json)) return -1;
    r->run_json = run_settings_json(a);
    dl_trainer_options to = {
        .target_batch = a->target, .max_steps = a->max_steps, .max_seconds = a->max_minutes * 60.0,
        .loss_scaling = r->precision == DL_PRECISION_FP16,
        .checkpoint_dir = a->ckdir, .keep = (int)a->keep, .save_every = a->save_every, .log_path = a->log,
        .progress = a->quiet ? NULL : stderr, .stop = &stop_flag, .model_config_json = r->config_json,
        .run_json = r->run_json, .data_seed = (uint64_t)a->seed, .peer_seed = (uint64_t)a->peer_seed,
    };
    set_stop_ack(a->ckdir);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends the program at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    dl_trainer_backend backend = r->synthetic ? dl_synthetic_backend_callbacks(&r->syn)
                                              : dl_device_backend_callbacks(&r->be);
    backend.data_resumed = r->data_resumed;
    const dl_checkpoint *resume = r->resuming ? &r->ck : NULL;
    int rc;
    if (a->swarm.any) {
        a->swarm.train.base = to;
        /* What monitors show of this peer (its signed metrics record). */
        const dl_device_info *di = r->synthetic || !r->be.device ? NULL : dl_device_get_info(r->be.device);
        a->swarm.train.device_name = di ? di->name : "synthetic compute";
        a->swarm.train.device_vendor = di ? di->vendor : "";
        a->swarm.train.precision_name = dl_precision_name(r->precision);
        struct dl_collab_train_result cres;
        rc = cli_swarm_run(&a->swarm, &a->swarm.train, &r->opt, &r->layout, r->params, resume, &backend, &cres);
        *res = cres.base;
        r->stopped_joining = cres.stopped_joining;
        if (!rc)
            fprintf(stderr, "dedloc train: %" PRId64 " rounds, %" PRId64 " failed, %" PRId64
                    " state downloads, %" PRId64 " heals; compute %.1f s, waiting %.1f s; param_hash %s\n",
                    cres.rounds_ok, cres.rounds_failed, cres.state_downloads, cres.heals, cres.compute_s,
                    cres.wait_s, cres.param_hash);
    } else {
        rc = dl_trainer_run(&to, &r->opt, &r->layout, r->params, resume, &backend, res);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    return rc ? -1 : 0;
}

/* The closing line, and the exit status: a stop without a checkpoint to
 * save to, a final save or a log record that failed count against it. */
static int report(const train_run *r, const dl_trainer_result *res) {
    char loss_text[128] = "no optimizer step completed"; /* first/last loss exist only after a step */
    if (res->steps_this_run > 1)
        snprintf(loss_text, sizeof loss_text, res->loss_window > 1 ? "loss %.4f -> %.4f (mean of the first %d steps "
                 "-> of the last %d)" : "loss %.4f -> %.4f (first step -> last step)",
                 (double)res->first_loss, (double)res->last_loss, res->loss_window, res->loss_window);
    else if (res->steps_this_run == 1)
        snprintf(loss_text, sizeof loss_text, "loss %.4f (one step)", (double)res->first_loss);
    fprintf(stderr,
            "dedloc train: %s at step %" PRId64 " (%" PRId64 " this run); %s; %.1f samples/s%s; "
            "weights %s%s%s\n",
            res->interrupted ? "stopped" : res->time_limit ? "time limit reached" : "done", res->steps,
            res->steps_this_run, loss_text, res->samples_per_second,
            r->a.swarm.any ? " (this peer's, over its compute and rounds)" : "", res->param_hash,
            res->checkpoint[0] ? "; saved " : "", res->checkpoint);
    /* What a stop kept, said plainly: a volunteer decides from it whether
     * the time was lost. */
    bool unsaved = res->interrupted && (!r->a.ckdir || r->stopped_joining);
    if (res->interrupted && !r->a.ckdir)
        fprintf(stderr, "dedloc train: nothing was saved (no --checkpoint-dir); give --checkpoint-dir DIR next time "
                "to keep the progress and resume from it\n");
    else if (res->interrupted && r->stopped_joining)
        fprintf(stderr, "dedloc train: stopped before the swarm's state arrived: no checkpoint was written (it "
                "would hold only the initial weights)\n");
    int exit_code = unsaved ? 130 : DL_EXIT_OK;
    if (res->last_save_failed) {
        if (res->checkpoint[0])
            fprintf(stderr, "dedloc train: the final checkpoint could not be saved (%d failed save%s); the last good "
                    "one is %s (step %" PRId64 "): the steps after it are lost\n", res->save_failures,
                    res->save_failures == 1 ? "" : "s", res->checkpoint, res->checkpoint_step);
        else
            fprintf(stderr, "dedloc train: no checkpoint could be saved in this run (%d failed save%s); see the "
                    "errors above\n", res->save_failures, res->save_failures == 1 ? "" : "s");
        exit_code = DL_EXIT_FAILURE;
    }
    if (res->log_failed) {
        fprintf(stderr, "dedloc train: the log %s misses records (a write failed)\n", r->a.log);
        exit_code = DL_EXIT_FAILURE;
    }
    return exit_code;
}

static void train_run_free(train_run *r) {
    free(r->config_json);
    cJSON_free(r->run_json);
    dl_train_layout_free(&r->layout);
    dl_device_backend_close(&r->be);
    if (r->tok) dl_tokenizer_free(r->tok);
    free(r->params);
    dl_checkpoint_free(&r->ck);
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    cli_swarm_args_free(&r->a.swarm);
}

int cmd_train(int argc, char **argv) {
    train_run r;
    memset(&r, 0, sizeof r);
    int parsed = parse_args(argc, argv, &r.a);
    if (parsed) return parsed > 0 ? DL_EXIT_OK : DL_EXIT_USAGE;
    if (r.a.swarm.manifest_path ? apply_manifest(&r.a) : cli_swarm_load_invite(&r.a.swarm, "train")) {
        cli_swarm_args_free(&r.a.swarm);
        return DL_EXIT_USAGE;
    }
    /* Outputs first: a folder that cannot take a checkpoint is found now,
     * not at the first save hours into the run. */
    if (dl_trainer_check_outputs(r.a.ckdir, r.a.log)) {
        fprintf(stderr, "dedloc train: %s\n", dl_error());
        cli_swarm_args_free(&r.a.swarm);
        return DL_EXIT_FAILURE;
    }
    int status = resume_checkpoint(&r);
    if (!status) status = check_choices(&r);
    if (!status) status = load_model(&r);
    if (!status) status = settle_sizes(&r);
    if (!status) status = settle_swarm(&r);
    if (!status) status = settle_optimizer(&r);
    if (!status) status = open_backend(&r);
    dl_trainer_result res;
    if (!status) status = run_training(&r, &res);
    int exit_code = status > 0 ? status : DL_EXIT_FAILURE;
    if (status < 0) fprintf(stderr, "dedloc train: %s\n", dl_error());
    else if (status == 0) exit_code = report(&r, &res);
    train_run_free(&r);
    return exit_code;
}
