/* `dedloc bench <what>`: benchmarks share one dispatcher (cmd_bench.c); each
 * lives in src/cli/bench_<what>.c and prints a table, or JSON with --json. */
#ifndef DEDLOC_CLI_BENCH_H
#define DEDLOC_CLI_BENCH_H

typedef int (*dl_bench_fn)(int argc, char **argv);

struct dl_bench {
    const char *name;
    dl_bench_fn run;
    const char *summary;
};

/* The benchmarks `dedloc bench` runs (cmd_bench.c), ending with a zero entry. */
extern const struct dl_bench dl_benches[];

int bench_step(int argc, char **argv);
int bench_gemm(int argc, char **argv);
int bench_allreduce(int argc, char **argv);
/* internal: one member process of bench allreduce and of the averaging tests */
int bench_allreduce_member(int argc, char **argv);

#endif
