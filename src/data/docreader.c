/* Documents over a list of shards: one document per line (text) or the
 * configured string field of one JSON object per line (JSON-lines). A shard
 * that cannot be opened or fails beyond its retries is logged, counted and
 * skipped; the stream goes on with the next one. */
#include <cjson/cJSON.h>
#include <string.h>

#include "data/data_internal.h"

struct dl_docreader {
    char **shards;
    size_t count, start, pos; /* pos: shards begun in this pass */
    enum dl_data_format format;
    char json_field[128];
    size_t max_line;
    const dl_data_io *io;
    dl_data_stats local;     /* used when io->counters is NULL */
    dl_data_stats *counters;
    /* the open shard */
    dl_bytesrc *src;
    dl_gzreader *gz;
    dl_linereader *lr;
    bool jsonl;
    const char *shard_name;
    char *doc;               /* document text for JSON-lines and paragraphs */
    size_t doc_cap;
    size_t para_len;         /* paragraphs: bytes gathered in doc */
    bool para_handed_out;    /* doc was returned: start a new paragraph */
    dl_text_check check;     /* of the open shard's first bytes */
    bool first_pass;         /* warnings about a shard's content: only in the first pass */
};

static bool ends_with(const char *s, size_t n, const char *suffix) {
    size_t m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

static bool jsonl_name(const char *spec) {
    size_t n = strcspn(spec, "?#");
    if (ends_with(spec, n, ".gz")) n -= 3;
    return ends_with(spec, n, ".jsonl") || ends_with(spec, n, ".ndjson") ||
           ends_with(spec, n, ".json");
}

int dl_docreader_new(char **shards, size_t count, size_t start_shard, enum dl_data_format format,
                     const char *json_field, size_t max_line, const dl_data_io *io,
                     dl_docreader **out) {
    *out = NULL;
    if (!count) return dl_fail("no shards to read");
    dl_docreader *dr = dl_calloc(1, sizeof *dr);
    if (!dr) return -1;
    dr->shards = shards;
    dr->count = count;
    dr->start = start_shard % count;
    dr->format = format;
    snprintf(dr->json_field, sizeof dr->json_field, "%s", json_field ? json_field : "text");
    dr->max_line = max_line;
    dr->io = io;
    dr->counters = io && io->counters ? io->counters : &dr->local;
    dr->first_pass = true;
    *out = dr;
    return 0;
}

static void close_shard(dl_docreader *dr) {
    if (dr->lr) dl_text_check_judge(&dr->check, dr->shard_name, dr->first_pass);
    dl_linereader_free(dr->lr);
    dl_gzreader_free(dr->gz);
    dl_bytesrc_close(dr->src);
    dr->lr = NULL;
    dr->gz = NULL;
    dr->src = NULL;
}

static int open_shard(dl_docreader *dr, const char *spec) {
    if (dl_bytesrc_open(spec, dr->io, &dr->src)) return -1;
    if (dl_gzreader_new(dr->src, &dr->counters->bad_gzip_members, &dr->gz) ||
        dl_linereader_new(dr->gz, dr->max_line, &dr->counters->skipped_lines, &dr->lr)) {
        close_shard(dr);
        return -1;
    }
    dr->jsonl = dr->format == DL_DATA_JSONL || (dr->format == DL_DATA_AUTO && jsonl_name(spec));
    dr->shard_name = spec;
    dr->counters->shards++;
    dl_text_check_reset(&dr->check);
    return 0;
}

/* The document of one JSON line, or NULL (counted) if the line is unusable. */
static const char *json_document(dl_docreader *dr, const char *line, size_t len, size_t *doc_len) {
    cJSON *obj = cJSON_ParseWithLength(line, len);
    const cJSON *field = obj && cJSON_IsObject(obj)
                             ? cJSON_GetObjectItemCaseSensitive(obj, dr->json_field)
                             : NULL;
    const char *result = NULL;
    if (field && cJSON_IsString(field) && field->valuestring) {
        size_t n = strlen(field->valuestring);
        if (n + 1 > dr->doc_cap) {
            char *grown = dl_realloc(dr->doc, n + 1);
            if (grown) {
                dr->doc = grown;
                dr->doc_cap = n + 1;
            }
        }
        if (n + 1 <= dr->doc_cap) {
            memcpy(dr->doc, field->valuestring, n + 1);
            *doc_len = n;
            result = dr->doc;
        }
    }
    if (!result) {
        dr->counters->skipped_lines++;
        DL_DEBUG("data", "%s: skipping a JSON line without a string \"%s\"", dr->shard_name,
                 dr->json_field);
    }
    cJSON_Delete(obj);
    return result;
}

/* Appends a line to the paragraph in doc. */
static int para_append(dl_docreader *dr, const char *line, size_t n) {
    if (dr->para_len + n + 2 > dr->doc_cap) {
        size_t cap = (dr->para_len + n + 2) * 2;
        char *grown = dl_realloc(dr->doc, cap);
        if (!grown) return -1;
        dr->doc = grown;
        dr->doc_cap = cap;
    }
    memcpy(dr->doc + dr->para_len, line, n);
    dr->para_len += n;
    dr->doc[dr->para_len++] = '\n';
    dr->doc[dr->para_len] = 0;
    return 0;
}

static int para_hand_out(dl_docreader *dr, const char **text, size_t *len) {
    *text = dr->doc;
    *len = dr->para_len;
    dr->para_handed_out = true;
    return 1;
}

static bool blank(const char *line, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r') return false;
    return true;
}

int dl_docreader_next(dl_docreader *dr, const char **text, size_t *len) {
    if (dr->para_handed_out) {
        dr->para_len = 0;
        dr->para_handed_out = false;
    }
    for (;;) {
        if (dl_data_io_stopped(dr->io)) return dl_fail("data stream stopped");
        if (!dr->lr) {
            if (dr->pos == dr->count) {
                dr->pos = 0;
                dr->first_pass = false;
                return 0;
            }
            const char *spec = dr->shards[(dr->start + dr->pos) % dr->count];
            dr->pos++;
            if (open_shard(dr, spec)) {
                dr->counters->failed_shards++;
                DL_WARN("data", "skipping shard %s: %s", spec, dl_error());
            }
            continue;
        }
        const char *line;
        size_t n;
        int r = dl_linereader_next(dr->lr, &line, &n);
        if (r < 0) {
            if (dl_data_io_stopped(dr->io)) return dl_fail("data stream stopped");
            if (dr->src && dr->src->failed_for_good) return -1;
            dr->counters->failed_shards++;
            DL_WARN("data", "abandoning shard %s: %s", dr->shard_name, dl_error());
            close_shard(dr);
            if (dr->para_len) return para_hand_out(dr, text, len);
            continue;
        }
        if (r == 0) {
            close_shard(dr);
            if (dr->para_len) return para_hand_out(dr, text, len);
            continue;
        }
        if (!dr->check.done) {
            dl_text_check_line(&dr->check, line, n);
            if (dl_text_check_due(&dr->check)) dl_text_check_judge(&dr->check, dr->shard_name, dr->first_pass);
        }
        if (dr->format == DL_DATA_PARAGRAPHS) {
            /* A blank line ends a document; so does reaching max_line bytes,
             * which bounds memory for files without blank lines. */
            if (blank(line, n)) {
                if (dr->para_len) return para_hand_out(dr, text, len);
                continue;
            }
            if (para_append(dr, line, n)) return -1;
            if (dr->para_len >= dr->max_line) return para_hand_out(dr, text, len);
            continue;
        }
        if (dr->jsonl) {
            line = json_document(dr, line, n, &n);
            if (!line) continue;
        }
        while (n && (line[0] == ' ' || line[0] == '\t' || line[0] == '\r' || line[0] == '\n')) {
            line++;
            n--;
        }
        if (!n) continue;
        *text = line;
        *len = n;
        return 1;
    }
}

void dl_docreader_free(dl_docreader *dr) {
    if (!dr) return;
    close_shard(dr);
    free(dr->doc);
    free(dr);
}

/* ---- positions ------------------------------------------------------------- */

void dl_docreader_position(const dl_docreader *dr, dl_doc_position *out) {
    memset(out, 0, sizeof *out);
    out->pos = dr->pos;
    out->first_pass = dr->first_pass;
    out->check = dr->check;
    if (!dr->lr) return;
    out->open = true;
    out->gzip = dl_gzreader_is_gzip(dr->gz);
    size_t tail_len = 0;
    out->offset = dl_linereader_position(dr->lr, out->tail, &tail_len);
    out->tail_len = (uint32_t)tail_len;
}

int dl_docreader_seek(dl_docreader *dr, const dl_doc_position *p) {
    close_shard(dr);
    dr->para_len = 0;
    dr->para_handed_out = false;
    if (p->pos > dr->count || (p->open && p->pos == 0))
        return dl_fail("the position names shard %llu of %zu", (unsigned long long)p->pos, dr->count);
    if (p->tail_len > DL_LINE_TAIL || p->tail_len > p->offset)
        return dl_fail("the position's check bytes are inconsistent");
    dr->pos = (size_t)p->pos;
    dr->first_pass = p->first_pass;
    if (!p->open) {
        dr->check = p->check;
        return 0;
    }
    /* The shard that was open is the last one begun. */
    const char *spec = dr->shards[(dr->start + dr->pos - 1) % dr->count];
    /* A plain file or URL is read from just before the offset (the check
     * bytes); gzip has no random access, so it is decoded from its start. */
    uint64_t from = p->gzip ? 0 : p->offset - p->tail_len;
    if (dl_bytesrc_open_at(spec, dr->io, from, &dr->src) ||
        dl_gzreader_new(dr->src, &dr->counters->bad_gzip_members, &dr->gz) ||
        dl_linereader_new(dr->gz, dr->max_line, &dr->counters->skipped_lines, &dr->lr)) {
        close_shard(dr);
        return dl_fail_context("reopening shard %s", spec);
    }
    if (!p->gzip) dl_gzreader_set_plain(dr->gz);
    dl_linereader_set_base(dr->lr, from);
    uint8_t tail[DL_LINE_TAIL];
    size_t tail_len = 0;
    if (dl_linereader_skip_to(dr->lr, p->offset)) {
        close_shard(dr);
        return dl_fail_context("shard %s changed since the position was taken (it is shorter)", spec);
    }
    dl_linereader_position(dr->lr, tail, &tail_len);
    if (tail_len < p->tail_len || memcmp(tail + tail_len - p->tail_len, p->tail, p->tail_len)) {
        close_shard(dr);
        return dl_fail("shard %s changed since the position was taken: the %u bytes before byte "
                       "%llu differ", spec, p->tail_len, (unsigned long long)p->offset);
    }
    dr->jsonl = dr->format == DL_DATA_JSONL || (dr->format == DL_DATA_AUTO && jsonl_name(spec));
    dr->shard_name = spec;
    dr->check = p->check;
    return 0;
}
