/* Limits before authentication (docs/protocol.md, "Limits before
 * authentication"). A connection that has not proven an identity costs a
 * socket, buffers and a key exchange; one address may hold only a few of
 * them at a time and open new ones only at a bounded rate, so one host
 * cannot take every unauthenticated slot. The table of recent addresses is
 * small and fixed: the least recently seen address gives way. */
#include <arpa/inet.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/above_conn.h"

/* The host part of a socket address ("1.2.3.4", "::1"). */
static void host_of(const struct sockaddr *sa, char *out, size_t cap) {
    out[0] = 0;
    if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

/* True when remote ("host:port" or "[v6]:port") is on host. */
static bool same_host(const char *remote, const char *host) {
    if (remote[0] == '[') remote++;
    size_t n = strlen(host);
    return !strncmp(remote, host, n) && (remote[n] == ':' || remote[n] == ']');
}

static struct dl_door_host *bucket_for(struct dl_net *net, const char *host, double now) {
    struct dl_door_host *oldest = &net->door[0];
    for (size_t i = 0; i < DL_NET_DOOR_HOSTS; i++) {
        struct dl_door_host *h = &net->door[i];
        if (h->host[0] && !strcmp(h->host, host)) return h;
        if (h->last < oldest->last) oldest = h;
    }
    memset(oldest, 0, sizeof *oldest);
    snprintf(oldest->host, sizeof oldest->host, "%s", host);
    oldest->tokens = DL_NET_DOOR_BURST;
    oldest->last = now;
    oldest->run_files_tokens = DL_NET_RUN_FILES_BURST;
    oldest->run_files_last = now;
    return oldest;
}

bool dl_net_door_admit(struct dl_net *net, const struct sockaddr *sa) {
    char host[INET6_ADDRSTRLEN];
    host_of(sa, host, sizeof host);
    if (!host[0]) return true;
    double now = dl_now();
    size_t pending = 0;
    for (struct dl_conn *c = net->conns; c; c = c->next)
        if ((c->state < CONN_READY || c->peer_fetch_only) && c->state != CONN_CLOSING && !c->outbound &&
            same_host(c->remote, host))
            pending++;
    struct dl_door_host *h = bucket_for(net, host, now);
    h->tokens += (now - h->last) * DL_NET_DOOR_RATE;
    if (h->tokens > DL_NET_DOOR_BURST) h->tokens = DL_NET_DOOR_BURST;
    h->last = now;
    const char *why = NULL;
    if (h->banned_until > now) why = "misdeeds (banned address)";
    else if (pending >= DL_NET_MAX_PREAUTH_PER_HOST) why = "unauthenticated or fetch-only connections";
    else if (h->tokens < 1) why = "connection rate";
    if (!why) {
        h->tokens -= 1;
        h->refused = 0;
        return true;
    }
    /* One line per burst of refusals, not one per socket. */
    if (h->refused++ == 0 || now - h->last_warned > 10) {
        DL_WARN("net", "refusing connections from %s: over its limit of %s (%zu pending)", host, why, pending);
        h->last_warned = now;
    }
    return false;
}

void dl_net_strike_host(struct dl_net *net, const char *remote, const char *why) {
    char host[48];
    const char *start = remote[0] == '[' ? remote + 1 : remote;
    const char *end = remote[0] == '[' ? strchr(start, ']') : strrchr(start, ':');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n == 0 || n >= sizeof host) return;
    memcpy(host, start, n);
    host[n] = 0;
    double now = dl_now();
    struct dl_door_host *h = bucket_for(net, host, now);
    if (now - h->strikes_since > net->cfg.ban_s) {
        h->strikes = 0;
        h->strikes_since = now;
    }
    if (++h->strikes < DL_NET_HOST_STRIKES || h->banned_until > now) return;
    h->banned_until = now + net->cfg.ban_s;
    DL_WARN("net", "banning address %s for %.0f s: %u misdeeds within %.0f s (the last: %s)", host, net->cfg.ban_s,
            h->strikes, net->cfg.ban_s, why);
}

/* The host part of "ip:port" or "[v6]:port" into host (cap bytes); false
 * when it does not fit. */
static bool host_of_remote(const char *remote, char *host, size_t cap) {
    const char *start = remote[0] == '[' ? remote + 1 : remote;
    const char *end = remote[0] == '[' ? strchr(start, ']') : strrchr(start, ':');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n == 0 || n >= cap) return false;
    memcpy(host, start, n);
    host[n] = 0;
    return true;
}

const char *dl_net_door_fetch_only_refusal(struct dl_net *net, const struct dl_conn *c) {
    char host[48];
    size_t all = 0, mine = 0;
    bool known = host_of_remote(c->remote, host, sizeof host);
    for (const struct dl_conn *x = net->conns; x; x = x->next) {
        if (x == c || !x->peer_fetch_only || x->state == CONN_CLOSING) continue;
        all++;
        if (known && same_host(x->remote, host)) mine++;
    }
    if (all >= DL_NET_MAX_FETCH_ONLY) return "busy: too many newcomers fetching the run files, retry later";
    if (mine >= DL_NET_MAX_FETCH_ONLY_PER_HOST) return "busy: too many fetch-only connections from your address";
    return NULL;
}

bool dl_net_door_run_files_allowed(struct dl_net *net, const char *remote) {
    char host[48];
    if (!host_of_remote(remote, host, sizeof host)) return false;
    double now = dl_now();
    struct dl_door_host *h = bucket_for(net, host, now);
    h->run_files_tokens += (now - h->run_files_last) / DL_NET_RUN_FILES_EVERY_S;
    if (h->run_files_tokens > DL_NET_RUN_FILES_BURST) h->run_files_tokens = DL_NET_RUN_FILES_BURST;
    h->run_files_last = now;
    if (h->run_files_tokens < 1) return false;
    h->run_files_tokens -= 1;
    return true;
}
