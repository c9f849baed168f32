/* State transfer, fetcher side: descriptions from every donor, then chunks
 * pulled from all donors that agree, each donor keeping a few requests in
 * flight, so a faster donor frees its slots sooner and serves more. Response
 * callbacks (network thread) verify and copy chunks; the fetching thread
 * schedules requests and cancels those of dropped donors. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collab/state_transfer.h"
#include "dedloc/util.h"

#define MAX_DONORS 64
#define MAX_PER_DONOR 64
#define REMOTE_ERROR_TRIES 3 /* error answers (e.g. "busy") a donor may give */

enum chunk_state { CHUNK_TODO = 0, CHUNK_FLIGHT = 1, CHUNK_DONE = 2 };

struct fetch;

struct request_slot {
    struct fetch *f;
    bool used, cancel_sent;
    size_t donor;
    uint64_t chunk, request_id;
};

struct fetch_donor {
    const char *peer_id;
    struct dl_state_fetch_donor *report;
    bool active;
    size_t in_flight;
    bool info_done;
    int info_status;
    uint8_t *info; /* the "state.info" answer; desc points into it */
    size_t info_size;
    struct dl_state_desc desc;
};

struct fetch {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    dl_net *net;
    const struct dl_state_fetch_config *cfg;
    struct fetch_donor donors[MAX_DONORS];
    size_t num_donors, num_active;
    struct dl_state_buffer *buffers;
    size_t num_buffers;
    const struct dl_state_desc *ref; /* the agreed description */
    struct dl_state_chunk *map;
    uint64_t num_chunks, done, next_fresh;
    uint8_t *state;
    int8_t *avoid;   /* donor that sent a corrupt copy of the chunk, or -1 */
    uint64_t *retry; /* chunks to ask again (each at most once in here) */
    uint64_t num_retry;
    struct request_slot *slots;
    size_t num_slots, in_flight, refetched;
};

void dl_state_fetch_config_default(struct dl_state_fetch_config *c) {
    memset(c, 0, sizeof *c);
    c->max_in_flight_per_donor = 4;
    c->request_timeout_s = 60;
    c->timeout_s = 1800;
    c->max_meta = DL_STATE_MAX_META;
}

static void drop_donor(struct fetch *f, size_t i, const char *why) {
    struct fetch_donor *d = &f->donors[i];
    if (!d->active) return;
    d->active = false;
    f->num_active--;
    d->report->dropped = true;
    snprintf(d->report->reason, sizeof d->report->reason, "%s", why);
    DL_WARN("collab", "state transfer: no longer using donor %s: %s", d->peer_id, why);
}

/* Printable copy of an error answer (bounded, control bytes replaced). */
static void remote_message(const uint8_t *payload, size_t size, char *out, size_t cap) {
    size_t n = size < cap - 1 ? size : cap - 1;
    for (size_t i = 0; i < n; i++) out[i] = payload[i] >= 32 && payload[i] < 127 ? (char)payload[i] : '?';
    out[n] = 0;
}

static void failure_text(int status, const uint8_t *payload, size_t size, char *out, size_t cap) {
    char msg[100] = "";
    if (status == DL_NET_REMOTE_ERROR && payload) remote_message(payload, size, msg, sizeof msg);
    snprintf(out, cap, "%s%s%s", dl_net_status_name(status), *msg ? ": " : "", msg);
}

/* ---- descriptions --------------------------------------------------------------- */

struct info_ctx {
    struct fetch *f;
    size_t donor;
};

static void info_cb(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct info_ctx *c = user;
    struct fetch *f = c->f;
    pthread_mutex_lock(&f->lock);
    struct fetch_donor *d = &f->donors[c->donor];
    d->info_status = status;
    if (size && (d->info = malloc(size))) {
        memcpy(d->info, payload, size);
        d->info_size = size;
    }
    d->info_done = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* Whether donor i's description fits the caller's request; sets its reason otherwise. */
static bool description_usable(struct fetch *f, size_t i) {
    struct fetch_donor *d = &f->donors[i];
    char *why = d->report->reason;
    size_t cap = sizeof d->report->reason;
    if (d->info_status != DL_NET_OK) {
        char text[140];
        failure_text(d->info_status, d->info, d->info_size, text, sizeof text);
        snprintf(why, cap, "state.info: %s", text);
        return false;
    }
    if (!d->info || dl_state_desc_decode(d->info, d->info_size, f->cfg->max_meta, &d->desc)) {
        snprintf(why, cap, "unusable description: %s", d->info ? dl_error() : "empty answer");
        return false;
    }
    if (d->desc.epoch != f->cfg->epoch) {
        snprintf(why, cap, "describes epoch %llu, not %llu", (unsigned long long)d->desc.epoch,
                 (unsigned long long)f->cfg->epoch);
        return false;
    }
    if (d->desc.num_buffers != f->num_buffers) {
        snprintf(why, cap, "its state has %u buffers, ours %zu", d->desc.num_buffers, f->num_buffers);
        return false;
    }
    for (size_t b = 0; b < f->num_buffers; b++)
        if (d->desc.sizes[b] != f->buffers[b].size) {
            snprintf(why, cap, "its buffer %zu is %llu bytes, ours %zu (another model or optimizer)", b,
                     (unsigned long long)d->desc.sizes[b], f->buffers[b].size);
            return false;
        }
    if (memcmp(d->desc.param_hash, f->cfg->expected_param_hash, 32)) {
        snprintf(why, cap, "its parameters' hash differs from the expected param hash");
        return false;
    }
    return true;
}

static bool same_state(const struct dl_state_desc *a, const struct dl_state_desc *b) {
    return a->chunk_size == b->chunk_size && a->num_chunks == b->num_chunks && a->whole_hash == b->whole_hash &&
           !memcmp(a->chunk_hashes, b->chunk_hashes, 8 * (size_t)a->num_chunks);
}

/* Asks every donor for its description, keeps those that fit, and among them
 * the largest group describing the same bits (ties: the earliest donor). */
static int fetch_descriptions(struct fetch *f) {
    struct info_ctx ctx[MAX_DONORS];
    uint8_t payload[8];
    dl_state_put_u64(payload, f->cfg->epoch);
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->num_donors; i++) {
        ctx[i] = (struct info_ctx){f, i};
        if (!dl_net_request(f->net, f->donors[i].peer_id, DL_STATE_INFO_METHOD, payload, sizeof payload,
                            f->cfg->request_timeout_s, info_cb, &ctx[i])) {
            f->donors[i].info_done = true;
            f->donors[i].info_status = DL_NET_DISCONNECTED;
        }
    }
    for (;;) { /* every request ends, by its timeout at the latest */
        size_t waiting = 0;
        for (size_t i = 0; i < f->num_donors; i++) waiting += !f->donors[i].info_done;
        if (!waiting) break;
        pthread_cond_wait(&f->cond, &f->lock);
    }
    pthread_mutex_unlock(&f->lock);

    bool usable[MAX_DONORS];
    size_t best = SIZE_MAX, best_count = 0;
    for (size_t i = 0; i < f->num_donors; i++) usable[i] = description_usable(f, i);
    for (size_t i = 0; i < f->num_donors; i++) {
        if (!usable[i]) continue;
        size_t count = 0;
        for (size_t j = 0; j < f->num_donors; j++) count += usable[j] && same_state(&f->donors[i].desc, &f->donors[j].desc);
        if (count > best_count) {
            best = i;
            best_count = count;
        }
    }
    if (best == SIZE_MAX) {
        char list[600] = "";
        size_t n = 0;
        for (size_t i = 0; i < f->num_donors && n < sizeof list; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%.8s: %s", i ? "; " : "", f->donors[i].peer_id,
                                  f->donors[i].report->reason);
        return dl_fail("no donor serves epoch %llu with the expected parameters (%s)", (unsigned long long)f->cfg->epoch,
                       list);
    }
    f->ref = &f->donors[best].desc;
    for (size_t i = 0; i < f->num_donors; i++) {
        if (!usable[i]) continue;
        if (same_state(f->ref, &f->donors[i].desc)) {
            f->donors[i].active = true;
            f->donors[i].report->used = true;
            f->num_active++;
        } else {
            snprintf(f->donors[i].report->reason, sizeof f->donors[i].report->reason,
                     "its chunk hashes differ from those of %d other donor(s) at this epoch", (int)best_count);
        }
    }
    return 0;
}

/* ---- chunks -------------------------------------------------------------------- */

static void deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    long ns = ts->tv_nsec + (long)(seconds * 1e9);
    ts->tv_sec += ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

static void requeue(struct fetch *f, uint64_t k) {
    f->state[k] = CHUNK_TODO;
    f->retry[f->num_retry++] = k;
    f->refetched++;
}

static void chunk_cb(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct request_slot *s = user;
    struct fetch *f = s->f;
    pthread_mutex_lock(&f->lock);
    size_t i = s->donor;
    uint64_t k = s->chunk;
    struct fetch_donor *d = &f->donors[i];
    const struct dl_state_chunk *c = &f->map[k];
    if (status == DL_NET_OK && size == c->len && dl_hash64(payload, size, 0) == dl_state_chunk_hash(f->ref, k)) {
        memcpy((uint8_t *)f->buffers[c->buffer].data + c->offset, payload, size);
        f->state[k] = CHUNK_DONE;
        f->done++;
        d->report->chunks++;
        d->report->bytes += size;
    } else if (status == DL_NET_OK) {
        requeue(f, k);
        d->report->corrupt++;
        f->avoid[k] = (int8_t)i;
        DL_WARN("collab", "state transfer: donor %s sent a corrupt chunk %llu (%s); asking again", d->peer_id,
                (unsigned long long)k, size == c->len ? "xxh64 mismatch" : "wrong size");
        if (f->num_active > 1 || d->report->corrupt >= DL_STATE_CORRUPT_TRIES)
            drop_donor(f, i, "sent a corrupt chunk (its xxh64 does not match its own description)");
    } else {
        requeue(f, k);
        if (!(status == DL_NET_CANCELLED && s->cancel_sent)) {
            d->report->failures++;
            char text[160];
            failure_text(status, payload, size, text, sizeof text);
            if (status != DL_NET_REMOTE_ERROR || d->report->failures >= REMOTE_ERROR_TRIES) {
                char why[200];
                snprintf(why, sizeof why, "%s%s", text,
                         status == DL_NET_TIMEOUT ? " (stalled past the request timeout)" : "");
                drop_donor(f, i, why);
            }
        }
    }
    s->used = false;
    d->in_flight--;
    f->in_flight--;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* Next chunk for donor i: one to ask again first (unless this donor sent it
 * corrupt and another donor is there), else the next fresh one. */
static bool take_chunk(struct fetch *f, size_t i, uint64_t *chunk) {
    for (uint64_t r = 0; r < f->num_retry; r++) {
        uint64_t k = f->retry[r];
        if (f->avoid[k] == (int8_t)i && f->num_active > 1) continue;
        f->retry[r] = f->retry[--f->num_retry];
        *chunk = k;
        return true;
    }
    if (f->next_fresh < f->num_chunks) {
        *chunk = f->next_fresh++;
        return true;
    }
    return false;
}

/* Sends one chunk request; called with the lock held (the callback waits
 * for it). */
static void request_chunk(struct fetch *f, size_t i, uint64_t k) {
    struct request_slot *s = NULL;
    for (size_t j = 0; j < f->num_slots && !s; j++)
        if (!f->slots[j].used) s = &f->slots[j];
    uint8_t payload[16];
    dl_state_put_u64(payload, f->cfg->epoch);
    dl_state_put_u64(payload + 8, k);
    /* The slot is complete before the request leaves: the callback reads
     * s->f before it can take the lock. */
    if (s) *s = (struct request_slot){f, true, false, i, k, 0};
    uint64_t id = s ? dl_net_request(f->net, f->donors[i].peer_id, DL_STATE_CHUNK_METHOD, payload, sizeof payload,
                                     f->cfg->request_timeout_s, chunk_cb, s)
                    : 0;
    if (!id) {
        if (s) s->used = false;
        f->state[k] = CHUNK_TODO;
        f->retry[f->num_retry++] = k;
        char why[200];
        snprintf(why, sizeof why, "cannot send a request: %s", s ? dl_error() : "no free request slot");
        drop_donor(f, i, why);
        return;
    }
    s->request_id = id;
    f->state[k] = CHUNK_FLIGHT;
    f->donors[i].in_flight++;
    f->in_flight++;
}

static void cancel_requests(struct fetch *f, bool all) {
    for (size_t j = 0; j < f->num_slots; j++) {
        struct request_slot *s = &f->slots[j];
        if (s->used && !s->cancel_sent && (all || !f->donors[s->donor].active)) {
            s->cancel_sent = true;
            dl_net_cancel(f->net, s->request_id);
        }
    }
}

static int fetch_chunks(struct fetch *f) {
    const struct dl_state_fetch_config *cfg = f->cfg;
    double end = dl_now() + cfg->timeout_s;
    uint64_t reported = UINT64_MAX;
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    while (f->done < f->num_chunks) {
        cancel_requests(f, false);
        if (f->num_active == 0 && f->in_flight == 0) {
            rc = dl_fail("every donor was dropped with %llu of %llu chunks fetched",
                         (unsigned long long)f->done, (unsigned long long)f->num_chunks);
            break;
        }
        /* Round-robin fill: one request per donor per pass. */
        for (bool sent = true; sent;) {
            sent = false;
            for (size_t i = 0; i < f->num_donors; i++) {
                uint64_t k;
                if (f->donors[i].active && f->donors[i].in_flight < cfg->max_in_flight_per_donor && take_chunk(f, i, &k)) {
                    request_chunk(f, i, k);
                    sent = true;
                }
            }
        }
        if (cfg->stop && *cfg->stop) {
            rc = dl_fail("state transfer stopped with %llu of %llu chunks", (unsigned long long)f->done,
                         (unsigned long long)f->num_chunks);
            break;
        }
        if (dl_now() > end) {
            rc = dl_fail("state transfer timed out after %.0f s with %llu of %llu chunks", cfg->timeout_s,
                         (unsigned long long)f->done, (unsigned long long)f->num_chunks);
            break;
        }
        if (cfg->progress && f->done != reported) {
            reported = f->done;
            pthread_mutex_unlock(&f->lock);
            cfg->progress(cfg->progress_user, (size_t)reported, (size_t)f->num_chunks);
            pthread_mutex_lock(&f->lock);
            continue;
        }
        struct timespec ts;
        deadline_after(&ts, 0.25);
        pthread_cond_timedwait(&f->cond, &f->lock, &ts);
    }
    /* Wind down: every callback must have run before f goes away. */
    cancel_requests(f, true);
    while (f->in_flight) pthread_cond_wait(&f->cond, &f->lock);
    pthread_mutex_unlock(&f->lock);
    if (!rc && cfg->progress && reported != f->num_chunks) cfg->progress(cfg->progress_user, (size_t)f->num_chunks, (size_t)f->num_chunks);
    return rc;
}

/* ---- entry point ------------------------------------------------------------------ */

static int check_request(dl_net *net, const struct dl_state_fetch_config *cfg, struct dl_state_buffer *buffers,
                         size_t num_buffers) {
    if (!net || !cfg || !buffers) return dl_fail("state fetch: missing net, config or buffers");
    if (cfg->num_donors < 1 || cfg->num_donors > MAX_DONORS || !cfg->donors)
        return dl_fail("state fetch: %zu donors (1 .. %d)", cfg->num_donors, MAX_DONORS);
    for (size_t i = 0; i < cfg->num_donors; i++)
        if (!cfg->donors[i] || !*cfg->donors[i] || strlen(cfg->donors[i]) >= DL_PEER_ID_HEX)
            return dl_fail("state fetch: donor %zu has no valid peer id", i);
    if (!cfg->expected_param_hash)
        return dl_fail("state fetch: an expected param hash is required (from the donors' signed progress records)");
    if (num_buffers < 1 || num_buffers > DL_STATE_MAX_BUFFERS)
        return dl_fail("state fetch: %zu buffers (1 .. %d)", num_buffers, DL_STATE_MAX_BUFFERS);
    if (buffers[0].size % 4) return dl_fail("state fetch: buffer 0 must be the fp32 parameters (size a multiple of 4)");
    for (size_t b = 0; b < num_buffers; b++)
        if (buffers[b].size && !buffers[b].data) return dl_fail("state fetch: buffer %zu has no memory", b);
    if (cfg->max_in_flight_per_donor < 1 || cfg->max_in_flight_per_donor > MAX_PER_DONOR)
        return dl_fail("state fetch: max_in_flight_per_donor must be 1 .. %d", MAX_PER_DONOR);
    if (!(cfg->request_timeout_s > 0) || cfg->request_timeout_s > 86400 || !(cfg->timeout_s > 0))
        return dl_fail("state fetch: timeouts must be positive (request timeout at most a day)");
    return 0;
}

int dl_state_fetch(dl_net *net, const struct dl_state_fetch_config *cfg, struct dl_state_buffer *buffers,
                   size_t num_buffers, struct dl_state_fetch_result *result) {
    memset(result, 0, sizeof *result);
    double start = dl_now();
    if (check_request(net, cfg, buffers, num_buffers)) return -1;
    result->epoch = cfg->epoch;
    result->num_donors = cfg->num_donors;
    result->donors = dl_calloc(cfg->num_donors, sizeof *result->donors);
    struct fetch *f = dl_calloc(1, sizeof *f);
    if (!result->donors || !f) {
        free(f);
        return -1;
    }
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &attr);
    pthread_condattr_destroy(&attr);
    f->net = net;
    f->cfg = cfg;
    f->buffers = buffers;
    f->num_buffers = num_buffers;
    f->num_donors = cfg->num_donors;
    for (size_t i = 0; i < f->num_donors; i++) {
        snprintf(result->donors[i].peer_id, sizeof result->donors[i].peer_id, "%s", cfg->donors[i]);
        f->donors[i].peer_id = result->donors[i].peer_id;
        f->donors[i].report = &result->donors[i];
    }

    int rc = fetch_descriptions(f);
    if (!rc) {
        f->num_chunks = f->ref->num_chunks;
        f->map = dl_state_chunk_map(f->ref->sizes, f->ref->num_buffers, f->ref->chunk_size, f->num_chunks);
        size_t n = f->num_chunks ? (size_t)f->num_chunks : 1;
        f->state = dl_calloc(n, 1);
        f->avoid = dl_malloc(n);
        f->retry = dl_calloc(n, sizeof *f->retry);
        f->num_slots = f->num_donors * cfg->max_in_flight_per_donor;
        f->slots = dl_calloc(f->num_slots, sizeof *f->slots);
        if (!f->map || !f->state || !f->avoid || !f->retry || !f->slots)
            rc = dl_fail_context("state fetch of %llu chunks", (unsigned long long)f->num_chunks);
        else
            memset(f->avoid, -1, n);
        for (size_t j = 0; !rc && j < f->num_slots; j++) f->slots[j].f = f;
    }
    if (!rc) rc = fetch_chunks(f);
    if (!rc) {
        struct dl_state_span spans[DL_STATE_MAX_BUFFERS];
        for (size_t b = 0; b < num_buffers; b++) spans[b] = (struct dl_state_span){buffers[b].data, buffers[b].size};
        uint64_t whole = 0;
        uint8_t param_hash[32];
        if (dl_state_whole_hash(spans, num_buffers, &whole))
            rc = -1;
        else if (whole != f->ref->whole_hash)
            rc = dl_fail("fetched state's xxh64 %016llx differs from the donors' %016llx", (unsigned long long)whole,
                         (unsigned long long)f->ref->whole_hash);
        if (!rc) {
            dl_collab_param_hash(buffers[0].data, buffers[0].size / 4, param_hash);
            if (memcmp(param_hash, cfg->expected_param_hash, 32))
                rc = dl_fail("fetched parameters' BLAKE2b-256 differs from the expected param hash: the donors "
                             "served other parameters than their records vouch for; fetch from other donors");
        }
    }
    if (!rc && f->ref->meta_size) {
        result->meta = dl_malloc(f->ref->meta_size);
        if (!result->meta)
            rc = -1;
        else
            memcpy(result->meta, f->ref->meta, f->ref->meta_size);
        result->meta_size = f->ref->meta_size;
    }
    if (rc) dl_fail_context("state transfer of epoch %llu", (unsigned long long)cfg->epoch);
    result->num_chunks = (size_t)f->num_chunks;
    result->chunks_refetched = f->refetched;
    result->seconds = dl_now() - start;
    for (size_t i = 0; i < f->num_donors; i++) free(f->donors[i].info);
    free(f->map);
    free(f->state);
    free(f->avoid);
    free(f->retry);
    free(f->slots);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    free(f);
    return rc;
}

void dl_state_fetch_result_free(struct dl_state_fetch_result *result) {
    if (!result) return;
    free(result->meta);
    free(result->donors);
    memset(result, 0, sizeof *result);
}
