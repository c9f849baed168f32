/* Device memory of a model shape, from the configuration alone, and the
 * micro-batch that fits a budget. The estimate is a closed form written
 * out buffer by buffer, so a micro-batch can be chosen before anything is
 * allocated; test_memory holds it to the device layer's allocation count. */
#include <stdio.h>

#include "dedloc/model.h"
#include "dedloc/util.h"
#include "model/model_internal.h"

/* A buffer of n elements of `size` bytes, as dl_model_create allocates it
 * (an empty one still takes one element). */
static size_t buf(size_t n, size_t size, size_t *largest) {
    size_t bytes = (n ? n : 1) * size;
    if (bytes > *largest) *largest = bytes;
    return bytes;
}

/* The largest spans (elements) of the A, B and C operands of the model's
 * GEMMs at B x T, B not counting the weights (rounded once per upload):
 * linear layers (rows, in, out) forward A [rows, in], C [rows, out]; weight
 * gradient A [rows, out], B [rows, in], C [out, in]; input gradient A
 * [rows, out], C [rows, in]; attention products over token rows [N, H] and
 * scores [B, heads, T, T]. The MLM rows are at most every token, and the
 * decoder takes them a chunk at a time (mlm_decoder.c). */
void model_half_scratch_spans(const dl_albert_config *c, size_t B, size_t T, size_t span[3]) {
    size_t N = B * T, E = (size_t)c->embedding_size, H = (size_t)c->hidden_size,
           I = (size_t)c->intermediate_size, V = (size_t)c->vocab_size,
           S = B * (size_t)c->num_attention_heads * T * T;
    const size_t linears[][3] = {{N, E, H}, {N, H, H}, {N, H, I}, {N, I, H}, {N, H, E},
                                 {model_mlm_chunk_rows(N), E, V},
                                 {B, H, H}, {B, H, 2}};
    span[0] = S > N * H ? S : N * H;
    span[1] = N * H;
    span[2] = span[0];
    for (size_t i = 0; i < sizeof linears / sizeof *linears; i++) {
        size_t rows = linears[i][0], in = linears[i][1], out = linears[i][2];
        size_t a = rows * (in > out ? in : out), b = rows * in, cmax = out * in > a ? out * in : a;
        if (a > span[0]) span[0] = a;
        if (b > span[1]) span[1] = b;
        if (cmax > span[2]) span[2] = cmax;
    }
}

/* bytes rounded up to whole 4-byte words, as the fp16 compute allocates them */
static size_t buf4(size_t bytes, size_t *largest) {
    bytes = (bytes + 3) & ~(size_t)3;
    if (bytes > *largest) *largest = bytes;
    return bytes;
}

int dl_model_memory_estimate(const dl_albert_config *c, const dl_model_options *o,
                             dl_model_memory *out) {
    *out = (dl_model_memory){0};
    if (o->max_batch <= 0 || o->max_seq <= 0)
        return dl_fail("memory estimate: batch %d x %d is not positive", o->max_batch, o->max_seq);
    dl_param_layout layout;
    if (dl_param_layout_build(c, &layout)) return -1;
    size_t P = layout.total;
    dl_param_layout_free(&layout);
    size_t B = (size_t)o->max_batch, T = (size_t)o->max_seq, N = B * T;
    size_t E = (size_t)c->embedding_size, H = (size_t)c->hidden_size,
           I = (size_t)c->intermediate_size, V = (size_t)c->vocab_size,
           S = B * (size_t)c->num_attention_heads * T * T; /* attention scores */
    size_t layers = (size_t)c->num_hidden_layers * (size_t)c->inner_group_num;
    bool staged = o->precision != DL_PRECISION_FP32, work = staged || o->recompute;
    size_t st = staged ? 2 : 4; /* bytes of one kept activation */
    size_t L = 0;               /* largest single buffer */

    out->parameters = buf(P, 4, &L);
    out->gradients = buf(P, 4, &L);
    /* Kept per layer application: its input, and without recompute every
     * activation its backward reads (seven [N, H], the FFN's [N, I], the
     * attention probabilities) and four LayerNorm statistics of [N]. */
    size_t per = buf(N * H, st, &L);
    if (!o->recompute)
        per += 7 * buf(N * H, st, &L) + buf(N * I, st, &L) + buf(S, st, &L) + 4 * buf(N, 4, &L);
    out->per_layer = per;
    out->layers = per * layers;

    size_t other = 0;
    /* batch inputs and index lists (int32) */
    other += 7 * buf(N, 4, &L) + buf(N + 1, 4, &L) + 2 * buf(B, 4, &L);
    /* embeddings: sum, LayerNorm output, statistics */
    other += 2 * buf(N * E, 4, &L) + 2 * buf(N, 4, &L);
    /* the last layer's output, kept in fp32 for the heads */
    other += buf(N * H, 4, &L);
    /* MLM head (sized for every row labelled; the logits for one chunk of
     * rows, mlm_decoder.c), SOP head */
    other += buf(N * H, 4, &L) + 3 * buf(N * E, 4, &L) + 2 * buf(N, 4, &L) +
             buf(model_mlm_chunk_rows(N) * V, 4, &L) + buf(N, 4, &L);
    other += 2 * buf(B * H, 4, &L) + buf(B * 2, 4, &L) + buf(B, 4, &L);
    /* backward scratch */
    other += 6 * buf(N * H, 4, &L) + 2 * buf(N * I, 4, &L) + buf(S, 4, &L) +
             2 * buf(N * E, 4, &L) + 2 * buf(N * E, 4, &L) + buf(N * H, 4, &L) +
             2 * buf(B * H, 4, &L);
    /* the fp32 working set of one layer (staged storage or recompute) */
    if (work) {
        other += buf(N * H, 4, &L) + 7 * buf(N * H, 4, &L) + buf(N * I, 4, &L) + buf(S, 4, &L);
        if (o->recompute) other += 4 * buf(N, 4, &L);
    }
    out->other = other;
    if (o->fp16_compute_elem > 0 && o->precision == DL_PRECISION_FP16) {
        /* The weights rounded once per upload, and the operand and product
         * scratch, allocated with the model (dl_half_gemm_reserve). */
        size_t e = (size_t)o->fp16_compute_elem, span[3];
        model_half_scratch_spans(c, B, T, span);
        out->fp16_compute = buf4(P * e, &L) + buf4(span[0] * e, &L) + buf4(span[1] * e, &L) +
                            buf4(span[2] * e, &L);
    }
    out->total = out->parameters + out->gradients + out->layers + out->other + out->fp16_compute;
    out->largest_buffer = L;
    return 0;
}

size_t dl_model_memory_budget(const dl_device_info *info, long long budget_mb) {
    if (budget_mb > 0) return (size_t)budget_mb << 20;
    size_t global = (size_t)info->global_mem, margin = global / 10;
    if (margin < ((size_t)256 << 20)) margin = (size_t)256 << 20;
    return global > margin ? global - margin : 0;
}

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

int dl_model_fit_batch(const dl_albert_config *cfg, const dl_model_options *opts,
                       size_t budget_bytes, size_t max_alloc, int max_batch, int *batch,
                       dl_model_memory *estimate) {
    *batch = 0;
    if (max_batch < 1) return dl_fail("micro-batch limit %d is not positive", max_batch);
    dl_model_options o = *opts;
    dl_model_memory m;
    o.max_batch = 1;
    if (dl_model_memory_estimate(cfg, &o, &m)) return -1;
    bool alloc_ok = !max_alloc || m.largest_buffer <= max_alloc;
    if (m.total > budget_bytes || !alloc_ok) {
        char limit[96] = "";
        if (max_alloc)
            snprintf(limit, sizeof limit, ", the device allows %.1f MiB per buffer", mib(max_alloc));
        return dl_fail("even a micro-batch of one sequence of %d tokens needs %.1f MiB of device memory "
                       "(parameters %.1f, gradients %.1f, activations %.1f over %d layer applications, "
                       "other %.1f, fp16 compute %.1f; largest buffer %.1f MiB%s), over the budget of %.1f MiB: try "
                       "--recompute, a shorter --seq, fp16/bf16 storage, or a device with more memory",
                       o.max_seq, mib(m.total), mib(m.parameters), mib(m.gradients), mib(m.layers),
                       cfg->num_hidden_layers * cfg->inner_group_num, mib(m.other), mib(m.fp16_compute),
                       mib(m.largest_buffer), limit, mib(budget_bytes));
    }
    /* The estimate grows with the batch: bisect for the last size that fits. */
    int lo = 1, hi = max_batch;
    dl_model_memory best = m;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        o.max_batch = mid;
        if (dl_model_memory_estimate(cfg, &o, &m)) return -1;
        if (m.total <= budget_bytes && (!max_alloc || m.largest_buffer <= max_alloc)) {
            lo = mid;
            best = m;
        } else {
            hi = mid - 1;
        }
    }
    *batch = lo;
    if (estimate) *estimate = best;
    return 0;
}
