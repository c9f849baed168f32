/* Network latency on loopback: the authenticated handshake (TCP connect,
 * HELLO both ways, AUTH both ways, signature checks) as a dialler sees it,
 * and how long a new epoch takes from dl_net_publish_progress on one peer to
 * the other peer's swarm view. Prints a table and one JSON line.
 * With a cap, also the rate a 4 MB incompressible request goes out at
 * under max_upload (the token bucket):
 *   bench_net [rounds (default 200)] [max_upload_mbit (default 0 = skip)] */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "net/wire.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
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

static int read_frame(int fd, uint8_t h[DL_WIRE_HEADER], uint8_t *body, size_t cap, size_t *n) {
    if (read_all(fd, h, DL_WIRE_HEADER)) return -1;
    uint32_t len = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
    if (len > cap) return -1;
    *n = len;
    return read_all(fd, body, len);
}

/* One dialler-side handshake; returns seconds or -1. */
static double handshake_once(const struct sockaddr_in *sa, const struct dl_identity *id) {
    double t0 = dl_now();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa)) {
        close(fd);
        return -1;
    }
    struct dl_handshake hs;
    struct dl_seal rx, tx;
    dl_handshake_begin(&hs, true, id, "bench", false);
    uint8_t h[DL_WIRE_HEADER], body[2048];
    size_t n;
    dl_frame_write_header(h, DL_MSG_HELLO, (uint32_t)hs.my_hello_size);
    send(fd, h, sizeof h, MSG_NOSIGNAL);
    send(fd, hs.my_hello, hs.my_hello_size, MSG_NOSIGNAL);
    double result = -1;
    if (read_frame(fd, h, body, sizeof body, &n) == 0 && dl_handshake_on_hello(&hs, body, n, &rx, &tx) == 0) {
        uint8_t sig[DL_WIRE_SIG];
        dl_handshake_sign(&hs, id, sig);
        uint8_t *auth = dl_msg_auth_encode(sig, NULL, 0, &n);
        uint8_t frame[DL_WIRE_HEADER + 128 + DL_WIRE_TAG];
        dl_frame_seal(&tx, DL_MSG_AUTH, auth, n, frame);
        send(fd, frame, DL_WIRE_HEADER + n + DL_WIRE_TAG, MSG_NOSIGNAL);
        free(auth);
        const uint8_t *token;
        size_t token_size;
        if (read_frame(fd, h, body, sizeof body, &n) == 0 && dl_frame_open(&rx, h, body, &n) == 0 &&
            dl_msg_auth_decode(body, n, sig, &token, &token_size) == 0 && dl_handshake_verify(&hs, sig) == 0)
            result = dl_now() - t0;
    }
    dl_handshake_clear(&hs);
    close(fd);
    return result;
}

static void ok_handler(void *user, dl_net *net, const struct dl_net_incoming *req) {
    dl_net_respond(net, req->token, DL_NET_OK, "k", 1);
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    double cap_mbit = argc > 2 ? atof(argv[2]) : 0;
    if (rounds < 5) rounds = 5;
    dl_log_set_level(DL_LOG_ERROR);
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "bench";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    dl_net *a, *b;
    if (dl_net_start(&cfg, &a)) {
        fprintf(stderr, "bench_net: %s\n", dl_error());
        return 1;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(strrchr(dl_net_listen_address(a), ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    struct dl_identity id;
    dl_identity_load(NULL, &id);
    double *hs = calloc((size_t)rounds, sizeof *hs);
    int ok = 0;
    for (int i = 0; i < rounds; i++) {
        double t = handshake_once(&sa, &id);
        if (t >= 0) hs[ok++] = t;
    }
    qsort(hs, (size_t)ok, sizeof *hs, cmp_double);

    cfg.initial_peers = dl_net_listen_address(a);
    if (dl_net_start(&cfg, &b)) {
        fprintf(stderr, "bench_net: %s\n", dl_error());
        return 1;
    }
    for (int t = 0; t < 10000; t++) {
        struct dl_swarm_view v;
        dl_net_swarm_view(b, &v);
        size_t n = v.num_peers;
        dl_swarm_view_free(&v);
        if (n == 2) break;
        sleep_us(1000);
    }
    double *prop = calloc((size_t)rounds, sizeof *prop);
    int pok = 0;
    for (int i = 1; i <= rounds; i++) {
        double t0 = dl_now();
        dl_net_publish_progress(a, (uint64_t)i, 0, 0);
        for (;;) {
            struct dl_swarm_view v;
            dl_net_swarm_view(b, &v);
            uint64_t e = v.global_epoch;
            dl_swarm_view_free(&v);
            if (e == (uint64_t)i) {
                prop[pok++] = dl_now() - t0;
                break;
            }
            if (dl_now() - t0 > 5) break;
            sleep_us(50);
        }
    }
    qsort(prop, (size_t)pok, sizeof *prop, cmp_double);
    double capped_mbit = 0;
    if (cap_mbit > 0) {
        dl_net *c;
        struct dl_net_config cc = cfg;
        cc.max_upload_mbit = cap_mbit;
        dl_net_set_handler(a, "sink", ok_handler, NULL);
        if (dl_net_start(&cc, &c) == 0) {
            for (int t = 0; t < 10000; t++) {
                struct dl_swarm_view v;
                dl_net_swarm_view(c, &v);
                size_t n = v.num_connections;
                dl_swarm_view_free(&v);
                if (n >= 1) break;
                sleep_us(1000);
            }
            sleep_us(300000); /* let the bucket's burst drain behind the record exchange */
            size_t size = 4u << 20;
            uint8_t *payload = malloc(size), *resp;
            randombytes_buf(payload, size);
            size_t rn;
            double t0 = dl_now();
            int st = dl_net_request_sync(c, dl_net_peer_id(a), "sink", payload, size, 120, &resp, &rn);
            double dt = dl_now() - t0;
            if (st == DL_NET_OK) capped_mbit = size * 8 / dt / 1e6;
            free(resp);
            free(payload);
            dl_net_stop(c);
        }
    }
    printf("%-28s %8s %10s %10s %10s\n", "measure (loopback)", "n", "median ms", "p90 ms", "max ms");
    printf("%-28s %8d %10.3f %10.3f %10.3f\n", "handshake (dialler side)", ok, hs[ok / 2] * 1e3,
           hs[ok * 9 / 10] * 1e3, hs[ok - 1] * 1e3);
    printf("%-28s %8d %10.3f %10.3f %10.3f\n", "epoch propagation (1 hop)", pok, prop[pok / 2] * 1e3,
           prop[pok * 9 / 10] * 1e3, prop[pok - 1] * 1e3);
    if (cap_mbit > 0)
        printf("%-28s %8s %10.2f Mbit/s measured, cap %.2f\n", "4 MB request upload", "1", capped_mbit, cap_mbit);
    printf("{\"handshake_ms_median\":%.3f,\"handshake_ms_p90\":%.3f,\"propagation_ms_median\":%.3f,"
           "\"propagation_ms_p90\":%.3f,\"rounds\":%d,\"upload_cap_mbit\":%.2f,\"upload_measured_mbit\":%.2f}\n",
           hs[ok / 2] * 1e3, hs[ok * 9 / 10] * 1e3, prop[pok / 2] * 1e3, prop[pok * 9 / 10] * 1e3, rounds,
           cap_mbit, capped_mbit);
    free(hs);
    free(prop);
    dl_net_stop(b);
    dl_net_stop(a);
    return 0;
}
