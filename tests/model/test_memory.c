/* Device memory: the estimate from the configuration against the bytes the
 * device layer counts as allocated when the model is created, for several
 * shapes, precisions and recomputation; the micro-batch chooser against a
 * budget (its pick fits, the next size does not); and the error when not
 * even one sequence fits. Device: $DEDLOC_TEST_DEVICE or the default. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/model.h"
#include "dedloc/util.h"
#include "dl_test.h"

static dl_device *device;

/* Creates the model and returns the bytes it added to the device's count. */
static size_t allocated_by_create(const dl_albert_config *cfg, const dl_model_options *o,
                                  size_t *reported) {
    size_t before = dl_device_bytes_in_use(device);
    dl_model *m = NULL;
    CHECK_OK(dl_model_create_with(device, cfg, o, &m));
    if (!m) return 0;
    size_t used = dl_device_bytes_in_use(device) - before;
    *reported = dl_model_memory_bytes(m);
    dl_model_free(m);
    CHECK(dl_device_bytes_in_use(device) == before);
    return used;
}

static void check_estimate(const char *preset, int B, int T, dl_precision p, bool recompute) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset(preset, &cfg));
    dl_model_options o = {.max_batch = B, .max_seq = T, .precision = p, .recompute = recompute};
    /* fp16 computes in half where the device reports cl_khr_fp16, and the
     * model then allocates the half weights and GEMM scratch too: the
     * estimate is told so, as `train --batch auto` tells it. */
    CHECK_OK(dl_model_fp16_compute(dl_device_get_info(device), p, &o.fp16_compute_elem));
    dl_model_memory est;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &est));
    size_t reported = 0, used = allocated_by_create(&cfg, &o, &reported);
    printf("%s %d x %d %s%s: estimate %zu, allocated %zu (per layer %zu, largest %zu)\n", preset,
           B, T, dl_precision_name(p), recompute ? " recompute" : "", est.total, used,
           est.per_layer, est.largest_buffer);
    CHECK_MSG(est.total == used, "%s %d x %d: estimate %zu != allocated %zu", preset, B, T,
              est.total, used);
    CHECK(reported == used);
    CHECK(est.total == est.parameters + est.gradients + est.layers + est.other + est.fp16_compute);
}

#ifdef DEDLOC_TEST_HOOKS
/* fp16 compute, emulated (DEDLOC_FP16_COMPUTE=emulate, test-hook builds; its
 * buffers hold 4-byte elements where half holds 2): the estimate counts the
 * rounded weights and the GEMM scratch the model allocates when created, and
 * a forward and backward pass over a batch with every token labelled (the
 * MLM head at its widest: the largest GEMM spans) allocates nothing more. */
static void check_fp16_compute(int B, int T, bool recompute) {
    setenv("DEDLOC_FP16_COMPUTE", "emulate", 1);
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    dl_model_options o = {.max_batch = B, .max_seq = T, .precision = DL_PRECISION_FP16, .recompute = recompute};
    CHECK_OK(dl_model_fp16_compute(dl_device_get_info(device), o.precision, &o.fp16_compute_elem));
    CHECK(o.fp16_compute_elem == 4);
    dl_model_memory plain, est;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &est));
    dl_model_options without = o;
    without.fp16_compute_elem = 0;
    CHECK_OK(dl_model_memory_estimate(&cfg, &without, &plain));
    CHECK(plain.fp16_compute == 0);
    CHECK(est.total == plain.total + est.fp16_compute);
    CHECK(est.fp16_compute > est.parameters); /* the rounded weights (4-byte elements) and more */

    size_t before = dl_device_bytes_in_use(device);
    dl_model *m = NULL;
    CHECK_OK(dl_model_create_with(device, &cfg, &o, &m));
    if (!m) goto done;
    CHECK(!strcmp(dl_model_compute_name(m), "fp16-emulated"));
    size_t created = dl_device_bytes_in_use(device) - before;
    CHECK_MSG(est.total == created, "fp16 compute %d x %d: estimate %zu != allocated %zu", B, T, est.total, created);
    CHECK(dl_model_memory_bytes(m) == created);
    size_t P = est.parameters / 4;
    float *params = malloc(P * sizeof *params);
    dl_batch batch = {0};
    CHECK(params != NULL);
    CHECK_OK(dl_batch_alloc(&batch, B, T));
    if (params && batch.input_ids) {
        CHECK_OK(dl_albert_init_params(&cfg, 3, params));
        CHECK_OK(dl_model_set_params(m, params));
        uint64_t x = 12345;
        for (int i = 0; i < B * T; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            batch.input_ids[i] = 5 + (int32_t)((x >> 33) % (uint64_t)(cfg.vocab_size - 5));
            batch.token_type_ids[i] = i % T >= T / 2;
            batch.attention_mask[i] = 1;
            batch.labels[i] = batch.input_ids[i];
        }
        for (int b = 0; b < B; b++) batch.sentence_order_label[b] = b & 1;
        dl_losses losses;
        CHECK_OK(dl_model_zero_grad(m));
        CHECK_OK(dl_model_forward_backward(m, &batch, 1.0f, &losses));
        size_t after = dl_device_bytes_in_use(device) - before;
        printf("tiny %d x %d fp16-emulated%s: estimate %zu (fp16 compute %zu), allocated %zu, after a pass %zu\n", B,
               T, recompute ? " recompute" : "", est.total, est.fp16_compute, created, after);
        CHECK_MSG(after == created, "a pass grew the fp16 compute scratch: %zu -> %zu bytes", created, after);
    }
    free(params);
    dl_batch_free(&batch);
    dl_model_free(m);
    CHECK(dl_device_bytes_in_use(device) == before);
done:
    unsetenv("DEDLOC_FP16_COMPUTE");
}
#endif

static void check_chooser(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("tiny", &cfg));
    dl_model_options o = {.max_seq = 128, .precision = DL_PRECISION_FP32};
    /* Budgets between the estimates of batch 5 and 6: the pick is 5. */
    dl_model_memory m5, m6;
    o.max_batch = 5;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &m5));
    o.max_batch = 6;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &m6));
    CHECK(m5.total < m6.total);
    size_t budgets[] = {m5.total, (m5.total + m6.total) / 2, m6.total - 1};
    for (size_t i = 0; i < sizeof budgets / sizeof *budgets; i++) {
        int b = 0;
        CHECK_OK(dl_model_fit_batch(&cfg, &o, budgets[i], 0, 64, &b, NULL));
        CHECK_MSG(b == 5, "budget %zu: picked %d, want 5", budgets[i], b);
    }
    /* --max-device-memory in MiB: the pick fits, the next size does not, and
     * the model of the picked size allocates no more than the budget. */
    for (int mb = 20; mb <= 200; mb += 45) {
        size_t budget = dl_model_memory_budget(dl_device_get_info(device), mb);
        CHECK(budget == (size_t)mb << 20);
        for (int rc = 0; rc < 2; rc++) {
            dl_model_options q = o;
            q.recompute = rc;
            int b = 0;
            dl_model_memory est;
            if (dl_model_fit_batch(&cfg, &q, budget, 0, 256, &b, &est)) {
                CHECK_MSG(0, "%d MiB: %s", mb, dl_error());
                continue;
            }
            CHECK(est.total <= budget);
            q.max_batch = b + 1;
            dl_model_memory next;
            CHECK_OK(dl_model_memory_estimate(&cfg, &q, &next));
            CHECK_MSG(b == 256 || next.total > budget, "%d MiB: batch %d fits too", mb, b + 1);
            q.max_batch = b;
            size_t reported = 0, used = allocated_by_create(&cfg, &q, &reported);
            CHECK(used <= budget);
            printf("tiny seq 128, %d MiB%s: micro-batch %d (%.1f MiB allocated)\n", mb,
                   rc ? " recompute" : "", b, (double)used / 1048576.0);
        }
    }
    /* The limit caps the pick; the largest buffer must fit the device's limit. */
    int b = 0;
    CHECK_OK(dl_model_fit_batch(&cfg, &o, (size_t)1 << 40, 0, 3, &b, NULL));
    CHECK(b == 3);
    /* (at 2 x 128 the MLM logits, one chunk of at most 512 rows, still grow
     * with the batch, so the largest buffer at 2 caps the pick at 2) */
    o.max_batch = 2;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &m5));
    CHECK_OK(dl_model_fit_batch(&cfg, &o, (size_t)1 << 40, m5.largest_buffer, 64, &b, NULL));
    CHECK(b == 2);
    /* Not even one sequence: a clear error naming the budget and the way out. */
    CHECK(dl_model_fit_batch(&cfg, &o, (size_t)1 << 20, 0, 64, &b, NULL) == -1);
    CHECK(b == 0);
    CHECK(strstr(dl_error(), "even a micro-batch of one sequence") != NULL);
    CHECK(strstr(dl_error(), "--recompute") != NULL);
    printf("one sequence does not fit 1 MiB: %s\n", dl_error());
}

/* sahajBERT at 512 tokens on a 4 GiB card (the device's limit per buffer a
 * quarter of it, as such cards report): recomputation makes room for a
 * micro-batch several times larger. Estimates only: nothing is allocated. */
static void check_sahajbert_4gb(void) {
    dl_albert_config cfg;
    CHECK_OK(dl_albert_config_preset("sahajbert", &cfg));
    dl_device_info card = {.global_mem = (cl_ulong)4 << 30, .max_alloc = (cl_ulong)1 << 30};
    size_t budget = dl_model_memory_budget(&card, 0);
    CHECK(budget == ((size_t)4 << 30) - ((size_t)4 << 30) / 10);
    int plain = 0, re = 0;
    dl_model_memory ep, er;
    dl_model_options o = {.max_seq = 512, .precision = DL_PRECISION_FP32};
    CHECK_OK(dl_model_fit_batch(&cfg, &o, budget, card.max_alloc, 4096, &plain, &ep));
    o.recompute = true;
    CHECK_OK(dl_model_fit_batch(&cfg, &o, budget, card.max_alloc, 4096, &re, &er));
    printf("sahajbert x 512 on a 4 GiB card: micro-batch %d (%.0f MiB) without recompute, %d "
           "(%.0f MiB) with\n", plain, ep.total / 1048576.0, re, er.total / 1048576.0);
    CHECK(plain >= 1);
    CHECK(re >= 3 * plain);
}

int main(void) {
    check_sahajbert_4gb();
    CHECK_OK(dl_device_open(getenv("DEDLOC_TEST_DEVICE"), &device));
    if (!device) return dl_test_finish("test_memory");
    check_estimate("tiny", 2, 32, DL_PRECISION_FP32, false);
    check_estimate("tiny", 2, 32, DL_PRECISION_FP32, true);
    check_estimate("tiny", 3, 17, DL_PRECISION_FP16, false);
    check_estimate("tiny", 3, 17, DL_PRECISION_BF16, true);
    check_estimate("tiny", 1, 128, DL_PRECISION_FP32, true);
#ifdef DEDLOC_TEST_HOOKS
    check_fp16_compute(3, 17, false);
    check_fp16_compute(2, 40, true);
#endif
    check_chooser();
    dl_device_close(device);
    return dl_test_finish("test_memory");
}
