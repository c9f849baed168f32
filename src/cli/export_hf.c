/* A Hugging Face model folder from fp32 weights, written atomically. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/export_hf.h"
#include "dedloc/text.h"
#include "dedloc/util.h"

static const char *const export_files[] = {"config.json", "model.safetensors", "tokenizer.json",
                                           "tokenizer_config.json", "special_tokens_map.json"};

/* An existing export folder may be replaced only if it is an earlier export:
 * nothing of the user's is deleted with it. */
int cli_export_check_out(const char *out) {
    struct stat st;
    if (lstat(out, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return dl_fail("the export folder %s exists and is not a folder", out);
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
    int rc = foreign ? dl_fail("the export folder %s already holds %s, which is not part of an export; choose "
                               "another folder or empty it", out, foreign)
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

int cli_export_hf(const char *out, const dl_albert_config *cfg, const float *params, const char *tokenizer,
                  const char *run_json, char *tok_name, size_t tok_name_size) {
    char *tok_owned = NULL;
    const char *tok_json = NULL;
    size_t tok_len = 0;
    char tmp[4200] = "";
    int rc = -1;
    if (tokenizer_text(tokenizer, run_json, &tok_owned, &tok_json, &tok_len, tok_name, tok_name_size) ||
        cli_export_check_out(out))
        goto done;
    /* Everything goes into a sibling temporary folder (same file system, so
     * the final rename is atomic); a full disk leaves no half export. */
    char *parent_copy = dl_strdup(out);
    if (!parent_copy) goto done;
    int parent_rc = dl_mkdirs(dirname(parent_copy));
    free(parent_copy);
    if (parent_rc) goto done;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (dl_remove_tree(tmp) || dl_mkdirs(tmp) || dl_albert_save_hf(tmp, cfg, params) ||
        dl_tokenizer_save_hf(tok_json, tok_len, cfg->max_position_embeddings, tmp) || dl_replace_dir(tmp, out))
        goto done;
    tmp[0] = 0;
    rc = 0;
done:
    if (tmp[0] && dl_remove_tree(tmp)) DL_WARN("export", "%s", dl_error());
    free(tok_owned);
    return rc;
}
