/* Metrics records: a record built here from the wire description in
 * docs/monitor.md (msgpack by hand, libsodium directly: not the code under
 * test) verifies; one byte off in the signature, another run, an oversize
 * blob, out-of-range numbers or forbidden characters do not. Then the round
 * trip through two live peers on loopback: publish on one, fetch on the other. */
#include <msgpack.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

struct fields {
    const char *run_id;
    double time, loss, sps, total, uptime;
    uint64_t step;
    const char *device, *vendor, *precision, *name;
    bool later;                 /* the later fields: target batch, nil, syncs, bytes sent */
    double target, syncs, bytes;
};

static void pack_str(msgpack_packer *pk, const char *s) {
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

/* [bin body, bin signature]; body = [1, pk, run, time, step, loss, sps,
 * total, uptime, device, vendor, precision, name, nil]; the signature is
 * Ed25519ph over "dedloc-metrics-v1\0" || body. */
static size_t make_blob(const struct fields *f, const uint8_t pk_bytes[32], const uint8_t sk[64], uint8_t *out,
                        size_t cap) {
    msgpack_sbuffer body;
    msgpack_sbuffer_init(&body);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, f->later ? 17 : 14);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_bin(&pk, 32);
    msgpack_pack_bin_body(&pk, pk_bytes, 32);
    pack_str(&pk, f->run_id);
    msgpack_pack_double(&pk, f->time);
    msgpack_pack_uint64(&pk, f->step);
    msgpack_pack_double(&pk, f->loss);
    msgpack_pack_double(&pk, f->sps);
    msgpack_pack_double(&pk, f->total);
    msgpack_pack_double(&pk, f->uptime);
    pack_str(&pk, f->device);
    pack_str(&pk, f->vendor);
    pack_str(&pk, f->precision);
    pack_str(&pk, f->name);
    if (f->later) {
        msgpack_pack_double(&pk, f->target);
        msgpack_pack_nil(&pk);
        msgpack_pack_double(&pk, f->syncs);
        msgpack_pack_double(&pk, f->bytes);
    } else {
        msgpack_pack_nil(&pk);
    }
    static const char context[] = "dedloc-metrics-v1";
    uint8_t sig[64];
    crypto_sign_ed25519ph_state st;
    crypto_sign_ed25519ph_init(&st);
    crypto_sign_ed25519ph_update(&st, (const uint8_t *)context, sizeof context);
    crypto_sign_ed25519ph_update(&st, (const uint8_t *)body.data, body.size);
    crypto_sign_ed25519ph_final_create(&st, sig, NULL, sk);
    msgpack_sbuffer outer;
    msgpack_sbuffer_init(&outer);
    msgpack_packer opk;
    msgpack_packer_init(&opk, &outer, msgpack_sbuffer_write);
    msgpack_pack_array(&opk, 2);
    msgpack_pack_bin(&opk, body.size);
    msgpack_pack_bin_body(&opk, body.data, body.size);
    msgpack_pack_bin(&opk, 64);
    msgpack_pack_bin_body(&opk, sig, 64);
    size_t n = outer.size <= cap ? outer.size : 0;
    if (n) memcpy(out, outer.data, n);
    msgpack_sbuffer_destroy(&body);
    msgpack_sbuffer_destroy(&outer);
    return n;
}

static struct fields good(void) {
    struct fields f = {"run-a", 1.7e9, 2.25, 12.5, 1000, 60, 7, "Test GPU", "Vendor", "fp16", "carol", false, 0, 0, 0};
    return f;
}

static void check_verification(void) {
    uint8_t pk[32], sk[64], blob[4096];
    crypto_sign_keypair(pk, sk);
    char peer_id[DL_PEER_ID_HEX];
    dl_net_peer_id_from_key(pk, peer_id);
    struct dl_metrics m;

    struct fields f = good();
    size_t n = make_blob(&f, pk, sk, blob, sizeof blob);
    CHECK(n > 0 && n <= DL_METRICS_MAX_BYTES);
    CHECK_OK(dl_metrics_verify(blob, n, "run-a", peer_id, &m));
    CHECK(m.step == 7 && m.loss == 2.25 && m.samples_per_second == 12.5 && m.samples_total == 1000 &&
          m.uptime_s == 60 && m.time == 1.7e9);
    CHECK(!strcmp(m.device, "Test GPU") && !strcmp(m.vendor, "Vendor") && !strcmp(m.precision, "fp16") &&
          !strcmp(m.name, "carol") && !strcmp(m.peer_id, peer_id));
    CHECK(dl_metrics_verify(blob, n, "run-a", NULL, &m) == 0);

    /* Wrong run, wrong signer, a flipped signature byte, truncation. */
    CHECK(dl_metrics_verify(blob, n, "run-b", peer_id, &m) != 0);
    CHECK(dl_metrics_verify(blob, n, "run-a", "00000000000000000000000000000000", &m) != 0);
    blob[n - 1] ^= 1;
    CHECK(dl_metrics_verify(blob, n, "run-a", peer_id, &m) != 0);
    blob[n - 1] ^= 1;
    for (size_t cut = 0; cut < n; cut += 7) CHECK(dl_metrics_verify(blob, cut, "run-a", NULL, &m) != 0);
    /* Garbage of every byte value at one position. */
    for (int v = 0; v < 256; v += 17) {
        uint8_t copy[4096];
        memcpy(copy, blob, n);
        copy[n / 2] = (uint8_t)v;
        if (v != blob[n / 2]) CHECK(dl_metrics_verify(copy, n, "run-a", NULL, &m) != 0);
    }

    /* Bounds, each signed properly, so only the bounds can refuse them. */
    struct fields bad[6];
    for (int i = 0; i < 6; i++) bad[i] = good();
    bad[0].loss = -3;
    bad[1].sps = -1;
    bad[2].total = 1e19;
    bad[3].name = "<script>";
    bad[4].device = "tab\there";
    char long_name[200];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    bad[5].vendor = long_name;
    for (int i = 0; i < 6; i++) {
        size_t k = make_blob(&bad[i], pk, sk, blob, sizeof blob);
        CHECK_MSG(k > 0 && dl_metrics_verify(blob, k, "run-a", NULL, &m) != 0, "bad record %d verified", i);
    }
    /* The later fields: local-steps syncs and bytes sent in rounds; a
     * record without them (above) reads 0, "not said". */
    CHECK(m.syncs == 0 && m.bytes_sent == 0);
    struct fields later = good();
    later.later = true;
    later.target = 4096;
    later.syncs = 12;
    later.bytes = 3.5e9;
    size_t kl = make_blob(&later, pk, sk, blob, sizeof blob);
    CHECK_OK(dl_metrics_verify(blob, kl, "run-a", NULL, &m));
    CHECK(m.target_batch == 4096 && m.syncs == 12 && m.bytes_sent == 3.5e9);
    double bad_syncs[] = {-1, 1.5, 1e16}, bad_bytes[] = {-5, 1e19};
    for (int i = 0; i < 3; i++) {
        struct fields b = later;
        b.syncs = bad_syncs[i];
        size_t kb = make_blob(&b, pk, sk, blob, sizeof blob);
        CHECK_MSG(dl_metrics_verify(blob, kb, "run-a", NULL, &m) != 0, "syncs %g verified", bad_syncs[i]);
    }
    for (int i = 0; i < 2; i++) {
        struct fields b = later;
        b.bytes = bad_bytes[i];
        size_t kb = make_blob(&b, pk, sk, blob, sizeof blob);
        CHECK_MSG(dl_metrics_verify(blob, kb, "run-a", NULL, &m) != 0, "bytes sent %g verified", bad_bytes[i]);
    }
    /* Loss -1 means "none yet" and is allowed. */
    struct fields none = good();
    none.loss = -1;
    size_t k = make_blob(&none, pk, sk, blob, sizeof blob);
    CHECK_OK(dl_metrics_verify(blob, k, "run-a", NULL, &m));
    /* Oversize: a blob over the bound is refused before decoding. */
    uint8_t big[DL_METRICS_MAX_BYTES + 1];
    memset(big, 0x90, sizeof big);
    CHECK(dl_metrics_verify(big, sizeof big, "run-a", NULL, &m) != 0);
}

/* Publish on one peer, fetch from another, over loopback. */
struct fetched {
    volatile int done;
    int status;
    struct dl_metrics m;
};

static void on_fetched(void *user, const char *peer_id, int status, const struct dl_metrics *m) {
    struct fetched *f = user;
    f->status = status;
    if (m) f->m = *m;
    f->done = 1;
}

struct raw_answer {
    volatile int done;
    int status;
    char text[128];
};

static void on_raw(void *user, uint64_t id, int status, const uint8_t *payload, size_t size) {
    struct raw_answer *r = user;
    r->status = status;
    snprintf(r->text, sizeof r->text, "%.*s", (int)(size < 100 ? size : 100), payload ? (const char *)payload : "");
    r->done = 1;
}

/* A client-mode peer c (it dials a; nobody dials it): b asks a, the relay,
 * for c's record and gets it as c signed it (its target batch too). (c may
 * dial b as well, so b is not shown unable to ask c directly: the monitor
 * test has a peer that truly cannot, the monitor.) Bad asks get an error,
 * not a record. */
static void check_relay(dl_net *a, dl_net *b, const struct dl_net_config *ca) {
    struct dl_net_config cc = *ca;
    cc.listen = "";
    cc.client_mode = true;
    cc.initial_peers = dl_net_listen_address(a);
    dl_net *c = NULL;
    CHECK_OK(dl_net_start(&cc, &c));
    if (!c) return;
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    m.samples_total = 77;
    m.loss = -1;
    m.target_batch = 48;
    snprintf(m.name, sizeof m.name, "carol");
    CHECK_OK(dl_net_publish_metrics(c, &m));
    struct fetched f = {0};
    for (int attempt = 0; attempt < 100; attempt++) {
        f.done = 0;
        CHECK(dl_net_fetch_metrics_via(b, dl_net_peer_id(a), dl_net_peer_id(c), 2.0, on_fetched, &f) != 0);
        for (int i = 0; i < 300 && !f.done; i++) usleep(10000);
        if (f.done && f.status == DL_NET_OK) break;
        usleep(50000); /* c not connected to a yet */
    }
    CHECK_MSG(f.done && f.status == DL_NET_OK, "relayed fetch: status %d", f.status);
    CHECK(!strcmp(f.m.peer_id, dl_net_peer_id(c)) && !strcmp(f.m.name, "carol") && f.m.samples_total == 77 &&
          f.m.target_batch == 48);
    /* The relay's own record, asked through itself. */
    f.done = 0;
    CHECK(dl_net_fetch_metrics_via(b, dl_net_peer_id(a), dl_net_peer_id(a), 2.0, on_fetched, &f) != 0);
    for (int i = 0; i < 300 && !f.done; i++) usleep(10000);
    CHECK(f.done && f.status == DL_NET_OK && !strcmp(f.m.name, "dave"));
    /* Not a peer id; a peer nobody knows: errors, and a still serving. */
    const char *bad[2] = {"../not-hex", "0123456789abcdef0123456789abcdef"};
    for (int k = 0; k < 2; k++) {
        struct raw_answer r = {0};
        CHECK(dl_net_request(b, dl_net_peer_id(a), DL_NET_METHOD_METRICS_RELAY, bad[k], strlen(bad[k]), 2.0, on_raw,
                             &r) != 0);
        for (int i = 0; i < 300 && !r.done; i++) usleep(10000);
        CHECK_MSG(r.done && r.status == DL_NET_REMOTE_ERROR, "relay of '%s': status %d (%s)", bad[k], r.status,
                  r.text);
    }
    dl_net_stop(c);
}

static void check_round_trip(void) {
    struct dl_net_config ca, cb;
    dl_net_config_default(&ca);
    ca.run_id = "metrics-test";
    ca.listen = "127.0.0.1:0";
    ca.use_dht = false;
    dl_net *a = NULL, *b = NULL;
    CHECK_OK(dl_net_start(&ca, &a));
    if (!a) return;
    cb = ca;
    cb.initial_peers = dl_net_listen_address(a);
    CHECK_OK(dl_net_start(&cb, &b));
    if (!b) {
        dl_net_stop(a);
        return;
    }
    struct dl_metrics m;
    memset(&m, 0, sizeof m);
    m.step = 4;
    m.loss = 1.5;
    m.samples_per_second = 3;
    m.samples_total = 99;
    m.uptime_s = 33;
    snprintf(m.device, sizeof m.device, "dev");
    snprintf(m.name, sizeof m.name, "dave");
    m.syncs = 5;
    m.bytes_sent = 123456789;
    struct dl_metrics bad = m;
    snprintf(bad.name, sizeof bad.name, "a\"b");
    CHECK(dl_net_publish_metrics(a, &bad) != 0);
    CHECK_OK(dl_net_publish_metrics(a, &m));
    struct fetched f = {0};
    for (int attempt = 0; attempt < 100; attempt++) {
        f.done = 0;
        CHECK(dl_net_fetch_metrics(b, dl_net_peer_id(a), 2.0, on_fetched, &f) != 0);
        for (int i = 0; i < 300 && !f.done; i++) usleep(10000);
        if (f.done && f.status == DL_NET_OK) break;
        usleep(50000); /* not connected yet */
    }
    CHECK(f.done && f.status == DL_NET_OK);
    CHECK(f.m.step == 4 && f.m.loss == 1.5 && f.m.samples_total == 99 && !strcmp(f.m.name, "dave"));
    CHECK(f.m.syncs == 5 && f.m.bytes_sent == 123456789);
    CHECK(!strcmp(f.m.peer_id, dl_net_peer_id(a)));
    /* b published nothing: a asks and gets an error, not a record. */
    f.done = 0;
    CHECK(dl_net_fetch_metrics(a, dl_net_peer_id(b), 2.0, on_fetched, &f) != 0);
    for (int i = 0; i < 300 && !f.done; i++) usleep(10000);
    CHECK(f.done && f.status != DL_NET_OK);
    check_relay(a, b, &ca);
    dl_net_stop(b);
    dl_net_stop(a);
}

int main(void) {
    if (sodium_init() < 0) return 1;
    check_verification();
    check_round_trip();
    return dl_test_finish("test_net_metrics");
}
