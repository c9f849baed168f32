/* Subcommands of the dedloc binary. Each lives in src/cli/cmd_<name>.c, parses
 * its own options (getopt_long), prints --help, and returns an exit code.
 * The CLI parses, calls and prints: what a command does lives in the library
 * (include/dedloc/), so other programs and the tests can call it too. */
#ifndef DEDLOC_CLI_COMMANDS_H
#define DEDLOC_CLI_COMMANDS_H

enum { DL_EXIT_OK = 0, DL_EXIT_FAILURE = 1, DL_EXIT_USAGE = 2 };

typedef int (*dl_command_fn)(int argc, char **argv);

struct dl_command {
    const char *name;
    dl_command_fn run;
    const char *summary;
};

/* The table in main.c; add a line there when you add a command. */
extern const struct dl_command dl_commands[];

int cmd_devices(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_peer(int argc, char **argv);
int cmd_authority(int argc, char **argv);
int cmd_monitor(int argc, char **argv);
int cmd_serve_data(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_aux(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_join(int argc, char **argv);
int cmd_completion(int argc, char **argv);

#endif
