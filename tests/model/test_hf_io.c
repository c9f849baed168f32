/* HF model folders: a fixture loads with every tensor in place, saving writes
 * the same key set and shapes save_pretrained writes, and a saved folder reads
 * back bit for bit. Malformed folders fail with the tensor named. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/safetensors.h"
#include "dedloc/util.h"
#include "dl_test.h"

int main(void) {
    char fixture[1024], path[1200], tmp[] = "/tmp/dedloc_hf_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/albert_groups", DEDLOC_SOURCE_DIR);
    dl_albert_config cfg, back_cfg;
    float *params = NULL, *back = NULL;
    CHECK_OK(dl_albert_load_hf(fixture, &cfg, &params));
    CHECK(cfg.num_hidden_groups == 2 && cfg.inner_group_num == 2);
    CHECK_OK(dl_albert_save_hf(tmp, &cfg, params));
    CHECK_OK(dl_albert_load_hf(tmp, &back_cfg, &back));
    CHECK(!memcmp(&cfg, &back_cfg, sizeof cfg));
    dl_param_layout layout;
    CHECK_OK(dl_param_layout_build(&cfg, &layout));
    if (params && back) CHECK(!memcmp(params, back, layout.total * sizeof *params));

    /* same tensors, dtypes and shapes as transformers wrote */
    dl_safetensors *theirs = NULL, *ours = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", fixture);
    CHECK_OK(dl_st_read(path, 0, &theirs));
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    CHECK_OK(dl_st_read(path, 0, &ours));
    if (theirs && ours) {
        CHECK(theirs->count == ours->count);
        for (int i = 0; i < theirs->count; i++) {
            const dl_st_tensor *a = &theirs->tensors[i], *b = dl_st_find(ours, a->name);
            CHECK_MSG(b && b->dtype == a->dtype && b->ndim == a->ndim &&
                          !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]),
                      "%s", a->name);
        }
        const char *format = dl_st_metadata(ours, "format");
        CHECK(format && !strcmp(format, "pt"));
    }
    dl_st_free(theirs);
    dl_st_free(ours);

    /* a weight of the wrong shape for the config, then a missing one */
    dl_albert_config wrong = cfg;
    wrong.intermediate_size += 1;
    snprintf(path, sizeof path, "%s/config.json", tmp);
    CHECK_OK(dl_albert_config_save(path, &wrong));
    free(back);
    back = NULL;
    CHECK(dl_albert_load_hf(tmp, &back_cfg, &back) == -1);
    CHECK(strstr(dl_error(), "ffn.weight") != NULL && back == NULL);
    wrong = cfg;
    wrong.num_hidden_groups = 3;
    wrong.num_hidden_layers = 6;
    CHECK_OK(dl_albert_config_save(path, &wrong));
    CHECK(dl_albert_load_hf(tmp, &back_cfg, &back) == -1);
    CHECK(strstr(dl_error(), "albert_layer_groups.2") != NULL && strstr(dl_error(), "missing"));

    dl_param_layout_free(&layout);
    free(params);
    free(back);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return dl_test_finish("test_hf_io");
}
