/* The model configuration as JSON text, for checkpoints: the model module
 * writes config.json files, so the text is written through a private
 * temporary folder; reading gets the same validation as any config.json. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"

static int temp_path(char dir[512], char path[600]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, 512, "%s/dedloc_config_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return dl_fail("cannot create a temporary folder (%s): set TMPDIR", dir);
    snprintf(path, 600, "%s/config.json", dir);
    return 0;
}

static void remove_temp(const char *dir, const char *path) {
    unlink(path);
    rmdir(dir);
}

int dl_train_config_to_json(const dl_albert_config *cfg, char **json) {
    char dir[512], path[600];
    *json = NULL;
    if (temp_path(dir, path)) return -1;
    int rc = dl_albert_config_save(path, cfg);
    if (rc == 0) rc = dl_read_file(path, 1 << 20, json, NULL);
    remove_temp(dir, path);
    return rc;
}

int dl_train_config_from_json(const char *json, dl_albert_config *cfg) {
    int rc = dl_albert_config_parse(json, strlen(json), "config.json", cfg);
    return rc ? dl_fail_context("the model configuration in the checkpoint") : 0;
}
