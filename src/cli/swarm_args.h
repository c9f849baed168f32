/* The options that make `dedloc train` and `dedloc aux` one peer of a swarm,
 * and the start and stop of the peer's services around the step loop. */
#ifndef DEDLOC_CLI_SWARM_ARGS_H
#define DEDLOC_CLI_SWARM_ARGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "dedloc/collab.h"

/* getopt codes of the swarm options start here (commands keep theirs below). */
#define CLI_SWARM_OPT_BASE 1000

struct cli_swarm_args {
    struct dl_net_config net;
    struct dl_collab_config collab;
    struct dl_collab_train_options train;  /* only the swarm fields are set here */
    const char *compression;
    bool any;                              /* a swarm option was given */
    const char *run_option_given;          /* a run setting given as an option (refused with --manifest) */
    /* --manifest: the run manifest and the tokenizer file it names. */
    const char *manifest_path;
    bool has_manifest;
    struct dl_manifest manifest;
    char tokenizer_path[4096];
    char *tokenizer_bytes;
    size_t tokenizer_size;
    char run_key_hex[DL_AUTHORITY_PK_HEX];
    const char *invite_path;               /* --invite-file: redeem this invite's code for newcomers */
    dl_invite *invite;                     /* loaded by cli_swarm_load_invite */
};

void cli_swarm_args_default(struct cli_swarm_args *a);
/* The long options, terminated by a zero entry. */
/* The most swarm options there are (checked where they are listed), so that
 * a command's option array has room for all of them. */
#define CLI_SWARM_MAX_OPTS 48
const struct option *cli_swarm_options(void);
/* Handles one getopt result: 0 taken, 1 not a swarm option, -1 bad value
 * (message printed, prefixed by cmd). */
int cli_swarm_option(struct cli_swarm_args *a, int c, const char *arg, const char *cmd);
/* Checks and completes the settings after parsing (run id required, refresh
 * bounds from the expiry). Returns 0 or -1 (message printed). */
int cli_swarm_finish(struct cli_swarm_args *a, const char *cmd, double target_batch);
/* --manifest FILE: loads and verifies the manifest, finds its tokenizer
 * (tokenizer_path if given, else the path in the manifest, else that file's
 * name beside the manifest) and checks it against the manifest's hash, then
 * sets the run's settings of the swarm: run id, manifest hash, run key,
 * compression, aggregation and clip parameters. Refuses those given as
 * options. 0, or -1 with the message printed. */
int cli_swarm_load_manifest(struct cli_swarm_args *a, const char *tokenizer_path, const char *cmd);
/* Whether a data source (a --data value, or one a manifest names) is an
 * http(s) URL, which every peer can reach, rather than a path on one
 * machine (a "FORMAT:" prefix, as in "paragraphs:http://...", is skipped). */
bool cli_data_is_url(const char *source);
/* How a manifest's signer is written everywhere: "the run authority " and
 * its public key (64 hex digits), or "peer " and its peer id. */
#define CLI_SIGNER_TEXT 96
void cli_manifest_signer(const struct dl_manifest *m, char out[CLI_SIGNER_TEXT]);
/* A closed run (the manifest names an authority): refuses to start without
 * a token that admits this peer (its --identity, run and authority), saying
 * how to get one. 0 when the run is open or the token admits us; -1 with the
 * message printed. */
int cli_swarm_check_token(struct cli_swarm_args *a, const char *cmd);
/* --invite-file: loads the invite (a->invite; served by cli_swarm_run) and
 * checks that it is of the manifest's authority and run. 0 (also without
 * --invite-file), or -1 with the message printed. */
int cli_swarm_load_invite(struct cli_swarm_args *a, const char *cmd);
/* Frees what cli_swarm_load_manifest loaded. */
void cli_swarm_args_free(struct cli_swarm_args *a);
/* The help text of the swarm options. */
void cli_swarm_help(FILE *out);

/* Starts net, the averaging service and the state donor, runs the step loop
 * with train (its base fields filled by the caller), stops everything.
 * *peer_id_out (may be NULL) gets our peer id. */
int cli_swarm_run(struct cli_swarm_args *a, struct dl_collab_train_options *train, const dl_opt_config *opt,
                  const dl_train_layout *layout, float *params, const dl_checkpoint *resume,
                  const dl_trainer_backend *backend, struct dl_collab_train_result *res);

/* The optimizer settings `dedloc train` uses when none are given: sahajBERT's
 * recipe, scaled down for the tiny preset (its schedule spans max_steps). The
 * monitor stores the same in the checkpoints it writes of a swarm. */
dl_opt_config cli_train_opt_defaults(bool tiny, dl_opt_kind kind, int64_t max_steps);

#endif
