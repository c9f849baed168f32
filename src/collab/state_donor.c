/* State transfer, donor side: snapshots copied at publication, answered by
 * serve threads so the network thread only queues requests (an answer's
 * compression attempt and copy stay off it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collab/state_transfer.h"
#include "dedloc/util.h"

struct snapshot {
    uint64_t epoch;
    uint8_t *data; /* every buffer, concatenated */
    uint64_t buffer_start[DL_STATE_MAX_BUFFERS];
    struct dl_state_chunk *map;
    uint64_t num_chunks;
    uint8_t *desc;
    size_t desc_size;
    int refs; /* 1 while listed, +1 per answer reading it */
};

enum job_kind { JOB_INFO, JOB_CHUNK };

struct job {
    enum job_kind kind;
    uint64_t token, epoch, chunk;
    char peer_id[DL_PEER_ID_HEX];
};

struct dl_state_donor {
    dl_net *net;
    struct dl_state_donor_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct snapshot **snaps; /* newest publication first */
    size_t num_snaps;
    struct job *queue;       /* ring of cfg.max_queued */
    size_t q_head, q_len;
    bool stopping;
    pthread_t *threads;
    size_t num_threads;
    struct dl_state_donor_stats stats;
    unsigned corrupt_next;
    bool lie;                /* test hook: describe lie_param_hash, serve what was published */
    uint8_t lie_param_hash[32];
};

void dl_state_donor_config_default(struct dl_state_donor_config *c) {
    c->chunk_size = DL_STATE_DEFAULT_CHUNK;
    c->keep_snapshots = 2;
    c->serve_threads = 2;
    c->max_queued = 256;
    c->max_queued_per_peer = 16;
}

/* Jobs of peer_id waiting in the queue (lock held). */
static size_t queued_of(const dl_state_donor *d, const char *peer_id) {
    size_t n = 0;
    for (size_t i = 0; i < d->q_len; i++)
        n += !strcmp(d->queue[(d->q_head + i) % d->cfg.max_queued].peer_id, peer_id);
    return n;
}

static void snapshot_free(struct snapshot *s) {
    if (!s) return;
    free(s->data);
    free(s->map);
    free(s->desc);
    free(s);
}

/* Drops one reference; call with the lock held. Returns the snapshot to free
 * (outside the lock) or NULL. */
static struct snapshot *snapshot_release(struct snapshot *s) { return --s->refs == 0 ? s : NULL; }

static struct snapshot *find_snapshot(dl_state_donor *d, uint64_t epoch) {
    for (size_t i = 0; i < d->num_snaps; i++)
        if (d->snaps[i]->epoch == epoch) return d->snaps[i];
    return NULL;
}

static void respond_error(dl_state_donor *d, uint64_t token, const char *msg) {
    dl_net_respond(d->net, token, DL_NET_REMOTE_ERROR, msg, strlen(msg));
}

static void on_request(void *user, dl_net *net, const struct dl_net_incoming *in) {
    dl_state_donor *d = user;
    struct job job = {0};
    job.token = in->token;
    if (!strcmp(in->method, DL_STATE_INFO_METHOD) && in->size == 8) {
        job.kind = JOB_INFO;
        job.epoch = dl_state_get_u64(in->payload);
    } else if (!strcmp(in->method, DL_STATE_CHUNK_METHOD) && in->size == 16) {
        job.kind = JOB_CHUNK;
        job.epoch = dl_state_get_u64(in->payload);
        job.chunk = dl_state_get_u64(in->payload + 8);
    } else {
        pthread_mutex_lock(&d->lock);
        d->stats.refused++;
        pthread_mutex_unlock(&d->lock);
        respond_error(d, in->token, "malformed state request");
        return;
    }
    snprintf(job.peer_id, sizeof job.peer_id, "%s", in->peer_id);
    pthread_mutex_lock(&d->lock);
    /* Fair shares: one peer's flood of requests leaves room for the others. */
    bool mine_full = queued_of(d, in->peer_id) >= d->cfg.max_queued_per_peer;
    bool queued = !d->stopping && d->q_len < d->cfg.max_queued && !mine_full;
    if (queued) {
        d->queue[(d->q_head + d->q_len++) % d->cfg.max_queued] = job;
        pthread_cond_signal(&d->wake);
    } else {
        d->stats.refused++;
    }
    pthread_mutex_unlock(&d->lock);
    if (!queued)
        respond_error(d, in->token, mine_full ? "state donor busy with your earlier requests, ask another donor"
                                              : "state donor busy, ask another donor");
}

static void serve(dl_state_donor *d, const struct job *job) {
    pthread_mutex_lock(&d->lock);
    struct snapshot *s = find_snapshot(d, job->epoch);
    if (!s || (job->kind == JOB_CHUNK && job->chunk >= s->num_chunks)) {
        char msg[256];
        if (s) {
            snprintf(msg, sizeof msg, "chunk %llu out of range (%llu chunks)", (unsigned long long)job->chunk,
                     (unsigned long long)s->num_chunks);
        } else {
            size_t n = (size_t)snprintf(msg, sizeof msg, "epoch %llu not served; serving:",
                                        (unsigned long long)job->epoch);
            for (size_t i = 0; i < d->num_snaps && n < sizeof msg; i++)
                n += (size_t)snprintf(msg + n, sizeof msg - n, " %llu", (unsigned long long)d->snaps[i]->epoch);
            if (!d->num_snaps && n < sizeof msg) snprintf(msg + n, sizeof msg - n, " nothing yet");
        }
        d->stats.refused++;
        pthread_mutex_unlock(&d->lock);
        respond_error(d, job->token, msg);
        return;
    }
    s->refs++;
    bool corrupt = job->kind == JOB_CHUNK && d->corrupt_next > 0;
    if (corrupt) d->corrupt_next--;
    pthread_mutex_unlock(&d->lock);

    const uint8_t *payload;
    size_t size;
    uint8_t *bad = NULL;
    if (job->kind == JOB_INFO) {
        payload = s->desc;
        size = s->desc_size;
    } else {
        const struct dl_state_chunk *c = &s->map[job->chunk];
        payload = s->data + s->buffer_start[c->buffer] + c->offset;
        size = c->len;
        if (corrupt && (bad = dl_malloc(size))) {
            memcpy(bad, payload, size);
            bad[size / 2] ^= 0x40;
            payload = bad;
        }
    }
    /* dl_net_respond copies the payload before it returns. Chunks of float
     * tensors go raw: deflate never saves an eighth on them and cost most of
     * the transfer's CPU. */
    if (dl_net_respond_ex(d->net, job->token, DL_NET_OK, payload, size, job->kind == JOB_CHUNK ? DL_NET_RAW : 0))
        DL_WARN("collab", "cannot answer a state request: %s", dl_error());
    free(bad);
    pthread_mutex_lock(&d->lock);
    if (job->kind == JOB_INFO) {
        d->stats.info_served++;
    } else {
        d->stats.chunks_served++;
        d->stats.bytes_served += size;
    }
    struct snapshot *dead = snapshot_release(s);
    pthread_mutex_unlock(&d->lock);
    snapshot_free(dead);
}

static void *serve_thread(void *arg) {
    dl_state_donor *d = arg;
    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (!d->stopping && d->q_len == 0) pthread_cond_wait(&d->wake, &d->lock);
        if (d->q_len == 0) break; /* stopping, nothing left */
        struct job job = d->queue[d->q_head];
        d->q_head = (d->q_head + 1) % d->cfg.max_queued;
        d->q_len--;
        pthread_mutex_unlock(&d->lock);
        serve(d, &job);
        pthread_mutex_lock(&d->lock);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* Waits until the network thread has finished whatever it was doing: a
 * request to a peer that is not connected is answered (disconnected) on that
 * thread, after any handler call that was running. Used after removing the
 * handlers, so that no handler call still holds a pointer to the donor. */
static void net_thread_barrier(dl_net *net) {
    static const char nobody[] = "00000000000000000000000000000000";
    uint8_t *answer = NULL;
    size_t size;
    dl_net_request_sync(net, nobody, "state.barrier", NULL, 0, 60, &answer, &size);
    free(answer);
}

int dl_state_donor_start(dl_net *net, const struct dl_state_donor_config *config, dl_state_donor **out) {
    *out = NULL;
    struct dl_state_donor_config cfg;
    dl_state_donor_config_default(&cfg);
    if (config) cfg = *config;
    if (!cfg.max_queued_per_peer) cfg.max_queued_per_peer = 16;
    if (cfg.chunk_size < DL_STATE_MIN_CHUNK || cfg.chunk_size > DL_STATE_MAX_CHUNK)
        return dl_fail("state donor: chunk size %zu outside %zu .. %zu", cfg.chunk_size, DL_STATE_MIN_CHUNK,
                       DL_STATE_MAX_CHUNK);
    if (cfg.keep_snapshots < 1 || cfg.keep_snapshots > 16 || cfg.serve_threads < 1 || cfg.serve_threads > 16 ||
        cfg.max_queued < 1 || cfg.max_queued > 65536)
        return dl_fail("state donor: keep_snapshots and serve_threads must be 1 .. 16, max_queued 1 .. 65536");
    dl_state_donor *d = dl_calloc(1, sizeof *d);
    if (!d) return -1;
    d->net = net;
    d->cfg = cfg;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    d->queue = dl_calloc(cfg.max_queued, sizeof *d->queue);
    d->snaps = dl_calloc(cfg.keep_snapshots + 1, sizeof *d->snaps);
    d->threads = dl_calloc(cfg.serve_threads, sizeof *d->threads);
    if (!d->queue || !d->snaps || !d->threads) {
        dl_state_donor_stop(d);
        return -1;
    }
    for (size_t i = 0; i < cfg.serve_threads; i++) {
        if (pthread_create(&d->threads[i], NULL, serve_thread, d)) {
            dl_state_donor_stop(d);
            return dl_fail("state donor: cannot start a serve thread");
        }
        d->num_threads++;
    }
    if (dl_net_set_handler(net, DL_STATE_INFO_METHOD, on_request, d) ||
        dl_net_set_handler(net, DL_STATE_CHUNK_METHOD, on_request, d)) {
        dl_fail_context("state donor");
        dl_state_donor_stop(d);
        return -1;
    }
    *out = d;
    return 0;
}

int dl_state_donor_publish(dl_state_donor *d, uint64_t epoch, const struct dl_state_span *buffers,
                           size_t num_buffers, const void *meta, size_t meta_size) {
    if (num_buffers < 1 || num_buffers > DL_STATE_MAX_BUFFERS)
        return dl_fail("state publish: %zu buffers (1 .. %d)", num_buffers, DL_STATE_MAX_BUFFERS);
    if (buffers[0].size % 4) return dl_fail("state publish: buffer 0 must be the fp32 parameters (size a multiple of 4)");
    if (meta_size > DL_STATE_MAX_META || (meta_size && !meta))
        return dl_fail("state publish: metadata of %zu bytes (at most %zu)", meta_size, DL_STATE_MAX_META);
    struct dl_state_desc desc = {0};
    desc.epoch = epoch;
    desc.chunk_size = d->cfg.chunk_size;
    desc.num_buffers = (uint32_t)num_buffers;
    desc.meta_size = (uint32_t)meta_size;
    uint64_t total = 0;
    for (size_t b = 0; b < num_buffers; b++) {
        if (buffers[b].size && !buffers[b].data) return dl_fail("state publish: buffer %zu has no data", b);
        desc.sizes[b] = buffers[b].size;
        total += buffers[b].size;
    }
    if (dl_state_count_chunks(desc.sizes, desc.num_buffers, desc.chunk_size, &desc.num_chunks))
        return dl_fail_context("state publish");
    struct snapshot *s = dl_calloc(1, sizeof *s);
    uint64_t *hashes = s ? dl_calloc(desc.num_chunks ? desc.num_chunks : 1, sizeof *hashes) : NULL;
    if (s) {
        s->data = dl_malloc(total ? total : 1);
        s->map = dl_state_chunk_map(desc.sizes, desc.num_buffers, desc.chunk_size, desc.num_chunks);
    }
    if (!s || !hashes || !s->data || !s->map) {
        free(hashes);
        snapshot_free(s);
        return dl_fail_context("state publish: snapshot of %llu bytes", (unsigned long long)total);
    }
    s->epoch = epoch;
    s->num_chunks = desc.num_chunks;
    uint64_t at = 0;
    for (size_t b = 0; b < num_buffers; b++) {
        s->buffer_start[b] = at;
        if (buffers[b].size) memcpy(s->data + at, buffers[b].data, buffers[b].size);
        at += buffers[b].size;
    }
    for (uint64_t k = 0; k < desc.num_chunks; k++)
        hashes[k] = dl_hash64(s->data + s->buffer_start[s->map[k].buffer] + s->map[k].offset, s->map[k].len, 0);
    struct dl_state_span whole = {s->data, (size_t)total};
    dl_state_whole_hash(&whole, 1, &desc.whole_hash);
    const void *params = s->data; /* buffer 0, the fp32 parameters, starts the snapshot */
    dl_collab_param_hash(params, buffers[0].size / 4, desc.param_hash);
    pthread_mutex_lock(&d->lock);
    if (d->lie) memcpy(desc.param_hash, d->lie_param_hash, 32);
    pthread_mutex_unlock(&d->lock);
    s->desc = dl_state_desc_encode(&desc, hashes, meta, &s->desc_size);
    free(hashes);
    if (!s->desc) {
        snapshot_free(s);
        return dl_fail_context("state publish");
    }
    s->refs = 1;

    struct snapshot *dead[2] = {0}; /* the replaced epoch, or the oldest beyond keep_snapshots */
    size_t num_dead = 0;
    pthread_mutex_lock(&d->lock);
    struct snapshot *same = find_snapshot(d, epoch);
    size_t keep = 0;
    for (size_t i = 0; i < d->num_snaps; i++)
        if (d->snaps[i] != same) d->snaps[keep++] = d->snaps[i];
    if (same) dead[num_dead++] = snapshot_release(same);
    d->num_snaps = keep;
    memmove(d->snaps + 1, d->snaps, d->num_snaps * sizeof *d->snaps);
    d->snaps[0] = s;
    d->num_snaps++;
    while (d->num_snaps > d->cfg.keep_snapshots) dead[num_dead++] = snapshot_release(d->snaps[--d->num_snaps]);
    d->stats.newest_epoch = epoch;
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < num_dead; i++) snapshot_free(dead[i]);
    return 0;
}

void dl_state_donor_get_stats(dl_state_donor *d, struct dl_state_donor_stats *stats) {
    pthread_mutex_lock(&d->lock);
    *stats = d->stats;
    stats->snapshots = d->num_snaps;
    pthread_mutex_unlock(&d->lock);
}

void dl_state_donor_test_corrupt(dl_state_donor *d, unsigned count) {
    pthread_mutex_lock(&d->lock);
    d->corrupt_next = count;
    pthread_mutex_unlock(&d->lock);
}

void dl_state_donor_test_claim_param_hash(dl_state_donor *d, const uint8_t param_hash[32]) {
    pthread_mutex_lock(&d->lock);
    d->lie = true;
    memcpy(d->lie_param_hash, param_hash, 32);
    pthread_mutex_unlock(&d->lock);
}

void dl_state_donor_stop(dl_state_donor *d) {
    if (!d) return;
    dl_net_set_handler(d->net, DL_STATE_INFO_METHOD, NULL, NULL);
    dl_net_set_handler(d->net, DL_STATE_CHUNK_METHOD, NULL, NULL);
    net_thread_barrier(d->net);
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_broadcast(&d->wake);
    pthread_mutex_unlock(&d->lock);
    for (size_t i = 0; i < d->num_threads; i++) pthread_join(d->threads[i], NULL);
    for (size_t i = 0; i < d->num_snaps; i++) snapshot_free(d->snaps[i]);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->wake);
    free(d->snaps);
    free(d->queue);
    free(d->threads);
    free(d);
}
