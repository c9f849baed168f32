/* dedloc model: ALBERT for pretraining (MLM + SOP heads) exactly as Hugging
 * Face transformers' AlbertForPreTraining computes it, on an OpenCL device.
 *
 * Host side: the configuration (presets, HF config.json), the parameter
 * layout (one flat fp32 vector, entries named as model.named_parameters()
 * lists them), initialisation like HF _init_weights, and import/export of a HF
 * model folder (config.json + model.safetensors).
 *
 * Device side: a dl_model holds the parameters in its storage precision, one
 * flat fp32 gradient buffer with the same layout, and activations sized once
 * for (max_batch, max_seq). A step is: dl_model_set_params (after each
 * optimizer step), dl_model_zero_grad, one dl_model_forward_backward per
 * micro-batch (gradients accumulate), dl_model_get_grads. Everything is
 * deterministic: the same batch and parameters on the same device give the
 * same bits.
 *
 * Lives in src/model/ (kernels in cl/); depends on device, safetensors and
 * util, and knows nothing of training, the data pipeline or the network. */
#ifndef DEDLOC_MODEL_H
#define DEDLOC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dedloc/batch.h"
#include "dedloc/device.h"

/* ---- configuration ----------------------------------------------------------
 * Field names follow HF AlbertConfig. hidden_act is always gelu_new and the
 * dropouts are 0 (the pretraining recipe we follow uses none). */
typedef struct dl_albert_config {
    int vocab_size;
    int embedding_size;
    int hidden_size;
    int num_hidden_layers;       /* layer applications (each runs one whole group) */
    int num_hidden_groups;       /* distinct parameter groups; layer i uses group floor(i/(L/G)) */
    int inner_group_num;         /* AlbertLayers inside each group, run one after another */
    int num_attention_heads;
    int intermediate_size;
    int max_position_embeddings;
    int type_vocab_size;
    int pad_token_id;            /* its word-embedding row gets no gradient from the lookup */
    float layer_norm_eps;
    float initializer_range;
} dl_albert_config;

/* "tiny" (tests, demo: vocab 8000, embedding 64, hidden 128, 4 layers in one
 * group, 4 heads, intermediate 512, 128 positions) or "sahajbert"
 * (albert-large shape with vocab 32000). Unknown name: -1 with the list. */
int dl_albert_config_preset(const char *name, dl_albert_config *cfg);
/* Checks sizes are positive and bounded, heads divide hidden, groups <=
 * layers, pad id inside the vocabulary. */
int dl_albert_config_validate(const dl_albert_config *cfg);
/* Parses HF config.json text of `size` bytes (untrusted: types and ranges
 * checked; hidden_act must be gelu_new; non-zero dropouts are warned about
 * and ignored). origin names the text in errors and warnings (a path, or
 * e.g. "the checkpoint's model configuration"). */
int dl_albert_config_parse(const char *json, size_t size, const char *origin, dl_albert_config *cfg);
/* dl_albert_config_parse of a config.json file. */
int dl_albert_config_load(const char *path, dl_albert_config *cfg);
/* config.json text as AlbertForPreTraining.save_pretrained writes it, ending
 * in a newline (*json malloc'd, NUL-terminated). */
int dl_albert_config_to_json(const dl_albert_config *cfg, char **json);
/* Writes dl_albert_config_to_json's text to path (atomically). */
int dl_albert_config_save(const char *path, const dl_albert_config *cfg);
/* Human-readable one-line summary into buf. */
void dl_albert_config_describe(const dl_albert_config *cfg, char *buf, size_t size);

/* ---- parameter layout --------------------------------------------------------
 * Entries in model.named_parameters() order, packed without gaps. The tied
 * decoder weight is albert.embeddings.word_embeddings.weight (one entry); the
 * decoder bias is predictions.bias. */
enum { DL_PARAM_NAME_MAX = 96 };

typedef struct dl_param_entry {
    char name[DL_PARAM_NAME_MAX];
    int ndim;                    /* 1 or 2 */
    int64_t shape[2];            /* [out, in] for Linear weights, as PyTorch stores them */
    size_t offset;               /* in elements from the start of the flat vector */
    size_t numel;
    bool no_weight_decay;        /* biases and LayerNorm parameters */
} dl_param_entry;

typedef struct dl_param_layout {
    dl_param_entry *entries;
    int count;
    size_t total;                /* elements in the flat vector */
} dl_param_layout;

int dl_param_layout_build(const dl_albert_config *cfg, dl_param_layout *layout);
void dl_param_layout_free(dl_param_layout *layout);
/* NULL if absent. */
const dl_param_entry *dl_param_layout_find(const dl_param_layout *layout, const char *name);

/* Fills params (layout.total floats) like HF _init_weights: Linear weights and
 * embeddings ~ N(0, initializer_range), the pad row of the word embeddings 0,
 * biases 0, LayerNorm weight 1 and bias 0. Same seed, same bits everywhere. */
int dl_albert_init_params(const dl_albert_config *cfg, uint64_t seed, float *params);

/* Reads a HF model folder: config.json into *cfg and model.safetensors into a
 * malloc'd flat vector *params (free() it). Every parameter must be present
 * with the right shape (F32, F16 or BF16); missing or extra-shaped tensors are
 * errors naming the tensor. predictions.decoder.* duplicates are accepted. */
int dl_albert_load_hf(const char *dir, dl_albert_config *cfg, float **params);
/* Writes config.json and model.safetensors (F32, {"format": "pt"}) into dir
 * (created if needed), loadable by AlbertForPreTraining.from_pretrained. */
int dl_albert_save_hf(const char *dir, const dl_albert_config *cfg, const float *params);

/* Reads a batch file: a safetensors with input_ids, token_type_ids,
 * attention_mask, labels (integers [B, T], labels -100 = not masked) and
 * sentence_order_label (integers [B]), as the reference scripts write them.
 * Missing tensors and shape mismatches are errors; values are range-checked
 * later by dl_albert_check_batch. Free with dl_batch_free. */
int dl_albert_load_batch(const char *path, dl_batch *batch);

/* Checks a batch against the configuration: shape within (max_batch, max_seq)
 * when those are > 0, sequence within max_position_embeddings, token ids and
 * labels (or -100) inside the vocabulary, token types inside type_vocab_size,
 * mask values 0/1, sentence order labels 0/1. Errors name the first bad value. */
int dl_albert_check_batch(const dl_albert_config *cfg, const dl_batch *batch, int max_batch,
                          int max_seq);

/* GEMM floating-point operations (2*m*n*k summed) of one forward+backward
 * over B x T tokens with `masked` MLM positions (the MLM head runs on masked
 * rows only). */
double dl_albert_step_flops(const dl_albert_config *cfg, int batch, int seq, int masked);

/* ---- device model --------------------------------------------------------- */
/* Storage precision. fp16/bf16: the weights take the format's values (held
 * as fp32 on the device, for CLBlast's SGEMM) and every activation a layer
 * keeps for its backward pass is stored in the format (about half the
 * activation memory); arithmetic and gradients stay fp32. */
typedef enum {
    DL_PRECISION_FP32 = 0,  /* fp32 storage and compute */
    DL_PRECISION_FP16 = 1,  /* fp16 storage of weights and kept activations; half GEMMs
                             * where the device has cl_khr_fp16 (dl_model_compute_name),
                             * fp32 arithmetic elsewhere */
    DL_PRECISION_BF16 = 2,  /* bf16 storage; bf16 GEMMs with fp32 accumulation on CPUs
                             * with AVX512-BF16 (dl_model_compute_name), fp32
                             * arithmetic elsewhere */
} dl_precision;

/* "fp32", "fp16", "bf16"; -1 for anything else. */
int dl_precision_parse(const char *name, dl_precision *out);
const char *dl_precision_name(dl_precision p);

typedef struct dl_losses {
    float loss;          /* mlm_loss + sop_loss, as HF returns it */
    float mlm_loss;      /* mean CE over masked positions (0 when there are none) */
    float sop_loss;      /* mean CE over sequences */
    int masked_tokens;   /* positions with a label != -100 */
    int sequences;       /* B */
} dl_losses;

typedef struct dl_model dl_model;

/* Allocates parameters, gradients and activations for batches up to
 * max_batch x max_seq (max_seq <= max_position_embeddings) on dev, and builds
 * the kernels. The model keeps a pointer to dev (which must outlive it) and a
 * copy of cfg. Parameters start unset: call dl_model_set_params. */
int dl_model_create(dl_device *dev, const dl_albert_config *cfg, int max_batch, int max_seq,
                    dl_precision precision, dl_model **out);
void dl_model_free(dl_model *model);

/* Everything dl_model_create takes, plus activation recomputation: with
 * recompute the forward pass keeps only each layer application's input, and
 * the backward pass recomputes that application's activations from it just
 * before differentiating it (one layer's activations on the device at a
 * time, at the cost of a second forward pass). In fp32 the gradients are
 * the same bits as without; with fp16/bf16 storage the recomputed
 * activations stay fp32 (not rounded to the format), so they differ in the
 * last bits. */
typedef struct dl_model_options {
    int max_batch, max_seq;
    dl_precision precision;
    bool recompute;
    /* For dl_model_memory_estimate only (a model decides it from its device):
     * bytes of one element of fp16 compute's rounded weights and GEMM
     * scratch, as dl_model_fp16_compute says for the device; 0: none. */
    int fp16_compute_elem;
} dl_model_options;
/* Whether a model of this precision on a device of this kind computes its
 * GEMMs in half (--precision fp16 where cl_khr_fp16 is reported, as
 * DEDLOC_FP16_COMPUTE allows): *elem = 2, or 4 when emulated (test builds),
 * 0 when not. -1 when DEDLOC_FP16_COMPUTE refuses the combination. */
int dl_model_fp16_compute(const dl_device_info *info, dl_precision precision, int *elem);
int dl_model_create_with(dl_device *dev, const dl_albert_config *cfg, const dl_model_options *opts,
                         dl_model **out);

/* ---- device memory ------------------------------------------------------------
 * What a model of a given shape allocates on the device, computed from the
 * configuration alone (a closed form over the buffers dl_model_create
 * allocates; tests hold it to the device layer's count of allocated bytes).
 * The optimizer state (LAMB's moments) lives on the host and is not part of
 * it; neither are the temporary buffers a GEMM library may allocate, which
 * the budget's safety margin covers. */
typedef struct dl_model_memory {
    size_t parameters;     /* fp32 weights */
    size_t gradients;      /* fp32 gradient accumulator */
    size_t per_layer;      /* activations kept per layer application (its input alone
                              with recompute) */
    size_t layers;         /* per_layer times the layer applications */
    size_t other;          /* batch inputs and index lists, embeddings, heads, backward
                              scratch, the working set of one layer */
    size_t fp16_compute;   /* fp16 compute (fp16_compute_elem > 0): the rounded weights and
                              the GEMM operand and product scratch */
    size_t total;          /* the sum: bytes allocated by dl_model_create */
    size_t largest_buffer; /* the largest single allocation (must fit the device's
                              maximum allocation) */
} dl_model_memory;
int dl_model_memory_estimate(const dl_albert_config *cfg, const dl_model_options *opts,
                             dl_model_memory *out);

/* The device memory a run may use: budget_mb MiB when > 0, else the device's
 * global memory less a safety margin (a tenth, at least 256 MiB) for what
 * the driver, the kernels and the GEMM library hold. */
size_t dl_model_memory_budget(const dl_device_info *info, long long budget_mb);
/* The largest micro-batch in 1..max_batch whose estimate (opts with
 * max_batch replaced) fits budget_bytes and whose largest buffer fits
 * max_alloc (0: no limit). Sets *batch and returns 0; fails with the sizes
 * when even one sequence does not fit. */
int dl_model_fit_batch(const dl_albert_config *cfg, const dl_model_options *opts,
                       size_t budget_bytes, size_t max_alloc, int max_batch, int *batch,
                       dl_model_memory *estimate);

const dl_albert_config *dl_model_config(const dl_model *model);
const dl_param_layout *dl_model_layout(const dl_model *model);

/* Uploads the fp32 master parameters (layout.total floats), cast to the
 * storage precision. */
int dl_model_set_params(dl_model *model, const float *params);
/* Downloads the device parameters as fp32 (what the device computes with). */
int dl_model_get_params(dl_model *model, float *params);
/* Sets the gradient accumulator to zero. */
int dl_model_zero_grad(dl_model *model);
/* Runs forward and backward on one micro-batch and ADDS loss_scale times the
 * gradient of the HF loss (mean MLM CE over this batch's masked tokens + mean
 * SOP CE over its sequences) to the accumulator. To weight micro-batches by
 * size, fold the weight into loss_scale. The batch is checked first
 * (dl_albert_check_batch). out may be NULL. Blocks until done. */
int dl_model_forward_backward(dl_model *model, const dl_batch *batch, float loss_scale,
                              dl_losses *out);
/* Forward only (evaluation): losses of one batch; gradients untouched. */
int dl_model_forward(dl_model *model, const dl_batch *batch, dl_losses *out);
/* Logits of the last dl_model_forward (not forward_backward, which turns
 * them into gradients in place): sop_logits [B, 2] and, when mlm_logits is
 * not NULL, the MLM logits [M, vocab] of the M labelled positions in
 * row-major order (HF computes every position; only these enter the loss). */
int dl_model_get_logits(dl_model *model, float *sop_logits, float *mlm_logits);
/* Downloads the accumulated gradient as fp32, divided by loss_scale (pass
 * the scale used in forward_backward, 1 for none). */
int dl_model_get_grads(dl_model *model, float loss_scale, float *grads);
/* Device memory the model holds (parameters, gradients, activations,
 * scratch), in bytes. */
size_t dl_model_memory_bytes(const dl_model *model);

/* ---- per-op profile (src/model/profile.c) ------------------------------------
 * With profiling on, every kernel launch, GEMM and transfer of the model
 * drains the queue before and after it and adds its wall time to a table
 * keyed by kernel function name or GEMM kind. It costs the overlap between
 * ops, so only `bench step --profile` turns it on. */
typedef struct dl_op_profile {
    char name[64];
    double seconds;      /* summed over calls */
    int64_t calls;
} dl_op_profile;
/* How the model's GEMMs compute: "fp32"; "fp16" (--precision fp16 on a
 * device with cl_khr_fp16: CLBlastHgemm on half-rounded operands, each product
 * added into fp32 activations and gradients; row kernels, losses and the
 * optimizer stay fp32); "fp16-emulated" (the test-only emulation of that,
 * DEDLOC_FP16_COMPUTE=emulate; see dl_half_gemm in device.h). The variable
 * DEDLOC_FP16_COMPUTE=auto|off|require, read by dl_model_create, chooses;
 * require refuses a device without cl_khr_fp16. "bf16" (--precision bf16 on
 * a CPU device with host GEMMs and AVX512-BF16, in a build with oneDNN: the
 * linear layers' operands rounded to bf16, fp32 accumulation; see
 * dl_bf16_gemm in device.h); DEDLOC_BF16_COMPUTE=auto|off|require chooses. */
const char *dl_model_compute_name(const dl_model *model);

/* Turns profiling on or off; either way the table is cleared. */
int dl_model_set_profiling(dl_model *model, bool on);
/* The table in first-seen order, valid until the model changes it. */
const dl_op_profile *dl_model_profile(const dl_model *model, int *count);

/* ---- step timing (src/model/step_timing.c) ----------------------------------- */
typedef struct dl_step_timing {
    double step_seconds;        /* median of the timed steps: zero-grad + forward + backward */
    double flops;               /* GEMM operations of one step (dl_albert_step_flops) */
    int masked_tokens;          /* MLM positions of the batch */
    size_t parameters;          /* elements of the flat parameter vector */
    size_t model_memory_bytes;  /* dl_model_memory_bytes of the timed model */
    char compute[16];           /* dl_model_compute_name of the timed model */
    /* Only from dl_model_profile_step: the per-op table summed over the
     * profiled steps (malloc'd, free() it), and their count. */
    dl_op_profile *profile;
    int profile_count;
    int profiled_steps;
} dl_step_timing;

/* Creates the model on dev for batch x seq tokens in the given storage
 * precision, sets params (NULL: dl_albert_init_params with seed 1), and times
 * `warmup` untimed then `steps` timed steps on one fixed batch of random
 * tokens with 15% MLM labels (the same batch for every call). A line per step
 * goes to progress (may be NULL). The model is freed before returning. */
int dl_model_time_step(dl_device *dev, const dl_albert_config *cfg, const float *params, int batch,
                       int seq, dl_precision precision, int warmup, int steps, FILE *progress,
                       dl_step_timing *out);
/* dl_model_time_step, then `steps` more steps with profiling on, whose
 * per-op table lands in out->profile. */
int dl_model_profile_step(dl_device *dev, const dl_albert_config *cfg, const float *params, int batch,
                          int seq, dl_precision precision, int warmup, int steps, FILE *progress,
                          dl_step_timing *out);
/* Either of the above for a model shape with options (recomputation). */
int dl_model_time_step_with(dl_device *dev, const dl_albert_config *cfg, const float *params,
                            const dl_model_options *shape, int warmup, int steps, bool profile,
                            FILE *progress, dl_step_timing *out);

#endif
