/* The optimizer's view of the ALBERT parameter layout: same packing and
 * shapes as the model's, weight decay by the Hugging Face name rule. */
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

int main(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    dl_param_layout ml;
    CHECK_OK(dl_param_layout_build(&cfg, &ml));
    dl_train_layout tl;
    CHECK_OK(dl_train_layout_from_model(&ml, &tl));
    CHECK(tl.count == ml.count && tl.total == ml.total);
    int decayed = 0;
    for (int i = 0; i < tl.count; i++) {
        const dl_train_tensor *t = &tl.tensors[i];
        const dl_param_entry *e = &ml.entries[i];
        CHECK(!strcmp(t->name, e->name) && t->offset == e->offset && t->numel == e->numel);
        CHECK(t->ndim == e->ndim && t->shape[0] == e->shape[0]);
        bool want = strstr(e->name, "bias") || strstr(e->name, "LayerNorm.weight");
        CHECK_MSG(t->no_weight_decay == want, "%s", e->name);
        decayed += !t->no_weight_decay;
    }
    /* sahajBERT's rule in HF ALBERT's names: */
    const char *no_decay[] = {"albert.embeddings.LayerNorm.weight", "predictions.LayerNorm.weight",
                              "predictions.bias", "sop_classifier.classifier.bias"};
    for (size_t k = 0; k < sizeof no_decay / sizeof no_decay[0]; k++)
        for (int i = 0; i < tl.count; i++)
            if (!strcmp(tl.tensors[i].name, no_decay[k])) CHECK_MSG(tl.tensors[i].no_weight_decay, "%s", no_decay[k]);
    /* ... which decays the layer's full_layer_layer_norm.weight (no "LayerNorm" in its name). */
    for (int i = 0; i < tl.count; i++)
        if (strstr(tl.tensors[i].name, "full_layer_layer_norm.weight")) CHECK(!tl.tensors[i].no_weight_decay);
    printf("tiny: %d tensors, %zu parameters, %d with weight decay\n", tl.count, tl.total, decayed);
    dl_train_layout_free(&tl);
    dl_param_layout_free(&ml);
    return dl_test_finish("test_layout");
}
