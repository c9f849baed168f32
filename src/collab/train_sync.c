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

#define META_MAGIC "DLTRAIN1"
#define META_SIZE 24

void dl_collab_hash_hex(const uint8_t hash[32], char out[65]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[hash[i] >> 4];
        out[2 * i + 1] = hex[hash[i] & 15];
    }
    out[64] = 0;
}

struct holder {
    const char *id;
    const uint8_t *hash;
};

/* The most common hash among peers at `epoch` (ours counted as my_hash, not
 * as our record says, which may lag); a tie goes to the hash whose lowest
 * holder has the lowest peer id, so every peer picks the same one. */
static void pick_reference(const struct dl_swarm_view *v, uint64_t epoch, uint64_t my_epoch, const uint8_t *my_hash,
                           const char *my_id, struct dl_swarm_look *look) {
    struct holder *h = dl_calloc(v->num_peers + 1, sizeof *h);
    if (!h) return;
    size_t n = 0;
    for (size_t i = 0; i < v->num_peers; i++) {
        const struct dl_swarm_peer *p = &v->peers[i];
        if (!p->is_self && p->epoch == epoch && p->has_param_hash) h[n++] = (struct holder){p->peer_id, p->param_hash};
    }
    if (my_hash && my_epoch == epoch) h[n++] = (struct holder){my_id, my_hash};
    size_t best = 0;
    const char *best_first = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t count = 0;
        const char *first = h[i].id;
        for (size_t k = 0; k < n; k++) {
            if (memcmp(h[k].hash, h[i].hash, 32)) continue;
            count++;
            if (strcmp(h[k].id, first) < 0) first = h[k].id;
        }
        if (count > best || (count == best && strcmp(first, best_first) < 0)) {
            best = count;
            best_first = first;
            memcpy(look->ref_hash, h[i].hash, 32);
        }
    }
    look->hashes_at_ref = n;
    look->has_ref = best > 0;
    look->ref_holders = best;
    free(h);
}

int dl_swarm_look(dl_net *net, uint64_t epoch, const uint8_t *my_hash, double samples_mine,
                  struct dl_swarm_look *look) {
    memset(look, 0, sizeof *look);
    struct dl_swarm_view v;
    if (dl_net_swarm_view(net, &v)) return -1;
    double now = dl_wall_time();
    look->peers = v.num_peers;
    look->samples_per_second = v.samples_per_second;
    look->collective = samples_mine;
    look->at_epoch = 1;
    for (size_t i = 0; i < v.num_peers; i++) {
        const struct dl_swarm_peer *p = &v.peers[i];
        if (p->is_self) continue;
        if (p->epoch == epoch) {
            look->at_epoch++;
            double elapsed = now - p->time;
            if (!(elapsed > 0)) elapsed = 0;
            if (elapsed > 30) elapsed = 30; /* a silent peer's rate is not a promise */
            look->collective += p->samples_accumulated + elapsed * p->samples_per_second;
        }
        if (p->epoch + 1 == epoch) look->at_previous++;
        if (p->epoch > epoch && p->has_param_hash && !p->epoch_unbacked && p->epoch > look->ahead_epoch)
            look->ahead_epoch = p->epoch;
    }
    look->ref_epoch = look->ahead_epoch ? look->ahead_epoch : epoch;
    pick_reference(&v, look->ref_epoch, epoch, my_hash, dl_net_peer_id(net), look);
    if (look->has_ref && my_hash && look->ref_epoch == epoch && memcmp(my_hash, look->ref_hash, 32)) {
        look->i_disagree = true;
        look->my_holders = 1;
        for (size_t i = 0; i < v.num_peers; i++)
            if (!v.peers[i].is_self && v.peers[i].epoch == epoch && v.peers[i].has_param_hash &&
                !memcmp(v.peers[i].param_hash, my_hash, 32))
                look->my_holders++;
    }
    /* Donors: other holders of the reference, peers that can be dialled first. */
    for (int pass = 0; pass < 2 && look->has_ref; pass++)
        for (size_t i = 0; i < v.num_peers && look->num_donors < DL_SYNC_MAX_DONORS; i++) {
            const struct dl_swarm_peer *p = &v.peers[i];
            if (p->is_self || p->epoch != look->ref_epoch || !p->has_param_hash ||
                memcmp(p->param_hash, look->ref_hash, 32) || p->client_mode != (pass == 1))
                continue;
            snprintf(look->donors[look->num_donors++], DL_PEER_ID_HEX, "%s", p->peer_id);
        }
    dl_swarm_view_free(&v);
    return 0;
}

int dl_train_state_publish(dl_state_donor *donor, const dl_optimizer *opt, const float *params,
                           int64_t samples) {
    size_t bytes = opt->layout.total * sizeof(float);
    struct dl_state_span spans[3] = {{params, bytes}, {opt->exp_avg, bytes}, {opt->exp_avg_sq, bytes}};
    uint8_t meta[META_SIZE];
    memcpy(meta, META_MAGIC, 8); /* NOLINT(bugprone-not-null-terminated-result): 8 magic bytes, no string */
    dl_put_u64(meta + 8, (uint64_t)opt->step);
    dl_put_u64(meta + 16, (uint64_t)samples);
    return dl_state_donor_publish(donor, (uint64_t)opt->step, spans, 3, meta, sizeof meta);
}

int dl_train_state_fetch(dl_net *net, const struct dl_swarm_look *look, dl_optimizer *opt, float *params,
                         struct dl_train_state_meta *meta, double timeout_s) {
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
    struct dl_state_buffer bufs[3] = {{tmp, bytes}, {tmp + n, bytes}, {tmp + 2 * n, bytes}};
    struct dl_state_fetch_result res;
    int rc = dl_state_fetch(net, &cfg, bufs, 3, &res);
    if (rc == 0) {
        if (res.meta_size != META_SIZE || memcmp(res.meta, META_MAGIC, 8) ||
            dl_get_u64(res.meta + 8) != look->ref_epoch || dl_get_u64(res.meta + 16) > ((uint64_t)1 << 62)) {
            rc = dl_fail("the donors' state metadata is not a training state of epoch %llu",
                         (unsigned long long)look->ref_epoch);
        } else {
            meta->epoch = look->ref_epoch;
            meta->samples = (int64_t)dl_get_u64(res.meta + 16);
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
    if (dl_swarm_look(net, 0, NULL, 0, &look)) return -1;
    if (!look.has_ref || look.num_donors == 0 || look.ref_epoch < min_epoch) return 1;
    struct dl_train_state_meta meta;
    double t0 = dl_now();
    if (dl_train_state_fetch(net, &look, opt, params, &meta, timeout_s)) return -1;
    state->epoch = meta.epoch;
    state->samples = meta.samples;
    memcpy(state->param_hash, look.ref_hash, 32);
    state->holders = look.ref_holders;
    state->seconds = dl_now() - t0;
    return 0;
}
