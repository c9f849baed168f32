/* dedloc data: streams raw text from local files, shard directories or HTTP
 * servers and turns it, on a background thread, into ALBERT pretraining
 * batches (MLM + sentence-order prediction) ready to upload.
 *
 * Source spec (dl_data_config.source), one of:
 *   PATH                  a text or JSON-lines file, optionally gzip-compressed
 *   DIR                   every regular file in DIR (not hidden, not index.txt),
 *                         sorted by name: one shard each
 *   http://host:port/f    one file streamed over HTTP (Range requests resume it)
 *   http://host:port/d/   a shard directory: GET .../index.txt lists the shard
 *                         names, one per line (blank lines and '#' comments
 *                         ignored), relative to the directory URL
 *   https://...           the same over TLS: the server's certificate must
 *                         chain to a CA of the system (or tls_ca_file) and name
 *                         the URL's host; tls_insecure skips the checks
 * Redirects (301, 302, 303, 307, 308) are followed, up to 5 hops, relative
 * Locations included; one from https to plain http is refused. A refused
 * certificate or redirect stops the stream with the reason (no retries).
 *
 * A spec may start with "text:", "jsonl:" or "paragraphs:" to force a format
 * (e.g. "paragraphs:http://host:8000/"); it overrides dl_data_config.format.
 *
 * Text format: one document per line (the sahajBERT corpora are stored this
 * way); empty lines are skipped. Paragraphs format: documents separated by
 * blank lines, for corpora stored one sentence or one short string per line:
 * one document per line would make mostly-padding sequences there. JSON-lines files (name ending .jsonl, .ndjson
 * or .json, optionally followed by .gz, or format = DL_DATA_JSONL) hold one JSON
 * object per line whose string field json_field ("text") is the document; lines
 * that do not parse or lack the field are skipped and counted. Compression is
 * detected from the gzip magic bytes, whatever the name; concatenated gzip
 * members are read in turn and a corrupt member is skipped and counted.
 *
 * Pipeline: document -> sentences (split after U+0964 '।' and U+0965 '॥', and
 * after '.', '!' or '?' followed by white space or the end; newlines inside a
 * document also end a sentence) -> ids (dl_tokenizer_encode) -> consecutive
 * sentences packed into a segment pair A|B of at most max_seq_len - 3 tokens,
 * as ALBERT's create_pretraining_data does (target length max_seq_len - 3, or
 * with probability short_seq_prob a random shorter one, drawn per pair; a
 * one-sentence chunk is split at a random token; split point at a random
 * sentence boundary; a pair over length is trimmed at a random end of its longer
 * segment) -> SOP: A and B swapped with probability 0.5 (label 1 = swapped) ->
 * post-processor template ([CLS] A [SEP] B [SEP], type ids 0/1) -> shuffle
 * buffer -> MLM masking -> padded batch. Everything random comes from one
 * generator seeded from (seed, peer_seed): the same configuration over the
 * same bytes gives bit-identical batches, whether the bytes come from a file or
 * over HTTP with failures and retries.
 *
 * Lives in src/data/; depends on text (the tokenizer, bound in data_open.c
 * only) and util, and knows nothing of the model: batches are dl_batch.
 */
#ifndef DEDLOC_DATA_H
#define DEDLOC_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "dedloc/batch.h"
#include "dedloc/text.h"

enum dl_data_format {
    DL_DATA_AUTO = 0, /* JSON-lines by file name (see above), else text */
    DL_DATA_TEXT = 1, /* one document per line */
    DL_DATA_JSONL = 2, /* one JSON object per line, document in json_field */
    DL_DATA_PARAGRAPHS = 3 /* documents separated by blank lines (each line a sentence
                              or more); a document is cut at max_line_bytes */
};

typedef struct dl_data_config {
    const char *source;         /* spec, see above (copied by dl_data_open) */
    enum dl_data_format format; /* DL_DATA_AUTO */
    const char *json_field;     /* "text" */
    int batch_size;             /* B, 8 */
    int max_seq_len;            /* T, 512; every batch is padded to T */
    float short_seq_prob;       /* 0.1: chance of a random shorter target length */
    float sop_swap_prob;        /* 0.5 */
    float mlm_probability;      /* 0.15 of the non-special tokens (rounded, at least 1) */
    float mask_replace_prob;    /* 0.8 of the selected become [MASK] */
    float random_replace_prob;  /* 0.1 become a random non-special token; the rest stay */
    bool whole_word_mask;       /* false: select whole words ('▁' piece + continuations) */
    int shuffle_buffer;         /* 10000 examples; 1 disables shuffling */
    uint64_t seed;              /* shared by the collaboration, 0 */
    uint64_t peer_seed;         /* per peer (e.g. a hash of the peer id), 0 */
    bool loop;                  /* true: start over after the last shard (endless) */
    int queue_batches;          /* 4: batches prepared ahead by the background thread */
    double io_timeout_s;        /* 30: an HTTP source silent this long is retried */
    int max_retries;            /* 10 consecutive failures of one shard before it is skipped
                                   (< 0: retry forever) */
    double retry_base_s;        /* 0.5: first backoff, doubled per failure */
    double retry_max_s;         /* 30: backoff cap */
    size_t max_line_bytes;      /* 4 MiB: longer lines are skipped and counted */
    const char *tls_ca_file;    /* NULL: https trusts the system's CAs; else only the PEM
                                   certificates in this file (copied by dl_data_open) */
    bool tls_insecure;          /* false; true: https without certificate checks (warned) */
    const void *resume_state;   /* NULL; else a state from dl_data_save_state: the stream
                                   continues exactly where that one stood (see below) */
    size_t resume_state_size;
} dl_data_config;

/* Fills *cfg with the defaults above (source NULL). */
void dl_data_config_default(dl_data_config *cfg);

typedef struct dl_data_stats {
    uint64_t bytes;             /* raw bytes read from the sources (compressed) */
    uint64_t shards;            /* shards opened */
    uint64_t passes;            /* complete passes over all shards */
    uint64_t documents;         /* non-empty documents */
    uint64_t sentences;
    uint64_t tokens;            /* ids produced by the tokenizer */
    uint64_t examples;          /* segment pairs built */
    uint64_t batches;           /* batches handed out */
    uint64_t skipped_lines;     /* malformed JSON lines, missing field, over-long lines */
    uint64_t bad_gzip_members;  /* corrupt gzip members skipped */
    uint64_t retries;           /* source failures retried (HTTP errors, closes, stalls) */
    uint64_t failed_shards;     /* shards given up after max_retries */
} dl_data_stats;

typedef struct dl_data_stream dl_data_stream;

/* Opens the source and starts the background producer. The tokenizer must
 * outlive the stream (it is shared read-only). Fails on a bad config, a missing
 * file or directory, or a tokenizer without [CLS]/[SEP]/[MASK]/<pad>. */
int dl_data_open(const dl_data_config *cfg, const dl_tokenizer *tok, dl_data_stream **out);

enum { DL_DATA_BATCH = 0, DL_DATA_END = 1, DL_DATA_TIMEOUT = 2 };

/* Waits up to timeout_s (< 0: forever) for the next batch. If out->input_ids
 * is NULL the arrays are allocated (free with dl_batch_free), else *out must
 * already be batch_size x max_seq_len and is overwritten. Returns DL_DATA_BATCH,
 * DL_DATA_END (no loop and every shard consumed; a partial last batch is
 * dropped), DL_DATA_TIMEOUT, or -1 on a fatal error (dl_error says which). */
int dl_data_next_batch(dl_data_stream *s, dl_batch *out, double timeout_s);

/* A consistent snapshot of the counters; safe while the producer runs. */
void dl_data_get_stats(dl_data_stream *s, dl_data_stats *out);

/* Stops the producer (interrupting any retry wait) and frees everything. */
void dl_data_close(dl_data_stream *s);

/* ---- resuming without replay ------------------------------------------------
 * A stream's state can be saved and a new stream opened from it
 * (resume_state) that hands out exactly the batches the saved one would have
 * handed out next, bit for bit, without re-reading what came before: the
 * position in the shard list and the byte offset of the next line in the
 * open shard (a seek for a file, a Range request over HTTP; a gzip shard is
 * decoded from its start, at most one shard of work), the generator, the
 * shuffle buffer and the examples waiting for a batch, and the batches
 * already made but not yet taken. The 64 bytes before the offset are kept
 * and compared on reopening: a shard that changed since is refused with its
 * name, as is a state from another source, seed, shard list, tokenizer or
 * batch shape.
 *
 * The state is taken at a mark: dl_data_mark says "the state as of now" and
 * keeps copies of the batches handed out after it, so a state saved later
 * (a checkpoint after an interrupted accumulation) still starts at the mark. */
int dl_data_mark(dl_data_stream *s);
/* The state at the last mark, as a malloc'd byte string (free() it). Waits
 * for the producer to finish the batch it is making. Fails before the first
 * mark and after a failed producer. */
int dl_data_save_state(dl_data_stream *s, uint8_t **state, size_t *size);

/* ---- shard server -----------------------------------------------------------
 * Serves the regular files of one directory over HTTP on its own thread: GET
 * and HEAD, single byte ranges (206, 416), GET /index.txt (the directory's own
 * index.txt if it has one, else the sorted file names). Names with '/' or
 * starting with '.' are refused. Used by `dedloc serve-data` and by tests. */
typedef struct dl_data_server dl_data_server;

/* host: numeric address ("127.0.0.1", "::1", "0.0.0.0"); port 0 picks a free port. */
int dl_data_server_start(const char *dir, const char *host, int port, dl_data_server **out);
/* The port actually bound. */
int dl_data_server_port(const dl_data_server *srv);
void dl_data_server_stop(dl_data_server *srv);

#endif
