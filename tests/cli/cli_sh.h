/* Helpers of the tests that drive the dedloc binary through a shell: each
 * command runs in the test's scratch folder (cli_dir) with its output in
 * out.txt and err.txt there. */
#ifndef DEDLOC_TESTS_CLI_SH_H
#define DEDLOC_TESTS_CLI_SH_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/util.h"

static char cli_dir[256];

/* Runs a shell command line (stdout and stderr to files in cli_dir); returns
 * the exit status, or -1 when it did not exit normally (a crash). */
static int sh(const char *fmt, ...) DL_PRINTF(1, 2);
static int sh(const char *fmt, ...) {
    char cmd[4096], full[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "cd %s && %s >out.txt 2>err.txt </dev/null", cli_dir, cmd);
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The text of cli_dir/name (malloc'd), or NULL. */
static char *read_text(const char *name) {
    char path[512], *text;
    snprintf(path, sizeof path, "%s/%s", cli_dir, name);
    return dl_read_file(path, 1 << 24, &text, NULL) ? NULL : text;
}

/* Whether the file cli_dir/name contains needle. */
static int file_has(const char *name, const char *needle) {
    char *text = read_text(name);
    int found = text && strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* file_has, asked again every 50 ms for up to `seconds`: for a line a
 * process just started writes after the one the caller waited for. */
static inline int file_gets(const char *name, const char *needle, double seconds) {
    for (int i = 0; i < (int)(seconds * 20); i++) {
        if (file_has(name, needle)) return 1;
        usleep(50000);
    }
    return file_has(name, needle);
}

/* inline, as write_bytes: a test that needs neither gets no unused-function warning. */
static inline int exists(const char *name) {
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", cli_dir, name);
    return stat(path, &st) == 0;
}

static inline void write_bytes(const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", cli_dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

/* Makes cli_dir (prefix: a /tmp path ending in XXXXXX); 0 on success. */
static int cli_dir_make(const char *prefix) {
    snprintf(cli_dir, sizeof cli_dir, "%s", prefix);
    return mkdtemp(cli_dir) ? 0 : -1;
}

static void cli_dir_remove(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cli_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", cli_dir);
}

#endif
