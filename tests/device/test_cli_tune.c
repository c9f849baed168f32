/* `dedloc tune` reading CLBlast's kernel tuner. A stand-in
 * clblast_tuner_xgemm on PATH prints a fixed transcript in the tuner's
 * format: rows that passed verification, rows that did not, the reference
 * row, a duplicate, malformed rows and colour codes. dedloc must keep the
 * four fastest distinct verified settings, fastest first (worked out by hand
 * below), pass the preset's explore size to the tuner, and, since these
 * settings name too few parameters for CLBlast, report each one as refused
 * and store nothing. The stand-in exits at once, so the run costs about one
 * timing of the preset's shapes with the built-in parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dl_test.h"

static char dir[] = "/tmp/dedloc-test-tune-XXXXXX";

#define ESC "\x1b"

/* Columns: id | total | MWG NWG KWG VWM | local | global | compiles | time | GFLOPS | status */
static const char *transcript =
    "* Options given/available:\n"
    "    -platform 0 [=default] -device 0 [=default] -precision 32 (single) [=default]\n"
    "* Parameters explored: MWG NWG KWG VWM\n"
    "|   ID | total |        param |     local |    global |  compiles |      time | GFLOPS |"
    "          status |\n"
    "x------x-------x--------------x-----------x-----------x-----------x-----------x--------x\n"
    /* the reference run: not a candidate, however fast */
    "|  ref |     - |            - |       8 8 |   256 256 |        OK |   1.00 ms |  500.0 |"
    "   results match |\n"
    "|    1 |    12 | 32 32 32 2   |       8 8 |   256 256 |        OK |   2.00 ms |   16.8 |"
    "   results match |\n"
    "|    2 |    12 | 64 64 32 4   |       8 8 |   256 256 |        OK |   1.10 ms |   30.5 |"
    "   results match |\n"
    /* the same setting measured slower: one candidate, at its best speed */
    "|    3 |    12 | 64 64 32 4   |       8 8 |   256 256 |        OK |   1.34 ms |   25.0 |"
    "   results match |\n"
    /* fastest of all, but wrong results */
    "|    4 |    12 | 16 16 16 1   |       8 8 |   256 256 |        OK |   0.30 ms |   99.9 |"
    "   L2 error 1e-1 |\n"
    "|    5 |    12 | 128 64 16 4  |       8 8 |   256 256 |        OK |   2.80 ms |   12.0 |"
    "   results match |\n"
    "|    6 |    12 | 32 64 16 2   |       8 8 |   256 256 |        OK |   1.68 ms |   20.0 |"
    "   results match |\n"
    "|    7 |    12 | 64 32 16 2   |       8 8 |   256 256 |        OK |   4.20 ms |    8.0 |"
    "   results match |\n"
    /* too few values, an out-of-range value, a GFLOPS that is not a number */
    "|    8 |    12 | 32 32        |       8 8 |   256 256 |        OK |   1.00 ms |   77.0 |"
    "   results match |\n"
    "|   10 |    12 | 32 32 70000 2 |      8 8 |   256 256 |        OK |   1.00 ms |   66.0 |"
    "   results match |\n"
    "|   11 |    12 | 32 32 16 4   |       8 8 |   256 256 |        OK |   1.00 ms |      - |"
    "   results match |\n"
    /* a verified row in colour, as the tuner prints it on a terminal */
    ESC "[32m|    9 |    12 | 32 32 16 1   |       8 8 |   256 256 |        OK |   1.87 ms |   18.0 |"
    "   results match |" ESC "[0m\n"
    "* Found best result 0.30 ms: 99.9 GFLOPS\n";

/* Runs dedloc with args in dir, stdout and stderr to files; exit status or -1. */
static int run_dedloc(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && PATH='%s/bin':\"$PATH\" DEDLOC_CACHE_DIR='%s/cache' '%s' %s >out.txt "
             "2>err.txt </dev/null",
             dir, dir, dir, DEDLOC_BINARY, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp(const char *name) {
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (dl_read_file(path, 1 << 22, &text, NULL)) return NULL;
    return text;
}

static int write_text(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    if (fclose(f)) return -1;
    return chmod(path, mode);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[512], script[512];
    snprintf(path, sizeof path, "%s/bin", dir);
    CHECK_OK(dl_mkdirs(path));
    snprintf(path, sizeof path, "%s/transcript.txt", dir);
    CHECK(write_text(path, transcript, 0644) == 0);
    /* the stand-in records its arguments, then prints the transcript */
    snprintf(script, sizeof script,
             "#!/bin/sh\necho \"$@\" > '%s/tuner-args.txt'\ncat '%s/transcript.txt'\n", dir, dir);
    snprintf(path, sizeof path, "%s/bin/clblast_tuner_xgemm", dir);
    CHECK(write_text(path, script, 0755) == 0);

    int rc = run_dedloc("tune --model tiny --budget-seconds 120");
    char *out = slurp("out.txt"), *err = slurp("err.txt");
    if (rc == 1 && err && strstr(err, "no OpenCL device")) {
        printf("no OpenCL device: skipped\n");
        return 77;
    }
    CHECK_MSG(rc == 0, "exit %d\n%s\n%s", rc, out ? out : "", err ? err : "");
    const char *o = out ? out : "";

    /* the tiny preset explores at 256 x 256 x 256 in single precision */
    char *args = slurp("tuner-args.txt");
    CHECK_MSG(args && strstr(args, "-m 256 -n 256 -k 256") && strstr(args, "-precision 32") &&
                  strstr(args, "-platform ") && strstr(args, "-device "),
              "%s", args ? args : "(the tuner was not run)");
    free(args);

    CHECK_MSG(strstr(o, "exploring with clblast_tuner_xgemm at 256x256x256"), "%s", o);
    /* verified, distinct, fastest first: 30.5 (the better of rows 2 and 3),
     * 20.0, 18.0 (the coloured row), 16.8; row 4 failed verification, the
     * reference row and rows 8, 10 and 11 are not candidates */
    const char *order[] = {"candidate 1: tuner 30.5 GFLOP/s", "candidate 2: tuner 20.0 GFLOP/s",
                           "candidate 3: tuner 18.0 GFLOP/s", "candidate 4: tuner 16.8 GFLOP/s"};
    const char *at = o;
    for (int i = 0; i < 4; i++) {
        const char *hit = strstr(at, order[i]);
        CHECK_MSG(hit != NULL, "'%s' missing or out of order in:\n%s", order[i], o);
        if (hit) at = hit;
    }
    CHECK_MSG(!strstr(o, "candidate 5: tuner"), "%s", o);
    CHECK_MSG(!strstr(o, "99.9") && !strstr(o, "500.0") && !strstr(o, "77.0") &&
                  !strstr(o, "66.0"), "%s", o);

    /* four parameters are not a complete Xgemm set: each is refused, none stored */
    for (int i = 1; i <= 4; i++) {
        char line[96];
        snprintf(line, sizeof line, "candidate %d failed: CLBlast refused the parameters", i);
        CHECK_MSG(strstr(o, line), "'%s' missing in:\n%s", line, o);
    }
    CHECK_MSG(strstr(o, "no candidate beat CLBlast's built-in parameters; nothing stored"), "%s", o);
    snprintf(path, sizeof path, "%s/cache/clblast", dir);
    struct stat st;
    CHECK_MSG(stat(path, &st) != 0, "%s was created", path);

    free(out);
    free(err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return dl_test_finish("test_cli_tune");
}
