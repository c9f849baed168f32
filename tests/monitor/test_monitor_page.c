/* The monitor's page in headless Chromium (Debian's chromium; skipped with 77
 * where it is absent): against a small live swarm it loads with no console
 * messages, draws its three charts, fills the peers table and the
 * contributors, shows the numbers /api/status gives, and fetches nothing
 * beyond loopback. A screenshot goes to monitor_page.png in the build folder.
 *
 * "Nothing beyond loopback": Chromium's proxy is a socket of this test, which
 * it uses for every host except loopback; whatever reaches it was meant for
 * elsewhere. The browser's own service hosts, which it contacts with
 * background networking off all the same, are told apart by name. */
#include <sys/stat.h>

#include "dl_test.h"
#include "monitor/monitor_swarm.h"

static const char *find_chromium(void) {
    const char *env = getenv("DEDLOC_CHROMIUM");
    if (env && access(env, X_OK) == 0) return env;
    const char *const candidates[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser"};
    for (size_t i = 0; i < 2; i++)
        if (access(candidates[i], X_OK) == 0) return candidates[i];
    return NULL;
}

/* Runs chromium with the common flags and extra (one argument), stdout to
 * out_path, stderr to err_path, at most 90 s. Returns the exit status. */
static int run_chromium(const char *chromium, const char *profile, int proxy_port, const char *extra,
                        const char *url, const char *out_path, const char *err_path) {
    char profile_arg[300], proxy_arg[64];
    snprintf(profile_arg, sizeof profile_arg, "--user-data-dir=%s", profile);
    snprintf(proxy_arg, sizeof proxy_arg, "--proxy-server=127.0.0.1:%d", proxy_port);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out >= 0) dup2(out, 1);
        if (err >= 0) dup2(err, 2);
        execl(chromium, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-default-apps", "--disable-extensions", "--disable-client-side-phishing-detection",
              "--disable-domain-reliability", "--no-pings", "--window-size=1280,1000", "--enable-logging=stderr",
              "--v=0", "--virtual-time-budget=6000", profile_arg, proxy_arg, extra, url, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    double end = mono_now() + 90;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (mono_now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(50000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 22, n = 0;
    char *buf = malloc(cap + 1);
    if (buf) n = fread(buf, 1, cap, f);
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* The text of <span id="ID">TEXT</span> in the dumped DOM. */
static bool span_text(const char *dom, const char *id, char *out, size_t cap) {
    char key[64];
    snprintf(key, sizeof key, "<span id=\"%s\">", id);
    const char *p = dom ? strstr(dom, key) : NULL;
    if (!p) return false;
    p += strlen(key);
    const char *end = strchr(p, '<');
    if (!end) return false;
    snprintf(out, cap, "%.*s", (int)(end - p), p);
    return true;
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Hosts the sink saw (CONNECT host:port, or GET http://host/...). Returns how
 * many requests named a host that is not one of the browser's own services. */
static int sink_foreign_requests(int sink) {
    int foreign = 0;
    for (;;) {
        int c = accept(sink, NULL, NULL);
        if (c < 0) break;
        char buf[512] = "";
        struct pollfd pfd = {c, POLLIN, 0};
        if (poll(&pfd, 1, 1000) > 0) {
            ssize_t k = recv(c, buf, sizeof buf - 1, 0);
            buf[k > 0 ? k : 0] = 0;
        }
        close(c);
        char host[256] = "";
        if (sscanf(buf, "CONNECT %255[^: ]", host) != 1) sscanf(buf, "%*s http://%255[^:/ ]", host);
        const char *const browser_services[] = {"google.com", "googleapis.com", "gstatic.com", "gvt1.com"};
        bool browser = false;
        size_t hl = strlen(host);
        for (size_t i = 0; i < 4; i++) {
            size_t sl = strlen(browser_services[i]);
            if (hl >= sl && !strcmp(host + hl - sl, browser_services[i]) && (hl == sl || host[hl - sl - 1] == '.'))
                browser = true;
        }
        if (!browser) {
            fprintf(stderr, "a request left for '%s': %.80s\n", host, buf);
            foreign++;
        }
    }
    return foreign;
}

int main(void) {
    const char *chromium = find_chromium();
    if (!chromium) {
        fprintf(stderr, "chromium is not installed: skipping\n");
        return 77;
    }
    swarm_names("monitor_page");
    unlink(history_path);
    if (start_swarm()) return 1;
    cJSON *ready = wait_for_full_status();
    CHECK_MSG(ready != NULL, "the monitor never saw both peers with their metrics");
    cJSON_Delete(ready);

    int sink = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (sink < 0 || bind(sink, (struct sockaddr *)&a, sizeof a) || listen(sink, 64) ||
        getsockname(sink, (struct sockaddr *)&a, &al)) {
        fprintf(stderr, "cannot open the proxy sink\n");
        return 1;
    }
    fcntl(sink, F_SETFL, O_NONBLOCK);
    char profile[] = "/tmp/dedloc-monitor-chromium-XXXXXX";
    if (!mkdtemp(profile)) return 1;
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", monitor_port);

    int rc = run_chromium(chromium, profile, ntohs(a.sin_port), "--dump-dom", url, "monitor_page_dom.html",
                          "monitor_page_chromium.log");
    CHECK_MSG(rc == 0, "chromium --dump-dom exited %d (see monitor_page_chromium.log)", rc);
    cJSON *status = get_json("/api/status");
    char *dom = read_file("monitor_page_dom.html");
    char *log = read_file("monitor_page_chromium.log");
    CHECK_MSG(log && count(log, ":CONSOLE") == 0, "the page logged to its console (see monitor_page_chromium.log)");

    /* Chart.js sizes each canvas it draws on. */
    CHECK_MSG(count(dom, "<canvas id=\"chart-") == 3 && count(dom, "box-sizing: border-box") >= 3,
              "the charts were not drawn");
    /* The peers table: both peers, with their names and devices. */
    CHECK(dom && strstr(dom, peers[0].peer_id) && strstr(dom, peers[1].peer_id));
    CHECK(count(dom, "<td>alice</td>") == 2 && count(dom, "<td>bob</td>") == 2); /* peers and contributors */
    CHECK(count(dom, "<td>fake</td>") == 4); /* the device, in both tables too */
    char text[64], want[64];
    CHECK(span_text(dom, "step", text, sizeof text) && atof(text) == json_num(status, "global_epoch"));
    CHECK(span_text(dom, "alive", text, sizeof text) && atof(text) == json_num(status, "peers_alive"));
    snprintf(want, sizeof want, "%.1f", json_num(status, "samples_per_second"));
    CHECK_MSG(span_text(dom, "sps", text, sizeof text) && !strcmp(text, want), "samples/s '%s', status %s", text, want);
    CHECK(span_text(dom, "target", text, sizeof text) && atof(text) == json_num(status, "target_batch"));
    CHECK(span_text(dom, "run-id", text, sizeof text) && !strcmp(text, "monitor-test"));
    free(dom);
    free(log);
    cJSON_Delete(status);

    unlink("monitor_page.png");
    rc = run_chromium(chromium, profile, ntohs(a.sin_port), "--screenshot=monitor_page.png", url,
                      "monitor_page_shot.out", "monitor_page_shot.log");
    CHECK_MSG(rc == 0, "chromium --screenshot exited %d (see monitor_page_shot.log)", rc);
    char *png = read_file("monitor_page.png");
    CHECK_MSG(png && !memcmp(png, "\x89PNG", 4), "no screenshot in monitor_page.png");
    free(png);

    CHECK(sink_foreign_requests(sink) == 0);
    close(sink);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", profile);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", profile);
    stop_swarm();
    return dl_test_finish("test_monitor_page");
}
