/* A donor whose description is right and whose state is not: it describes
 * the param hash the fetcher expects (the one honest records vouch for) but
 * serves other parameters, with chunk and whole-state xxh64s consistent with
 * what it serves (test hook dl_state_donor_test_claim_param_hash). Every
 * check before the last passes; only the fetcher's final BLAKE2b-256 of the
 * parameters it received catches it, and the fetch fails. An honest donor of
 * the same state, for contrast, is fetched. Two peers in one process. */
#include <string.h>
#include <unistd.h>

#include "collab/state_transfer.h"
#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "collab_test_net.h"
#include "dl_test.h"

#define RUN_ID "state-liar-test"
#define EPOCH 3
#define PARAMS 50000

static dl_net *start_net(const char *initial) { return collab_test_net(RUN_ID, initial); }

/* Bounded wait for the peer's record (the connection is up by then). */
static bool wait_for(dl_net *net, const char *id) {
    for (int i = 0; i < 400; i++) {
        struct dl_swarm_view v;
        bool seen = false;
        if (dl_net_swarm_view(net, &v) == 0) {
            for (size_t k = 0; k < v.num_peers; k++) seen |= !strcmp(v.peers[k].peer_id, id);
            dl_swarm_view_free(&v);
        }
        if (seen) return true;
        usleep(50000);
    }
    return false;
}

static void fill(float *p, size_t n, uint64_t seed) {
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) p[i] = 0.02f * dl_rng_normal(&rng);
}

/* Publishes `served` at EPOCH (lying about its hash when `claimed` is set)
 * and fetches it from the other peer against `expected`. Returns the
 * fetch's status; the error goes to why. */
static int serve_and_fetch(const float *served, const uint8_t *claimed, const uint8_t expected[32], float *got,
                           char *why, size_t why_size) {
    dl_net *donor_net = start_net(NULL);
    CHECK(donor_net != NULL);
    if (!donor_net) return -2;
    dl_state_donor *donor = NULL;
    struct dl_state_donor_config dcfg;
    dl_state_donor_config_default(&dcfg);
    dcfg.chunk_size = 16384;
    CHECK_OK(dl_state_donor_start(donor_net, &dcfg, &donor));
    if (claimed) dl_state_donor_test_claim_param_hash(donor, claimed);
    struct dl_state_span span = {served, PARAMS * sizeof(float)};
    CHECK_OK(dl_state_donor_publish(donor, EPOCH, &span, 1, NULL, 0));
    dl_net_set_param_hash(donor_net, claimed ? claimed : expected);
    dl_net_publish_progress(donor_net, EPOCH, 0, 0);
    dl_net *net = start_net(dl_net_listen_address(donor_net));
    CHECK(net != NULL);
    int rc = -2;
    if (net && wait_for(net, dl_net_peer_id(donor_net))) {
        const char *donors[1] = {dl_net_peer_id(donor_net)};
        struct dl_state_fetch_config cfg;
        dl_state_fetch_config_default(&cfg);
        cfg.epoch = EPOCH;
        cfg.donors = donors;
        cfg.num_donors = 1;
        cfg.expected_param_hash = expected;
        cfg.timeout_s = 30;
        struct dl_state_buffer buf = {got, PARAMS * sizeof(float)};
        struct dl_state_fetch_result res;
        rc = dl_state_fetch(net, &cfg, &buf, 1, &res);
        snprintf(why, why_size, "%s", rc ? dl_error() : "");
        dl_state_fetch_result_free(&res);
    }
    if (net) dl_net_stop(net);
    dl_state_donor_stop(donor);
    dl_net_stop(donor_net);
    return rc;
}

int main(void) {
    float *honest = dl_malloc(PARAMS * sizeof(float)), *other = dl_malloc(PARAMS * sizeof(float));
    float *got = dl_malloc(PARAMS * sizeof(float));
    if (!honest || !other || !got) return 1;
    fill(honest, PARAMS, 1);
    fill(other, PARAMS, 2);
    uint8_t expected[32];
    dl_collab_param_hash(honest, PARAMS, expected);
    char why[600];

    /* the honest donor's state arrives, bit for bit */
    memset(got, 0, PARAMS * sizeof(float));
    CHECK_MSG(serve_and_fetch(honest, NULL, expected, got, why, sizeof why) == 0, "honest donor: %s", why);
    CHECK(!memcmp(got, honest, PARAMS * sizeof(float)));

    /* the liar's: refused, by the final param hash check */
    memset(got, 0, PARAMS * sizeof(float));
    int rc = serve_and_fetch(other, expected, expected, got, why, sizeof why);
    CHECK_MSG(rc == -1, "a donor serving other parameters under the expected hash was fetched from (rc %d)", rc);
    CHECK_MSG(strstr(why, "BLAKE2b-256 differs"), "refused for another reason: %s", why);

    free(honest);
    free(other);
    free(got);
    return dl_test_finish("collab state fetch against a lying donor");
}
