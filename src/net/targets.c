/* Whom we dial and whom we ignore: the dial targets (initial peers, peers
 * seen in records, DHT finds) with their backoff, and the ban list. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

bool dl_net_is_banned(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]) {
    double now = dl_now();
    for (size_t i = 0; i < net->num_bans; i++)
        if (net->bans[i].until > now && !memcmp(net->bans[i].pk, pk, DL_WIRE_PK)) return true;
    return false;
}

/* A full table gives up the ban that ends first, not a fixed slot: a flood
 * of new keys cannot free an old offender early on purpose. */
void dl_net_ban(struct dl_net *net, const uint8_t pk[DL_WIRE_PK]) {
    double now = dl_now();
    struct dl_ban *slot = NULL;
    for (size_t i = 0; i < net->num_bans && !slot; i++)
        if (!memcmp(net->bans[i].pk, pk, DL_WIRE_PK)) slot = &net->bans[i];
    for (size_t i = 0; i < net->num_bans && !slot; i++)
        if (net->bans[i].until <= now) slot = &net->bans[i];
    if (!slot && net->num_bans < DL_NET_MAX_BANS) slot = &net->bans[net->num_bans++];
    for (size_t i = 0; i < net->num_bans && !slot; i++)
        if (!slot || net->bans[i].until < slot->until) slot = &net->bans[i];
    if (!slot) slot = &net->bans[0];
    memcpy(slot->pk, pk, DL_WIRE_PK);
    slot->until = now + net->cfg.ban_s;
}

struct dl_target *dl_net_find_target(struct dl_net *net, const uint8_t *pk, const char *address) {
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (pk && t->has_pk && !memcmp(t->pk, pk, DL_WIRE_PK)) return t;
    }
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (address && !strcmp(t->address, address) && (!pk || !t->has_pk)) return t;
    }
    return NULL;
}

void dl_net_note_target(struct dl_net *net, const uint8_t *pk, const char *address, enum dl_target_source source) {
    if (!address || !*address) return;
    if (pk && !memcmp(pk, net->id.pk, DL_WIRE_PK)) return;
    if (!strcmp(address, net->announce_addr)) return;
    struct sockaddr_storage ss;
    int len;
    if (dl_net_resolve_address(address, &ss, &len, false)) return; /* only literal addresses from peers */
    struct dl_target *t = dl_net_find_target(net, pk, address);
    bool second_hand = source != DL_TARGET_FIRST_HAND;
    if (!t) {
        /* One target per address: records of many keys naming one address
         * (someone else's server) make one dialler, not thousands. */
        for (size_t i = 0; i < net->num_targets && second_hand; i++)
            if (!strcmp(net->targets[i].address, address)) return;
        if (net->num_targets == DL_NET_MAX_TARGETS) return;
        t = &net->targets[net->num_targets++];
        memset(t, 0, sizeof *t);
        t->backoff = 1;
        t->next_attempt = dl_now();
        t->second_hand = second_hand;
        if (source == DL_TARGET_DHT) DL_INFO("net", "DHT: found a peer at %s", address);
    }
    if (strcmp(t->address, address) || !second_hand) {
        /* Its owner told us itself, or moved: worth dialling again. */
        t->given_up = false;
        t->failures = 0;
        t->second_hand = second_hand && !t->initial;
    }
    snprintf(t->address, sizeof t->address, "%s", address);
    if (pk) {
        memcpy(t->pk, pk, DL_WIRE_PK);
        t->has_pk = true;
    }
    t->last_seen = dl_now();
}

bool dl_net_target_accepts(struct dl_net *net, const char *address, const uint8_t pk[DL_WIRE_PK]) {
    bool known = false;
    for (size_t i = 0; i < net->num_targets; i++) {
        const struct dl_target *t = &net->targets[i];
        if (strcmp(t->address, address)) continue;
        known = true;
        if (t->initial || !t->has_pk || !memcmp(t->pk, pk, DL_WIRE_PK)) return true;
    }
    return !known;
}

void dl_net_target_failed(struct dl_net *net, const char *address) {
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (strcmp(t->address, address)) continue;
        t->failures++;
        if (t->second_hand && !t->initial && !t->given_up && t->failures >= DL_NET_SECOND_HAND_TRIES) {
            t->given_up = true;
            DL_INFO("net", "giving up on %s (learned from other peers; %u dials failed)", address, t->failures);
        }
    }
}

void dl_net_target_refused(struct dl_net *net, const char *address, const char *who, uint32_t code,
                           const char *text, uint32_t version) {
    double now = dl_now();
    struct dl_target *t = dl_net_find_target(net, NULL, address);
    unsigned quiet = 0;
    if (t) {
        /* The handshake had reset its dial backoff (dl_net_on_ready): a
         * refusal sets its own, or the refused peer would redial every
         * second until someone changes their configuration. */
        t->refused_backoff = t->refused_backoff >= 2 ? t->refused_backoff * 2 : 2;
        if (t->refused_backoff > DL_NET_REFUSED_MAX_S) t->refused_backoff = DL_NET_REFUSED_MAX_S;
        t->refused_until = now + t->refused_backoff;
        if (t->next_attempt < t->refused_until) t->next_attempt = t->refused_until;
        t->refusals++;
        if (t->refused_warned > 0 && now - t->refused_warned < DL_NET_REFUSED_WARN_S) {
            DL_DEBUG("net", "%s refused us again: %s (code %u); next try in %.0f s", who, text, code, t->refused_backoff);
            return;
        }
        quiet = t->refusals - 1;
        t->refusals = 0;
        t->refused_warned = now;
    }
    DL_WARN("net", "%s refused us: %s (code %u, its protocol version %u)%s; trying again in %.0f s, with backoff",
            who, text, code, version, quiet ? " (and quietly before)" : "", t ? t->refused_backoff : 0.0);
}

bool dl_net_target_refusing(const struct dl_target *t, double now) { return t->refused_until > now; }

/* Whether we may start one more outbound connection now. */
static bool may_dial(const struct dl_net *net) {
    size_t dialling = 0;
    for (const struct dl_conn *c = net->conns; c; c = c->next) dialling += c->outbound && c->state < CONN_READY;
    return dialling < DL_NET_MAX_DIALLING && net->num_conns + DL_NET_INBOUND_RESERVE < DL_NET_MAX_CONNS;
}

static void dial(struct dl_net *net, struct dl_target *t) {
    struct sockaddr_storage ss;
    int len;
    if (dl_net_resolve_address(t->address, &ss, &len, t->initial)) {
        DL_WARN("net", "cannot dial %s: %s", t->address, dl_error());
        return;
    }
    if (net->num_conns >= DL_NET_MAX_CONNS) return;
    struct bufferevent *bev = bufferevent_socket_new(net->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return;
    struct dl_conn *c = dl_conn_new(net, bev, true, t->address, t->address);
    if (!c) {
        bufferevent_free(bev);
        return;
    }
    struct timeval tv = {(time_t)net->cfg.handshake_timeout_s, 0};
    bufferevent_set_timeouts(bev, NULL, &tv); /* connect timeout; cleared once ready */
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&ss, len)) {
        dl_net_note_dial_failure(net, t->address, "connect failed");
        dl_conn_close(c, "connect failed");
        return;
    }
    DL_DEBUG("net", "dialling %s", t->address);
}

void dl_net_note_dial_failure(struct dl_net *net, const char *address, const char *why) {
    for (size_t i = 0; i < net->num_targets; i++) {
        struct dl_target *t = &net->targets[i];
        if (!t->initial || t->warned || strcmp(t->address, address)) continue;
        t->warned = true;
        DL_WARN("net", "initial peer %s: %s; retrying quietly with backoff (is a dedloc peer of this run "
                "listening at that address and port?)", address, why);
    }
}

/* Each tick: forget targets whose peers are gone; dial the others with backoff. */
void dl_net_tick_targets(struct dl_net *net, double now) {
    for (size_t i = 0; i < net->num_targets;) {
        struct dl_target *t = &net->targets[i];
        bool connected = t->has_pk && dl_net_conn_by_pk(net, t->pk, false);
        bool dialling = false;
        for (struct dl_conn *c = net->conns; c && !dialling; c = c->next)
            if (c->outbound && c->state < CONN_AUTH && !strcmp(c->dialled, t->address)) dialling = true;
        if (connected) {
            t->last_seen = now;
            t->warned = false; /* a later outage is worth a warning again */
            /* Kept for a while: whatever refused us has changed. */
            if (t->refused_backoff > 0 && now - t->last_dial > 30) t->refused_backoff = t->refused_warned = 0;
        }
        if (!t->initial && !connected && now - t->last_seen > net->cfg.expiry_s) {
            pthread_mutex_lock(&net->lock);
            bool has_record = t->has_pk && dl_swarm_find(&net->swarm, t->pk);
            pthread_mutex_unlock(&net->lock);
            if (!has_record) {
                *t = net->targets[--net->num_targets];
                continue;
            }
        }
        if (!t->is_self && !t->given_up && !connected && !dialling && now >= t->next_attempt &&
            !dl_net_target_refusing(t, now) &&
            !(t->has_pk && dl_net_is_banned(net, t->pk)) && may_dial(net)) {
            t->next_attempt = now + t->backoff;
            t->backoff = t->backoff * 2 > 30 ? 30 : t->backoff * 2;
            t->last_dial = now;
            dial(net, t);
        }
        i++;
    }
}
