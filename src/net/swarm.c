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
    memset(sw, 0, sizeof *sw);
}

struct dl_swarm_entry *dl_swarm_find(struct dl_swarm *sw, const uint8_t pk[DL_WIRE_PK]) {
    for (size_t i = 0; i < sw->count; i++)
        if (!memcmp(sw->entries[i].rec.pk, pk, DL_WIRE_PK)) return &sw->entries[i];
    return NULL;
}

int dl_swarm_apply(struct dl_swarm *sw, const struct dl_record *rec, const uint8_t *blob,
                   size_t blob_size, double now) {
    struct dl_swarm_entry *e = dl_swarm_find(sw, rec->pk);
    if (e && rec->seq <= e->rec.seq) return 0;
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
    }
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
            free(e->blob);
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

int dl_swarm_compute(const struct dl_swarm *sw, double now_wall, double target_batch,
                     const uint8_t *self_pk, struct dl_swarm_view *view) {
    memset(view, 0, sizeof *view);
    view->peers = dl_calloc(sw->count ? sw->count : 1, sizeof *view->peers);
    if (!view->peers) return -1;
    /* Global epoch: client-mode peers follow, they never lead. */
    for (size_t i = 0; i < sw->count; i++) {
        const struct dl_record *r = &sw->entries[i].rec;
        if (!r->goodbye && !r->client_mode && r->epoch > view->global_epoch) view->global_epoch = r->epoch;
    }
    for (size_t i = 0; i < sw->count; i++) {
        const struct dl_record *r = &sw->entries[i].rec;
        if (r->goodbye) continue;
        view->samples_per_second += r->samples_per_second;
        if (r->epoch == view->global_epoch) {
            double elapsed = now_wall - r->time;
            if (elapsed < 0) elapsed = 0;
            view->collective_samples += r->samples + elapsed * r->samples_per_second;
        }
        struct dl_swarm_peer *p = &view->peers[view->num_peers++];
        memcpy(p->peer_id, r->peer_id, sizeof p->peer_id);
        memcpy(p->address, r->address, sizeof p->address);
        p->epoch = r->epoch;
        p->samples_accumulated = r->samples;
        p->samples_per_second = r->samples_per_second;
        p->time = r->time;
        p->bandwidth_mbit = r->bandwidth_mbit;
        p->has_param_hash = r->has_param_hash;
        memcpy(p->param_hash, r->param_hash, sizeof p->param_hash);
        p->client_mode = r->client_mode;
        p->is_self = self_pk && !memcmp(r->pk, self_pk, DL_WIRE_PK);
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
