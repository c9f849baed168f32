/* bench_gemm: the GEMM benchmark as a standalone program. The benchmark itself
 * is `dedloc bench gemm` (src/cli/bench_gemm.c over the device module's GEMM
 * timing, with bench/gemm_openblas.c linked in for the CPU comparison); this
 * runs the dedloc binary built beside it with the same arguments, so both
 * always measure the same thing. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "bench_gemm: cannot locate myself: %s\n", strerror(errno));
        return 1;
    }
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    char binary[PATH_MAX + 16];
    snprintf(binary, sizeof binary, "%s/dedloc", self);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 1;
    args[0] = binary;
    args[1] = "bench";
    args[2] = "gemm";
    for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
    execv(binary, args);
    fprintf(stderr, "bench_gemm: cannot run %s: %s (build the dedloc target)\n", binary,
            strerror(errno));
    return 1;
}
