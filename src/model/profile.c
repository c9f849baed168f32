/* The per-op profile behind `dedloc bench step --profile`. With profiling on,
 * each kernel launch, GEMM and transfer of the model waits for the queue to
 * drain before and after it and adds its wall time to a table keyed by the
 * kernel's function name (or the GEMM's kind). Wall time rather than OpenCL
 * event timestamps: on a CPU device the GEMMs run in OpenBLAS on the host,
 * outside the queue, and events would miss them. Draining the queue around
 * every op costs overlap, so a profiled step is slower than a timed one; the
 * shares, not the sum, are what the profile is for. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

int dl_model_set_profiling(dl_model *m, bool on) {
    m->profiling = on;
    m->profile_count = 0;
    return 0;
}

const dl_op_profile *dl_model_profile(const dl_model *m, int *count) {
    *count = m->profile_count;
    return m->profile;
}

double model_profile_begin(dl_model *m) {
    if (!m->profiling) return 0;
    /* Ops queued earlier must not be charged to this one. */
    if (dl_device_finish(m->dev)) return -1;
    return dl_now();
}

int model_profile_end(dl_model *m, const char *name, double t0) {
    if (!m->profiling) return 0;
    if (t0 < 0 || dl_device_finish(m->dev)) return -1;
    double took = dl_now() - t0;
    for (int i = 0; i < m->profile_count; i++)
        if (!strcmp(m->profile[i].name, name)) {
            m->profile[i].seconds += took;
            m->profile[i].calls++;
            return 0;
        }
    if (m->profile_count == m->profile_cap) {
        int cap = m->profile_cap ? 2 * m->profile_cap : 32;
        dl_op_profile *grown = dl_realloc(m->profile, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        m->profile = grown;
        m->profile_cap = cap;
    }
    dl_op_profile *e = &m->profile[m->profile_count++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->seconds = took;
    e->calls = 1;
    return 0;
}

static int gemm(dl_model *m, const char *what, const dl_gemm_args *g, bool again) {
    double t0 = model_profile_begin(m);
    bool b_weights = g->b == &m->params;
    int rc = m->half   ? model_half_gemm(m, g)
             : m->bf16 ? (again ? dl_bf16_gemm_run_again : dl_bf16_gemm_run)(m->bf16, g, b_weights)
                       : dl_gemm(m->dev, g);
    if (rc) return -1;
    return model_profile_end(m, what, t0);
}

int model_gemm(dl_model *m, const char *what, const dl_gemm_args *g) { return gemm(m, what, g, false); }

int model_gemm_again(dl_model *m, const char *what, const dl_gemm_args *g) { return gemm(m, what, g, true); }
