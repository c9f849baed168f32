/* Per-peer clipped streaks: a member whose contribution keeps being clipped
 * round after round is far from the others every time, which honest noise
 * rarely is for long; it is reported, and past a threshold refused for the
 * run. Each aggregator judges from the chunks it reduced itself: the
 * evidence is local, so is the ban (this peer stops grouping with it and
 * refuses its requests; other peers decide on their own evidence). */
#include <string.h>

#include "collab/collab_internal.h"

static struct dl_clip_streak *streak_of(struct dl_collab *c, const char *peer_id) {
    struct dl_clip_streak *spare = NULL;
    for (size_t i = 0; i < c->num_streaks; i++) {
        if (!strcmp(c->streaks[i].peer_id, peer_id)) return &c->streaks[i];
        if (!spare && c->streaks[i].rounds == 0) spare = &c->streaks[i];
    }
    if (!spare && c->num_streaks < sizeof c->streaks / sizeof c->streaks[0]) spare = &c->streaks[c->num_streaks++];
    if (spare) {
        snprintf(spare->peer_id, sizeof spare->peer_id, "%s", peer_id);
        spare->rounds = 0;
    }
    return spare; /* NULL: the table is full of running streaks; this one goes uncounted */
}

void dl_collab_count_clipped(struct dl_collab *c, const struct dl_round *r) {
    if (!r->has_group || r->g.aggregation != DL_AGG_CENTERED_CLIP || !r->reduced_from || !r->clipped) return;
    for (size_t j = 0; j < r->g.n; j++) {
        /* Only members whose contribution we saw: no evidence, no change. */
        if (j == r->me || !r->reduced_from[j]) continue;
        const char *id = r->g.members[j].peer_id;
        struct dl_clip_streak *s = r->clipped[j] ? streak_of(c, id) : NULL;
        if (!r->clipped[j]) {
            for (size_t i = 0; i < c->num_streaks; i++)
                if (!strcmp(c->streaks[i].peer_id, id)) c->streaks[i].rounds = 0;
            continue;
        }
        if (!s) continue;
        s->rounds++;
        int warn = c->cfg.clip_warn_rounds, ban = c->cfg.clip_ban_rounds;
        if (ban > 0 && s->rounds >= (uint32_t)ban) {
            char why[160];
            snprintf(why, sizeof why, "its contribution was clipped in %u consecutive rounds (limit %d)", s->rounds,
                     ban);
            dl_collab_ban_for_run(c, id, why);
            s->rounds = 0;
        } else if (warn > 0 && s->rounds >= (uint32_t)warn) {
            DL_WARN("collab", "peer %s: its contribution was clipped in %u consecutive rounds (banned at %d)", id,
                    s->rounds, ban);
        }
    }
}
