/* zlib for bulk request/response payloads. */
#include <stdlib.h>
#include <zlib.h>

#include "dedloc/util.h"
#include "net/wire.h"

int dl_wire_deflate(const uint8_t *data, size_t size, uint8_t **out, size_t *out_size) {
    *out = NULL;
    if (size < 1024 || size > UINT32_MAX) return 1;
    uLongf cap = compressBound((uLong)size);
    uint8_t *buf = dl_malloc(cap);
    if (!buf) return -1;
    if (compress2(buf, &cap, data, (uLong)size, 1) != Z_OK || cap > size - size / 8) {
        free(buf);
        return 1;
    }
    *out = buf;
    *out_size = cap;
    return 0;
}

int dl_wire_inflate(const uint8_t *data, size_t size, uint64_t raw_size, uint64_t max_size,
                    uint8_t **out) {
    *out = NULL;
    if (raw_size > max_size) return dl_fail("compressed payload claims %llu bytes, limit %llu",
                                            (unsigned long long)raw_size, (unsigned long long)max_size);
    uint8_t *buf = dl_malloc(raw_size ? raw_size : 1);
    if (!buf) return -1;
    uLongf got = (uLongf)raw_size;
    int rc = uncompress(buf, &got, data, (uLong)size);
    if (rc != Z_OK || got != raw_size) {
        free(buf);
        return dl_fail("compressed payload is corrupt (zlib %d)", rc);
    }
    *out = buf;
    return 0;
}
