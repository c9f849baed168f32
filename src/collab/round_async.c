/* An averaging round on a thread of its own (collab/round_async.h). The
 * round touches only its vector and the collab service, which takes its
 * own locks, so the caller may keep computing and talking to net. */
#include <string.h>

#include "collab/round_async.h"
#include "dedloc/util.h"

static void *round_main(void *arg) {
    dl_async_round *a = arg;
    a->status = dl_collab_average(a->collab, a->vec, a->n, &a->options, &a->result);
    a->after_rc = a->status == DL_AVG_OK && a->after ? a->after(a->user, &a->result) : 0;
    atomic_store(&a->done, true);
    return NULL;
}

int dl_async_round_start(dl_async_round *a, dl_collab *collab, float *vec, size_t n,
                         const struct dl_avg_options *options, int (*after)(void *, const struct dl_avg_result *),
                         void *user) {
    if (a->running) return dl_fail("an averaging round is already running");
    memset(&a->result, 0, sizeof a->result);
    a->collab = collab;
    a->vec = vec;
    a->n = n;
    a->options = *options;
    a->status = DL_AVG_FAILED;
    a->after = after;
    a->user = user;
    a->after_rc = 0;
    a->started = dl_now();
    atomic_store(&a->done, false);
    int rc = pthread_create(&a->thread, NULL, round_main, a);
    if (rc) return dl_fail("cannot start a thread for the averaging round (%s): memory or thread limits?", strerror(rc));
    a->running = true;
    return 0;
}

bool dl_async_round_done(dl_async_round *a) { return a->running && atomic_load(&a->done); }

int dl_async_round_join(dl_async_round *a, struct dl_avg_result *result) {
    if (!a->running) {
        memset(result, 0, sizeof *result);
        result->status = DL_AVG_FAILED;
        snprintf(result->reason, sizeof result->reason, "no round was running");
        return DL_AVG_FAILED;
    }
    pthread_join(a->thread, NULL);
    a->running = false;
    *result = a->result;
    memset(&a->result, 0, sizeof a->result);
    return a->status;
}
