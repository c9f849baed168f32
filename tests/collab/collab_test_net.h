/* A loopback peer for the in-process collab tests: fast refreshes, no DHT. */
#ifndef DEDLOC_TESTS_COLLAB_TEST_NET_H
#define DEDLOC_TESTS_COLLAB_TEST_NET_H

#include <stdio.h>

#include "dedloc/net.h"
#include "dedloc/util.h"

/* Starts a peer of run_id listening on 127.0.0.1 (a free port) that dials
 * `initial` (may be NULL); NULL, with the reason printed, on failure. */
static inline dl_net *collab_test_net(const char *run_id, const char *initial) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = run_id;
    cfg.listen = "127.0.0.1:0";
    cfg.initial_peers = initial;
    cfg.use_dht = false;
    cfg.min_refresh_s = 0.2;
    cfg.max_refresh_s = 1;
    dl_net *net = NULL;
    if (dl_net_start(&cfg, &net)) {
        fprintf(stderr, "net: %s\n", dl_error());
        return NULL;
    }
    return net;
}

#endif
