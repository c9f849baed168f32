/* The table of progress records and the DeDLOC swarm view computed from it. */
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/swarm.h"

void dl_swarm_init(struct dl_swarm *sw, size_t max_entries) {
    memset(sw, 0, sizeof *sw);
    sw->max_entries = max_entries;
}

void dl_swarm_free(struct dl_swarm *sw) {
    for (size_t i = 0; i < sw->count; i++) free(sw->entries[i].blob);
    free(sw->entries);
    free(sw->tombs);
    memset(sw, 0, sizeof *sw);
}

struct dl_swarm_entry *dl_swarm_find(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK]) {
    for (size_t i = 0; i < sw->count; i++)
        if (!memcmp(sw->entries[i].rec.pk, pk, DL_WIRE_PK)) return &sw->entries[i];
    return NULL;
}

double dl_swarm_skew(double expiry_s) { return expiry_s < DL_SWARM_MAX_SKEW_S ? expiry_s : DL_SWARM_MAX_SKEW_S; }

static struct dl_swarm_tombstone *find_tomb(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK], double now) {
    for (size_t i = 0; i < sw->num_tombs; i++)
        if (sw->tombs[i].until > now && !memcmp(sw->tombs[i].pk, pk, DL_WIRE_PK)) return &sw->tombs[i];
    return NULL;
}

/* A full table gives up the tombstone that ends first: it is the one
 * closest to being useless anyway (its records are about to be too old). */
static void add_tomb(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK], uint64_t seq, double until) {
    if (!sw->tombs) {
        sw->tombs = dl_calloc(DL_SWARM_TOMBSTONES, sizeof *sw->tombs);
        if (!sw->tombs) return; /* a lost tombstone only weakens replay protection until the time check */
    }
    struct dl_swarm_tombstone *slot = NULL;
    for (size_t i = 0; i < sw->num_tombs && !slot; i++)
        if (!memcmp(sw->tombs[i].pk, pk, DL_WIRE_PK)) slot = &sw->tombs[i];
    if (!slot && sw->num_tombs < DL_SWARM_TOMBSTONES) slot = &sw->tombs[sw->num_tombs++];
    for (size_t i = 0; i < sw->num_tombs && !slot; i++)
        if (!slot || sw->tombs[i].until < slot->until) slot = &sw->tombs[i];
    if (!slot) return;
    if (!memcmp(slot->pk, pk, DL_WIRE_PK) && slot->seq > seq) seq = slot->seq;
    memcpy(slot->pk, pk, DL_WIRE_PK);
    slot->seq = seq;
    slot->until = until;
}

int dl_swarm_precheck(struct dl_swarm *sw, const struct dl_record *r, double now, double now_wall, double expiry_s) {
    struct dl_swarm_entry *e = dl_swarm_find(sw, r->pk);
    if (e && r->seq <= e->rec.seq) return DL_SWARM_OLD;
    const struct dl_swarm_tombstone *t = find_tomb(sw, r->pk, now);
    if (t && r->seq <= t->seq) return DL_SWARM_OLD;
    double skew = dl_swarm_skew(expiry_s);
    if (r->time > now_wall + skew) {
        dl_fail("record of %.3f s in our future (clocks may differ by %.0f s)", r->time - now_wall, skew);
        return DL_SWARM_IMPLAUSIBLE;
    }
    if (r->time < now_wall - expiry_s - skew) {
        dl_fail("record %.0f s old: expired (%.0f s) even with %.0f s of clock skew", now_wall - r->time, expiry_s, skew);
        return DL_SWARM_IMPLAUSIBLE;
    }
    if (e) {
        double tokens = e->rate_tokens + (now - e->rate_last) * DL_SWARM_OWNER_RATE;
        if (tokens < 1) return DL_SWARM_TOO_FAST;
    }
    return DL_SWARM_NEWS;
}

void dl_swarm_charge(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK], double now) {
    struct dl_swarm_entry *e = dl_swarm_find(sw, pk);
    if (!e) return;
    e->rate_tokens += (now - e->rate_last) * DL_SWARM_OWNER_RATE;
    if (e->rate_tokens > DL_SWARM_OWNER_BURST) e->rate_tokens = DL_SWARM_OWNER_BURST;
    e->rate_last = now;
    e->rate_tokens -= 1;
}

int dl_swarm_apply(struct dl_swarm *sw, const struct dl_record *rec, const uint8_t *blob,
                   size_t blob_size, double now) {
    struct dl_swarm_entry *e = dl_swarm_find(sw, rec->pk);
    if (e && rec->seq <= e->rec.seq) return 0;
    const struct dl_swarm_tombstone *t = find_tomb(sw, rec->pk, now);
    if (t && rec->seq <= t->seq) return 0;
    uint8_t *copy = dl_malloc(blob_size);
    if (!copy) return -1;
    memcpy(copy, blob, blob_size);
    if (!e) {
        if (sw->count >= sw->max_entries) {
            free(copy);
            return dl_fail("swarm table full (%zu peers)", sw->max_entries);
        }
        if (sw->count == sw->cap) {
            size_t cap = sw->cap ? 2 * sw->cap : 16;
            struct dl_swarm_entry *grown = dl_realloc(sw->entries, cap * sizeof *grown);
            if (!grown) {
                free(copy);
                return -1;
            }
            sw->entries = grown;
            sw->cap = cap;
        }
        e = &sw->entries[sw->count++];
        memset(e, 0, sizeof *e);
        e->rate_tokens = DL_SWARM_OWNER_BURST;
        e->rate_last = now;
        e->epoch_since = rec->time;
    }
    if (rec->epoch != e->rec.epoch) e->epoch_since = rec->time;
    free(e->blob);
    e->rec = *rec;
    e->blob = copy;
    e->blob_size = blob_size;
    e->updated_at = now;
    return 1;
}

size_t dl_swarm_expire(struct dl_swarm *sw, double now, double expiry_s, const uint8_t *keep_pk) {
    size_t removed = 0;
    for (size_t i = 0; i < sw->count;) {
        struct dl_swarm_entry *e = &sw->entries[i];
        if (now - e->updated_at > expiry_s && !(keep_pk && !memcmp(e->rec.pk, keep_pk, DL_WIRE_PK))) {
            add_tomb(sw, e->rec.pk, e->rec.seq, now + 2 * (expiry_s + dl_swarm_skew(expiry_s)));
            /* Each entry owns its own blob copy: the entry moved into slot i
             * next has another one, so this is not freed twice. */
            free(e->blob); /* NOLINT(clang-analyzer-unix.Malloc) */
            sw->entries[i] = sw->entries[--sw->count];
            removed++;
        } else {
            i++;
        }
    }
    return removed;
}

static int by_peer_id(const void *a, const void *b) {
    return strcmp(((const struct dl_swarm_peer *)a)->peer_id, ((const struct dl_swarm_peer *)b)->peer_id);
}

static int by_epoch_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether a record's owner may weigh in on the swarm's state at all: a
 * monitor-role token watches the run, it does not train (docs/protocol.md,
 * "Bounded claims, leaders and roles"). Without this a monitor's record at
 * a far epoch or with huge samples would count like a trainer's. */
static bool observer(const struct dl_record *r) { return r->role == DL_ROLE_MONITOR; }

/* The global epoch (docs/protocol.md, "The swarm view"): our own epoch,
 * raised to the highest epoch that a strict majority of the voters have
 * reached (at or above it). The voters are the other non-client peers, and
 * we ourselves when our state comes from a round we verified (sw->vouched:
 * we know where we are, and we are not past our epoch). One record, however
 * high its epoch, moves nothing while another peer disagrees; a pair of
 * colluding identities moves nothing beside two honest peers (2 of 4
 * voters) where a count of the others only (2 of 3) let it. A newcomer, a
 * peer that downloaded or one without a state, does not vote: it follows a
 * majority of the others, who are all it knows. */
static uint64_t quorum_epoch(const struct dl_swarm *sw, const uint8_t *self_pk, uint64_t *scratch) {
    uint64_t own = 0;
    bool votes = false;
    size_t n = 0;
    for (size_t i = 0; i < sw->count; i++) {
        const struct dl_record *r = &sw->entries[i].rec;
        if (r->goodbye || r->client_mode || observer(r)) continue;
        if (self_pk && !memcmp(r->pk, self_pk, DL_WIRE_PK)) {
            own = r->epoch;
            votes = sw->vouched && r->has_param_hash && r->epoch <= sw->vouched_epoch;
        } else {
            scratch[n++] = r->epoch;
        }
    }
    if (!n) return own;
    qsort(scratch, n, sizeof *scratch, by_epoch_desc);
    /* With m voters, the epoch at index m / 2 of the others' (sorted from
     * the highest) is reached by m / 2 + 1 of them: a strict majority. Our
     * own vote is for our epoch, never above it. */
    size_t voters = n + (votes ? 1 : 0), at = voters / 2;
    if (at >= n) return own;
    uint64_t backed = scratch[at];
    return backed > own ? backed : own;
}

int dl_swarm_compute(const struct dl_swarm *sw, double now_wall, double target_batch,
                     const uint8_t *self_pk, struct dl_swarm_view *view) {
    memset(view, 0, sizeof *view);
    view->peers = dl_calloc(sw->count ? sw->count : 1, sizeof *view->peers);
    uint64_t *scratch = dl_calloc(sw->count ? sw->count : 1, sizeof *scratch);
    if (!view->peers || !scratch) {
        free(view->peers);
        free(scratch);
        view->peers = NULL;
        return -1;
    }
    /* Global epoch: client-mode peers follow, they never lead. */
    view->global_epoch = quorum_epoch(sw, self_pk, scratch);
    free(scratch);
    for (size_t i = 0; i < sw->count; i++) {
        const struct dl_swarm_entry *e = &sw->entries[i];
        const struct dl_record *r = &e->rec;
        if (r->goodbye) continue;
        if (observer(r)) {
            view->num_observers++;
            continue;
        }
        bool self = self_pk && !memcmp(r->pk, self_pk, DL_WIRE_PK);
        /* Rates and samples count for what a device can do: at most
         * DL_SWARM_MAX_SPS, for the time since the owner reached the epoch
         * (its clock is within the skew of ours: the slack). A faster claim
         * is kept, not refused (a synthetic test swarm may be faster), but
         * counts only that much. */
        double sps = self || r->samples_per_second <= DL_SWARM_MAX_SPS ? r->samples_per_second : DL_SWARM_MAX_SPS;
        double since = now_wall - e->epoch_since;
        if (since < 0) since = 0;
        double plausible = DL_SWARM_MAX_SPS * (since + DL_SWARM_MAX_SKEW_S);
        double samples = self || r->samples <= plausible ? r->samples : plausible;
        view->samples_per_second += sps;
        if (r->epoch == view->global_epoch) {
            double elapsed = now_wall - r->time;
            if (elapsed < 0) elapsed = 0;
            view->collective_samples += samples + elapsed * sps;
        }
        struct dl_swarm_peer *p = &view->peers[view->num_peers++];
        memcpy(p->peer_id, r->peer_id, sizeof p->peer_id);
        memcpy(p->address, r->address, sizeof p->address);
        p->epoch = r->epoch;
        p->samples_accumulated = samples;
        p->samples_per_second = sps;
        p->time = r->time;
        p->bandwidth_mbit = r->bandwidth_mbit;
        p->has_param_hash = r->has_param_hash;
        memcpy(p->param_hash, r->param_hash, sizeof p->param_hash);
        p->client_mode = r->client_mode;
        p->is_self = self;
        p->epoch_unbacked = !self && r->epoch > view->global_epoch;
    }
    qsort(view->peers, view->num_peers, sizeof *view->peers, by_peer_id);
    double remaining = target_batch - view->collective_samples;
    if (remaining <= 0) view->eta_s = 0;
    else if (view->samples_per_second > 0) view->eta_s = remaining / view->samples_per_second;
    else view->eta_s = -1;
    return 0;
}

double dl_swarm_refresh_period(double eta_s, size_t num_peers, double min_s, double max_s) {
    if (eta_s < 0) return max_s;
    /* Peers that may join before the next epoch shorten it; plan for a
     * fifth more peers or three more, whichever is larger. */
    double n = num_peers ? (double)num_peers : 1.0;
    double expected = n + 3 > n * 1.2 ? n + 3 : n * 1.2;
    double t = eta_s * n / expected;
    if (t < min_s) t = min_s;
    if (t > max_s) t = max_s;
    return t;
}

void dl_swarm_view_free(struct dl_swarm_view *view) {
    if (!view) return;
    free(view->peers);
    view->peers = NULL;
    view->num_peers = 0;
}
