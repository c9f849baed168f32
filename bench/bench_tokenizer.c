/* bench_tokenizer: tokenizer throughput on a text file, one encode call per
 * line (the way the data pipeline calls it), on 1..N threads sharing one
 * immutable tokenizer. Prints a table and one JSON line.
 *
 *   build/bench_tokenizer [--tokenizer FILE] [--input FILE] [--threads N] [--seconds S]
 *
 * Default input: build/corpus/bn.txt if present (scripts/make_corpus_bn.sh),
 * else tests/fixtures/text/corpus_bn_sample.txt. Default tokenizer: the demo. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/text.h"
#include "dedloc/util.h"

typedef struct {
    const dl_tokenizer *tok;
    const char *const *lines;
    const size_t *lens;
    size_t n_lines, first, step;
    double seconds;
    /* results */
    size_t passes, bytes, tokens, lines_done;
    double elapsed;
    int failed;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    double t0 = dl_now();
    do {
        for (size_t i = w->first; i < w->n_lines; i += w->step) {
            int32_t *ids;
            size_t n;
            if (dl_tokenizer_encode(w->tok, w->lines[i], w->lens[i], &ids, &n, NULL)) {
                w->failed = 1;
                return NULL;
            }
            free(ids);
            w->bytes += w->lens[i];
            w->tokens += n;
            w->lines_done++;
        }
        w->passes++;
        w->elapsed = dl_now() - t0;
    } while (w->elapsed < w->seconds);
    return NULL;
}

static int measure(const dl_tokenizer *tok, char **lines, size_t *lens, size_t n_lines, int threads, double seconds,
                   double *mbps, double *tokps, double *linesps, size_t *tokens_per_pass) {
    worker *ws = calloc((size_t)threads, sizeof(worker));
    pthread_t *th = calloc((size_t)threads, sizeof(pthread_t));
    if (!ws || !th) return -1;
    for (int t = 0; t < threads; t++) {
        ws[t].tok = tok;
        ws[t].lines = (const char *const *)lines;
        ws[t].lens = lens;
        ws[t].n_lines = n_lines;
        ws[t].first = (size_t)t;
        ws[t].step = (size_t)threads;
        ws[t].seconds = seconds;
        pthread_create(&th[t], NULL, run_worker, &ws[t]);
    }
    size_t bytes = 0, tokens = 0, done = 0;
    double elapsed = 0;
    int failed = 0;
    *tokens_per_pass = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        bytes += ws[t].bytes;
        tokens += ws[t].tokens;
        done += ws[t].lines_done;
        failed |= ws[t].failed;
        if (ws[t].elapsed > elapsed) elapsed = ws[t].elapsed;
        if (ws[t].passes) *tokens_per_pass += ws[t].tokens / ws[t].passes;
    }
    free(ws);
    free(th);
    if (failed) return -1;
    *mbps = (double)bytes / 1e6 / elapsed;
    *tokps = (double)tokens / elapsed;
    *linesps = (double)done / elapsed;
    return 0;
}

int main(int argc, char **argv) {
    const char *tok_path = NULL, *input = NULL;
    int max_threads = 2;
    double seconds = 2.0;
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'}, {"input", required_argument, NULL, 'i'},
        {"threads", required_argument, NULL, 'j'},   {"seconds", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "t:i:j:s:h", opts, NULL)) != -1) {
        switch (c) {
        case 't': tok_path = optarg; break;
        case 'i': input = optarg; break;
        case 'j': max_threads = atoi(optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'h':
            printf("usage: bench_tokenizer [--tokenizer FILE] [--input FILE] [--threads N] [--seconds S]\n"
                   "Encodes every line of the input (one call per line) for at least S seconds\n"
                   "(default 2) on 1 thread and on N threads (default 2); prints MB/s of UTF-8 input.\n");
            return 0;
        default: return 2;
        }
    }
    if (max_threads < 1 || max_threads > 256 || !(seconds > 0)) {
        fprintf(stderr, "bench_tokenizer: --threads must be 1..256 and --seconds positive\n");
        return 2;
    }
    if (!input) input = dl_file_exists("build/corpus/bn.txt") ? "build/corpus/bn.txt"
                                                               : "tests/fixtures/text/corpus_bn_sample.txt";
    dl_tokenizer *tok;
    if (tok_path ? dl_tokenizer_load(tok_path, &tok) : dl_tokenizer_load_demo(&tok)) {
        fprintf(stderr, "bench_tokenizer: %s\n", dl_error());
        return 1;
    }
    char *data;
    size_t size;
    if (dl_read_file(input, (size_t)1 << 30, &data, &size)) {
        fprintf(stderr, "bench_tokenizer: %s\n", dl_error());
        return 1;
    }
    size_t n_lines = 0, cap = 1024;
    char **lines = malloc(cap * sizeof(char *));
    size_t *lens = malloc(cap * sizeof(size_t));
    for (char *p = data; p < data + size;) {
        char *nl = memchr(p, '\n', (size_t)(data + size - p));
        if (!nl) nl = data + size;
        if (n_lines == cap) {
            cap *= 2;
            lines = realloc(lines, cap * sizeof(char *));
            lens = realloc(lens, cap * sizeof(size_t));
        }
        lines[n_lines] = p;
        lens[n_lines++] = (size_t)(nl - p);
        p = nl + 1;
    }
    printf("bench_tokenizer: %s, %zu lines, %.2f MB, tokenizer %s (%zu pieces)\n", input, n_lines, (double)size / 1e6,
           tok_path ? tok_path : "demo (built in)", dl_tokenizer_vocab_size(tok));
    printf("%-8s %10s %12s %12s %14s\n", "threads", "MB/s", "tokens/s", "lines/s", "tokens/pass");
    char json[4096] = "";
    size_t jlen = 0;
    int rc = 0;
    int counts[2] = {1, max_threads};
    for (int k = 0; k < (max_threads > 1 ? 2 : 1); k++) {
        int threads = counts[k];
        double mbps, tokps, linesps;
        size_t per_pass;
        if (measure(tok, lines, lens, n_lines, threads, seconds, &mbps, &tokps, &linesps, &per_pass)) {
            fprintf(stderr, "bench_tokenizer: encoding failed: %s\n", dl_error());
            rc = 1;
            break;
        }
        printf("%-8d %10.2f %12.0f %12.0f %14zu\n", threads, mbps, tokps, linesps, per_pass);
        fflush(stdout);
        jlen += (size_t)snprintf(json + jlen, sizeof(json) - jlen,
                                 "%s{\"threads\":%d,\"mb_per_s\":%.3f,\"tokens_per_s\":%.0f,\"lines_per_s\":%.0f,"
                                 "\"tokens_per_pass\":%zu}",
                                 jlen ? "," : "", threads, mbps, tokps, linesps, per_pass);
        if (jlen >= sizeof(json)) break;
    }
    printf("{\"bench\":\"tokenizer\",\"input\":\"%s\",\"bytes\":%zu,\"lines\":%zu,\"results\":[%s]}\n", input, size,
           n_lines, json);
    free(lines);
    free(lens);
    free(data);
    dl_tokenizer_free(tok);
    return rc;
}
