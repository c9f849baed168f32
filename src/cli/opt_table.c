/* Option tables: getopt_long's array and the assignment from one table. */
#include "cli/opt_table.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

int cli_parse_llong(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

size_t cli_opt_fill(const struct cli_opt *table, size_t n, struct option *out) {
    for (size_t i = 0; i < n; i++) {
        enum cli_opt_kind k = table[i].kind;
        bool takes_arg = k != CLI_OPT_FLAG && k != CLI_OPT_UNSET && k != CLI_OPT_ACTION && k != CLI_OPT_OTHER;
        out[i] = (struct option){table[i].name, takes_arg ? required_argument : no_argument, NULL, table[i].id};
    }
    out[n] = (struct option){0, 0, 0, 0};
    return n;
}

const struct cli_opt *cli_opt_find(const struct cli_opt *table, size_t n, int id) {
    for (size_t i = 0; i < n; i++)
        if (table[i].id == id) return &table[i];
    return NULL;
}

/* Values go in through memcpy: the field's type is the entry's kind, which
 * the compiler cannot see through the offset. */
int cli_opt_assign(const struct cli_opt *e, void *settings, const char *arg) {
    char *field = (char *)settings + e->offset;
    switch (e->kind) {
    case CLI_OPT_FLAG:
    case CLI_OPT_UNSET: {
        bool v = e->kind == CLI_OPT_FLAG;
        memcpy(field, &v, sizeof v);
        return 0;
    }
    case CLI_OPT_STRING: memcpy(field, &arg, sizeof arg); return 0;
    case CLI_OPT_DOUBLE:
    case CLI_OPT_WHOLE: {
        double v;
        if (cli_parse_double(arg, e->lo, e->hi, &v)) return -1;
        if (e->kind == CLI_OPT_WHOLE && v != (double)(int64_t)v) return -1;
        memcpy(field, &v, sizeof v);
        return 0;
    }
    case CLI_OPT_LLONG: {
        long long v;
        if (cli_parse_llong(arg, (long long)e->lo, (long long)e->hi, &v)) return -1;
        memcpy(field, &v, sizeof v);
        return 0;
    }
    case CLI_OPT_INT64:
    case CLI_OPT_INT: {
        double v;
        if (cli_parse_double(arg, e->lo, e->hi, &v)) return -1;
        if (e->kind == CLI_OPT_INT64) {
            int64_t n = (int64_t)v;
            memcpy(field, &n, sizeof n);
        } else {
            int n = (int)v;
            memcpy(field, &n, sizeof n);
        }
        return 0;
    }
    case CLI_OPT_SETTER:
    case CLI_OPT_ACTION: return e->set(settings, arg);
    case CLI_OPT_OTHER: return 0;
    }
    return -1;
}

static bool probe_on;

void cli_opt_probe_start(void) { probe_on = true; }

static void probe_print(const struct option *longopts) {
    for (const struct option *o = longopts; o->name; o++)
        printf("%s %d\n", o->name, o->has_arg != no_argument);
    printf(".\n");
    fflush(stdout);
    _exit(0);
}

/* The argv element the long option just returned came from: getopt_long
 * has moved optind past it, and past its argument when that was a separate
 * element (glibc keeps the two adjacent while it permutes). */
static const char *consumed_element(char **argv, const struct option *o) {
    bool separate_arg = o->has_arg != no_argument && optarg && optind >= 2 && optarg == argv[optind - 1];
    return argv[optind - (separate_arg ? 2 : 1)];
}

int cli_getopt_long(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *cmd) {
    if (probe_on) probe_print(longopts);
    int index = -1;
    int c = getopt_long(argc, argv, shortopts, longopts, &index);
    if (c == -1 || c == '?' || index < 0) return c;
    const struct option *o = &longopts[index];
    const char *given = consumed_element(argv, o);
    size_t n = strlen(o->name);
    if (strncmp(given, "--", 2) == 0 && strncmp(given + 2, o->name, n) == 0 && (given[2 + n] == 0 || given[2 + n] == '='))
        return c;
    size_t len = strcspn(given, "=");
    fprintf(stderr, "dedloc %s: unknown option '%.*s' (options are not abbreviated: did you mean --%s?)\n", cmd,
            (int)len, given, o->name);
    return '?';
}

int cli_opt_parse(const struct cli_opt *table, size_t n, int help_id, int argc, char **argv, void *settings,
                  const char *cmd, void (*help)(FILE *)) {
    struct option opts[CLI_OPT_MAX + 1];
    if (n > CLI_OPT_MAX) {
        fprintf(stderr, "dedloc %s: %zu options, more than the parser's %d\n", cmd, n, CLI_OPT_MAX);
        return -1;
    }
    cli_opt_fill(table, n, opts);
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", opts, cmd)) != -1) {
        const struct cli_opt *e = cli_opt_find(table, n, c);
        if (c == help_id || c == 'h') {
            help(stdout);
            return 1;
        }
        if (!e) {
            help(stderr);
            return -1;
        }
        if (cli_opt_assign(e, settings, optarg)) {
            fprintf(stderr, "dedloc %s: bad value '%s' for --%s\n", cmd, optarg, e->name);
            return -1;
        }
    }
    return 0;
}
