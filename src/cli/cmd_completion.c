/* dedloc completion: the bash completion of dedloc, and the option lists it
 * is made of, taken from the option tables the commands parse with. Each
 * command is run in a child process with the probe of cli_getopt_long on:
 * its first parse prints the long options it accepts and ends the child.
 * So the completion (and the man page's check, scripts/check_completion.sh)
 * cannot drift from what the parsers accept. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/opt_table.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc completion bash      the bash completion script (installed as\n"
            "                                   /usr/share/bash-completion/completions/dedloc)\n"
            "       dedloc completion options   every command's long options, one line each:\n"
            "                                   COMMAND: --OPTION ...\n\n"
            "Both come from the option tables the commands parse with; options of test builds\n"
            "(--test-*, --fake-*) are left out.\n");
}

/* Commands whose options follow an action word (dedloc run init ...): the
 * probe passes one so that the command reaches its parser. */
static const char *action_of(const char *command) {
    static const char *const with_action[][2] = {{"run", "init"}, {"authority", "init"}};
    for (size_t i = 0; i < sizeof with_action / sizeof with_action[0]; i++)
        if (!strcmp(command, with_action[i][0])) return with_action[i][1];
    return NULL;
}

/* The long options of `dedloc CMD [WORD]`, as "--a --b ..." sorted, into out.
 * 0, or -1 when the command did not report them (said on stderr). */
static int probe(const struct dl_command *c, const char *word, char *out, size_t cap) {
    int fds[2];
    if (pipe(fds)) {
        fprintf(stderr, "dedloc completion: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dedloc completion: fork: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(3);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        cli_opt_probe_start();
        char *argv[] = {(char *)c->name, (char *)word, NULL};
        optind = 1;
        c->run(word ? 2 : 1, argv);
        _exit(3); /* returned without parsing: nothing to report */
    }
    close(fds[1]);
    char buf[8192];
    size_t n = 0;
    ssize_t got;
    while ((got = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)got;
    close(fds[0]);
    buf[n] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n < 2 || strcmp(buf + n - 2, ".\n")) {
        fprintf(stderr, "dedloc completion: '%s%s%s' did not report its options\n", c->name, word ? " " : "",
                word ? word : "");
        return -1;
    }
    /* "name has_arg" lines: keep the names, without the test builds' own
     * (--test-*, and the --fake-* of dedloc peer). */
    const char *names[256];
    size_t count = 0;
    for (char *line = strtok(buf, "\n"); line && count < 256; line = strtok(NULL, "\n")) {
        char *space = strchr(line, ' ');
        if (!space) continue;
        *space = 0;
        if (strncmp(line, "test-", 5) && strncmp(line, "fake-", 5)) names[count++] = line;
    }
    for (size_t i = 1; i < count; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    size_t len = 0;
    out[0] = 0;
    for (size_t i = 0; i < count; i++) {
        if (i > 0 && !strcmp(names[i], names[i - 1])) continue;
        int w = snprintf(out + len, cap - len, "%s--%s", len ? " " : "", names[i]);
        if (w < 0 || (size_t)w >= cap - len) return -1;
        len += (size_t)w;
    }
    return 0;
}

/* Calls each(key, options) for every command and bench benchmark. */
static int each_command(void (*each)(const char *key, const char *options)) {
    char options[4096], key[64];
    for (const struct dl_command *c = dl_commands; c->name; c++) {
        if (!strcmp(c->name, "bench")) {
            for (const struct dl_bench *b = dl_benches; b->name; b++) {
                if (probe(c, b->name, options, sizeof options)) return -1;
                snprintf(key, sizeof key, "bench %s", b->name);
                each(key, options);
            }
            continue;
        }
        if (probe(c, action_of(c->name), options, sizeof options)) return -1;
        each(c->name, options);
    }
    return 0;
}

static void print_list(const char *key, const char *options) { printf("%s: %s\n", key, options); }

static void print_case(const char *key, const char *options) {
    if (strchr(key, ' ')) printf("        '%s') echo '%s' ;;\n", key, options);
    else printf("        %s) echo '%s' ;;\n", key, options);
}

static int print_bash(void) {
    printf("# bash completion for dedloc, written by `dedloc completion bash` from the\n"
           "# option tables of the commands. Completes commands, bench benchmarks and\n"
           "# each command's options; file names elsewhere (bash's default).\n"
           "# shellcheck disable=SC2207  # compgen's words never hold blanks\n\n"
           "_dedloc_options() {\n"
           "    case $1 in\n");
    if (each_command(print_case)) return -1;
    printf("    esac\n}\n\n"
           "_dedloc() {\n"
           "    local cur=${COMP_WORDS[COMP_CWORD]}\n"
           "    COMPREPLY=()\n"
           "    if ((COMP_CWORD == 1)); then\n"
           "        COMPREPLY=($(compgen -W '");
    for (const struct dl_command *c = dl_commands; c->name; c++) printf("%s ", c->name);
    printf("--help --version' -- \"$cur\"))\n"
           "        return 0\n"
           "    fi\n"
           "    local key=${COMP_WORDS[1]}\n"
           "    if [[ $key == bench ]]; then\n"
           "        if ((COMP_CWORD == 2)); then\n"
           "            COMPREPLY=($(compgen -W '");
    for (const struct dl_bench *b = dl_benches; b->name; b++) printf("%s ", b->name);
    printf("--help' -- \"$cur\"))\n"
           "            return 0\n"
           "        fi\n"
           "        key=\"bench ${COMP_WORDS[2]}\"\n"
           "    fi\n"
           "    if [[ $cur == -* ]]; then\n"
           "        COMPREPLY=($(compgen -W \"$(_dedloc_options \"$key\")\" -- \"$cur\"))\n"
           "    fi\n"
           "    return 0\n"
           "}\n"
           "complete -o default -F _dedloc dedloc\n");
    return 0;
}

int cmd_completion(int argc, char **argv) {
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "h", opts, "completion")) != -1) {
        help(c == 'h' ? stdout : stderr);
        return c == 'h' ? DL_EXIT_OK : DL_EXIT_USAGE;
    }
    const char *what = optind < argc ? argv[optind] : NULL;
    if (!what || optind + 1 < argc || (strcmp(what, "bash") && strcmp(what, "options"))) {
        fprintf(stderr, "dedloc completion: say 'bash' or 'options'; see 'dedloc completion --help'\n");
        return DL_EXIT_USAGE;
    }
    int rc = !strcmp(what, "bash") ? print_bash() : each_command(print_list);
    fflush(stdout);
    return rc ? DL_EXIT_FAILURE : DL_EXIT_OK;
}
