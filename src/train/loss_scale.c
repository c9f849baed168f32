/* Dynamic loss scaling for fp16 storage, per micro-batch (see train.h). */
#include "dedloc/train.h"

void dl_loss_scale_init(dl_loss_scale *ls, bool enabled) {
    ls->enabled = enabled;
    ls->scale = enabled ? 65536.0f : 1.0f;
    ls->growth_factor = 2.0f;
    ls->backoff_factor = 0.5f;
    ls->growth_interval = 2000;
    ls->clean_steps = 0;
    ls->overflows = 0;
}

bool dl_loss_scale_update(dl_loss_scale *ls, bool grad_finite) {
    if (!grad_finite) {
        ls->overflows++;
        ls->clean_steps = 0;
        /* Never below the smallest normal float: past that the scale would
         * stop being an exact power of two to divide by. */
        if (ls->enabled && ls->scale * ls->backoff_factor >= 1.17549435e-38f)
            ls->scale *= ls->backoff_factor;
        return false;
    }
    ls->clean_steps++;
    if (ls->enabled && ls->clean_steps >= ls->growth_interval) {
        /* torch's GradScaler keeps the scale when growing would overflow. */
        float grown = ls->scale * ls->growth_factor;
        if (grown <= 3.4028235e38f) ls->scale = grown;
        ls->clean_steps = 0;
    }
    return true;
}

bool dl_loss_scale_unscale(const dl_loss_scale *ls, float *grad, size_t n) {
    const float inv = 1.0f / ls->scale;
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++) {
        grad[i] = grad[i] * inv;
        acc += grad[i] - grad[i];
    }
    return acc == 0.0f;
}
