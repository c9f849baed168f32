/* dedloc tokenize as a program: the demo tokenizer by default, --tokenizer,
 * --input, --pair with the template, stdin, empty lines, exit codes. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dl_test.h"

static char dir[] = "/tmp/dl_tokenize_cli_XXXXXX";

/* Runs a shell command; returns its exit status and its stdout in *out. */
static int run(const char *cmd, char **out) {
    char path[256], full[4096];
    snprintf(path, sizeof(path), "%s/out.txt", dir);
    snprintf(full, sizeof(full), "%s > %s 2>%s/err.txt", cmd, path, dir);
    int st = system(full);
    size_t size;
    *out = NULL;
    if (dl_read_file(path, 1 << 20, out, &size)) *out = dl_strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_text(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    CHECK_OK(dl_write_file_atomic(path, text, strlen(text)));
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char cmd[1024], *out;
    /* Ids from HF tokenizers 0.19.1 with assets/tokenizer_bn_demo.json. */
    write_text("in.txt", "আমি বাংলায় গান গাই।\n\nHello, World! 123 ৪৫৬\r\n");
    snprintf(cmd, sizeof(cmd), "%s tokenize --input %s/in.txt", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 0);
    CHECK_MSG(!strcmp(out, "3790 2927 32 5 2108 5 1154 41 6\n\n5 2262 938 14 5 2233 1680 419 5 147 392 616 5 407 378 780\n"),
              "got '%s'", out);
    free(out);

    snprintf(cmd, sizeof(cmd), "%s tokenize --tokenizer %s/assets/tokenizer_bn_demo.json < %s/in.txt", DEDLOC_BINARY,
             DEDLOC_SOURCE_DIR, dir);
    CHECK(run(cmd, &out) == 0);
    CHECK(!strncmp(out, "3790 2927 32 5 2108 5 1154 41 6\n\n", 33));
    free(out);

    write_text("pair.txt", "আমি\tগান\n\tx\n");
    snprintf(cmd, sizeof(cmd), "%s tokenize --pair --input %s/pair.txt --type-ids", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 0);
    /* HF: encode("আমি", "গান").ids and .type_ids; encode("", "x") */
    CHECK_MSG(!strcmp(out, "2 3790 3 5 2108 3\n0 0 0 1 1 1\n2 3 337 3\n0 0 1 1\n"), "got '%s'", out);
    free(out);

    write_text("nopair.txt", "no tab here\n");
    snprintf(cmd, sizeof(cmd), "%s tokenize --pair --input %s/nopair.txt", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 1);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize --input %s/missing.txt", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 1);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize --tokenizer %s/in.txt < /dev/null", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 1);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize --bogus", DEDLOC_BINARY);
    CHECK(run(cmd, &out) == 2);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize --help", DEDLOC_BINARY);
    CHECK(run(cmd, &out) == 0 && strstr(out, "--pair") != NULL);
    free(out);

    /* invalid UTF-8 is replaced and counted, never fatal */
    write_text("bad.txt", "a\xff\xfe b\n");
    snprintf(cmd, sizeof(cmd), "%s tokenize --input %s/bad.txt", DEDLOC_BINARY, dir);
    CHECK(run(cmd, &out) == 0 && strlen(out) > 1);
    free(out);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_tokenize_cli");
}
