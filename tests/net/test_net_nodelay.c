/* Every peer connection sends small frames at once (TCP_NODELAY, address.c):
 * two peers on loopback, one dialling the other; each answers a request
 * with what its own sockets say, read on its network thread (where the
 * connection list lives). Without the option a round's small messages
 * wait behind delayed ACKs, about 40 ms a hop; nothing else would notice. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/net_internal.h"

static bool wait_peers(dl_net *net, size_t want, int timeout_ms) {
    for (int t = 0; t < timeout_ms; t += 20) {
        struct dl_swarm_view v;
        if (dl_net_swarm_view(net, &v) == 0) {
            size_t n = v.num_peers;
            dl_swarm_view_free(&v);
            if (n == want) return true;
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* "ready outbound nodelay": counts over this peer's ready connections. */
static void sockopt_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    (void)user;
    unsigned ready = 0, outbound = 0, nodelay = 0;
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        if (c->state != CONN_READY) continue;
        ready++;
        outbound += c->outbound;
        int on = 0;
        socklen_t len = sizeof on;
        if (!getsockopt(bufferevent_getfd(c->bev), IPPROTO_TCP, TCP_NODELAY, &on, &len) && on) nodelay++;
    }
    char text[64];
    int n = snprintf(text, sizeof text, "%u %u %u", ready, outbound, nodelay);
    dl_net_respond(net, req->token, DL_NET_OK, text, (size_t)n);
}

/* Asks `to` (from `from`) about its sockets. */
static bool ask(dl_net *from, dl_net *to, unsigned *ready, unsigned *outbound, unsigned *nodelay) {
    char id[DL_PEER_ID_HEX];
    snprintf(id, sizeof id, "%s", dl_net_peer_id(to));
    uint8_t *resp = NULL;
    size_t n = 0;
    bool ok = dl_net_request_sync(from, id, "sockopt", "?", 1, 5.0, &resp, &n) == DL_NET_OK && resp && n < 64;
    char text[64] = {0};
    if (ok) memcpy(text, resp, n);
    free(resp);
    return ok && sscanf(text, "%u %u %u", ready, outbound, nodelay) == 3;
}

int main(void) {
    dl_log_set_level(getenv("DEDLOC_LOG") ? dl_log_get_level() : DL_LOG_ERROR);
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "nodelay-test";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    dl_net *a = NULL, *b = NULL;
    CHECK_OK(dl_net_start(&cfg, &a));
    if (!a) return dl_test_finish("net TCP_NODELAY");
    CHECK_OK(dl_net_set_handler(a, "sockopt", sockopt_handler, NULL));
    cfg.initial_peers = dl_net_listen_address(a);
    CHECK_OK(dl_net_start(&cfg, &b));
    if (b) {
        CHECK_OK(dl_net_set_handler(b, "sockopt", sockopt_handler, NULL));
        CHECK(wait_peers(a, 2, 10000));
        CHECK(wait_peers(b, 2, 10000));
        unsigned ready = 0, outbound = 0, nodelay = 0;
        /* a accepted b's connection: the inbound side */
        CHECK(ask(b, a, &ready, &outbound, &nodelay));
        CHECK_MSG(ready >= 1 && nodelay == ready, "the accepting peer: %u of %u ready connections have TCP_NODELAY",
                  nodelay, ready);
        /* b dialled a: the outbound side */
        ready = outbound = nodelay = 0;
        CHECK(ask(a, b, &ready, &outbound, &nodelay));
        CHECK_MSG(outbound >= 1, "the dialling peer has no outbound connection (%u ready)", ready);
        CHECK_MSG(ready >= 1 && nodelay == ready, "the dialling peer: %u of %u ready connections have TCP_NODELAY",
                  nodelay, ready);
        dl_net_stop(b);
    }
    dl_net_stop(a);
    return dl_test_finish("net TCP_NODELAY");
}
