/* Resuming a stream from a saved state: the batches after the save are the
 * ones an uninterrupted stream hands out, bit for bit (token ids, types,
 * attention, labels, sentence order), for plain, gzip and paragraph shards,
 * across passes, over HTTP, and with batches taken after the mark (an
 * interrupted accumulation); a changed shard, another seed or a damaged
 * state is refused with a message saying which. */
#include "data_test_util.h"
#include "dl_test.h"

static const dl_data_text *text_model(void) {
    static dl_data_text t;
    t = fake_text();
    return &t;
}

static char *make_lines(size_t *len, int lines, int salt) {
    size_t cap = (size_t)lines * 80 + 1;
    char *t = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < lines; i++) {
        n += (size_t)snprintf(t + n, cap - n, "doc %d of %d: %d %d. এবং %d। more %d!\n", i, salt,
                              (i * 7 + salt) % 97, i % 11, i % 13, (i + salt) % 17);
        if (salt == 2 && i % 5 == 4) n += (size_t)snprintf(t + n, cap - n, "\n");
    }
    *len = n;
    return t;
}

static void data_config(dl_data_config *c, const char *source, uint64_t seed) {
    dl_data_config_default(c);
    c->source = source;
    c->batch_size = 4;
    c->max_seq_len = 48;
    c->shuffle_buffer = 64;
    c->seed = seed;
    c->peer_seed = 3;
    c->loop = true;
    c->queue_batches = 3;
    c->io_timeout_s = 10;
    c->max_retries = 3;
    c->retry_base_s = 0.01;
}

static bool same_batch(const dl_batch *a, const dl_batch *b) {
    size_t n = (size_t)a->batch * (size_t)a->seq * sizeof(int32_t);
    return a->batch == b->batch && a->seq == b->seq && !memcmp(a->input_ids, b->input_ids, n) &&
           !memcmp(a->token_type_ids, b->token_type_ids, n) &&
           !memcmp(a->attention_mask, b->attention_mask, n) && !memcmp(a->labels, b->labels, n) &&
           !memcmp(a->sentence_order_label, b->sentence_order_label, (size_t)a->batch * 4);
}

/* The first n batches of an uninterrupted stream. */
static dl_batch *reference(const dl_data_config *c, int n) {
    dl_data_stream *s = NULL;
    CHECK_OK(dl_data_open_text(c, text_model(), &s));
    if (!s) return NULL;
    dl_batch *all = calloc((size_t)n, sizeof *all);
    for (int i = 0; i < n; i++) CHECK(dl_data_next_batch(s, &all[i], 30) == DL_DATA_BATCH);
    dl_data_close(s);
    return all;
}

/* Takes `at` batches, marks (as the trainer marks at each optimizer step),
 * takes `extra` more (an accumulation cut short), saves; a stream opened from
 * the state must hand out batches at, at + 1, ... of the reference. */
static int resume_and_compare(const dl_data_config *c, const dl_batch *ref, int total, int at,
                              int extra, int queue) {
    dl_data_config a = *c;
    a.queue_batches = queue;
    dl_data_stream *s = NULL;
    if (dl_data_open_text(&a, text_model(), &s)) return -1;
    dl_batch b = {0};
    CHECK_OK(dl_data_mark(s));
    for (int i = 0; i < at + extra; i++) {
        if (i == at) CHECK_OK(dl_data_mark(s));
        CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH);
        CHECK_MSG(same_batch(&b, &ref[i]), "before the save: batch %d differs", i);
    }
    if (extra == 0) CHECK_OK(dl_data_mark(s));
    uint8_t *state = NULL;
    size_t size = 0;
    int rc = dl_data_save_state(s, &state, &size);
    CHECK_OK(rc);
    /* The stream goes on undisturbed after a save. */
    CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH && same_batch(&b, &ref[at + extra]));
    dl_data_close(s);
    if (rc) return -1;
    dl_data_config r = *c;
    r.resume_state = state;
    r.resume_state_size = size;
    dl_data_stream *t = NULL;
    if (dl_data_open_text(&r, text_model(), &t)) {
        free(state);
        dl_batch_free(&b);
        return -1;
    }
    int bad = -1;
    for (int i = at; i < total; i++) {
        CHECK(dl_data_next_batch(t, &b, 30) == DL_DATA_BATCH);
        if (!same_batch(&b, &ref[i]) && bad < 0) bad = i;
    }
    CHECK_MSG(bad < 0, "resumed at %d (+%d, queue %d, %zu bytes of state): batch %d differs", at,
              extra, queue, size, bad);
    dl_data_stats st;
    dl_data_get_stats(t, &st);
    CHECK(st.batches == (uint64_t)total);
    dl_data_close(t);
    dl_batch_free(&b);
    free(state);
    return 0;
}

static void check_source(const char *what, const char *source, int total) {
    dl_data_config c;
    data_config(&c, source, 41);
    dl_batch *ref = reference(&c, total);
    if (!ref) return;
    const int ats[] = {0, 1, 7, total / 2, total - 5};
    for (size_t i = 0; i < sizeof ats / sizeof *ats; i++)
        for (int extra = 0; extra <= 3; extra += 3)
            if (resume_and_compare(&c, ref, total, ats[i], extra, 1 + (int)i % 3))
                CHECK_MSG(0, "%s at %d: %s", what, ats[i], dl_error());
    printf("%s: %d batches, resumed exactly at each of %zu points\n", what, total,
           sizeof ats / sizeof *ats);
    for (int i = 0; i < total; i++) dl_batch_free(&ref[i]);
    free(ref);
}

static uint8_t *state_at(const dl_data_config *c, int at, size_t *size) {
    dl_data_stream *s = NULL;
    CHECK_OK(dl_data_open_text(c, text_model(), &s));
    if (!s) return NULL;
    dl_batch b = {0};
    for (int i = 0; i < at; i++) CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH);
    uint8_t *state = NULL;
    CHECK(dl_data_save_state(s, &state, size) == -1); /* no mark yet */
    CHECK(strstr(dl_error(), "mark") != NULL);
    CHECK_OK(dl_data_mark(s));
    CHECK_OK(dl_data_save_state(s, &state, size));
    dl_data_close(s);
    dl_batch_free(&b);
    return state;
}

static void expect_refused(const dl_data_config *c, const uint8_t *state, size_t size,
                           const char *why, const char *needle) {
    dl_data_config r = *c;
    r.resume_state = state;
    r.resume_state_size = size;
    dl_data_stream *s = NULL;
    int rc = dl_data_open_text(&r, text_model(), &s);
    CHECK_MSG(rc == -1, "%s: accepted", why);
    if (rc == 0) {
        dl_data_close(s);
        return;
    }
    CHECK_MSG(strstr(dl_error(), needle) != NULL, "%s: error '%s' lacks '%s'", why, dl_error(), needle);
    printf("%s: %s\n", why, dl_error());
}

static void check_refusals(const char *dir) {
    char path[400];
    snprintf(path, sizeof path, "%s/one.txt", dir);
    size_t len;
    char *t = make_lines(&len, 400, 5);
    write_bytes(path, t, len, "wb");
    dl_data_config c;
    data_config(&c, path, 7);
    size_t size = 0;
    uint8_t *state = state_at(&c, 30, &size);
    if (!state) return;
    dl_data_config other = c;
    other.seed = 8;
    expect_refused(&other, state, size, "another seed", "another source, seed");
    expect_refused(&c, state, size / 2, "a truncated state", "truncated");
    uint8_t junk[64] = {1, 2, 3};
    expect_refused(&c, junk, sizeof junk, "garbage", "not a saved data stream state");
    /* The file changed before the position (a line added at its start shifts
     * every byte after it). */
    write_bytes(path, "a new first line\n", 17, "wb");
    write_bytes(path, t, len, "ab");
    expect_refused(&c, state, size, "an edited shard", "changed since");
    /* ... and a file cut short of it. */
    write_bytes(path, t, len / 20, "wb");
    expect_refused(&c, state, size, "a shortened shard", "changed since");
    free(state);
    free(t);
}

int main(void) {
    char *dir = test_tmpdir();
    if (!dir) return 1;
    char shards[300], path[400], para[400];
    snprintf(shards, sizeof shards, "%s/shards", dir);
    dl_mkdirs(shards);
    size_t len, gl;
    char *t = make_lines(&len, 700, 0);
    snprintf(path, sizeof path, "%s/a.txt", shards);
    write_bytes(path, t, len, "wb");
    free(t);
    t = make_lines(&len, 500, 1);
    unsigned char *g = gzip_member(t, len / 2, &gl);
    snprintf(path, sizeof path, "%s/b.txt.gz", shards);
    write_bytes(path, g, gl, "wb");
    free(g);
    g = gzip_member(t + len / 2, len - len / 2, &gl);
    write_bytes(path, g, gl, "ab");
    free(g);
    free(t);
    t = make_lines(&len, 300, 2);
    snprintf(para, sizeof para, "paragraphs:%s/p.txt", dir);
    snprintf(path, sizeof path, "%s/p.txt", dir);
    write_bytes(path, t, len, "wb");
    free(t);

    /* ~100 batches a pass over the shards: 260 crosses two passes. */
    check_source("plain + gzip shards", shards, 260);
    check_source("paragraphs", para, 120);
    dl_data_server *srv = NULL;
    CHECK_OK(dl_data_server_start(shards, "127.0.0.1", 0, &srv));
    if (srv) {
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/", dl_data_server_port(srv));
        check_source("http shards (Range for the plain one)", url, 160);
        dl_data_server_stop(srv);
    }
    check_refusals(dir);
    rm_rf(dir);
    return dl_test_finish("test_data_resume");
}
