/* dedloc bench allreduce: N member processes on loopback average a vector
 * for R rounds; each member's upload is capped to its bandwidth with net's
 * max_upload. Per round: time, algbw and busbw (nccl-tests' convention), the
 * load-balancing bound for those bandwidths and the efficiency against it,
 * bytes sent and peak RSS per peer, the reduce rate. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

#define MAX_BENCH_PEERS 64

struct member_proc {
    pid_t pid;
    int fd;
    char buf[1 << 20];
    size_t len;
    char listen[64];
    bool ready, dead;
    cJSON *rounds[64];
    double started[64];
};

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc bench allreduce --peers N --size ELEMS [options]\n\n"
            "Starts N peer processes on 127.0.0.1 that average a random fp32 vector of ELEMS\n"
            "elements for R rounds, each peer's upload capped to its bandwidth.\n\n"
            "  --peers N                 number of peers (2..%d, default 4)\n"
            "  --size ELEMS              vector elements (default 18000000)\n"
            "  --compression C[,C...]    none, fp16, uint8, int8 or topk (default fp16); a list runs\n"
            "                            each codec in turn with fresh peers, one table\n"
            "  --bandwidths B1,B2,...    upload Mbit/s per peer, cycled (default 100)\n"
            "  --client-mode K           the last K peers are clients (never aggregate)\n"
            "  --aux K                   the first K peers are auxiliary (aggregate only)\n"
            "  --rounds R                rounds to run (default 3)\n"
            "  --kill-one                SIGKILL the last peer half-way through the first round\n"
            "  --deadline S              round deadline (default 120)\n"
            "  --json                    JSON instead of a table\n"
            "  --aggregation A           mean or centered-clip (default mean)\n"
            "  --tau T                   centered clip's radius (the members' default otherwise)\n"
#ifdef DEDLOC_TEST_HOOKS
            "  --no-audit                (test builds) every peer skips the audit phase of\n"
            "                            accountable aggregation, to measure what the checks cost\n"
            "  --attest-only             (test builds) every peer waits for each part's attestation\n"
            "                            instead of checking it from the senders' projections, to\n"
            "                            measure what the fast check saves\n"
            "  --no-spot                 (test builds) no spot checks under centered clip, to\n"
            "                            measure what they cost\n"
#endif
            "\n"
            "algbw = S / t with S the fp32 vector's bytes and t the slowest member's all-reduce\n"
            "time (matchmaking excluded); busbw = algbw * 2(n-1)/n; bound = the load-balancing\n"
            "optimum for these bandwidths and this codec; efficiency = bound / t. sent_MB: payload\n"
            "bytes a peer sent in the round (mean over peers; _max the most); bits/param = that\n"
            "mean x 8 / ELEMS.\n",
            MAX_BENCH_PEERS);
}

static int spawn(struct member_proc *m, char **argv) {
    int fds[2];
    if (pipe(fds)) return dl_fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) return dl_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    m->pid = pid;
    m->fd = fds[0];
    return 0;
}

static void pump(struct member_proc *m) {
    for (;;) {
        if (m->len == sizeof m->buf) m->len = 0;
        ssize_t k = read(m->fd, m->buf + m->len, sizeof m->buf - m->len);
        if (k <= 0) break;
        m->len += (size_t)k;
    }
    char *nl;
    while ((nl = memchr(m->buf, '\n', m->len))) {
        *nl = 0;
        cJSON *j = cJSON_Parse(m->buf);
        if (j) {
            const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
            int round = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "round"));
            if (ev && !strcmp(ev, "ready")) {
                snprintf(m->listen, sizeof m->listen, "%s",
                         cJSON_GetStringValue(cJSON_GetObjectItem(j, "listen")) ?: "");
                m->ready = true;
            } else if (ev && !strcmp(ev, "start") && round >= 0 && round < 64) {
                m->started[round] = dl_now();
            } else if (ev && !strcmp(ev, "round") && round >= 0 && round < 64 && !m->rounds[round]) {
                m->rounds[round] = j;
                j = NULL;
            }
            cJSON_Delete(j);
        }
        size_t used = (size_t)(nl + 1 - m->buf);
        memmove(m->buf, nl + 1, m->len - used);
        m->len -= used;
    }
}

static double num(const cJSON *o, const char *key) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key)); }

/* One codec's run: its own peers, its rounds, its rows (appended to report). */
struct bench_run {
    size_t np;
    double size, rounds, client_k, aux_k, deadline;
    const double *bw;
    size_t nbw;
    bool json, kill_one, no_audit, attest_only, no_spot;
    const char *aggregation, *tau;
};

static int run_codec(const struct bench_run *b, const char *compression, cJSON *report) {
    size_t np = b->np, nbw = b->nbw;
    double size = b->size, rounds = b->rounds, client_k = b->client_k, aux_k = b->aux_k, deadline = b->deadline;
    const double *bw = b->bw;
    bool json = b->json, kill_one = b->kill_one;
    enum dl_codec codec;
    if (dl_codec_from_name(compression, &codec)) return DL_EXIT_USAGE;
    struct member_proc *m = dl_calloc(np, sizeof *m);
    if (!m) return DL_EXIT_FAILURE;
    int rc = DL_EXIT_OK;
    char first_listen[64] = "";
    for (size_t i = 0; i < np; i++) {
        char a_size[32], a_seed[32], a_bw[32], a_peers[32], a_rounds[32], a_deadline[32];
        snprintf(a_size, sizeof a_size, "%.0f", size);
        snprintf(a_seed, sizeof a_seed, "%zu", i + 1);
        snprintf(a_bw, sizeof a_bw, "%g", bw[i % nbw]);
        snprintf(a_peers, sizeof a_peers, "%zu", np);
        snprintf(a_rounds, sizeof a_rounds, "%.0f", rounds);
        snprintf(a_deadline, sizeof a_deadline, "%g", deadline);
        char *args[40];
        int k = 0;
        args[k++] = "dedloc";
        args[k++] = "bench";
        args[k++] = "allreduce-member";
        args[k++] = "--size"; args[k++] = a_size;
        args[k++] = "--seed"; args[k++] = a_seed;
        args[k++] = "--bandwidth"; args[k++] = a_bw;
        args[k++] = "--max-upload"; args[k++] = a_bw;
        args[k++] = "--peers"; args[k++] = a_peers;
        args[k++] = "--rounds"; args[k++] = a_rounds;
        args[k++] = "--deadline"; args[k++] = a_deadline;
        args[k++] = "--compression"; args[k++] = (char *)compression;
        if (i < (size_t)aux_k) args[k++] = "--aux";
        if (b->no_audit || b->attest_only || b->no_spot) {
            args[k++] = "--misbehave";
            args[k++] = b->no_audit ? "skip-audit" : b->attest_only ? "attest-only" : "skip-spot";
        }
        if (b->aggregation) {
            args[k++] = "--aggregation";
            args[k++] = (char *)b->aggregation;
        }
        if (b->tau) {
            args[k++] = "--tau";
            args[k++] = (char *)b->tau;
        }
        if (i >= np - (size_t)client_k) args[k++] = "--client-mode";
        if (i > 0) {
            args[k++] = "--initial-peers";
            args[k++] = first_listen;
        }
        args[k] = NULL;
        if (spawn(&m[i], args)) {
            fprintf(stderr, "dedloc bench allreduce: %s\n", dl_error());
            rc = DL_EXIT_FAILURE;
            goto out;
        }
        if (i == 0) {
            double until = dl_now() + 20;
            while (!m[0].ready && dl_now() < until) {
                struct pollfd pfd = {m[0].fd, POLLIN, 0};
                poll(&pfd, 1, 50);
                pump(&m[0]);
            }
            if (!m[0].ready) {
                fprintf(stderr, "dedloc bench allreduce: the first peer did not start\n");
                rc = DL_EXIT_FAILURE;
                goto out;
            }
            snprintf(first_listen, sizeof first_listen, "%s", m[0].listen);
        }
    }
    double limit = dl_now() + 60 + rounds * (deadline + 35);
    bool killed = false;
    for (;;) {
        bool all = true;
        for (size_t i = 0; i < np; i++) {
            pump(&m[i]);
            if (m[i].dead) continue;
            if (!m[i].rounds[(int)rounds - 1]) all = false;
            int st;
            if (waitpid(m[i].pid, &st, WNOHANG) == m[i].pid) {
                pump(&m[i]);
                m[i].dead = true;
                m[i].pid = 0;
            }
        }
        if (kill_one && !killed && m[np - 1].started[0] > 0) {
            /* half of the expected round time: the bound of the slowest link */
            /* bytes per element on the way out, near enough for a timing */
            double per_elem = codec == DL_CODEC_NONE ? 4 : codec == DL_CODEC_FP16 ? 2 : codec == DL_CODEC_TOPK ? 0.03 : 1;
            double expect = size * per_elem * 2 / (bw[(np - 1) % nbw] * 1e6 / 8);
            double first_start = 1e300;
            for (size_t i = 0; i < np; i++)
                if (m[i].started[0] > 0 && m[i].started[0] < first_start) first_start = m[i].started[0];
            if (dl_now() > first_start + 0.5 + expect / 2) {
                kill(m[np - 1].pid, SIGKILL);
                killed = true;
            }
        }
        if (all || dl_now() > limit) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double vector_bytes = size * 4.0;

    for (int r = 0; r < (int)rounds; r++) {
        double t = 0, bound = 0, sent_max = 0, sent_sum = 0, recv_sum = 0, rss_max = 0, red_s = 0, red_e = 0;
        size_t reports = 0;
        size_t ok = 0, members = 0;
        char hashes[4][20] = {{0}};
        int nh = 0;
        cJSON *peers_json = cJSON_CreateArray();
        for (size_t i = 0; i < np; i++) {
            const cJSON *o = m[i].rounds[r];
            if (!o) continue;
            const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(o, "status"));
            const char *hash = cJSON_GetStringValue(cJSON_GetObjectItem(o, "hash"));
            if (status && !strcmp(status, dl_avg_status_name(DL_AVG_OK))) {
                ok++;
                if (num(o, "allreduce_s") > t) t = num(o, "allreduce_s");
                bool seen = !hash || !*hash; /* aux members hold no result */
                for (int h = 0; h < nh; h++) seen |= !strcmp(hashes[h], hash);
                if (!seen && nh < 4) snprintf(hashes[nh++], sizeof hashes[0], "%s", hash);
            }
            bound = fmax(bound, num(o, "lp_bound_s"));
            sent_max = fmax(sent_max, num(o, "bytes_sent"));
            sent_sum += num(o, "bytes_sent");
            recv_sum += num(o, "bytes_received");
            reports++;
            rss_max = fmax(rss_max, num(o, "peak_rss_kb") * 1024);
            red_s += num(o, "reduce_s");
            red_e += num(o, "reduced_elems");
            members = (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(o, "members"));
            cJSON_AddItemToArray(peers_json, cJSON_Duplicate(o, 1));
        }
        double algbw = t > 0 ? vector_bytes / t : 0;
        double busbw = members > 1 ? algbw * 2 * (double)(members - 1) / (double)members : 0;
        double eff = t > 0 ? bound / t : 0;
        double rate = red_s > 0 ? red_e / red_s : 0;
        /* traffic per peer (payload bytes its requests and answers carried) */
        double sent_mean = reports ? sent_sum / (double)reports : 0, recv_mean = reports ? recv_sum / (double)reports : 0;
        double bits_per_param = sent_mean * 8 / size;
        if (!json) {
            char hs[100] = "";
            size_t used = 0;
            for (int h = 0; h < nh && used < sizeof hs; h++)
                used += (size_t)snprintf(hs + used, sizeof hs - used, "%s%s", h ? "," : "", hashes[h]);
            printf("%-6s %5d %5zu %9.3f %9.3f %10.2f %10.2f %9.3f %3zu/%-2zu %11.3f %11.3f %10.4f %9.1f %12.1f %s\n",
                   compression, r, members, t, bound, algbw / 1e6, busbw / 1e6, eff, ok, np, sent_mean / 1e6,
                   sent_max / 1e6, bits_per_param, rss_max / 1e6, rate / 1e6, hs);
        }
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "compression", compression);
        cJSON_AddNumberToObject(row, "round", r);
        cJSON_AddNumberToObject(row, "members", (double)members);
        cJSON_AddNumberToObject(row, "ok", (double)ok);
        cJSON_AddNumberToObject(row, "time_s", t);
        cJSON_AddNumberToObject(row, "lp_bound_s", bound);
        cJSON_AddNumberToObject(row, "algbw_bytes_per_s", algbw);
        cJSON_AddNumberToObject(row, "busbw_bytes_per_s", busbw);
        cJSON_AddNumberToObject(row, "efficiency", eff);
        cJSON_AddNumberToObject(row, "bytes_sent_max", sent_max);
        cJSON_AddNumberToObject(row, "bytes_sent_mean", sent_mean);
        cJSON_AddNumberToObject(row, "bytes_received_mean", recv_mean);
        cJSON_AddNumberToObject(row, "sent_bits_per_param", bits_per_param);
        cJSON_AddNumberToObject(row, "peak_rss_bytes_max", rss_max);
        cJSON_AddNumberToObject(row, "vector_bytes", vector_bytes);
        cJSON_AddNumberToObject(row, "reduce_elems_per_s", rate);
        cJSON_AddNumberToObject(row, "distinct_results", nh);
        cJSON_AddItemToObject(row, "peers", peers_json);
        cJSON_AddItemToArray(report, row);
        if (ok == 0 || nh != 1) rc = DL_EXIT_FAILURE;
    }
out:
    for (size_t i = 0; i < np; i++) {
        if (m[i].pid > 0) {
            kill(m[i].pid, SIGKILL);
            waitpid(m[i].pid, NULL, 0);
        }
        if (m[i].fd > 0) close(m[i].fd);
        for (int r = 0; r < 64; r++) cJSON_Delete(m[i].rounds[r]);
    }
    free(m);
    return rc;
}

int bench_allreduce(int argc, char **argv) {
    double peers = 4, size = 18000000, rounds = 3, client_k = 0, aux_k = 0, deadline = 120;
    const char *compression = "fp16", *bandwidths = "100";
    bool json = false, kill_one = false, no_audit = false, attest_only = false, no_spot = false;
    const char *aggregation = NULL, *tau = NULL;
    enum { O_PEERS = 256, O_SIZE, O_COMP, O_BWS, O_CLIENT, O_AUX, O_ROUNDS, O_KILL, O_DEADLINE, O_JSON, O_NO_AUDIT,
           O_ATTEST_ONLY, O_NO_SPOT, O_AGG, O_TAU };
    static const struct option opts[] = {
        {"peers", required_argument, NULL, O_PEERS}, {"size", required_argument, NULL, O_SIZE},
        {"compression", required_argument, NULL, O_COMP}, {"bandwidths", required_argument, NULL, O_BWS},
        {"client-mode", required_argument, NULL, O_CLIENT}, {"aux", required_argument, NULL, O_AUX},
        {"rounds", required_argument, NULL, O_ROUNDS}, {"kill-one", no_argument, NULL, O_KILL},
        {"deadline", required_argument, NULL, O_DEADLINE}, {"json", no_argument, NULL, O_JSON},
        {"aggregation", required_argument, NULL, O_AGG}, {"tau", required_argument, NULL, O_TAU},
#ifdef DEDLOC_TEST_HOOKS
        {"no-audit", no_argument, NULL, O_NO_AUDIT}, {"attest-only", no_argument, NULL, O_ATTEST_ONLY},
        {"no-spot", no_argument, NULL, O_NO_SPOT},
#endif
        {"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", opts, "bench allreduce")) != -1) {
        char *end = NULL;
        double v = optarg ? strtod(optarg, &end) : 0;
        bool bad = optarg && (end == optarg || *end) && c != O_COMP && c != O_BWS && c != O_AGG;
        switch (c) {
        case O_PEERS: peers = v; bad |= !(v >= 2 && v <= MAX_BENCH_PEERS); break;
        case O_SIZE: size = v; bad |= !(v >= 1 && v <= 4e9); break;
        case O_COMP: if (optarg) compression = optarg; break;
        case O_BWS: bandwidths = optarg; break;
        case O_CLIENT: client_k = v; bad |= !(v >= 0); break;
        case O_AUX: aux_k = v; bad |= !(v >= 0); break;
        case O_ROUNDS: rounds = v; bad |= !(v >= 1 && v <= 64); break;
        case O_KILL: kill_one = true; break;
        case O_DEADLINE: deadline = v; bad |= !(v > 0); break;
        case O_JSON: json = true; break;
        case O_NO_AUDIT: no_audit = true; break;
        case O_ATTEST_ONLY: attest_only = true; break;
        case O_NO_SPOT: no_spot = true; break;
        case O_AGG: {
            enum dl_aggregation a;
            aggregation = optarg;
            bad |= dl_aggregation_from_name(optarg, &a) != 0;
            break;
        }
        case O_TAU: tau = optarg; bad |= !(v > 0); break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "dedloc bench allreduce: bad value '%s'\n", optarg);
            return DL_EXIT_USAGE;
        }
    }
    char names[256];
    snprintf(names, sizeof names, "%s", compression);
    char *save_names = NULL;
    for (char *name = strtok_r(names, ",", &save_names); name; name = strtok_r(NULL, ",", &save_names)) {
        enum dl_codec codec;
        if (dl_codec_from_name(name, &codec)) {
            fprintf(stderr, "dedloc bench allreduce: %s\n", dl_error());
            return DL_EXIT_USAGE;
        }
    }
    if (strlen(compression) >= sizeof names || !strcspn(compression, ",")) {
        fprintf(stderr, "dedloc bench allreduce: bad --compression '%s'\n", compression);
        return DL_EXIT_USAGE;
    }
    size_t np = (size_t)peers;
    if (client_k + aux_k >= np) {
        fprintf(stderr, "dedloc bench allreduce: --client-mode plus --aux must leave one trainer\n");
        return DL_EXIT_USAGE;
    }
    double bw[MAX_BENCH_PEERS];
    size_t nbw = 0;
    for (const char *p = bandwidths; p && *p && nbw < MAX_BENCH_PEERS;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0)) {
            fprintf(stderr, "dedloc bench allreduce: bad --bandwidths '%s'\n", bandwidths);
            return DL_EXIT_USAGE;
        }
        bw[nbw++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (nbw == 0) {
        fprintf(stderr, "dedloc bench allreduce: --bandwidths names no bandwidth\n");
        return DL_EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    struct bench_run b = {np,       size,     rounds,    client_k,    aux_k,   deadline,    bw,  nbw,
                          json,     kill_one, no_audit,  attest_only, no_spot, aggregation, tau};
    cJSON *report = cJSON_CreateArray();
    if (!report) return DL_EXIT_FAILURE;
    if (!json)
        printf("%-6s %5s %5s %9s %9s %10s %10s %9s %6s %11s %11s %10s %9s %12s %s\n", "codec", "round", "peers",
               "time_s", "bound_s", "algbw_MB/s", "busbw_MB/s", "effic", "ok", "sent_MB", "sent_MB_max",
               "bits/param", "rss_MB", "reduce_Me/s", "hashes");
    /* Codecs one after the other, each with fresh peers, so a table holds
     * them side by side under the same load. */
    int rc = DL_EXIT_OK;
    char list[256];
    snprintf(list, sizeof list, "%s", compression);
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int one = run_codec(&b, name, report);
        if (one != DL_EXIT_OK) rc = one;
    }
    if (json) {
        char *text = cJSON_PrintUnformatted(report);
        if (text) printf("%s\n", text);
        free(text);
    }
    cJSON_Delete(report);
    return rc;
}
