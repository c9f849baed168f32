/* Admission at the door and during the connection (docs/protocol.md,
 * "Admission"): the policy of trust.c applied to connections. */
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

int dl_net_admission_start(struct dl_net *net) {
    if (dl_trust_init(&net->trust, &net->cfg, net->run_id, net->id.peer_id, dl_wall_time()))
        return dl_fail_context("admission");
    /* Read once at start; the caller's strings need not outlive it. */
    net->cfg.run_key = net->cfg.token_path = net->cfg.allow_path = net->cfg.revoked_path = NULL;
    struct dl_trust *t = &net->trust;
    if (net->cfg.fetch_only) {
        /* Only asks for the run files: nothing to admit. */
    } else if (!t->closed) {
        DL_WARN("net", "open run: any peer that knows the run id '%s' may join and send updates "
                       "(use --run-key with tokens, or --allow, to admit only known peers)",
                net->run_id);
    } else {
        DL_INFO("net", "closed run: admitting %s%s%s", t->have_key ? "peers with a token from the run authority" : "",
                t->have_key && t->num_allowed ? " and " : "", t->num_allowed ? "peers on the allowlist" : "");
    }
    if (t->my_token_expires)
        DL_INFO("net", "our token expires in %.1f days", ((double)t->my_token_expires - dl_wall_time()) / 86400);
    return 0;
}

int dl_net_admit(struct dl_net *net, struct dl_conn *c, const uint8_t *token, size_t token_size) {
    enum dl_role role;
    double until;
    if (dl_trust_admit(&net->trust, net->run_id, c->peer_id, token, token_size, dl_wall_time(), &role, &until)) {
        char why[128];
        snprintf(why, sizeof why, "not admitted: %s", dl_error());
        /* Not banned: a token may be issued later, and a refusal costs a
         * handshake that the dial backoff already spaces out. */
        dl_conn_reject(c, DL_ERR_ADMISSION, why, false);
        return -1;
    }
    c->peer_role = role;
    c->admitted_until = until;
    if (role != DL_ROLE_NONE) DL_DEBUG("net", "admitted %s as %s", c->peer_id, dl_role_name(role));
    return 0;
}

void dl_net_send_revocations(struct dl_net *net, struct dl_conn *c, struct dl_conn *except) {
    struct dl_trust *t = &net->trust;
    if (!t->have_revoked) return;
    size_t n;
    uint8_t *body = dl_msg_revocations_encode(t->revoked_bin, t->revoked_bin_size, &n);
    if (!body) return;
    for (struct dl_conn *to = c ? c : net->conns; to; to = c ? NULL : to->next)
        if (to != except && to->state == CONN_READY && !to->peer_fetch_only)
            dl_conn_send(to, DL_MSG_REVOCATIONS, body, n, false);
    free(body);
}

/* After a new list is in force: disconnects the peers it revokes and passes
 * it on (flooding; a list not newer than ours stops there). */
static void enforce_revocations(struct dl_net *net, struct dl_conn *from) {
    for (struct dl_conn *c = net->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_READY && dl_trust_is_revoked(&net->trust, c->peer_id))
            dl_conn_reject(c, DL_ERR_ADMISSION, "not admitted: revoked by the run authority", false);
    }
    dl_net_send_revocations(net, NULL, from);
}

void dl_net_on_revocations(struct dl_net *net, struct dl_conn *c, const uint8_t *body, size_t size) {
    if (c->peer_fetch_only) return; /* no peer of the run: its lists are not worth a signature check */
    const uint8_t *list;
    size_t n;
    if (dl_msg_revocations_decode(body, size, &list, &n)) {
        dl_conn_reject(c, DL_ERR_PROTOCOL, dl_error(), true);
        return;
    }
    int rc = dl_trust_offer_revocations(&net->trust, net->run_id, list, n);
    if (rc < 0) {
        char why[160];
        snprintf(why, sizeof why, "forwarded a forged revocation list (%s)", dl_error());
        dl_conn_reject(c, DL_ERR_PROTOCOL, why, true);
        return;
    }
    if (rc == 0) return;
    DL_INFO("net", "revocation list from %s put in force (%zu peers revoked)", c->peer_id, net->trust.revoked.count);
    enforce_revocations(net, c);
}

void dl_net_tick_admission(struct dl_net *net, double now) {
    if (now < net->next_admission_check) return;
    net->next_admission_check = now + 1.0;
    struct dl_trust *t = &net->trust;
    if (!t->closed && !t->my_token_size) return;
    if (dl_trust_reload(t, net->run_id)) enforce_revocations(net, NULL);
    double wall = dl_wall_time();
    for (struct dl_conn *c = net->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_READY && c->admitted_until > 0 && wall >= c->admitted_until)
            dl_conn_reject(c, DL_ERR_ADMISSION, "not admitted: token expired during the connection", false);
    }
    if (t->my_token_size && t->my_token_expires && wall >= (double)t->my_token_expires) {
        DL_WARN("net", "our token expired: peers of a closed run will refuse us; ask the run authority for a new one");
        t->my_token_expires = 0;
    }
}
