/* MLM masking as BERT/ALBERT's create_masked_lm_predictions does it: exactly
 * max(1, round(n * probability)) of the n non-special tokens are selected (a
 * fixed count, not a per-token coin flip, so every sequence trains the same
 * number of predictions); with whole_word a word (a piece that starts a word
 * plus the continuation pieces after it) is selected or left as a unit, and a
 * word that would overshoot the count is passed over. Each selected token
 * becomes [MASK] with mask_prob, a random non-special token with random_prob,
 * and stays itself otherwise; its label is the original id. */
#include <string.h>

#include "data/data_internal.h"

enum { MAX_MASK_LEN = 8192 };

int dl_mask_tokens(int32_t *ids, int32_t *labels, size_t len, const dl_mask_params *p,
                   const dl_data_text *text, const int32_t *nonspecial, size_t nonspecial_count,
                   dl_rng *rng) {
    if (len > MAX_MASK_LEN) return dl_fail("sequence of %zu tokens is too long to mask", len);
    for (size_t i = 0; i < len; i++) labels[i] = -100;
    /* Units: word starts (or every token) among the non-special positions. */
    uint32_t unit_start[MAX_MASK_LEN + 1];
    uint32_t unit_len[MAX_MASK_LEN];
    size_t units = 0, candidates = 0;
    bool prev_candidate = false;
    for (size_t i = 0; i < len; i++) {
        int32_t id = ids[i];
        bool candidate = id >= 0 && (size_t)id < text->vocab_size && !text->special[id];
        if (candidate) {
            candidates++;
            bool continues = p->whole_word && prev_candidate && !text->word_start[id];
            if (continues) {
                unit_len[units - 1]++;
            } else {
                unit_start[units] = (uint32_t)i;
                unit_len[units] = 1;
                units++;
            }
        }
        prev_candidate = candidate;
    }
    if (!candidates) return 0;
    size_t target = (size_t)((float)candidates * p->probability + 0.5f);
    if (target < 1) target = 1;
    /* Fisher-Yates over the units, taking them while they fit. */
    size_t selected = 0;
    for (size_t k = 0; k < units && selected < target; k++) {
        size_t j = k + (size_t)dl_rng_below(rng, units - k);
        uint32_t s = unit_start[j], l = unit_len[j];
        unit_start[j] = unit_start[k];
        unit_len[j] = unit_len[k];
        unit_start[k] = s;
        unit_len[k] = l;
        if (selected + l > target) continue;
        selected += l;
        for (uint32_t t = s; t < s + l; t++) {
            labels[t] = ids[t];
            float r = dl_rng_uniform(rng);
            if (r < p->mask_prob)
                ids[t] = text->mask_id;
            else if (r < p->mask_prob + p->random_prob && nonspecial_count)
                ids[t] = nonspecial[dl_rng_below(rng, nonspecial_count)];
        }
    }
    return 0;
}
