/* bench_gemm: `dedloc bench gemm` (src/cli/bench_gemm.c, the same source)
 * with, on a CPU device, the OpenBLAS column beside CLBlast's: the same
 * shapes through cblas_sgemm on the same cores (bench/gemm_openblas.c). The
 * shipped binary measures the device only; this program keeps the side by
 * side that the CPU figures of bench/README.md come from. Options, table and
 * JSON are those of `dedloc bench gemm --help`. */
#include "cli/bench.h"

int main(int argc, char **argv) { return bench_gemm(argc, argv); }
