/* The step loop's reading of the swarm view (who is at our epoch, who is
 * ahead, which param hash most peers hold) and its state transfer: the
 * weights and the optimizer moments, with the epoch and the swarm's sample
 * count as metadata. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/bytes.h"
#include "collab/train_sync.h"
#include "dedloc/util.h"

/* The state's metadata (docs/state_transfer.md, "training state"):
 * magic[8] epoch u64 samples u64 flags u8 pad[7] loss_scale f64
 * clean_micro_batches u64. flags bit 0: the donor scales its loss. */
#define META_MAGIC "DLTRAIN2"
#define META_SIZE DL_TRAIN_STATE_META_SIZE
#define META_FLAG_SCALING 1u

void dl_collab_hash_hex(const uint8_t hash[32], char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[hash[i] >> 4];
        out[2 * i + 1] = hex[hash[i] & 15];
    }
    out[64] = 0;
}

static bool in_group(const struct dl_group_evidence *g, const char *peer_id) {
    for (size_t k = 0; k < g->n; k++)
        if (!strcmp(g->members[k], peer_id)) return true;
    return false;
}

void dl_group_evidence_note(struct dl_group_evidence *evidence, uint64_t epoch, const struct dl_avg_result *result) {
    if (!result->members || result->num_members == 0) return;
    evidence->epoch = epoch;
    evidence->n = 0;
    for (size_t i = 0; i < result->num_members && i < DL_AVG_MAX_MEMBERS; i++)
        if (i != result->my_index && result->members[i].role != DL_MEMBER_CLIENT)
            snprintf(evidence->members[evidence->n++], DL_PEER_ID_HEX, "%s", result->members[i].peer_id);
}

/* The reference param hash at `epoch` (docs/collab_training.md, "The epoch
 * and the reference state"): the hash that a strict majority of the peers
 * holding a hash at that epoch hold, ours counted as my_hash (our record may
 * lag); only the members of `group` count when it is given. A tie or a
 * plurality names no reference: a head count that the most identities win
 * is one that two made-up identities can win, and a wrong reference makes
 * honest peers download (and verify against) the liars' weights. With no
 * reference nobody heals or downloads; the swarm goes on until the next
 * epoch's hashes settle it. */
static void pick_reference(const struct dl_swarm_view *v, uint64_t epoch, uint64_t my_epoch, const uint8_t *my_hash,
                           const struct dl_group_evidence *group, struct dl_swarm_look *look) {
    const uint8_t **h = dl_calloc(v->num_peers + 1, sizeof *h);
    if (!h) return;
    size_t n = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        if (!p->is_self && p->epoch == epoch && p->has_param_hash && (!group || in_group(group, p->peer_id)))
            h[n++] = p->param_hash;
    }
    if (my_hash && my_epoch == epoch) h[n++] = my_hash;
    look->hashes_at_ref = n;
    look->has_ref = false;
    for (size_t i = 0; i < n && !look->has_ref; i++) {
        size_t count = 0;
        for (size_t k = 0; k < n; k++) count += !memcmp(h[k], h[i], 32);
        if (2 * count > n) {
            memcpy(look->ref_hash, h[i], 32);
            look->ref_holders = count;
            look->has_ref = true;
        }
    }
    free(h);
}

static int by_epoch_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether the group's other non-client members are a strict majority of
 * the other non-client peers of the view. A group its leader made small (a
 * pair of liars and us) proves nothing about where the swarm is; one that
 * most of the swarm joined does. */
static bool group_is_most(const struct dl_swarm_view *v, const struct dl_group_evidence *g) {
    size_t others = 0, members = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        if (p->is_self || p->client_mode) continue;
        others++;
        members += in_group(g, p->peer_id);
    }
    return 2 * members > others;
}

/* The epoch a strict majority of the group's other members reached, as the
 * view shows them holding a state (a member missing from the view counts
 * as not past `epoch`): the same rule as the swarm view's global epoch,
 * over the members of a group we verified instead of every identity. */
static uint64_t group_backed_epoch(const struct dl_swarm_view *v, const struct dl_group_evidence *g, uint64_t epoch) {
    uint64_t at[DL_AVG_MAX_MEMBERS] = {0};
    if (g->n == 0 || g->n > DL_AVG_MAX_MEMBERS) return epoch;
    for (size_t k = 0; k < g->n; k++) {
        at[k] = epoch;
        for (size_t i = 0; i < v->num_peers; i++)
            if (!v->peers[i].is_self && v->peers[i].has_param_hash && !strcmp(v->peers[i].peer_id, g->members[k]))
                at[k] = v->peers[i].epoch;
    }
    qsort(at, g->n, sizeof *at, by_epoch_desc);
    return at[g->n / 2];
}

void dl_swarm_view_back_epochs(struct dl_swarm_view *v) {
    uint64_t *others = dl_calloc(v->num_peers ? v->num_peers : 1, sizeof *others), own = 0;
    if (!others) return; /* the view's own flags stand */
    size_t n = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        if (p->is_self) own = p->epoch;
        else if (!p->client_mode) others[n++] = p->epoch;
    }
    if (n) {
        qsort(others, n, sizeof *others, by_epoch_desc);
        /* n others and us: the epoch at index (n + 1) / 2 of the others'
         * (from the highest) is reached by a strict majority of n + 1. */
        size_t at = (n + 1) / 2;
        uint64_t backed = at < n && others[at] > own ? others[at] : own;
        for (size_t i = 0; i < v->num_peers; i++)
            if (!v->peers[i].is_self && v->peers[i].epoch <= backed) v->peers[i].epoch_unbacked = false;
        if (backed > v->global_epoch) v->global_epoch = backed;
    }
    free(others);
}

void dl_swarm_look_at(const struct dl_swarm_view *v, uint64_t epoch, const uint8_t *my_hash, double samples_mine,
                      double now, const struct dl_group_evidence *evidence, struct dl_swarm_look *look) {
    memset(look, 0, sizeof *look);
    look->peers = v->num_peers;
    look->samples_per_second = v->samples_per_second;
    look->collective = samples_mine;
    look->at_epoch = 1;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        if (p->is_self) continue;
        if (p->epoch == epoch) {
            look->at_epoch++;
            double elapsed = now - p->time;
            if (!(elapsed > 0)) elapsed = 0;
            if (elapsed > 30) elapsed = 30; /* a silent peer's rate is not a promise */
            look->collective += p->samples_accumulated + elapsed * p->samples_per_second;
        }
        if (p->epoch + 1 == epoch) look->at_previous++;
        /* epoch_unbacked: the view's global epoch is what a majority of the
         * other non-client peers reached (net/swarm.c); a peer above it is
         * followed by nobody, however many of its friends agree. */
        if (p->epoch > epoch && p->has_param_hash && !p->epoch_unbacked && p->epoch > look->ahead_epoch)
            look->ahead_epoch = p->epoch;
    }
    /* A group we were in for this epoch, whose other members mostly went
     * on without us (our round failed): where they are is where the swarm
     * is, even when the view's head count does not say so (most of the
     * others missed the round) or a pair copying their epoch ties its hash. */
    const struct dl_group_evidence *group =
        evidence && evidence->n && evidence->epoch == epoch && group_is_most(v, evidence) ? evidence : NULL;
    uint64_t group_epoch = group ? group_backed_epoch(v, group, epoch) : epoch;
    /* The round of our epoch makes the epoch after it, no further: members
     * that claim more (a pair of liars who joined our group and made it
     * fail) are followed there only by the view's rule. */
    if (group_epoch > epoch + 1) group_epoch = epoch + 1;
    uint64_t view_ahead = look->ahead_epoch;
    bool by_group = group_epoch > epoch && group_epoch >= look->ahead_epoch;
    if (by_group) look->ahead_epoch = group_epoch;
    look->ref_epoch = look->ahead_epoch ? look->ahead_epoch : epoch;
    pick_reference(v, look->ref_epoch, epoch, my_hash, NULL, look);
    if (by_group && !look->has_ref) pick_reference(v, look->ref_epoch, epoch, my_hash, group, look);
    if (by_group && !look->has_ref && view_ahead != group_epoch) {
        /* Nobody holds the state of the group's epoch (its members went on
         * past it): the group proves nothing we could download. */
        look->ahead_epoch = view_ahead;
        look->ref_epoch = view_ahead ? view_ahead : epoch;
        pick_reference(v, look->ref_epoch, epoch, my_hash, NULL, look);
    }
    if (look->has_ref && my_hash && look->ref_epoch == epoch && memcmp(my_hash, look->ref_hash, 32)) {
        look->i_disagree = true;
        look->my_holders = 1;
        for (size_t i = 0; i < v->num_peers; i++)
            if (!v->peers[i].is_self && v->peers[i].epoch == epoch && v->peers[i].has_param_hash &&
                !memcmp(v->peers[i].param_hash, my_hash, 32))
                look->my_holders++;
    }
    /* Donors: other holders of the reference, peers that can be dialled first. */
    for (int pass = 0; pass < 2 && look->has_ref; pass++)
        for (size_t i = 0; i < v->num_peers && look->num_donors < DL_SYNC_MAX_DONORS; i++) {
            const struct dl_swarm_peer *p = &v->peers[i];
            if (p->is_self || p->epoch != look->ref_epoch || !p->has_param_hash ||
                memcmp(p->param_hash, look->ref_hash, 32) || p->client_mode != (pass == 1))
                continue;
            snprintf(look->donors[look->num_donors++], DL_PEER_ID_HEX, "%s", p->peer_id);
        }
}

int dl_swarm_look(dl_net *net, dl_collab *collab, uint64_t epoch, const uint8_t *my_hash, double samples_mine,
                  const struct dl_group_evidence *evidence, struct dl_swarm_look *look) {
    memset(look, 0, sizeof *look);
    struct dl_swarm_view v;
    if (dl_net_swarm_view(net, &v)) return -1;
    size_t before = v.num_peers, refused = dl_collab_drop_gone(collab, &v);
    /* Peers found gone or refused no longer vote on the epoch either. */
    if (v.num_peers < before) dl_swarm_view_back_epochs(&v);
    dl_swarm_look_at(&v, epoch, my_hash, samples_mine, dl_wall_time(), evidence, look);
    look->refused = refused;
    dl_swarm_view_free(&v);
    return 0;
}

void dl_train_state_meta_encode(const struct dl_train_state_meta *meta, uint8_t out[DL_TRAIN_STATE_META_SIZE]) {
    memset(out, 0, DL_TRAIN_STATE_META_SIZE);
    memcpy(out, META_MAGIC, 8); /* NOLINT(bugprone-not-null-terminated-result): 8 magic bytes, no string */
    dl_put_u64(out + 8, meta->epoch);
    dl_put_u64(out + 16, (uint64_t)meta->samples);
    out[24] = meta->loss_scaling ? META_FLAG_SCALING : 0;
    dl_put_f64(out + 32, (double)meta->loss_scale);
    dl_put_u64(out + 40, (uint64_t)meta->clean_micro_batches);
}

/* A loss scale is a power of two within the normal floats (loss_scale.c keeps it so). */
static bool valid_scale(double s) {
    if (!(s >= 0x1p-126 && s <= 0x1p127)) return false;
    int e;
    return frexp(s, &e) == 0.5;
}

int dl_train_state_meta_decode(const uint8_t *data, size_t size, struct dl_train_state_meta *meta) {
    memset(meta, 0, sizeof *meta);
    if (size != META_SIZE || memcmp(data, META_MAGIC, 8))
        return dl_fail("the state's metadata is not a training state of this version (%zu bytes)", size);
    meta->epoch = dl_get_u64(data + 8);
    uint64_t samples = dl_get_u64(data + 16), clean = dl_get_u64(data + 40);
    double scale = dl_get_f64(data + 32);
    if (samples > ((uint64_t)1 << 62)) return dl_fail("the state's sample count is out of range");
    if (data[24] & ~META_FLAG_SCALING) return dl_fail("the state's metadata has unknown flags 0x%02x", data[24]);
    if (!valid_scale(scale)) return dl_fail("the state's loss scale %g is not a power of two in range", scale);
    if (clean > ((uint64_t)1 << 62)) return dl_fail("the state's loss-scale counter is out of range");
    meta->samples = (int64_t)samples;
    meta->loss_scaling = data[24] & META_FLAG_SCALING;
    meta->loss_scale = (float)scale;
    meta->clean_micro_batches = (int64_t)clean;
    return 0;
}

void dl_train_state_meta_adopt_scale(const struct dl_train_state_meta *meta, dl_loss_scale *ls) {
    /* A peer without loss scaling (fp32, bf16) keeps its fixed scale of 1, and
     * a scaling peer learns nothing from a donor that does not scale. */
    if (!ls->enabled || !meta->loss_scaling) return;
    ls->scale = meta->loss_scale;
    ls->clean_steps = meta->clean_micro_batches;
}

int dl_train_state_publish(dl_state_donor *donor, const dl_optimizer *opt, const float *params,
                           int64_t samples, const dl_loss_scale *ls) {
    size_t bytes = opt->layout.total * sizeof(float);
    struct dl_state_span spans[3] = {{params, bytes}, {opt->exp_avg, bytes}, {opt->exp_avg_sq, bytes}};
    struct dl_train_state_meta m = {.epoch = (uint64_t)opt->step, .samples = samples, .loss_scaling = ls->enabled,
                                    .loss_scale = ls->scale, .clean_micro_batches = ls->clean_steps};
    uint8_t meta[META_SIZE];
    dl_train_state_meta_encode(&m, meta);
    return dl_state_donor_publish(donor, (uint64_t)opt->step, spans, 3, meta, sizeof meta);
}

int dl_train_state_fetch(dl_net *net, const struct dl_swarm_look *look, dl_optimizer *opt, float *params,
                         struct dl_train_state_meta *meta, double timeout_s, const volatile sig_atomic_t *stop) {
    if (!look->has_ref || look->num_donors == 0) return dl_fail("no peer holds a state to download");
    size_t n = opt->layout.total, bytes = n * sizeof(float);
    float *tmp = dl_malloc(dl_mul_size(bytes, 3));
    if (!tmp) return -1;
    const char *donors[DL_SYNC_MAX_DONORS];
    for (size_t i = 0; i < look->num_donors; i++) donors[i] = look->donors[i];
    struct dl_state_fetch_config cfg;
    dl_state_fetch_config_default(&cfg);
    cfg.epoch = look->ref_epoch;
    cfg.donors = donors;
    cfg.num_donors = look->num_donors;
    cfg.expected_param_hash = look->ref_hash;
    cfg.timeout_s = timeout_s;
    cfg.request_timeout_s = fmin(cfg.request_timeout_s, timeout_s / 2);
    cfg.max_meta = META_SIZE;
    cfg.stop = stop;
    struct dl_state_buffer bufs[3] = {{tmp, bytes}, {tmp + n, bytes}, {tmp + 2 * n, bytes}};
    struct dl_state_fetch_result res;
    int rc = dl_state_fetch(net, &cfg, bufs, 3, &res);
    if (rc == 0) {
        if (dl_train_state_meta_decode(res.meta, res.meta_size, meta)) {
            rc = dl_fail_context("the donors' state of epoch %llu", (unsigned long long)look->ref_epoch);
        } else if (meta->epoch != look->ref_epoch) {
            rc = dl_fail("the donors' state metadata says epoch %llu, not %llu", (unsigned long long)meta->epoch,
                         (unsigned long long)look->ref_epoch);
        } else {
            memcpy(params, tmp, bytes);
            memcpy(opt->exp_avg, tmp + n, bytes);
            memcpy(opt->exp_avg_sq, tmp + 2 * n, bytes);
            opt->step = (int64_t)look->ref_epoch;
            DL_INFO("collab", "downloaded the state of epoch %llu from %zu donor(s) in %.2f s",
                    (unsigned long long)look->ref_epoch, look->num_donors, res.seconds);
        }
    }
    dl_state_fetch_result_free(&res);
    free(tmp);
    return rc;
}

int dl_collab_fetch_swarm_state(dl_net *net, uint64_t min_epoch, double timeout_s, dl_optimizer *opt, float *params,
                                struct dl_collab_swarm_state *state) {
    memset(state, 0, sizeof *state);
    struct dl_swarm_look look;
    /* At epoch 0 without a state of our own: the reference is the newest
     * epoch any peer signed a hash for, as for a peer that just joined. */
    if (dl_swarm_look(net, NULL, 0, NULL, 0, NULL, &look)) return -1;
    if (!look.has_ref || look.num_donors == 0 || look.ref_epoch < min_epoch) return 1;
    struct dl_train_state_meta meta;
    double t0 = dl_now();
    if (dl_train_state_fetch(net, &look, opt, params, &meta, timeout_s, NULL)) return -1;
    state->epoch = meta.epoch;
    state->samples = meta.samples;
    memcpy(state->param_hash, look.ref_hash, 32);
    state->holders = look.ref_holders;
    state->seconds = dl_now() - t0;
    return 0;
}
