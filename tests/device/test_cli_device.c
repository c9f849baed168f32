/* device CLI: `dedloc devices`, `dedloc bench gemm` and `dedloc tune` exit
 * codes and machine-readable output (valid JSON with the promised fields). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <sys/wait.h>

#include "dedloc/util.h"
#include "dl_test.h"

/* Runs a shell command line; returns its exit status and its stdout in *out. */
static int run(const char *args, char **out) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", DEDLOC_BINARY, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, used = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + used, 1, cap - used - 1, p)) > 0) used += got;
    if (buf) buf[used] = 0;
    int status = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void) {
    char *text = NULL;
    /* usage errors exit with 2, --help with 0 */
    CHECK(run("bench", NULL) == 2);
    CHECK(run("bench nothing", NULL) == 2);
    CHECK(run("bench gemm --repeat 0", NULL) == 2);
    CHECK(run("bench gemm --shapes no-such-shape", NULL) == 2);
    CHECK(run("bench gemm --help", NULL) == 0);
    CHECK(run("tune --model huge", NULL) == 2);
    CHECK(run("tune --budget-seconds 1", NULL) == 2);
    CHECK(run("tune --help", NULL) == 0);
    CHECK(run("devices --bogus", NULL) == 2);
    CHECK(run("bench gemm --device no-such-device-anywhere", NULL) == 1);

    /* devices --json: an array of objects with the capabilities */
    CHECK(run("devices --json", &text) == 0);
    cJSON *devices = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(cJSON_IsArray(devices) && cJSON_GetArraySize(devices) >= 1, "%s", text);
    const cJSON *first = cJSON_GetArrayItem(devices, 0);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(first, "name")));
    CHECK(cJSON_IsBool(cJSON_GetObjectItem(first, "fp16")));
    cJSON_Delete(devices);
    free(text);

    /* bench gemm --json on one small shape */
    CHECK(run("bench gemm --shapes square-512 --repeat 1 --json", &text) == 0);
    cJSON *bench = text ? cJSON_Parse(text) : NULL;
    CHECK_MSG(cJSON_IsObject(bench), "%s", text);
    const cJSON *shapes = cJSON_GetObjectItem(bench, "shapes");
    CHECK(cJSON_IsArray(shapes) && cJSON_GetArraySize(shapes) == 1);
    const cJSON *s = cJSON_GetArrayItem(shapes, 0);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(s, "name")) &&
          !strcmp(cJSON_GetObjectItem(s, "name")->valuestring, "square-512"));
    const cJSON *untuned = cJSON_GetObjectItem(s, "untuned_gflops");
    CHECK(cJSON_IsNumber(untuned) && untuned->valuedouble > 0);
    const cJSON *tuned = cJSON_GetObjectItem(s, "tuned_gflops");
    CHECK(cJSON_IsNumber(tuned) || cJSON_IsNull(tuned));
    CHECK(cJSON_GetObjectItem(s, "openblas_gflops") != NULL);
    cJSON_Delete(bench);
    free(text);
    return dl_test_finish("test_cli_device");
}
