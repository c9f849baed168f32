/* Exploration for `dedloc tune`: CLBlast's kernel tuner (clblast_tuner_xgemm)
 * as a child process in a scratch folder, bounded in time; its table of
 * verified configurations is parsed and the fastest distinct ones kept. */
#include "dedloc/device.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dedloc/util.h"

enum { LINE_MAX_BYTES = 4096 };

/* Removes ANSI colour sequences in place (the tuner colours its status). */
static void strip_ansi(char *s) {
    char *w = s;
    for (char *r = s; *r;) {
        if (*r == '\x1b' && r[1] == '[') {
            r += 2;
            while (*r && !((*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z'))) r++;
            if (*r) r++;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

typedef struct parse_state {
    char names[DL_XGEMM_PARAMS_MAX][16];
    size_t nnames;
    dl_xgemm_config *best;
    int max_best, nbest;
    long rows_seen;
} parse_state;

static bool same_values(const dl_xgemm_config *a, const dl_xgemm_config *b) {
    if (a->count != b->count) return false;
    for (size_t i = 0; i < a->count; i++)
        if (strcmp(a->names[i], b->names[i]) || a->values[i] != b->values[i]) return false;
    return true;
}

/* Keeps the max_best fastest distinct configurations, fastest first. */
static void offer(parse_state *st, const dl_xgemm_config *c) {
    for (int i = 0; i < st->nbest; i++)
        if (same_values(&st->best[i], c)) {
            if (c->tuner_gflops > st->best[i].tuner_gflops) st->best[i].tuner_gflops = c->tuner_gflops;
            return;
        }
    int pos = st->nbest;
    while (pos > 0 && st->best[pos - 1].tuner_gflops < c->tuner_gflops) pos--;
    if (pos >= st->max_best) return;
    int last = st->nbest < st->max_best ? st->nbest : st->max_best - 1;
    memmove(&st->best[pos + 1], &st->best[pos], (size_t)(last - pos) * sizeof *c);
    st->best[pos] = *c;
    if (st->nbest < st->max_best) st->nbest++;
}

/* "* Parameters explored: GEMMK MWG ..." names the columns of the rows after it;
 * a row is "| id | total | v v v ... | local | global | compiles | time | GFLOPS | status |". */
static void parse_line(parse_state *st, char *line) {
    strip_ansi(line);
    const char *marker = strstr(line, "Parameters explored:");
    if (marker) {
        st->nnames = 0;
        char *save, *tok = strtok_r((char *)marker + strlen("Parameters explored:"), " \t\r\n", &save);
        for (; tok && st->nnames < DL_XGEMM_PARAMS_MAX; tok = strtok_r(NULL, " \t\r\n", &save))
            if (strlen(tok) < sizeof st->names[0]) snprintf(st->names[st->nnames++], 16, "%s", tok);
        return;
    }
    if (line[0] != '|' || !strstr(line, "results match") || st->nnames == 0) return;
    char *fields[12];
    int nf = 0;
    for (char *p = line + 1; *p && nf < 12;) {
        char *bar = strchr(p, '|');
        if (!bar) break;
        *bar = 0;
        fields[nf++] = p;
        p = bar + 1;
    }
    if (nf < 9) return;
    char *end;
    strtol(fields[0], &end, 10); /* the id column: "ref" rows are the reference run */
    while (*end == ' ') end++;
    if (end == fields[0] || *end) return;
    dl_xgemm_config c = {0};
    char *save, *tok = strtok_r(fields[2], " ", &save);
    for (; tok && c.count < st->nnames; tok = strtok_r(NULL, " ", &save)) {
        long v = strtol(tok, &end, 10);
        if (*end || v < 0 || v > 65536) return;
        snprintf(c.names[c.count], 16, "%s", st->names[c.count]);
        c.values[c.count++] = (size_t)v;
    }
    if (c.count != st->nnames || tok) return;
    c.tuner_gflops = strtod(fields[7], &end);
    if (end == fields[7] || !(c.tuner_gflops > 0)) return;
    st->rows_seen++;
    offer(st, &c);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    char path[4096];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* The tuner numbers devices within a platform. */
static int device_in_platform(const dl_device_info *info) {
    dl_device_info *all;
    int count, pos = 0;
    if (dl_device_list(&all, &count)) return 0;
    for (int i = 0; i < count && i < info->index; i++) pos += all[i].platform_index == info->platform_index;
    free(all);
    return pos;
}

int dl_tune_explore(const dl_device_info *info, size_t m, size_t n, size_t k, double seconds,
                    dl_xgemm_config *out, int max_out, int *found) {
    *found = 0;
    char workdir[] = "/tmp/dedloc-tune-XXXXXX"; /* the tuner writes JSON files into its cwd */
    if (!mkdtemp(workdir)) return dl_fail("cannot create a folder for the tuner: %s", strerror(errno));
    char arg_platform[16], arg_device[16], arg_m[24], arg_n[24], arg_k[24];
    snprintf(arg_platform, sizeof arg_platform, "%d", info->platform_index);
    snprintf(arg_device, sizeof arg_device, "%d", device_in_platform(info));
    snprintf(arg_m, sizeof arg_m, "%zu", m);
    snprintf(arg_n, sizeof arg_n, "%zu", n);
    snprintf(arg_k, sizeof arg_k, "%zu", k);
    char *const args[] = {"clblast_tuner_xgemm", "-platform", arg_platform, "-device", arg_device,
                          "-precision", "32", "-m", arg_m, "-n", arg_n, "-k", arg_k,
                          "-runs", "1", "-fraction", "0.01", NULL};
    int fds[2];
    if (pipe(fds)) {
        rmdir(workdir);
        return dl_fail("pipe: %s", strerror(errno));
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        rmdir(workdir);
        return dl_fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]), close(fds[1]);
        if (chdir(workdir) == 0) execvp(args[0], args);
        fprintf(stdout, "exec-failed %s\n", strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    parse_state st = {.best = out, .max_best = max_out};
    char line[LINE_MAX_BYTES];
    size_t used = 0;
    bool exec_failed = false;
    double deadline = dl_now() + seconds;
    for (;;) {
        double left = deadline - dl_now();
        if (left <= 0) break;
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        char chunk[1024];
        ssize_t got = read(fds[0], chunk, sizeof chunk);
        if (got <= 0) break; /* the tuner finished */
        for (ssize_t i = 0; i < got; i++) {
            if (chunk[i] == '\n' || used == sizeof line - 1) {
                line[used] = 0;
                if (!strncmp(line, "exec-failed", 11)) exec_failed = true;
                parse_line(&st, line);
                used = 0;
            } else {
                line[used++] = chunk[i];
            }
        }
    }
    close(fds[0]);
    kill(-pid, SIGTERM);
    kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 20 && waitpid(pid, &status, WNOHANG) == 0; i++) usleep(50000);
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    remove_dir(workdir);
    if (exec_failed)
        return dl_fail("cannot run clblast_tuner_xgemm (Debian package clblast-utils)");
    DL_INFO("tune", "the tuner verified %ld configurations", st.rows_seen);
    *found = st.nbest;
    return 0;
}

int dl_tune_builtin_candidates(dl_xgemm_config *out, int max_out) {
    /* MWG NWG KWG MDIMC NDIMC VWM VWN SA/SB: tiles of 32-64 with vector widths
     * 2-4 and local-memory caching, the shapes that win on CPUs (PoCL) and
     * on discrete GPUs in CLBlast's own database. */
    static const size_t sets[][8] = {
        {64, 64, 32, 8, 8, 4, 4, 1}, {32, 32, 32, 8, 8, 4, 1, 0}, {64, 64, 16, 16, 16, 2, 2, 1},
        {32, 64, 32, 8, 8, 4, 4, 1}, {128, 64, 16, 16, 8, 4, 4, 1}, {64, 32, 32, 8, 8, 2, 4, 1},
    };
    static const char *const names[] = {"GEMMK", "KREG", "KWG",  "KWI",  "MDIMA", "MDIMC",
                                        "MWG",   "NDIMB", "NDIMC", "NWG", "SA",    "SB",
                                        "STRM",  "STRN", "VWM",  "VWN"};
    int n = 0;
    for (size_t s = 0; s < sizeof sets / sizeof *sets && n < max_out; s++, n++) {
        const size_t *v = sets[s];
        size_t values[] = {0, 1, v[2], 2, v[3], v[3], v[0], v[4], v[4], v[1], v[7], v[7], 0, 0, v[5], v[6]};
        dl_xgemm_config *c = &out[n];
        memset(c, 0, sizeof *c);
        c->count = sizeof names / sizeof *names;
        for (size_t i = 0; i < c->count; i++) {
            snprintf(c->names[i], sizeof c->names[i], "%s", names[i]);
            c->values[i] = values[i];
        }
    }
    return n;
}
