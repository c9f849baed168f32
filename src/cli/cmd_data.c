/* dedloc data: runs the data stream on a source without training and prints
 * the first rows decoded, then the stream's counters. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/data.h"
#include "dedloc/text.h"
#include "dedloc/util.h"

static void help(FILE *out) {
    fprintf(out,
            "usage: dedloc data --data SOURCE [--tokenizer FILE] [options]\n\n"
            "Runs the training-data stream without training: prints the first rows\n"
            "decoded, then the stream's counters. Useful to check a source (a file,\n"
            "a shard folder, an http(s):// URL, e.g. served by 'dedloc serve-data') before a run.\n\n"
            "  --data SOURCE        text or JSON-lines file (.gz ok), shard folder, http(s):// URL;\n"
            "                       prefix paragraphs: for blank-line separated documents\n"
            "  --ca-file FILE       https: trust the PEM CA certificates in FILE, not the system's\n"
            "  --insecure-tls       https without certificate checks (anyone on the path can alter\n"
            "                       the data; warned)\n"
            "  --tokenizer FILE     tokenizer.json (default: the built-in demo Bengali tokenizer,\n"
            "                       as in 'dedloc train')\n"
            "  --batches N          batches to take (default 10; the stream ends earlier\n"
            "                       with --once when the source is exhausted)\n"
            "  --batch B --seq T    batch shape (default 8 x 128)\n"
            "  --shuffle N          shuffle buffer in examples (default 1000)\n"
            "  --seed S --peer-seed P  randomness (the run's seed, this peer's value)\n"
            "  --wwm                whole-word masking\n"
            "  --show K             decode the first K rows (default 2; 0 for none)\n"
            "  --once               one pass over the source instead of looping\n"
            "  --json               counters as one JSON object\n");
}

static void show_row(const dl_tokenizer *tok, const dl_batch *b, int row) {
    const int32_t *ids = b->input_ids + (size_t)row * b->seq;
    const int32_t *labels = b->labels + (size_t)row * b->seq;
    const int32_t *types = b->token_type_ids + (size_t)row * b->seq;
    printf("row %d (sentence order %s):\n ", row,
           b->sentence_order_label[row] ? "swapped" : "kept");
    for (int t = 0; t < b->seq && b->attention_mask[(size_t)row * b->seq + t]; t++) {
        const char *piece = dl_tokenizer_id_to_token(tok, ids[t]);
        if (t > 0 && types[t] != types[t - 1]) printf(" |");
        if (labels[t] != -100) {
            const char *orig = dl_tokenizer_id_to_token(tok, labels[t]);
            printf(" %s{%s}", piece ? piece : "?", orig ? orig : "?");
        } else {
            printf(" %s", piece ? piece : "?");
        }
    }
    printf("\n");
}

/* Strict integer option: the whole text is a number in [lo, hi] (atoi would
 * take "abc" as 0 and "8x" as 8). */
static int parse_int(const char *name, const char *text, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 0);
    if (*text == 0 || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "dedloc data: --%s must be an integer in [%lld, %lld], got '%s'\n", name, lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cmd_data(int argc, char **argv) {
    const char *source = NULL, *tok_path = NULL;
    int batches = 10, show = 2, json = 0;
    dl_data_config cfg;
    dl_data_config_default(&cfg);
    cfg.batch_size = 8;
    cfg.max_seq_len = 128;
    cfg.shuffle_buffer = 1000;
    static const struct option opts[] = {{"data", required_argument, NULL, 'd'},
                                         {"tokenizer", required_argument, NULL, 't'},
                                         {"batches", required_argument, NULL, 'n'},
                                         {"batch", required_argument, NULL, 'b'},
                                         {"seq", required_argument, NULL, 's'},
                                         {"shuffle", required_argument, NULL, 'S'},
                                         {"seed", required_argument, NULL, 'r'},
                                         {"peer-seed", required_argument, NULL, 'p'},
                                         {"wwm", no_argument, NULL, 'w'},
                                         {"show", required_argument, NULL, 'k'},
                                         {"once", no_argument, NULL, 'o'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"ca-file", required_argument, NULL, 'C'},
                                         {"insecure-tls", no_argument, NULL, 'I'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    while ((c = cli_getopt_long(argc, argv, "d:t:n:b:s:S:r:p:wk:ojhC:I", opts, "data")) != -1) {
        long long v = 0;
        int bad = 0;
        switch (c) {
        case 'd': source = optarg; break;
        case 't': tok_path = optarg; break;
        case 'n': bad = parse_int("batches", optarg, 0, INT_MAX, &v); batches = (int)v; break;
        case 'b': bad = parse_int("batch", optarg, 1, 65536, &v); cfg.batch_size = (int)v; break;
        case 's': bad = parse_int("seq", optarg, 8, 8192, &v); cfg.max_seq_len = (int)v; break;
        case 'S': bad = parse_int("shuffle", optarg, 1, 1 << 24, &v); cfg.shuffle_buffer = (int)v; break;
        case 'r': bad = parse_int("seed", optarg, 0, LLONG_MAX, &v); cfg.seed = (uint64_t)v; break;
        case 'p': bad = parse_int("peer-seed", optarg, 0, LLONG_MAX, &v); cfg.peer_seed = (uint64_t)v; break;
        case 'w': cfg.whole_word_mask = true; break;
        case 'k': bad = parse_int("show", optarg, 0, INT_MAX, &v); show = (int)v; break;
        case 'o': cfg.loop = false; break;
        case 'j': json = 1; break;
        case 'C': cfg.tls_ca_file = optarg; break;
        case 'I': cfg.tls_insecure = true; break;
        case 'h': help(stdout); return DL_EXIT_OK;
        default: help(stderr); return DL_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "see 'dedloc data --help'\n");
            return DL_EXIT_USAGE;
        }
    }
    if (!source || optind != argc) {
        fprintf(stderr, "dedloc data: %s\n\n", optind != argc ? "unexpected argument" : "--data SOURCE is required");
        help(stderr);
        return DL_EXIT_USAGE;
    }
    cfg.source = source;
    dl_tokenizer *tok;
    if (tok_path ? dl_tokenizer_load(tok_path, &tok) : dl_tokenizer_load_demo(&tok)) {
        fprintf(stderr, "dedloc data: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    dl_data_stream *s;
    if (dl_data_open(&cfg, tok, &s)) {
        fprintf(stderr, "dedloc data: %s\n", dl_error());
        dl_tokenizer_free(tok);
        return DL_EXIT_FAILURE;
    }
    dl_batch b = {0};
    int rc = DL_EXIT_OK, taken = 0;
    double start = dl_now();
    for (; taken < batches; taken++) {
        int r = dl_data_next_batch(s, &b, -1);
        if (r == DL_DATA_END) break;
        if (r != DL_DATA_BATCH) {
            fprintf(stderr, "dedloc data: %s\n", dl_error());
            rc = DL_EXIT_FAILURE;
            break;
        }
        for (int row = 0; taken == 0 && row < show && row < b.batch; row++) show_row(tok, &b, row);
    }
    double secs = dl_now() - start;
    dl_data_stats st;
    dl_data_get_stats(s, &st);
    dl_data_close(s);
    dl_batch_free(&b);
    dl_tokenizer_free(tok);
    if (json)
        printf("{\"batches\": %d, \"seconds\": %.3f, \"bytes\": %" PRIu64 ", \"shards\": %" PRIu64
               ", \"passes\": %" PRIu64 ", \"documents\": %" PRIu64 ", \"sentences\": %" PRIu64
               ", \"tokens\": %" PRIu64 ", \"examples\": %" PRIu64 ", \"skipped_lines\": %" PRIu64
               ", \"bad_gzip_members\": %" PRIu64 ", \"retries\": %" PRIu64
               ", \"failed_shards\": %" PRIu64 "}\n",
               taken, secs, st.bytes, st.shards, st.passes, st.documents, st.sentences, st.tokens,
               st.examples, st.skipped_lines, st.bad_gzip_members, st.retries, st.failed_shards);
    else
        printf("%d batches of %d x %d in %.2f s; %" PRIu64 " bytes, %" PRIu64 " shards, %" PRIu64
               " passes, %" PRIu64 " documents, %" PRIu64 " sentences, %" PRIu64 " tokens, %" PRIu64
               " examples; skipped %" PRIu64 " lines, %" PRIu64 " bad gzip members, %" PRIu64
               " retries, %" PRIu64 " failed shards\n",
               taken, cfg.batch_size, cfg.max_seq_len, secs, st.bytes, st.shards, st.passes,
               st.documents, st.sentences, st.tokens, st.examples, st.skipped_lines,
               st.bad_gzip_members, st.retries, st.failed_shards);
    return rc;
}
