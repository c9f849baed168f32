/* The tuning search's pieces (src/device/tune_search.c) without timing a
 * GEMM: the presets are ALBERT's linear layers, every built-in candidate is
 * a parameter set CLBlast accepts, a search whose budget is spent times
 * nothing and says so, and the file dl_tune_store writes holds the figures
 * computed here by hand and is what dl_tune_apply reads at device open. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/device.h"
#include "dedloc/util.h"
#include "dl_test.h"

static char temp_root[] = "/tmp/dedloc-test-tune-XXXXXX";

static void test_presets(void) {
    const dl_tune_preset *p = dl_tune_preset_find("sahajbert");
    CHECK(p && p->nshapes == 3 && p->nshapes <= DL_TUNE_PRESET_SHAPES_MAX);
    /* 8 x 128 = 1024 token rows; hidden 1024, intermediate 4096, weights [out, in] */
    CHECK(p && p->shapes[1].m == 1024 && p->shapes[1].n == 4096 && p->shapes[1].k == 1024);
    CHECK(p && p->shapes[2].m == 1024 && p->shapes[2].n == 1024 && p->shapes[2].k == 4096);
    for (int i = 0; p && i < p->nshapes; i++) CHECK(p->shapes[i].trans_b && !p->shapes[i].trans_a);
    const dl_tune_preset *t = dl_tune_preset_find("tiny");
    CHECK(t && t->nshapes == 4 && !strcmp(t->shapes[3].name, "mlm-decoder") && t->shapes[3].n == 8000);
    CHECK(dl_tune_preset_find("huge") == NULL);
    dl_gemm_shape s = {"x", 3, 5, 7, 2, false, false};
    CHECK(dl_gemm_shape_flops(&s) == 2.0 * 3 * 5 * 7 * 2);
}

static void test_candidates(dl_device *dev) {
    dl_xgemm_config c[8];
    int n = dl_tune_builtin_candidates(c, 8);
    CHECK(n == 6);
    CHECK(dl_tune_builtin_candidates(c, 2) == 2);
    n = dl_tune_builtin_candidates(c, 8);
    char desc[512];
    dl_xgemm_config_describe(&c[0], desc, sizeof desc);
    CHECK_MSG(!strncmp(desc, "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=8 MDIMC=8 MWG=64 ", 51), "'%s'", desc);
    for (int i = 0; i < n; i++) CHECK_MSG(dl_tune_override_xgemm(dev, &c[i]) == 0, "candidate %d: %s", i, dl_error());
    dl_xgemm_config bad = c[0];
    snprintf(bad.names[0], sizeof bad.names[0], "NOSUCH");
    CHECK(dl_tune_override_xgemm(dev, &bad) == -1 && strstr(dl_error(), "CLBlast refused") != NULL);

    /* no time left: nothing is timed, and the progress line says so */
    char path[700];
    snprintf(path, sizeof path, "%s/progress.txt", temp_root);
    FILE *progress = fopen(path, "w+");
    CHECK(progress != NULL);
    if (!progress) return;
    double times[DL_TUNE_PRESET_SHAPES_MAX] = {1, 2, 3, 4};
    int best = dl_tune_time_candidates(dev, dl_tune_preset_find("tiny"), c, n, dl_now() - 1, 0, 10, times,
                                       progress);
    CHECK(best == -1 && times[0] == 1 && times[3] == 4);
    rewind(progress);
    char line[256] = "";
    CHECK(fgets(line, sizeof line, progress) != NULL);
    CHECK_MSG(!strcmp(line, "budget reached: 0 of 6 candidates timed\n"), "'%s'", line);
    fclose(progress);
}

static void test_store(dl_device *dev) {
    const dl_device_info *info = dl_device_get_info(dev);
    const dl_tune_preset *p = dl_tune_preset_find("sahajbert");
    dl_xgemm_config c[1];
    dl_tune_builtin_candidates(c, 1);
    double base[3] = {0.5, 1.0, 2.0}, tuned[3] = {0.25, 0.5, 1.0};
    char path[4096];
    dl_tune_path(info, path, sizeof path);
    CHECK_OK(dl_tune_store(info, p, &c[0], base, tuned, 123, path));
    char *text = NULL;
    CHECK_OK(dl_read_file(path, 1 << 20, &text, NULL));
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(cJSON_IsObject(root));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(root, "model")), "sahajbert"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(root, "driver")), info->driver));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(root, "budget_seconds")) == 123);
    const cJSON *shapes = cJSON_GetObjectItem(root, "shapes");
    CHECK(cJSON_GetArraySize(shapes) == 3);
    /* ffn-up: 2 * 1024 * 4096 * 1024 flops in 1.0 s built-in and 0.5 s tuned */
    const cJSON *up = cJSON_GetArrayItem(shapes, 1);
    double flops = 2.0 * 1024 * 4096 * 1024;
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(up, "name")), "ffn-up"));
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(up, "builtin_gflops")) == flops / 1.0 / 1e9);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(up, "tuned_gflops")) == flops / 0.5 / 1e9);
    const cJSON *params = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "kernels"), 0),
                                              "parameters");
    CHECK(cJSON_GetArraySize(params) == 16);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(params, "MWG")) == 64);
    cJSON_Delete(root);
    free(text);
    bool applied = false;
    CHECK_OK(dl_tune_apply(dev, &applied));
    CHECK(applied);
    remove(path);
}

int main(void) {
    if (!mkdtemp(temp_root)) {
        perror("mkdtemp");
        return 1;
    }
    char cache[600];
    snprintf(cache, sizeof cache, "%s/cache", temp_root);
    setenv("DEDLOC_CACHE_DIR", cache, 1); /* before anything reads dl_cache_dir() */
    test_presets();
    dl_device *dev = NULL;
    CHECK_OK(dl_device_open_ex("0", DL_OPEN_NO_TUNING, &dev));
    if (dev) {
        test_candidates(dev);
        test_store(dev);
        dl_device_close(dev);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", temp_root);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_tune_search");
}
