/* Writes the seed corpora of the fuzz harnesses into FOLDER/<harness>/: one
 * valid input (or a few) per parser, made with the encoders themselves, so
 * the fuzzer starts from inputs that reach deep into each parser. The files
 * committed under tests/fuzz/corpus/ were made with it:
 *   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "collab/state_transfer.h"
#include "collab/wirecodec.h"
#include "dedloc/net.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "net/delegation.h"
#include "net/swarm.h"
#include "net/wire.h"

static const char *root;

static void put(const char *harness, const char *name, const void *data, size_t size) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, harness);
    if (dl_mkdirs(dir)) {
        fprintf(stderr, "%s\n", dl_error());
        exit(1);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (dl_write_file_atomic(path, data, size)) {
        fprintf(stderr, "%s\n", dl_error());
        exit(1);
    }
}

/* A selector byte, then the body (harnesses that pick a parser by the first byte). */
static void put_selected(const char *harness, const char *name, uint8_t selector, const void *data, size_t size) {
    uint8_t *buf = malloc(size + 1);
    buf[0] = selector;
    memcpy(buf + 1, data, size);
    put(harness, name, buf, size + 1);
    free(buf);
}

static void net_seeds(void) {
    struct dl_identity id;
    if (dl_identity_load(NULL, &id)) exit(1);
    /* handshake and messages */
    struct dl_handshake hs;
    dl_handshake_begin(&hs, true, &id, "fuzz-run", false);
    put_selected("fuzz_handshake", "hello", 0, hs.my_hello, hs.my_hello_size);
    put_selected("fuzz_messages", "hello", 1, hs.my_hello, hs.my_hello_size);
    uint8_t sig[DL_WIRE_SIG];
    dl_handshake_sign(&hs, &id, sig);
    dl_handshake_clear(&hs);
    size_t n;
    uint8_t *b;
    struct dl_authority auth;
    memset(&auth, 0, sizeof auth);
    crypto_sign_keypair(auth.pk, auth.sk);
    snprintf(auth.run_id, sizeof auth.run_id, "fuzz-run");
    struct dl_token t;
    memset(&t, 0, sizeof t);
    snprintf(t.run_id, sizeof t.run_id, "fuzz-run");
    snprintf(t.peer_id, sizeof t.peer_id, "%s", id.peer_id);
    snprintf(t.name, sizeof t.name, "seed");
    t.role = DL_ROLE_TRAINER;
    t.issued = 1700000000;
    t.expires = 1800000000;
    uint8_t tok[DL_TOKEN_MAX_BYTES];
    size_t tok_n;
    dl_token_sign(&auth, &t, tok, &tok_n);
    b = dl_msg_auth_encode(sig, tok, tok_n, &n);
    put_selected("fuzz_messages", "auth", 2, b, n);
    free(b);
    struct dl_msg_error e = {9, 1, "not admitted: no token"};
    b = dl_msg_error_encode(&e, &n);
    put_selected("fuzz_messages", "error", 3, b, n);
    free(b);
    b = dl_msg_ping_encode(123456789, &n);
    put_selected("fuzz_messages", "ping", 4, b, n);
    free(b);
    b = dl_msg_cancel_encode(77, &n);
    put_selected("fuzz_messages", "cancel", 8, b, n);
    free(b);
    struct dl_record r;
    memset(&r, 0, sizeof r);
    r.seq = 5;
    r.epoch = 3;
    r.samples = 100;
    r.samples_per_second = 12.5;
    r.time = 1700000000.5;
    snprintf(r.address, sizeof r.address, "127.0.0.1:7000");
    size_t blob_n;
    uint8_t *blob = dl_record_sign(&r, "fuzz-run", &id, &blob_n);
    put("fuzz_record", "blob", blob, blob_n);
    const uint8_t *blobs[2] = {blob, blob};
    size_t sizes[2] = {blob_n, blob_n};
    b = dl_msg_records_encode(blobs, sizes, 2, &n);
    put("fuzz_record", "records", b, n);
    put_selected("fuzz_messages", "records", 5, b, n);
    free(b);
    free(blob);
    struct dl_msg_request req = {42, "avg.part", 5.0, false, 4, (const uint8_t *)"abcd", 4};
    b = dl_msg_request_encode(&req, &n);
    put_selected("fuzz_messages", "request", 6, b, n);
    free(b);
    uint8_t raw[2000];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)(i % 7);
    uint8_t *z;
    size_t zn;
    dl_wire_deflate(raw, sizeof raw, &z, &zn);
    struct dl_msg_response resp = {42, 0, true, sizeof raw, z, zn};
    b = dl_msg_response_encode(&resp, &n);
    put_selected("fuzz_messages", "response", 7, b, n);
    free(b);
    free(z);
    /* a sealed frame */
    struct dl_seal tx;
    memset(&tx, 0x5a, sizeof tx.key);
    tx.counter = 0;
    uint8_t frame[DL_WIRE_HEADER + 64 + DL_WIRE_TAG];
    dl_frame_seal(&tx, DL_MSG_PING, raw, 64, frame);
    put("fuzz_frame", "sealed", frame, sizeof frame);
    /* tokens and revocations */
    put_selected("fuzz_token", "token", 0, tok, tok_n);
    char text[DL_TOKEN_TEXT_MAX];
    dl_token_to_text(tok, tok_n, text);
    put_selected("fuzz_token", "token_text", 1, text, strlen(text));
    /* a token issued through an invite: the authority's delegation inside */
    uint8_t dpk[32], dsk[64], deleg[DL_DELEGATION_BYTES], dtok[DL_TOKEN_MAX_BYTES];
    size_t dtok_n;
    crypto_sign_keypair(dpk, dsk);
    dl_delegation_sign(&auth, dpk, DL_ROLE_TRAINER, 1900000000, deleg);
    dl_token_sign_delegated(deleg, dsk, &t, dtok, &dtok_n);
    put_selected("fuzz_token", "token_delegated", 0, dtok, dtok_n);
    char list_path[1100];
    snprintf(list_path, sizeof list_path, "%s/.revoked.tmp", root);
    dl_revocations_add(&auth, list_path, id.peer_id);
    dl_revocations_add(&auth, list_path, "00112233445566778899aabbccddeeff");
    char *list_text;
    size_t list_n;
    dl_read_file(list_path, 1 << 20, &list_text, &list_n);
    remove(list_path);
    uint8_t list_bin[512];
    size_t list_bin_n = 0;
    sodium_base642bin(list_bin, sizeof list_bin, list_text + 5, list_n - 6, NULL, &list_bin_n, NULL,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    free(list_text);
    put_selected("fuzz_token", "revocations", 2, list_bin, list_bin_n);
    b = dl_msg_revocations_encode(list_bin, list_bin_n, &n);
    put_selected("fuzz_messages", "revocations", 9, b, n);
    free(b);
}

static void checkpoint_seed(void) {
    const char *names[2] = {"albert.embeddings.word_embeddings.weight", "albert.embeddings.LayerNorm.bias"};
    size_t numels[2] = {8, 4};
    dl_train_layout l;
    dl_train_layout_init(&l, 2, names, numels, NULL);
    dl_opt_config cfg = dl_opt_config_sahajbert();
    dl_optimizer opt;
    if (dl_optimizer_init(&opt, &cfg, &l)) exit(1);
    dl_train_layout_free(&l);
    float params[12], grad[12];
    for (int i = 0; i < 12; i++) params[i] = 0.1f * (float)i, grad[i] = 0.01f * (float)(i - 6);
    dl_optimizer_step(&opt, params, grad, NULL);
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, &opt, params);
    ck.model_config_json = "{\"model_type\": \"albert\", \"vocab_size\": 10, \"hidden_size\": 8, "
                           "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 16, "
                           "\"embedding_size\": 4}";
    ck.run_json = "{\"batch\": 4}";
    dl_loss_scale_init(&ck.loss_scale, true);
    char *out;
    size_t n;
    if (dl_checkpoint_serialize(&ck, &out, &n)) exit(1);
    put("fuzz_checkpoint", "small", out, n);
    free(out);
    dl_optimizer_free(&opt);
}

static void gzip_seed(const char *text, size_t len) {
    uint8_t out[8192];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = (Bytef *)text;
    zs.avail_in = (uInt)len;
    zs.next_out = out + 2;
    zs.avail_out = sizeof out - 2;
    deflate(&zs, Z_FINISH);
    size_t n = zs.total_out;
    deflateEnd(&zs);
    out[0] = 3, out[1] = 2; /* read step and line limit bytes of the harness */
    /* two members back to back, as appended shards are */
    memcpy(out + 2 + n, out + 2, n);
    put("fuzz_gzip_lines", "two_members.gz", out, 2 + 2 * n);
}

static void collab_seeds(void) {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = 0.25f * (float)(i - 30);
    for (int codec = 0; codec < 3; codec++) {
        size_t n = dl_codec_size(codec, 64);
        uint8_t *buf = malloc(n + 2);
        buf[0] = (uint8_t)codec;
        buf[1] = 2; /* the expected count is exact */
        if (dl_codec_encode(codec, x, 64, buf + 2)) exit(1);
        char name[32];
        snprintf(name, sizeof name, "codec_%s", dl_codec_name(codec));
        put("fuzz_collab_wire", name, buf, n + 2);
        free(buf);
    }
    /* int8 (selector 4) of 64 values, topk (5) of one full block, and its
     * sparse fp16 result (6) of 64 values */
    float block[DL_CODEC_TOPK_BLOCK];
    for (int i = 0; i < DL_CODEC_TOPK_BLOCK; i++) block[i] = 0.001f * (float)((i * 37) % 1001 - 500);
    uint8_t *more = malloc(2 + dl_codec_size(DL_CODEC_TOPK, DL_CODEC_TOPK_BLOCK) + dl_codec_result_max(DL_CODEC_TOPK, 64));
    more[1] = 2;
    more[0] = 4;
    if (dl_codec_encode(DL_CODEC_INT8, x, 64, more + 2)) exit(1);
    put("fuzz_collab_wire", "codec_int8", more, 2 + dl_codec_size(DL_CODEC_INT8, 64));
    more[0] = 5;
    if (dl_codec_encode(DL_CODEC_TOPK, block, DL_CODEC_TOPK_BLOCK, more + 2)) exit(1);
    put("fuzz_collab_wire", "codec_topk", more, 2 + dl_codec_size(DL_CODEC_TOPK, DL_CODEC_TOPK_BLOCK));
    more[0] = 6;
    more[1] = 0; /* 64 values */
    size_t sparse = 0;
    for (int i = 0; i < 64; i++) x[i] = i % 5 ? 0 : 0.25f * (float)(i - 30);
    if (dl_codec_result_encode(DL_CODEC_TOPK, x, 64, more + 2, &sparse)) exit(1);
    put("fuzz_collab_wire", "result_sparse16", more, 2 + sparse);
    free(more);
    struct dl_state_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.epoch = 7;
    desc.chunk_size = DL_STATE_MIN_CHUNK;
    desc.num_buffers = 2;
    desc.sizes[0] = 3 * DL_STATE_MIN_CHUNK + 100;
    desc.sizes[1] = 40;
    if (dl_state_count_chunks(desc.sizes, 2, desc.chunk_size, &desc.num_chunks)) exit(1);
    desc.meta_size = 5;
    uint64_t hashes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t n;
    uint8_t *blob = dl_state_desc_encode(&desc, hashes, "meta!", &n);
    if (!blob) exit(1);
    uint8_t *buf = malloc(n + 2);
    buf[0] = 3;
    buf[1] = 0;
    memcpy(buf + 2, blob, n);
    put("fuzz_collab_wire", "state_info", buf, n + 2);
    free(buf);
    free(blob);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds FOLDER\n");
        return 2;
    }
    root = argv[1];
    if (sodium_init() < 0) return 1;
    net_seeds();
    checkpoint_seed();
    collab_seeds();
    static const char lines[] = "{\"text\": \"Hello world. Second sentence.\"}\n{\"text\": \"\\u0986 next\", \"id\": 2}\n"
                                "not json\n{\"other\": 1}\n\n";
    put_selected("fuzz_jsonl", "lines.jsonl", 0, lines, sizeof lines - 1);
    static const char paragraphs[] = "one line\nsame doc\n\nnext doc\r\n";
    put_selected("fuzz_jsonl", "paragraphs.txt", 2, paragraphs, sizeof paragraphs - 1);
    static const char gz_lines[] = "first line\nsecond line\r\nthird\n";
    gzip_seed(gz_lines, sizeof gz_lines - 1);
    static const char head206[] = "\x00\xce\x80\0\0\0\0\0\0\x05" "bytes 5-99/100\0" "95";
    put("fuzz_http_head", "206", head206, sizeof head206 - 1);
    static const char head200[] = "\x00\x64\x00\0\0\0\0\0\0\x00" "\0" "1234";
    put("fuzz_http_head", "200", head200, sizeof head200 - 1);
    static const char tok_json[] =
        "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<pad>\",\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
        "\"add_prefix_space\":true},\"post_processor\":null,\"decoder\":null,"
        "\"model\":{\"type\":\"Unigram\",\"unk_id\":1,\"vocab\":[[\"<pad>\",0.0],[\"<unk>\",0.0],"
        "[\"\\u2581\",-1.0],[\"H\",-2.0],[\"e\",-2.0],[\"l\",-2.0],[\"o\",-2.0],[\"\\u2581Hello\",-1.5]]}}";
    put("fuzz_tokenizer_json", "tiny.json", tok_json, sizeof tok_json - 1);
    static const char config[] = "{\"vocab_size\": 30, \"hidden_size\": 8, \"num_hidden_layers\": 1,"
                                 " \"num_attention_heads\": 2, \"intermediate_size\": 16}";
    put("fuzz_config_json", "minimal.json", config, sizeof config - 1);
    printf("seeds written to %s\n", root);
    return 0;
}
