/* The data pipeline's default configuration (sahajBERT's settings). */
#include "dedloc/data.h"

void dl_data_config_default(dl_data_config *cfg) {
    *cfg = (dl_data_config){0};
    cfg->format = DL_DATA_AUTO;
    cfg->json_field = "text";
    cfg->batch_size = 8;
    cfg->max_seq_len = 512;
    cfg->short_seq_prob = 0.1f;
    cfg->sop_swap_prob = 0.5f;
    cfg->mlm_probability = 0.15f;
    cfg->mask_replace_prob = 0.8f;
    cfg->random_replace_prob = 0.1f;
    cfg->whole_word_mask = false;
    cfg->shuffle_buffer = 10000;
    cfg->loop = true;
    cfg->queue_batches = 4;
    cfg->io_timeout_s = 30;
    cfg->max_retries = 10;
    cfg->retry_base_s = 0.5;
    cfg->retry_max_s = 30;
    cfg->max_line_bytes = (size_t)4 << 20;
}
