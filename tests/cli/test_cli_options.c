/* Options are taken by their exact name, in every command: a prefix of a
 * longer option (--token of --tokenizer, --manif of --manifest) is an
 * unknown option that names the one it resembles, never that option. The
 * commands that connect to a run take --token. The bash completion comes
 * from the same tables the parsers use. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli_sh.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void prefixes_refused(void) {
    CHECK(sh("%s train --manif run.json", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "unknown option '--manif'"));
    CHECK(file_has("err.txt", "did you mean --manifest?"));
    CHECK(sh("%s run init --tok tok.json --out r.json", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "unknown option '--tok'"));
    CHECK(!exists("r.json"));
    CHECK(sh("%s join --run-k abc 127.0.0.1:9", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "unknown option '--run-k'"));
    CHECK(sh("%s authority issue --ke k --peer p", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "unknown option '--ke'"));
    CHECK(sh("%s bench gemm --rep 1", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "unknown option '--rep'"));
    /* The value after '=' is no part of the name: these reach the check
     * of the outputs. */
    write_bytes("corpus.txt", "one line\n", 9);
    CHECK(sh("%s train --data=corpus.txt --seq=8 --max-steps=0 --checkpoint-dir=/dev/null/x", DEDLOC_BINARY) == 1);
    CHECK(!file_has("err.txt", "unknown option"));
}

/* The monitor takes a token file (a closed run admits only holders): the
 * file is read, not taken for a tokenizer. */
static void monitor_token(void) {
    CHECK(sh("%s monitor --run-id r --no-dht --duration 1 --listen-http 127.0.0.1:0 --history h.jsonl "
             "--token mon.token",
             DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "mon.token"));
    CHECK(!file_has("err.txt", "tokenizer"));
}

/* What the completion offers is what the parsers take. */
static void completion_from_tables(void) {
    CHECK(sh("%s completion options", DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "authority: --expires --help --identity --key --name --out --peer --role --run-id --uses --valid"));
    CHECK(file_has("out.txt", "bench step: --batch --device"));
    CHECK(!file_has("out.txt", "--test-"));
    CHECK(!file_has("out.txt", "--fake-"));
    CHECK(sh("%s completion bash > dedloc.bash && bash -c '. ./dedloc.bash; COMP_WORDS=(dedloc monitor --tok); "
             "COMP_CWORD=2; _dedloc; printf \"%%s\\n\" \"${COMPREPLY[@]}\"'",
             DEDLOC_BINARY) == 0);
    CHECK(file_has("out.txt", "--token\n"));
    CHECK(file_has("out.txt", "--tokenizer\n"));
    CHECK(sh("%s completion zsh", DEDLOC_BINARY) == 2);
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    if (cli_dir_make("/tmp/dedloc_cli_options_XXXXXX")) return 1;
    prefixes_refused();
    monitor_token();
    completion_from_tables();
    cli_dir_remove();
    return dl_test_finish("cli_options");
}
