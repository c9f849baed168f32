/* Roles from admission tokens, enforced where averaging requests arrive.
 *
 * A token's role (src/net/token.c) says what its peer may do in the run;
 * the network hands every request's role up with it. Only roles that may
 * send gradients (trainer, aux) take part in averaging at all: a monitor
 * watches, so every averaging request of a monitor-role peer is refused, be
 * it a join, a chunk, a result or a fetch. An aux-role peer has no gradient
 * (docs/collab_training.md): it joins as an aux member (weight 0, it
 * aggregates only) or not at all. An open run (no tokens) has no roles. */
#include "collab/collab_internal.h"
#include "collab/inbox.h"

const char *dl_collab_role_refusal(enum dl_role token_role, int kind, const uint8_t *payload, size_t size) {
    if (token_role == DL_ROLE_NONE) return NULL;
    if (!dl_role_may_send_gradients(token_role))
        return "refused: a monitor-role token takes no part in averaging";
    /* The join's role byte (matchmaking.c): a malformed join is refused there. */
    if (token_role == DL_ROLE_AUX && kind == EV_JOIN && size >= 2 && payload[1] != DL_MEMBER_AUX)
        return "refused: an aux-role token joins as an auxiliary member (no gradient) or not at all";
    return NULL;
}
