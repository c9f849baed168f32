/* What the averaging and state transfer read from peers: encoded gradient
 * parts (codecs none, fp16, uint8) decode to finite floats or are refused,
 * and a snapshot description ("state.info") is refused or accepted with
 * every chunk hash, the metadata and the chunk map inside bounds. The first
 * byte picks the parser (and the codec). */
#include <math.h>

#include "collab/state_transfer.h"
#include "collab/wirecodec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 2) return 0;
    size_t n = size - 2;
    uint8_t *body = (uint8_t *)fuzz_copy(data + 2, n, false);
    if (data[0] % 4 < 3) {
        int codec = data[0] % 4;
        /* the float count the receiver expects: from the size, or off by a little */
        size_t count = codec == DL_CODEC_NONE ? n / 4 : codec == DL_CODEC_FP16 ? n / 2 : n;
        count = count + (size_t)(data[1] % 5) - 2 > count + 2 ? count : count + (size_t)(data[1] % 5) - 2;
        if (count > 0 && count < (1u << 20)) {
            float *out = malloc(count * sizeof *out);
            if (!out) abort();
            if (dl_codec_decode(codec, body, n, count, out) == 0) {
                FUZZ_ASSERT(n == dl_codec_size(codec, count));
                for (size_t i = 0; i < count; i++) FUZZ_ASSERT(isfinite(out[i]));
            }
            free(out);
        }
    } else {
        struct dl_state_desc desc;
        if (dl_state_desc_decode(body, n, 4096, &desc) == 0) {
            FUZZ_ASSERT(desc.num_buffers <= DL_STATE_MAX_BUFFERS && desc.meta_size <= 4096);
            FUZZ_ASSERT(desc.num_chunks <= n / 8);
            FUZZ_ASSERT(desc.num_chunks == 0 ||
                        (desc.chunk_hashes >= body && desc.chunk_hashes + 8 * desc.num_chunks <= body + n));
            if (desc.meta_size) FUZZ_ASSERT(desc.meta >= body && desc.meta + desc.meta_size <= body + n);
            for (uint64_t k = 0; k < desc.num_chunks; k++) (void)dl_state_chunk_hash(&desc, k);
            struct dl_state_chunk *map =
                dl_state_chunk_map(desc.sizes, desc.num_buffers, desc.chunk_size, desc.num_chunks);
            free(map);
        }
    }
    free(body);
    return 0;
}
