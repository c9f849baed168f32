/* dedloc export: a checkpoint's weights as a Hugging Face model folder. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "dedloc/model.h"
#include "dedloc/text.h"
#include "dedloc/train.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc export --checkpoint FILE|DIR --out DIR [--tokenizer FILE]\n\n"
            "Writes config.json and model.safetensors (F32) into --out, loadable unchanged by\n"
            "transformers' AlbertForPreTraining.from_pretrained, and the tokenizer beside them\n"
            "(tokenizer.json, tokenizer_config.json, special_tokens_map.json), so that\n"
            "AutoTokenizer.from_pretrained(DIR) gives the ids 'dedloc tokenize' gives.\n"
            "--checkpoint is a checkpoint file, or a checkpoint folder (its newest valid\n"
            "checkpoint is used). --tokenizer defaults to the one the checkpoint was trained\n"
            "with (its run settings), else the built-in demo tokenizer.\n"
            "The folder is written under a temporary name and renamed into place: --out is\n"
            "whole or untouched. An existing --out is replaced only if it holds nothing but\n"
            "these files (an earlier export).\n");
}

static const char *const export_files[] = {"config.json", "model.safetensors", "tokenizer.json",
                                           "tokenizer_config.json", "special_tokens_map.json"};

/* An existing --out may be replaced only if it is an earlier export: nothing
 * of the user's is deleted with it. */
static int check_replaceable(const char *out) {
    struct stat st;
    if (lstat(out, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return dl_fail("--out %s exists and is not a folder", out);
    DIR *d = opendir(out);
    if (!d) return dl_fail("cannot read the folder %s", out);
    const char *foreign = NULL;
    struct dirent *e;
    while (!foreign && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        bool ours = false;
        for (size_t i = 0; i < sizeof export_files / sizeof export_files[0]; i++)
            ours = ours || !strcmp(e->d_name, export_files[i]);
        if (!ours) foreign = e->d_name;
    }
    int rc = foreign ? dl_fail("--out %s already holds %s, which is not part of an export; choose another --out "
                               "or empty it", out, foreign)
                     : 0;
    closedir(d);
    return rc;
}

/* The tokenizer.json text: --tokenizer, else the file named in the
 * checkpoint's run settings, else the built-in demo tokenizer. */
static int tokenizer_text(const char *given, const char *run_json, char **owned, const char **text, size_t *len,
                          char *name, size_t name_size) {
    char *from_run = NULL;
    cJSON *run = run_json ? cJSON_Parse(run_json) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(run, "tokenizer");
    if (!given && cJSON_IsString(t)) from_run = dl_strdup(t->valuestring);
    cJSON_Delete(run);
    const char *path = given ? given : from_run;
    int rc = 0;
    if (path) {
        snprintf(name, name_size, "%s", path);
        rc = dl_read_file(path, (size_t)1 << 30, owned, len);
        if (rc && !given) dl_fail_context("the checkpoint was trained with the tokenizer %s; pass --tokenizer FILE", path);
        *text = *owned;
    } else {
        snprintf(name, name_size, "the built-in demo tokenizer");
        *text = dl_text_asset("tokenizer_bn_demo.json", len);
        if (!*text) rc = dl_fail("the built-in demo tokenizer is missing from this binary");
    }
    free(from_run);
    return rc;
}

int cmd_export(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *tokenizer = NULL;
    static const struct option opts[] = {{"checkpoint", required_argument, NULL, 'c'},
                                         {"out", required_argument, NULL, 'o'},
                                         {"tokenizer", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "c:o:t:h", opts, NULL)) != -1) {
        if (c == 'c') from = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 't') tokenizer = optarg;
        else if (c == 'h') {
            help(stdout);
            return DL_EXIT_OK;
        } else {
            help(stderr);
            return DL_EXIT_USAGE;
        }
    }
    if (!from || !out || optind < argc) {
        help(stderr);
        return DL_EXIT_USAGE;
    }
    /* "hf/" names the folder hf: its temporary sibling must not land inside it. */
    char out_name[4096];
    size_t out_len = strlen(out);
    while (out_len > 1 && out[out_len - 1] == '/') out_len--;
    if (out_len == 0 || out_len >= sizeof out_name) {
        fprintf(stderr, "dedloc export: --out '%s' is not a usable folder name\n", out);
        return DL_EXIT_USAGE;
    }
    memcpy(out_name, out, out_len);
    out_name[out_len] = 0;
    out = out_name;
    dl_checkpoint ck;
    char used[4096];
    struct stat st;
    int rc;
    if (stat(from, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = dl_checkpoint_load_latest(from, &ck, used, sizeof used);
        if (rc == 1) dl_fail("no checkpoint in %s", from);
    } else {
        rc = dl_checkpoint_load(from, 0, &ck);
        snprintf(used, sizeof used, "%s", from);
    }
    if (rc) {
        fprintf(stderr, "dedloc export: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    int exit_code = DL_EXIT_FAILURE;
    char tmp[4200] = "", tok_name[4096];
    char *tok_owned = NULL;
    const char *tok_json = NULL;
    size_t tok_len = 0;
    dl_albert_config cfg;
    dl_param_layout layout = {0};
    if (dl_checkpoint_model_config(&ck, &cfg) || dl_param_layout_build(&cfg, &layout))
        goto fail;
    if (layout.total != ck.layout.total || layout.count != ck.layout.count) {
        dl_fail("%s holds %zu parameters in %d tensors; its configuration needs %zu in %d", used, ck.layout.total,
                ck.layout.count, layout.total, layout.count);
        goto fail;
    }
    for (int i = 0; i < layout.count; i++) {
        if (!ck.layout.tensors[i].name || strcmp(ck.layout.tensors[i].name, layout.entries[i].name) != 0 ||
            ck.layout.tensors[i].numel != layout.entries[i].numel) {
            dl_fail("%s: tensor %d is %s, the configuration expects %s", used, i,
                    ck.layout.tensors[i].name ? ck.layout.tensors[i].name : "(unnamed)", layout.entries[i].name);
            goto fail;
        }
    }
    if (tokenizer_text(tokenizer, ck.run_json, &tok_owned, &tok_json, &tok_len, tok_name, sizeof tok_name) ||
        check_replaceable(out))
        goto fail;
    /* Everything goes into a sibling temporary folder (same file system, so
     * the final rename is atomic); a full disk leaves no half export. */
    char *parent_copy = dl_strdup(out);
    if (!parent_copy) goto fail;
    int parent_rc = dl_mkdirs(dirname(parent_copy));
    free(parent_copy);
    if (parent_rc) goto fail;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (dl_remove_tree(tmp) || dl_mkdirs(tmp) || dl_albert_save_hf(tmp, &cfg, ck.params) ||
        dl_tokenizer_save_hf(tok_json, tok_len, cfg.max_position_embeddings, tmp) || dl_replace_dir(tmp, out))
        goto fail;
    tmp[0] = 0;
    char hash[17];
    dl_hash64_hex(dl_hash64(ck.params, ck.layout.total * sizeof(float), 0), hash);
    printf("exported %s (step %lld, weights %s) to %s: config.json, model.safetensors and the tokenizer files "
           "(from %s)\n",
           used, (long long)ck.step, hash, out, tok_name);
    exit_code = DL_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "dedloc export: %s\n", dl_error());
    if (tmp[0] && dl_remove_tree(tmp)) fprintf(stderr, "dedloc export: %s\n", dl_error());
done:
    free(tok_owned);
    dl_param_layout_free(&layout);
    dl_checkpoint_free(&ck);
    return exit_code;
}
