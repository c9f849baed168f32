/* Metrics records: a trainer's progress for monitors, signed with its
 * identity, bound to the run, served on request. Pulled rather than gossiped:
 * only monitors want them, and a monitor sets the pace, so no peer can flood
 * anyone with them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dedloc/util.h"
#include "net/msgpack_fields.h"
#include "net/above_conn.h"

static const char METRICS_CONTEXT[] = "dedloc-metrics-v1";
/* Field 13, the target batch, came later (it was a reserved nil): records
 * of 14 fields with a nil there stay valid and read as "not said". Fields
 * 15 (local-steps syncs) and 16 (bytes sent in rounds) came later still:
 * older readers ignore them, and records without them (or a nil there)
 * read as 0, "not said". Field 14 stays reserved. */
#define METRICS_FIELDS 17
#define METRICS_MIN_FIELDS 13

/* Printable ASCII only: the strings end up in HTML, JSON and Prometheus
 * labels, where control characters and quotes-by-encoding tricks do harm. */
static int check_text(const char *s, const char *what) {
    for (const char *c = s; *c; c++)
        if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\' || *c == '<' || *c == '>' || *c == '&')
            return dl_fail("metrics record: %s holds a character that is not allowed", what);
    return 0;
}

static int check_bounds(const struct dl_metrics *m) {
    if (!(m->loss == -1 || (m->loss >= 0 && m->loss <= 1e6)))
        return dl_fail("metrics record: loss %g (0..1e6, or -1 for none)", m->loss);
    if (!(m->samples_per_second >= 0 && m->samples_per_second <= 1e12))
        return dl_fail("metrics record: samples/s %g out of range", m->samples_per_second);
    if (!(m->samples_total >= 0 && m->samples_total <= 1e18))
        return dl_fail("metrics record: samples total %g out of range", m->samples_total);
    if (!(m->uptime_s >= 0 && m->uptime_s <= 1e10)) return dl_fail("metrics record: uptime %g out of range", m->uptime_s);
    if (m->step > (uint64_t)1 << 53) return dl_fail("metrics record: step out of range");
    if (!(m->target_batch >= 0 && m->target_batch <= 1e12))
        return dl_fail("metrics record: target batch %g out of range", m->target_batch);
    if (!(m->syncs >= 0 && m->syncs <= 1e15 && m->syncs == floor(m->syncs)))
        return dl_fail("metrics record: syncs %g is not a count", m->syncs);
    if (!(m->bytes_sent >= 0 && m->bytes_sent <= 1e18))
        return dl_fail("metrics record: bytes sent %g out of range", m->bytes_sent);
    return check_text(m->device, "device") || check_text(m->vendor, "vendor") ||
                   check_text(m->precision, "precision") || check_text(m->name, "name")
               ? -1
               : 0;
}

static uint8_t *metrics_sign(const struct dl_metrics *m, const char *run_id, const struct dl_identity *id,
                             size_t *size) {
    struct dl_enc body;
    dl_enc_init(&body);
    msgpack_packer *pk = &body.pk;
    msgpack_pack_array(pk, METRICS_FIELDS);
    msgpack_pack_uint32(pk, 1);
    dl_pack_bin(pk, id->pk, DL_WIRE_PK);
    dl_pack_str(pk, run_id);
    msgpack_pack_double(pk, m->time);
    msgpack_pack_uint64(pk, m->step);
    msgpack_pack_double(pk, m->loss);
    msgpack_pack_double(pk, m->samples_per_second);
    msgpack_pack_double(pk, m->samples_total);
    msgpack_pack_double(pk, m->uptime_s);
    dl_pack_str(pk, m->device);
    dl_pack_str(pk, m->vendor);
    dl_pack_str(pk, m->precision);
    dl_pack_str(pk, m->name);
    msgpack_pack_double(pk, m->target_batch);
    msgpack_pack_nil(pk); /* reserved for later fields */
    msgpack_pack_double(pk, m->syncs);
    msgpack_pack_double(pk, m->bytes_sent);
    size_t nbytes;
    uint8_t *bytes = dl_enc_finish(&body, &nbytes);
    return dl_signed_wrap(METRICS_CONTEXT, bytes, nbytes, id, size);
}

static int decode_metrics_body(const uint8_t *bytes, size_t nbytes, struct dl_metrics *m, uint8_t pk[DL_WIRE_PK],
                               char *run_id, size_t run_id_cap) {
    struct dl_dec d;
    const char *what = "metrics record";
    if (dl_dec_begin(&d, bytes, nbytes, METRICS_MIN_FIELDS, what)) return -1;
    uint32_t version = 0;
    int bad = dl_dec_u32(&d, 0, &version, what) || dl_dec_bin_exact(&d, 1, pk, DL_WIRE_PK, what) ||
              dl_dec_str(&d, 2, run_id, run_id_cap, what) || dl_dec_f64(&d, 3, &m->time, what) ||
              dl_dec_u64(&d, 4, &m->step, what) || dl_dec_f64(&d, 5, &m->loss, what) ||
              dl_dec_f64(&d, 6, &m->samples_per_second, what) || dl_dec_f64(&d, 7, &m->samples_total, what) ||
              dl_dec_f64(&d, 8, &m->uptime_s, what) || dl_dec_str(&d, 9, m->device, sizeof m->device, what) ||
              dl_dec_str(&d, 10, m->vendor, sizeof m->vendor, what) ||
              dl_dec_str(&d, 11, m->precision, sizeof m->precision, what) ||
              dl_dec_str(&d, 12, m->name, sizeof m->name, what);
    /* The target batch: a number, or nil / absent (a record from before it). */
    if (!bad && d.count > 13 && d.fields[13].type != MSGPACK_OBJECT_NIL)
        bad = dl_dec_f64(&d, 13, &m->target_batch, what);
    if (!bad && d.count > 15 && d.fields[15].type != MSGPACK_OBJECT_NIL) bad = dl_dec_f64(&d, 15, &m->syncs, what);
    if (!bad && d.count > 16 && d.fields[16].type != MSGPACK_OBJECT_NIL)
        bad = dl_dec_f64(&d, 16, &m->bytes_sent, what);
    dl_dec_end(&d);
    if (bad) return -1;
    if (version != 1) return dl_fail("metrics record: version %u, expected 1", version);
    return 0;
}

int dl_metrics_verify(const uint8_t *blob, size_t size, const char *run_id, const char *expected_peer_id,
                      struct dl_metrics *m) {
    memset(m, 0, sizeof *m);
    if (size > DL_METRICS_MAX_BYTES) return dl_fail("metrics record: %zu bytes, at most %d", size, DL_METRICS_MAX_BYTES);
    struct dl_dec outer;
    if (dl_dec_begin(&outer, blob, size, 2, "metrics record")) return -1;
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    uint8_t sig[DL_WIRE_SIG];
    int bad = outer.count != 2 || dl_dec_bin(&outer, 0, &bytes, &nbytes, "metrics record") ||
              dl_dec_bin_exact(&outer, 1, sig, DL_WIRE_SIG, "metrics record");
    dl_dec_end(&outer);
    if (bad) return dl_fail("metrics record: expected [bin record, bin64 signature]");
    uint8_t pk[DL_WIRE_PK];
    char rid[DL_WIRE_RUN_ID_MAX];
    if (decode_metrics_body(bytes, nbytes, m, pk, rid, sizeof rid)) return -1;
    if (strcmp(rid, run_id)) return dl_fail("metrics record: belongs to run '%s'", rid);
    if (check_bounds(m)) return -1;
    crypto_sign_state st;
    dl_signed_state(&st, METRICS_CONTEXT, bytes, nbytes);
    if (crypto_sign_final_verify(&st, sig, pk)) return dl_fail("metrics record: forged signature");
    dl_peer_id_from_pk(pk, m->peer_id);
    if (expected_peer_id && strcmp(m->peer_id, expected_peer_id))
        return dl_fail("metrics record: signed by %s, asked %s", m->peer_id, expected_peer_id);
    return 0;
}

static void serve_metrics(void *user, dl_net *net, const struct dl_net_incoming *request) {
    pthread_mutex_lock(&net->lock);
    uint8_t *copy = net->metrics_blob ? dl_malloc(net->metrics_size) : NULL;
    size_t n = net->metrics_size;
    if (copy) memcpy(copy, net->metrics_blob, n);
    pthread_mutex_unlock(&net->lock);
    if (copy) dl_net_respond(net, request->token, DL_NET_OK, copy, n);
    else dl_net_respond(net, request->token, DL_NET_REMOTE_ERROR, "no metrics yet", 14);
    free(copy);
}

int dl_net_publish_metrics(dl_net *net, const struct dl_metrics *m) {
    struct dl_metrics signed_m = *m;
    signed_m.time = dl_wall_time();
    memcpy(signed_m.peer_id, net->id.peer_id, sizeof signed_m.peer_id);
    if (check_bounds(&signed_m)) return -1;
    size_t n;
    uint8_t *blob = metrics_sign(&signed_m, net->run_id, &net->id, &n);
    if (!blob) return dl_fail("metrics record: out of memory");
    if (n > DL_METRICS_MAX_BYTES) {
        free(blob);
        return dl_fail("metrics record: %zu bytes, at most %d", n, DL_METRICS_MAX_BYTES);
    }
    pthread_mutex_lock(&net->lock);
    bool first = !net->metrics_blob;
    free(net->metrics_blob);
    net->metrics_blob = blob;
    net->metrics_size = n;
    pthread_mutex_unlock(&net->lock);
    return first ? dl_net_set_handler(net, DL_NET_METHOD_METRICS, serve_metrics, NULL) : 0;
}

struct fetch_ctx {
    dl_net *net;
    char peer_id[DL_PEER_ID_HEX];
    dl_net_metrics_fn callback;
    void *user;
};

static void on_metrics_response(void *user, uint64_t request_id, int status, const uint8_t *payload, size_t size) {
    struct fetch_ctx *ctx = user;
    struct dl_metrics m;
    if (status == DL_NET_OK && dl_metrics_verify(payload, size, ctx->net->run_id, ctx->peer_id, &m)) {
        DL_DEBUG("net", "ignoring a metrics record from %s: %s", ctx->peer_id, dl_error());
        status = DL_NET_REMOTE_ERROR;
    }
    ctx->callback(ctx->user, ctx->peer_id, status, status == DL_NET_OK ? &m : NULL);
    free(ctx);
}

/* Asks `ask` for the record of peer_id: peer_id itself, or a relay. */
static uint64_t fetch_from(dl_net *net, const char *ask, const char *peer_id, double timeout_s,
                           dl_net_metrics_fn callback, void *user) {
    struct fetch_ctx *ctx = dl_calloc(1, sizeof *ctx);
    if (!ctx) return 0;
    ctx->net = net;
    snprintf(ctx->peer_id, sizeof ctx->peer_id, "%s", peer_id);
    ctx->callback = callback;
    ctx->user = user;
    bool relayed = strcmp(ask, peer_id) != 0;
    /* Once queued, the response callback runs exactly once and frees ctx. */
    uint64_t id = relayed ? dl_net_request(net, ask, DL_NET_METHOD_METRICS_RELAY, peer_id, strlen(peer_id), timeout_s,
                                           on_metrics_response, ctx)
                          : dl_net_request(net, peer_id, DL_NET_METHOD_METRICS, "", 0, timeout_s, on_metrics_response,
                                           ctx);
    if (!id) free(ctx);
    return id;
}

uint64_t dl_net_fetch_metrics(dl_net *net, const char *peer_id, double timeout_s, dl_net_metrics_fn callback,
                              void *user) {
    return fetch_from(net, peer_id, peer_id, timeout_s, callback, user);
}

uint64_t dl_net_fetch_metrics_via(dl_net *net, const char *relay_peer_id, const char *peer_id, double timeout_s,
                                  dl_net_metrics_fn callback, void *user) {
    if (strlen(peer_id) != DL_PEER_ID_HEX - 1) {
        dl_fail("metrics relay: '%s' is not a peer id", peer_id);
        return 0;
    }
    return fetch_from(net, relay_peer_id, peer_id, timeout_s, callback, user);
}

/* ---- the relay ------------------------------------------------------------------
 * A client-mode peer (behind NAT) is never dialled, so a monitor, which
 * dials out only too, can never ask it for its record. A peer it is
 * connected to can: the relay asks over that connection and passes the
 * answer on as it is. The record is signed by its owner and checked by
 * the asker, so the relay can drop it but not change it. The relay keeps
 * nothing; at most METRICS_RELAYS_MAX are under way at once (the rest are
 * refused), each for at most METRICS_RELAY_TIMEOUT_S. */
enum { METRICS_RELAYS_MAX = 64 };
#define METRICS_RELAY_TIMEOUT_S 2.0

struct relay_ctx {
    dl_net *net;
    uint64_t token;
};

static void relay_refuse(dl_net *net, uint64_t token, const char *why) {
    dl_net_respond(net, token, DL_NET_REMOTE_ERROR, why, strlen(why));
}

/* On the network thread, like the handler: metrics_relays needs no lock. */
static void on_relay_response(void *user, uint64_t request_id, int status, const uint8_t *payload, size_t size) {
    struct relay_ctx *ctx = user;
    ctx->net->metrics_relays--;
    if (status == DL_NET_OK && size <= DL_METRICS_MAX_BYTES)
        dl_net_respond(ctx->net, ctx->token, DL_NET_OK, payload, size);
    else
        relay_refuse(ctx->net, ctx->token, status == DL_NET_OK ? "record too large" : dl_net_status_name(status));
    free(ctx);
}

static void serve_relay(void *user, dl_net *net, const struct dl_net_incoming *request) {
    char target[DL_PEER_ID_HEX];
    bool hex = request->size == DL_PEER_ID_HEX - 1;
    for (size_t i = 0; hex && i < request->size; i++) {
        uint8_t c = request->payload[i];
        hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    }
    if (!hex) {
        relay_refuse(net, request->token, "expected the hex peer id of the peer whose record to relay");
        return;
    }
    memcpy(target, request->payload, DL_PEER_ID_HEX - 1);
    target[DL_PEER_ID_HEX - 1] = 0;
    if (!strcmp(target, net->id.peer_id)) {
        serve_metrics(user, net, request); /* our own */
        return;
    }
    if (net->metrics_relays >= METRICS_RELAYS_MAX) {
        relay_refuse(net, request->token, "too many relays under way");
        return;
    }
    struct relay_ctx *ctx = dl_calloc(1, sizeof *ctx);
    if (!ctx) {
        relay_refuse(net, request->token, "out of memory");
        return;
    }
    ctx->net = net;
    ctx->token = request->token;
    double timeout = request->deadline_s * 0.8;
    if (!(timeout <= METRICS_RELAY_TIMEOUT_S)) timeout = METRICS_RELAY_TIMEOUT_S;
    if (timeout < 0.05) timeout = 0.05;
    net->metrics_relays++;
    if (!dl_net_request(net, target, DL_NET_METHOD_METRICS, "", 0, timeout, on_relay_response, ctx)) {
        net->metrics_relays--;
        free(ctx);
        relay_refuse(net, request->token, "cannot ask that peer");
    }
}

int dl_net_metrics_start(struct dl_net *net) {
    return dl_net_set_handler(net, DL_NET_METHOD_METRICS_RELAY, serve_relay, NULL);
}
