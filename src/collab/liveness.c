/* Peers that are gone although their records are not yet expired
 * (include/dedloc/collab.h, "liveness beyond record expiry"). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/collab_internal.h"
#include "dedloc/util.h"

/* Whether p is a peer found gone whose record is still the one we saw. */
static bool is_gone(struct dl_collab *c, const struct dl_swarm_peer *p) {
    for (size_t i = 0; i < c->num_suspects; i++)
        if (!strcmp(c->suspects[i].peer_id, p->peer_id)) return p->time <= c->suspects[i].record_time;
    return false;
}

static void suspect(struct dl_collab *c, const struct dl_swarm_peer *p) {
    size_t slot = c->num_suspects;
    for (size_t i = 0; i < c->num_suspects; i++)
        if (!strcmp(c->suspects[i].peer_id, p->peer_id)) slot = i;
    if (slot == c->num_suspects) {
        if (c->num_suspects < DL_AVG_MAX_MEMBERS) c->num_suspects++;
        else slot = 0; /* full: the oldest entry goes (its record has likely expired) */
    }
    snprintf(c->suspects[slot].peer_id, sizeof c->suspects[slot].peer_id, "%s", p->peer_id);
    c->suspects[slot].record_time = p->time;
}

size_t dl_collab_drop_gone(dl_collab *c, struct dl_swarm_view *v) {
    if (!c) return 0; /* an observer (a monitor) probes nobody */
    pthread_mutex_lock(&c->lock);
    size_t kept = 0;
    for (size_t i = 0; i < v->num_peers; i++)
        if (v->peers[i].is_self || !is_gone(c, &v->peers[i])) v->peers[kept++] = v->peers[i];
    v->num_peers = kept;
    pthread_mutex_unlock(&c->lock);
    return dl_bans_drop_from_view(&c->bans, v);
}

/* Reachable: any answer at all, even a refusal ("unknown round" outside a
 * round) or a timeout (a slow peer is not a dead one). Unreachable: the
 * connection is closed and cannot be made again. Asked twice, a moment
 * apart, so a connection being re-established is not taken for a death. */
static bool unreachable(dl_net *net, const char *peer_id) {
    for (int attempt = 0; attempt < 2; attempt++) {
        uint8_t *answer = NULL;
        size_t size = 0;
        int status = dl_net_request_sync(net, peer_id, "avg.alive", "?", 1, 2.0, &answer, &size);
        free(answer);
        if (status != DL_NET_DISCONNECTED) return false;
        if (attempt == 0) nanosleep(&(struct timespec){0, 300000000L}, NULL);
    }
    return true;
}

size_t dl_collab_probe_peers(dl_collab *c, uint64_t epoch) {
    struct dl_swarm_view v;
    if (dl_net_swarm_view(c->net, &v)) return 0;
    dl_collab_drop_gone(c, &v);
    size_t gone = 0;
    for (size_t i = 0; i < v.num_peers; i++) {
        const struct dl_swarm_peer *p = &v.peers[i];
        /* Client-mode peers cannot be dialled: only their own connections
         * reach them, so an unanswered request proves nothing of them. */
        if (p->is_self || p->client_mode || p->epoch != epoch || !unreachable(c->net, p->peer_id)) continue;
        DL_INFO("collab", "peer %.8s (epoch %llu) is unreachable: left out until it publishes again", p->peer_id,
                (unsigned long long)p->epoch);
        pthread_mutex_lock(&c->lock);
        suspect(c, p);
        pthread_mutex_unlock(&c->lock);
        gone++;
    }
    dl_swarm_view_free(&v);
    return gone;
}
