/* `dedloc join` of a closed run: the token this peer trains with. */
#ifndef DEDLOC_CLI_JOIN_TOKEN_H
#define DEDLOC_CLI_JOIN_TOKEN_H

#include <stdbool.h>

#include "dedloc/collab.h"

struct cli_join_token {
    const char *address;       /* HOST:PORT the run's files came from, or NULL */
    const char *dht;           /* DHT bootstrap list, or NULL */
    const char *identity_path; /* this peer's identity (created if absent) */
    const char *dir;           /* the run's folder: the token is kept in DIR/token */
    const char *invite;        /* --invite CODE, or NULL */
    double timeout_s;
};

/* For a manifest with an authority: a token that admits this peer, kept in
 * DIR/token (one that still admits it is used again; otherwise --invite
 * redeems the code at the peer of address). On success 0 with path (of
 * size 4200) set, "" for an open run. Without a token and an invite it
 * prints this peer's id and what to send the organiser, and returns 1; -1 on
 * a failure whose message dl_error() holds. */
int cli_join_token(const struct cli_join_token *j, const struct dl_manifest *m, char path[4200]);

#endif
