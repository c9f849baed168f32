/* Data pipeline throughput: how fast one producer thread turns raw text into
 * training batches, and how much of that is tokenization.
 *
 *   build/bench_data [--data SOURCE] [--tokenizer FILE] [--batch B] [--seq T]
 *                    [--batches N] [--shuffle N] [--wwm] [--json]
 *
 * Phase 1 (tokenize): every sentence of the source (a local file) encoded with
 * dl_tokenizer_encode, repeated for at least a second: MB/s of sentence text,
 * sentences/s, tokens/s. Phase 2 (pipeline): dl_data_open on the same source
 * (looping), time to the first batch (it fills the shuffle buffer first), then
 * N batches as fast as the consumer takes them: batches/s, sequences/s, real
 * tokens/s (attention 1) and padded tokens/s, and the overall rate from open
 * to the last batch. A document's examples enter the shuffle buffer together,
 * so use enough batches to span many documents (with paragraph mode over a
 * file without blank lines a document is 4 MiB of text). Prints a table, then
 * one JSON line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "dedloc/data.h"
#include "dedloc/text.h"
#include "dedloc/util.h"

static void usage(FILE *out) {
    fprintf(out, "usage: bench_data [--data SOURCE] [--tokenizer FILE] [--batch B] [--seq T]\n"
                 "                  [--batches N] [--shuffle N] [--wwm]\n"
                 "defaults: --data tests/fixtures/text/corpus_bn_sample.txt (else\n"
                 "tests/fixtures/data/bn_paragraphs.txt), --tokenizer assets/tokenizer_bn_demo.json,\n"
                 "--batch 8 --seq 512 --batches 200 --shuffle 10000; run from the repository root\n");
}

typedef struct {
    double seconds, mb_per_s, sentences_per_s, tokens_per_s;
    uint64_t bytes, sentences, tokens;
    int reps;
} tok_result;

static int bench_tokenize(const dl_tokenizer *tok, const char *path, tok_result *r) {
    char *text;
    size_t size;
    if (dl_read_file(path, (size_t)1 << 30, &text, &size)) return -1;
    /* Sentences as the pipeline makes them. */
    dl_span *all = NULL;
    size_t count = 0, cap = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        dl_span *spans;
        size_t n;
        if (dl_split_sentences(line, strlen(line), &spans, &n)) return -1;
        if (count + n > cap) {
            cap = (count + n) * 2;
            all = realloc(all, cap * sizeof *all);
        }
        for (size_t i = 0; i < n; i++)
            all[count++] = (dl_span){(size_t)(line - text) + spans[i].start, spans[i].len};
        free(spans);
    }
    *r = (tok_result){0};
    double start = dl_now();
    do {
        for (size_t i = 0; i < count; i++) {
            int32_t *ids;
            size_t n;
            if (dl_tokenizer_encode(tok, text + all[i].start, all[i].len, &ids, &n, NULL)) return -1;
            free(ids);
            r->tokens += n;
            r->bytes += all[i].len;
        }
        r->sentences += count;
        r->reps++;
    } while (dl_now() - start < 1.0 && count);
    r->seconds = dl_now() - start;
    r->mb_per_s = (double)r->bytes / 1e6 / r->seconds;
    r->sentences_per_s = (double)r->sentences / r->seconds;
    r->tokens_per_s = (double)r->tokens / r->seconds;
    free(all);
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    const char *data = NULL, *tok_path = "assets/tokenizer_bn_demo.json";
    int batch = 8, seq = 512, batches = 200, shuffle = 10000, wwm = 0;
    static const struct option opts[] = {{"data", required_argument, NULL, 'd'},
                                         {"tokenizer", required_argument, NULL, 't'},
                                         {"batch", required_argument, NULL, 'b'},
                                         {"seq", required_argument, NULL, 's'},
                                         {"batches", required_argument, NULL, 'n'},
                                         {"shuffle", required_argument, NULL, 'S'},
                                         {"wwm", no_argument, NULL, 'w'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "d:t:b:s:n:S:wh", opts, NULL)) != -1) {
        switch (c) {
        case 'd': data = optarg; break;
        case 't': tok_path = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 's': seq = atoi(optarg); break;
        case 'n': batches = atoi(optarg); break;
        case 'S': shuffle = atoi(optarg); break;
        case 'w': wwm = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!data)
        data = dl_file_exists("tests/fixtures/text/corpus_bn_sample.txt")
                   ? "tests/fixtures/text/corpus_bn_sample.txt"
                   : "tests/fixtures/data/bn_paragraphs.txt";
    dl_tokenizer *tok;
    if (dl_tokenizer_load(tok_path, &tok)) {
        fprintf(stderr, "bench_data: %s\n", dl_error());
        return 1;
    }
    tok_result tr = {0};
    const char *file = data;
    if (!strncmp(file, "paragraphs:", 11)) file += 11;
    if (!strncmp(file, "text:", 5)) file += 5;
    bool local_file = !dl_data_is_url(file) && !strstr(file, ".gz") && !strstr(file, ".json") &&
                      !strstr(file, "jsonl:");
    if (local_file && bench_tokenize(tok, file, &tr)) {
        fprintf(stderr, "bench_data: tokenize: %s\n", dl_error());
        return 1;
    }
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.source = data;
    cfg.batch_size = batch;
    cfg.max_seq_len = seq;
    cfg.shuffle_buffer = shuffle;
    cfg.whole_word_mask = wwm;
    cfg.queue_batches = 4;
    dl_data_stream *s;
    double t0 = dl_now();
    if (dl_data_open(&cfg, tok, &s)) {
        fprintf(stderr, "bench_data: %s\n", dl_error());
        return 1;
    }
    dl_batch b = {0};
    if (dl_data_next_batch(s, &b, -1) != DL_DATA_BATCH) {
        fprintf(stderr, "bench_data: no first batch: %s\n", dl_error());
        return 1;
    }
    double first = dl_now() - t0;
    uint64_t real_tokens = 0;
    double t1 = dl_now();
    for (int i = 0; i < batches; i++) {
        if (dl_data_next_batch(s, &b, -1) != DL_DATA_BATCH) {
            fprintf(stderr, "bench_data: stream ended: %s\n", dl_error());
            return 1;
        }
        for (size_t k = 0; k < (size_t)batch * (size_t)seq; k++) real_tokens += (uint64_t)b.attention_mask[k];
    }
    double secs = dl_now() - t1, overall = dl_now() - t0;
    dl_data_stats st;
    dl_data_get_stats(s, &st);
    dl_data_close(s);
    dl_batch_free(&b);
    double bps = batches / secs;
    printf("data pipeline benchmark: %s, tokenizer %s\n", data, tok_path);
    if (local_file)
        printf("  tokenize only     %8.2f MB/s  %10.0f sentences/s  %10.0f tokens/s  (1 thread; "
               "%llu sentences, %llu tokens per pass, %d passes)\n",
               tr.mb_per_s, tr.sentences_per_s, tr.tokens_per_s,
               (unsigned long long)(tr.sentences / (uint64_t)tr.reps),
               (unsigned long long)(tr.tokens / (uint64_t)tr.reps), tr.reps);
    printf("  first batch       %8.3f s (fills the %d-example shuffle buffer)\n", first, shuffle);
    printf("  batches %dx%d%s  %8.1f batches/s  %8.0f sequences/s  %10.0f real tokens/s  %10.0f padded tokens/s\n",
           batch, seq, wwm ? " wwm" : "", bps, bps * batch, (double)real_tokens / secs,
           bps * batch * seq);
    printf("  overall           %8.1f batches/s from open to the last batch (startup included)\n",
           (batches + 1) / overall);
    printf("  fill              %8.1f%% of positions are real tokens\n",
           100.0 * (double)real_tokens / ((double)batches * batch * seq));
    printf("  stream            %llu documents, %llu sentences, %llu examples, %llu passes\n",
           (unsigned long long)st.documents, (unsigned long long)st.sentences,
           (unsigned long long)st.examples, (unsigned long long)st.passes);
    printf("{\"bench\": \"data\", \"source\": \"%s\", \"batch\": %d, \"seq\": %d, \"wwm\": %s, "
           "\"tokenize_mb_per_s\": %.3f, \"tokenize_tokens_per_s\": %.0f, \"first_batch_s\": %.3f, "
           "\"batches_per_s\": %.2f, \"overall_batches_per_s\": %.2f, \"real_tokens_per_s\": %.0f, "
           "\"padded_tokens_per_s\": %.0f}\n",
           data, batch, seq, wwm ? "true" : "false", tr.mb_per_s, tr.tokens_per_s, first, bps,
           (batches + 1) / overall,
           (double)real_tokens / secs, bps * batch * seq);
    dl_tokenizer_free(tok);
    return 0;
}
