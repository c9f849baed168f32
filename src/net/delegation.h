/* Delegations (docs/protocol.md, "Invites"): the run authority lets another
 * key, an invite's, sign tokens of one role for one run until a date, so a
 * peer that hands out tokens to invited volunteers never holds the
 * authority's key. token.c writes and checks them; invite.c uses them. */
#ifndef DEDLOC_NET_DELEGATION_H
#define DEDLOC_NET_DELEGATION_H

#include <stdint.h>

#include "dedloc/net.h"

/* authority pk (32) | delegate pk (32) | role (1) | until (8) | signature (64) */
#define DL_DELEGATION_BYTES (DL_AUTHORITY_PK + DL_AUTHORITY_PK + 1 + 8 + 64)

/* The authority a signs: delegate_pk may sign tokens of role for a's run that
 * expire at the latest at until (Unix seconds). */
int dl_delegation_sign(const struct dl_authority *a, const uint8_t delegate_pk[DL_AUTHORITY_PK], enum dl_role role,
                       uint64_t until, uint8_t out[DL_DELEGATION_BYTES]);
/* Checks the authority's signature (the key it names) for run_id; 0 with the
 * role and the date it grants, or -1 with the reason. */
int dl_delegation_verify(const uint8_t d[DL_DELEGATION_BYTES], const char *run_id, enum dl_role *role,
                         uint64_t *until);
/* Signs a token (a "DLT2": the delegation, then the fields of t) with the
 * delegate's key; out holds at least DL_TOKEN_MAX_BYTES. The caller keeps
 * t's role and expiry within what the delegation grants (decoding refuses
 * the token otherwise). */
int dl_token_sign_delegated(const uint8_t delegation[DL_DELEGATION_BYTES], const uint8_t delegate_sk[64],
                            const struct dl_token *t, uint8_t *out, size_t *size);

#endif
