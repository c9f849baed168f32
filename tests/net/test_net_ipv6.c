/* Two peers on the IPv6 loopback ([::1]) find each other and answer a
 * request. Where the machine has no IPv6 loopback (a bind to [::1] fails,
 * asked here with a plain socket, not through dedloc) the test exits 77, which
 * ctest reports as skipped; where it has one, any failure of dedloc is a
 * failure. It lives apart from test_net_transport so that a skip here never
 * hides that test's results. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/swarm.h"

static bool ipv6_loopback_available(char *why, size_t why_size) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) {
        snprintf(why, why_size, "socket(AF_INET6): %s", strerror(errno));
        return false;
    }
    struct sockaddr_in6 addr = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    if (!ok) snprintf(why, why_size, "bind to [::1]: %s", strerror(errno));
    close(fd);
    return ok;
}

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

static void echo_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    dl_net_respond(net, req->token, DL_NET_OK, req->payload, req->size);
}

int main(void) {
    char why[256];
    if (!ipv6_loopback_available(why, sizeof why)) {
        printf("test_net_ipv6: no IPv6 loopback on this machine (%s)\n", why);
        return 77;
    }
    dl_log_set_level(getenv("DEDLOC_LOG") ? dl_log_get_level() : DL_LOG_ERROR);
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "transport-v6";
    cfg.listen = "[::1]:0";
    cfg.use_dht = false;
    cfg.handshake_timeout_s = 1.5;
    cfg.keepalive_s = 1.0;
    dl_net *c = NULL, *d = NULL;
    CHECK_OK(dl_net_start(&cfg, &c));
    if (!c) return dl_test_finish("test_net_ipv6");
    CHECK_MSG(strncmp(dl_net_listen_address(c), "[::1]:", 6) == 0, "%s", dl_net_listen_address(c));
    CHECK_OK(dl_net_set_handler(c, "echo", echo_handler, NULL));
    cfg.initial_peers = dl_net_listen_address(c);
    CHECK_OK(dl_net_start(&cfg, &d));
    if (d) {
        CHECK(wait_peers(c, 2, 10000));
        CHECK(wait_peers(d, 2, 10000));
        char c_id[DL_PEER_ID_HEX];
        snprintf(c_id, sizeof c_id, "%s", dl_net_peer_id(c));
        uint8_t *resp = NULL;
        size_t n = 0;
        CHECK(dl_net_request_sync(d, c_id, "echo", "v6", 2, 5.0, &resp, &n) == DL_NET_OK);
        CHECK(n == 2 && resp && !memcmp(resp, "v6", 2));
        free(resp);
        dl_net_stop(d);
    }
    dl_net_stop(c);
    return dl_test_finish("test_net_ipv6");
}
