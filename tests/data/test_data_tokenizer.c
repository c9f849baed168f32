/* The pipeline on the real tokenizer: the demo Bengali tokenizer over the
 * Bengali fixtures. Pairs hold exactly the document's ids in order, masking
 * statistics hold, whole words stay whole, special tokens are never
 * selected, and the stream is deterministic. */
#include "data_test_util.h"
#include "dedloc/text.h"
#include "dl_test.h"

static const char *tokenizer_path = DEDLOC_SOURCE_DIR "/assets/tokenizer_bn_demo.json";
static const char *paragraphs = DEDLOC_SOURCE_DIR "/tests/fixtures/data/bn_paragraphs.txt";
static const char *corpus_sample = DEDLOC_SOURCE_DIR "/tests/fixtures/text/corpus_bn_sample.txt";

/* Original id at a position: the label where one was selected. */
static int32_t original(const dl_batch *b, size_t i) {
    return b->labels[i] != -100 ? b->labels[i] : b->input_ids[i];
}

static void test_pairs_follow_documents(const dl_tokenizer *tok) {
    enum { T = 512 };
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = paragraphs;
    cfg.batch_size = 1;
    cfg.max_seq_len = T;
    cfg.shuffle_buffer = 1;   /* keep document order */
    cfg.short_seq_prob = 0;   /* one pair per document */
    cfg.sop_swap_prob = 0;
    cfg.loop = false;
    dl_data_stream *s;
    CHECK_OK(dl_data_open(&cfg, tok, &s));
    if (!s) return;
    char *text;
    size_t size;
    CHECK_OK(dl_read_file(paragraphs, 1 << 20, &text, &size));
    int32_t cls = dl_tokenizer_token_to_id(tok, "[CLS]"), sep = dl_tokenizer_token_to_id(tok, "[SEP]");
    dl_batch b = {0};
    int docs = 0, matched = 0, boundary_ok = 0, multi = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        dl_span *spans;
        size_t nspans;
        CHECK_OK(dl_split_sentences(line, strlen(line), &spans, &nspans));
        int32_t expect[T];
        size_t n = 0, boundaries[64], nb = 0;
        for (size_t i = 0; i < nspans; i++) {
            int32_t *ids;
            size_t k;
            CHECK_OK(dl_tokenizer_encode(tok, line + spans[i].start, spans[i].len, &ids, &k, NULL));
            for (size_t j = 0; j < k && n < T; j++) expect[n++] = ids[j];
            if (nb < 64) boundaries[nb++] = n;
            free(ids);
        }
        free(spans);
        docs++;
        if (dl_data_next_batch(s, &b, 30) != DL_DATA_BATCH) break;
        CHECK(b.input_ids[0] == cls);
        size_t len = 0;
        while (len < T && b.attention_mask[len]) len++;
        /* [CLS] A [SEP] B [SEP] -> A B */
        int32_t got[T];
        size_t g = 0, a_len = 0;
        for (size_t t = 1; t + 1 < len; t++) {
            if (b.token_type_ids[t] == 0 && b.token_type_ids[t + 1] == 1) {
                CHECK(b.input_ids[t] == sep && b.labels[t] == -100);
                a_len = g;
                continue;
            }
            got[g++] = original(&b, t);
        }
        CHECK(b.input_ids[len - 1] == sep);
        if (g == n && !memcmp(got, expect, n * sizeof *got)) matched++;
        if (nspans >= 2) {
            multi++;
            for (size_t i = 0; i + 1 < nb; i++)
                if (boundaries[i] == a_len) boundary_ok++;
        }
    }
    CHECK(dl_data_next_batch(s, &b, 30) == DL_DATA_END);
    CHECK(docs == 12);
    CHECK_MSG(matched == docs, "%d of %d pairs hold their document's ids", matched, docs);
    CHECK_MSG(boundary_ok == multi, "%d of %d splits at a sentence boundary", boundary_ok, multi);
    dl_data_stats st;
    dl_data_get_stats(s, &st);
    CHECK(st.documents == 12 && st.examples == 12 && st.sentences >= 40);
    dl_data_close(s);
    dl_batch_free(&b);
    free(text);
}

static void check_masking(const dl_tokenizer *tok, const char *source, bool whole_word) {
    enum { T = 128, B = 8 };
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = source;
    cfg.batch_size = B;
    cfg.max_seq_len = T;
    cfg.shuffle_buffer = 64;
    cfg.whole_word_mask = whole_word;
    cfg.seed = 5;
    dl_data_stream *s;
    CHECK_OK(dl_data_open(&cfg, tok, &s));
    if (!s) return;
    int32_t mask = dl_tokenizer_token_to_id(tok, "[MASK]");
    size_t V = dl_tokenizer_vocab_size(tok);
    dl_batch b = {0};
    long candidates = 0, selected = 0, as_mask = 0, as_self = 0, bad = 0, swapped = 0, rows = 0;
    long split_words = 0, words = 0, wrong_count = 0;
    for (int i = 0; i < 150 && dl_data_next_batch(s, &b, 60) == DL_DATA_BATCH; i++) {
        for (int r = 0; r < B; r++, rows++) {
            swapped += b.sentence_order_label[r];
            long row_candidates = candidates, row_selected = selected;
            for (int t = 0; t < T; t++) {
                size_t k = (size_t)r * T + (size_t)t;
                int32_t id = b.input_ids[k], orig = original(&b, k);
                if (id < 0 || (size_t)id >= V || orig < 0 || (size_t)orig >= V) {
                    bad++;
                    continue;
                }
                if (!b.attention_mask[k]) {
                    if (b.labels[k] != -100) bad++;
                    continue;
                }
                if (dl_tokenizer_is_special(tok, orig)) {
                    if (b.labels[k] != -100) bad++; /* a special token was selected */
                    continue;
                }
                candidates++;
                if (b.labels[k] == -100) {
                    if (dl_tokenizer_is_special(tok, id)) bad++;
                } else {
                    selected++;
                    if (id == mask) as_mask++;
                    else if (id == orig) as_self++;
                    else if (dl_tokenizer_is_special(tok, id)) bad++;
                }
                if (t > 0 && !dl_tokenizer_starts_word(tok, orig)) {
                    int32_t prev = original(&b, k - 1);
                    if (!dl_tokenizer_is_special(tok, prev)) {
                        words++;
                        if ((b.labels[k] != -100) != (b.labels[k - 1] != -100)) split_words++;
                    }
                }
            }
            /* max(1, round(15% of the candidates)), exactly; whole words may fall short */
            row_candidates = candidates - row_candidates;
            row_selected = selected - row_selected;
            long want = (long)((float)row_candidates * 0.15f + 0.5f);
            if (want < 1 && row_candidates > 0) want = 1;
            if (whole_word ? row_selected > want : row_selected != want) wrong_count++;
        }
    }
    dl_data_close(s);
    dl_batch_free(&b);
    CHECK(rows == 150 * B);
    CHECK_MSG(bad == 0, "%ld inconsistent positions", bad);
    double sel = (double)selected / (double)candidates, pm = (double)as_mask / (double)selected,
           ps = (double)as_self / (double)selected, sw = (double)swapped / (double)rows;
    CHECK_MSG(wrong_count == 0, "%ld rows with a wrong number of selected tokens", wrong_count);
    /* Long sequences: the rate is 15% up to rounding. (Short ones select at
     * least one token, so a corpus of short lines runs higher.) */
    if (source == paragraphs)
        CHECK_MSG(sel > (whole_word ? 0.13 : 0.14) && sel < 0.165, "selected %.4f", sel);
    CHECK_MSG(pm > 0.76 && pm < 0.84, "[MASK] %.4f", pm);
    CHECK_MSG(ps > 0.07 && ps < 0.13, "kept %.4f", ps);
    CHECK_MSG(sw > 0.44 && sw < 0.56, "swapped %.4f", sw);
    if (whole_word) {
        CHECK(words > 500);
        CHECK_MSG(split_words == 0, "%ld of %ld continuation pieces masked apart from their word",
                  split_words, words);
    } else {
        /* without whole-word masking pieces are chosen independently */
        CHECK(split_words > 0);
    }
    printf("%s%s: selected %.4f, [MASK] %.4f, kept %.4f, swapped %.4f\n", source,
           whole_word ? " (whole words)" : "", sel, pm, ps, sw);
}

static uint64_t stream_hash(const dl_tokenizer *tok, const char *source, uint64_t peer) {
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = source;
    cfg.batch_size = 4;
    cfg.max_seq_len = 64;
    cfg.shuffle_buffer = 32;
    cfg.peer_seed = peer;
    dl_data_stream *s;
    if (dl_data_open(&cfg, tok, &s)) return 0;
    dl_batch b = {0};
    uint64_t h = 0;
    for (int i = 0; i < 30 && dl_data_next_batch(s, &b, 60) == DL_DATA_BATCH; i++) {
        h = dl_hash64(b.input_ids, 4 * 64 * sizeof(int32_t), h);
        h = dl_hash64(b.labels, 4 * 64 * sizeof(int32_t), h);
        h = dl_hash64(b.token_type_ids, 4 * 64 * sizeof(int32_t), h);
        h = dl_hash64(b.sentence_order_label, 4 * sizeof(int32_t), h);
    }
    dl_data_close(s);
    dl_batch_free(&b);
    return h;
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    dl_tokenizer *tok;
    CHECK_OK(dl_tokenizer_load(tokenizer_path, &tok));
    if (!tok) return dl_test_finish("test_data_tokenizer");
    test_pairs_follow_documents(tok);
    check_masking(tok, paragraphs, false);
    check_masking(tok, paragraphs, true);
    uint64_t h = stream_hash(tok, paragraphs, 1);
    CHECK(h != 0 && h == stream_hash(tok, paragraphs, 1));
    CHECK(h != stream_hash(tok, paragraphs, 2));
    /* a tracked fixture: missing means a broken checkout, a failure */
    CHECK_MSG(dl_file_exists(corpus_sample), "%s is missing", corpus_sample);
    if (dl_file_exists(corpus_sample)) {
        check_masking(tok, corpus_sample, false);
        check_masking(tok, corpus_sample, true);
    }
    dl_tokenizer_free(tok);
    return dl_test_finish("test_data_tokenizer");
}
