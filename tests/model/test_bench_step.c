/* `dedloc bench step` runs end to end on a small shape and prints its JSON
 * (figures are not asserted: tests never judge wall-clock time). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
    if (text) {
        CHECK(strstr(text, "\"tokens_per_s\"") != NULL);
        CHECK(strstr(text, "\"model_memory_bytes\"") != NULL);
        CHECK(strstr(text, "\"batch\": 2, \"seq\": 16") != NULL);
        free(text);
    }
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
