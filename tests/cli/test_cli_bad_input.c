/* The dedloc binary against a careless or hostile user: every command answers
 * --help with exit 0 and an unknown option with exit 2; malformed numbers are
 * usage errors; garbage, empty and truncated input files fail with exit 1 and
 * a message, leaving no output file behind; a resumed `dedloc train` honours
 * the optimizer options given on its command line; peer addresses with a bad
 * port are refused. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "cli/cli_sh.h"
#include "dl_test.h"

static void help_and_unknown_options(void) {
    static const char *commands[] = {"devices", "bench", "bench gemm", "bench step", "tune",   "tokenize",
                                     "data",    "serve-data", "grad",   "train",      "export", "peer"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        int rc = sh("%s %s --help", DEDLOC_BINARY, commands[i]);
        CHECK_MSG(rc == 0, "dedloc %s --help: exit %d", commands[i], rc);
        CHECK_MSG(file_has("out.txt", "usage"), "dedloc %s --help prints no usage", commands[i]);
        rc = sh("%s %s --no-such-option", DEDLOC_BINARY, commands[i]);
        CHECK_MSG(rc == 2, "dedloc %s --no-such-option: exit %d", commands[i], rc);
    }
    /* Stray arguments are usage errors too. */
    static const char *stray[] = {"devices extra", "tokenize extra", "serve-data a b", "bench nope",
                                  "export --checkpoint a --out b extra"};
    for (size_t i = 0; i < sizeof stray / sizeof stray[0]; i++) {
        int rc = sh("%s %s", DEDLOC_BINARY, stray[i]);
        CHECK_MSG(rc == 2, "dedloc %s: exit %d", stray[i], rc);
    }
    CHECK(sh("%s no-such-command", DEDLOC_BINARY) == 2);
    CHECK(sh("%s", DEDLOC_BINARY) == 2);
}

static void data_numbers(const char *tok, const char *corpus) {
    static const char *bad[] = {"--batches abc", "--batches -1", "--batch 0",   "--batch 8x", "--batch -3",
                                "--seq 100000",  "--seq 3",      "--shuffle 0", "--show x",   "--seed ''"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = sh("%s data --tokenizer %s --data %s --batches 1 --show 0 %s", DEDLOC_BINARY, tok, corpus, bad[i]);
        CHECK_MSG(rc == 2, "dedloc data %s: exit %d, want 2 (usage)", bad[i], rc);
    }
    CHECK(sh("%s data", DEDLOC_BINARY) == 2);
    CHECK(file_has("err.txt", "--data SOURCE is required"));
    /* Like `dedloc train`, `dedloc data` defaults to the built-in demo tokenizer. */
    CHECK(sh("%s data --data %s --batches 1 --batch 2 --seq 16 --show 0", DEDLOC_BINARY, corpus) == 0);
    CHECK(file_has("out.txt", "1 batches of 2 x 16"));
    CHECK(sh("%s data --tokenizer %s --data %s --batches 1 --batch 2 --seq 16 --show 0", DEDLOC_BINARY, tok,
             corpus) == 0);
    CHECK(file_has("out.txt", "1 batches of 2 x 16"));
}

static void garbage_files(const char *tok, const char *corpus, const char *fixture) {
    unsigned char junk[4096];
    dl_rng rng;
    dl_rng_seed(&rng, 7);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)dl_rng_below(&rng, 256);
    write_bytes("junk.bin", junk, sizeof junk);
    write_bytes("empty", "", 0);
    write_bytes("half.json", "{\"version\": \"1.0\", \"model\": {", 29);
    /* A model folder with a valid config and a model.safetensors cut short. */
    CHECK(sh("mkdir -p cut && cp %s/config.json cut/ && head -c 3000 %s/model.safetensors > cut/model.safetensors",
             fixture, fixture) == 0);
    CHECK(sh("mkdir -p junkmodel && cp junk.bin junkmodel/config.json && cp junk.bin junkmodel/model.safetensors") ==
          0);

    static const char *tokenizers[] = {"junk.bin", "empty", "half.json", "no-such-file"};
    for (size_t i = 0; i < 4; i++) {
        int rc = sh("%s tokenize --tokenizer %s --input %s", DEDLOC_BINARY, tokenizers[i], corpus);
        CHECK_MSG(rc == 1, "tokenize --tokenizer %s: exit %d", tokenizers[i], rc);
        CHECK_MSG(file_has("err.txt", tokenizers[i]), "tokenize --tokenizer %s: error names no file", tokenizers[i]);
    }
    /* Binary garbage as text is replaced, not fatal. */
    CHECK(sh("%s tokenize --tokenizer %s --input junk.bin", DEDLOC_BINARY, tok) == 0);
    /* A folder as --input: the error names the path and the reason. */
    CHECK(sh("mkdir -p inputdir && %s tokenize --input inputdir", DEDLOC_BINARY) == 1);
    CHECK(file_has("err.txt", "reading inputdir failed: Is a directory"));
    CHECK(sh("%s tokenize --help", DEDLOC_BINARY) == 0);
    CHECK_MSG(file_has("out.txt", "[--type-ids]"), "tokenize usage line omits --type-ids");

    static const char *models[] = {"cut", "junkmodel", "junk.bin", "empty", "no-such-dir"};
    for (size_t i = 0; i < 5; i++) {
        int rc = sh("%s grad --model %s --batch %s/batch.safetensors --out g.st", DEDLOC_BINARY, models[i], fixture);
        CHECK_MSG(rc == 1, "grad --model %s: exit %d", models[i], rc);
        CHECK(!exists("g.st"));
        rc = sh("%s train --model %s --data %s --max-steps 1 --batch 2 --seq 16 --quiet", DEDLOC_BINARY, models[i],
                corpus);
        CHECK_MSG(rc == 1, "train --model %s: exit %d", models[i], rc);
    }
    static const char *batches[] = {"junk.bin", "empty", "half.json", "cut/model.safetensors"};
    for (size_t i = 0; i < 4; i++) {
        int rc = sh("%s grad --model %s --batch %s --out g.st", DEDLOC_BINARY, fixture, batches[i]);
        CHECK_MSG(rc == 1, "grad --batch %s: exit %d", batches[i], rc);
        CHECK(!exists("g.st"));
    }
    static const char *checkpoints[] = {"junk.bin", "empty", "cut/model.safetensors", "no-such-file"};
    for (size_t i = 0; i < 4; i++) {
        int rc = sh("%s export --checkpoint %s --out exported", DEDLOC_BINARY, checkpoints[i]);
        CHECK_MSG(rc == 1, "export --checkpoint %s: exit %d", checkpoints[i], rc);
        CHECK(!exists("exported/model.safetensors"));
        rc = sh("%s train --resume %s --data %s --quiet", DEDLOC_BINARY, checkpoints[i], corpus);
        CHECK_MSG(rc == 1, "train --resume %s: exit %d", checkpoints[i], rc);
    }
    /* Outputs that cannot be written: a regular file where a folder belongs. */
    CHECK(sh("%s grad --model %s --batch %s/batch.safetensors --out empty/g.st", DEDLOC_BINARY, fixture, fixture) ==
          1);
    /* --out is written before --logits: a failing --logits takes it back. */
    CHECK(sh("%s grad --model %s --batch %s/batch.safetensors --out g.st --logits empty/l.st", DEDLOC_BINARY, fixture,
             fixture) == 1);
    CHECK(!exists("g.st"));
    CHECK(sh("%s train --data %s --checkpoint-dir empty --max-steps 1 --quiet", DEDLOC_BINARY, corpus) == 1);
    CHECK(sh("%s train --data %s --max-steps 1 --batch 2 --seq 16 --target-batch 2 --log . --quiet", DEDLOC_BINARY,
             corpus) == 1);
    CHECK(file_has("err.txt", "cannot open the log"));
    /* A run that ends before any optimizer step reports no made-up losses. */
    CHECK(sh("%s train --data %s --max-steps 0 --batch 2 --seq 16 --target-batch 2 --quiet", DEDLOC_BINARY, corpus) ==
          0);
    CHECK(file_has("err.txt", "no optimizer step completed"));
    CHECK(!file_has("err.txt", "loss 0.0000 -> 0.0000"));
}

/* The optimizer options given to a resumed run are applied, not silently
 * replaced by the checkpoint's (the schedule's end, --lr ...). */
static void resume_overrides(const char *corpus) {
    const char *base = "--data %s --batch 2 --seq 16 --target-batch 2 --seed 1 --checkpoint-dir ck --quiet";
    char args[512];
    snprintf(args, sizeof args, base, corpus);
    CHECK(sh("%s train %s --max-steps 2", DEDLOC_BINARY, args) == 0);
    /* Past the stored schedule's end without --total-steps: said aloud. */
    CHECK(sh("%s train %s --max-steps 3 --log lr0.jsonl", DEDLOC_BINARY, args) == 0);
    CHECK(file_has("err.txt", "past the schedule's end"));
    /* --lr 0.001 --total-steps 10, warmup 0 (stored): step 4 runs at
     * 0.001 * (1 - 3/10). */
    CHECK(sh("%s train %s --max-steps 4 --lr 0.001 --total-steps 10 --log lr.jsonl", DEDLOC_BINARY, args) == 0);
    CHECK(file_has("lr.jsonl", "\"step\": 4,"));
    CHECK_MSG(file_has("lr.jsonl", "\"lr\": 0.0007,"), "the resumed run ignored --lr / --total-steps");
    CHECK(sh("%s train %s --max-steps 5 --optimizer adamw", DEDLOC_BINARY, args) == 2);
    /* A checkpoint whose run settings hold an absurd number is refused. */
    dl_checkpoint ck;
    char path[512];
    snprintf(path, sizeof path, "%s/ck/checkpoint-0000000004.safetensors", cli_dir);
    CHECK_OK(dl_checkpoint_load(path, 0, &ck));
    if (ck.run_json) {
        free(ck.run_json);
        ck.run_json = dl_strdup("{\"model\": \"tiny\", \"batch\": 1e300, \"seq\": 16}");
        snprintf(path, sizeof path, "%s/bad_run.safetensors", cli_dir);
        CHECK_OK(dl_checkpoint_save(path, &ck));
        CHECK(sh("%s train --resume bad_run.safetensors --data %s --quiet", DEDLOC_BINARY, corpus) == 1);
        CHECK(file_has("err.txt", "run setting 'batch' is out of range"));
    }
    dl_checkpoint_free(&ck);
    /* A --seq beyond the model's positions is cut to them, and said so. */
    CHECK(sh("%s train --data %s --batch 2 --seq 4096 --target-batch 2 --max-steps 1 --quiet", DEDLOC_BINARY,
             corpus) == 0);
    CHECK(file_has("err.txt", "--seq 4096 exceeds the model's 128 positions"));
}

/* A port out of range or with trailing junk is refused, not wrapped or cut
 * (99999 used to listen on 34463, "12x" on 12), as a usage error (exit 2). */
static void peer_ports(void) {
    static const char *bad[] = {"127.0.0.1:99999", "127.0.0.1:12x", "[::1]:70000", "127.0.0.1:", "localhost:65536"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = sh("%s peer --run-id qa --no-dht --duration 1 --listen '%s'", DEDLOC_BINARY, bad[i]);
        CHECK_MSG(rc == 2, "peer --listen %s: exit %d", bad[i], rc);
        CHECK_MSG(file_has("err.txt", "port must be a number"), "peer --listen %s: no port error", bad[i]);
        rc = sh("%s peer --run-id qa --no-dht --duration 1 --listen 127.0.0.1:0 --initial-peers '%s'",
                DEDLOC_BINARY, bad[i]);
        CHECK_MSG(rc == 2, "peer --initial-peers %s: exit %d", bad[i], rc);
    }
    /* No port at all is a usage error too, not a failure found at bind time. */
    static const char *portless[] = {"bad", "::1", "[::1]"};
    for (size_t i = 0; i < sizeof portless / sizeof portless[0]; i++) {
        int rc = sh("%s peer --run-id qa --no-dht --duration 1 --listen '%s'", DEDLOC_BINARY, portless[i]);
        CHECK_MSG(rc == 2, "peer --listen %s: exit %d", portless[i], rc);
        CHECK_MSG(file_has("err.txt", "has no port"), "peer --listen %s: no 'has no port' error", portless[i]);
    }
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    if (cli_dir_make("/tmp/dedloc_cli_bad_XXXXXX")) return 1;
    const char *tok = DEDLOC_SOURCE_DIR "/assets/tokenizer_bn_demo.json";
    const char *corpus = DEDLOC_SOURCE_DIR "/tests/fixtures/data/bn_paragraphs.txt";
    const char *fixture = DEDLOC_SOURCE_DIR "/tests/fixtures/albert_tiny";
    help_and_unknown_options();
    data_numbers(tok, corpus);
    garbage_files(tok, corpus, fixture);
    resume_overrides(corpus);
    peer_ports();
    cli_dir_remove();
    return dl_test_finish("cli_bad_input");
}
