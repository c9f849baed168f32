/* Bans (bans.h): the table of refused peers, and per-peer clipped streaks.
 *
 * A member whose contribution keeps being clipped round after round is far
 * from the others every time, which honest noise rarely is for long; it is
 * reported, and past a threshold refused for the run. Each aggregator judges
 * from the chunks it reduced itself: the evidence is local, so is the ban
 * (this peer stops grouping with it and refuses its requests; other peers
 * decide on their own evidence). */
#include <math.h>
#include <string.h>

#include "collab/bans.h"
#include "dedloc/util.h"

void dl_bans_init(struct dl_bans *b, double ban_s, int clip_warn_rounds, int clip_ban_rounds) {
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    b->ban_s = ban_s;
    b->clip_warn_rounds = clip_warn_rounds;
    b->clip_ban_rounds = clip_ban_rounds;
}

void dl_bans_destroy(struct dl_bans *b) { pthread_mutex_destroy(&b->lock); }

static double until_locked(const struct dl_bans *b, const char *peer_id, double now) {
    for (size_t i = 0; i < b->num_entries; i++)
        if (b->entries[i].until > now && !strcmp(b->entries[i].peer_id, peer_id)) return b->entries[i].until;
    return 0;
}

bool dl_bans_is_banned(struct dl_bans *b, const char *peer_id) { return dl_bans_until(b, peer_id) > 0; }

const char *dl_bans_first_in_group(struct dl_bans *b, const struct dl_group *g, size_t me) {
    for (size_t j = 0; j < g->n && j < DL_AVG_MAX_MEMBERS; j++)
        if (j != me && dl_bans_is_banned(b, g->members[j].peer_id)) return g->members[j].peer_id;
    return NULL;
}

size_t dl_bans_drop_from_view(struct dl_bans *b, struct dl_swarm_view *v) {
    size_t kept = 0;
    for (size_t i = 0; i < v->num_peers; i++)
        if (v->peers[i].is_self || !dl_bans_is_banned(b, v->peers[i].peer_id)) v->peers[kept++] = v->peers[i];
    size_t dropped = v->num_peers - kept;
    v->num_peers = kept;
    return dropped;
}

double dl_bans_until(struct dl_bans *b, const char *peer_id) {
    pthread_mutex_lock(&b->lock);
    double until = until_locked(b, peer_id, dl_now());
    pthread_mutex_unlock(&b->lock);
    return until;
}

static void ban_until(struct dl_bans *b, const char *peer_id, double seconds) {
    pthread_mutex_lock(&b->lock);
    double now = dl_now();
    size_t slot = b->num_entries;
    for (size_t i = 0; i < b->num_entries; i++)
        if (b->entries[i].until <= now || !strcmp(b->entries[i].peer_id, peer_id)) slot = i;
    if (slot == b->num_entries) {
        if (b->num_entries < sizeof b->entries / sizeof b->entries[0]) b->num_entries++;
        else slot = 0;
    }
    /* A ban for the run outlives any later ban for a while. */
    bool longer = strcmp(b->entries[slot].peer_id, peer_id) || !(b->entries[slot].until > now + seconds);
    snprintf(b->entries[slot].peer_id, sizeof b->entries[slot].peer_id, "%s", peer_id);
    if (longer) b->entries[slot].until = now + seconds;
    pthread_mutex_unlock(&b->lock);
}

void dl_bans_add(struct dl_bans *b, const char *peer_id, const char *why) {
    DL_WARN("collab", "dropping peer %s from the round and refusing it for %.0f s: %s", peer_id, b->ban_s, why);
    ban_until(b, peer_id, b->ban_s);
}

void dl_bans_add_for_run(struct dl_bans *b, const char *peer_id, const char *why) {
    DL_WARN("collab", "refusing peer %s for the rest of the run: %s", peer_id, why);
    ban_until(b, peer_id, INFINITY);
}

void dl_bans_add_silent(struct dl_bans *b, const char *peer_id, const char *why) {
    struct dl_clip_streak *s = NULL, *spare = NULL;
    for (size_t i = 0; i < b->num_silences && !s; i++)
        if (!strcmp(b->silences[i].peer_id, peer_id)) s = &b->silences[i];
    if (!s && b->num_silences < sizeof b->silences / sizeof b->silences[0]) spare = &b->silences[b->num_silences++];
    if (!s && !spare) spare = &b->silences[0]; /* full: the oldest goes */
    if (spare) {
        snprintf(spare->peer_id, sizeof spare->peer_id, "%s", peer_id);
        spare->rounds = 0;
        s = spare;
    }
    if (++s->rounds >= 2) {
        char text[300];
        snprintf(text, sizeof text, "%s (the second time)", why);
        dl_bans_add_for_run(b, peer_id, text);
    } else {
        dl_bans_add(b, peer_id, why);
    }
}

static struct dl_clip_streak *streak_of(struct dl_bans *b, const char *peer_id) {
    struct dl_clip_streak *spare = NULL;
    for (size_t i = 0; i < b->num_streaks; i++) {
        if (!strcmp(b->streaks[i].peer_id, peer_id)) return &b->streaks[i];
        if (!spare && b->streaks[i].rounds == 0) spare = &b->streaks[i];
    }
    if (!spare && b->num_streaks < sizeof b->streaks / sizeof b->streaks[0]) spare = &b->streaks[b->num_streaks++];
    if (spare) {
        snprintf(spare->peer_id, sizeof spare->peer_id, "%s", peer_id);
        spare->rounds = 0;
    }
    return spare; /* NULL: the table is full of running streaks; this one goes uncounted */
}

size_t dl_bans_count_clipped(struct dl_bans *b, const struct dl_group *g, size_t me, const bool *reduced_from,
                             const bool *clipped) {
    size_t refused = 0;
    if (g->aggregation != DL_AGG_CENTERED_CLIP || !reduced_from || !clipped) return 0;
    for (size_t j = 0; j < g->n; j++) {
        /* Only members whose contribution we saw: no evidence, no change. */
        if (j == me || !reduced_from[j]) continue;
        const char *id = g->members[j].peer_id;
        struct dl_clip_streak *s = clipped[j] ? streak_of(b, id) : NULL;
        if (!clipped[j]) {
            for (size_t i = 0; i < b->num_streaks; i++)
                if (!strcmp(b->streaks[i].peer_id, id)) b->streaks[i].rounds = 0;
            continue;
        }
        if (!s) continue;
        s->rounds++;
        int warn = b->clip_warn_rounds, ban = b->clip_ban_rounds;
        if (ban > 0 && s->rounds >= (uint32_t)ban) {
            char why[160];
            snprintf(why, sizeof why, "its contribution was clipped in %u consecutive rounds (limit %d)", s->rounds,
                     ban);
            dl_bans_add_for_run(b, id, why);
            s->rounds = 0;
            refused++;
        } else if (warn > 0 && s->rounds >= (uint32_t)warn) {
            DL_WARN("collab", "peer %s: its contribution was clipped in %u consecutive rounds (banned at %d)", id,
                    s->rounds, ban);
        }
    }
    return refused;
}
