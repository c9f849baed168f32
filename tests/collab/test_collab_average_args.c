/* dl_collab_average refuses bad arguments at once, before any network
 * traffic, with a reason, and leaves the caller's vector as it was: an
 * unknown codec, a NaN in the vector, and options->sent on the vector
 * itself (the round writes the average there). */
#include <math.h>
#include <string.h>

#include "collab_test_net.h"
#include "dedloc/collab.h"
#include "dl_test.h"

int main(void) {
    dl_net *net = collab_test_net("dedloc-test-average-args", NULL);
    CHECK(net != NULL);
    if (!net) return dl_test_finish("test_collab_average_args");
    struct dl_collab_config ccfg;
    dl_collab_config_default(&ccfg);
    dl_collab *collab = NULL;
    CHECK_OK(dl_collab_start(net, &ccfg, &collab));
    float vec[100], before[100];
    for (int i = 0; i < 100; i++) vec[i] = before[i] = 0.5f * (float)i;
    struct dl_avg_options opt;
    dl_avg_options_default(&opt);
    CHECK(opt.sent == NULL);
    opt.epoch = 1;
    opt.deadline_s = 2;
    struct dl_avg_result res;

    opt.sent = vec;
    opt.compression = DL_CODEC_TOPK;
    CHECK(dl_collab_average(collab, vec, 100, &opt, &res) == DL_AVG_FAILED);
    CHECK_MSG(strstr(res.reason, "sent"), "reason: %s", res.reason);
    CHECK(!memcmp(vec, before, sizeof vec));
    dl_avg_result_free(&res);

    float sent[100];
    opt.sent = sent;
    opt.compression = (enum dl_codec)DL_CODEC_COUNT;
    CHECK(dl_collab_average(collab, vec, 100, &opt, &res) == DL_AVG_FAILED);
    CHECK_MSG(strstr(res.reason, "compression"), "reason: %s", res.reason);
    dl_avg_result_free(&res);

    opt.compression = DL_CODEC_INT8;
    vec[7] = NAN;
    for (int i = 0; i < 100; i++) sent[i] = 3.0f;
    CHECK(dl_collab_average(collab, vec, 100, &opt, &res) == DL_AVG_FAILED);
    CHECK_MSG(strstr(res.reason, "NaN"), "reason: %s", res.reason);
    bool untouched = true;
    for (int i = 0; i < 100; i++) untouched &= sent[i] == 3.0f;
    CHECK_MSG(untouched, "sent was written by a round that failed");
    dl_avg_result_free(&res);

    dl_collab_stop(collab);
    dl_net_stop(net);
    return dl_test_finish("test_collab_average_args");
}
