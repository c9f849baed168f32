/* Gzip-aware reading. The first two bytes decide: the gzip magic (1f 8b)
 * selects decoding, anything else passes through. Files made by concatenating
 * gzip members (gzip -c a >> f; common for appended shards) decode member
 * after member. When a member is corrupt (bad header, bad deflate data, CRC or
 * length mismatch, truncated) we count it, drop the output of the current
 * read, flag a discontinuity so the line reader drops its partial line, and
 * scan forward for the next member header. Output already handed out before
 * the corruption showed stays delivered: streaming forbids holding a whole
 * member back. */
#include <string.h>
#include <zlib.h>

#include "data/data_internal.h"

enum { GZ_IN_CAP = 64 * 1024 };
enum gz_mode { GZ_UNDECIDED, GZ_PLAIN, GZ_GZIP };

struct dl_gzreader {
    dl_bytesrc *src;
    uint64_t *bad_members;
    unsigned char in[GZ_IN_CAP];
    size_t in_pos, in_len;
    bool src_eof;
    enum gz_mode mode;
    z_stream zs;
    bool zs_ready;
    bool in_member;
    bool resyncing;   /* after a corrupt member, until a member decodes */
    bool discontinuity;
};

/* Keeps unread bytes, appends what the source gives. 0 ok (maybe eof), -1 failure. */
static int refill(dl_gzreader *gz) {
    if (gz->in_pos > 0) {
        memmove(gz->in, gz->in + gz->in_pos, gz->in_len - gz->in_pos);
        gz->in_len -= gz->in_pos;
        gz->in_pos = 0;
    }
    if (gz->in_len == GZ_IN_CAP) return 0;
    long n = gz->src->read(gz->src, gz->in + gz->in_len, GZ_IN_CAP - gz->in_len);
    if (n < 0) return -1;
    if (n == 0) gz->src_eof = true;
    gz->in_len += (size_t)n;
    return 0;
}

int dl_gzreader_new(dl_bytesrc *src, uint64_t *bad_members, dl_gzreader **out) {
    dl_gzreader *gz = dl_calloc(1, sizeof *gz);
    if (!gz) return -1;
    gz->src = src;
    gz->bad_members = bad_members;
    *out = gz;
    return 0;
}

static void member_failed(dl_gzreader *gz, const char *why) {
    if (!gz->resyncing) {
        if (gz->bad_members) (*gz->bad_members)++;
        DL_WARN("data", "skipping a corrupt gzip member (%s)", why ? why : "bad data");
    }
    gz->resyncing = true;
    gz->in_member = false;
    gz->discontinuity = true;
}

/* Advances in_pos to the next "1f 8b" or the end. 1 found, 0 need more, -1 failure. */
static int find_magic(dl_gzreader *gz) {
    for (;;) {
        while (gz->in_pos + 1 < gz->in_len) {
            if (gz->in[gz->in_pos] == 0x1f && gz->in[gz->in_pos + 1] == 0x8b) return 1;
            gz->in_pos++;
        }
        if (gz->src_eof) {
            gz->in_pos = gz->in_len;
            return 0;
        }
        if (refill(gz)) return -1;
    }
}

long dl_gzreader_read(dl_gzreader *gz, void *buf, size_t cap) {
    if (gz->mode == GZ_UNDECIDED) {
        while (gz->in_len < 2 && !gz->src_eof)
            if (refill(gz)) return -1;
        gz->mode = gz->in_len >= 2 && gz->in[0] == 0x1f && gz->in[1] == 0x8b ? GZ_GZIP : GZ_PLAIN;
        if (gz->mode == GZ_GZIP) {
            memset(&gz->zs, 0, sizeof gz->zs);
            if (inflateInit2(&gz->zs, 16 + MAX_WBITS) != Z_OK)
                return dl_fail("zlib: cannot initialise inflate");
            gz->zs_ready = true;
        }
    }
    if (gz->mode == GZ_PLAIN) {
        if (gz->in_pos < gz->in_len) {
            size_t n = gz->in_len - gz->in_pos;
            if (n > cap) n = cap;
            memcpy(buf, gz->in + gz->in_pos, n);
            gz->in_pos += n;
            return (long)n;
        }
        return gz->src->read(gz->src, buf, cap);
    }
    for (;;) {
        if (gz->in_pos == gz->in_len) {
            if (gz->src_eof) {
                if (gz->in_member) member_failed(gz, "truncated");
                return 0;
            }
            if (refill(gz)) return -1;
            continue;
        }
        if (!gz->in_member) {
            size_t before = gz->in_pos;
            int found = find_magic(gz);
            if (found < 0) return -1;
            /* Bytes between members that are not a member are damage too. */
            if (gz->in_pos != before && !gz->resyncing) member_failed(gz, "garbage between members");
            if (!found) return 0;
            inflateReset(&gz->zs);
            gz->in_member = true;
        }
        gz->zs.next_in = gz->in + gz->in_pos;
        gz->zs.avail_in = (uInt)(gz->in_len - gz->in_pos);
        gz->zs.next_out = buf;
        gz->zs.avail_out = (uInt)(cap > UINT32_MAX ? UINT32_MAX : cap);
        uInt avail_out_before = gz->zs.avail_out;
        int ret = inflate(&gz->zs, Z_NO_FLUSH);
        size_t consumed = (gz->in_len - gz->in_pos) - gz->zs.avail_in;
        size_t produced = avail_out_before - gz->zs.avail_out;
        gz->in_pos += consumed;
        if (ret == Z_STREAM_END) {
            gz->in_member = false;
            gz->resyncing = false;
            if (produced) return (long)produced;
            continue;
        }
        if (ret == Z_OK || ret == Z_BUF_ERROR) {
            if (produced) {
                gz->resyncing = false;
                return (long)produced;
            }
            if (ret == Z_BUF_ERROR && gz->in_pos < gz->in_len && gz->zs.avail_out > 0) {
                member_failed(gz, "inflate made no progress");
                continue;
            }
            if (!gz->src_eof && refill(gz)) return -1;
            if (gz->src_eof && gz->in_pos == gz->in_len) continue; /* truncated: handled above */
            continue;
        }
        /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR, Z_MEM_ERROR */
        if (ret == Z_MEM_ERROR) return dl_fail("zlib: out of memory");
        member_failed(gz, gz->zs.msg);
        /* Start the search one byte past this member's start at worst. */
        if (consumed == 0 && gz->in_pos < gz->in_len) gz->in_pos++;
    }
}

bool dl_gzreader_take_discontinuity(dl_gzreader *gz) {
    bool d = gz->discontinuity;
    gz->discontinuity = false;
    return d;
}

void dl_gzreader_free(dl_gzreader *gz) {
    if (!gz) return;
    if (gz->zs_ready) inflateEnd(&gz->zs);
    free(gz);
}

bool dl_gzreader_is_gzip(const dl_gzreader *gz) { return gz->mode == GZ_GZIP; }

void dl_gzreader_set_plain(dl_gzreader *gz) {
    if (gz->mode == GZ_UNDECIDED) gz->mode = GZ_PLAIN;
}
