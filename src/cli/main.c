/* dedloc: one binary, one subcommand per job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "dedloc/util.h"

const struct dl_command dl_commands[] = {
    {"devices", cmd_devices, "list OpenCL devices and their capabilities"},
    {"tokenize", cmd_tokenize, "turn text lines into token ids (HF tokenizers-compatible Unigram)"},
    {"peer", cmd_peer, "join a collaboration without training; print the swarm view"},
    {"authority", cmd_authority, "run authority: who may join a collaboration (tokens, revocations)"},
    {"monitor", cmd_monitor, "watch a collaboration: live charts, peers, contributors, /metrics over HTTP"},
    {"serve-data", cmd_serve_data, "serve a directory of text shards over HTTP to the peers"},
    {"data", cmd_data, "run the training-data stream alone: show batches and counters"},
    {"train", cmd_train, "train ALBERT, alone or in a swarm (--initial-peers, --manifest): checkpoints, resume"},
    {"run", cmd_run, "the run manifest: init writes one (signed), show verifies and prints one"},
    {"join", cmd_join, "join a run with one address: fetch its manifest and tokenizer, then train"},
    {"aux", cmd_aux, "auxiliary peer of a collaboration: aggregates and serves the state, no gradients"},
    {"tune", cmd_tune, "tune CLBlast GEMM for this device and a model's shapes (stored, applied at start)"},
    {"bench", cmd_bench, "benchmarks: bench gemm (GEMM GFLOP/s), bench step (one training step), bench allreduce"},
    {"grad", cmd_grad, "loss and gradients of one batch for a HF model folder (checks against transformers)"},
    {"export", cmd_export, "write a checkpoint as a Hugging Face model folder"},
    {"completion", cmd_completion, "print the bash completion (from the commands' option tables)"},
    {NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out,
            "dedloc: train an ALBERT language model together with volunteers over the internet,\n"
            "on any OpenCL device (NVIDIA, AMD and Intel GPUs, CPUs through PoCL).\n\n"
            "usage: dedloc <command> [options]\n"
            "       dedloc <command> --help\n"
            "       dedloc --version\n\ncommands:\n");
    for (const struct dl_command *c = dl_commands; c->name; c++)
        fprintf(out, "  %-12s %s\n", c->name, c->summary);
    fprintf(out,
            "\nenvironment:\n"
            "  DEDLOC_LOG         log level: error, warn, info (default), debug\n"
            "  DEDLOC_CACHE_DIR   cache folder (default $XDG_CACHE_HOME/dedloc or ~/.cache/dedloc)\n"
            "  DEDLOC_CL_DIR      load kernel sources from this folder instead of the embedded ones\n"
            "  DEDLOC_NO_TUNING   set to 1 to ignore CLBlast parameters stored by 'dedloc tune'\n"
            "\nexit status: 0 success, 1 runtime failure, 2 usage error\n");
}

/* oneDNN's GEMMs thread with OpenMP, and GNU OpenMP's idle threads spin for a
 * while after each parallel region by default. The model's OpenCL kernels
 * run on PoCL's own threads between those GEMMs, on the same cores, and a
 * spinning OpenMP thread takes a core from them: 9% of a sahajBERT bf16
 * step's CPU time went to that spinning, and the step ran about 5% faster
 * with OMP_WAIT_POLICY=passive (idle threads sleep at once). libgomp reads
 * the variable once, in its constructor, before main runs (and a setenv from
 * the executable's preinit array is lost when libc sets up the environment
 * after it), so the commands that compute set it and start again in place.
 * An OMP_WAIT_POLICY or GOMP_SPINCOUNT already set is left as it is. */
static void omp_wait_passive(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    /* Not started again (no /proc): run on with OpenMP's default. */
    unsetenv("OMP_WAIT_POLICY");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return DL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return DL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("dedloc 0.1.0\n");
        return DL_EXIT_OK;
    }
    static const char *const computing[] = {"train", "join", "bench", "grad", "tune"};
    for (size_t i = 0; i < sizeof computing / sizeof computing[0]; i++)
        if (!strcmp(argv[1], computing[i])) omp_wait_passive(argv);
    for (const struct dl_command *c = dl_commands; c->name; c++)
        if (!strcmp(argv[1], c->name)) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "dedloc: unknown command '%s'; see 'dedloc --help'\n", argv[1]);
    return DL_EXIT_USAGE;
}
