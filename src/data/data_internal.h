/* Private pieces of the data module, layered bottom up:
 *   byte sources (file, HTTP with resume)  -> gzip-aware reader -> line reader
 *   -> documents over a shard list -> sentences -> segment pairs -> shuffle
 *   buffer -> MLM masking -> batches (producer thread, bounded queue).
 * Each layer is a small struct with an explicit state, so the tests can drive
 * one layer at a time. */
#ifndef DEDLOC_DATA_INTERNAL_H
#define DEDLOC_DATA_INTERNAL_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dedloc/data.h"
#include "dedloc/util.h"

/* ---- I/O policy shared by the sources ----------------------------------------- */
typedef struct dl_data_io {
    double timeout_s;         /* a source silent this long is dropped and retried */
    int max_retries;          /* consecutive failures without progress before giving up */
    double retry_base_s, retry_max_s;
    const atomic_int *stop;   /* nonzero: abandon waits as soon as possible (may be NULL) */
    dl_data_stats *counters;  /* bytes and retries are added here (producer-owned; may be NULL) */
    const char *ca_file;      /* https: trust these PEM CA certificates instead of the system's */
    bool insecure_tls;        /* https: skip certificate checks (warned once) */
} dl_data_io;

/* SIGPIPE safety without touching the process's signal dispositions: a
 * write to a connection the peer has reset must fail with EPIPE, not kill a
 * training run. Blocks SIGPIPE in the calling thread; restore discards a
 * SIGPIPE raised meanwhile (if the thread had it unblocked) and restores the
 * mask. Threads we own block it for good with dl_data_block_sigpipe. */
typedef struct dl_sigpipe_guard {
    sigset_t old;
    bool active;
} dl_sigpipe_guard;
void dl_sigpipe_guard_enter(dl_sigpipe_guard *g);
void dl_sigpipe_guard_leave(dl_sigpipe_guard *g);
void dl_data_block_sigpipe(void);

/* Sleeps seconds in short slices; returns -1 early if *io->stop became set. */
int dl_data_io_sleep(const dl_data_io *io, double seconds);
bool dl_data_io_stopped(const dl_data_io *io);

/* ---- byte sources --------------------------------------------------------------
 * read returns the number of bytes (> 0), 0 at the end, -1 on a failure that
 * retries could not fix (dl_error says why). */
typedef struct dl_bytesrc dl_bytesrc;
struct dl_bytesrc {
    long (*read)(dl_bytesrc *src, void *buf, size_t cap);
    void (*close)(dl_bytesrc *src);
    /* Set with a -1 from read that no retry or later pass can fix (a refused
     * certificate or redirect): the stream stops instead of skipping the shard. */
    bool failed_for_good;
};

int dl_bytesrc_open_file(const char *path, const dl_data_io *io, dl_bytesrc **out);
/* url: http(s)://host[:port]/path. Streams with back-pressure (the socket is
 * only read while the consumer asks for bytes), resumes with Range after
 * failures, follows up to DL_HTTP_MAX_REDIRECTS redirects (never https to
 * http). https checks the certificate and host name (io->ca_file,
 * io->insecure_tls). */
enum { DL_HTTP_MAX_REDIRECTS = 5 };
int dl_bytesrc_open_http(const char *url, const dl_data_io *io, dl_bytesrc **out);
/* The same, starting at byte offset of the file (the first request asks
 * for Range: bytes=offset-). */
int dl_bytesrc_open_http_at(const char *url, const dl_data_io *io, uint64_t offset,
                            dl_bytesrc **out);
/* 0 when the host of an http(s):// URL resolves, else -1 with the resolver's
 * reason. Checked once when a stream opens: a name that does not resolve is a
 * mistake in the URL, not an outage to wait out. */
int dl_http_check_host(const char *url);
/* What a response head means for the HTTP source. */
typedef struct dl_http_head {
    bool body_usable;   /* the body continues (or restarts) the file as asked */
    int64_t total;      /* file size it tells, -1 when it tells none */
    uint64_t skip;      /* body bytes to drop first (a 200 to a Range request) */
    char why[160];      /* why the body is unusable ("" when usable, or for 416) */
} dl_http_head;
/* Reads status, Content-Range and Content-Length (either may be NULL) of the
 * response to a request from byte requested_from. Numbers are strict
 * decimals; anything else makes the head unusable. */
void dl_http_read_head(int status, const char *content_range, const char *content_length,
                       uint64_t requested_from, dl_http_head *out);
/* Either of the above, by the spec's scheme. */
int dl_bytesrc_open(const char *spec, const dl_data_io *io, dl_bytesrc **out);
/* The same, reading from byte `offset` of the file: a seek for a local
 * file, a "Range: bytes=offset-" request over HTTP (a server that ignores
 * Range has the first offset bytes of its answer dropped). */
int dl_bytesrc_open_at(const char *spec, const dl_data_io *io, uint64_t offset, dl_bytesrc **out);
bool dl_data_is_url(const char *spec);
static inline void dl_bytesrc_close(dl_bytesrc *s) {
    if (s) s->close(s);
}
/* Reads a whole (small) source into memory, refusing more than max_bytes;
 * NUL-terminated. */
int dl_bytesrc_slurp(const char *spec, const dl_data_io *io, size_t max_bytes, char **data,
                     size_t *size);

/* ---- gzip-aware reader ----------------------------------------------------------
 * Passes plain bytes through; decodes gzip (detected by the magic bytes),
 * member after member. A corrupt member is counted in *bad_members, its output
 * dropped, and reading resumes at the next member header. */
typedef struct dl_gzreader dl_gzreader;
int dl_gzreader_new(dl_bytesrc *src, uint64_t *bad_members, dl_gzreader **out);
/* > 0 bytes, 0 end, -1 failure. */
long dl_gzreader_read(dl_gzreader *gz, void *buf, size_t cap);
/* True once since the last call if decoded output was dropped: the consumer
 * should drop its partial line. */
bool dl_gzreader_take_discontinuity(dl_gzreader *gz);
void dl_gzreader_free(dl_gzreader *gz); /* does not close src */
/* True once the first bytes showed the gzip magic. */
bool dl_gzreader_is_gzip(const dl_gzreader *gz);
/* Decides "plain" without looking (a source opened in the middle of a file
 * known to be plain). */
void dl_gzreader_set_plain(dl_gzreader *gz);

/* ---- line reader ------------------------------------------------------------------ */
typedef struct dl_linereader dl_linereader;
int dl_linereader_new(dl_gzreader *gz, size_t max_line, uint64_t *skipped_lines,
                      dl_linereader **out);
/* 1: *line (NUL-terminated, without "\n" or "\r\n", valid until the next call),
 * 0: end, -1: failure. Over-long lines are skipped and counted. */
int dl_linereader_next(dl_linereader *lr, const char **line, size_t *len);
void dl_linereader_free(dl_linereader *lr);
enum { DL_LINE_TAIL = 64 };
/* Offset in the decoded stream of the first byte no line handed out has
 * covered, and up to DL_LINE_TAIL bytes just before it (*tail_len of them). */
uint64_t dl_linereader_position(const dl_linereader *lr, uint8_t *tail, size_t *tail_len);
/* The reader's source starts at decoded offset `base` (a source opened in
 * the middle of a file); call before the first read. */
void dl_linereader_set_base(dl_linereader *lr, uint64_t base);
/* Reads and drops bytes up to decoded offset `offset` (at or past the
 * current position). -1 if the stream ends first or fails. */
int dl_linereader_skip_to(dl_linereader *lr, uint64_t offset);

/* ---- shard lists --------------------------------------------------------------------
 * Expands a source spec into the ordered list of shard specs (paths or URLs). */
int dl_data_list_shards(const char *spec, const dl_data_io *io, char ***shards, size_t *count);
void dl_data_free_shards(char **shards, size_t count);

/* ---- does a shard look like text? (textcheck.c) ----------------------------------------------- */
typedef struct dl_text_check {
    uint64_t bytes, invalid, nul; /* bytes looked at; invalid UTF-8 sequences; NUL bytes */
    bool done;                    /* judged: look no further */
} dl_text_check;
void dl_text_check_reset(dl_text_check *tc);
void dl_text_check_line(dl_text_check *tc, const char *line, size_t n);
/* True once enough bytes were seen to judge. */
bool dl_text_check_due(const dl_text_check *tc);
/* Judges what was seen (once): a shard with many invalid sequences or NUL
 * bytes gets a warning naming it, if warn. */
void dl_text_check_judge(dl_text_check *tc, const char *shard, bool warn);

/* ---- documents over the shards --------------------------------------------------------- */
typedef struct dl_docreader dl_docreader;
/* start_shard: where this peer begins (then wraps around). */
int dl_docreader_new(char **shards, size_t count, size_t start_shard, enum dl_data_format format,
                     const char *json_field, size_t max_line, const dl_data_io *io,
                     dl_docreader **out);
/* 1: a document (valid until the next call), 0: end of one pass over every
 * shard (the next call starts the next pass), -1: fatal failure (stop). */
int dl_docreader_next(dl_docreader *dr, const char **text, size_t *len);
void dl_docreader_free(dl_docreader *dr);
/* Where the reader stands between two documents, to continue there later. */
typedef struct dl_doc_position {
    uint64_t pos;            /* shards begun in this pass */
    bool first_pass;
    bool open;               /* a shard is open: the fields below apply */
    bool gzip;               /* its bytes are gzip (no seeking: decoded from the start) */
    uint64_t offset;         /* decoded offset of the next line */
    uint8_t tail[DL_LINE_TAIL]; /* the bytes just before offset, checked on return */
    uint32_t tail_len;
    dl_text_check check;
} dl_doc_position;
void dl_docreader_position(const dl_docreader *dr, dl_doc_position *out);
/* Reopens the shard of a position (a fresh reader with the same shard list
 * and start) at its offset; fails, naming the shard, when its bytes before
 * the offset are not those recorded (the file changed). */
int dl_docreader_seek(dl_docreader *dr, const dl_doc_position *p);

/* ---- sentences ------------------------------------------------------------------------------ */
typedef struct {
    size_t start, len;
} dl_span;
/* Splits text into trimmed, non-empty sentences; *spans is malloc'd. */
int dl_split_sentences(const char *text, size_t len, dl_span **spans, size_t *count);

/* ---- text model seen by the pipeline ---------------------------------------------------------
 * The pipeline needs only these operations, so tests can drive it with a tiny
 * hand-made model; dl_data_open binds them to a dl_tokenizer. */
typedef struct dl_data_text {
    void *ctx;
    int (*encode)(void *ctx, const char *text, size_t len, int32_t **ids, size_t *count);
    int (*post_process)(void *ctx, const int32_t *a, size_t a_len, const int32_t *b,
                        size_t b_len, int32_t **ids, int32_t **type_ids, size_t *count);
    size_t vocab_size;
    const uint8_t *special;    /* [vocab_size]: 1 for special tokens (never masked) */
    const uint8_t *word_start; /* [vocab_size]: 1 for pieces that begin a word */
    int32_t pad_id, mask_id;
} dl_data_text;

/* ---- segment pairs (ALBERT create_instances_from_document) ------------------------------------- */
typedef struct dl_example {
    int32_t len;       /* tokens incl. the template's special tokens */
    int32_t sop;       /* 1 = segments swapped */
    int32_t *ids;      /* [len] */
    int32_t *type_ids; /* [len] */
} dl_example;
void dl_example_free(dl_example *ex);

typedef struct dl_segments {
    int32_t **ids;
    size_t *lens;
    size_t count;
} dl_segments;

typedef struct dl_pair_params {
    size_t max_pair_tokens; /* max_seq_len minus the template's special tokens */
    float short_seq_prob, sop_swap_prob;
} dl_pair_params;

/* Turns one document's tokenized sentences into examples, appended to
 * *examples (grown as needed; *count and *cap updated). Draws from rng. */
int dl_make_pairs(const dl_segments *doc, const dl_pair_params *p, const dl_data_text *text,
                  dl_rng *rng, dl_example **examples, size_t *count, size_t *cap);

/* ---- MLM masking --------------------------------------------------------------------------- */
typedef struct dl_mask_params {
    float probability, mask_prob, random_prob;
    bool whole_word;
} dl_mask_params;
/* Masks ids[0..len) in place and writes labels (original id or -100).
 * nonspecial lists the ids a random replacement is drawn from. */
int dl_mask_tokens(int32_t *ids, int32_t *labels, size_t len, const dl_mask_params *p,
                   const dl_data_text *text, const int32_t *nonspecial, size_t nonspecial_count,
                   dl_rng *rng);

/* ---- shuffle buffer ----------------------------------------------------------------------- */
typedef struct dl_shuffle {
    dl_example *slots;
    size_t count, cap;
} dl_shuffle;
int dl_shuffle_init(dl_shuffle *sb, size_t cap);
/* Adds ex; once full, returns in *out a uniformly chosen resident example
 * (true) that the caller now owns. */
bool dl_shuffle_push(dl_shuffle *sb, dl_example ex, dl_rng *rng, dl_example *out);
/* Removes a uniformly chosen example; false when empty. */
bool dl_shuffle_pop(dl_shuffle *sb, dl_rng *rng, dl_example *out);
void dl_shuffle_free(dl_shuffle *sb);

/* ---- the stream with an explicit text model (dl_data_open wraps it) ------------------------- */
int dl_data_open_text(const dl_data_config *cfg, const dl_data_text *text, dl_data_stream **out);

/* ---- stream state serialization (position.c) --------------------------------------------
 * Little-endian byte strings grown on the heap; a reader that runs past the
 * end or meets an impossible value sets failed and reads zeros after. */
typedef struct dl_pos_out {
    uint8_t *data;
    size_t len, cap;
    bool failed;
} dl_pos_out;
void dl_pos_put_u64(dl_pos_out *o, uint64_t v);
void dl_pos_put_bytes(dl_pos_out *o, const void *p, size_t n);
void dl_pos_put_i32s(dl_pos_out *o, const int32_t *v, size_t n);
typedef struct dl_pos_in {
    const uint8_t *data;
    size_t len, pos;
    bool failed;
} dl_pos_in;
uint64_t dl_pos_get_u64(dl_pos_in *in);
/* A count of at most max (else failed). */
uint64_t dl_pos_get_count(dl_pos_in *in, uint64_t max);
void dl_pos_get_bytes(dl_pos_in *in, void *p, size_t n);
void dl_pos_get_i32s(dl_pos_in *in, int32_t *v, size_t n);
void dl_pos_put_example(dl_pos_out *o, const dl_example *ex);
/* Allocates the example's arrays; ids checked against vocab_size. */
int dl_pos_get_example(dl_pos_in *in, size_t max_len, size_t vocab_size, dl_example *ex);
void dl_pos_put_position(dl_pos_out *o, const dl_doc_position *p);
void dl_pos_get_position(dl_pos_in *in, dl_doc_position *p);

/* Seed mixing: one generator per purpose from (seed, peer_seed). */
uint64_t dl_data_mix_seed(uint64_t seed, uint64_t peer_seed, uint64_t purpose);

#endif
