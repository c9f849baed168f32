/* What the averaging and state transfer read from peers: encoded gradient
 * parts (codecs none, fp16, uint8, int8, topk, and a topk round's sparse
 * fp16 results) decode to finite floats within the bound or are refused,
 * and a snapshot description ("state.info") is refused or accepted with
 * every chunk hash, the metadata and the chunk map inside bounds. The first
 * byte picks the parser (and the codec): mod 8, 0-2 none fp16 uint8, 4
 * int8, 5 topk, 6 sparse fp16, 3 and 7 the description. */
#include <math.h>

#include "collab/state_transfer.h"
#include "collab/wirecodec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_setup();
    if (size < 2) return 0;
    size_t n = size - 2;
    uint8_t *body = (uint8_t *)fuzz_copy(data + 2, n, false);
    int sel = data[0] % 8;
    if (sel != 3 && sel != 7) {
        static const int codec_of[8] = {DL_CODEC_NONE, DL_CODEC_FP16, DL_CODEC_UINT8, -1,
                                        DL_CODEC_INT8, DL_CODEC_TOPK, DL_CODEC_TOPK, -1};
        int codec = codec_of[sel];
        bool result = sel == 6;
        /* the float count the receiver expects: from the size, or off by a little */
        size_t count = codec == DL_CODEC_NONE   ? n / 4
                       : codec == DL_CODEC_FP16 ? n / 2
                       : codec == DL_CODEC_INT8 ? (n >= 4 ? n - 4 : 0)
                       : result                 ? 64 * (size_t)(1 + data[1] % 16) + 2 /* the bitmap fixes no count */
                       : codec == DL_CODEC_TOPK ? n / 120 * DL_CODEC_TOPK_BLOCK
                                                : n;
        count = count + (size_t)(data[1] % 5) - 2 > count + 2 ? count : count + (size_t)(data[1] % 5) - 2;
        if (count > 0 && count < (1u << 20)) {
            float *out = malloc(count * sizeof *out);
            if (!out) abort();
            int rc = result ? dl_codec_result_decode(codec, body, n, count, out)
                            : dl_codec_decode(codec, body, n, count, out);
            if (rc == 0) {
                FUZZ_ASSERT(result ? n == dl_codec_result_size(codec, body, n, count) : n == dl_codec_size(codec, count));
                for (size_t i = 0; i < count; i++) FUZZ_ASSERT(dl_codec_bounded(out[i]));
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
