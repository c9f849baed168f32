/* dedloc serve-data: serves a shard folder over HTTP (index.txt and Range
 * requests) with the data module's server. */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/data.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc serve-data DIR [--listen ADDR:PORT]\n\n"
            "Serves the files of DIR over plain HTTP so peers can stream them as training\n"
            "data with --data http://ADDR:PORT/ . GET /index.txt lists the shards (DIR's\n"
            "own index.txt if present, else every regular, non-hidden file, sorted);\n"
            "every file supports single byte ranges, so clients resume after a failure.\n"
            "Any static web server serving DIR and an index.txt works as well.\n\n"
            "  --listen ADDR:PORT   numeric address and port (default 127.0.0.1:8000;\n"
            "                       [::1]:8000 for IPv6, port 0 picks a free one)\n\n"
            "Prints 'serving DIR on http://ADDR:PORT/' once listening; stops on\n"
            "SIGINT or SIGTERM.\n");
}

/* "host:port" or "[v6]:port" into host and port. */
static int parse_listen(const char *s, char *host, size_t host_size, int *port) {
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') return -1;
        snprintf(host, host_size, "%.*s", (int)(close - s - 1), s + 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        snprintf(host, host_size, "%.*s", (int)(colon - s), s);
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!*host || end == colon + 1 || *end || p < 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

int cmd_serve_data(int argc, char **argv) {
    const char *listen = "127.0.0.1:8000";
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "l:h", opts, "serve-data")) != -1) {
        if (c == 'l') {
            listen = optarg;
        } else if (c == 'h') {
            help(stdout);
            return DL_EXIT_OK;
        } else {
            help(stderr);
            return DL_EXIT_USAGE;
        }
    }
    if (optind + 1 != argc) {
        help(stderr);
        return DL_EXIT_USAGE;
    }
    const char *dir = argv[optind];
    char host[256];
    int port;
    if (parse_listen(listen, host, sizeof host, &port)) {
        fprintf(stderr, "dedloc serve-data: --listen wants ADDR:PORT, got '%s'\n", listen);
        return DL_EXIT_USAGE;
    }
    /* Block the stop signals before the server thread exists, so only
     * sigwait below receives them. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    dl_data_server *srv;
    if (dl_data_server_start(dir, host, port, &srv)) {
        fprintf(stderr, "dedloc serve-data: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    bool v6 = strchr(host, ':') != NULL;
    printf("serving %s on http://%s%s%s:%d/\n", dir, v6 ? "[" : "", host, v6 ? "]" : "",
           dl_data_server_port(srv));
    fflush(stdout);
    int sig;
    sigwait(&stop_signals, &sig);
    DL_INFO("data", "stopping the shard server (signal %d)", sig);
    dl_data_server_stop(srv);
    return DL_EXIT_OK;
}
