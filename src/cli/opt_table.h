/* Option tables of the commands: one entry per long option says its name,
 * whether it takes an argument, and where its value goes in the command's
 * settings (a field at an offset, of a kind, with bounds; or a setter). The
 * same table makes getopt_long's struct option array and stores the values,
 * so an option cannot be listed in one and forgotten in the other. What a
 * bad value prints stays the command's own (each words it its way). */
#ifndef DEDLOC_CLI_OPT_TABLE_H
#define DEDLOC_CLI_OPT_TABLE_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

enum cli_opt_kind {
    CLI_OPT_FLAG,    /* no argument: the bool field becomes true */
    CLI_OPT_UNSET,   /* no argument: the bool field becomes false */
    CLI_OPT_STRING,  /* the const char * field takes the argument as it is */
    CLI_OPT_DOUBLE,  /* a double field: a number (strtod) in [lo, hi] */
    CLI_OPT_WHOLE,   /* a double field: a whole number in [lo, hi] */
    CLI_OPT_LLONG,   /* a long long field: a base-10 integer in [lo, hi] */
    CLI_OPT_INT64,   /* an int64_t field: a number (strtod) in [lo, hi], its integer part */
    CLI_OPT_INT,     /* an int field: the same */
    CLI_OPT_SETTER,  /* takes an argument: set(settings, arg) decides */
    CLI_OPT_ACTION,  /* no argument: set(settings, NULL) does what the option says */
    CLI_OPT_OTHER,   /* no argument, nothing stored: the command handles it (--help) */
};

struct cli_opt {
    const char *name;
    int id;                   /* getopt_long's val: unique within the command */
    enum cli_opt_kind kind;
    size_t offset;            /* of the field in the settings struct */
    double lo, hi;            /* bounds of the numeric kinds (and of a setter's number) */
    /* CLI_OPT_SETTER, CLI_OPT_ACTION: stores arg into settings; 0, or -1
     * for a bad value. */
    int (*set)(void *settings, const char *arg);
};

/* Fills out (room for n + 1 entries) with the options of table[0..n) in the
 * table's order, then the zero entry that ends the array. Returns n. */
size_t cli_opt_fill(const struct cli_opt *table, size_t n, struct option *out);
/* The entry whose id is id, or NULL. */
const struct cli_opt *cli_opt_find(const struct cli_opt *table, size_t n, int id);
/* Stores arg (NULL for the kinds without an argument) into settings as e
 * says. 0, or -1 for a malformed or out-of-range value (nothing printed,
 * nothing stored). */
int cli_opt_assign(const struct cli_opt *e, void *settings, const char *arg);
/* Parses argv with table (at most CLI_OPT_MAX entries) into settings: the
 * option whose id is help_id prints help to stdout and returns 1; an unknown
 * option prints help to stderr, a bad value "dedloc CMD: bad value 'V' for
 * --NAME"; both return -1. 0 when every option was stored. Leaves optind
 * at the first operand. */
#define CLI_OPT_MAX 96
int cli_opt_parse(const struct cli_opt *table, size_t n, int help_id, int argc, char **argv, void *settings,
                  const char *cmd, void (*help)(FILE *));
/* getopt_long, with long options matched by their exact name: glibc takes
 * any unambiguous prefix (--token for --tokenizer, --manif for --manifest),
 * which silently turns a mistyped or another command's option into one
 * this command has. A prefix is refused with "dedloc CMD: unknown option
 * '--X'" and '?' is returned, as for any unknown option.
 * Every command parses through this (or cli_opt_parse), so that the option
 * lists below are the ones the parser holds. */
int cli_getopt_long(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *cmd);
/* The option lists, for completion and the man page's check: when the
 * probe is on (cli_opt_probe_start), the first cli_getopt_long call of a
 * command prints its long options to stdout, one "NAME ARG" line each (ARG
 * 1 when the option takes an argument), then "." and ends the process. */
void cli_opt_probe_start(void);
/* The parsers behind the numeric kinds, for setters: 0 or -1. */
int cli_parse_double(const char *s, double lo, double hi, double *out);
int cli_parse_llong(const char *s, long long lo, long long hi, long long *out);

#endif
