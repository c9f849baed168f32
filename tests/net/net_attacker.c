/* A hostile peer for the swarm-view tests (tests/net/net_hostile_procs.c):
 * it speaks the real protocol (handshake, sealed frames, signed records)
 * but lies. Built only with the tests, never part of the dedloc binary.
 *
 *   net_attacker sybil   PORT RUN N ADDR SECONDS [TOKEN]  N made-up identities at ADDR
 *   net_attacker epoch   PORT RUN EPOCH SECONDS           our record at EPOCH, 1e300 samples
 *   net_attacker replay  PORT RUN PEER_ID SECONDS         keep resending PEER_ID's last record
 *   net_attacker dup     PORT RUN COPIES                  COPIES of one valid record
 *   net_attacker memory  PORT RUN CONNS SECONDS           CONNS connections, each sending a huge
 *                                                         PING and the start of a 16 MiB REQUEST
 *   net_attacker keyban  PORT RUN KEYS                    KEYS fresh keys that each get banned,
 *                                                         then one more handshake attempt
 *   net_attacker fetchflood PORT RUN CONNS REQS SECONDS   CONNS fetch-only connections, each asking
 *                                                         REQS times for the manifest, reading
 *                                                         nothing until the end, then counting what
 *                                                         came back
 *   net_attacker joinflood PORT RUN IDS JOINS BYTES SECONDS  IDS identities, each sending JOINS
 *                                                         averaging joins of BYTES bytes
 *
 * Loopback only (127.0.0.1). Prints one JSON line of what it did. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "net/swarm.h"
#include "net/wire.h"

struct link {
    int fd;
    struct dl_identity id;
    struct dl_seal rx, tx;
    bool ok;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n, double timeout_s) {
    uint8_t *b = p;
    double end = now_s() + timeout_s;
    while (n) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0) return -1;
        ssize_t k = recv(fd, b, n, 0);
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One frame; the body is opened when the link is sealed. */
static int read_frame(struct link *l, bool sealed, uint8_t *type, uint8_t **body, size_t *size, double timeout_s) {
    uint8_t h[DL_WIRE_HEADER];
    if (recv_all(l->fd, h, sizeof h, timeout_s)) return -1;
    struct dl_frame_header fh;
    if (dl_frame_parse_header(h, sizeof h, 64u << 20, &fh) != DL_FRAME_OK) return -1;
    uint8_t *b = malloc(fh.length ? fh.length : 1);
    if (!b || recv_all(l->fd, b, fh.length, timeout_s)) {
        free(b);
        return -1;
    }
    size_t n = fh.length;
    if (sealed && fh.type != DL_MSG_ERROR && dl_frame_open(&l->rx, h, b, &n)) {
        free(b);
        return -1;
    }
    *type = fh.type;
    *body = b;
    *size = n;
    return 0;
}

static int send_sealed(struct link *l, uint8_t type, const uint8_t *body, size_t size) {
    uint8_t *frame = malloc(DL_WIRE_HEADER + size + DL_WIRE_TAG);
    if (!frame) return -1;
    dl_frame_seal(&l->tx, type, body, size, frame);
    int rc = send_all(l->fd, frame, DL_WIRE_HEADER + size + DL_WIRE_TAG);
    free(frame);
    return rc;
}

/* Dials and completes the handshake with a fresh identity (and token);
 * fetch_only: as a newcomer that asks only for the run files. */
static int link_open_ex(struct link *l, int port, const char *run, const uint8_t *token, size_t token_size,
                        bool fetch_only) {
    memset(l, 0, sizeof *l);
    const char *path = token_size ? getenv("NET_ATTACKER_IDENTITY") : NULL;
    if (dl_identity_load(path, &l->id)) return -1;
    l->fd = dial(port);
    if (l->fd < 0) return -1;
    struct dl_handshake hs;
    if (dl_handshake_begin_ex(&hs, true, &l->id, run, false, NULL, fetch_only)) return -1;
    uint8_t h[DL_WIRE_HEADER];
    dl_frame_write_header(h, DL_MSG_HELLO, (uint32_t)hs.my_hello_size);
    int rc = send_all(l->fd, h, sizeof h) || send_all(l->fd, hs.my_hello, hs.my_hello_size);
    uint8_t type = 0, *body = NULL;
    size_t size = 0;
    if (!rc) rc = read_frame(l, false, &type, &body, &size, 5) || type != DL_MSG_HELLO ||
                  dl_handshake_on_hello(&hs, body, size, &l->rx, &l->tx);
    free(body);
    body = NULL;
    if (!rc) {
        uint8_t sig[DL_WIRE_SIG];
        dl_handshake_sign(&hs, &l->id, sig);
        size_t n;
        uint8_t *auth = dl_msg_auth_encode(sig, token, token_size, &n);
        rc = !auth || send_sealed(l, DL_MSG_AUTH, auth, n);
        free(auth);
    }
    if (!rc) rc = read_frame(l, true, &type, &body, &size, 5) || type != DL_MSG_AUTH;
    free(body);
    dl_handshake_clear(&hs);
    if (rc) {
        close(l->fd);
        l->fd = -1;
        return -1;
    }
    l->ok = true;
    return 0;
}

static int link_open(struct link *l, int port, const char *run, const uint8_t *token, size_t token_size) {
    return link_open_ex(l, port, run, token, token_size, false);
}

static void link_close(struct link *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
}

/* Sends a RECORDS message of these blobs. */
static int send_records(struct link *l, uint8_t **blobs, size_t *sizes, size_t n) {
    size_t size;
    uint8_t *body = dl_msg_records_encode((const uint8_t *const *)blobs, sizes, n, &size);
    int rc = !body || send_sealed(l, DL_MSG_RECORDS, body, size);
    free(body);
    return rc;
}

static uint8_t *make_record(const struct dl_identity *id, const char *run, uint64_t seq, uint64_t epoch,
                            double samples, const char *address, const uint8_t *token, size_t token_size,
                            size_t *size) {
    struct dl_record r;
    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.epoch = epoch;
    r.samples = samples;
    r.time = dl_wall_time();
    snprintf(r.address, sizeof r.address, "%s", address);
    if (token_size) memcpy(r.token, token, token_size);
    r.token_size = token_size;
    return dl_record_sign(&r, run, id, size);
}

/* Reads what the victim sends for up to timeout_s, answering pings; keeps
 * the newest record of watch_id (when given). */
struct watch {
    const char *peer_id;
    uint8_t *blob;
    size_t size;
    uint64_t seq;
};

static void pump(struct link *l, double timeout_s, struct watch *w, const char *run) {
    double end = now_s() + timeout_s;
    while (l->ok && now_s() < end) {
        struct pollfd pfd = {l->fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0) break;
        uint8_t type, *body;
        size_t size;
        if (read_frame(l, true, &type, &body, &size, 5)) {
            l->ok = false;
            break;
        }
        if (type == DL_MSG_PING) send_sealed(l, DL_MSG_PONG, body, size);
        if (type == DL_MSG_ERROR) l->ok = false;
        if (type == DL_MSG_RECORDS && w && w->peer_id) {
            struct dl_dec d;
            if (dl_dec_begin(&d, body, size, 0, "RECORDS") == 0) {
                for (uint32_t i = 0; i < d.count; i++) {
                    const uint8_t *p;
                    size_t n;
                    struct dl_record r;
                    if (dl_dec_bin(&d, i, &p, &n, "RECORDS") || dl_record_verify(p, n, run, &r)) continue;
                    if (strcmp(r.peer_id, w->peer_id) || r.seq <= w->seq) continue;
                    free(w->blob);
                    w->blob = malloc(n);
                    if (!w->blob) continue;
                    memcpy(w->blob, p, n);
                    w->size = n;
                    w->seq = r.seq;
                }
                dl_dec_end(&d);
            }
        }
        free(body);
    }
}

static void ping(struct link *l) {
    size_t n;
    uint8_t *p = dl_msg_ping_encode(1, &n);
    if (p && send_sealed(l, DL_MSG_PING, p, n)) l->ok = false;
    free(p);
}

static int read_token(const char *path, uint8_t *out, size_t *size) {
    *size = 0;
    if (!path) return 0;
    char *text;
    size_t n;
    if (dl_read_file(path, 4096, &text, &n)) return -1;
    int rc = dl_token_from_text(text, out, size);
    free(text);
    return rc;
}

static int mode_sybil(int port, const char *run, int count, const char *addr, double seconds, const char *token_path) {
    uint8_t token[DL_TOKEN_MAX_BYTES];
    size_t token_size;
    if (read_token(token_path, token, &token_size)) return 2;
    struct link l;
    if (link_open(&l, port, run, token, token_size)) return 2;
    /* our own record, with our token, then the made-up crowd (no tokens) */
    uint8_t *own_blob[1];
    size_t own_size[1];
    own_blob[0] = make_record(&l.id, run, 1, 0, 0, "", token, token_size, &own_size[0]);
    send_records(&l, own_blob, own_size, 1);
    free(own_blob[0]);
    uint8_t **blobs = calloc((size_t)count, sizeof *blobs);
    size_t *sizes = calloc((size_t)count, sizeof *sizes);
    if (!blobs || !sizes) return 2;
    for (int i = 0; i < count; i++) {
        struct dl_identity fake;
        dl_identity_load(NULL, &fake);
        blobs[i] = make_record(&fake, run, 1, 0, 0, addr, NULL, 0, &sizes[i]);
    }
    int sent = 0;
    for (int i = 0; i < count && l.ok; i += DL_WIRE_MAX_RECORDS) {
        size_t n = (size_t)(count - i) < DL_WIRE_MAX_RECORDS ? (size_t)(count - i) : DL_WIRE_MAX_RECORDS;
        if (send_records(&l, blobs + i, sizes + i, n)) break;
        sent += (int)n;
    }
    double end = now_s() + seconds;
    while (l.ok && now_s() < end) {
        ping(&l);
        pump(&l, 1, NULL, run);
    }
    printf("{\"mode\":\"sybil\",\"sent\":%d,\"connected_to_the_end\":%s}\n", sent, l.ok ? "true" : "false");
    for (int i = 0; i < count; i++) free(blobs[i]);
    free(blobs);
    free(sizes);
    link_close(&l);
    return 0;
}

static int mode_epoch(int port, const char *run, uint64_t epoch, double seconds) {
    struct link l;
    if (link_open(&l, port, run, NULL, 0)) return 2;
    double end = now_s() + seconds;
    uint64_t seq = (uint64_t)(dl_wall_time() * 1e6);
    int sent = 0;
    while (l.ok && now_s() < end) {
        size_t n;
        uint8_t *blob = make_record(&l.id, run, ++seq, epoch, 1e300, "", NULL, 0, &n);
        if (blob && send_records(&l, &blob, &n, 1) == 0) sent++;
        free(blob);
        pump(&l, 0.5, NULL, run);
    }
    printf("{\"mode\":\"epoch\",\"sent\":%d,\"peer_id\":\"%s\"}\n", sent, l.id.peer_id);
    link_close(&l);
    return 0;
}

static int mode_replay(int port, const char *run, const char *peer_id, double seconds) {
    struct link l;
    if (link_open(&l, port, run, NULL, 0)) return 2;
    struct watch w = {peer_id, NULL, 0, 0};
    double end = now_s() + seconds;
    int replays = 0;
    while (l.ok && now_s() < end) {
        pump(&l, 0.5, &w, run);
        if (w.blob && send_records(&l, &w.blob, &w.size, 1) == 0) replays++;
        if (!w.blob) ping(&l);
    }
    printf("{\"mode\":\"replay\",\"captured\":%s,\"replays\":%d,\"connected_to_the_end\":%s}\n",
           w.blob ? "true" : "false", replays, l.ok ? "true" : "false");
    free(w.blob);
    link_close(&l);
    return 0;
}

static int mode_dup(int port, const char *run, int copies) {
    struct link l;
    if (link_open(&l, port, run, NULL, 0)) return 2;
    size_t n;
    uint8_t *blob = make_record(&l.id, run, (uint64_t)(dl_wall_time() * 1e6), 0, 0, "", NULL, 0, &n);
    uint8_t *blobs[DL_WIRE_MAX_RECORDS];
    size_t sizes[DL_WIRE_MAX_RECORDS];
    for (int i = 0; i < DL_WIRE_MAX_RECORDS; i++) {
        blobs[i] = blob;
        sizes[i] = n;
    }
    int sent = 0;
    while (sent < copies && l.ok) {
        size_t k = (size_t)(copies - sent) < DL_WIRE_MAX_RECORDS ? (size_t)(copies - sent) : DL_WIRE_MAX_RECORDS;
        if (send_records(&l, blobs, sizes, k)) break;
        sent += (int)k;
        pump(&l, 0.01, NULL, run);
    }
    pump(&l, 1, NULL, run);
    printf("{\"mode\":\"dup\",\"sent\":%d,\"connected_to_the_end\":%s}\n", sent, l.ok ? "true" : "false");
    free(blob);
    link_close(&l);
    return 0;
}

static int mode_memory(int port, const char *run, int conns, double seconds) {
    struct link *ls = calloc((size_t)conns, sizeof *ls);
    if (!ls) return 2;
    size_t chunk = 1u << 20;
    uint8_t *junk = malloc(chunk);
    if (!junk) return 2;
    for (size_t i = 0; i < chunk; i++) junk[i] = (uint8_t)(i * 131 + 7);
    int opened = 0, big_pings = 0;
    /* Every connection first (a misbehaving one gets its key and, soon,
     * its address banned), then the attack on all of them at once. */
    for (int i = 0; i < conns; i++) {
        if (link_open(&ls[i], port, run, NULL, 0)) {
            ls[i].fd = -1;
            usleep(100000); /* the door's rate limit: try the next a little later */
            continue;
        }
        opened++;
    }
    for (int i = 0; i < conns; i++) {
        if (ls[i].fd < 0) continue;
        uint8_t h[DL_WIRE_HEADER];
        if (i % 4 == 0) {
            /* a 16 MiB PING: refused on its header */
            dl_frame_write_header(h, DL_MSG_PING, 16u << 20);
            if (send_all(ls[i].fd, h, sizeof h) == 0) big_pings++;
        } else {
            /* the start of a 16 MiB REQUEST whose body is garbage */
            dl_frame_write_header(h, DL_MSG_REQUEST, (16u << 20) - 64);
            send_all(ls[i].fd, h, sizeof h);
        }
    }
    /* Push garbage into every request as fast as the victim takes it. */
    size_t pushed = 0;
    double end = now_s() + seconds;
    while (now_s() < end) {
        bool any = false;
        for (int i = 0; i < conns; i++) {
            if (ls[i].fd < 0) continue;
            struct pollfd pfd = {ls[i].fd, POLLOUT, 0};
            if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & POLLOUT)) continue;
            ssize_t k = send(ls[i].fd, junk, 65536, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                pushed += (size_t)k;
                any = true;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                link_close(&ls[i]);
            }
        }
        if (!any) usleep(10000);
    }
    printf("{\"mode\":\"memory\",\"opened\":%d,\"big_pings\":%d,\"pushed_mib\":%.1f}\n", opened, big_pings,
           (double)pushed / (1 << 20));
    for (int i = 0; i < conns; i++) link_close(&ls[i]);
    free(ls);
    free(junk);
    return 0;
}

static int mode_keyban(int port, const char *run, int keys) {
    int banned = 0;
    for (int i = 0; i < keys; i++) {
        struct link l;
        if (link_open(&l, port, run, NULL, 0)) continue;
        /* an unknown message type after the handshake: a protocol violation, banned */
        uint8_t junk[4] = {0x91, 0x01, 0, 0};
        send_sealed(&l, 0x7f, junk, 2);
        uint8_t type, *body;
        size_t size;
        while (read_frame(&l, true, &type, &body, &size, 3) == 0) free(body);
        banned++;
        link_close(&l);
        usleep(100000);
    }
    /* a fresh key from the same address: refused before any handshake? */
    struct link l;
    int admitted = link_open(&l, port, run, NULL, 0) == 0;
    if (admitted) link_close(&l);
    printf("{\"mode\":\"keyban\",\"banned_keys\":%d,\"fresh_key_admitted\":%s}\n", banned, admitted ? "true" : "false");
    return 0;
}

static int send_request(struct link *l, uint64_t id, const char *method, const uint8_t *payload, size_t size) {
    struct dl_msg_request m;
    memset(&m, 0, sizeof m);
    m.id = id;
    snprintf(m.method, sizeof m.method, "%s", method);
    m.timeout_s = 60;
    m.raw_size = size;
    m.payload = payload;
    m.size = size;
    size_t n;
    uint8_t *body = dl_msg_request_encode(&m, &n);
    int rc = !body || send_sealed(l, DL_MSG_REQUEST, body, n);
    free(body);
    return rc;
}

/* What came back on a link until it closed or timeout_s passed. */
struct tally {
    int records, revocations, ok, refused, errors, closed;
};

static void drain(struct link *l, double timeout_s, struct tally *t) {
    double end = now_s() + timeout_s;
    while (l->ok && now_s() < end) {
        struct pollfd pfd = {l->fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0) break;
        uint8_t type, *body;
        size_t size;
        if (read_frame(l, true, &type, &body, &size, 5)) {
            l->ok = false;
            t->closed++;
            break;
        }
        if (type == DL_MSG_PING) send_sealed(l, DL_MSG_PONG, body, size);
        if (type == DL_MSG_RECORDS) t->records++;
        if (type == DL_MSG_REVOCATIONS) t->revocations++;
        if (type == DL_MSG_ERROR) {
            t->errors++;
            t->closed++;
            l->ok = false;
        }
        struct dl_msg_response r;
        if (type == DL_MSG_RESPONSE && dl_msg_response_decode(body, size, &r) == 0) {
            if (r.status == 0) t->ok++;
            else t->refused++;
        }
        free(body);
    }
}

static int mode_fetchflood(int port, const char *run, int conns, int reqs, double seconds) {
    struct link *ls = calloc((size_t)conns, sizeof *ls);
    if (!ls) return 2;
    int admitted = 0, sent = 0;
    for (int i = 0; i < conns; i++) {
        if (link_open_ex(&ls[i], port, run, NULL, 0, true)) {
            ls[i].fd = -1;
            continue;
        }
        admitted++;
        usleep(60000); /* within the door's rate: what is refused is refused for being fetch-only */
    }
    /* Every admitted link asks, and reads nothing for a while. */
    for (int i = 0; i < conns; i++)
        for (int k = 0; k < reqs && ls[i].fd >= 0; k++)
            if (send_request(&ls[i], (uint64_t)k + 1, "dedloc.run.manifest", NULL, 0) == 0) sent++;
    usleep((useconds_t)(seconds * 1e6));
    struct tally t = {0};
    for (int i = 0; i < conns; i++) {
        if (ls[i].fd < 0) continue;
        drain(&ls[i], 1.0, &t);
    }
    int still_open = 0;
    for (int i = 0; i < conns; i++) still_open += ls[i].fd >= 0 && ls[i].ok;
    for (int i = 0; i < conns; i++) link_close(&ls[i]);
    /* Then newcomers from the same address, one after the other, each on a
     * fresh fetch-only connection asking once for the manifest. */
    struct tally p = {0};
    for (int k = 0; k < 20; k++) {
        struct link one;
        if (link_open_ex(&one, port, run, NULL, 0, true)) {
            usleep(100000);
            continue;
        }
        send_request(&one, 1, "dedloc.run.manifest", NULL, 0);
        int before = p.ok + p.refused;
        for (int w = 0; w < 20 && p.ok + p.refused == before && one.ok; w++) drain(&one, 0.1, &p);
        link_close(&one);
        usleep(60000);
    }
    printf("{\"mode\":\"fetchflood\",\"admitted\":%d,\"requests\":%d,\"records\":%d,\"revocations\":%d,"
           "\"answered\":%d,\"refused\":%d,\"closed\":%d,\"still_open\":%d,\"peer_answered\":%d,"
           "\"peer_refused\":%d}\n",
           admitted, sent, t.records, t.revocations, t.ok, t.refused, t.closed, still_open, p.ok, p.refused);
    for (int i = 0; i < conns; i++) link_close(&ls[i]);
    free(ls);
    return 0;
}

static int mode_joinflood(int port, const char *run, int ids, int joins, size_t bytes, double seconds) {
    struct link *ls = calloc((size_t)ids, sizeof *ls);
    uint8_t *junk = malloc(bytes ? bytes : 1);
    if (!ls || !junk) return 2;
    for (size_t i = 0; i < bytes; i++) junk[i] = (uint8_t)(i * 131 + 7);
    int opened = 0, sent = 0;
    for (int i = 0; i < ids; i++) {
        if (link_open(&ls[i], port, run, NULL, 0)) {
            ls[i].fd = -1;
            continue;
        }
        opened++;
    }
    struct tally t = {0};
    for (int k = 0; k < joins; k++)
        for (int i = 0; i < ids; i++) {
            if (ls[i].fd < 0 || !ls[i].ok) continue;
            if (send_request(&ls[i], (uint64_t)k + 1, "avg.join", junk, bytes) == 0) sent++;
            drain(&ls[i], 0.001, &t);
        }
    double end = now_s() + seconds;
    while (now_s() < end)
        for (int i = 0; i < ids; i++)
            if (ls[i].fd >= 0) drain(&ls[i], 0.05, &t);
    printf("{\"mode\":\"joinflood\",\"opened\":%d,\"sent\":%d,\"answered\":%d,\"refused\":%d,\"closed\":%d}\n",
           opened, sent, t.ok, t.refused, t.closed);
    for (int i = 0; i < ids; i++) link_close(&ls[i]);
    free(ls);
    free(junk);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "id")) { /* creates (or reads) an identity file, prints its peer id */
        struct dl_identity id;
        if (dl_identity_load(argv[2], &id)) return 2;
        printf("%s\n", id.peer_id);
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: net_attacker MODE PORT RUN ...\n");
        return 2;
    }
    if (sodium_init() < 0) return 2;
    const char *mode = argv[1], *run = argv[3];
    int port = atoi(argv[2]);
    if (!strcmp(mode, "sybil") && argc >= 7)
        return mode_sybil(port, run, atoi(argv[4]), argv[5], atof(argv[6]), argc > 7 ? argv[7] : NULL);
    if (!strcmp(mode, "epoch") && argc >= 6) return mode_epoch(port, run, strtoull(argv[4], NULL, 10), atof(argv[5]));
    if (!strcmp(mode, "replay") && argc >= 6) return mode_replay(port, run, argv[4], atof(argv[5]));
    if (!strcmp(mode, "dup") && argc >= 5) return mode_dup(port, run, atoi(argv[4]));
    if (!strcmp(mode, "memory") && argc >= 6) return mode_memory(port, run, atoi(argv[4]), atof(argv[5]));
    if (!strcmp(mode, "keyban") && argc >= 5) return mode_keyban(port, run, atoi(argv[4]));
    if (!strcmp(mode, "fetchflood") && argc >= 7)
        return mode_fetchflood(port, run, atoi(argv[4]), atoi(argv[5]), atof(argv[6]));
    if (!strcmp(mode, "joinflood") && argc >= 8)
        return mode_joinflood(port, run, atoi(argv[4]), atoi(argv[5]), strtoull(argv[6], NULL, 10), atof(argv[7]));
    fprintf(stderr, "net_attacker: unknown mode or missing arguments\n");
    return 2;
}
