/* Import and export of a Hugging Face model folder (config.json +
 * model.safetensors). */
#include "dedloc/model.h"
#include "dedloc/util.h"

int dl_albert_load_hf(const char *dir, dl_albert_config *cfg, float **params) {
    (void)dir; (void)cfg; (void)params;
    return dl_fail("dl_albert_load_hf: not implemented yet");
}

int dl_albert_save_hf(const char *dir, const dl_albert_config *cfg, const float *params) {
    (void)dir; (void)cfg; (void)params;
    return dl_fail("dl_albert_save_hf: not implemented yet");
}
