/* The batch pipeline with a hand-made text model: MLM statistics, special
 * tokens never masked, labels consistent with inputs, SOP balance and
 * ordering, whole-word masking, padding, determinism and per-peer seeds. */
#include "data_test_util.h"
#include "dl_test.h"

enum { T = 128, B = 16 };

/* Documents whose numbers increase through each document: token order is
 * recoverable from ids, so swapped pairs can be recognised. */
static void write_number_corpus(const char *path, int docs, uint64_t seed) {
    FILE *f = fopen(path, "wb");
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (int d = 0; d < docs; d++) {
        int sentences = 2 + (int)dl_rng_below(&rng, 60);
        int value = 0;
        for (int s = 0; s < sentences && value < 480; s++) {
            int words = 1 + (int)dl_rng_below(&rng, 7);
            for (int w = 0; w < words && value < 489; w++) fprintf(f, "%s%d", w ? " " : "", value++);
            fputs(s % 3 == 2 ? "। " : ". ", f);
        }
        fputc('\n', f);
    }
    fclose(f);
}

static void write_word_corpus(const char *path, int docs, uint64_t seed) {
    FILE *f = fopen(path, "wb");
    dl_rng rng;
    dl_rng_seed(&rng, seed);
    for (int d = 0; d < docs; d++) {
        int words = 20 + (int)dl_rng_below(&rng, 200);
        for (int w = 0; w < words; w++) {
            int len = 2 + (int)dl_rng_below(&rng, 6);
            for (int k = 0; k < len; k++) fputc('a' + (int)dl_rng_below(&rng, 6), f);
            fputs(w % 11 == 10 ? ". " : " ", f);
        }
        fputc('\n', f);
    }
    fclose(f);
}

static dl_data_config base_config(const char *source) {
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = source;
    cfg.batch_size = B;
    cfg.max_seq_len = T;
    cfg.shuffle_buffer = 100;
    cfg.seed = 1234;
    cfg.peer_seed = 7;
    cfg.loop = false;
    return cfg;
}

static void test_masking_and_sop(const char *corpus) {
    dl_data_config cfg = base_config(corpus);
    dl_data_text text = fake_text();
    dl_data_stream *s;
    CHECK_OK(dl_data_open_text(&cfg, &text, &s));
    if (!s) return;
    dl_batch b = {0};
    long candidates = 0, selected = 0, as_mask = 0, as_self = 0, as_random = 0;
    long swapped = 0, examples = 0, order_ok = 0, special_labels = 0, bad_layout = 0;
    int batches = 0, rc;
    while ((rc = dl_data_next_batch(s, &b, 30)) == DL_DATA_BATCH) {
        batches++;
        CHECK(b.batch == B && b.seq == T);
        for (int r = 0; r < B; r++) {
            const int32_t *ids = b.input_ids + r * T, *types = b.token_type_ids + r * T;
            const int32_t *att = b.attention_mask + r * T, *lab = b.labels + r * T;
            int len = 0;
            while (len < T && att[len]) len++;
            for (int t = len; t < T; t++)
                if (att[t] || ids[t] != FAKE_PAD || lab[t] != -100 || types[t]) bad_layout++;
            /* [CLS] A [SEP] B [SEP] */
            int sep1 = -1;
            for (int t = 1; t < len; t++)
                if (ids[t] == FAKE_SEP && lab[t] == -100) {
                    sep1 = t;
                    break;
                }
            if (ids[0] != FAKE_CLS || sep1 < 2 || ids[len - 1] != FAKE_SEP || sep1 >= len - 2) {
                bad_layout++;
                continue;
            }
            int a_max = -1, b_min = 1 << 30, a_min = 1 << 30, b_max = -1;
            for (int t = 0; t < len; t++) {
                int32_t orig = lab[t] != -100 ? lab[t] : ids[t];
                bool structural = t == 0 || t == sep1 || t == len - 1;
                if (types[t] != (t > sep1)) bad_layout++;
                if (structural) {
                    if (lab[t] != -100) special_labels++;
                    continue;
                }
                if (orig < 10) special_labels++;
                candidates++;
                if (lab[t] != -100) {
                    selected++;
                    if (ids[t] == FAKE_MASK) as_mask++;
                    else if (ids[t] == lab[t]) as_self++;
                    else {
                        as_random++;
                        if (ids[t] < 10) special_labels++; /* random token must not be special */
                    }
                } else if (ids[t] < 10) {
                    special_labels++; /* an unselected position must hold its original id */
                }
                if (t < sep1) {
                    if (orig > a_max) a_max = orig;
                    if (orig < a_min) a_min = orig;
                } else {
                    if (orig < b_min) b_min = orig;
                    if (orig > b_max) b_max = orig;
                }
            }
            examples++;
            int sop = b.sentence_order_label[r];
            swapped += sop;
            if ((sop == 0 && a_max < b_min) || (sop == 1 && a_min > b_max)) order_ok++;
        }
    }
    CHECK(rc == DL_DATA_END);
    dl_data_stats st;
    dl_data_get_stats(s, &st);
    dl_data_close(s);
    dl_batch_free(&b);
    CHECK(batches > 50);
    CHECK(st.batches == (uint64_t)batches);
    CHECK(st.documents == 1500 && st.passes == 1);
    CHECK(st.examples >= (uint64_t)examples && st.examples < (uint64_t)examples + B);
    CHECK(bad_layout == 0);
    CHECK(special_labels == 0);
    double sel = (double)selected / (double)candidates;
    double pm = (double)as_mask / (double)selected, ps = (double)as_self / (double)selected,
           pr = (double)as_random / (double)selected;
    CHECK_MSG(sel > 0.14 && sel < 0.165, "selected %.4f of %ld candidates", sel, candidates);
    CHECK_MSG(pm > 0.78 && pm < 0.82, "[MASK] share %.4f", pm);
    CHECK_MSG(ps > 0.085 && ps < 0.115, "kept share %.4f", ps);
    CHECK_MSG(pr > 0.085 && pr < 0.115, "random share %.4f", pr);
    double sw = (double)swapped / (double)examples;
    CHECK_MSG(sw > 0.46 && sw < 0.54, "swapped %.4f of %ld", sw, examples);
    CHECK_MSG(order_ok == examples, "%ld of %ld pairs in the order their label says", order_ok,
              examples);
    printf("masking: %ld examples, %.4f selected, %.4f/%.4f/%.4f mask/random/kept, %.4f swapped\n",
           examples, sel, pm, pr, ps, sw);
}

static void test_whole_word(const char *corpus) {
    dl_data_config cfg = base_config(corpus);
    cfg.whole_word_mask = true;
    dl_data_text text = fake_text();
    dl_data_stream *s;
    CHECK_OK(dl_data_open_text(&cfg, &text, &s));
    if (!s) return;
    dl_batch b = {0};
    long words = 0, split_words = 0, selected = 0, candidates = 0;
    while (dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH) {
        for (int r = 0; r < B; r++) {
            const int32_t *ids = b.input_ids + r * T, *lab = b.labels + r * T;
            for (int t = 1; t < T && b.attention_mask[r * T + t]; t++) {
                int32_t orig = lab[t] != -100 ? lab[t] : ids[t];
                if (orig < 10) continue;
                candidates++;
                selected += lab[t] != -100;
                /* a continuation piece shares its word's fate */
                if (orig >= 500) {
                    int32_t prev = lab[t - 1] != -100 ? lab[t - 1] : ids[t - 1];
                    if (prev >= 10 && prev < 500) {
                        words++;
                        if ((lab[t] != -100) != (lab[t - 1] != -100)) split_words++;
                    }
                }
            }
        }
    }
    dl_data_close(s);
    dl_batch_free(&b);
    CHECK(words > 1000);
    CHECK_MSG(split_words == 0, "%ld of %ld two-piece words masked partly", split_words, words);
    double sel = (double)selected / (double)candidates;
    CHECK_MSG(sel > 0.13 && sel < 0.16, "whole-word selected %.4f", sel);
}

/* Hash of the first n batches of a configuration. */
static uint64_t stream_hash(const dl_data_config *cfg, int n) {
    dl_data_text text = fake_text();
    dl_data_stream *s;
    if (dl_data_open_text(cfg, &text, &s)) return 0;
    dl_batch b = {0};
    uint64_t h = 0;
    size_t cells = (size_t)cfg->batch_size * (size_t)cfg->max_seq_len * sizeof(int32_t);
    for (int i = 0; i < n && dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH; i++) {
        h = dl_hash64(b.input_ids, cells, h);
        h = dl_hash64(b.token_type_ids, cells, h);
        h = dl_hash64(b.attention_mask, cells, h);
        h = dl_hash64(b.labels, cells, h);
        h = dl_hash64(b.sentence_order_label, (size_t)cfg->batch_size * sizeof(int32_t), h);
    }
    dl_data_close(s);
    dl_batch_free(&b);
    return h;
}

static void test_determinism(const char *dir) {
    dl_data_config cfg = base_config(dir);
    cfg.loop = true;
    cfg.queue_batches = 2;
    uint64_t h1 = stream_hash(&cfg, 40), h2 = stream_hash(&cfg, 40);
    CHECK(h1 != 0 && h1 == h2);
    cfg.queue_batches = 7; /* queue depth changes timing only */
    CHECK(stream_hash(&cfg, 40) == h1);
    dl_data_config other = cfg;
    other.seed = 1235;
    CHECK(stream_hash(&other, 40) != h1);
    other = cfg;
    other.peer_seed = 8;
    CHECK(stream_hash(&other, 40) != h1);
}

/* Shard i holds only the numbers 100 i .. 100 i + 99 (ids 10 + N in the
 * hand-made text model), so any token tells which shard it came from. */
static void write_marked_shard(const char *path, int shard, int docs) {
    FILE *f = fopen(path, "wb");
    for (int d = 0; d < docs; d++) {
        for (int s = 0; s < 6; s++) {
            for (int w = 0; w < 5; w++) fprintf(f, "%s%d", w ? " " : "", 100 * shard + (d * 7 + s * 5 + w) % 100);
            fputs(". ", f);
        }
        fputc('\n', f);
    }
    fclose(f);
}

/* The shard a batch's first example came from: the shard of most of its
 * non-special tokens (masked ones read through their labels). */
static int shard_of_first_example(const dl_batch *b) {
    int votes[4] = {0};
    for (int t = 0; t < b->seq && b->attention_mask[t]; t++) {
        int32_t orig = b->labels[t] != -100 ? b->labels[t] : b->input_ids[t];
        if (orig >= 10 && orig < 410) votes[(orig - 10) / 100]++;
    }
    int best = 0;
    for (int i = 1; i < 4; i++)
        if (votes[i] > votes[best]) best = i;
    return votes[best] > 0 ? best : -1;
}

/* Peers read the same documents, each starting at a shard of its own: the
 * starting shard is read off the first batch (no shuffling), not predicted
 * from the seeds. */
static void test_peers_cover_the_same_data(const char *dir) {
    char marked[300], path[400];
    snprintf(marked, sizeof marked, "%s/../marked", dir);
    CHECK_OK(dl_mkdirs(marked));
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/part-%02d.txt", marked, i);
        write_marked_shard(path, i, 60);
    }
    dl_data_text text = fake_text();
    int starts_seen[4] = {0}, unknown = 0;
    for (uint64_t peer = 0; peer < 8; peer++) {
        dl_data_config cfg = base_config(marked);
        cfg.peer_seed = peer;
        cfg.shuffle_buffer = 1;
        dl_data_stream *s;
        CHECK_OK(dl_data_open_text(&cfg, &text, &s));
        if (!s) continue;
        dl_batch b = {0};
        int batches = 0;
        while (dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH) {
            if (batches++ == 0) {
                int shard = shard_of_first_example(&b);
                if (shard < 0) unknown++;
                else starts_seen[shard]++;
            }
        }
        dl_data_stats st;
        dl_data_get_stats(s, &st);
        CHECK(st.documents == 240 && st.passes == 1 && st.shards == 4);
        dl_data_close(s);
        dl_batch_free(&b);
    }
    CHECK(unknown == 0);
    int distinct = 0;
    for (int i = 0; i < 4; i++) distinct += starts_seen[i] > 0;
    CHECK_MSG(distinct >= 2, "8 peers started at %d distinct shards", distinct);
    printf("starting shards of 8 peers: %d %d %d %d\n", starts_seen[0], starts_seen[1], starts_seen[2],
           starts_seen[3]);
}

static void test_errors(const char *dir) {
    dl_data_text text = fake_text();
    dl_data_stream *s;
    dl_data_config cfg = base_config("/nonexistent/dedloc-corpus");
    CHECK(dl_data_open_text(&cfg, &text, &s) == -1);
    cfg = base_config(dir);
    cfg.max_seq_len = 4;
    CHECK(dl_data_open_text(&cfg, &text, &s) == -1);
    cfg = base_config(dir);
    cfg.mlm_probability = 0;
    CHECK(dl_data_open_text(&cfg, &text, &s) == -1);
    /* A source with no documents fails at run time with a message, not a hang. */
    char path[300];
    snprintf(path, sizeof path, "%s/../empty-%d.txt", dir, (int)getpid());
    write_bytes(path, "\n\n", 2, "wb");
    cfg = base_config(path);
    cfg.loop = true;
    CHECK_OK(dl_data_open_text(&cfg, &text, &s));
    dl_batch b = {0};
    CHECK(dl_data_next_batch(s, &b, 30) == -1);
    CHECK(strstr(dl_error(), "no usable documents") != NULL);
    dl_data_close(s);
    unlink(path);
    /* Closing a stream that is still producing returns promptly. */
    cfg = base_config(dir);
    cfg.loop = true;
    CHECK_OK(dl_data_open_text(&cfg, &text, &s));
    CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_BATCH);
    dl_data_close(s);
    dl_batch_free(&b);
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    char *dir = test_tmpdir();
    char numbers[300], words[300], shards[300], path[400];
    snprintf(numbers, sizeof numbers, "%s/numbers.txt", dir);
    snprintf(words, sizeof words, "%s/words.txt", dir);
    snprintf(shards, sizeof shards, "%s/shards", dir);
    write_number_corpus(numbers, 1500, 11);
    write_word_corpus(words, 400, 12);
    dl_mkdirs(shards);
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/part-%02d.txt", shards, i);
        write_number_corpus(path, 100, 20 + (uint64_t)i);
    }
    test_masking_and_sop(numbers);
    test_whole_word(words);
    test_determinism(shards);
    test_peers_cover_the_same_data(shards);
    test_errors(shards);
    rm_rf(dir);
    return dl_test_finish("test_data_pipeline");
}
