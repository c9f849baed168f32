/* Writing a Hugging Face model folder from fp32 weights: what `dedloc export`
 * does with a checkpoint and `dedloc monitor --export-dir` with the swarm's
 * state. */
#ifndef DEDLOC_CLI_EXPORT_HF_H
#define DEDLOC_CLI_EXPORT_HF_H

#include <stddef.h>

#include "dedloc/model.h"

/* Writes config.json, model.safetensors (F32) and the tokenizer files
 * (tokenizer.json, tokenizer_config.json, special_tokens_map.json) into out:
 * everything goes into a sibling temporary folder that is then renamed into
 * place, so out is whole or untouched. An existing out is replaced only if it
 * holds nothing but these files. The tokenizer: tokenizer (a tokenizer.json
 * path), else the one named in run_json's "tokenizer", else the built-in demo
 * tokenizer; tok_name gets which. Returns 0 or -1 with dl_fail(). */
int cli_export_hf(const char *out, const dl_albert_config *cfg, const float *params, const char *tokenizer,
                  const char *run_json, char *tok_name, size_t tok_name_size);

/* 0 when out may take an export: absent, or a folder holding nothing but an
 * export's files; -1 with dl_fail() otherwise. */
int cli_export_check_out(const char *out);

#endif
