/* dedloc training on the host: the optimizer (LAMB, AdamW), the learning-rate
 * schedule, gradient clipping and accumulation, dynamic loss scaling,
 * checkpoints, the training loop of one peer and its device backend.
 *
 * Lives in src/train/; depends on model, data (the device backend only),
 * safetensors (checkpoints) and util, and knows nothing of the network.
 *
 * The optimizer works on one flat fp32 vector of parameters and a second
 * flat vector of gradients with the same layout; it knows nothing of the
 * model beyond the layout view below (only the device backend, near the end,
 * touches the model and the data). All arithmetic is plain C, single
 * threaded, in a fixed order, built with -ffp-contract=off and no fast-math:
 * the same gradient gives bit-identical weights on every machine.
 *
 * Norms (gradient clipping, LAMB's weight and update norms) are sums of
 * squares accumulated in double in element order, square-rooted in double
 * and rounded once to float. That is deterministic everywhere and at least
 * as accurate as torch's float reductions (see tests/train/test_optimizer.c
 * for the agreement with torch). */
#ifndef DEDLOC_TRAIN_H
#define DEDLOC_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dedloc/data.h"
#include "dedloc/model.h"

/* ---- parameter layout view -------------------------------------------------
 * The optimizer needs only where each tensor lives in the flat vector and
 * whether weight decay applies to it (the trust ratio of LAMB is per tensor). */
enum { DL_TRAIN_MAX_DIMS = 4 };

typedef struct dl_train_tensor {
    char *name;            /* HF parameter name (owned copy; may be NULL) */
    size_t offset;         /* in floats, into the flat vector */
    size_t numel;
    bool no_weight_decay;  /* biases and LayerNorm weights */
    int ndim;              /* shape, for checkpoints and export (1-D [numel] if unknown) */
    int64_t shape[DL_TRAIN_MAX_DIMS];
} dl_train_tensor;

typedef struct dl_train_layout {
    int count;
    dl_train_tensor *tensors;
    size_t total;          /* floats in the flat vector */
} dl_train_layout;

/* Hugging Face's rule (and sahajBERT's): no weight decay for any parameter
 * whose name contains "bias" or "LayerNorm.weight". Note that in HF ALBERT
 * this leaves weight decay ON for
 * albert.encoder.albert_layer_groups.*.full_layer_layer_norm.weight (its
 * name has no "LayerNorm"): sahajBERT trained that way, and so do we. */
bool dl_train_no_decay_name(const char *name);
/* Builds a layout from parallel arrays (names may be NULL: then every tensor
 * decays unless no_decay says otherwise; no_decay may be NULL: then the
 * name rule decides). Checks that tensors are contiguous, in order, without
 * overlap. Free with dl_train_layout_free. */
int dl_train_layout_init(dl_train_layout *layout, int count, const char *const *names,
                         const size_t *numels, const bool *no_decay);
int dl_train_layout_copy(dl_train_layout *dst, const dl_train_layout *src);
void dl_train_layout_free(dl_train_layout *layout);

/* ---- optimizer ---------------------------------------------------------------- */
/* DL_OPT_NESTEROV is torch.optim.SGD(momentum=beta1, nesterov=True,
 * dampening 0): the outer optimizer of local-steps training (DiLoCo). Its
 * momentum buffer lives in exp_avg (exp_avg_sq stays zero), so state
 * transfer and checkpoints carry it unchanged; its learning rate is
 * constant (no schedule) and it clips only when max_grad_norm > 0. */
typedef enum { DL_OPT_LAMB = 0, DL_OPT_ADAMW = 1, DL_OPT_NESTEROV = 2 } dl_opt_kind;

/* Hyperparameters are doubles, as Python holds them; each is rounded to
 * float where torch rounds it (see optimizer.c). */
typedef struct dl_opt_config {
    dl_opt_kind kind;
    double lr;              /* peak learning rate; the schedule scales it */
    double beta1, beta2;
    double eps;
    double weight_decay;    /* applied to tensors without no_weight_decay */
    double clamp_value;     /* LAMB: weight norm clamped to [0, clamp_value] */
    bool debias;            /* LAMB: Adam bias correction folded into the step */
    double max_grad_norm;   /* global L2 clipping; <= 0 disables */
    int64_t warmup_steps;   /* linear warmup from 0 ... */
    int64_t total_steps;    /* ... then linear decay to 0 at total_steps */
} dl_opt_config;

/* sahajBERT's optimizer: LAMB lr 0.00176, betas (0.9, 0.999), eps 1e-6,
 * weight decay 0.01, clamp 10000, debias, clip 1.0, warmup 5000 of 125000. */
dl_opt_config dl_opt_config_sahajbert(void);
/* The default optimizer of a preset for a run of max_steps steps: sahajBERT's
 * recipe for sahajbert (and any other model), scaled down for tiny
 * (warmup over a tenth of the run, linear decay to zero at max_steps, AdamW
 * at 0.005, LAMB at the largest rate up to 0.1 whose relative step stays
 * at or below 0.01 at every step of that schedule: stable for any length). */
dl_opt_config dl_opt_config_preset(bool tiny, dl_opt_kind kind, int64_t max_steps);
/* The largest step the schedule of c reaches: max over t of lr(t), times
 * LAMB's bias correction sqrt(1 - beta2^t) / (1 - beta1^t) with debias. For
 * LAMB this is the fraction of each tensor's norm it moves in one step, the
 * number that decides whether a run stays stable. */
double dl_opt_peak_step(const dl_opt_config *c);
/* DiLoCo's outer optimizer: Nesterov, lr and momentum as given (0.7 and
 * 0.9 in the paper), no weight decay, no clipping, constant rate. */
dl_opt_config dl_opt_config_outer(double lr, double momentum);
/* "lamb" / "adamw" / "nesterov" -> kind; -1 if unknown (error recorded). */
int dl_opt_kind_parse(const char *name, dl_opt_kind *kind);
const char *dl_opt_kind_name(dl_opt_kind kind);

typedef struct dl_optimizer {
    dl_opt_config config;
    dl_train_layout layout;  /* own copy */
    float *exp_avg;          /* m, layout.total floats */
    float *exp_avg_sq;       /* v */
    int64_t step;            /* optimizer steps taken (also the schedule position) */
    float *scratch;          /* LAMB's per-tensor update, largest tensor's size */
} dl_optimizer;

/* What one step did, for logs. */
typedef struct dl_opt_step_info {
    double lr;          /* learning rate this step used */
    float grad_norm;    /* global L2 norm of the gradient before clipping */
    float clip_coef;    /* factor the gradient was multiplied by (1 when not clipped) */
} dl_opt_step_info;

int dl_optimizer_init(dl_optimizer *opt, const dl_opt_config *config, const dl_train_layout *layout);
void dl_optimizer_free(dl_optimizer *opt);

/* One optimizer step, as a Hugging Face loop does it: clip the gradient in
 * place (torch.nn.utils.clip_grad_norm_), update params with the learning rate
 * of the schedule at the current step (torch_optimizer.Lamb or
 * torch.optim.AdamW semantics), then advance the step. grad must be finite
 * (callers drop non-finite gradients first; a non-finite norm fails here
 * and leaves params and state untouched). */
int dl_optimizer_step(dl_optimizer *opt, float *params, float *grad, dl_opt_step_info *info);

/* The pieces of the step, exposed for tests and for callers that split it. */
/* lr = base * lambda(step) of transformers' get_linear_schedule_with_warmup. */
double dl_schedule_linear_warmup(double base_lr, int64_t step, int64_t warmup_steps,
                                 int64_t total_steps);
/* Global L2 norm of grad[0..n) (double accumulation, rounded to float). */
float dl_grad_norm(const float *grad, size_t n);
/* torch.nn.utils.clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6)) in
 * float, grad *= coef (always, as torch does). Returns the norm before. */
float dl_clip_grad_norm(float *grad, size_t n, double max_norm, float *coef_out);
/* The parameter update alone at learning rate lr (no clipping, no schedule). */
void dl_optimizer_update(dl_optimizer *opt, float *params, const float *grad, double lr);

/* ---- gradient accumulation ---------------------------------------------------
 * Micro-batch gradients are means over their samples; the step needs the
 * mean over all samples of the round: sum_k g_k * n_k / sum_k n_k. */
typedef struct dl_grad_accum {
    size_t n;
    float *sum;        /* sum_k g_k * n_k */
    int64_t samples;   /* sum_k n_k */
} dl_grad_accum;

int dl_grad_accum_init(dl_grad_accum *acc, size_t n);
void dl_grad_accum_free(dl_grad_accum *acc);
void dl_grad_accum_reset(dl_grad_accum *acc);
/* sum += grad * (float)samples. samples > 0. */
void dl_grad_accum_add(dl_grad_accum *acc, const float *grad, int64_t samples);
/* out = sum / (float)samples; -1 if no samples were accumulated. */
int dl_grad_accum_mean(const dl_grad_accum *acc, float *out);

/* True if every element is finite. */
bool dl_all_finite(const float *x, size_t n);

/* ---- dynamic loss scaling -------------------------------------------------------
 * For fp16 storage: the loss is multiplied by `scale` before backward so small
 * gradients survive half precision; gradients are divided by it again before
 * they leave the device. A micro-batch whose gradient holds a NaN or Inf is
 * dropped (it counts 0 samples) and the scale halves; after growth_interval
 * consecutive clean micro-batches it doubles. Same rule as torch's GradScaler,
 * counted per micro-batch (each backward pass). */
typedef struct dl_loss_scale {
    float scale;              /* current scale (1 and fixed when disabled) */
    float growth_factor;      /* 2 */
    float backoff_factor;     /* 0.5 */
    int64_t growth_interval;  /* 2000 */
    int64_t clean_steps;      /* consecutive finite micro-batches since the last change */
    int64_t overflows;        /* micro-batches dropped so far */
    bool enabled;
} dl_loss_scale;

/* enabled: init 2^16, x2 after 2000 clean micro-batches, x0.5 on overflow.
 * disabled: scale stays 1 and dl_loss_scale_update only counts. */
void dl_loss_scale_init(dl_loss_scale *ls, bool enabled);
/* Records the outcome of one micro-batch; returns true if its gradient is to
 * be used (finite), false if it must be dropped. */
bool dl_loss_scale_update(dl_loss_scale *ls, bool grad_finite);
/* Divides a gradient computed from a scaled loss by the scale (x * (1/scale),
 * exact: the scale is a power of two) and reports whether it is finite. */
bool dl_loss_scale_unscale(const dl_loss_scale *ls, float *grad, size_t n);

/* ---- loss watch ----------------------------------------------------------------
 * Tells a run that diverges from one that is noisy: the median loss over the
 * last `window` steps is compared with the best such median seen so far; a
 * median above factor times the best (and above it by min_rise, so a loss
 * near zero does not alarm on noise) starts an episode, which ends when the
 * median is back within half that margin. dl_loss_watch_add returns true
 * once, at the start of each episode; a non-finite loss counts as a rise.
 * A zeroed struct is ready to use with the defaults (window 10, factor 1.3,
 * min_rise 0.5 nats: on the tiny run that diverged, a warning 25 steps
 * before the loss passed 20); set the fields before the first add to change them. */
enum { DL_LOSS_WATCH_MAX_WINDOW = 64 };

typedef struct dl_loss_watch {
    int window;            /* steps per median (0: 10; at most DL_LOSS_WATCH_MAX_WINDOW) */
    double factor;         /* (<= 1: 1.3) */
    double min_rise;       /* (<= 0: 0.5) */
    double ring[DL_LOSS_WATCH_MAX_WINDOW]; /* the last window losses */
    int64_t count;         /* losses added */
    int64_t last_step;
    double median;         /* over the last window (once count >= window) */
    double best;           /* the lowest median so far ... */
    int64_t best_step;     /* ... at the end of this step */
    bool has_best;
    bool alarmed;          /* inside an episode */
    int64_t alarms;        /* episodes so far */
} dl_loss_watch;

/* Records the loss of one step; true when this step starts an episode. */
bool dl_loss_watch_add(dl_loss_watch *w, int64_t step, double loss);
/* The warning to print at the start of an episode: what rose, from when, and
 * what to change (lr is the rate the step used). Plain ASCII, no quotes or
 * backslashes, so it can go into a JSON string as it is. */
void dl_loss_watch_describe(const dl_loss_watch *w, double lr, char *out, size_t size);

/* ---- checkpoints -----------------------------------------------------------------
 * One safetensors file per checkpoint (format in docs/checkpoint.md): master
 * weights and the optimizer moments as one F32 tensor per parameter, under
 * "params.<name>", "exp_avg.<name>", "exp_avg_sq.<name>"; everything else in
 * the "__metadata__" map as JSON text, including an xxh64 checksum of every
 * tensor and of the metadata itself. Loading verifies all of it and refuses
 * truncated, corrupted or foreign files with an error naming what is wrong. */

/* Where training stands, beside the weights and the optimizer. */
typedef struct dl_train_progress {
    int64_t samples;          /* samples that went into optimizer steps, in total */
    int64_t micro_batches;    /* batches drawn from the data stream (to fast-forward it) */
    uint64_t data_seed;       /* the data stream's seed and peer seed */
    uint64_t peer_seed;
    double elapsed_s;         /* training time so far, summed over runs */
} dl_train_progress;

/* Local-steps training (DiLoCo): what a peer holds beside the outer state
 * (the checkpoint's params and optimizer). Saved under their own tensor
 * name prefixes ("local.params.", "local.exp_avg.", "local.exp_avg_sq.",
 * "local.residual.") and a "local" metadata entry; a checkpoint without
 * them is of DeDLOC's exact mode (params NULL here). */
typedef struct dl_checkpoint_local {
    float *params;            /* this peer's local weights, layout.total floats */
    float *exp_avg;           /* its inner optimizer's moments */
    float *exp_avg_sq;
    float *residual;          /* error feedback: what its syncs have not sent yet */
    dl_opt_config inner_config;
    int64_t inner_step;       /* inner optimizer steps taken (its schedule position) */
    int64_t samples_since_sync; /* samples behind the local weights since the last sync */
    double loss_sum[3];       /* their losses (loss, mlm, sop), sample-weighted */
    int64_t local_steps;      /* the run's H */
} dl_checkpoint_local;

typedef struct dl_checkpoint {
    char *model_config_json;  /* HF config.json text of the model */
    char *run_json;           /* the run's settings (trainer options), JSON object */
    dl_train_layout layout;
    float *params;            /* layout.total floats: fp32 master weights */
    float *exp_avg;           /* optimizer moments, layout.total floats each */
    float *exp_avg_sq;
    dl_opt_config opt_config;
    int64_t step;             /* optimizer steps taken = schedule position */
    dl_loss_scale loss_scale;
    dl_train_progress progress;
    uint8_t *data_state;      /* the data stream's state at the step boundary (dl_data_save_state),
                                 NULL when not recorded: a resumed run then fast-forwards */
    size_t data_state_size;
    dl_checkpoint_local local;  /* local-steps mode; all zero (params NULL) in exact mode */
} dl_checkpoint;

/* Writes a checkpoint atomically (temporary file, fsync, rename). The arrays
 * are read, not kept. */
int dl_checkpoint_save(const char *path, const dl_checkpoint *ck);
/* Reads and verifies a checkpoint (at most max_size bytes; 0 = 64 GiB) into
 * *ck (malloc'd fields; free with dl_checkpoint_free). */
int dl_checkpoint_load(const char *path, size_t max_size, dl_checkpoint *ck);
void dl_checkpoint_free(dl_checkpoint *ck);
/* The same file image in memory, e.g. to send the training state to a peer
 * that joins (*out malloc'd), and its verified reading (takes ownership of
 * buffer, a malloc'd block, even on failure). */
int dl_checkpoint_serialize(const dl_checkpoint *ck, char **out, size_t *out_size);
int dl_checkpoint_parse(char *buffer, size_t size, dl_checkpoint *ck);

/* Parses the checkpoint's model configuration (HF config.json text, checked
 * like a config.json file). */
int dl_checkpoint_model_config(const dl_checkpoint *ck, dl_albert_config *cfg);

/* Fills a checkpoint view from an optimizer (borrowed pointers: do not free
 * it with dl_checkpoint_free). */
void dl_checkpoint_view(dl_checkpoint *ck, const dl_optimizer *opt, float *params);
/* Restores an optimizer's moments and step from a loaded checkpoint; the
 * layouts must agree tensor for tensor. */
int dl_checkpoint_restore_optimizer(const dl_checkpoint *ck, dl_optimizer *opt);

/* Checkpoint folders hold files named checkpoint-<step, 10 digits>.safetensors. */
/* Saves dir/checkpoint-<step>.safetensors and deletes the oldest beyond the
 * newest `keep` (keep <= 0 keeps all). path_out (may be NULL) gets the path. */
int dl_checkpoint_save_in_dir(const char *dir, const dl_checkpoint *ck, int keep, char *path_out,
                              size_t path_size);
/* Loads the newest checkpoint of dir that verifies; a corrupted newer one is
 * reported (warning) and the previous one is tried. Returns 0 with *ck filled,
 * 1 if dir has no checkpoint at all (or does not exist), -1 if there are
 * checkpoints but none loads. path_out (may be NULL) gets the path used.
 * First removes (and logs) checkpoint-*.safetensors.tmp.<pid> files left by a
 * writer whose pid no longer runs. */
int dl_checkpoint_load_latest(const char *dir, dl_checkpoint *ck, char *path_out, size_t path_size);

/* ---- the training loop of one peer --------------------------------------------
 * Micro-batches are drawn and their gradients accumulated on the host
 * (weighted by their sample counts) until target_batch samples are in, then
 * one optimizer step runs on the host and the new weights go to the device.
 * The loop knows the model and the data only through this backend, so tests
 * can drive it with a synthetic one. */
typedef struct dl_trainer_backend {
    void *ctx;
    /* Uploads the fp32 master weights (cast to the device's precision). */
    int (*set_params)(void *ctx, const float *params);
    /* Draws the next micro-batch, runs forward and backward with the loss
     * multiplied by loss_scale, and writes the mean gradient over its samples,
     * divided by loss_scale again, as fp32 into grad (it may hold Inf/NaN
     * after an fp16 overflow: the loop drops it). Fills *samples (sequences)
     * and *losses. */
    int (*micro_batch)(void *ctx, float loss_scale, float *grad, int *samples, dl_losses *losses);
    /* Draws and discards n micro-batches (fast-forwards the data stream on resume). */
    int (*skip)(void *ctx, int64_t n);
    /* Optional pair (both NULL: micro_batch is used): the gradient sums on
     * the device across the micro-batches of a step and crosses to the host
     * once. accumulate draws the next micro-batch, runs forward and backward
     * and adds loss_scale * samples times its mean gradient to the device's
     * sum (first: the sum starts from zero); it fills *samples and *losses.
     * collect downloads the sum once and writes it divided by loss_scale *
     * total_samples (the sample-weighted mean) into grad. The loop uses the
     * pair only without loss scaling: a micro-batch that overflows cannot be
     * taken back out of a sum. */
    int (*accumulate)(void *ctx, bool first, float loss_scale, int *samples, dl_losses *losses);
    int (*collect)(void *ctx, float loss_scale, int64_t total_samples, float *grad);
    /* Optional pair (both NULL: a resumed run fast-forwards with skip): the
     * data stream's position. mark_data is called at the start and after
     * every optimizer step; save_data returns the stream's state as of the
     * last mark (malloc'd), which a checkpoint keeps. */
    int (*mark_data)(void *ctx);
    int (*save_data)(void *ctx, uint8_t **state, size_t *size);
    /* Set by the caller when the stream was opened from the checkpoint's
     * state (dl_data_config.resume_state): the resumed run does not
     * fast-forward. */
    bool data_resumed;
    /* Optional (NULL: none): a hash of the micro-batch drawn last (token ids,
     * types, attention, labels, sentence order), for tests that follow
     * which micro-batches a peer fed. */
    uint64_t (*batch_fingerprint)(void *ctx);
} dl_trainer_backend;

typedef struct dl_trainer_options {
    int64_t target_batch;       /* samples per optimizer step */
    int64_t max_steps;          /* stop after this many optimizer steps in total */
    double max_seconds;         /* > 0: also stop after the first step that ends past this
                                 * much training time in this run (then save as at the end) */
    bool loss_scaling;          /* dynamic loss scaling (fp16); off: scale 1 */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int keep;                   /* checkpoints kept (<= 0: all) */
    int64_t save_every;         /* steps between checkpoints; 0: only at the end and on a signal */
    const char *log_path;       /* JSON-lines log, appended; NULL: none */
    FILE *progress;             /* NULL: silent; a terminal: one live line; else a line per step */
    const volatile sig_atomic_t *stop; /* non-zero: save and return (set from a signal handler) */
    const char *model_config_json; /* stored in checkpoints */
    const char *run_json;          /* stored in checkpoints */
    uint64_t data_seed, peer_seed; /* stored in checkpoints */
} dl_trainer_options;

typedef struct dl_trainer_result {
    int64_t steps;               /* optimizer steps taken in total (after resume, counts from 0) */
    int64_t steps_this_run;
    bool interrupted;            /* stopped by *stop */
    bool time_limit;             /* stopped by max_seconds */
    /* Mean loss over this run's first loss_window steps and over its last
     * loss_window steps (up to 10 each, half the run at most): single steps
     * are too noisy to compare. */
    float first_loss, last_loss;
    int loss_window;
    double samples_per_second;   /* over this run */
    char param_hash[17];         /* dl_hash64 of the master weights, hex */
    char checkpoint[4096];       /* last checkpoint written in this run ("" if none) */
    int64_t checkpoint_step;     /* its step */
    int save_failures;           /* checkpoint saves that failed (training went on) */
    bool last_save_failed;       /* the final save failed: work since checkpoint is lost */
    bool log_failed;             /* a log record could not be written */
} dl_trainer_result;

/* Checks, before anything is computed, that the outputs of a run can be
 * written, so that a bad folder is not found hours later at the first save:
 * the checkpoint folder is created if needed and a probe file written and
 * removed in it; the log (created if absent, never truncated) takes a write.
 * Either may be NULL. -1 with a message that says what to change. */
int dl_trainer_check_outputs(const char *checkpoint_dir, const char *log_path);

/* Runs the loop. params (layout->total floats) holds the initial weights and
 * is updated in place. resume (may be NULL) continues a checkpoint: its
 * weights, optimizer state, step, loss scale and data position replace the
 * initial ones (its optimizer settings win over opt_config; the data stream
 * is fast-forwarded through backend->skip). */
int dl_trainer_run(const dl_trainer_options *opts, const dl_opt_config *opt_config,
                   const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                   const dl_trainer_backend *backend, dl_trainer_result *result);

/* ---- the device backend (src/train/device_backend.c) ---------------------------
 * The backend every training peer uses: the model on an OpenCL device, fed
 * micro-batches by the data stream. */
typedef struct dl_device_backend {
    dl_device *device;       /* owned */
    dl_model *model;         /* owned, on device */
    dl_data_stream *data;    /* owned */
    dl_batch batch;          /* the current micro-batch */
} dl_device_backend;

/* Opens the data stream (data, with tok), the device (selector as in
 * dl_device_open; its name is logged) and the model for micro-batches of
 * data->batch_size x data->max_seq_len in the given storage precision. The
 * model's weights are set later (dl_trainer_run does it through the
 * callbacks). On failure everything opened so far is closed again. */
int dl_device_backend_open(dl_device_backend *be, const dl_data_config *data, const dl_tokenizer *tok,
                           const char *device_selector, const dl_albert_config *cfg,
                           dl_precision precision);
/* The same with model options: opts->max_batch 0 picks the largest
 * micro-batch (at most max_batch_limit) whose device memory estimate fits
 * dl_model_memory_budget(device, max_device_mb) and the device's largest
 * allocation (dl_model_fit_batch; a clear error when not even one sequence
 * fits); the stream then makes batches of that size. The size used is in
 * *batch_used (may be NULL). opts->max_seq and data->max_seq_len agree. */
int dl_device_backend_open_with(dl_device_backend *be, const dl_data_config *data,
                                const dl_tokenizer *tok, const char *device_selector,
                                const dl_albert_config *cfg, const dl_model_options *opts,
                                long long max_device_mb, int max_batch_limit, int *batch_used);
void dl_device_backend_close(dl_device_backend *be);
/* The callbacks for dl_trainer_run over be (be must outlive their use). */
dl_trainer_backend dl_device_backend_callbacks(dl_device_backend *be);

/* ---- the synthetic backend (src/train/synthetic_backend.c) ---------------------
 * For measuring the network apart from the compute: a micro-batch sleeps
 * `seconds` instead of computing and still produces a full-size gradient
 * (small pseudo-random values drawn from the seed and the micro-batch index,
 * so averaging and the optimizer do their full work), of `batch` samples. */
typedef struct dl_synthetic_backend {
    size_t n;                /* gradient elements */
    double seconds;
    int batch;
    uint64_t seed, index;
} dl_synthetic_backend;

void dl_synthetic_backend_init(dl_synthetic_backend *be, size_t n, double seconds, int batch, uint64_t seed);
dl_trainer_backend dl_synthetic_backend_callbacks(dl_synthetic_backend *be);

/* Builds the optimizer's layout view from the model's (names, shapes); weight
 * decay follows dl_train_no_decay_name, as sahajBERT's training script did. */
int dl_train_layout_from_model(const dl_param_layout *model_layout, dl_train_layout *out);

#endif
