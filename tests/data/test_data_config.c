/* The data configuration defaults match the sahajBERT recipe. */
#include "dedloc/data.h"
#include "dl_test.h"

int main(void) {
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    CHECK(cfg.max_seq_len == 512);
    CHECK(cfg.mlm_probability == 0.15f);
    CHECK(cfg.mask_replace_prob == 0.8f && cfg.random_replace_prob == 0.1f);
    CHECK(cfg.sop_swap_prob == 0.5f);
    CHECK(cfg.shuffle_buffer == 10000);
    CHECK(cfg.json_field && !strcmp(cfg.json_field, "text"));
    return dl_test_finish("test_data_config");
}
