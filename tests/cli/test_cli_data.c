/* Data every peer can reach: `run init` refuses a path for a run's data
 * unless told every peer has it (--data-shared) and points to serve-data;
 * a volunteer's error about a source the manifest named says so; `join`
 * refuses a fetched manifest that names a path unless the volunteer gives
 * their own --data (a manifest from the network may not make a machine
 * read its files). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_sh.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define TOKENIZER DEDLOC_SOURCE_DIR "/assets/tokenizer_bn_demo.json"
#define INIT "%s run init --tokenizer " TOKENIZER " --identity owner.id --run-id data-test --seq 16 --batch 2 " \
             "--target-batch 4 --max-steps 100000"

static void init_refuses_paths(void) {
    write_bytes("bn.txt", "এক দুই তিন\n", strlen("এক দুই তিন\n"));
    CHECK(sh(INIT " --data bn.txt --out local.json", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "--data bn.txt is a path on this machine"));
    CHECK(file_has("err.txt", "dedloc serve-data DIR"));
    CHECK(file_has("err.txt", "--data-shared"));
    CHECK(!exists("local.json"));
    /* One path among URLs is refused as well. */
    CHECK(sh(INIT " --data http://127.0.0.1:9/ --data /nonexistent/corpus.txt --out mixed.json", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "--data /nonexistent/corpus.txt is a path"));
    CHECK(sh(INIT " --data paragraphs:https://example.org/shards/ --out url.json", DEDLOC_BINARY) == 0);
    CHECK(sh(INIT " --data missing.txt --data-shared --out shared.json", DEDLOC_BINARY) == 0);
}

/* The volunteer never typed the path: the error says the manifest named it. */
static void volunteer_error_names_manifest(void) {
    CHECK(sh("%s train --manifest shared.json --no-dht --listen 127.0.0.1:0 --quiet", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "data source missing.txt (from the run manifest shared.json): No such file or directory"));
    CHECK(file_has("err.txt", "pass --data with your own copy"));
}

/* The organiser's peer serves the manifest (synthetic compute: no data of
 * its own read); a newcomer's join refuses its path before writing
 * anything. */
static void join_refuses_manifest_paths(void) {
    CHECK(sh("{ %s train --manifest shared.json --synthetic-compute 0.1 --no-dht --quiet "
             "--listen 127.0.0.1:0 2> org.err & p=$!; for i in $(seq 300); do grep -q 'listening on' org.err && break; "
             "sleep 0.1; done; a=$(sed -nE 's/.*listening on (127\\.0\\.0\\.1:[0-9]+).*/\\1/p' org.err | head -n 1); "
             "%s join $a --dir joined --fetch-timeout 60 --listen 127.0.0.1:0 2> join.err; echo $? > join_rc.txt; "
             "kill -TERM $p; wait $p; echo $? > org_rc.txt; }",
             DEDLOC_BINARY, DEDLOC_BINARY) == 0);
    CHECK(file_has("join_rc.txt", "1\n"));
    CHECK(file_has("join.err", "the run manifest names the data source missing.txt, a path on a machine, not a URL: "
                               "refused"));
    CHECK(file_has("join.err", "pass --data with your own copy"));
    CHECK(!exists("joined/manifest.json"));
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    if (cli_dir_make("/tmp/dedloc_cli_data_XXXXXX")) return 1;
    init_refuses_paths();
    volunteer_error_names_manifest();
    join_refuses_manifest_paths();
    cli_dir_remove();
    return dl_test_finish("cli_data");
}
