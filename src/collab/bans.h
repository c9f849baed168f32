/* Peers this peer refuses (private to src/collab).
 *
 * A peer that misbehaves in a round (data that does not decode, an
 * impossible weight, a chunk for the wrong part) is refused for ban_s; one
 * whose contribution keeps being clipped round after round is refused for
 * the run. The evidence is always local, and so is the ban: this peer stops
 * grouping with it and refuses its requests; others judge on their own. */
#ifndef DEDLOC_COLLAB_BANS_H
#define DEDLOC_COLLAB_BANS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collab/group.h"
#include "dedloc/collab.h"

struct dl_ban_entry {
    char peer_id[DL_PEER_ID_HEX];
    double until;
};

/* Consecutive centered-clip rounds in which this peer, as an aggregator,
 * clipped a member's contribution. */
struct dl_clip_streak {
    char peer_id[DL_PEER_ID_HEX];
    uint32_t rounds;
};

struct dl_bans {
    pthread_mutex_t lock;         /* guards the ban entries (any thread asks) */
    double ban_s;                 /* how long a misbehaving peer is refused */
    int clip_warn_rounds, clip_ban_rounds; /* <= 0: never */
    struct dl_ban_entry entries[64];
    size_t num_entries;
    struct dl_clip_streak streaks[DL_AVG_MAX_MEMBERS]; /* the round thread only */
    size_t num_streaks;
    /* Spot checks a peer left unanswered (its `rounds`), the round thread only. */
    struct dl_clip_streak silences[DL_AVG_MAX_MEMBERS];
    size_t num_silences;
};

void dl_bans_init(struct dl_bans *b, double ban_s, int clip_warn_rounds, int clip_ban_rounds);
void dl_bans_destroy(struct dl_bans *b);
bool dl_bans_is_banned(struct dl_bans *b, const char *peer_id);
/* Until when (dl_now clock) peer_id is refused; 0 when it is not. */
double dl_bans_until(struct dl_bans *b, const char *peer_id);
/* Refuses peer_id for ban_s (a ban for the run stays one). */
void dl_bans_add(struct dl_bans *b, const char *peer_id, const char *why);
/* Refuses peer_id for the rest of the run. */
void dl_bans_add_for_run(struct dl_bans *b, const char *peer_id, const char *why);
/* peer_id left a chunk a spot check drew undisclosed (docs/protocol.md,
 * 3d): refused for ban_s the first time (it may have died), for the run
 * the second (a peer that came back and did it again withholds it). */
void dl_bans_add_silent(struct dl_bans *b, const char *peer_id, const char *why);
/* Removes from a view (in place) every peer we refuse, ourselves never:
 * a peer caught misbehaving does not group with us, so its record must not
 * count either among the holders of a param hash (the reference) or among
 * the peers whose epoch we might follow. Without this, two attackers that
 * honest peers had refused, each holding a hash of its own at the honest
 * epoch, kept an honest 3-to-2 split from any majority (3 of 7), and the
 * two honest sides never healed. Returns how many it dropped: present,
 * but never in our groups (what --min-peers counts), at whatever epoch. */
size_t dl_bans_drop_from_view(struct dl_bans *b, struct dl_swarm_view *v);
/* The first member of g other than member `me` that we refuse, or NULL.
 * A member joins no group that names a peer it refuses: it refuses that
 * peer's messages, so the round could only wait out its deadline for the
 * peer's results, nonce and attestation (an attacked swarm lost two 60 s
 * rounds that way when a leader that had not yet refused two clipped
 * attackers put them in the group). It passes the leader over and retries
 * the epoch with the next one. */
const char *dl_bans_first_in_group(struct dl_bans *b, const struct dl_group *g, size_t me);
/* After a centered-clip round of group g in which this peer was member me:
 * counts each member it clipped (clipped[j]) or saw unclipped
 * (reduced_from[j]) as an aggregator; warns and bans past the thresholds.
 * Rounds of another aggregation change nothing. Returns how many members
 * this call refused for the run. */
size_t dl_bans_count_clipped(struct dl_bans *b, const struct dl_group *g, size_t me, const bool *reduced_from,
                             const bool *clipped);

#endif
