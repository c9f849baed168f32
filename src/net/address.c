/* Addresses: socket addresses to "ip:port" / "[v6]:port" text and back,
 * with a port check stricter than libevent's and getaddrinfo's. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/net_internal.h"

/* Every message goes out whole at once: without TCP_NODELAY, Nagle's rule
 * holds a small frame (a nonce, a bundle of projections, a reply) while an
 * earlier one waits for its ACK, which the other side delays by up to
 * 40 ms. The rounds' hops are small frames in a row, and each such stall
 * cost a whole round on loopback about 40 ms. Not fatal where it fails
 * (a socket type without the option). */
void dl_net_socket_nodelay(evutil_socket_t fd) {
    int one = 1;
    if (fd >= 0 && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        DL_DEBUG("net", "TCP_NODELAY not set: %s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

void dl_net_sockaddr_string(const struct sockaddr *sa, char *out, size_t cap) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
        snprintf(out, cap, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
        snprintf(out, cap, "[%s]:%d", host, port);
    } else {
        snprintf(out, cap, "?");
    }
}

/* "ip:port", "[v6]:port" or "host:port" (resolved, blocking: only used for
 * configuration, never for addresses received from the network). */
/* The port of "host:port" / "[v6]:port" must be all digits and at most 65535:
 * libevent's parser reads "12x" as port 12 and getaddrinfo takes a numeric
 * service modulo 65536 ("99999" -> 34463), both silently. */
static int check_port(const char *text) {
    const char *port = NULL;
    if (text[0] == '[') {
        const char *close = strstr(text, "]:");
        port = close ? close + 2 : NULL;
    } else if (strchr(text, ':') && strchr(text, ':') == strrchr(text, ':')) {
        port = strchr(text, ':') + 1;
    }
    if (!port) return 0; /* a bare address: the parsers below decide */
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || port[digits] != 0 || digits > 5 || atol(port) > 65535)
        return dl_fail("'%s': the port must be a number in 0..65535", text);
    return 0;
}

int dl_net_check_address(const char *text) {
    if (!text || !*text) return dl_fail("an empty address (expected host:port)");
    if (check_port(text)) return -1;
    bool has_port = text[0] == '[' ? strstr(text, "]:") != NULL
                                   : strchr(text, ':') && strchr(text, ':') == strrchr(text, ':');
    if (!has_port) return dl_fail("'%s' has no port (expected host:port, or [v6]:port)", text);
    return 0;
}

int dl_net_resolve_address(const char *text, struct sockaddr_storage *ss, int *len, bool allow_dns) {
    if (check_port(text)) return -1;
    *len = (int)sizeof *ss;
    memset(ss, 0, sizeof *ss);
    if (evutil_parse_sockaddr_port(text, (struct sockaddr *)ss, len) == 0) return 0;
    if (!allow_dns) return dl_fail("'%s' is not an IP address with a port", text);
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text) return dl_fail("'%s' has no port (expected host:port)", text);
    char host[256];
    size_t hl = (size_t)(colon - text);
    if (hl >= sizeof host) return dl_fail("host name too long in '%s'", text);
    memcpy(host, text, hl);
    host[hl] = 0;
    /* libevent's parser refuses port 0 ("any"), so "[::1]:0" arrives here. */
    char *h = host;
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h[hl - 1] = 0;
        h++;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(h, colon + 1, &hints, &res);
    if (rc || !res) return dl_fail("cannot resolve '%s': %s", text, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (int)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}
