/* `dedloc data` and `dedloc serve-data` from the command line: exit codes,
 * and one pass over the Bengali fixture with the demo tokenizer. */
#include <sys/wait.h>

#include "dl_test.h"

static int run(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "DEDLOC_LOG=error '%s' %s 2>/dev/null", DEDLOC_BINARY, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void) {
    char out[65536];
    CHECK(run("data", out, sizeof out) == 2);
    CHECK(run("serve-data", out, sizeof out) == 2);
    CHECK(run("serve-data /tmp --listen nonsense", out, sizeof out) == 2);
    CHECK(run("serve-data /nonexistent/dedloc --listen 127.0.0.1:0", out, sizeof out) == 1);
    CHECK(run("data --help", out, sizeof out) == 0 && strstr(out, "--data SOURCE"));
    CHECK(run("data --data /nonexistent/dedloc --tokenizer " DEDLOC_SOURCE_DIR
              "/assets/tokenizer_bn_demo.json",
              out, sizeof out) == 1);
    int rc = run("data --data " DEDLOC_SOURCE_DIR "/tests/fixtures/data/bn_paragraphs.txt"
                 " --tokenizer " DEDLOC_SOURCE_DIR "/assets/tokenizer_bn_demo.json"
                 " --once --batches 100 --batch 2 --seq 64 --show 1 --json",
                 out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "[CLS]") != NULL);
    CHECK_MSG(strstr(out, "\"documents\": 12,") && strstr(out, "\"passes\": 1,") &&
                  strstr(out, "\"skipped_lines\": 0,"),
              "%s", out);
    return dl_test_finish("test_data_cli");
}
