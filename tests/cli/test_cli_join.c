/* dedloc join as a volunteer meets it before any training: Ctrl-C stops it
 * at once while it connects (not when its fetch timeout runs out), and an
 * address that answers in another protocol is given up at once. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_sh.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* A listening loopback socket (its port in *port): the kernel completes
 * connections to it whether or not anyone accepts them. */
static int listen_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* A peer that never says a word: join waits in its connect phase, and the
 * signal must end that wait. Signals are sent until join exits, so one that
 * comes before join set its handler (a background job starts with SIGINT
 * ignored) is not the only one. */
static void sigint_while_connecting(void) {
    int port, fd = listen_loopback(&port);
    CHECK(fd >= 0);
    if (fd < 0) return;
    double t0 = dl_now();
    CHECK(sh("{ %s join 127.0.0.1:%d --fetch-timeout 120 2>j.err & p=$!; for i in $(seq 40); do sleep 0.5; "
             "kill -INT $p 2>/dev/null || break; done; wait $p; echo $? > rc.txt; }",
             DEDLOC_BINARY, port) == 0);
    double took = dl_now() - t0;
    close(fd);
    CHECK(file_has("rc.txt", "130\n"));
    CHECK(file_has("j.err", "stopped before the run's files arrived; nothing was saved"));
    CHECK(!file_has("j.err", "within 120 s"));
    CHECK(took < 25); /* the fetch timeout is 120 s */
}

/* A listener that answers every connection with an HTTP error, as a web
 * server on a wrong port would. */
static pid_t garbage_server(int fd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    static const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) _exit(0);
        ssize_t ignored = write(c, reply, sizeof reply - 1);
        (void)ignored;
        usleep(100000);
        close(c);
    }
}

static void another_protocol(void) {
    int port, fd = listen_loopback(&port);
    CHECK(fd >= 0);
    if (fd < 0) return;
    pid_t server = garbage_server(fd);
    double t0 = dl_now();
    int rc = sh("%s join 127.0.0.1:%d --fetch-timeout 120", DEDLOC_BINARY, port);
    double took = dl_now() - t0;
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    close(fd);
    CHECK(rc == 1);
    CHECK(file_has("err.txt", "not the dedloc protocol (bad magic); check the address and port the run gave"));
    CHECK(took < 25); /* the fetch timeout is 120 s */
}

int main(void) {
    dl_log_set_level(DL_LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    if (cli_dir_make("/tmp/dedloc_cli_join_XXXXXX")) return 1;
    sigint_while_connecting();
    another_protocol();
    cli_dir_remove();
    return dl_test_finish("cli_join");
}
