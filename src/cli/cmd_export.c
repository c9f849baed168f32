/* dedloc export: a checkpoint's weights as a Hugging Face model folder. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "cli/export_hf.h"
#include "dedloc/model.h"
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

int cmd_export(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *tokenizer = NULL;
    static const struct option opts[] = {{"checkpoint", required_argument, NULL, 'c'},
                                         {"out", required_argument, NULL, 'o'},
                                         {"tokenizer", required_argument, NULL, 't'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "c:o:t:h", opts, "export")) != -1) {
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
    char tok_name[4096];
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
    if (cli_export_hf(out, &cfg, ck.params, tokenizer, ck.run_json, tok_name, sizeof tok_name)) goto fail;
    char hash[17];
    dl_hash64_hex(dl_hash64(ck.params, ck.layout.total * sizeof(float), 0), hash);
    printf("exported %s (step %lld, weights %s) to %s: config.json, model.safetensors and the tokenizer files "
           "(from %s)\n",
           used, (long long)ck.step, hash, out, tok_name);
    exit_code = DL_EXIT_OK;
    goto done;
fail:
    fprintf(stderr, "dedloc export: %s\n", dl_error());
done:
    dl_param_layout_free(&layout);
    dl_checkpoint_free(&ck);
    return exit_code;
}
