/* The frame limit before authentication (docs/protocol.md, "Limits before
 * authentication"): a connection that has proven nothing may announce at
 * most 1024 bytes of body, whatever max_frame says for admitted peers. A
 * raw socket sends a first frame with a valid header and a body just over
 * the limit: the peer refuses it on the header ("exceeds the limit", in the
 * clear error frame it sends before closing). A body at the limit is read
 * and refused for what it holds (not a hello), not for its size. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"
#include "net/net_internal.h"
#include "net/wire.h"

static int dial(const char *address) {
    const char *colon = strrchr(address, ':');
    if (!colon) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends one frame of `body_size` bytes of filler as a hello, then reads
 * what the peer says until it closes (at most 30 s: a hang guard, the
 * answer comes at once) into reply. Returns the bytes read, -1 on error. */
static long send_and_read(const char *address, uint32_t body_size, char *reply, size_t reply_size) {
    int fd = dial(address);
    if (fd < 0) return -1;
    size_t total = DL_WIRE_HEADER + body_size;
    uint8_t *frame = malloc(total);
    if (!frame) {
        close(fd);
        return -1;
    }
    dl_frame_write_header(frame, DL_MSG_HELLO, body_size);
    memset(frame + DL_WIRE_HEADER, 0x41, body_size);
    long sent = (long)send(fd, frame, total, MSG_NOSIGNAL);
    free(frame);
    long got = 0;
    while (sent > 0 && (size_t)got + 1 < reply_size) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0) break;
        ssize_t n = recv(fd, reply + got, reply_size - 1 - (size_t)got, 0);
        if (n <= 0) break;
        got += n;
    }
    reply[got] = 0;
    close(fd);
    return sent > 0 ? got : -1;
}

static bool contains(const char *data, long size, const char *needle) {
    return size > 0 && memmem(data, (size_t)size, needle, strlen(needle)) != NULL;
}

int main(void) {
    struct dl_net_config cfg;
    dl_net_config_default(&cfg);
    cfg.run_id = "preauth-test";
    cfg.listen = "127.0.0.1:0";
    cfg.use_dht = false;
    dl_net *net = NULL;
    CHECK_OK(dl_net_start(&cfg, &net));
    if (!net) return dl_test_finish("net pre-authentication frame limit");
    CHECK(cfg.max_frame > 4 * DL_NET_PREAUTH_MAX_BODY); /* the limit is not max_frame's */
    const char *address = dl_net_listen_address(net);
    char reply[4096];
    long got = send_and_read(address, DL_NET_PREAUTH_MAX_BODY + 1, reply, sizeof reply);
    CHECK_MSG(contains(reply, got, "exceeds the limit of 1024"),
              "a pre-authentication frame of %d bytes was not refused on its size (%ld bytes of answer)",
              DL_NET_PREAUTH_MAX_BODY + 1, got);
    got = send_and_read(address, DL_NET_PREAUTH_MAX_BODY, reply, sizeof reply);
    CHECK_MSG(got >= 0 && !contains(reply, got, "exceeds the limit"), "a frame at the limit was refused on its size");
    dl_net_stop(net);
    return dl_test_finish("net pre-authentication frame limit");
}
