/* One averaging round run beside the caller's compute (private to
 * src/collab): the delayed-update mode starts the round of step E on a
 * thread of its own and keeps drawing micro-batches for step E+1. */
#ifndef DEDLOC_COLLAB_ROUND_ASYNC_H
#define DEDLOC_COLLAB_ROUND_ASYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "dedloc/collab.h"

typedef struct dl_async_round {
    dl_collab *collab;
    float *vec;                   /* borrowed: the caller leaves it alone until joined */
    size_t n;
    struct dl_avg_options options;
    struct dl_avg_result result;
    int status;
    /* Optional: runs on the round's thread after a successful average
     * (the optimizer step, its hash and snapshot); its return value goes
     * to after_rc. */
    int (*after)(void *user, const struct dl_avg_result *result);
    void *user;
    int after_rc;
    double started;               /* dl_now() at the start */
    pthread_t thread;
    atomic_bool done;
    bool running;                 /* started and not yet joined */
} dl_async_round;

/* Starts dl_collab_average(collab, vec, n, options) on a new thread, then
 * after(user, result) if it succeeded (after may be NULL). */
int dl_async_round_start(dl_async_round *a, dl_collab *collab, float *vec, size_t n,
                         const struct dl_avg_options *options, int (*after)(void *, const struct dl_avg_result *),
                         void *user);
/* Whether the round has returned (joining will not block). */
bool dl_async_round_done(dl_async_round *a);
/* Waits for the round; *result then belongs to the caller (dl_avg_result_free).
 * Returns the round's status. */
int dl_async_round_join(dl_async_round *a, struct dl_avg_result *result);

#endif
