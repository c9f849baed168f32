/* The batch stream: one producer thread turns documents into batches and
 * keeps a bounded queue of them ready (back-pressure: it sleeps while the
 * queue is full, and the HTTP sources stop reading with it). A single
 * producer drawing from a single generator keeps the output independent of
 * timing: same config, same bytes, same batches. */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "data/data_internal.h"

enum { MAX_BATCH = 1 << 16, MAX_SEQ = 8192, MAX_SHUFFLE = 1 << 24, MAX_QUEUE = 1024 };
enum stream_state { STREAM_RUNNING, STREAM_ENDED, STREAM_FAILED };

struct dl_data_stream {
    dl_data_config cfg;
    char *source, *json_field, *ca_file;
    dl_data_text text;
    uint8_t *special, *word_start;
    int32_t *nonspecial;
    size_t nonspecial_count;
    size_t max_pair_tokens;
    char **shards;
    size_t shard_count;
    dl_data_io io;
    atomic_int stop;
    pthread_t thread;
    bool thread_started;
    /* shared with the consumer, under mu */
    pthread_mutex_t mu;
    pthread_cond_t ready, space, parked_cond;
    dl_batch *slots;
    size_t queue_cap, queue_head, queue_count;
    enum stream_state state;
    char error[512];
    dl_data_stats stats;
    /* Saving the state (dl_data_save_state): the producer parks between two
     * batches while pause is set; parked_work is then its finished batch not
     * yet queued. Batches handed out since the last mark are kept in
     * retained, so the saved state starts at the mark. */
    bool pause, parked, marked;
    const dl_batch *parked_work;
    dl_batch *retained;
    size_t retained_count, retained_cap;
    uint64_t batches_at_mark;
    /* producer-owned */
    dl_data_stats counters;
    dl_rng rng;
    dl_docreader *docs;
    dl_shuffle shuffle;
    dl_example *ready_examples; /* evicted from the shuffle buffer, in order */
    size_t ready_head, ready_count, ready_cap;
    bool input_done;
    uint64_t docs_this_pass;
    uint64_t failed_before_pass; /* failed_shards when the pass began */
};

uint64_t dl_data_mix_seed(uint64_t seed, uint64_t peer_seed, uint64_t purpose) {
    uint64_t words[3] = {seed, peer_seed, purpose};
    return dl_hash64(words, sizeof words, 0x64656c6f63ull /* "deloc" */);
}

/* ---- producer ------------------------------------------------------------------- */

static int ready_push(dl_data_stream *s, dl_example ex) {
    if (s->ready_head > 0 && s->ready_head == s->ready_count) s->ready_head = s->ready_count = 0;
    if (s->ready_count == s->ready_cap) {
        size_t cap = s->ready_cap ? s->ready_cap * 2 : 64;
        dl_example *grown = dl_realloc(s->ready_examples, cap * sizeof *grown);
        if (!grown) {
            dl_example_free(&ex);
            return -1;
        }
        s->ready_examples = grown;
        s->ready_cap = cap;
    }
    s->ready_examples[s->ready_count++] = ex;
    return 0;
}

/* Tokenizes one document into examples and feeds them to the shuffle buffer. */
static int process_document(dl_data_stream *s, const char *doc, size_t len) {
    dl_span *spans;
    size_t nspans;
    if (dl_split_sentences(doc, len, &spans, &nspans)) return -1;
    dl_segments seg = {0};
    seg.ids = dl_calloc(nspans ? nspans : 1, sizeof *seg.ids);
    seg.lens = dl_calloc(nspans ? nspans : 1, sizeof *seg.lens);
    dl_example *examples = NULL;
    size_t nexamples = 0, cap = 0;
    int rc = seg.ids && seg.lens ? 0 : -1;
    for (size_t i = 0; i < nspans && rc == 0; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        rc = s->text.encode(s->text.ctx, doc + spans[i].start, spans[i].len, &ids, &n);
        if (rc) break;
        s->counters.sentences++;
        s->counters.tokens += n;
        if (n) {
            seg.ids[seg.count] = ids;
            seg.lens[seg.count++] = n;
        } else {
            free(ids);
        }
    }
    if (rc == 0 && seg.count) {
        dl_pair_params pp = {s->max_pair_tokens, s->cfg.short_seq_prob, s->cfg.sop_swap_prob};
        rc = dl_make_pairs(&seg, &pp, &s->text, &s->rng, &examples, &nexamples, &cap);
    }
    for (size_t i = 0; i < nexamples; i++) {
        if (rc) {
            dl_example_free(&examples[i]);
            continue;
        }
        s->counters.examples++;
        dl_example evicted;
        if (dl_shuffle_push(&s->shuffle, examples[i], &s->rng, &evicted))
            rc = ready_push(s, evicted);
    }
    for (size_t i = 0; i < seg.count; i++) free(seg.ids[i]);
    free(seg.ids);
    free(seg.lens);
    free(examples);
    free(spans);
    return rc;
}

static void publish_stats(dl_data_stream *s) {
    uint64_t batches = s->stats.batches; /* counted by the consumer */
    s->stats = s->counters;
    s->stats.batches = batches;
}

/* 1 example, 0 end of data, -1 failure. */
static int next_example(dl_data_stream *s, dl_example *out) {
    while (s->ready_head == s->ready_count) {
        if (s->input_done) return dl_shuffle_pop(&s->shuffle, &s->rng, out) ? 1 : 0;
        const char *doc;
        size_t len;
        int r = dl_docreader_next(s->docs, &doc, &len);
        if (r < 0) return -1;
        if (r == 0) {
            s->counters.passes++;
            bool failures = s->counters.failed_shards > s->failed_before_pass;
            s->failed_before_pass = s->counters.failed_shards;
            if (!s->docs_this_pass && failures && s->cfg.loop) {
                /* Every shard failed (server down?): wait and go round again
                 * rather than end a long run over an outage. */
                DL_WARN("data", "%s: no shard could be read in this pass; retrying in %.0f s",
                        s->source, s->cfg.retry_max_s);
                pthread_mutex_lock(&s->mu);
                publish_stats(s);
                pthread_mutex_unlock(&s->mu);
                if (dl_data_io_sleep(&s->io, s->cfg.retry_max_s)) return dl_fail("data stream stopped");
                continue;
            }
            if (!s->docs_this_pass)
                return dl_fail("no usable documents in %s (%" PRIu64 " lines skipped, %" PRIu64
                               " shards failed)",
                               s->source, s->counters.skipped_lines, s->counters.failed_shards);
            s->docs_this_pass = 0;
            if (!s->cfg.loop) s->input_done = true;
            continue;
        }
        s->counters.documents++;
        s->docs_this_pass++;
        if (process_document(s, doc, len)) return -1;
    }
    *out = s->ready_examples[s->ready_head++];
    return 1;
}

/* Fills one batch. 1 full, 0 end of data (partial batch dropped), -1 failure. */
static int fill_batch(dl_data_stream *s, dl_batch *b) {
    size_t T = (size_t)b->seq;
    dl_mask_params mp = {s->cfg.mlm_probability, s->cfg.mask_replace_prob,
                         s->cfg.random_replace_prob, s->cfg.whole_word_mask};
    for (int row = 0; row < b->batch; row++) {
        dl_example ex = {0};
        int r = next_example(s, &ex);
        if (r <= 0) return r;
        size_t n = (size_t)ex.len < T ? (size_t)ex.len : T;
        int32_t *ids = b->input_ids + (size_t)row * T, *types = b->token_type_ids + (size_t)row * T;
        int32_t *att = b->attention_mask + (size_t)row * T, *labels = b->labels + (size_t)row * T;
        memcpy(ids, ex.ids, n * sizeof *ids);
        memcpy(types, ex.type_ids, n * sizeof *types);
        b->sentence_order_label[row] = ex.sop;
        dl_example_free(&ex);
        int rc = dl_mask_tokens(ids, labels, n, &mp, &s->text, s->nonspecial,
                                s->nonspecial_count, &s->rng);
        if (rc) return -1;
        for (size_t t = 0; t < n; t++) att[t] = 1;
        for (size_t t = n; t < T; t++) {
            ids[t] = s->text.pad_id;
            types[t] = 0;
            att[t] = 0;
            labels[t] = -100;
        }
    }
    return 1;
}


static void *producer_main(void *arg) {
    dl_data_stream *s = arg;
    dl_data_block_sigpipe();
    dl_batch work;
    enum stream_state final = STREAM_ENDED;
    if (dl_batch_alloc(&work, s->cfg.batch_size, s->cfg.max_seq_len)) {
        final = STREAM_FAILED;
        goto out;
    }
    for (;;) {
        int r = fill_batch(s, &work);
        if (r <= 0) {
            if (r < 0) final = STREAM_FAILED;
            break;
        }
        pthread_mutex_lock(&s->mu);
        while ((s->queue_count == s->queue_cap || s->pause) && !atomic_load(&s->stop)) {
            if (s->pause && !s->parked) {
                s->parked = true;
                s->parked_work = &work;
                pthread_cond_broadcast(&s->parked_cond);
            }
            pthread_cond_wait(&s->space, &s->mu);
        }
        s->parked = false;
        s->parked_work = NULL;
        if (atomic_load(&s->stop)) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        dl_batch *slot = &s->slots[(s->queue_head + s->queue_count) % s->queue_cap];
        dl_batch t = *slot;
        *slot = work;
        work = t;
        s->queue_count++;
        publish_stats(s);
        pthread_cond_signal(&s->ready);
        pthread_mutex_unlock(&s->mu);
    }
out:
    dl_batch_free(&work);
    pthread_mutex_lock(&s->mu);
    if (final == STREAM_FAILED && !atomic_load(&s->stop)) {
        snprintf(s->error, sizeof s->error, "%s", dl_error());
        DL_ERROR("data", "batch producer stopped: %s", s->error);
    }
    s->state = final;
    publish_stats(s);
    pthread_cond_broadcast(&s->ready);
    pthread_cond_broadcast(&s->parked_cond);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- saved state ------------------------------------------------------------------ */

enum { STATE_MAGIC = 0x31307473646c6400ull /* "\0dldst01" */ };

static void copy_batch(dl_batch *dst, const dl_batch *src) {
    size_t n = (size_t)src->batch * (size_t)src->seq * sizeof(int32_t);
    memcpy(dst->input_ids, src->input_ids, n);
    memcpy(dst->token_type_ids, src->token_type_ids, n);
    memcpy(dst->attention_mask, src->attention_mask, n);
    memcpy(dst->labels, src->labels, n);
    memcpy(dst->sentence_order_label, src->sentence_order_label, (size_t)src->batch * sizeof(int32_t));
}

/* Under mu: keeps a copy of a batch handed out after the mark. */
static int retain(dl_data_stream *s, const dl_batch *b) {
    if (s->retained_count == s->retained_cap) {
        size_t cap = s->retained_cap ? s->retained_cap * 2 : 16;
        dl_batch *grown = dl_realloc(s->retained, cap * sizeof *grown);
        if (!grown) return -1;
        memset(grown + s->retained_cap, 0, (cap - s->retained_cap) * sizeof *grown);
        s->retained = grown;
        s->retained_cap = cap;
    }
    dl_batch *dst = &s->retained[s->retained_count];
    if (!dst->input_ids && dl_batch_alloc(dst, b->batch, b->seq)) return -1;
    copy_batch(dst, b);
    s->retained_count++;
    return 0;
}

/* What a state must agree on with the stream that reads it. */
static uint64_t config_hash(const dl_data_stream *s) {
    dl_pos_out o = {0};
    const dl_data_config *c = &s->cfg;
    dl_pos_put_bytes(&o, s->source, strlen(s->source) + 1);
    dl_pos_put_bytes(&o, s->json_field, strlen(s->json_field) + 1);
    uint64_t nums[] = {(uint64_t)c->format, (uint64_t)c->batch_size, (uint64_t)c->max_seq_len,
                       (uint64_t)c->shuffle_buffer, c->seed, c->peer_seed, (uint64_t)c->loop,
                       (uint64_t)c->whole_word_mask, (uint64_t)c->max_line_bytes,
                       s->text.vocab_size, (uint64_t)s->text.pad_id, (uint64_t)s->text.mask_id,
                       dl_hash64(s->special, s->text.vocab_size, 0),
                       dl_hash64(s->word_start, s->text.vocab_size, 0)};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) dl_pos_put_u64(&o, nums[i]);
    float probs[] = {c->short_seq_prob, c->sop_swap_prob, c->mlm_probability, c->mask_replace_prob,
                     c->random_replace_prob};
    dl_pos_put_bytes(&o, probs, sizeof probs);
    uint64_t h = o.failed ? 0 : dl_hash64(o.data, o.len, 0);
    free(o.data);
    return h;
}

static uint64_t shards_hash(const dl_data_stream *s) {
    uint64_t h = s->shard_count;
    for (size_t i = 0; i < s->shard_count; i++) h = dl_hash64(s->shards[i], strlen(s->shards[i]) + 1, h);
    return h;
}

enum { STATS_WORDS = sizeof(dl_data_stats) / sizeof(uint64_t) };
_Static_assert(sizeof(dl_data_stats) == STATS_WORDS * sizeof(uint64_t), "dl_data_stats is all uint64_t");

static void put_batch(dl_pos_out *o, const dl_batch *b) {
    size_t n = (size_t)b->batch * (size_t)b->seq;
    dl_pos_put_i32s(o, b->input_ids, n);
    dl_pos_put_i32s(o, b->token_type_ids, n);
    dl_pos_put_i32s(o, b->attention_mask, n);
    dl_pos_put_i32s(o, b->labels, n);
    dl_pos_put_i32s(o, b->sentence_order_label, (size_t)b->batch);
}

/* Under mu, with the producer parked or gone: its state is still. */
static void serialize(dl_data_stream *s, dl_pos_out *o) {
    dl_pos_put_u64(o, STATE_MAGIC);
    dl_pos_put_u64(o, config_hash(s));
    dl_pos_put_u64(o, shards_hash(s));
    dl_pos_put_u64(o, s->batches_at_mark);
    const uint64_t *stats = (const uint64_t *)&s->counters;
    for (int i = 0; i < STATS_WORDS; i++) dl_pos_put_u64(o, stats[i]);
    for (int i = 0; i < 4; i++) dl_pos_put_u64(o, s->rng.s[i]);
    dl_pos_put_u64(o, s->docs_this_pass);
    dl_pos_put_u64(o, s->failed_before_pass);
    dl_pos_put_u64(o, s->input_done);
    dl_doc_position pos;
    dl_docreader_position(s->docs, &pos);
    dl_pos_put_position(o, &pos);
    dl_pos_put_u64(o, s->ready_count - s->ready_head);
    for (size_t i = s->ready_head; i < s->ready_count; i++) dl_pos_put_example(o, &s->ready_examples[i]);
    dl_pos_put_u64(o, s->shuffle.count);
    for (size_t i = 0; i < s->shuffle.count; i++) dl_pos_put_example(o, &s->shuffle.slots[i]);
    /* Made but not taken as of the mark: the retained ones, the queue, and
     * the finished batch the parked producer holds. */
    bool work = s->parked && s->parked_work;
    dl_pos_put_u64(o, s->retained_count + s->queue_count + (work ? 1 : 0));
    for (size_t i = 0; i < s->retained_count; i++) put_batch(o, &s->retained[i]);
    for (size_t i = 0; i < s->queue_count; i++) put_batch(o, &s->slots[(s->queue_head + i) % s->queue_cap]);
    if (work) put_batch(o, s->parked_work);
}

int dl_data_mark(dl_data_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->marked = true;
    s->retained_count = 0;
    s->batches_at_mark = s->stats.batches;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int dl_data_save_state(dl_data_stream *s, uint8_t **state, size_t *size) {
    *state = NULL;
    *size = 0;
    pthread_mutex_lock(&s->mu);
    if (!s->marked) {
        pthread_mutex_unlock(&s->mu);
        return dl_fail("the data stream's state is taken at a mark, and none was set");
    }
    s->pause = true;
    pthread_cond_broadcast(&s->space);
    while (!s->parked && s->state == STREAM_RUNNING) pthread_cond_wait(&s->parked_cond, &s->mu);
    int rc = 0;
    if (s->state == STREAM_FAILED) {
        rc = dl_fail("the data stream failed (%s): its position is lost", s->error);
    } else {
        dl_pos_out o = {0};
        serialize(s, &o);
        if (o.failed) {
            free(o.data);
            rc = dl_fail("out of memory saving the data stream's position");
        } else {
            *state = o.data;
            *size = o.len;
        }
    }
    s->pause = false;
    pthread_cond_broadcast(&s->space);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Reads a saved state into the fresh (not yet started) stream s; the
 * batches made but not taken go to *pending for the queue. */
static int restore_state(dl_data_stream *s, dl_batch **pending, size_t *pending_count) {
    dl_pos_in in = {s->cfg.resume_state, s->cfg.resume_state_size, 0, false};
    if (dl_pos_get_u64(&in) != STATE_MAGIC) return dl_fail("not a saved data stream state");
    if (dl_pos_get_u64(&in) != config_hash(s))
        return dl_fail("the state was saved by a stream with another source, seed, batch shape, "
                       "shuffle buffer, masking or tokenizer");
    if (dl_pos_get_u64(&in) != shards_hash(s))
        return dl_fail("the shard list of %s changed since the state was saved (%zu shards now)",
                       s->source, s->shard_count);
    uint64_t batches = dl_pos_get_u64(&in);
    dl_data_stats counters;
    uint64_t *words = (uint64_t *)&counters;
    for (int i = 0; i < STATS_WORDS; i++) words[i] = dl_pos_get_u64(&in);
    for (int i = 0; i < 4; i++) s->rng.s[i] = dl_pos_get_u64(&in);
    s->docs_this_pass = dl_pos_get_u64(&in);
    s->failed_before_pass = dl_pos_get_u64(&in);
    s->input_done = dl_pos_get_count(&in, 1) != 0;
    dl_doc_position pos;
    dl_pos_get_position(&in, &pos);
    if (in.failed) return dl_fail("the saved state is truncated");
    if (dl_docreader_seek(s->docs, &pos)) return -1;
    size_t T = (size_t)s->cfg.max_seq_len, V = s->text.vocab_size;
    uint64_t ready = dl_pos_get_count(&in, MAX_SHUFFLE);
    for (uint64_t i = 0; i < ready; i++) {
        dl_example ex;
        if (dl_pos_get_example(&in, T, V, &ex) || ready_push(s, ex)) return -1;
    }
    uint64_t held = dl_pos_get_count(&in, s->shuffle.cap);
    for (uint64_t i = 0; i < held; i++) {
        dl_example ex;
        if (dl_pos_get_example(&in, T, V, &ex)) return -1;
        s->shuffle.slots[s->shuffle.count++] = ex;
    }
    uint64_t n = dl_pos_get_count(&in, MAX_QUEUE + ((uint64_t)1 << 24));
    if (in.failed) return dl_fail("the saved state is truncated");
    *pending = dl_calloc(n ? n : 1, sizeof **pending);
    if (!*pending) return -1;
    for (uint64_t i = 0; i < n; i++) {
        dl_batch *b = &(*pending)[i];
        if (dl_batch_alloc(b, s->cfg.batch_size, s->cfg.max_seq_len)) break;
        *pending_count = (size_t)i + 1;
        size_t cells = (size_t)b->batch * (size_t)b->seq;
        dl_pos_get_i32s(&in, b->input_ids, cells);
        dl_pos_get_i32s(&in, b->token_type_ids, cells);
        dl_pos_get_i32s(&in, b->attention_mask, cells);
        dl_pos_get_i32s(&in, b->labels, cells);
        dl_pos_get_i32s(&in, b->sentence_order_label, (size_t)b->batch);
    }
    if (*pending_count != n) return -1;
    if (in.failed || in.pos != in.len) return dl_fail("the saved state is truncated or has trailing bytes");
    /* Batches are checked against the model when used; counters go on. */
    s->counters = counters;
    s->stats = counters;
    s->stats.batches = batches;
    DL_INFO("data", "%s: resumed at batch %" PRIu64 " (pass %" PRIu64 ", shard %llu of the pass, byte %llu)",
            s->source, batches, counters.passes, (unsigned long long)pos.pos,
            (unsigned long long)pos.offset);
    return 0;
}

/* ---- public API ------------------------------------------------------------------- */

static int check_config(const dl_data_config *c) {
    if (!c->source || !*c->source) return dl_fail("no data source given (--data)");
    if ((unsigned)c->format > DL_DATA_PARAGRAPHS) return dl_fail("unknown data format %d", (int)c->format);
    if (c->batch_size < 1 || c->batch_size > MAX_BATCH)
        return dl_fail("batch size %d is outside [1, %d]", c->batch_size, MAX_BATCH);
    if (c->max_seq_len < 8 || c->max_seq_len > MAX_SEQ)
        return dl_fail("max_seq_len %d is outside [8, %d]", c->max_seq_len, MAX_SEQ);
    if (c->shuffle_buffer < 1 || c->shuffle_buffer > MAX_SHUFFLE)
        return dl_fail("shuffle buffer %d is outside [1, %d]", c->shuffle_buffer, MAX_SHUFFLE);
    if (c->queue_batches < 1 || c->queue_batches > MAX_QUEUE)
        return dl_fail("queue of %d batches is outside [1, %d]", c->queue_batches, MAX_QUEUE);
    if (!(c->mlm_probability > 0 && c->mlm_probability < 1))
        return dl_fail("mlm probability %g is outside (0, 1)", (double)c->mlm_probability);
    if (!(c->mask_replace_prob >= 0 && c->random_replace_prob >= 0 &&
          c->mask_replace_prob + c->random_replace_prob <= 1))
        return dl_fail("mask/random replacement probabilities must be >= 0 and sum to <= 1");
    if (!(c->short_seq_prob >= 0 && c->short_seq_prob <= 1 && c->sop_swap_prob >= 0 &&
          c->sop_swap_prob <= 1))
        return dl_fail("short_seq_prob and sop_swap_prob must be in [0, 1]");
    return 0;
}

static void stream_free(dl_data_stream *s) {
    if (s->slots)
        for (size_t i = 0; i < s->queue_cap; i++) dl_batch_free(&s->slots[i]);
    free(s->slots);
    for (size_t i = 0; i < s->retained_cap; i++) dl_batch_free(&s->retained[i]);
    free(s->retained);
    for (size_t i = s->ready_head; i < s->ready_count; i++) dl_example_free(&s->ready_examples[i]);
    free(s->ready_examples);
    dl_shuffle_free(&s->shuffle);
    dl_docreader_free(s->docs);
    dl_data_free_shards(s->shards, s->shard_count);
    free(s->special);
    free(s->word_start);
    free(s->nonspecial);
    free(s->source);
    free(s->json_field);
    free(s->ca_file);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->ready);
    pthread_cond_destroy(&s->space);
    pthread_cond_destroy(&s->parked_cond);
    free(s);
}

/* The template's special tokens per pair, by probing it with one id per side. */
static int template_overhead(const dl_data_stream *s, size_t *overhead) {
    if (!s->nonspecial_count) return dl_fail("the vocabulary has no ordinary tokens");
    int32_t probe = s->nonspecial[0], *ids = NULL, *types = NULL;
    size_t n = 0;
    if (s->text.post_process(s->text.ctx, &probe, 1, &probe, 1, &ids, &types, &n)) return -1;
    free(ids);
    free(types);
    if (n < 2) return dl_fail("the post-processor dropped tokens of a pair");
    *overhead = n - 2;
    return 0;
}

int dl_data_open_text(const dl_data_config *cfg, const dl_data_text *text, dl_data_stream **out) {
    *out = NULL;
    if (check_config(cfg)) return -1;
    size_t V = text->vocab_size;
    if (!V || V > (1u << 24)) return dl_fail("vocabulary size %zu is not usable", V);
    if (text->pad_id < 0 || (size_t)text->pad_id >= V || text->mask_id < 0 ||
        (size_t)text->mask_id >= V)
        return dl_fail("the tokenizer lacks a padding or mask token");
    dl_data_stream *s = dl_calloc(1, sizeof *s);
    if (!s) return -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->ready, &ca);
    pthread_cond_init(&s->space, &ca);
    pthread_cond_init(&s->parked_cond, &ca);
    pthread_condattr_destroy(&ca);
    s->cfg = *cfg;
    static const struct {
        const char *prefix;
        enum dl_data_format format;
    } forced[] = {{"text:", DL_DATA_TEXT}, {"jsonl:", DL_DATA_JSONL},
                  {"paragraphs:", DL_DATA_PARAGRAPHS}};
    const char *spec = cfg->source;
    for (size_t i = 0; i < sizeof forced / sizeof *forced; i++)
        if (!strncmp(spec, forced[i].prefix, strlen(forced[i].prefix))) {
            spec += strlen(forced[i].prefix);
            s->cfg.format = forced[i].format;
        }
    s->source = dl_strdup(spec);
    s->json_field = dl_strdup(cfg->json_field ? cfg->json_field : "text");
    s->text = *text;
    s->special = dl_malloc(V);
    s->word_start = dl_malloc(V);
    s->nonspecial = dl_malloc(dl_mul_size(V, sizeof(int32_t)));
    if (!s->source || !s->json_field || !s->special || !s->word_start || !s->nonspecial) goto fail;
    s->cfg.source = s->source;
    s->cfg.json_field = s->json_field;
    if (cfg->tls_ca_file && !(s->ca_file = dl_strdup(cfg->tls_ca_file))) goto fail;
    s->cfg.tls_ca_file = s->ca_file;
    memcpy(s->special, text->special, V);
    memcpy(s->word_start, text->word_start, V);
    s->text.special = s->special;
    s->text.word_start = s->word_start;
    for (size_t i = 0; i < V; i++)
        if (!s->special[i]) s->nonspecial[s->nonspecial_count++] = (int32_t)i;
    size_t overhead = 0;
    if (template_overhead(s, &overhead)) goto fail;
    if ((size_t)cfg->max_seq_len < overhead + 2) {
        dl_fail("max_seq_len %d leaves no room for a pair", cfg->max_seq_len);
        goto fail;
    }
    s->max_pair_tokens = (size_t)cfg->max_seq_len - overhead;

    s->io = (dl_data_io){.timeout_s = cfg->io_timeout_s,
                         .max_retries = cfg->max_retries,
                         .retry_base_s = cfg->retry_base_s,
                         .retry_max_s = cfg->retry_max_s,
                         .stop = &s->stop,
                         .counters = &s->counters,
                         .ca_file = s->ca_file,
                         .insecure_tls = cfg->tls_insecure};
    if (dl_data_is_url(s->source) && dl_http_check_host(s->source)) goto fail;
    if (dl_data_list_shards(s->source, &s->io, &s->shards, &s->shard_count)) goto fail;
    /* Each peer starts at its own shard, so early batches differ between
     * peers even before the shuffle buffer has mixed anything. */
    dl_rng shard_rng;
    dl_rng_seed(&shard_rng, dl_data_mix_seed(cfg->seed, cfg->peer_seed, 1));
    size_t start = (size_t)dl_rng_below(&shard_rng, s->shard_count);
    dl_rng_seed(&s->rng, dl_data_mix_seed(cfg->seed, cfg->peer_seed, 2));
    if (dl_docreader_new(s->shards, s->shard_count, start, s->cfg.format, s->json_field,
                         cfg->max_line_bytes, &s->io, &s->docs) ||
        dl_shuffle_init(&s->shuffle, (size_t)cfg->shuffle_buffer))
        goto fail;
    dl_batch *pending = NULL;
    size_t pending_count = 0;
    if (cfg->resume_state && restore_state(s, &pending, &pending_count)) {
        dl_fail_context("resuming the data stream of %s", s->source);
        goto fail_pending;
    }
    s->queue_cap = (size_t)cfg->queue_batches;
    if (s->queue_cap < pending_count) s->queue_cap = pending_count;
    s->slots = dl_calloc(s->queue_cap, sizeof *s->slots);
    if (!s->slots) goto fail_pending;
    /* The batches made before the save but not taken come first. */
    for (size_t i = 0; i < pending_count; i++) s->slots[i] = pending[i];
    s->queue_count = pending_count;
    free(pending);
    pending = NULL;
    for (size_t i = pending_count; i < s->queue_cap; i++)
        if (dl_batch_alloc(&s->slots[i], cfg->batch_size, cfg->max_seq_len)) goto fail;
    DL_INFO("data", "%s: %zu shard(s), starting at shard %zu; batch %d x %d, shuffle buffer %d",
            s->source, s->shard_count, start, cfg->batch_size, cfg->max_seq_len,
            cfg->shuffle_buffer);
    if (pthread_create(&s->thread, NULL, producer_main, s)) {
        dl_fail("cannot start the batch producer thread");
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return 0;
fail_pending:
    for (size_t i = 0; i < pending_count; i++) dl_batch_free(&pending[i]);
    free(pending);
fail:
    stream_free(s);
    return -1;
}

int dl_data_next_batch(dl_data_stream *s, dl_batch *out, double timeout_s) {
    if (out->input_ids &&
        (out->batch != s->cfg.batch_size || out->seq != s->cfg.max_seq_len))
        return dl_fail("batch buffer is %d x %d, the stream makes %d x %d", out->batch, out->seq,
                       s->cfg.batch_size, s->cfg.max_seq_len);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout_s >= 0) {
        double whole = (double)(long)timeout_s;
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&s->mu);
    while (s->queue_count == 0 && s->state == STREAM_RUNNING) {
        if (timeout_s < 0) {
            pthread_cond_wait(&s->ready, &s->mu);
        } else if (pthread_cond_timedwait(&s->ready, &s->mu, &deadline)) {
            if (s->queue_count == 0 && s->state == STREAM_RUNNING) {
                pthread_mutex_unlock(&s->mu);
                return DL_DATA_TIMEOUT;
            }
        }
    }
    if (s->queue_count == 0) {
        int rc = s->state == STREAM_ENDED ? DL_DATA_END : dl_fail("data: %s", s->error);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    dl_batch *slot = &s->slots[s->queue_head];
    if (!out->input_ids && dl_batch_alloc(out, s->cfg.batch_size, s->cfg.max_seq_len)) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    size_t n = (size_t)slot->batch * (size_t)slot->seq;
    memcpy(out->input_ids, slot->input_ids, n * sizeof(int32_t));
    memcpy(out->token_type_ids, slot->token_type_ids, n * sizeof(int32_t));
    memcpy(out->attention_mask, slot->attention_mask, n * sizeof(int32_t));
    memcpy(out->labels, slot->labels, n * sizeof(int32_t));
    memcpy(out->sentence_order_label, slot->sentence_order_label,
           (size_t)slot->batch * sizeof(int32_t));
    if (s->marked && retain(s, slot)) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    s->queue_head = (s->queue_head + 1) % s->queue_cap;
    s->queue_count--;
    s->stats.batches++;
    pthread_cond_signal(&s->space);
    pthread_mutex_unlock(&s->mu);
    return DL_DATA_BATCH;
}

void dl_data_get_stats(dl_data_stream *s, dl_data_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    pthread_mutex_unlock(&s->mu);
}

void dl_data_close(dl_data_stream *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->space);
    pthread_cond_broadcast(&s->ready);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    stream_free(s);
}
