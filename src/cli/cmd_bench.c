/* dedloc bench: dispatches to one benchmark per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/bench.h"
#include "cli/commands.h"

/* Add a line here when you add src/cli/bench_<what>.c. */
const struct dl_bench dl_benches[] = {
    {"gemm", bench_gemm, "GEMM GFLOP/s of the transformer shapes: CLBlast untuned and tuned"},
    {"step", bench_step, "one ALBERT training step (forward + backward): tokens/s, GFLOP/s, memory"},
    {"allreduce", bench_allreduce, "averaging rounds between peer processes on loopback: time, algbw, busbw, LP bound"},
    {NULL, NULL, NULL},
};

static void help(FILE *out) {
    fprintf(out, "usage: dedloc bench <what> [options]   (dedloc bench <what> --help)\n\n");
    for (const struct dl_bench *b = dl_benches; b->name; b++)
        fprintf(out, "  %-10s %s\n", b->name, b->summary);
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2) {
        help(stderr);
        return DL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        help(stdout);
        return DL_EXIT_OK;
    }
    for (const struct dl_bench *b = dl_benches; b->name; b++)
        if (!strcmp(argv[1], b->name)) return b->run(argc - 1, argv + 1);
    /* The member processes that `bench allreduce` starts (not listed). */
    if (!strcmp(argv[1], "allreduce-member")) return bench_allreduce_member(argc - 1, argv + 1);
    fprintf(stderr, "dedloc bench: unknown benchmark '%s'\n", argv[1]);
    help(stderr);
    return DL_EXIT_USAGE;
}
