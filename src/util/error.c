/* The per-thread error message every dedloc function records on failure
 * (dl_fail), with context added on the way up (dl_fail_context). */
#include "dedloc/util.h"

#include <stdarg.h>
#include <string.h>

enum { DL_ERROR_MAX = 2048 };
static _Thread_local char error_message[DL_ERROR_MAX];

int dl_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return -1;
}

int dl_fail_context(const char *fmt, ...) {
    char context[DL_ERROR_MAX];
    char previous[DL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    memcpy(previous, error_message, sizeof previous);
    if (previous[0])
        snprintf(error_message, sizeof error_message, "%s: %s", context, previous);
    else
        snprintf(error_message, sizeof error_message, "%s", context);
    return -1;
}

const char *dl_error(void) { return error_message[0] ? error_message : "unknown error"; }

void dl_clear_error(void) { error_message[0] = 0; }
