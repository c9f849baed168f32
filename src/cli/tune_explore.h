/* Exploration for `dedloc tune`: runs CLBlast's own kernel tuner
 * (clblast_tuner_xgemm, Debian package clblast-utils) as a child process for
 * a bounded time and keeps the fastest verified configurations it printed. */
#ifndef DEDLOC_CLI_TUNE_EXPLORE_H
#define DEDLOC_CLI_TUNE_EXPLORE_H

#include <stddef.h>

#include "dedloc/device.h"

enum { DL_XGEMM_PARAMS_MAX = 24 };

/* One complete parameter set of CLBlast's Xgemm kernel. */
typedef struct dl_xgemm_config {
    size_t count;
    char names[DL_XGEMM_PARAMS_MAX][16];
    size_t values[DL_XGEMM_PARAMS_MAX];
    double tuner_gflops; /* as the tuner measured it, 0 for built-in candidates */
} dl_xgemm_config;

/* Runs the tuner on `info`'s device for an m x n x k product until it ends or
 * `seconds` pass, then returns the best distinct configurations (at most
 * max_out, fastest first) in out. *found may be 0 if nothing finished. Fails
 * if the tuner cannot be started. */
int dl_tune_explore(const dl_device_info *info, size_t m, size_t n, size_t k, double seconds,
                    dl_xgemm_config *out, int max_out, int *found);

/* A few configurations that do well on CPUs and GPUs, for when the tuner is
 * not installed. */
int dl_tune_builtin_candidates(dl_xgemm_config *out, int max_out);

#endif
