/* The device model: buffers, parameter upload, gradient download. */
#include "dedloc/model.h"
#include "dedloc/util.h"

int dl_model_create(dl_device *dev, const dl_albert_config *cfg, int max_batch, int max_seq,
                    dl_precision precision, dl_model **out) {
    (void)dev; (void)cfg; (void)max_batch; (void)max_seq; (void)precision;
    *out = NULL;
    return dl_fail("dl_model_create: not implemented yet");
}
void dl_model_free(dl_model *model) { (void)model; }
const dl_albert_config *dl_model_config(const dl_model *model) { (void)model; return NULL; }
const dl_param_layout *dl_model_layout(const dl_model *model) { (void)model; return NULL; }
int dl_model_set_params(dl_model *m, const float *p) { (void)m; (void)p; return dl_fail("not implemented yet"); }
int dl_model_get_params(dl_model *m, float *p) { (void)m; (void)p; return dl_fail("not implemented yet"); }
int dl_model_zero_grad(dl_model *m) { (void)m; return dl_fail("not implemented yet"); }
int dl_model_forward_backward(dl_model *m, const dl_batch *b, float s, dl_losses *o) {
    (void)m; (void)b; (void)s; (void)o; return dl_fail("not implemented yet");
}
int dl_model_forward(dl_model *m, const dl_batch *b, dl_losses *o) {
    (void)m; (void)b; (void)o; return dl_fail("not implemented yet");
}
int dl_model_get_grads(dl_model *m, float s, float *g) { (void)m; (void)s; (void)g; return dl_fail("not implemented yet"); }
size_t dl_model_memory_bytes(const dl_model *m) { (void)m; return 0; }
