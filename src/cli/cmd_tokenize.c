/* dedloc tokenize: text lines in, token ids out (one line per line). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/opt_table.h"
#include "dedloc/text.h"
#include "dedloc/util.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: dedloc tokenize [--tokenizer FILE] [--input FILE] [--pair] [--special] [--tokens]\n"
            "                       [--type-ids]\n\n"
            "Encodes UTF-8 text with a HF tokenizers tokenizer.json (Unigram model) and prints,\n"
            "for each input line, the token ids separated by single spaces (an empty line for an\n"
            "empty encoding). Lines end at '\\n' (a '\\r' before it is dropped).\n\n"
            "options:\n"
            "  --tokenizer FILE  tokenizer.json to use (default: the built-in demo Bengali tokenizer)\n"
            "  --input FILE      read this file instead of standard input\n"
            "  --pair            each line holds two segments separated by a tab; the output carries\n"
            "                    the post-processor's template ([CLS] A [SEP] B [SEP])\n"
            "  --special         apply the single-sequence template too ([CLS] A [SEP])\n"
            "  --tokens          print the token strings instead of the ids\n"
            "  --type-ids        with --pair/--special: print a second line of type ids after each line\n"
            "  -h, --help        this help\n\n"
            "Invalid UTF-8 is replaced by U+FFFD and counted in a warning.\n");
}

static int print_ids(FILE *out, const dl_tokenizer *tok, const int32_t *ids, size_t n, bool tokens) {
    for (size_t i = 0; i < n; i++) {
        if (i) fputc(' ', out);
        if (tokens) {
            const char *t = dl_tokenizer_id_to_token(tok, ids[i]);
            fputs(t ? t : "?", out);
        } else {
            fprintf(out, "%d", (int)ids[i]);
        }
    }
    return fputc('\n', out) == EOF ? -1 : 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *input = NULL;
    int pair = 0, special = 0, tokens = 0, type_ids = 0;
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'}, {"input", required_argument, NULL, 'i'},
        {"pair", no_argument, NULL, 'p'},           {"special", no_argument, NULL, 's'},
        {"tokens", no_argument, NULL, 'k'},         {"type-ids", no_argument, NULL, 'y'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = cli_getopt_long(argc, argv, "t:i:h", opts, "tokenize")) != -1) {
        switch (c) {
        case 't': tok_path = optarg; break;
        case 'i': input = optarg; break;
        case 'p': pair = 1; break;
        case 's': special = 1; break;
        case 'k': tokens = 1; break;
        case 'y': type_ids = 1; break;
        case 'h': usage(stdout); return DL_EXIT_OK;
        default: usage(stderr); return DL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dedloc tokenize: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return DL_EXIT_USAGE;
    }
    dl_tokenizer *tok;
    if (tok_path ? dl_tokenizer_load(tok_path, &tok) : dl_tokenizer_load_demo(&tok)) {
        fprintf(stderr, "dedloc tokenize: %s\n", dl_error());
        return DL_EXIT_FAILURE;
    }
    FILE *in = stdin;
    if (input && !(in = fopen(input, "rb"))) {
        fprintf(stderr, "dedloc tokenize: cannot open %s: %s\n", input, strerror(errno));
        dl_tokenizer_free(tok);
        return DL_EXIT_FAILURE;
    }
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
    char *line = NULL;
    size_t line_cap = 0, invalid = 0, line_no = 0;
    ssize_t got;
    int rc = DL_EXIT_OK, read_errno = 0;
    while ((errno = 0, got = getline(&line, &line_cap, in)) >= 0) {
        line_no++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        const char *a = line, *b = NULL;
        size_t a_len = len, b_len = 0;
        if (pair) {
            const char *tab = memchr(line, '\t', len);
            if (!tab) {
                fprintf(stderr, "dedloc tokenize: line %zu has no tab between the two segments (--pair)\n", line_no);
                rc = DL_EXIT_FAILURE;
                break;
            }
            a_len = (size_t)(tab - line);
            b = tab + 1;
            b_len = len - a_len - 1;
        }
        int32_t *ids_a = NULL, *ids_b = NULL, *ids = NULL, *types = NULL;
        size_t n_a = 0, n_b = 0, n = 0;
        int err = dl_tokenizer_encode(tok, a, a_len, &ids_a, &n_a, &invalid);
        if (!err && b) err = dl_tokenizer_encode(tok, b, b_len, &ids_b, &n_b, &invalid);
        if (!err && (pair || special))
            err = dl_tokenizer_post_process(tok, ids_a, n_a, b ? ids_b : NULL, n_b, &ids, &types, &n);
        if (err) {
            fprintf(stderr, "dedloc tokenize: line %zu: %s\n", line_no, dl_error());
            rc = DL_EXIT_FAILURE;
        } else if (pair || special) {
            if (print_ids(stdout, tok, ids, n, tokens)) rc = DL_EXIT_FAILURE;
            if (type_ids) {
                for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)types[i]);
                putchar('\n');
            }
        } else if (print_ids(stdout, tok, ids_a, n_a, tokens)) {
            rc = DL_EXIT_FAILURE;
        }
        free(ids_a);
        free(ids_b);
        free(ids);
        free(types);
        if (rc) break;
    }
    if (got < 0) read_errno = errno; /* e.g. EISDIR when --input names a directory */
    if (rc == DL_EXIT_OK && ferror(in)) {
        fprintf(stderr, "dedloc tokenize: reading %s failed: %s\n", input ? input : "standard input",
                read_errno ? strerror(read_errno) : "read error");
        rc = DL_EXIT_FAILURE;
    }
    if (fflush(stdout)) {
        fprintf(stderr, "dedloc tokenize: writing the output failed: %s\n", strerror(errno));
        rc = DL_EXIT_FAILURE;
    }
    if (invalid) DL_WARN("tokenize", "%zu invalid UTF-8 sequences replaced by U+FFFD", invalid);
    free(line);
    if (in != stdin) fclose(in);
    dl_tokenizer_free(tok);
    return rc;
}
