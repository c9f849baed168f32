/* A new user's first hour, as the binary should meet it: work is never lost
 * (an unusable checkpoint folder or log refuses to start, a failed save keeps
 * training and says so, an export is whole or absent), an export stands alone
 * (its tokenizer files give transformers the ids `dedloc tokenize` gives, per
 * tests/fixtures/export, made by scripts/check_export_tokenizer.py), progress
 * shows from the first micro-batch, and mistakes get a message that says what
 * to do (peer addresses, run ids, binary data, an unreachable data server). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli_sh.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define CORPUS DEDLOC_SOURCE_DIR "/tests/fixtures/data/bn_paragraphs.txt"
#define SMALL_RUN "--data " CORPUS " --batch 2 --seq 16 --target-batch 2 --seed 1 --quiet"

/* A loopback port nothing listens on (bound, then released). */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* How many times needle occurs in cli_dir/name. */
static int count_in(const char *name, const char *needle) {
    char *text = read_text(name);
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    free(text);
    return n;
}

/* The folder holds the model and the three tokenizer files transformers
 * reads; the ids through them are the fixture's (transformers' own). */
static void export_stands_alone(void) {
    CHECK(sh("%s train " SMALL_RUN " --max-steps 1 --checkpoint-dir ck", DEDLOC_BINARY) == 0);
    CHECK(sh("%s export --checkpoint ck --out hf", DEDLOC_BINARY) == 0);
    static const char *files[] = {"hf/config.json", "hf/model.safetensors", "hf/tokenizer.json",
                                  "hf/tokenizer_config.json", "hf/special_tokens_map.json"};
    for (size_t i = 0; i < 5; i++) CHECK_MSG(exists(files[i]), "export wrote no %s", files[i]);
    CHECK(sh("cmp hf/tokenizer.json %s/assets/tokenizer_bn_demo.json", DEDLOC_SOURCE_DIR) == 0);
    CHECK(file_has("hf/tokenizer_config.json", "\"tokenizer_class\":\t\"PreTrainedTokenizerFast\""));
    CHECK(file_has("hf/tokenizer_config.json", "\"model_max_length\":\t128"));
    static const char *specials[] = {"\"pad_token\":\t\"<pad>\"", "\"unk_token\":\t\"<unk>\"",
                                     "\"cls_token\":\t\"[CLS]\"", "\"sep_token\":\t\"[SEP]\"",
                                     "\"mask_token\":\t\"[MASK]\""};
    for (size_t i = 0; i < 5; i++) {
        CHECK_MSG(file_has("hf/special_tokens_map.json", specials[i]), "special_tokens_map.json lacks %s",
                  specials[i]);
        CHECK_MSG(file_has("hf/tokenizer_config.json", specials[i]), "tokenizer_config.json lacks %s", specials[i]);
    }
    CHECK(sh("%s tokenize --special --tokenizer hf/tokenizer.json --input %s/tests/fixtures/export/"
             "tokenizer_lines_bn.txt > ids.txt && cmp ids.txt %s/tests/fixtures/export/tokenizer_ids_bn.txt",
             DEDLOC_BINARY, DEDLOC_SOURCE_DIR, DEDLOC_SOURCE_DIR) == 0);
    /* An explicit tokenizer is exported as given. */
    CHECK(sh("%s export --checkpoint ck --out hf2 --tokenizer %s/tests/fixtures/text/tok_spm_albert.json",
             DEDLOC_BINARY, DEDLOC_SOURCE_DIR) == 0);
    CHECK(sh("cmp hf2/tokenizer.json %s/tests/fixtures/text/tok_spm_albert.json", DEDLOC_SOURCE_DIR) == 0);
    /* "hf2/" is the folder hf2, replaced as a whole. */
    CHECK(sh("%s export --checkpoint ck --out hf2/", DEDLOC_BINARY) == 0);
    CHECK(sh("cmp hf2/tokenizer.json %s/assets/tokenizer_bn_demo.json && test -z \"$(ls -A hf2 | grep -v json$ | "
             "grep -v safetensors$)\"", DEDLOC_SOURCE_DIR) == 0);
}

/* A full disk (here: a file size limit, the same EFBIG/ENOSPC path) leaves
 * no half export and no temporary folder; an earlier export stays whole. */
static void export_whole_or_absent(void) {
    const char *limited = "trap '' XFSZ; ulimit -f 64;"; /* 32 KiB: config.json fits, the weights do not */
    CHECK(sh("%s %s export --checkpoint ck --out full", limited, DEDLOC_BINARY) == 1);
    CHECK(!exists("full"));
    CHECK(sh("test -z \"$(ls -d full.* 2>/dev/null)\"") == 0);
    CHECK(sh("cp -r hf hf_before && %s %s export --checkpoint ck --out hf", limited, DEDLOC_BINARY) == 1);
    CHECK(sh("diff -r hf hf_before") == 0);
    CHECK(sh("test -z \"$(ls -d hf.* 2>/dev/null)\"") == 0);
    /* A folder holding the user's own files is not replaced. */
    CHECK(sh("mkdir -p mine && echo notes > mine/notes.txt") == 0);
    CHECK(sh("%s export --checkpoint ck --out mine", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "not part of an export"));
    CHECK(exists("mine/notes.txt") && !exists("mine/config.json"));
}

/* Outputs that cannot be written are refused before anything is computed;
 * an existing log is appended to, never damaged by the check. */
static void train_outputs_checked_at_start(void) {
    write_bytes("afile", "x", 1);
    CHECK(sh("%s train " SMALL_RUN " --max-steps 1 --checkpoint-dir afile/ck", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "--checkpoint-dir afile/ck"));
    CHECK_MSG(!file_has("err.txt", "device:"), "the run opened the device before refusing the folder");
    CHECK(sh("%s train " SMALL_RUN " --max-steps 1 --log /dev/full", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "the log /dev/full cannot be written"));
    write_bytes("old.jsonl", "{\"step\": 1}\n", 12);
    CHECK(sh("%s train " SMALL_RUN " --max-steps 0 --log old.jsonl", DEDLOC_BINARY) == 0);
    CHECK(file_has("old.jsonl", "{\"step\": 1}\n") && count_in("old.jsonl", "\n") == 1);
}

/* What a run shows: progress from the first micro-batch, an ETA within
 * --max-minutes, a summary over several steps, and the odd settings said. */
static void train_progress(void) {
    const char *run = "--data " CORPUS " --batch 2 --seq 16 --seed 1";
    CHECK(sh("%s train %s --target-batch 8 --max-steps 4", DEDLOC_BINARY, run) == 0);
    CHECK(file_has("err.txt", "first micro-batch (compiling the device kernels"));
    CHECK(file_has("err.txt", "step 1/4 | accumulating 2/8 samples |"));
    CHECK(file_has("err.txt", "loss ") && file_has("err.txt", "(mean of the first 2 steps -> of the last 2)"));
    /* 300 steps cannot fit in 0.06 s: every ETA is the time left, 0 s. */
    CHECK(sh("%s train %s --target-batch 2 --max-steps 300 --max-minutes 0.001", DEDLOC_BINARY, run) == 0);
    CHECK(file_has("err.txt", "time limit reached"));
    CHECK_MSG(count_in("err.txt", "ETA ") > 0 && count_in("err.txt", "ETA ") == count_in("err.txt", "ETA 0s"),
              "an ETA beyond --max-minutes");
    CHECK(sh("%s train %s --target-batch 2 --batch 4 --max-steps 1 --quiet", DEDLOC_BINARY, run) == 0);
    CHECK(file_has("err.txt", "--target-batch 2 is smaller than --batch 4"));
    CHECK(sh("%s train --help", DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "0 keeps them all"));
    /* A config.json size out of range names the range. */
    CHECK(sh("sed 's/\"intermediate_size\": *[0-9]*/\"intermediate_size\": 2147483647/' %s/tests/fixtures/"
             "albert_tiny/config.json > big.json && grep -q 2147483647 big.json", DEDLOC_SOURCE_DIR) == 0);
    CHECK(sh("%s train " SMALL_RUN " --model big.json --max-steps 1", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "'intermediate_size' must be a whole number from -1000000000 to 1000000000"));
}

/* The first Ctrl-C is acknowledged at once; the run then stops after the
 * micro-batch and saves. */
static void train_interrupt(void) {
    CHECK(sh("{ %s train " SMALL_RUN " --max-steps 100000 --checkpoint-dir ckint --save-every 0 --log int.jsonl "
             "2> int_err.txt & p=$!; for i in $(seq 300); do grep -q step int.jsonl 2>/dev/null && break; "
             "sleep 0.1; done; kill -INT $p; wait $p; echo $? > int_rc.txt; }",
             DEDLOC_BINARY) == 0);
    CHECK(file_has("int_err.txt", "stopping after this micro-batch"));
    CHECK(file_has("int_err.txt", "Ctrl-C again to quit now"));
    CHECK(file_has("int_err.txt", "stopped at step"));
    CHECK(file_has("int_rc.txt", "0\n"));
}

/* The checkpoint folder breaks mid-run (a file takes its place, as a full
 * disk would refuse the writes): training goes on, the error names the last
 * good checkpoint, and a final save that fails makes the exit status 1. */
static void train_save_fails(void) {
    CHECK(sh("{ %s train " SMALL_RUN " --max-steps 100000 --checkpoint-dir cksave --save-every 1 --log save.jsonl "
             "2> save_err.txt & p=$!; "
             "for i in $(seq 300); do test -e cksave/checkpoint-0000000001.safetensors && break; sleep 0.1; done; "
             /* Each save makes the folder when it is missing, so one that
              * falls between the mv and the touch makes a new folder and
              * every later save succeeds: swap again until a file holds
              * the name. */
             "mv cksave cksave.away && touch cksave; "
             "while ! test -f cksave; do rm -rf cksave; touch cksave; done; "
             /* until a save has failed (not a count of steps: under load
              * two steps can pass before the first save after the move) */
             "for i in $(seq 600); do grep -q 'Training goes on' save_err.txt && break; sleep 0.1; done; "
             "kill -INT $p; wait $p; echo $? > save_rc.txt; }",
             DEDLOC_BINARY) == 0);
    CHECK(file_has("save_rc.txt", "1\n"));
    CHECK(file_has("save_err.txt", "FAILED") && file_has("save_err.txt", "Training goes on; the last good checkpoint is"));
    CHECK(file_has("save_err.txt", "the final checkpoint could not be saved"));
    CHECK(sh("ls cksave.away/checkpoint-*.safetensors") == 0); /* the good ones stay */
}

/* Long first steps say what they are doing; tune states a useful budget. */
static void bench_and_tune_say_what(void) {
    CHECK(sh("%s bench step --model tiny --batch 2 --seq 16 --warmup 1 --steps 1", DEDLOC_BINARY) == 0);
    CHECK(file_has("err.txt", "warm-up step 1 of 1: running (compiles the device kernels"));
    CHECK(sh("%s tune --help", DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "a useful budget there is at least 120 s"));
    CHECK(file_has("out.txt", "always a verdict"));
}

static void peer_messages(void) {
    int port = closed_port();
    CHECK(port > 0);
    /* Nothing listens: one warning at the default level names the address. */
    CHECK(sh("%s peer --run-id qa --no-dht --listen 127.0.0.1:0 --initial-peers 127.0.0.1:%d --duration 4",
             DEDLOC_BINARY, port) == 0);
    char needle[64];
    snprintf(needle, sizeof needle, "initial peer 127.0.0.1:%d: Connection refused", port);
    CHECK_MSG(count_in("err.txt", needle) == 1, "'%s' appears %d times", needle, count_in("err.txt", needle));
    /* Another run: both run ids in the refusal. Peer A prints its address
     * first thing; B dials it with another run id. */
    CHECK(sh("(%s peer --run-id alpha --no-dht --listen 127.0.0.1:0 --duration 8 --json > a.txt 2> a_err.txt &) ; "
             "for i in $(seq 50); do grep -q listen a.txt 2>/dev/null && break; sleep 0.1; done; "
             "addr=$(sed -E 's/.*\"listen\":\"([^\"]+)\".*/\\1/;q' a.txt); "
             "%s peer --run-id beta --no-dht --listen 127.0.0.1:0 --initial-peers $addr --duration 3",
             DEDLOC_BINARY, DEDLOC_BINARY) == 0);
    /* Either side may refuse first: B says so, or reports A's refusal. */
    CHECK_MSG(file_has("err.txt", "different run id: '") && file_has("err.txt", "'alpha'") &&
                  file_has("err.txt", "'beta'"),
              "the refusal does not name both run ids");
    /* JSON lines when piped or with --json; a readable line with --text. */
    CHECK(sh("%s peer --run-id qa --no-dht --listen 127.0.0.1:0 --duration 0.5", DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "{\"time\":"));
    CHECK(sh("%s peer --run-id qa --no-dht --listen 127.0.0.1:0 --duration 0.5 --text", DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "listening on 127.0.0.1:") && file_has("out.txt", "1 peer (ours included)"));
    CHECK(!file_has("out.txt", "{\"time\":"));
    /* Malformed addresses are usage errors in every address option. */
    static const char *opts[] = {"--listen", "--announce", "--initial-peers", "--dht-bootstrap"};
    for (size_t i = 0; i < 4; i++) {
        int rc = sh("%s peer --run-id qa --duration 0.5 %s 127.0.0.1:70000", DEDLOC_BINARY, opts[i]);
        CHECK_MSG(rc == 2, "peer %s 127.0.0.1:70000: exit %d", opts[i], rc);
    }
}

static void data_messages(void) {
    unsigned char junk[16384];
    dl_rng rng;
    dl_rng_seed(&rng, 3);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)dl_rng_below(&rng, 256);
    write_bytes("junk.bin", junk, sizeof junk);
    sh("%s data --data junk.bin --batches 1 --batch 2 --seq 16 --show 0", DEDLOC_BINARY);
    CHECK(file_has("err.txt", "junk.bin does not look like UTF-8 text"));
    CHECK(sh("%s data --data %s --batches 1 --batch 2 --seq 16 --show 0", DEDLOC_BINARY, CORPUS) == 0);
    CHECK(!file_has("err.txt", "does not look like UTF-8 text"));
    /* A mistyped data port: the first failure is reported at once, with the
     * address and the retries ahead (the command is cut short here). */
    int port = closed_port();
    sh("timeout 3 %s data --data http://127.0.0.1:%d/corpus.txt --batches 1 --show 0", DEDLOC_BINARY, port);
    char needle[80];
    snprintf(needle, sizeof needle, "cannot connect to 127.0.0.1 port %d", port);
    CHECK(file_has("err.txt", needle));
    CHECK(file_has("err.txt", "retrying 10 times over about"));
    CHECK(file_has("err.txt", "retry 1/10"));
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    if (cli_dir_make("/tmp/dedloc_cli_first_XXXXXX")) return 1;
    export_stands_alone();
    export_whole_or_absent();
    train_outputs_checked_at_start();
    train_progress();
    train_interrupt();
    train_save_fails();
    bench_and_tune_say_what();
    peer_messages();
    data_messages();
    cli_dir_remove();
    return dl_test_finish("cli_first_hour");
}
