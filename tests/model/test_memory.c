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
    dl_model_memory est;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &est));
    size_t reported = 0, used = allocated_by_create(&cfg, &o, &reported);
    printf("%s %d x %d %s%s: estimate %zu, allocated %zu (per layer %zu, largest %zu)\n", preset,
           B, T, dl_precision_name(p), recompute ? " recompute" : "", est.total, used,
           est.per_layer, est.largest_buffer);
    CHECK_MSG(est.total == used, "%s %d x %d: estimate %zu != allocated %zu", preset, B, T,
              est.total, used);
    CHECK(reported == used);
    CHECK(est.total == est.parameters + est.gradients + est.layers + est.other);
}

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
    o.max_batch = 4;
    CHECK_OK(dl_model_memory_estimate(&cfg, &o, &m5));
    CHECK_OK(dl_model_fit_batch(&cfg, &o, (size_t)1 << 40, m5.largest_buffer, 64, &b, NULL));
    CHECK(b == 4);
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
    check_chooser();
    dl_device_close(device);
    return dl_test_finish("test_memory");
}
