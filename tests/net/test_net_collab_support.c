/* What net offers the averaging round: requests to a peer known only from
 * its records (dialled on demand), raw payloads that skip zlib, signatures
 * with the peer's identity, the parameter hash and measured bandwidth in
 * the signed progress record. Three peers in one process on loopback. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void echo_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    dl_net_respond_ex(net, req->token, DL_NET_OK, req->payload, req->size, DL_NET_RAW);
}

/* The peer `id` as `net` sees it (false when absent). */
static bool find_peer(dl_net *net, const char *id, struct dl_swarm_peer *out) {
    struct dl_swarm_view v;
    if (dl_net_swarm_view(net, &v)) return false;
    bool found = false;
    for (size_t i = 0; i < v.num_peers; i++)
        if (!strcmp(v.peers[i].peer_id, id)) {
            *out = v.peers[i];
            found = true;
        }
    dl_swarm_view_free(&v);
    return found;
}

int main(void) {
    dl_log_set_level(getenv("DEDLOC_LOG") ? dl_log_get_level() : DL_LOG_ERROR);
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "collab-support-test";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    cfg.handshake_timeout_s = 2;
    cfg.min_refresh_s = 0.1;
    cfg.max_refresh_s = 0.5;
    dl_net *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(dl_net_start(&cfg, &a));
    if (!a) return dl_test_finish("test_net_collab_support");
    cfg.initial_peers = dl_net_listen_address(a);
    CHECK_OK(dl_net_start(&cfg, &b));
    CHECK_OK(dl_net_start(&cfg, &c));
    if (!b || !c) return dl_test_finish("test_net_collab_support");
    CHECK_OK(dl_net_set_handler(c, "echo", echo_handler, NULL));

    /* b learns of c through a's gossip; a request sent the moment c shows
     * up in b's view must reach it, whether or not b has dialled it yet. */
    CHECK_OK(dl_net_publish_progress(c, 1, 0, 0));
    struct dl_swarm_peer seen;
    bool known = false;
    for (int t = 0; t < 10000 && !known; t += 5) {
        known = find_peer(b, dl_net_peer_id(c), &seen) && seen.address[0];
        if (!known) sleep_ms(5);
    }
    CHECK_MSG(known, "b never saw c's record");
    size_t big = 1 << 20;
    uint8_t *payload = malloc(big);
    for (size_t i = 0; i < big; i++) payload[i] = (uint8_t)(i / 4096); /* compressible */
    uint8_t *resp = NULL;
    size_t n = 0;
    CHECK(dl_net_request_sync(b, dl_net_peer_id(c), "echo", payload, big, 20, &resp, &n) == DL_NET_OK);
    CHECK(n == big && resp && !memcmp(resp, payload, big));
    free(resp);

    /* raw requests: the payload crosses unchanged */
    uint64_t id = dl_net_request_ex(b, dl_net_peer_id(c), "echo", payload, big, 20, DL_NET_RAW, NULL, NULL);
    CHECK(id > 0);
    CHECK(dl_net_request_sync(a, dl_net_peer_id(c), "echo", payload, 4096, 20, &resp, &n) == DL_NET_OK);
    CHECK(n == 4096 && !memcmp(resp, payload, 4096));
    free(resp);
    free(payload);

    /* signatures with the identity key */
    const char msg[] = "group record bytes";
    uint8_t sig[DL_NET_SIGNATURE];
    dl_net_sign(a, msg, sizeof msg, sig);
    CHECK_OK(dl_net_verify(dl_net_peer_id(a), dl_net_public_key(a), msg, sizeof msg, sig));
    CHECK(dl_net_verify(dl_net_peer_id(b), dl_net_public_key(a), msg, sizeof msg, sig) != 0); /* not b's key */
    CHECK(dl_net_verify(dl_net_peer_id(b), dl_net_public_key(b), msg, sizeof msg, sig) != 0); /* not b's signature */
    sig[10] ^= 1;
    CHECK(dl_net_verify(dl_net_peer_id(a), dl_net_public_key(a), msg, sizeof msg, sig) != 0);
    char derived[DL_PEER_ID_HEX];
    dl_net_peer_id_from_key(dl_net_public_key(c), derived);
    CHECK(!strcmp(derived, dl_net_peer_id(c)));

    /* the parameter hash and the measured bandwidth travel in c's record */
    uint8_t hash[32];
    for (int i = 0; i < 32; i++) hash[i] = (uint8_t)(7 * i + 1);
    CHECK_OK(dl_net_set_param_hash(c, hash));
    CHECK_OK(dl_net_set_measured_bandwidth(c, 123.5));
    CHECK(dl_net_set_measured_bandwidth(c, -1) != 0);
    CHECK_OK(dl_net_publish_progress(c, 2, 0, 0));
    bool arrived = false;
    for (int t = 0; t < 10000 && !arrived; t += 20) {
        arrived = find_peer(b, dl_net_peer_id(c), &seen) && seen.epoch == 2;
        if (!arrived) sleep_ms(20);
    }
    CHECK_MSG(arrived, "c's epoch 2 record never reached b");
    CHECK(seen.has_param_hash && !memcmp(seen.param_hash, hash, 32));
    CHECK(seen.bandwidth_mbit == 123.5);
    CHECK(find_peer(b, dl_net_peer_id(a), &seen) && !seen.has_param_hash);

    /* a request to a peer that left fails as disconnected (no hang) */
    char c_id[DL_PEER_ID_HEX];
    snprintf(c_id, sizeof c_id, "%s", dl_net_peer_id(c));
    dl_net_stop(c);
    sleep_ms(200);
    CHECK(dl_net_request_sync(b, c_id, "echo", "x", 1, 30, &resp, &n) == DL_NET_DISCONNECTED);
    free(resp);
    dl_net_stop(b);
    dl_net_stop(a);
    return dl_test_finish("test_net_collab_support");
}
