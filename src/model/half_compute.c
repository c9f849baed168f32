/* fp16 compute for --precision fp16: every GEMM of the model runs in half
 * (dl_half_gemm: CLBlastHgemm, the product added into fp32 destinations)
 * where the device reports cl_khr_fp16. The row and elementwise kernels keep
 * computing in fp32 on the fp16-stored activations: their sums (LayerNorm,
 * softmax, the losses, bias gradients) need fp32, and their cost is memory
 * traffic, which the fp16 storage already halves. Gradients accumulate in
 * fp32, and the master weights and the optimizer stay fp32 on the host.
 *
 * DEDLOC_FP16_COMPUTE chooses: auto (default: half GEMMs where cl_khr_fp16 is
 * reported, fp32 arithmetic on fp16 storage elsewhere), off, require (refused
 * on a device without cl_khr_fp16), and, in test builds only, emulate (the
 * emulated path of dl_half_gemm on any device, for the tests on CPUs). */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

int dl_model_fp16_compute(const dl_device_info *info, dl_precision precision, int *elem) {
    *elem = 0;
    const char *env = getenv("DEDLOC_FP16_COMPUTE");
    if (!env || !*env) env = "auto";
    bool emulate = false, want;
    if (!strcmp(env, "auto")) {
        want = info->fp16;
    } else if (!strcmp(env, "off")) {
        want = false;
    } else if (!strcmp(env, "require")) {
        want = true;
        if (!info->fp16 && precision == DL_PRECISION_FP16)
            return dl_fail("DEDLOC_FP16_COMPUTE=require: %s does not report cl_khr_fp16, so it "
                           "has no fp16 compute; unset it to train with fp16 storage and fp32 "
                           "arithmetic, or pick another device (dedloc devices)",
                           info->name);
    } else if (!strcmp(env, "emulate")) {
#ifdef DEDLOC_TEST_HOOKS
        want = emulate = true;
#else
        return dl_fail("DEDLOC_FP16_COMPUTE=emulate is a test-only switch that this build "
                       "does not have (CMake option DEDLOC_TEST_HOOKS)");
#endif
    } else {
        return dl_fail("DEDLOC_FP16_COMPUTE='%s': expected auto, off or require", env);
    }
    if (want && precision == DL_PRECISION_FP16) *elem = emulate ? (int)sizeof(float) : (int)sizeof(cl_half);
    return 0;
}

int model_half_open(dl_model *m) {
    const dl_device_info *info = dl_device_get_info(m->dev);
    int elem;
    if (dl_model_fp16_compute(info, m->precision, &elem)) return -1;
    if (!elem) return 0;
    bool emulate = elem != (int)sizeof(cl_half);
    if (dl_half_gemm_create(m->dev, emulate, &m->half)) return -1;
    DL_DEBUG("model", "fp16 compute on %s%s", info->name, emulate ? " (emulated)" : "");
    return 0;
}

int model_half_reserve(dl_model *m) {
    if (!m->half) return 0;
    size_t elem = dl_half_gemm_element_size(m->half), span[3];
    model_half_scratch_spans(&m->cfg, (size_t)m->max_batch, (size_t)m->max_seq, span);
    if (dl_buffer_alloc(m->dev, (m->layout.total * elem + 3) & ~(size_t)3, &m->params_half) ||
        dl_half_gemm_reserve(m->half, span[0], span[1], span[2]))
        return dl_fail_context("allocating the fp16 compute buffers (batch %d x %d); try a smaller batch",
                               m->max_batch, m->max_seq);
    return 0;
}

void model_half_close(dl_model *m) {
    if (m->params_half.mem) dl_buffer_free(m->dev, &m->params_half);
    dl_half_gemm_free(m->half);
    m->half = NULL;
}

int model_half_params(dl_model *m) {
    if (!m->half) return 0;
    return dl_half_gemm_operand(m->half, &m->params, 0, m->layout.total, &m->params_half);
}

size_t model_half_bytes(const dl_model *m) {
    if (!m->half) return 0;
    return (m->params_half.mem ? m->params_half.size : 0) + dl_half_gemm_scratch_bytes(m->half);
}

int model_half_gemm(dl_model *m, const dl_gemm_args *g) {
    /* The weights were rounded once per dl_model_set_params. */
    const dl_buffer *b_ready = g->b == &m->params && m->params_half.mem ? &m->params_half : NULL;
    return dl_half_gemm_run(m->half, g, b_ready);
}

const char *dl_model_compute_name(const dl_model *m) {
    if (!m->half) return m->bf16 ? "bf16" : "fp32";
    return dl_half_gemm_emulated(m->half) ? "fp16-emulated" : "fp16";
}
