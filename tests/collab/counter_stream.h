/* A synthetic trainer backend whose data stream is a counter, for the
 * resume tests of the step loop (test_collab_resume.c, test_collab_local.c):
 * batch k of the stream gives the gradient of a quadratic toward a target
 * drawn from seed + k, and the stream's saved "state" is the counter at its
 * mark. It records which stream batches it fed as micro-batches, so a
 * resumed run can be compared with an uninterrupted one batch for batch. */
#ifndef DEDLOC_TESTS_COUNTER_STREAM_H
#define DEDLOC_TESTS_COUNTER_STREAM_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { CS_N = 19, CS_SAMPLES = 3, CS_MAX_DRAWN = 64 };

typedef struct {
    float params[CS_N];
    uint64_t seed;               /* targets of batch k are drawn from seed + k */
    int64_t pos;                 /* the next batch of the stream */
    int64_t mark;                /* the stream at the last mark (-1: none) */
    int64_t skipped;             /* batches thrown away before the first micro-batch (the
                                  * others' shares after each are not counted) */
    int64_t drawn[CS_MAX_DRAWN]; /* the stream batches fed as micro-batches */
    int count;
    int stop_after;              /* > 0: raise *stop once this many micro-batches were fed */
    volatile sig_atomic_t *stop;
} counter_stream;

static inline int cs_set_params(void *ctx, const float *p) {
    memcpy(((counter_stream *)ctx)->params, p, sizeof(float) * CS_N);
    return 0;
}

static inline int cs_micro_batch(void *ctx, float scale, float *grad, int *samples, dl_losses *losses) {
    counter_stream *s = ctx;
    int64_t k = s->pos++;
    if (s->count < CS_MAX_DRAWN) s->drawn[s->count] = k;
    s->count++;
    if (s->stop_after > 0 && s->count == s->stop_after) *s->stop = 1;
    dl_rng rng;
    dl_rng_seed(&rng, s->seed + (uint64_t)k);
    double loss = 0;
    for (int i = 0; i < CS_N; i++) {
        float d = s->params[i] - (0.5f + 0.1f * dl_rng_normal(&rng));
        loss += 0.5 * (double)d * d / CS_N;
        grad[i] = d / (float)CS_N * scale / scale;
    }
    *samples = CS_SAMPLES;
    *losses = (dl_losses){.loss = (float)loss, .mlm_loss = (float)loss, .sop_loss = 0};
    return 0;
}

static inline int cs_skip(void *ctx, int64_t n) {
    counter_stream *s = ctx;
    s->pos += n;
    if (s->count == 0) s->skipped += n;
    return 0;
}

static inline int cs_mark(void *ctx) {
    counter_stream *s = ctx;
    s->mark = s->pos;
    return 0;
}

static inline int cs_save(void *ctx, uint8_t **state, size_t *size) {
    counter_stream *s = ctx;
    if (s->mark < 0) return dl_fail("no mark");
    *state = malloc(sizeof s->mark);
    if (!*state) return -1;
    memcpy(*state, &s->mark, sizeof s->mark);
    *size = sizeof s->mark;
    return 0;
}

static inline dl_trainer_backend counter_stream_backend(counter_stream *s, bool data_resumed) {
    return (dl_trainer_backend){.ctx = s, .set_params = cs_set_params, .micro_batch = cs_micro_batch,
                                .skip = cs_skip, .mark_data = cs_mark, .save_data = cs_save,
                                .data_resumed = data_resumed};
}

/* dl_collab_train_run of a lone peer on loopback (no DHT) under run_id. */
static inline int counter_stream_lone_run(const char *run_id, const struct dl_collab_train_options *o,
                                          const dl_opt_config *opt, const dl_train_layout *layout, float *params,
                                          const dl_checkpoint *resume, const dl_trainer_backend *be) {
    struct dl_net_config nc;
    dl_net_config_default(&nc);
    nc.run_id = run_id;
    nc.listen = "127.0.0.1:0";
    nc.use_dht = false;
    struct dl_collab_config cc;
    dl_collab_config_default(&cc);
    dl_net *net = NULL;
    dl_collab *collab = NULL;
    dl_state_donor *donor = NULL;
    struct dl_collab_train_result res;
    int rc = -1;
    if (!dl_net_start(&nc, &net) && !dl_collab_start(net, &cc, &collab) && !dl_state_donor_start(net, NULL, &donor))
        rc = dl_collab_train_run(net, collab, donor, o, opt, layout, params, resume, be, &res);
    dl_state_donor_stop(donor);
    if (collab) dl_collab_stop(collab);
    dl_net_stop(net);
    return rc;
}

/* s fed micro-batches from..from + want - 1 of the uninterrupted run. */
static inline void counter_stream_check_fed(const counter_stream *s, const counter_stream *whole, int from, int want,
                                            const char *what) {
    CHECK_MSG(s->count == want, "%s: fed %d micro-batches, want %d", what, s->count, want);
    for (int i = 0; i < s->count && i < CS_MAX_DRAWN && from + i < CS_MAX_DRAWN; i++)
        CHECK_MSG(s->drawn[i] == whole->drawn[from + i], "%s: micro-batch %d is stream batch %lld, want %lld", what,
                  from + i, (long long)s->drawn[i], (long long)whole->drawn[from + i]);
}

#endif
