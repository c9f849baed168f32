/* What a stop says is true, and the end summary's rate is this peer's: a
 * Ctrl-C without --checkpoint-dir says that nothing is saved (and how to
 * save next time); a swarm peer stopped before the swarm's state arrived
 * writes no checkpoint of its initial weights and says so; a newcomer that
 * downloaded the swarm's state reports its own samples per second over its
 * compute and rounds, not the swarm's samples over its wall time; Ctrl-C
 * during a state download drops the download at once. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli_sh.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define CORPUS DEDLOC_SOURCE_DIR "/tests/fixtures/data/bn_paragraphs.txt"
/* A micro-batch of 4 samples sleeps 0.1 s: no peer computes more than 40
 * samples per second of compute. */
#define SYNTHETIC "--synthetic-compute 0.1 --batch 4 --quiet --no-dht --listen 127.0.0.1:0"

/* SIGINT until the process $p ends (a background job starts with SIGINT
 * ignored until the program sets its handler), then its exit status. */
#define INT_UNTIL_DONE "for i in $(seq 100); do kill -INT $p 2>/dev/null || break; sleep 0.3; done; wait $p"

static void stop_without_checkpoint_dir(void) {
    CHECK(sh("{ %s train --data " CORPUS " --batch 2 --seq 16 --target-batch 2 --seed 1 --quiet --max-steps 100000 "
             "--log int.jsonl 2> int_err.txt & p=$!; for i in $(seq 300); do grep -q step int.jsonl 2>/dev/null && "
             "break; sleep 0.1; done; kill -INT $p; wait $p; echo $? > int_rc.txt; }",
             DEDLOC_BINARY) == 0);
    CHECK(file_has("int_err.txt", "nothing will be saved (no --checkpoint-dir: give one to keep the progress"));
    CHECK(file_has("int_err.txt", "nothing was saved (no --checkpoint-dir); give --checkpoint-dir DIR next time"));
    CHECK(!file_has("int_err.txt", "is saved"));
    CHECK(file_has("int_rc.txt", "130\n"));
}

/* Nobody to find and --min-peers 2: the peer is still looking for the
 * swarm when the signal comes. */
static void stop_before_swarm_state(void) {
    CHECK(sh("{ %s train --run-id stop-test " SYNTHETIC " --target-batch 16 --initial-peers 127.0.0.1:9 --min-peers 2 "
             "--checkpoint-dir ck --max-steps 10 2> early.err & p=$!; for i in $(seq 300); do "
             "grep -q 'listening on' early.err && break; sleep 0.1; done; " INT_UNTIL_DONE "; echo $? > early_rc.txt; }",
             DEDLOC_BINARY) == 0);
    CHECK(file_has("early.err", "stopped before the swarm's state arrived: no checkpoint was written"));
    CHECK(file_has("early_rc.txt", "130\n"));
    CHECK(exists("ck"));
    CHECK(sh("ls ck/checkpoint-*.safetensors") != 0);
}

/* p0 trains alone to step 6, then p1 joins, downloads the state (the
 * swarm's 384 samples come with it) and trains the last 3 steps beside p0:
 * counted over its wall time, those 384 samples made p1 look faster than
 * any peer can be. */
static void rate_of_a_newcomer(void) {
    CHECK(sh("{ %s train --run-id rate-test " SYNTHETIC " --target-batch 64 --max-steps 9 --log p0.jsonl --linger 5 "
             "2> p0.err & p0=$!; for i in $(seq 900); do grep -q '\"step\":6' p0.jsonl 2>/dev/null && break; sleep 0.1; done; "
             "a=$(sed -nE 's/.*listening on (127\\.0\\.0\\.1:[0-9]+).*/\\1/p' p0.err | head -n 1); "
             "%s train --run-id rate-test " SYNTHETIC " --target-batch 64 --max-steps 9 --initial-peers $a --log p1.jsonl "
             "2> p1.err; echo $? > p1_rc.txt; wait $p0; }",
             DEDLOC_BINARY, DEDLOC_BINARY) == 0);
    CHECK(file_has("p1_rc.txt", "0\n"));
    CHECK(file_has("p1.jsonl", "\"download\""));
    char *err = read_text("p1.err");
    const char *line = err ? strstr(err, "dedloc train: done at step") : NULL;
    const char *rate = line ? strstr(line, "; ") : NULL;
    rate = rate ? strstr(rate + 2, "; ") : NULL; /* after the loss */
    double per_s = rate ? strtod(rate + 2, NULL) : -1;
    CHECK(line != NULL);
    CHECK(per_s > 0 && per_s <= 40.0);
    if (!(per_s > 0 && per_s <= 40.0)) fprintf(stderr, "newcomer's summary: %.200s\n", line ? line : "(none)");
    CHECK(line && strstr(line, "samples/s (this peer's, over its compute and rounds)"));
    free(err);
}

/* p0 serves its state at 0.5 Mbit/s (a few minutes for tiny's weights and
 * moments); p1 joins and is interrupted while it downloads: it drops the
 * download at once and ends as a stop before the state arrived, instead of
 * waiting for the transfer to finish or time out. */
static void stop_during_download(void) {
    CHECK(sh("{ %s train --run-id dl-stop-test " SYNTHETIC " --target-batch 16 --max-steps 100000 --max-upload 0.5 "
             "--log d0.jsonl 2> d0.err & p0=$!; for i in $(seq 900); do grep -q '\"step\":2' d0.jsonl 2>/dev/null && "
             "break; sleep 0.1; done; a=$(sed -nE 's/.*listening on (127\\.0\\.0\\.1:[0-9]+).*/\\1/p' d0.err | head -n 1); "
             "%s train --run-id dl-stop-test " SYNTHETIC " --target-batch 16 --max-steps 100000 --initial-peers $a "
             "--checkpoint-dir dck 2> d1.err & p=$!; for i in $(seq 300); do grep -q 'downloading the state' d1.err && "
             "break; sleep 0.1; done; sleep 1; " INT_UNTIL_DONE "; echo $? > d1_rc.txt; kill -INT $p0; wait $p0 || true; }",
             DEDLOC_BINARY, DEDLOC_BINARY) == 0);
    CHECK(file_has("d1.err", "downloading the state"));
    CHECK(file_has("d1.err", "state download stopped"));
    CHECK(!file_has("d1.err", "downloaded the state"));
    CHECK(!file_has("d1.err", "state download failed"));
    CHECK(file_has("d1_rc.txt", "130\n"));
    CHECK(sh("ls dck/checkpoint-*.safetensors") != 0);
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    if (cli_dir_make("/tmp/dedloc_cli_stop_XXXXXX")) return 1;
    stop_without_checkpoint_dir();
    stop_before_swarm_state();
    rate_of_a_newcomer();
    stop_during_download();
    cli_dir_remove();
    return dl_test_finish("cli_stop");
}
