/* The HTTP data source's reading of a response head: status, Content-Range
 * and Content-Length decide whether the body continues the file where we
 * asked, restarts it, or is an error. Pure, so the fuzz harness and the tests
 * can call it with any header values a server (or anyone on the path) sends. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

/* Decimal digits only, no sign, no overflow; *end points past them. */
static bool parse_u64(const char *s, uint64_t *out, const char **end) {
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (p == s) return false;
    *out = v;
    *end = p;
    return true;
}

/* "bytes FIRST-LAST/SIZE", "bytes FIRST-LAST/" followed by a star (size
 * unknown; RFC 9110 14.4), or "bytes FIRST-LAST" from lenient servers. */
static bool parse_content_range(const char *cr, uint64_t *first, uint64_t *last, uint64_t *size) {
    const char *p = cr;
    if (strncmp(p, "bytes ", 6)) return false;
    p += 6;
    while (*p == ' ') p++;
    if (!parse_u64(p, first, &p) || *p++ != '-' || !parse_u64(p, last, &p) || *last < *first) return false;
    *size = 0;
    if (*p == 0) return true;
    if (*p++ != '/') return false;
    if (*p == '*') p++;
    else if (!parse_u64(p, size, &p) || *size <= *last) return false;
    while (*p == ' ' || *p == '\t') p++;
    return *p == 0;
}

void dl_http_read_head(int status, const char *content_range, const char *content_length,
                       uint64_t requested_from, dl_http_head *out) {
    memset(out, 0, sizeof out->why);
    out->body_usable = false;
    out->skip = 0;
    out->total = -1;
    if (status == 206) {
        uint64_t first = 0, last = 0, size = 0;
        if (!content_range || !parse_content_range(content_range, &first, &last, &size)) {
            snprintf(out->why, sizeof out->why, "206 without a usable Content-Range");
            return;
        }
        if (first != requested_from) {
            snprintf(out->why, sizeof out->why, "server sent bytes from %" PRIu64 ", asked from %" PRIu64, first,
                     requested_from);
            return;
        }
        if (size > 0 && size <= INT64_MAX) out->total = (int64_t)size;
        out->body_usable = true;
    } else if (status == 200) {
        uint64_t length;
        const char *end;
        if (content_length && parse_u64(content_length, &length, &end) && !*end && length <= INT64_MAX)
            out->total = (int64_t)length;
        out->skip = requested_from; /* whole file again: drop what we have */
        out->body_usable = true;
    } else if (status == 416 && requested_from > 0) {
        /* Asked past the end: the file ended exactly where we were. */
        out->total = (int64_t)(requested_from <= INT64_MAX ? requested_from : INT64_MAX);
    } else {
        snprintf(out->why, sizeof out->why, "HTTP %d", status);
    }
}
