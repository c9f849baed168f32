/* `dedloc bench step` runs end to end on a small shape and prints its JSON
 * (figures are not asserted: tests never judge wall-clock time). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "dedloc/util.h"
#include "dl_test.h"

int main(void) {
    char dir[] = "/tmp/dedloc_bench_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *dev = getenv("DEDLOC_TEST_DEVICE");
    char cmd[2048], path[256];
    snprintf(path, sizeof path, "%s/out.json", dir);
    snprintf(cmd, sizeof cmd,
             "%s bench step --model tiny --batch 2 --seq 16 --warmup 0 --steps 1 --json %s%s%s >%s",
             DEDLOC_BINARY, dev ? "--device '" : "", dev ? dev : "", dev ? "'" : "", path);
    int status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *text = NULL;
    size_t size;
    CHECK_OK(dl_read_file(path, 1 << 20, &text, &size));
    cJSON *json = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(json != NULL, "bench step --json printed no valid JSON: %s", text ? text : "");
    if (json) {
        /* The shape echoes the request and the counts follow from it; times are
         * only required to be positive and finite. */
        double batch = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "batch"));
        double seq = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "seq"));
        double params = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "parameters"));
        double masked = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "masked"));
        double tokens_per_s = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "tokens_per_s"));
        double flops = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "gemm_flops"));
        double model_bytes = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "model_memory_bytes"));
        double peak_bytes = cJSON_GetNumberValue(cJSON_GetObjectItem(json, "device_peak_bytes"));
        CHECK(batch == 2 && seq == 16);
        CHECK(params == 760194); /* the tiny preset's layout */
        CHECK(masked >= 2 && masked <= 2 * 16);
        CHECK(isfinite(tokens_per_s) && tokens_per_s > 0);
        CHECK(isfinite(flops) && flops > 0);
        CHECK(model_bytes > 0 && peak_bytes >= model_bytes);
        cJSON_Delete(json);
    }
    free(text);
    snprintf(cmd, sizeof cmd, "%s bench step --batch 0 2>/dev/null", DEDLOC_BINARY);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(cmd, sizeof cmd, "%s bench nothing 2>/dev/null", DEDLOC_BINARY);
    status = system(cmd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_bench_step");
}
