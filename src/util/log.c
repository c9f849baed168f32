/* Logging with levels (DEDLOC_LOG) and one line format for every module. */
#include "dedloc/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Atomic: the level is read from every thread and set lazily on first use. */
static _Atomic int log_level = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static enum dl_log_level level_from_env(void) {
    const char *s = getenv("DEDLOC_LOG");
    if (!s) return DL_LOG_INFO;
    if (!strcmp(s, "error")) return DL_LOG_ERROR;
    if (!strcmp(s, "warn")) return DL_LOG_WARN;
    if (!strcmp(s, "debug")) return DL_LOG_DEBUG;
    return DL_LOG_INFO;
}

void dl_log_set_level(enum dl_log_level level) { log_level = (int)level; }

enum dl_log_level dl_log_get_level(void) {
    int level = atomic_load(&log_level);
    if (level < 0) {
        int expected = -1;
        level = (int)level_from_env();
        if (!atomic_compare_exchange_strong(&log_level, &expected, level)) level = expected;
    }
    return (enum dl_log_level)level;
}

void dl_log(enum dl_log_level level, const char *module, const char *fmt, ...) {
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if ((int)level > (int)dl_log_get_level()) return;
    char message[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "[%02d:%02d:%02d.%03ld] %-5s %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, names[level], module, message);
    pthread_mutex_unlock(&log_lock);
}
