/* bf16 compute for --precision bf16: on a CPU device that runs its GEMMs on
 * the host and has the AVX512-BF16 instructions, every linear layer's GEMM
 * rounds its operands to bf16 and multiplies them with fp32 accumulation
 * (dl_bf16_gemm, through oneDNN), as PyTorch's CPU autocast does. What
 * autocast keeps in fp32 stays fp32 here too: LayerNorm statistics, softmax,
 * the losses, the gradient accumulator (each product lands in fp32), and the
 * master weights and the optimizer on the host. The weights are rounded once
 * per upload and reused by every layer application and micro-batch.
 * Attention's batched products (scores Q K^T and context P V, and their
 * gradients) run in bf16 the same way, one oneDNN matmul over (sequence,
 * head) each; the softmax between them reads and writes fp32.
 *
 * DEDLOC_BF16_COMPUTE chooses: auto (default: bf16 GEMMs where possible,
 * else one line at start says why and bf16 storage runs with fp32
 * arithmetic, as before), off, require (refused where impossible). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "model/model_internal.h"

int model_bf16_open(dl_model *m) {
    if (m->precision != DL_PRECISION_BF16) return 0;
    const char *env = getenv("DEDLOC_BF16_COMPUTE");
    if (!env || !*env) env = "auto";
    bool require = !strcmp(env, "require");
    if (!strcmp(env, "off")) return 0;
    if (!require && strcmp(env, "auto"))
        return dl_fail("DEDLOC_BF16_COMPUTE='%s': expected auto, off or require", env);
    char why[256];
    if (!dl_bf16_gemm_supported(m->dev, why, sizeof why)) {
        if (require)
            return dl_fail("DEDLOC_BF16_COMPUTE=require: no bf16 compute: %s; unset it to train with "
                           "bf16 storage and fp32 arithmetic", why);
        /* Said once per process: a run opens its model once, tests many times. */
        static atomic_flag told = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&told))
            DL_INFO("model", "bf16 compute unavailable (%s): bf16 storage with fp32 arithmetic", why);
        return 0;
    }
    if (dl_bf16_gemm_create(m->dev, &m->bf16)) return -1;
    DL_DEBUG("model", "bf16 compute on %s", dl_device_get_info(m->dev)->name);
    return 0;
}

void model_bf16_close(dl_model *m) {
    dl_bf16_gemm_free(m->bf16);
    m->bf16 = NULL;
}

int model_bf16_params(dl_model *m, const float *params) {
    if (!m->bf16) return 0;
    return dl_bf16_gemm_set_weights(m->bf16, params, m->layout.total);
}
