/* Where a monitor keeps what it writes by default: a folder per run id in
 * the user's state directory, so a second run's chart never continues the
 * first's and nothing lands in whatever folder the monitor was started in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/monitor.h"
#include "dedloc/util.h"

/* A run id as a folder name: letters, digits, '.', '-' and '_' are kept,
 * anything else (and a leading dot) becomes '_'. When that changed the name
 * (or cut it at 64 characters, or left it empty), a hash of the run id is
 * appended, so two run ids never share a folder. */
static void folder_name(const char *run_id, char *out, size_t size) {
    size_t n = 0;
    bool changed = false;
    for (const char *c = run_id; *c && n + 1 < size && n < 64; c++) {
        /* A leading dot would hide the folder (or name "." or ".."). */
        bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  (*c == '.' && n > 0) || *c == '-' || *c == '_';
        out[n++] = ok ? *c : '_';
        changed |= !ok;
    }
    out[n] = 0;
    changed |= n < strlen(run_id) || n == 0;
    if (changed && size > 18 && n > size - 18) n = size - 18;
    if (changed)
        snprintf(out + n, size - n, "%s%016llx", n ? "-" : "run-",
                 (unsigned long long)dl_hash64(run_id, strlen(run_id), 0));
}

int dl_monitor_state_dir(const char *run_id, char *out, size_t size) {
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char base[4096];
    /* The XDG base directory rules: a relative XDG_STATE_HOME is ignored. */
    if (xdg && xdg[0] == '/') snprintf(base, sizeof base, "%s", xdg);
    else if (home && home[0]) snprintf(base, sizeof base, "%s/.local/state", home);
    else return dl_fail("no folder for the monitor's files: neither XDG_STATE_HOME nor HOME is set (pass --history FILE)");
    char name[96];
    folder_name(run_id, name, sizeof name);
    int n = snprintf(out, size, "%s/dedloc/monitor/%s", base, name);
    if (n < 0 || (size_t)n >= size) return dl_fail("the monitor's folder under %s: path too long", base);
    if (dl_mkdirs(out)) return dl_fail_context("the monitor's folder (pass --history FILE to write elsewhere)");
    return 0;
}
