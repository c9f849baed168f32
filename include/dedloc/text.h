/* dedloc text: HF tokenizers-compatible Unigram tokenizer (tokenizer.json)
 * with its normalizer, pre-tokenizer and post-processor pipeline.
 *
 * Contract with src/data: dl_tokenizer_encode produces the ids of one text
 * without special tokens; dl_tokenizer_encode_pair applies the post-processor
 * template ([CLS] A [SEP] B [SEP]) and its type ids. A tokenizer is immutable
 * after loading and safe to share between threads.
 *
 * Lives in src/text/ (the demo tokenizer in assets/); depends on util only. */
#ifndef DEDLOC_TEXT_H
#define DEDLOC_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dl_tokenizer dl_tokenizer;

/* Loads a tokenizer.json; unsupported components are clear errors naming them. */
int dl_tokenizer_load(const char *path, dl_tokenizer **out);
/* Same, from JSON text in memory (len bytes). */
int dl_tokenizer_load_json(const char *json, size_t len, dl_tokenizer **out);
/* The demo tokenizer built into the binary (assets/tokenizer_bn_demo.json:
 * Unigram, 8000 pieces, trained on the demo Bengali corpus with the sahajBERT
 * pipeline). The default wherever no tokenizer file is given. */
int dl_tokenizer_load_demo(dl_tokenizer **out);
/* A file embedded from assets/ by name (e.g. "tokenizer_bn_demo.json"), or
 * NULL. The data is NUL-terminated; *size excludes the NUL. */
const char *dl_text_asset(const char *name, size_t *size);
void dl_tokenizer_free(dl_tokenizer *tok);
/* Writes the tokenizer files of a Hugging Face model folder into dir (which
 * exists): tokenizer.json (json, len bytes, as given, after checking that it
 * loads), tokenizer_config.json (PreTrainedTokenizerFast, model_max_length,
 * the special tokens) and special_tokens_map.json, so that transformers'
 * AutoTokenizer.from_pretrained(dir) gives the ids dl_tokenizer_encode gives. */
int dl_tokenizer_save_hf(const char *json, size_t len, int model_max_length, const char *dir);

/* Encodes UTF-8 text (len bytes; invalid UTF-8 handled as HF does or replaced
 * by U+FFFD, counted in *invalid if non-NULL) into ids without special tokens.
 * *ids is malloc'd (free it); *count its length. */
int dl_tokenizer_encode(const dl_tokenizer *tok, const char *text, size_t len, int32_t **ids,
                        size_t *count, size_t *invalid);

/* Applies the post-processor to one or two id sequences (b may be NULL):
 * writes ids and type ids (both malloc'd) as HF's TemplateProcessing does. */
int dl_tokenizer_post_process(const dl_tokenizer *tok, const int32_t *a, size_t a_len,
                              const int32_t *b, size_t b_len, int32_t **ids, int32_t **type_ids,
                              size_t *count);

size_t dl_tokenizer_vocab_size(const dl_tokenizer *tok);
/* Id of a token string (a piece or a special token), or -1. */
int32_t dl_tokenizer_token_to_id(const dl_tokenizer *tok, const char *token);
/* The piece of an id, or NULL if out of range. */
const char *dl_tokenizer_id_to_token(const dl_tokenizer *tok, int32_t id);
/* True for added/special tokens ([CLS], [SEP], [MASK], <pad>, <unk>, ...). */
bool dl_tokenizer_is_special(const dl_tokenizer *tok, int32_t id);
/* True if the piece starts a word (begins with the Metaspace replacement). */
bool dl_tokenizer_starts_word(const dl_tokenizer *tok, int32_t id);

#endif
