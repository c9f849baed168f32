/* Two peers in one process talk through the real event loop: handshake,
 * progress exchange, requests (ok, compressed, no handler, timeout,
 * cancellation), and hostile connections played with blocking sockets:
 * garbage, a 2^32-1 length, a wrong version, an unknown message type, a
 * forged handshake signature, a tampered frame. The peer must close each of
 * them and keep serving the honest one. And both ends of a connection send
 * small frames at once (TCP_NODELAY). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/net_internal.h"
#include "net/swarm.h"
#include "net/wire.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static size_t peers_seen(dl_net *net) {
    struct dl_swarm_view v;
    if (dl_net_swarm_view(net, &v)) return 0;
    size_t n = v.num_peers;
    dl_swarm_view_free(&v);
    return n;
}

/* Polls (bounded) until the view holds want peers. */
static bool wait_peers(dl_net *net, size_t want, int timeout_ms) {
    for (int t = 0; t < timeout_ms; t += 20) {
        if (peers_seen(net) == want) return true;
        sleep_ms(20);
    }
    return false;
}

/* ---- handlers ---- */

static void echo_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    uint8_t *rev = malloc(req->size ? req->size : 1);
    for (size_t i = 0; i < req->size; i++) rev[i] = req->payload[req->size - 1 - i];
    dl_net_respond(net, req->token, DL_NET_OK, rev, req->size);
    free(rev);
}

static void silent_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {}

static void fail_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    dl_net_respond(net, req->token, DL_NET_REMOTE_ERROR, "nope", 4);
}

struct async_result {
    pthread_mutex_t lock;
    int status, calls;
};

static void async_cb(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct async_result *r = user;
    pthread_mutex_lock(&r->lock);
    r->status = status;
    r->calls++;
    pthread_mutex_unlock(&r->lock);
}

static int echo_works(dl_net *from, const char *to) {
    uint8_t *resp;
    size_t n;
    int st = dl_net_request_sync(from, to, "echo", "abc", 3, 5.0, &resp, &n);
    int ok = st == DL_NET_OK && n == 3 && !memcmp(resp, "cba", 3);
    free(resp);
    return ok;
}

/* ---- a hostile peer with blocking sockets ---- */

struct raw {
    int fd;
    struct dl_identity id;
    struct dl_handshake hs;
    struct dl_seal rx, tx;
};

static int raw_connect(struct raw *r, const char *address) {
    memset(r, 0, sizeof *r);
    const char *colon = strrchr(address, ':');
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {5, 0};
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return connect(r->fd, (struct sockaddr *)&sa, sizeof sa);
}

static int read_all(int fd, uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads one frame (body malloc'd). -1 on EOF, reset or timeout. */
static int raw_read(struct raw *r, uint8_t header[DL_WIRE_HEADER], uint8_t **body, size_t *size) {
    *body = NULL;
    if (read_all(r->fd, header, DL_WIRE_HEADER)) return -1;
    uint32_t len = (uint32_t)header[4] << 24 | (uint32_t)header[5] << 16 | (uint32_t)header[6] << 8 | header[7];
    if (len > (1u << 24)) return -1;
    *body = malloc(len ? len : 1);
    *size = len;
    if (read_all(r->fd, *body, len)) {
        free(*body);
        *body = NULL;
        return -1;
    }
    return 0;
}

/* True when the other side closes (EOF or reset) within the receive
 * timeout; frames before the close are skipped, and *saw_type records
 * whether a frame of type watch_type came. */
static bool raw_closed(struct raw *r, int watch_type, bool *saw_type) {
    uint8_t h[DL_WIRE_HEADER], *b;
    size_t n;
    for (int i = 0; i < 100; i++) {
        if (raw_read(r, h, &b, &n)) {
            return errno != EAGAIN && errno != EWOULDBLOCK;
        }
        if (saw_type && h[3] == watch_type) *saw_type = true;
        free(b);
    }
    return false;
}

static void raw_send_clear(struct raw *r, uint8_t type, const uint8_t *body, size_t n) {
    uint8_t h[DL_WIRE_HEADER];
    dl_frame_write_header(h, type, (uint32_t)n);
    send(r->fd, h, sizeof h, MSG_NOSIGNAL);
    if (n) send(r->fd, body, n, MSG_NOSIGNAL);
}

static void raw_send_sealed(struct raw *r, uint8_t type, const uint8_t *body, size_t n, int flip_byte) {
    size_t total = DL_WIRE_HEADER + n + DL_WIRE_TAG;
    uint8_t *f = malloc(total);
    dl_frame_seal(&r->tx, type, body, n, f);
    if (flip_byte >= 0) f[(size_t)flip_byte % total] ^= 0x01;
    send(r->fd, f, total, MSG_NOSIGNAL);
    free(f);
}

/* Runs our side of the handshake. forge: sign AUTH with a key other than
 * the one announced in HELLO. Returns 0 once the server's AUTH verified. */
static int raw_handshake(struct raw *r, const char *run_id, bool forge) {
    CHECK_OK(dl_identity_load(NULL, &r->id));
    dl_handshake_begin(&r->hs, true, &r->id, run_id, false);
    raw_send_clear(r, DL_MSG_HELLO, r->hs.my_hello, r->hs.my_hello_size);
    uint8_t h[DL_WIRE_HEADER], *b;
    size_t n;
    if (raw_read(r, h, &b, &n) || h[3] != DL_MSG_HELLO) {
        free(b);
        return -1;
    }
    int rc = dl_handshake_on_hello(&r->hs, b, n, &r->rx, &r->tx);
    free(b);
    if (rc) return -1;
    uint8_t sig[DL_WIRE_SIG];
    if (forge) {
        struct dl_identity other;
        dl_identity_load(NULL, &other);
        memcpy(other.pk, r->id.pk, DL_WIRE_PK); /* claims r->id, holds another key */
        dl_handshake_sign(&r->hs, &other, sig);
    } else {
        dl_handshake_sign(&r->hs, &r->id, sig);
    }
    uint8_t *auth = dl_msg_auth_encode(sig, NULL, 0, &n);
    raw_send_sealed(r, DL_MSG_AUTH, auth, n, -1);
    free(auth);
    if (raw_read(r, h, &b, &n) || h[3] != DL_MSG_AUTH) {
        free(b);
        return -1;
    }
    rc = dl_frame_open(&r->rx, h, b, &n);
    const uint8_t *token;
    size_t token_size;
    if (!rc) rc = dl_msg_auth_decode(b, n, sig, &token, &token_size);
    if (!rc) rc = dl_handshake_verify(&r->hs, sig);
    free(b);
    return rc;
}

static void raw_close(struct raw *r) {
    close(r->fd);
    dl_handshake_clear(&r->hs);
}

static void test_hostile(dl_net *a, dl_net *b) {
    const char *addr = dl_net_listen_address(a);
    const char *a_id = dl_net_peer_id(a);
    struct raw r;
    uint8_t h[DL_WIRE_HEADER], *body;
    size_t n;

    /* garbage */
    CHECK(raw_connect(&r, addr) == 0);
    uint8_t junk[256];
    randombytes_buf(junk, sizeof junk);
    junk[0] = 'G';
    send(r.fd, junk, sizeof junk, MSG_NOSIGNAL);
    CHECK_MSG(raw_closed(&r, -1, NULL), "garbage connection not closed");
    raw_close(&r);
    CHECK(echo_works(b, a_id));

    /* a length field of 2^32-1 */
    CHECK(raw_connect(&r, addr) == 0);
    dl_frame_write_header(h, DL_MSG_HELLO, 0xffffffffu);
    send(r.fd, h, sizeof h, MSG_NOSIGNAL);
    CHECK_MSG(raw_closed(&r, -1, NULL), "huge length not closed");
    raw_close(&r);

    /* a wrong version: told so (ERROR carrying our version), then closed */
    CHECK(raw_connect(&r, addr) == 0);
    dl_frame_write_header(h, DL_MSG_HELLO, 0);
    h[2] = 77;
    send(r.fd, h, sizeof h, MSG_NOSIGNAL);
    bool told = false;
    for (int i = 0; i < 3 && !told; i++) {
        if (raw_read(&r, h, &body, &n)) break;
        struct dl_msg_error e;
        if (h[3] == DL_MSG_ERROR && dl_msg_error_decode(body, n, &e) == 0)
            told = e.code == DL_ERR_VERSION && e.version == DL_WIRE_VERSION;
        free(body);
    }
    CHECK_MSG(told, "no version error received");
    CHECK(raw_closed(&r, -1, NULL));
    raw_close(&r);

    /* an unknown message type instead of HELLO */
    CHECK(raw_connect(&r, addr) == 0);
    raw_send_clear(&r, 0x55, (const uint8_t *)"\x90", 1);
    bool saw_error = false;
    CHECK(raw_closed(&r, DL_MSG_ERROR, &saw_error));
    CHECK(saw_error);
    raw_close(&r);

    /* wrong run id */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK(raw_handshake(&r, "another-run", false) != 0);
    raw_close(&r);

    /* an honest raw peer works: PING gets PONG (so the refusals below are real) */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK_OK(raw_handshake(&r, "transport-test", false));
    uint8_t *ping = dl_msg_ping_encode(42, &n);
    raw_send_sealed(&r, DL_MSG_PING, ping, n, -1);
    free(ping);
    bool pong = false;
    for (int i = 0; i < 10 && !pong; i++) {
        if (raw_read(&r, h, &body, &n)) break;
        uint64_t nonce = 0;
        if (dl_frame_open(&r.rx, h, body, &n) == 0 && h[3] == DL_MSG_PONG && dl_msg_ping_decode(body, n, &nonce) == 0)
            pong = nonce == 42;
        free(body);
    }
    CHECK_MSG(pong, "honest raw peer got no PONG");
    /* ... and the same connection with one tampered frame is closed */
    ping = dl_msg_ping_encode(43, &n);
    raw_send_sealed(&r, DL_MSG_PING, ping, n, DL_WIRE_HEADER + 3);
    free(ping);
    bool saw_pong = false;
    CHECK_MSG(raw_closed(&r, DL_MSG_PONG, &saw_pong), "tampered frame did not close the connection");
    CHECK(!saw_pong);
    raw_close(&r);

    /* a forged record (signed by one key, naming another) is refused, its
     * sender disconnected, and the record never reaches the view */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK_OK(raw_handshake(&r, "transport-test", false));
    struct dl_identity victim, forger;
    dl_identity_load(NULL, &victim);
    dl_identity_load(NULL, &forger);
    memcpy(forger.pk, victim.pk, DL_WIRE_PK);
    struct dl_record rec;
    memset(&rec, 0, sizeof rec);
    rec.seq = 1;
    rec.epoch = 1000;
    size_t bn;
    uint8_t *blob = dl_record_sign(&rec, "transport-test", &forger, &bn);
    const uint8_t *blobs[1] = {blob};
    uint8_t *records = dl_msg_records_encode(blobs, &bn, 1, &n);
    raw_send_sealed(&r, DL_MSG_RECORDS, records, n, -1);
    free(records);
    free(blob);
    CHECK_MSG(raw_closed(&r, -1, NULL), "forged record not refused");
    raw_close(&r);
    struct dl_swarm_view v;
    CHECK_OK(dl_net_swarm_view(a, &v));
    CHECK(v.global_epoch < 1000);
    for (size_t i = 0; i < v.num_peers; i++) CHECK(strcmp(v.peers[i].peer_id, victim.peer_id) != 0);
    dl_swarm_view_free(&v);

    /* forged handshake signature: closed before any record is shared */
    CHECK(raw_connect(&r, addr) == 0);
    dl_handshake_begin(&r.hs, true, &r.id, "transport-test", false);
    dl_handshake_clear(&r.hs);
    int hs = raw_handshake(&r, "transport-test", true);
    CHECK(hs == 0); /* the server's own AUTH is fine; ours is not */
    bool saw_records = false;
    CHECK_MSG(raw_closed(&r, DL_MSG_RECORDS, &saw_records), "forged signature not refused");
    CHECK(!saw_records);
    raw_close(&r);

    /* an unknown sealed message type after the handshake: closed (and banned) */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK_OK(raw_handshake(&r, "transport-test", false));
    raw_send_sealed(&r, 0x66, (const uint8_t *)"\x90", 1, -1);
    CHECK(raw_closed(&r, -1, NULL));
    /* banned: the same identity is refused on reconnect */
    struct dl_identity banned = r.id;
    raw_close(&r);
    CHECK(raw_connect(&r, addr) == 0);
    r.id = banned;
    dl_handshake_begin(&r.hs, true, &r.id, "transport-test", false);
    raw_send_clear(&r, DL_MSG_HELLO, r.hs.my_hello, r.hs.my_hello_size);
    bool banned_told = false;
    for (int i = 0; i < 3 && !banned_told; i++) {
        if (raw_read(&r, h, &body, &n)) break;
        struct dl_msg_error e;
        if (h[3] == DL_MSG_ERROR && dl_msg_error_decode(body, n, &e) == 0) banned_told = e.code == DL_ERR_BANNED;
        free(body);
    }
    CHECK_MSG(banned_told, "banned identity was not refused");
    raw_close(&r);

    /* silent before the handshake: closed after handshake_timeout_s */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK_MSG(raw_closed(&r, -1, NULL), "silent connection not closed by the handshake timeout");
    raw_close(&r);

    /* silent after the handshake (never answers PING): closed as dead */
    CHECK(raw_connect(&r, addr) == 0);
    CHECK_OK(raw_handshake(&r, "transport-test", false));
    bool saw_ping = false;
    CHECK_MSG(raw_closed(&r, DL_MSG_PING, &saw_ping), "dead connection not closed by keepalive");
    CHECK(saw_ping);
    raw_close(&r);

    /* through all of it the honest peer kept being served */
    CHECK(echo_works(b, a_id));
    CHECK(peers_seen(a) == 2);
}

static void test_requests(dl_net *a, dl_net *b) {
    const char *a_id = dl_net_peer_id(a);
    CHECK(echo_works(b, a_id));
    /* a 1 MiB compressible payload crosses compressed and comes back intact */
    size_t big = 1 << 20;
    uint8_t *payload = malloc(big);
    for (size_t i = 0; i < big; i++) payload[i] = (uint8_t)(i / 4096);
    uint8_t *resp;
    size_t n;
    CHECK(dl_net_request_sync(b, a_id, "echo", payload, big, 10, &resp, &n) == DL_NET_OK);
    int same = n == big;
    for (size_t i = 0; same && i < big; i++) same = resp[i] == payload[big - 1 - i];
    CHECK(same);
    free(resp);
    free(payload);
    CHECK(dl_net_request_sync(b, a_id, "missing", "x", 1, 5, &resp, &n) == DL_NET_NO_HANDLER);
    free(resp);
    CHECK(dl_net_request_sync(b, a_id, "fail", "x", 1, 5, &resp, &n) == DL_NET_REMOTE_ERROR);
    free(resp);
    CHECK(dl_net_request_sync(b, a_id, "silent", "x", 1, 0.3, &resp, &n) == DL_NET_TIMEOUT);
    free(resp);
    CHECK(dl_net_request_sync(b, "0123456789abcdef0123456789abcdef", "echo", "x", 1, 1, &resp, &n) ==
          DL_NET_DISCONNECTED);
    free(resp);
    /* cancellation: the callback runs once, with CANCELLED */
    struct async_result ar;
    memset(&ar, 0, sizeof ar);
    pthread_mutex_init(&ar.lock, NULL);
    uint64_t id = dl_net_request(b, a_id, "silent", "x", 1, 30, async_cb, &ar);
    CHECK(id > 0);
    sleep_ms(100);
    CHECK_OK(dl_net_cancel(b, id));
    int calls = 0, status = -1;
    for (int t = 0; t < 5000 && calls == 0; t += 10) {
        sleep_ms(10);
        pthread_mutex_lock(&ar.lock);
        calls = ar.calls;
        status = ar.status;
        pthread_mutex_unlock(&ar.lock);
    }
    CHECK(calls == 1 && status == DL_NET_CANCELLED);
    pthread_mutex_destroy(&ar.lock);
}

/* ---- TCP_NODELAY (address.c) ---- */

/* "ready outbound nodelay": counts over the answering peer's ready
 * connections, read on its network thread, where the list lives. Without
 * the option a round's small messages wait behind delayed ACKs, about
 * 40 ms a hop; nothing else would notice. */
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

/* b dialled a: a's ready connections are accepted ones, b's dialled. */
static void test_nodelay(dl_net *a, dl_net *b) {
    dl_net *ends[2] = {a, b}, *askers[2] = {b, a};
    const char *names[2] = {"the accepting peer", "the dialling peer"};
    for (int e = 0; e < 2; e++) {
        char id[DL_PEER_ID_HEX];
        snprintf(id, sizeof id, "%s", dl_net_peer_id(ends[e]));
        uint8_t *resp = NULL;
        size_t n = 0;
        unsigned ready = 0, outbound = 0, nodelay = 0;
        char text[64] = {0};
        bool ok = dl_net_request_sync(askers[e], id, "sockopt", "?", 1, 5.0, &resp, &n) == DL_NET_OK && resp &&
                  n < sizeof text;
        if (ok) memcpy(text, resp, n);
        free(resp);
        CHECK_MSG(ok && sscanf(text, "%u %u %u", &ready, &outbound, &nodelay) == 3, "%s: no answer", names[e]);
        CHECK_MSG(e == 0 || outbound >= 1, "%s has no outbound connection (%u ready)", names[e], ready);
        CHECK_MSG(ready >= 1 && nodelay == ready, "%s: %u of %u ready connections have TCP_NODELAY", names[e],
                  nodelay, ready);
    }
}

int main(void) {
    dl_log_set_level(getenv("DEDLOC_LOG") ? dl_log_get_level() : DL_LOG_ERROR);
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "transport-test";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    cfg.handshake_timeout_s = 1.5;
    cfg.keepalive_s = 1.0;
    dl_net *a = NULL, *b = NULL;
    CHECK_OK(dl_net_start(&cfg, &a));
    if (!a) return dl_test_finish("test_net_transport");
    CHECK(strncmp(dl_net_listen_address(a), "127.0.0.1:", 10) == 0);
    CHECK_OK(dl_net_set_handler(a, "echo", echo_handler, NULL));
    CHECK_OK(dl_net_set_handler(a, "silent", silent_handler, NULL));
    CHECK_OK(dl_net_set_handler(a, "fail", fail_handler, NULL));
    CHECK_OK(dl_net_set_handler(a, "sockopt", sockopt_handler, NULL));
    cfg.initial_peers = dl_net_listen_address(a);
    CHECK_OK(dl_net_start(&cfg, &b));
    if (!b) return dl_test_finish("test_net_transport");
    CHECK_OK(dl_net_set_handler(b, "sockopt", sockopt_handler, NULL));
    CHECK(wait_peers(a, 2, 10000));
    CHECK(wait_peers(b, 2, 10000));
    test_nodelay(a, b);

    /* progress: b at a later epoch leads; a sees it */
    CHECK_OK(dl_net_publish_progress(b, 5, 40, 0));
    CHECK_OK(dl_net_publish_progress(a, 5, 2, 0));
    bool seen = false;
    for (int t = 0; t < 10000 && !seen; t += 20) {
        struct dl_swarm_view v;
        if (dl_net_swarm_view(a, &v) == 0) {
            seen = v.global_epoch == 5 && v.collective_samples == 42;
            dl_swarm_view_free(&v);
        }
        if (!seen) sleep_ms(20);
    }
    CHECK_MSG(seen, "progress did not propagate");

    test_requests(a, b);
    test_hostile(a, b);

    /* a clean exit: goodbye removes b from a's view well before any expiry */
    dl_net_stop(b);
    CHECK(wait_peers(a, 1, 5000));
    dl_net_stop(a);
    return dl_test_finish("test_net_transport");
}
