/* Gossip: our signed progress record (published at an adaptive period and
 * at once on an epoch change), peer exchange on connect, and flooding of
 * newer records to everyone else, so the swarm view converges without a
 * full mesh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

void dl_net_send_records(struct dl_net *net, struct dl_conn *only, struct dl_conn *except,
                         const uint8_t *blob, size_t size) {
    const uint8_t *blobs[1] = {blob};
    size_t sizes[1] = {size};
    size_t n;
    uint8_t *body = dl_msg_records_encode(blobs, sizes, 1, &n);
    if (!body) return;
    for (struct dl_conn *c = net->conns; c; c = c->next) {
        /* Fetch-only newcomers get no records: addresses and tokens are for
         * peers of the run (docs/protocol.md, "Limits against floods"). */
        if (c->state != CONN_READY || c == except || (only && c != only) || c->peer_fetch_only) continue;
        if (dl_conn_send(c, DL_MSG_RECORDS, body, n, true)) DL_DEBUG("net", "%s", dl_error());
    }
    free(body);
}

/* Peer exchange on connect: every record we hold, in one message. */
static void send_all_records(struct dl_net *net, struct dl_conn *c) {
    pthread_mutex_lock(&net->lock);
    size_t count = net->swarm.count < DL_WIRE_MAX_RECORDS ? net->swarm.count : DL_WIRE_MAX_RECORDS;
    const uint8_t **blobs = dl_calloc(count + 1, sizeof *blobs);
    size_t *sizes = dl_calloc(count + 1, sizeof *sizes);
    uint8_t *body = NULL;
    size_t n = 0;
    if (blobs && sizes) {
        for (size_t i = 0; i < count; i++) {
            blobs[i] = net->swarm.entries[i].blob;
            sizes[i] = net->swarm.entries[i].blob_size;
        }
        body = dl_msg_records_encode(blobs, sizes, count, &n);
    }
    pthread_mutex_unlock(&net->lock);
    if (body) dl_conn_send(c, DL_MSG_RECORDS, body, n, false);
    free(body);
    free(blobs);
    free(sizes);
}

struct records_ctx {
    struct dl_net *net;
    struct dl_conn *from;
    int bad;
};

/* A peer listening on a wildcard address without --announce tells us
 * "0.0.0.0:PORT"; when the record comes straight from its owner we dial the
 * address its connection comes from, with that port. */
static void dial_address_of(const struct dl_record *r, const struct dl_conn *from, char out[DL_NET_ADDR_MAX]) {
    snprintf(out, DL_NET_ADDR_MAX, "%s", r->address);
    bool wildcard = !strncmp(r->address, "0.0.0.0:", 8) || !strncmp(r->address, "[::]:", 5);
    if (!wildcard) return;
    out[0] = 0;
    if (!from || memcmp(from->peer_pk, r->pk, DL_WIRE_PK)) return;
    const char *port = strrchr(r->address, ':');
    const char *host_end = strrchr(from->remote, ':');
    if (!port || !host_end) return;
    snprintf(out, DL_NET_ADDR_MAX, "%.*s%s", (int)(host_end - from->remote), from->remote, port);
}

/* Notes a record we did not take; says so once per connection and burst. */
static void dropped(struct records_ctx *ctx, const char *why) {
    struct dl_conn *c = ctx->from;
    if (!c) return;
    c->records_dropped++;
    double now = dl_now();
    if (now - c->drop_warned > 10) {
        c->drop_warned = now;
        DL_WARN("net", "ignoring records from %s: %s (%zu ignored so far)", c->peer_id, why, c->records_dropped);
    }
}

/* One record from a RECORDS message: the cheap checks first (fields, our
 * table: duplicates, tombstones, time, rates, per-connection allowance),
 * the owner's signature and token last (docs/protocol.md, "Signed records"). */
static int on_one_record(void *user, const uint8_t *blob, size_t size) {
    struct records_ctx *ctx = user;
    struct dl_net *net = ctx->net;
    struct dl_record r;
    if (dl_record_parse(blob, size, net->run_id, &r)) {
        ctx->bad = 1;
        return -1;
    }
    if (!memcmp(r.pk, net->id.pk, DL_WIRE_PK)) return 0; /* an echo of us, maybe a past run of ours */
    if (dl_net_is_banned(net, r.pk)) return 0;
    double now = dl_now();
    pthread_mutex_lock(&net->lock);
    int pre = dl_swarm_precheck(&net->swarm, &r, now, dl_wall_time(), net->cfg.expiry_s);
    bool known = dl_swarm_find(&net->swarm, r.pk) != NULL;
    pthread_mutex_unlock(&net->lock);
    net->records_checked++; /* atomic: the view reads it from other threads */
    if (pre == DL_SWARM_OLD) return 0;
    if (pre == DL_SWARM_TOO_FAST) {
        dropped(ctx, "an owner publishing faster than any peer does");
        return 0;
    }
    if (pre == DL_SWARM_IMPLAUSIBLE) {
        dropped(ctx, dl_error());
        return 0;
    }
    /* A new identity draws on the sender's allowance: one connection cannot
     * fill our table with made-up peers. */
    struct dl_conn *c = ctx->from;
    if (!known && c) {
        c->new_keys_tokens += (now - c->new_keys_last) * DL_NET_NEW_KEYS_RATE;
        if (c->new_keys_tokens > DL_NET_NEW_KEYS_BURST) c->new_keys_tokens = DL_NET_NEW_KEYS_BURST;
        c->new_keys_last = now;
        if (c->new_keys_tokens < 1) {
            dropped(ctx, "more new peers than one connection may introduce");
            return 0;
        }
        c->new_keys_tokens -= 1;
    }
    net->records_verified++;
    if (dl_record_check_signature(blob, size, &r)) {
        ctx->bad = 1;
        return -1;
    }
    /* A closed run: the record must carry its owner's valid token (or the
     * owner be on our allowlist), whoever forwarded it. */
    if (net->trust.closed) {
        enum dl_role role;
        double until;
        if (dl_trust_admit(&net->trust, net->run_id, r.peer_id, r.token, r.token_size, dl_wall_time(), &role, &until)) {
            char why[160];
            snprintf(why, sizeof why, "a record of unadmitted peer %.12s: %s", r.peer_id, dl_error());
            dropped(ctx, why);
            return 0;
        }
        r.role = role; /* the view counts a monitor's record for nothing (net/swarm.c) */
    }
    pthread_mutex_lock(&net->lock);
    dl_swarm_charge(&net->swarm, r.pk, now);
    int fresh = dl_swarm_apply(&net->swarm, &r, blob, size, now);
    pthread_mutex_unlock(&net->lock);
    if (fresh == 1) {
        /* Flood newer records once to everyone else: no peer needs to be
         * connected to all others for the view to converge. */
        dl_net_send_records(net, NULL, ctx->from, blob, size);
        if (r.goodbye) {
            struct dl_target *t = dl_net_find_target(net, r.pk, NULL);
            if (t && !t->initial) *t = net->targets[--net->num_targets];
            DL_INFO("net", "peer %s said goodbye", r.peer_id);
        } else if (!r.client_mode) {
            char address[DL_NET_ADDR_MAX];
            dial_address_of(&r, ctx->from, address);
            bool first_hand = ctx->from && !memcmp(ctx->from->peer_pk, r.pk, DL_WIRE_PK);
            dl_net_note_target(net, r.pk, address, first_hand ? DL_TARGET_FIRST_HAND : DL_TARGET_SECOND_HAND);
        }
    }
    return 0;
}

void dl_net_on_records(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    /* A newcomer fetching the run files is no peer of the run yet, and a
     * fetch-only net (ours) does not know the run its peers' records name. */
    if (c->peer_fetch_only || net->cfg.fetch_only) return;
    struct records_ctx ctx = {net, c, 0};
    if (dl_msg_records_decode(body, size, on_one_record, &ctx)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
    }
}

void dl_net_publish_record(struct dl_net *net, bool goodbye) {
    if (net->cfg.fetch_only) return; /* a newcomer fetching the run files is no peer of the run yet */
    struct dl_record r;
    memset(&r, 0, sizeof r);
    double wall = dl_wall_time();
    uint64_t seq = (uint64_t)(wall * 1e6);
    if (seq <= net->last_seq) seq = net->last_seq + 1;
    net->last_seq = seq;
    r.seq = seq;
    r.epoch = net->my_epoch;
    r.time = wall;
    /* Samples accumulated by now, extrapolated from the last report. */
    r.samples = net->my_samples;
    r.samples_per_second = net->my_sps;
    r.client_mode = net->cfg.client_mode;
    r.goodbye = goodbye;
    memcpy(r.token, net->trust.my_token, net->trust.my_token_size);
    r.token_size = net->trust.my_token_size;
    pthread_mutex_lock(&net->lock);
    r.bandwidth_mbit = net->cfg.bandwidth_mbit > 0 ? net->cfg.bandwidth_mbit : net->measured_mbit;
    r.has_param_hash = net->has_param_hash;
    memcpy(r.param_hash, net->param_hash, sizeof r.param_hash);
    pthread_mutex_unlock(&net->lock);
    snprintf(r.address, sizeof r.address, "%s", net->announce_addr);
    memcpy(r.pk, net->id.pk, DL_WIRE_PK);
    memcpy(r.peer_id, net->id.peer_id, sizeof r.peer_id);
    size_t n;
    uint8_t *blob = dl_record_sign(&r, net->run_id, &net->id, &n);
    if (!blob) return;
    pthread_mutex_lock(&net->lock);
    dl_swarm_apply(&net->swarm, &r, blob, n, dl_now());
    pthread_mutex_unlock(&net->lock);
    dl_net_send_records(net, NULL, NULL, blob, n);
    free(blob);
    net->published_epoch = net->my_epoch;
}

void dl_net_on_ready(struct dl_net *net, struct dl_conn *c) {
    if (c->peer_fetch_only) {
        /* Not a peer of the run: not counted, told nothing; the tick
         * closes it after DL_NET_FETCH_ONLY_LIFETIME_S. */
        return;
    }
    pthread_mutex_lock(&net->lock);
    net->num_ready++;
    snprintf(net->last_ready, sizeof net->last_ready, "%s", c->peer_id);
    pthread_mutex_unlock(&net->lock);
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    if (c->outbound) {
        struct dl_target *t = dl_net_find_target(net, NULL, c->dialled);
        if (t) {
            /* An initial peer may come back with another identity. */
            memcpy(t->pk, c->peer_pk, DL_WIRE_PK);
            t->has_pk = true;
            t->backoff = 1;
            t->failures = 0;
            t->given_up = false;
        }
    }
    send_all_records(net, c);
}

void dl_net_on_closed(struct dl_net *net, struct dl_conn *c) {
    if (c->peer_fetch_only) return; /* never counted (dl_net_on_ready) */
    pthread_mutex_lock(&net->lock);
    net->num_ready--;
    if (!strcmp(net->last_ready, c->peer_id)) net->last_ready[0] = 0;
    pthread_mutex_unlock(&net->lock);
}

/* Each tick: our record at the adaptive period (an epoch change is sent at once). */
void dl_net_tick_publish(struct dl_net *net, double now) {
    /* Our record: on epoch change at once, otherwise at the adaptive period. */
    if (net->force_publish || now >= net->next_publish) {
        net->force_publish = false;
        dl_net_publish_record(net, false);
        struct dl_swarm_view v;
        pthread_mutex_lock(&net->lock);
        int rc = dl_swarm_compute(&net->swarm, dl_wall_time(), net->cfg.target_batch, net->id.pk, &v);
        pthread_mutex_unlock(&net->lock);
        double period = net->cfg.max_refresh_s;
        if (rc == 0) {
            period = dl_swarm_refresh_period(v.eta_s, v.num_peers, net->cfg.min_refresh_s, net->cfg.max_refresh_s);
            dl_swarm_view_free(&v);
        }
        /* Never let our own record get close to expiring elsewhere. */
        if (period > net->cfg.expiry_s / 4) period = net->cfg.expiry_s / 4;
        pthread_mutex_lock(&net->lock);
        net->refresh_s = period;
        pthread_mutex_unlock(&net->lock);
        net->next_publish = now + period;
    }
}
