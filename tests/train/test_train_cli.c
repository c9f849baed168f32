/* `dedloc train` and `dedloc export` end to end on the tiny model (small
 * batches so it stays quick on PoCL):
 *   - an uninterrupted run of S steps;
 *   - the same run stopped by --max-steps halfway, then continued from its
 *     checkpoint folder: bit-identical weights (param_hash) at step S;
 *   - the same run stopped by SIGTERM, which saves and exits 0, then continued:
 *     bit-identical again;
 *   - the same with fp16 storage (loss scale state included);
 *   - `dedloc export` writes a HF folder whose weights are the checkpoint's.
 * The weights hash is the last line of each JSON-lines log. */
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/model.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { STEPS = 6 };

static char dir[256];

static int sh(const char *fmt, ...) DL_PRINTF(1, 2);
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char corpus[300];

/* A deterministic Bengali-looking corpus: documents of danda-terminated
 * sentences drawn from a small word list (the content does not matter here,
 * only that the stream is real text through the real tokenizer). */
static void write_corpus(const char *path) {
    static const char *words[] = {"আমি", "তুমি", "সে", "আমরা", "বাংলা", "ভাষা", "বই", "পড়ি", "লিখি", "খাই",
                                  "ভাত", "মাছ", "জল", "নদী", "গ্রাম", "শহর", "স্কুল", "বাড়ি", "মা", "বাবা",
                                  "ভাই", "বোন", "সুন্দর", "বড়", "ছোট", "নতুন", "পুরানো", "আজ", "কাল", "এখন"};
    FILE *f = fopen(path, "w");
    dl_rng rng;
    dl_rng_seed(&rng, 99);
    for (int d = 0; f && d < 300; d++) {
        int sentences = 2 + (int)dl_rng_below(&rng, 5);
        for (int s = 0; s < sentences; s++) {
            int n = 3 + (int)dl_rng_below(&rng, 8);
            for (int w = 0; w < n; w++) fprintf(f, "%s%s", w ? " " : "", words[dl_rng_below(&rng, 30)]);
            fputs(s + 1 < sentences ? "। " : "।\n", f);
        }
    }
    if (f) fclose(f);
}

#define TRAIN_ARGS                                                                                   \
    "--model tiny --data %s --batch 4 --seq 32 --target-batch 8 --seed 3 --shuffle-buffer 64 "  \
    "--lr 0.01 --warmup-steps 2 --total-steps 6 --save-every 2 --keep 2 --quiet"

/* The param_hash and step of the last line of a JSON-lines log. */
static int last_record(const char *path, char hash[17], long *step) {
    char *text;
    hash[0] = 0;
    *step = -1;
    if (dl_read_file(path, 1 << 24, &text, NULL)) return -1;
    char *line = NULL;
    for (char *p = strstr(text, "{\"step\""); p; p = strstr(p + 1, "{\"step\"")) line = p;
    int rc = -1;
    if (line) {
        *step = strtol(line + 9, NULL, 10);
        char *h = strstr(line, "\"param_hash\": \"");
        if (h && strlen(h) >= 31) {
            memcpy(hash, h + 15, 16);
            hash[16] = 0;
            rc = 0;
        }
    }
    free(text);
    return rc;
}

static int count_records(const char *path) {
    char *text;
    if (dl_read_file(path, 1 << 24, &text, NULL)) return 0;
    int n = 0;
    for (char *p = strstr(text, "{\"step\""); p; p = strstr(p + 1, "{\"step\"")) n++;
    free(text);
    return n;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dedloc_train_cli_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    write_corpus(corpus);
    char hash_a[17], hash_b[17], hash_c[17];
    long step;

    /* Uninterrupted. */
    CHECK(sh("%s train " TRAIN_ARGS " --max-steps %d --checkpoint-dir %s/a --log %s/a.jsonl", DEDLOC_BINARY, corpus,
             STEPS, dir, dir) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/a.jsonl", dir);
    CHECK_OK(last_record(path, hash_a, &step));
    CHECK(step == STEPS && count_records(path) == STEPS);
    printf("uninterrupted: step %ld weights %s\n", step, hash_a);

    /* Stopped at half, continued with only the checkpoint folder. */
    CHECK(sh("%s train " TRAIN_ARGS " --max-steps %d --checkpoint-dir %s/b --log %s/b.jsonl", DEDLOC_BINARY,
             corpus, STEPS / 2, dir, dir) == 0);
    CHECK(sh("%s train --quiet --max-steps %d --checkpoint-dir %s/b --log %s/b.jsonl", DEDLOC_BINARY, STEPS, dir,
             dir) == 0);
    snprintf(path, sizeof path, "%s/b.jsonl", dir);
    CHECK_OK(last_record(path, hash_b, &step));
    CHECK(step == STEPS && count_records(path) == STEPS);
    CHECK_MSG(!strcmp(hash_a, hash_b), "resumed %s vs uninterrupted %s", hash_b, hash_a);

    /* SIGTERM after the second step is logged: saves, exits 0; then resumed. */
    snprintf(path, sizeof path, "%s/c.jsonl", dir);
    pid_t pid = fork();
    if (pid == 0) {
        char args[4096];
        snprintf(args, sizeof args,
                 "exec %s train " TRAIN_ARGS " --save-every 0 --max-steps %d --checkpoint-dir %s/c --log %s",
                 DEDLOC_BINARY, corpus, STEPS, dir, path);
        execl("/bin/sh", "sh", "-c", args, (char *)NULL);
        _exit(127);
    }
    /* Poll the log (bounded: the child ends by itself after STEPS steps anyway). */
    for (int i = 0; i < 6000 && count_records(path) < 2; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            pid = -1;
            break;
        }
        usleep(20000);
    }
    int status = 0;
    if (pid > 0) {
        kill(pid, SIGTERM);
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status after SIGTERM: %d", status);
    }
    long stopped_at = 0;
    CHECK_OK(last_record(path, hash_c, &stopped_at));
    printf("SIGTERM: stopped after step %ld\n", stopped_at);
    CHECK(sh("%s train --quiet --checkpoint-dir %s/c --log %s", DEDLOC_BINARY, dir, path) == 0);
    CHECK_OK(last_record(path, hash_c, &step));
    CHECK(step == STEPS);
    CHECK_MSG(!strcmp(hash_a, hash_c), "resumed after SIGTERM %s vs uninterrupted %s", hash_c, hash_a);

    /* fp16 storage with loss scaling: the loss scale state resumes too. */
    char hash_d[17], hash_e[17];
    CHECK(sh("%s train " TRAIN_ARGS " --precision fp16 --max-steps 4 --checkpoint-dir %s/d --log %s/d.jsonl",
             DEDLOC_BINARY, corpus, dir, dir) == 0);
    CHECK(sh("%s train " TRAIN_ARGS " --precision fp16 --max-steps 2 --checkpoint-dir %s/e --log %s/e.jsonl",
             DEDLOC_BINARY, corpus, dir, dir) == 0);
    CHECK(sh("%s train --quiet --max-steps 4 --checkpoint-dir %s/e --log %s/e.jsonl", DEDLOC_BINARY, dir, dir) == 0);
    snprintf(path, sizeof path, "%s/d.jsonl", dir);
    CHECK_OK(last_record(path, hash_d, &step));
    CHECK(step == 4);
    snprintf(path, sizeof path, "%s/e.jsonl", dir);
    CHECK_OK(last_record(path, hash_e, &step));
    CHECK(step == 4);
    CHECK_MSG(!strcmp(hash_d, hash_e), "fp16 resumed %s vs uninterrupted %s", hash_e, hash_d);
    CHECK_MSG(strcmp(hash_d, hash_a) != 0, "fp16 and fp32 runs should differ after 4 steps");
    printf("fp16: uninterrupted %s, resumed %s\n", hash_d, hash_e);

    /* Export: the HF folder holds exactly the checkpoint's weights. */
    CHECK(sh("%s export --checkpoint %s/a --out %s/hf > /dev/null", DEDLOC_BINARY, dir, dir) == 0);
    snprintf(path, sizeof path, "%s/hf", dir);
    dl_albert_config cfg;
    float *exported = NULL;
    CHECK_OK(dl_albert_load_hf(path, &cfg, &exported));
    dl_checkpoint ck;
    snprintf(path, sizeof path, "%s/a", dir);
    CHECK_OK(dl_checkpoint_load_latest(path, &ck, NULL, 0));
    CHECK(ck.step == STEPS);
    if (exported && ck.params) {
        CHECK(memcmp(exported, ck.params, ck.layout.total * sizeof(float)) == 0);
        char h[17];
        dl_hash64_hex(dl_hash64(exported, ck.layout.total * sizeof(float), 0), h);
        CHECK(!strcmp(h, hash_a));
    }
    dl_checkpoint_free(&ck);
    free(exported);

    /* Resuming by re-reading the stream (--replay-data) lands on the same weights. */
    char hash_r[17];
    CHECK(sh("%s train " TRAIN_ARGS " --max-steps %d --checkpoint-dir %s/r --log %s/r.jsonl", DEDLOC_BINARY,
             corpus, STEPS / 2, dir, dir) == 0);
    CHECK(sh("%s train --quiet --replay-data --max-steps %d --checkpoint-dir %s/r --log %s/r.jsonl", DEDLOC_BINARY,
             STEPS, dir, dir) == 0);
    snprintf(path, sizeof path, "%s/r.jsonl", dir);
    CHECK_OK(last_record(path, hash_r, &step));
    CHECK_MSG(step == STEPS && !strcmp(hash_a, hash_r), "replayed %s vs uninterrupted %s", hash_r, hash_a);

    /* The micro-batch from a memory budget: it fits and is logged; a budget
     * below one sequence is a clear error. */
    CHECK(sh("%s train --model tiny --data %s --seq 32 --target-batch 64 --max-device-memory 24 --recompute "
             "--max-steps 1 --quiet 2> %s/auto.err", DEDLOC_BINARY, corpus, dir) == 0);
    CHECK(sh("grep -q 'micro-batch [0-9]* x 32 fits 24 MiB' %s/auto.err", dir) == 0);
    CHECK(sh("%s train --model tiny --data %s --seq 32 --max-device-memory 1 --max-steps 1 --quiet 2> %s/small.err",
             DEDLOC_BINARY, corpus, dir) == 1);
    CHECK(sh("grep -q 'even a micro-batch of one sequence' %s/small.err", dir) == 0);

    /* Usage errors exit 2. */
    CHECK(sh("%s train --batch 0 --data x 2>/dev/null", DEDLOC_BINARY) == 2);
    CHECK(sh("%s train --quiet 2>/dev/null", DEDLOC_BINARY) == 2);
    CHECK(sh("%s export --out x 2>/dev/null", DEDLOC_BINARY) == 2);

    sh("rm -rf '%s'", dir);
    return dl_test_finish("test_train_cli");
}
