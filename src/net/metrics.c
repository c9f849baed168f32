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
#define METRICS_FIELDS 14

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
    msgpack_pack_nil(pk); /* reserved for later fields */
    size_t nbytes;
    uint8_t *bytes = dl_enc_finish(&body, &nbytes);
    return dl_signed_wrap(METRICS_CONTEXT, bytes, nbytes, id, size);
}

static int decode_metrics_body(const uint8_t *bytes, size_t nbytes, struct dl_metrics *m, uint8_t pk[DL_WIRE_PK],
                               char *run_id, size_t run_id_cap) {
    struct dl_dec d;
    const char *what = "metrics record";
    if (dl_dec_begin(&d, bytes, nbytes, METRICS_FIELDS - 1, what)) return -1;
    uint32_t version = 0;
    int bad = dl_dec_u32(&d, 0, &version, what) || dl_dec_bin_exact(&d, 1, pk, DL_WIRE_PK, what) ||
              dl_dec_str(&d, 2, run_id, run_id_cap, what) || dl_dec_f64(&d, 3, &m->time, what) ||
              dl_dec_u64(&d, 4, &m->step, what) || dl_dec_f64(&d, 5, &m->loss, what) ||
              dl_dec_f64(&d, 6, &m->samples_per_second, what) || dl_dec_f64(&d, 7, &m->samples_total, what) ||
              dl_dec_f64(&d, 8, &m->uptime_s, what) || dl_dec_str(&d, 9, m->device, sizeof m->device, what) ||
              dl_dec_str(&d, 10, m->vendor, sizeof m->vendor, what) ||
              dl_dec_str(&d, 11, m->precision, sizeof m->precision, what) ||
              dl_dec_str(&d, 12, m->name, sizeof m->name, what);
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

uint64_t dl_net_fetch_metrics(dl_net *net, const char *peer_id, double timeout_s, dl_net_metrics_fn callback,
                              void *user) {
    struct fetch_ctx *ctx = dl_calloc(1, sizeof *ctx);
    if (!ctx) return 0;
    ctx->net = net;
    snprintf(ctx->peer_id, sizeof ctx->peer_id, "%s", peer_id);
    ctx->callback = callback;
    ctx->user = user;
    /* Once queued, the response callback runs exactly once and frees ctx. */
    uint64_t id = dl_net_request(net, peer_id, DL_NET_METHOD_METRICS, "", 0, timeout_s, on_metrics_response, ctx);
    if (!id) free(ctx);
    return id;
}
