/* Admission policy of a running peer: which peers may complete the
 * handshake (docs/protocol.md, "Admission"). Owned by the network thread. */
#ifndef DEDLOC_NET_TRUST_H
#define DEDLOC_NET_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dedloc/net.h"

struct dl_trust {
    bool closed;                      /* run key or allowlist given: not everyone may join */
    bool have_key;
    uint8_t authority_pk[DL_AUTHORITY_PK];
    unsigned admit_roles;             /* DL_ROLE_BIT mask */
    uint8_t my_token[DL_TOKEN_MAX_BYTES]; /* ours, sent in AUTH (my_token_size 0: none) */
    size_t my_token_size;
    uint64_t my_token_expires;
    uint8_t (*allowed)[16];           /* allowlist, raw peer ids */
    size_t num_allowed;
    char *revoked_path;               /* our copy of the authority's list, or NULL */
    bool have_revoked;                /* a list is in force (from the file or from a peer) */
    struct dl_revocations revoked;
    uint8_t *revoked_bin;             /* its signed binary form, forwarded to peers */
    size_t revoked_bin_size;
    struct timespec revoked_mtime;
    off_t revoked_size;
    uint64_t revocation_checks;       /* signatures of revocation lists verified (tests, docs) */
};

/* Loads the run key, our token, the allowlist and the revocation list named
 * in config. A token that cannot admit us (another peer id, run or
 * authority, or expired) only gets a warning: peers will refuse it and say
 * why. */
int dl_trust_init(struct dl_trust *t, const struct dl_net_config *config, const char *run_id,
                  const char *my_peer_id, double now);
void dl_trust_free(struct dl_trust *t);

/* Decides on a peer that proved its identity. token may be NULL (none sent).
 * On success *role is its role (DL_ROLE_NONE when admitted without a token)
 * and *expires when to check again (0 = never); on refusal the error says
 * why. */
int dl_trust_admit(const struct dl_trust *t, const char *run_id, const char *peer_id,
                   const uint8_t *token, size_t token_size, double now, enum dl_role *role, double *expires);

/* Re-reads the revocation list when its file changed; returns true when a
 * newer list was loaded (connected peers should then be checked again). */
bool dl_trust_reload(struct dl_trust *t, const char *run_id);
/* A list a peer sent (binary form): 1 when it is newer than ours and now in
 * force, 0 when it is not for us or not newer (ignored), -1 when its
 * signature is forged (the error says so). Needs the run key. */
int dl_trust_offer_revocations(struct dl_trust *t, const char *run_id, const uint8_t *bin, size_t size);
bool dl_trust_is_revoked(const struct dl_trust *t, const char *peer_id);

#endif
