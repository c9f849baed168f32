/* What resuming the data stream costs at a small and at a large position:
 * re-reading it up to there (the fast-forward a checkpoint without a stream
 * position needs, `dedloc train --replay-data`) against opening it at the
 * position a checkpoint records.
 *
 *   build/bench_resume [--data SOURCE] [--tokenizer FILE] [--batch B] [--seq T]
 *                      [--shuffle N] [--at LIST] [--json]
 *
 * For each position K of --at (micro-batches drawn before the checkpoint): a
 * stream is run to K and its state saved (untimed); then, timed, (a) a fresh
 * stream takes K batches and the next one, (b) a stream opened from the
 * state takes the next one. Both next batches must be the same bits. Prints
 * a table, then one JSON line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/data.h"
#include "dedloc/text.h"
#include "dedloc/util.h"

static void usage(FILE *out) {
    fprintf(out, "usage: bench_resume [--data SOURCE] [--tokenizer FILE] [--batch B] [--seq T]\n"
                 "                    [--shuffle N] [--at K1,K2,...] [--json]\n"
                 "defaults: --data tests/fixtures/text/corpus_bn_sample.txt, the demo tokenizer,\n"
                 "--batch 8 --seq 128 --shuffle 10000 --at 40,4000; run from the repository root\n");
}

static bool same(const dl_batch *a, const dl_batch *b) {
    size_t n = (size_t)a->batch * (size_t)a->seq * sizeof(int32_t);
    return !memcmp(a->input_ids, b->input_ids, n) && !memcmp(a->labels, b->labels, n) &&
           !memcmp(a->attention_mask, b->attention_mask, n) &&
           !memcmp(a->token_type_ids, b->token_type_ids, n) &&
           !memcmp(a->sentence_order_label, b->sentence_order_label, (size_t)a->batch * 4);
}

static int take(dl_data_stream *s, dl_batch *b, long n) {
    for (long i = 0; i < n; i++)
        if (dl_data_next_batch(s, b, -1) != DL_DATA_BATCH) return dl_fail_context("batch %ld", i);
    return 0;
}

typedef struct {
    long at;
    double replay_s, seek_s;
    size_t state_bytes;
} result;

static int measure(const dl_data_config *base, const dl_tokenizer *tok, long at, result *r) {
    dl_data_stream *s = NULL;
    dl_batch b = {0}, replayed = {0}, sought = {0};
    uint8_t *state = NULL;
    size_t size = 0;
    int rc = dl_data_open(base, tok, &s);
    if (!rc) rc = take(s, &b, at);
    if (!rc) rc = dl_data_mark(s);
    if (!rc) rc = dl_data_save_state(s, &state, &size);
    dl_data_close(s);
    s = NULL;
    double t0 = dl_now();
    if (!rc) rc = dl_data_open(base, tok, &s);
    if (!rc) rc = take(s, &b, at);
    if (!rc) rc = take(s, &replayed, 1);
    r->replay_s = dl_now() - t0;
    dl_data_close(s);
    s = NULL;
    dl_data_config c = *base;
    c.resume_state = state;
    c.resume_state_size = size;
    t0 = dl_now();
    if (!rc) rc = dl_data_open(&c, tok, &s);
    if (!rc) rc = take(s, &sought, 1);
    r->seek_s = dl_now() - t0;
    dl_data_close(s);
    if (!rc && !same(&replayed, &sought)) rc = dl_fail("at %ld: the resumed batch differs from the replayed one", at);
    r->at = at;
    r->state_bytes = size;
    free(state);
    dl_batch_free(&b);
    dl_batch_free(&replayed);
    dl_batch_free(&sought);
    return rc;
}

int main(int argc, char **argv) {
    const char *data = "tests/fixtures/text/corpus_bn_sample.txt", *tok_path = NULL, *at_list = "40,4000";
    int batch = 8, seq = 128, shuffle = 10000, json = 0;
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},  {"tokenizer", required_argument, NULL, 'k'},
        {"batch", required_argument, NULL, 'b'}, {"seq", required_argument, NULL, 't'},
        {"shuffle", required_argument, NULL, 's'}, {"at", required_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data = optarg; break;
        case 'k': tok_path = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 't': seq = atoi(optarg); break;
        case 's': shuffle = atoi(optarg); break;
        case 'a': at_list = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    dl_tokenizer *tok = NULL;
    if (tok_path ? dl_tokenizer_load(tok_path, &tok) : dl_tokenizer_load_demo(&tok)) {
        fprintf(stderr, "bench_resume: %s\n", dl_error());
        return 1;
    }
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = data;
    cfg.batch_size = batch;
    cfg.max_seq_len = seq;
    cfg.shuffle_buffer = shuffle;
    cfg.loop = true;
    result results[16];
    int n = 0, rc = 0;
    for (const char *p = at_list; *p && n < 16 && !rc;) {
        long at = strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
        rc = measure(&cfg, tok, at, &results[n]);
        if (!rc) n++;
    }
    if (rc) fprintf(stderr, "bench_resume: %s\n", dl_error());
    if (!json) {
        printf("%-14s %12s %12s %12s\n", "micro-batches", "replay s", "seek s", "state bytes");
        for (int i = 0; i < n; i++)
            printf("%-14ld %12.3f %12.3f %12zu\n", results[i].at, results[i].replay_s, results[i].seek_s,
                   results[i].state_bytes);
    }
    printf("{\"bench\": \"resume\", \"data\": \"%s\", \"batch\": %d, \"seq\": %d, \"shuffle\": %d, \"points\": [",
           data, batch, seq, shuffle);
    for (int i = 0; i < n; i++)
        printf("%s{\"at\": %ld, \"replay_s\": %.4f, \"seek_s\": %.4f, \"state_bytes\": %zu}", i ? ", " : "",
               results[i].at, results[i].replay_s, results[i].seek_s, results[i].state_bytes);
    printf("]}\n");
    dl_tokenizer_free(tok);
    return rc ? 1 : 0;
}
