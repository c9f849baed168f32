/* The training loop of one peer warns once when its loss climbs: a backend
 * whose loss holds at 2 for 30 steps and then grows by a tenth a step gets
 * exactly one step log line with a "warning" that names --lr, the line
 * stays valid JSON, and the steps before the climb have none. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

enum { N = 8, STEPS = 80, CLIMB_FROM = 30 };

static int64_t drawn;

static int set_params(void *ctx, const float *params) { return 0; }

static int micro_batch(void *ctx, float scale, float *grad, int *samples, dl_losses *losses) {
    int64_t k = drawn++;
    for (int i = 0; i < N; i++) grad[i] = 0.01f * (float)((i + k) % 3);
    *samples = 1;
    double loss = k < CLIMB_FROM ? 2.0 + 0.05 * (double)(k % 2) : 2.0 * pow(1.1, (double)(k - CLIMB_FROM));
    losses->loss = losses->mlm_loss = (float)loss;
    losses->sop_loss = 0;
    losses->sequences = 1;
    return 0;
}

static int skip(void *ctx, int64_t n) { return 0; }

int main(void) {
    char dir[] = "/tmp/dedloc_trainer_warns_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    dl_log_set_level(DL_LOG_ERROR);
    char log[300];
    snprintf(log, sizeof log, "%s/train.jsonl", dir);
    dl_train_layout layout;
    size_t numels[1] = {N};
    CHECK_OK(dl_train_layout_init(&layout, 1, NULL, numels, NULL));
    dl_trainer_backend be = {.set_params = set_params, .micro_batch = micro_batch, .skip = skip};
    dl_trainer_options o = {.target_batch = 1, .max_steps = STEPS, .log_path = log, .model_config_json = "{}",
                            .run_json = "{}"};
    dl_opt_config cfg = dl_opt_config_preset(true, DL_OPT_LAMB, STEPS);
    float params[N] = {0};
    dl_trainer_result res;
    CHECK_OK(dl_trainer_run(&o, &cfg, &layout, params, NULL, &be, &res));
    CHECK(res.steps == STEPS);

    char *text = NULL;
    CHECK_OK(dl_read_file(log, 1 << 22, &text, NULL));
    int lines = 0, warnings = 0, warned_at = -1;
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        CHECK_MSG(j != NULL, "not JSON: %s", line);
        if (!j) continue;
        lines++;
        const cJSON *w = cJSON_GetObjectItem(j, "warning");
        if (w) {
            warnings++;
            warned_at = cJSON_GetObjectItem(j, "step")->valueint;
            CHECK(cJSON_IsString(w) && strstr(w->valuestring, "--lr") && strstr(w->valuestring, "--warmup-steps"));
        }
        cJSON_Delete(j);
    }
    free(text);
    CHECK(lines == STEPS);
    CHECK_MSG(warnings == 1, "%d warnings", warnings);
    /* Step s drew micro-batch s - 1: the climb shows from step CLIMB_FROM + 1. */
    CHECK_MSG(warned_at > CLIMB_FROM && warned_at <= CLIMB_FROM + 15, "warned at step %d", warned_at);
    dl_train_layout_free(&layout);
    unlink(log);
    rmdir(dir);
    return dl_test_finish("test_trainer_warns");
}
