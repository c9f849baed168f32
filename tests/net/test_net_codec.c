/* The wire format refuses malformed input: frame headers, msgpack structure,
 * every message's field types, signed records, and the swarm view math. */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "dl_test.h"
#include "net/swarm.h"
#include "net/wire.h"

static void test_frame_header(void) {
    uint8_t h[DL_WIRE_HEADER];
    struct dl_frame_header fh;
    dl_frame_write_header(h, DL_MSG_PING, 1234);
    CHECK(dl_frame_parse_header(h, sizeof h, 1 << 20, &fh) == DL_FRAME_OK);
    CHECK(fh.type == DL_MSG_PING && fh.length == 1234 && fh.version == DL_WIRE_VERSION);
    /* truncated header: wait for more, never read past */
    for (size_t n = 0; n < DL_WIRE_HEADER; n++) CHECK(dl_frame_parse_header(h, n, 1 << 20, &fh) == DL_FRAME_NEED_MORE);
    /* length 2^32-1 refused from the header alone */
    dl_frame_write_header(h, DL_MSG_RECORDS, 0xffffffffu);
    CHECK(dl_frame_parse_header(h, sizeof h, 16u << 20, &fh) == DL_FRAME_TOO_LARGE);
    dl_frame_write_header(h, DL_MSG_RECORDS, 16u << 20);
    CHECK(dl_frame_parse_header(h, sizeof h, 16u << 20, &fh) == DL_FRAME_OK);
    /* wrong version: reported with the header filled in, so we can say so */
    dl_frame_write_header(h, DL_MSG_HELLO, 10);
    h[2] = 99;
    CHECK(dl_frame_parse_header(h, sizeof h, 1 << 20, &fh) == DL_FRAME_BAD_VERSION && fh.version == 99);
    /* garbage: refused on the first byte */
    uint8_t g[1] = {'G'};
    CHECK(dl_frame_parse_header(g, 1, 1 << 20, &fh) == DL_FRAME_BAD_MAGIC);
    uint8_t g2[2] = {DL_WIRE_MAGIC0, 'x'};
    CHECK(dl_frame_parse_header(g2, 2, 1 << 20, &fh) == DL_FRAME_BAD_MAGIC);
}

static void test_seal(void) {
    struct dl_seal a, b;
    memset(&a, 0, sizeof a);
    randombytes_buf(a.key, sizeof a.key);
    b = a;
    const uint8_t msg[] = "progress record";
    uint8_t frame[DL_WIRE_HEADER + sizeof msg + DL_WIRE_TAG];
    for (int round = 0; round < 3; round++) {
        dl_frame_seal(&a, DL_MSG_RECORDS, msg, sizeof msg, frame);
        size_t n = sizeof msg + DL_WIRE_TAG;
        uint8_t body[sizeof msg + DL_WIRE_TAG];
        memcpy(body, frame + DL_WIRE_HEADER, n);
        CHECK(dl_frame_open(&b, frame, body, &n) == 0 && n == sizeof msg && !memcmp(body, msg, n));
    }
    /* every single bit flip in header or body is caught */
    int caught = 0, total = 0;
    for (size_t bit = 0; bit < 8 * sizeof frame; bit += 7) {
        struct dl_seal s1 = a, s2 = b;
        dl_frame_seal(&s1, DL_MSG_RECORDS, msg, sizeof msg, frame);
        frame[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        uint8_t body[sizeof msg + DL_WIRE_TAG];
        size_t n = sizeof body;
        memcpy(body, frame + DL_WIRE_HEADER, n);
        total++;
        if (dl_frame_open(&s2, frame, body, &n) != 0) caught++;
    }
    CHECK_MSG(caught == total, "%d of %d tampered frames caught", caught, total);
    /* a replayed (old counter) frame is refused */
    struct dl_seal s1 = a, s2 = b;
    dl_frame_seal(&s1, DL_MSG_PING, msg, sizeof msg, frame);
    uint8_t body[sizeof msg + DL_WIRE_TAG];
    size_t n = sizeof body;
    memcpy(body, frame + DL_WIRE_HEADER, n);
    CHECK(dl_frame_open(&s2, frame, body, &n) == 0);
    n = sizeof body;
    memcpy(body, frame + DL_WIRE_HEADER, n);
    CHECK(dl_frame_open(&s2, frame, body, &n) != 0);

    /* The wire is RFC 8439 ChaCha20-Poly1305 with the header as associated
     * data and nonce = 4 zero bytes + the little-endian counter, whichever
     * library computes it: a frame sealed here opens with libsodium, and
     * one sealed by libsodium opens here, at the sizes a round sends (empty,
     * small, one 1 MiB chunk). */
    size_t sizes[] = {0, 1, 63, 1000, (size_t)1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t len = sizes[i];
        uint8_t *plain = malloc(len + 1), *sealed = malloc(DL_WIRE_HEADER + len + DL_WIRE_TAG);
        uint8_t *opened = malloc(len + DL_WIRE_TAG + 1);
        CHECK(plain && sealed && opened);
        if (!plain || !sealed || !opened) break;
        randombytes_buf(plain, len + 1);
        struct dl_seal tx = a, rx = a;
        tx.counter = rx.counter = 0x0102030405060708ull + i;
        uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES] = {0};
        for (int k = 0; k < 8; k++) nonce[4 + k] = (uint8_t)(tx.counter >> (8 * k));
        dl_frame_seal(&tx, DL_MSG_RECORDS, plain, len, sealed);
        unsigned long long plen = 0;
        CHECK_MSG(crypto_aead_chacha20poly1305_ietf_decrypt(opened, &plen, NULL, sealed + DL_WIRE_HEADER,
                                                            len + DL_WIRE_TAG, sealed, DL_WIRE_HEADER, nonce,
                                                            a.key) == 0 &&
                      plen == len && !memcmp(opened, plain, len),
                  "%zu bytes sealed here do not open with libsodium", len);
        unsigned long long clen = 0;
        dl_frame_write_header(sealed, DL_MSG_RECORDS, (uint32_t)(len + DL_WIRE_TAG));
        crypto_aead_chacha20poly1305_ietf_encrypt(sealed + DL_WIRE_HEADER, &clen, plain, len, sealed, DL_WIRE_HEADER,
                                                  NULL, nonce, a.key);
        memcpy(opened, sealed + DL_WIRE_HEADER, len + DL_WIRE_TAG);
        size_t got = len + DL_WIRE_TAG;
        CHECK_MSG(dl_frame_open(&rx, sealed, opened, &got) == 0 && got == len && !memcmp(opened, plain, len) &&
                      rx.counter == tx.counter,
                  "%zu bytes sealed by libsodium do not open here", len);
        /* and a flipped tag bit is refused */
        rx.counter--;
        memcpy(opened, sealed + DL_WIRE_HEADER, len + DL_WIRE_TAG);
        opened[len] ^= 1;
        got = len + DL_WIRE_TAG;
        CHECK(dl_frame_open(&rx, sealed, opened, &got) != 0);
        free(plain);
        free(sealed);
        free(opened);
    }
}

static void test_msgpack_check(void) {
    /* array32 claiming 2^32-1 elements in 5 bytes */
    const uint8_t huge_array[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    CHECK(dl_msgpack_check(huge_array, sizeof huge_array) != 0);
    const uint8_t huge_map[] = {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01, 0x02};
    CHECK(dl_msgpack_check(huge_map, sizeof huge_map) != 0);
    const uint8_t huge_bin[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 0x00};
    CHECK(dl_msgpack_check(huge_bin, sizeof huge_bin) != 0);
    const uint8_t huge_str[] = {0xdb, 0xff, 0xff, 0xff, 0xf0};
    CHECK(dl_msgpack_check(huge_str, sizeof huge_str) != 0);
    const uint8_t never_used[] = {0xc1};
    CHECK(dl_msgpack_check(never_used, 1) != 0);
    const uint8_t trailing[] = {0x01, 0x02};
    CHECK(dl_msgpack_check(trailing, 2) != 0);
    CHECK(dl_msgpack_check(trailing, 0) != 0);
    uint8_t deep[40];
    memset(deep, 0x91, sizeof deep); /* [[[[...]]]] */
    deep[39] = 0x01;
    CHECK(dl_msgpack_check(deep, sizeof deep) != 0);
    CHECK(dl_msgpack_check(deep + 30, 10) == 0);
    const uint8_t ok[] = {0x93, 0x01, 0xa1, 'x', 0xc3};
    CHECK(dl_msgpack_check(ok, sizeof ok) == 0);
    /* random bytes never crash and never claim more than is there */
    dl_rng rng;
    dl_rng_seed(&rng, 42);
    uint8_t buf[64];
    int forged_records_accepted = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = 1 + dl_rng_below(&rng, sizeof buf);
        for (size_t j = 0; j < n; j++) buf[j] = (uint8_t)dl_rng_next(&rng);
        struct dl_msg_request m;
        (void)dl_msg_request_decode(buf, n, &m);
        struct dl_msg_hello h;
        (void)dl_msg_hello_decode(buf, n, &h);
        struct dl_record r;
        /* random bytes can never carry a valid ed25519 signature */
        if (dl_record_verify(buf, n, "run", &r) == 0) forged_records_accepted++;
    }
    CHECK_MSG(forged_records_accepted == 0, "%d random buffers passed as signed records",
              forged_records_accepted);
}

static void test_messages(void) {
    struct dl_msg_hello h, h2;
    memset(&h, 0, sizeof h);
    h.version = DL_WIRE_VERSION;
    strcpy(h.run_id, "sahajbert");
    randombytes_buf(h.sign_pk, sizeof h.sign_pk);
    randombytes_buf(h.kx_pk, sizeof h.kx_pk);
    randombytes_buf(h.nonce, sizeof h.nonce);
    h.client_mode = true;
    size_t n;
    uint8_t *b = dl_msg_hello_encode(&h, &n);
    CHECK(b && dl_msg_hello_decode(b, n, &h2) == 0 && !memcmp(&h, &h2, sizeof h));
    /* truncated at every length */
    int refused = 0;
    for (size_t k = 0; k < n; k++) refused += dl_msg_hello_decode(b, k, &h2) != 0;
    CHECK_MSG(refused == (int)n, "%d of %zu truncations refused", refused, n);
    /* a HELLO body is not a REQUEST (wrong types) */
    struct dl_msg_request rq;
    CHECK(dl_msg_request_decode(b, n, &rq) != 0);
    free(b);

    /* wrong field types: version as a string, key of 31 bytes */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 6);
    msgpack_pack_str(&pk, 1);
    msgpack_pack_str_body(&pk, "1", 1);
    msgpack_pack_str(&pk, 1);
    msgpack_pack_str_body(&pk, "r", 1);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_bin(&pk, 31);
        msgpack_pack_bin_body(&pk, h.nonce, 31);
    }
    msgpack_pack_true(&pk);
    CHECK(dl_msg_hello_decode((const uint8_t *)sb.data, sb.size, &h2) != 0);
    msgpack_sbuffer_destroy(&sb);

    /* request round trip, and a size mismatch refused */
    uint8_t payload[100];
    for (int i = 0; i < 100; i++) payload[i] = (uint8_t)i;
    struct dl_msg_request r = {7, "state", 2.5, false, 100, payload, 100}, r2;
    b = dl_msg_request_encode(&r, &n);
    CHECK(b && dl_msg_request_decode(b, n, &r2) == 0 && r2.id == 7 && !strcmp(r2.method, "state") &&
          r2.size == 100 && !memcmp(r2.payload, payload, 100) && r2.payload >= b && r2.payload + 100 <= b + n);
    free(b);
    r.raw_size = 5;
    b = dl_msg_request_encode(&r, &n);
    CHECK(dl_msg_request_decode(b, n, &r2) != 0);
    free(b);
    /* method name too long */
    char longm[200];
    memset(longm, 'm', sizeof longm);
    longm[199] = 0;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 6);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_str(&pk, 199);
    msgpack_pack_str_body(&pk, longm, 199);
    msgpack_pack_double(&pk, 1.0);
    msgpack_pack_false(&pk);
    msgpack_pack_uint64(&pk, 0);
    msgpack_pack_bin(&pk, 0);
    CHECK(dl_msg_request_decode((const uint8_t *)sb.data, sb.size, &r2) != 0);
    msgpack_sbuffer_destroy(&sb);

    struct dl_msg_error e = {DL_ERR_VERSION, 3, "go away"}, e2;
    b = dl_msg_error_encode(&e, &n);
    CHECK(b && dl_msg_error_decode(b, n, &e2) == 0 && e2.code == DL_ERR_VERSION && e2.version == 3 &&
          !strcmp(e2.text, "go away"));
    free(b);
    uint64_t id = 0;
    b = dl_msg_cancel_encode(99, &n);
    CHECK(b && dl_msg_cancel_decode(b, n, &id) == 0 && id == 99);
    CHECK(dl_msg_ping_decode(b, n, &id) == 0); /* same shape, different type byte: the frame says which */
    free(b);

    /* zlib: compressible payload shrinks and comes back; a lie about the size is refused */
    uint8_t big[8192];
    memset(big, 7, sizeof big);
    uint8_t *z, *back;
    size_t zn;
    CHECK(dl_wire_deflate(big, sizeof big, &z, &zn) == 0 && zn < sizeof big / 4);
    CHECK(dl_wire_inflate(z, zn, sizeof big, 1 << 20, &back) == 0 && !memcmp(back, big, sizeof big));
    free(back);
    CHECK(dl_wire_inflate(z, zn, sizeof big - 1, 1 << 20, &back) != 0);
    CHECK(dl_wire_inflate(z, zn, 1ull << 40, 1 << 20, &back) != 0);
    free(z);
    uint8_t noise[4096];
    randombytes_buf(noise, sizeof noise);
    CHECK(dl_wire_deflate(noise, sizeof noise, &z, &zn) == 1 && z == NULL);
}

static void test_records(void) {
    struct dl_identity alice, mallory;
    CHECK_OK(dl_identity_load(NULL, &alice));
    CHECK_OK(dl_identity_load(NULL, &mallory));
    struct dl_record r;
    memset(&r, 0, sizeof r);
    r.seq = 5;
    r.epoch = 3;
    r.samples = 100;
    r.samples_per_second = 10;
    r.time = 1000;
    strcpy(r.address, "127.0.0.1:4000");
    size_t n;
    uint8_t *blob = dl_record_sign(&r, "run-a", &alice, &n);
    struct dl_record got;
    CHECK_OK(dl_record_verify(blob, n, "run-a", &got));
    CHECK(got.epoch == 3 && got.samples == 100 && !strcmp(got.peer_id, alice.peer_id) &&
          !strcmp(got.address, "127.0.0.1:4000"));
    CHECK(dl_record_verify(blob, n, "run-b", &got) != 0); /* replay into another run */
    /* any flipped byte breaks it */
    int refused = 0;
    for (size_t i = 0; i < n; i++) {
        blob[i] ^= 0x20;
        refused += dl_record_verify(blob, n, "run-a", &got) != 0;
        blob[i] ^= 0x20;
    }
    CHECK_MSG(refused == (int)n, "%d of %zu tampered records refused", refused, n);
    free(blob);
    /* forged: Mallory signs a record naming Alice's key */
    memcpy(r.pk, alice.pk, DL_WIRE_PK);
    struct dl_identity forger = mallory;
    memcpy(forger.pk, alice.pk, DL_WIRE_PK);
    blob = dl_record_sign(&r, "run-a", &forger, &n);
    CHECK(dl_record_verify(blob, n, "run-a", &got) != 0);
    CHECK(strstr(dl_error(), "forged") != NULL);
    free(blob);
    /* the parameter hash travels signed; a record without one has none */
    memcpy(r.pk, alice.pk, DL_WIRE_PK);
    r.has_param_hash = true;
    for (int i = 0; i < 32; i++) r.param_hash[i] = (uint8_t)(0xA0 + i);
    blob = dl_record_sign(&r, "run-a", &alice, &n);
    CHECK_OK(dl_record_verify(blob, n, "run-a", &got));
    CHECK(got.has_param_hash && got.param_hash[0] == 0xA0 && got.param_hash[31] == 0xA0 + 31);
    free(blob);
    r.has_param_hash = false;
    blob = dl_record_sign(&r, "run-a", &alice, &n);
    CHECK_OK(dl_record_verify(blob, n, "run-a", &got));
    CHECK(!got.has_param_hash);
    free(blob);
}

static void add_as(enum dl_role role, struct dl_swarm *sw, struct dl_identity *id, uint64_t seq, uint64_t epoch,
                   double samples, double sps, double time, bool client, bool goodbye) {
    struct dl_record r;
    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.epoch = epoch;
    r.samples = samples;
    r.samples_per_second = sps;
    r.time = time;
    r.client_mode = client;
    r.goodbye = goodbye;
    size_t n;
    uint8_t *blob = dl_record_sign(&r, "run", id, &n);
    struct dl_record got;
    if (dl_record_verify(blob, n, "run", &got) == 0) {
        got.role = role; /* as gossip.c sets it from the owner's admitted token */
        dl_swarm_apply(sw, &got, blob, n, 0);
    }
    free(blob);
}

static void add(struct dl_swarm *sw, struct dl_identity *id, uint64_t seq, uint64_t epoch, double samples,
                double sps, double time, bool client, bool goodbye) {
    add_as(DL_ROLE_NONE, sw, id, seq, epoch, samples, sps, time, client, goodbye);
}

/* The view against a hostile record (docs/protocol.md, "The swarm view"):
 * one peer at 2^64-1 moves nothing while others disagree, a quorum of two
 * moves the epoch, replays and records out of time are refused before any
 * signature check, and a departed peer's record cannot come back. */
static void test_swarm_hostile(void) {
    struct dl_identity p[4];
    for (int i = 0; i < 4; i++) CHECK_OK(dl_identity_load(NULL, &p[i]));
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    add(&sw, &p[0], 1, 5, 0, 0, 1000, false, false);
    add(&sw, &p[1], 1, 5, 10, 0, 1000, false, false);
    add(&sw, &p[2], 1, 5, 20, 0, 1000, false, false);
    add(&sw, &p[3], 1, UINT64_MAX, 1e300, 0, 1000, false, false);
    struct dl_swarm_view v;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.global_epoch == 5, "global epoch %llu", (unsigned long long)v.global_epoch);
    int unbacked = 0;
    for (size_t i = 0; i < v.num_peers; i++) unbacked += v.peers[i].epoch_unbacked;
    CHECK(unbacked == 1);
    dl_swarm_view_free(&v);
    /* p1 steps to 6: with p3's claim above it, two peers claim at least 6 */
    add(&sw, &p[1], 2, 6, 0, 0, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK(v.global_epoch == 6);
    dl_swarm_view_free(&v);
    /* samples beyond what a device does since it reached the epoch are cut */
    add(&sw, &p[2], 2, 6, 1e300, 0, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.collective_samples <= DL_SWARM_MAX_SPS * DL_SWARM_MAX_SKEW_S, "collective %g", v.collective_samples);
    dl_swarm_view_free(&v);
    /* a rate above what a device does counts as that rate */
    add(&sw, &p[2], 3, 6, 0, 1e12, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.samples_per_second == DL_SWARM_MAX_SPS, "rate %g", v.samples_per_second);
    dl_swarm_view_free(&v);
    /* precheck: duplicate, future, too old, an owner over its record rate */
    struct dl_record r;
    memset(&r, 0, sizeof r);
    memcpy(r.pk, p[1].pk, DL_WIRE_PK);
    r.seq = 2;
    r.time = 1000;
    CHECK(dl_swarm_precheck(&sw, &r, 0, 1000, 60) == DL_SWARM_OLD);
    r.seq = 3;
    r.time = 1031;
    CHECK(dl_swarm_precheck(&sw, &r, 0, 1000, 60) == DL_SWARM_IMPLAUSIBLE);
    r.time = 1000 - 60 - 30 - 1;
    CHECK(dl_swarm_precheck(&sw, &r, 0, 1000, 60) == DL_SWARM_IMPLAUSIBLE);
    r.time = 1000;
    int news = 0;
    for (int i = 0; i < 100; i++)
        if (dl_swarm_precheck(&sw, &r, 0, 1000, 60) == DL_SWARM_NEWS) {
            news++;
            dl_swarm_charge(&sw, r.pk, 0);
        }
    CHECK_MSG(news == (int)DL_SWARM_OWNER_BURST, "%d of 100 at once", news);
    /* tombstones: p2 expires; its last record, replayed, does not apply */
    CHECK(dl_swarm_expire(&sw, 100, 60, p[0].pk) == 3);
    memcpy(r.pk, p[2].pk, DL_WIRE_PK);
    r.seq = 3; /* its last one */
    CHECK(dl_swarm_precheck(&sw, &r, 101, 1000, 60) == DL_SWARM_OLD);
    CHECK(dl_swarm_apply(&sw, &r, (const uint8_t *)"x", 1, 101) == 0);
    r.seq = 4; /* its next record (it came back) does */
    CHECK(dl_swarm_apply(&sw, &r, (const uint8_t *)"x", 1, 101) == 1);
    dl_swarm_free(&sw);
}

/* A colluding pair (docs/protocol.md, "The swarm view"): two records at 9
 * beside honest others at 5 and 6 are two of four others for p0, no
 * majority: the epoch stays where three of them are and neither of the pair
 * is followed (the second-highest rule made it 9). Once a third other
 * reaches 9 the epoch follows. */
static void test_swarm_pair(void) {
    struct dl_identity p[5];
    for (int i = 0; i < 5; i++) CHECK_OK(dl_identity_load(NULL, &p[i]));
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    add(&sw, &p[0], 1, 5, 0, 0, 1000, false, false);
    add(&sw, &p[1], 1, 6, 0, 0, 1000, false, false);
    add(&sw, &p[2], 1, 5, 0, 0, 1000, false, false);
    add(&sw, &p[3], 1, 9, 0, 0, 1000, false, false);
    add(&sw, &p[4], 1, 9, 0, 0, 1000, false, false);
    struct dl_swarm_view v;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.global_epoch == 6, "a pair moved the epoch to %llu", (unsigned long long)v.global_epoch);
    int unbacked = 0;
    for (size_t i = 0; i < v.num_peers; i++) unbacked += v.peers[i].epoch_unbacked;
    CHECK(unbacked == 2);
    dl_swarm_view_free(&v);
    add(&sw, &p[1], 2, 9, 0, 0, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK(v.global_epoch == 9);
    dl_swarm_view_free(&v);
    dl_swarm_free(&sw);
}

/* Monitor-role records (docs/protocol.md, "Bounded claims, leaders and
 * roles"): a pair of monitors claiming a far epoch beside one trainer would
 * be two of three others, a majority, and their huge samples and rates
 * would fill the batch at once. Counted for nothing, they move neither the
 * epoch, nor the samples, nor the rate, nor appear among the peers. */
static void test_swarm_monitors_count_for_nothing(void) {
    struct dl_identity p[4];
    for (int i = 0; i < 4; i++) CHECK_OK(dl_identity_load(NULL, &p[i]));
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    add_as(DL_ROLE_TRAINER, &sw, &p[0], 1, 5, 10, 1, 1000, false, false);
    add_as(DL_ROLE_TRAINER, &sw, &p[1], 1, 5, 20, 2, 1000, false, false);
    add_as(DL_ROLE_MONITOR, &sw, &p[2], 1, 9, 1e300, 1e12, 1000, false, false);
    add_as(DL_ROLE_MONITOR, &sw, &p[3], 1, 9, 1e300, 1e12, 1000, false, false);
    struct dl_swarm_view v;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.global_epoch == 5, "two monitors moved the epoch to %llu", (unsigned long long)v.global_epoch);
    CHECK_MSG(v.collective_samples == 30, "collective %g with monitors' samples", v.collective_samples);
    CHECK_MSG(v.samples_per_second == 3, "rate %g with monitors' rates", v.samples_per_second);
    CHECK_MSG(v.num_peers == 2 && v.num_observers == 2, "%zu peers, %zu observers", v.num_peers, v.num_observers);
    for (size_t i = 0; i < v.num_peers; i++)
        CHECK(memcmp(v.peers[i].peer_id, p[2].peer_id, DL_PEER_ID_HEX) &&
              memcmp(v.peers[i].peer_id, p[3].peer_id, DL_PEER_ID_HEX));
    dl_swarm_view_free(&v);
    /* at our epoch, their samples would end the epoch for everyone */
    add_as(DL_ROLE_MONITOR, &sw, &p[2], 2, 5, 1e300, 1e12, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.collective_samples == 30 && v.eta_s > 0, "collective %g, eta %g", v.collective_samples, v.eta_s);
    dl_swarm_view_free(&v);
    dl_swarm_free(&sw);
}

/* Our own record with a param hash (a trainer's). */
static void add_self_with_hash(struct dl_swarm *sw, struct dl_identity *id, uint64_t seq, uint64_t epoch) {
    struct dl_record r;
    memset(&r, 0, sizeof r);
    r.seq = seq;
    r.epoch = epoch;
    r.time = 1000;
    r.has_param_hash = true;
    memset(r.param_hash, 0xa1, sizeof r.param_hash);
    size_t n;
    uint8_t *blob = dl_record_sign(&r, "run", id, &n);
    struct dl_record got;
    if (dl_record_verify(blob, n, "run", &got) == 0) dl_swarm_apply(sw, &got, blob, n, 0);
    free(blob);
}

/* Two colluding identities beside two honest peers (docs/collab_training.md,
 * "The epoch and the reference state"): to us they are two of three others,
 * a majority of the others. A peer whose state comes from a round it
 * verified votes for its own epoch: two of four voters move nothing. A
 * peer that did not vouch (a newcomer, one that downloaded) still follows a
 * majority of the others, and once an honest peer steps, three of four are
 * past our epoch. */
static void test_swarm_pair_beside_two(void) {
    struct dl_identity p[4];
    for (int i = 0; i < 4; i++) CHECK_OK(dl_identity_load(NULL, &p[i]));
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    add_self_with_hash(&sw, &p[0], 1, 5);
    add(&sw, &p[1], 1, 5, 0, 0, 1000, false, false);
    add(&sw, &p[2], 1, 25, 0, 0, 1000, false, false);
    add(&sw, &p[3], 1, 25, 0, 0, 1000, false, false);
    struct dl_swarm_view v;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK(v.global_epoch == 25); /* no vouching: a newcomer's view */
    dl_swarm_view_free(&v);
    sw.vouched = true;
    sw.vouched_epoch = 5;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.global_epoch == 5, "a pair beside two honest peers moved the epoch to %llu",
              (unsigned long long)v.global_epoch);
    int unbacked = 0;
    for (size_t i = 0; i < v.num_peers; i++) unbacked += v.peers[i].epoch_unbacked;
    CHECK(unbacked == 2);
    dl_swarm_view_free(&v);
    /* a vouch for an epoch below our record's (we downloaded since) counts for nothing */
    sw.vouched_epoch = 4;
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK(v.global_epoch == 25);
    dl_swarm_view_free(&v);
    sw.vouched_epoch = 5;
    /* the honest other steps: three of four voters are at 6 or past it */
    add(&sw, &p[1], 2, 6, 0, 0, 1000, false, false);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1e9, p[0].pk, &v));
    CHECK_MSG(v.global_epoch == 6, "global epoch %llu", (unsigned long long)v.global_epoch);
    dl_swarm_view_free(&v);
    dl_swarm_free(&sw);
}

static void test_swarm_view(void) {
    struct dl_identity p[5];
    for (int i = 0; i < 5; i++) CHECK_OK(dl_identity_load(NULL, &p[i]));
    struct dl_swarm sw;
    dl_swarm_init(&sw, 16);
    add(&sw, &p[0], 1, 7, 100, 10, 1000, false, false);
    add(&sw, &p[1], 1, 7, 200, 20, 1000, false, false);
    add(&sw, &p[2], 1, 6, 900, 50, 1000, false, false);  /* behind: rate counts, samples do not */
    add(&sw, &p[3], 1, 9, 50, 5, 1000, true, false);     /* client ahead: does not lead */
    struct dl_swarm_view v;
    CHECK_OK(dl_swarm_compute(&sw, 1002, 1000, p[0].pk, &v));
    CHECK(v.global_epoch == 7);
    /* 100 + 2*10 + 200 + 2*20 */
    CHECK_MSG(fabs(v.collective_samples - 360) < 1e-9, "collective %g", v.collective_samples);
    CHECK(fabs(v.samples_per_second - 85) < 1e-9);
    CHECK(fabs(v.eta_s - 640.0 / 85) < 1e-9);
    CHECK(v.num_peers == 4);
    int selves = 0;
    for (size_t i = 0; i < v.num_peers; i++) selves += v.peers[i].is_self;
    CHECK(selves == 1);
    for (size_t i = 1; i < v.num_peers; i++) CHECK(strcmp(v.peers[i - 1].peer_id, v.peers[i].peer_id) < 0);
    dl_swarm_view_free(&v);
    /* stale and duplicate records do not apply; newer do */
    struct dl_record r;
    memset(&r, 0, sizeof r);
    memcpy(r.pk, p[0].pk, DL_WIRE_PK);
    r.seq = 1;
    CHECK(dl_swarm_apply(&sw, &r, (const uint8_t *)"x", 1, 0) == 0);
    r.seq = 2;
    r.epoch = 8;
    CHECK(dl_swarm_apply(&sw, &r, (const uint8_t *)"x", 1, 5) == 1);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1000, p[0].pk, &v));
    CHECK(v.global_epoch == 8 && v.collective_samples == 0);
    dl_swarm_view_free(&v);
    /* without a self, one peer ahead is its word alone: the second highest (7) */
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1000, NULL, &v));
    CHECK(v.global_epoch == 7);
    dl_swarm_view_free(&v);
    /* goodbye removes a peer from the view at once */
    add(&sw, &p[1], 2, 7, 0, 0, 1000, false, true);
    CHECK_OK(dl_swarm_compute(&sw, 1000, 1000, NULL, &v));
    CHECK(v.num_peers == 3);
    dl_swarm_view_free(&v);
    /* expiry: entries updated at 0 go at now > expiry, p[0] (updated at 5) stays; keep_pk kept */
    CHECK(dl_swarm_expire(&sw, 10, 6, p[2].pk) == 2); /* p[1] tombstone and p[3] */
    CHECK(sw.count == 2);
    CHECK(dl_swarm_expire(&sw, 100, 6, NULL) == 2);
    /* table bound */
    dl_swarm_free(&sw);
    dl_swarm_init(&sw, 2);
    add(&sw, &p[0], 1, 0, 0, 0, 0, false, false);
    add(&sw, &p[1], 1, 0, 0, 0, 0, false, false);
    memset(&r, 0, sizeof r);
    memcpy(r.pk, p[2].pk, DL_WIRE_PK);
    CHECK(dl_swarm_apply(&sw, &r, (const uint8_t *)"x", 1, 0) == -1);
    dl_swarm_free(&sw);
    /* refresh period: clipped, shorter when the epoch is near */
    CHECK(dl_swarm_refresh_period(-1, 4, 0.5, 10) == 10);
    CHECK(dl_swarm_refresh_period(0.1, 4, 0.5, 10) == 0.5);
    CHECK(fabs(dl_swarm_refresh_period(7, 4, 0.5, 10) - 4.0) < 1e-12);
}

/* Peer ids are BLAKE2b-128 of the public key (libsodium's generichash).
 * References: RFC 7693 appendix A for BLAKE2b-512("abc"); Python's hashlib
 * for the peer id: hashlib.blake2b(bytes(range(32)), digest_size=16)
 * (scripts/util_reference_values.py prints both). */
static void test_peer_id_hash(void) {
    static const char abc512[] = "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
                                 "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923";
    uint8_t h[64];
    char hex[129];
    CHECK(crypto_generichash(h, sizeof h, (const uint8_t *)"abc", 3, NULL, 0) == 0);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    CHECK_MSG(!strcmp(hex, abc512), "BLAKE2b-512(abc) = %s", hex);
    uint8_t pk[DL_WIRE_PK];
    for (int i = 0; i < DL_WIRE_PK; i++) pk[i] = (uint8_t)i;
    char id[DL_PEER_ID_HEX];
    dl_peer_id_from_pk(pk, id);
    CHECK_MSG(!strcmp(id, "f39a2cad58411cd49f577e5086b8031f"), "peer id %s", id);
}

static void test_identity_file(void) {
    char dir[] = "/tmp/dl_net_id_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/id.key", dir);
    struct dl_identity a, b;
    CHECK_OK(dl_identity_load(path, &a));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_OK(dl_identity_load(path, &b));
    CHECK(!memcmp(a.pk, b.pk, DL_WIRE_PK) && !strcmp(a.peer_id, b.peer_id) && strlen(a.peer_id) == 32);
    chmod(path, 0644);
    CHECK(dl_identity_load(path, &b) != 0);
    chmod(path, 0600);
    FILE *f = fopen(path, "w");
    fputs("not a key", f);
    fclose(f);
    CHECK(dl_identity_load(path, &b) != 0);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    if (sodium_init() < 0) return 1;
    test_frame_header();
    test_seal();
    test_msgpack_check();
    test_messages();
    test_records();
    test_swarm_view();
    test_swarm_hostile();
    test_swarm_pair();
    test_swarm_monitors_count_for_nothing();
    test_swarm_pair_beside_two();
    test_identity_file();
    test_peer_id_hash();
    return dl_test_finish("test_net_codec");
}
