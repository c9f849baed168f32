/* The outer optimizer of local-steps training (DL_OPT_NESTEROV) against
 * torch.optim.SGD(nesterov=True), single-tensor path, as
 * scripts/make_nesterov_reference.py ran it (tests/fixtures/train/
 * nesterov_ref.json): DiLoCo's lr 0.7 and momentum 0.9 without weight
 * decay, and a case with weight decay. Torch may fuse the multiply-add of
 * add_(x, alpha=a) on CPUs with FMA; we never fuse, so the weights agree
 * to within a few ulps, not bit for bit (2e-6 of the largest magnitude).
 * Exact where it must be: the first step clones the gradient into the
 * buffer, the rate is constant (no schedule), and two runs give the same
 * bits. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define FIX DEDLOC_SOURCE_DIR "/tests/fixtures/train/nesterov_ref.json"
enum { TOTAL = 10, STEPS = 5 };

static int floats(const cJSON *a, float *out, int n) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) return -1;
    for (int i = 0; i < n; i++) out[i] = (float)cJSON_GetArrayItem(a, i)->valuedouble;
    return 0;
}

static double rel_err(const float *a, const float *b, int n) {
    double err = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        mag = fmax(mag, fabs((double)b[i]));
    }
    return mag > 0 ? err / mag : err;
}

static void run_case(const cJSON *c, const dl_train_layout *layout, int index) {
    dl_opt_config cfg = dl_opt_config_outer(cJSON_GetObjectItem(c, "lr")->valuedouble,
                                            cJSON_GetObjectItem(c, "momentum")->valuedouble);
    cfg.weight_decay = cJSON_GetObjectItem(c, "weight_decay")->valuedouble;
    dl_optimizer opt;
    CHECK_OK(dl_optimizer_init(&opt, &cfg, layout));
    float p[TOTAL], g[TOTAL], want_p[TOTAL], want_b[TOTAL];
    CHECK_OK(floats(cJSON_GetObjectItem(c, "init"), p, TOTAL));
    const cJSON *grads = cJSON_GetObjectItem(c, "grads"), *steps = cJSON_GetObjectItem(c, "steps");
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(floats(cJSON_GetArrayItem(grads, s), g, TOTAL));
        float g0[TOTAL];
        memcpy(g0, g, sizeof g);
        dl_opt_step_info info;
        CHECK_OK(dl_optimizer_step(&opt, p, g, &info));
        CHECK_MSG(info.lr == cfg.lr, "case %d step %d: lr %g, the outer rate is constant (%g)", index, s, info.lr,
                  cfg.lr);
        CHECK_MSG(memcmp(g0, g, sizeof g) == 0, "case %d step %d: the gradient was clipped", index, s);
        const cJSON *st = cJSON_GetArrayItem(steps, s);
        CHECK_OK(floats(cJSON_GetObjectItem(st, "params"), want_p, TOTAL));
        CHECK_OK(floats(cJSON_GetObjectItem(st, "buf"), want_b, TOTAL));
        double ep = rel_err(p, want_p, TOTAL), eb = rel_err(opt.exp_avg, want_b, TOTAL);
        CHECK_MSG(ep <= 2e-6, "case %d step %d: weights off torch's by %.3g of their magnitude", index, s, ep);
        CHECK_MSG(eb <= 2e-6, "case %d step %d: momentum off torch's by %.3g", index, s, eb);
        if (s == 0 && cfg.weight_decay == 0)
            CHECK_MSG(memcmp(opt.exp_avg, g0, sizeof g0) == 0, "the first step's buffer is not the gradient");
        for (int i = 0; i < TOTAL; i++) CHECK(opt.exp_avg_sq[i] == 0.0f);
    }
    CHECK(opt.step == STEPS);
    dl_optimizer_free(&opt);
}

/* The same inputs twice: the same bits, computed by hand for element 0. */
static void check_exact(const dl_train_layout *layout) {
    dl_opt_config cfg = dl_opt_config_outer(0.7, 0.9);
    dl_optimizer a;
    CHECK_OK(dl_optimizer_init(&a, &cfg, layout));
    float p[TOTAL], g[TOTAL];
    for (int i = 0; i < TOTAL; i++) p[i] = 0.25f * (float)(i + 1);
    float p0 = p[0], buf = 0;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < TOTAL; i++) g[i] = 0.01f * (float)(i - s);
        float g0 = g[0];
        CHECK_OK(dl_optimizer_step(&a, p, g, NULL));
        buf = s == 0 ? g0 : buf * 0.9f + g0;
        float d = g0 + 0.9f * buf;
        p0 = p0 + (float)(-0.7) * d;
        CHECK_MSG(p[0] == p0 && a.exp_avg[0] == buf, "step %d: %.9g / %.9g, by hand %.9g / %.9g", s, p[0],
                  a.exp_avg[0], p0, buf);
    }
    dl_optimizer_free(&a);
    dl_opt_kind k;
    CHECK_OK(dl_opt_kind_parse("nesterov", &k));
    CHECK(k == DL_OPT_NESTEROV && !strcmp(dl_opt_kind_name(k), "nesterov"));
}

int main(void) {
    const char *names[] = {"a.weight", "b.weight"}; /* both decay, as torch decays every tensor */
    size_t numels[] = {7, 3};
    dl_train_layout layout;
    CHECK_OK(dl_train_layout_init(&layout, 2, names, numels, NULL));
    char *text = NULL;
    size_t size = 0;
    CHECK_OK(dl_read_file(FIX, 1 << 20, &text, &size));
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
    CHECK(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) == 2);
    for (int i = 0; i < cJSON_GetArraySize(cases); i++) run_case(cJSON_GetArrayItem(cases, i), &layout, i);
    check_exact(&layout);
    cJSON_Delete(doc);
    free(text);
    dl_train_layout_free(&layout);
    return dl_test_finish("test_nesterov");
}
