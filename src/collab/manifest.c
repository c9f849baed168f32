/* The run manifest (docs/manifest.md): canonical bytes, signature, and the
 * reading of every field. The text comes from anyone (a peer we asked, a file
 * a volunteer downloaded), so the parser bounds everything and refuses
 * fields it does not know: a setting one peer ignores would split the run. */
#include <cjson/cJSON.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collab/wirecodec.h"
#include "dedloc/collab.h"
#include "dedloc/model.h"
#include "dedloc/util.h"

static const char SIGN_CONTEXT[] = "dedloc-manifest-v1\n";
#define MAX_DEPTH 16

/* ---- canonical bytes ------------------------------------------------------ */

struct sbuf {
    char *p;
    size_t n, cap;
    bool failed;
};

static void put(struct sbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        if (cap > 4 * (size_t)DL_MANIFEST_MAX_BYTES) {
            b->failed = true;
            dl_fail("manifest: canonical form too large");
            return;
        }
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            dl_fail("out of memory (manifest)");
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void put_str(struct sbuf *b, const char *s) {
    put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            put(b, e, 6);
        } else {
            put(b, (const char *)c, 1);
        }
    }
    put(b, "\"", 1);
}

static int cmp_items(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int canon(struct sbuf *b, const cJSON *v, int depth, bool top) {
    if (depth > MAX_DEPTH) return dl_fail("manifest: nested deeper than %d levels", MAX_DEPTH);
    if (cJSON_IsObject(v)) {
        size_t n = 0;
        for (const cJSON *c = v->child; c; c = c->next) n++;
        const cJSON **items = n ? calloc(n, sizeof *items) : NULL;
        if (n && !items) return dl_fail("out of memory (manifest)");
        size_t k = 0;
        for (const cJSON *c = v->child; c; c = c->next) {
            if (!c->string) {
                free(items);
                return dl_fail("manifest: object member without a name");
            }
            if (!(top && !strcmp(c->string, "signature"))) items[k++] = c;
        }
        if (k) qsort(items, k, sizeof *items, cmp_items);
        put(b, "{", 1);
        for (size_t i = 0; i < k; i++) {
            if (i && !strcmp(items[i - 1]->string, items[i]->string)) {
                int rc = dl_fail("manifest: the key '%.40s' appears twice", items[i]->string);
                free(items);
                return rc;
            }
            if (i) put(b, ",", 1);
            put_str(b, items[i]->string);
            put(b, ":", 1);
            if (canon(b, items[i], depth + 1, false)) {
                free(items);
                return -1;
            }
        }
        put(b, "}", 1);
        free(items);
    } else if (cJSON_IsArray(v)) {
        put(b, "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) put(b, ",", 1);
            if (canon(b, c, depth + 1, false)) return -1;
        }
        put(b, "]", 1);
    } else if (cJSON_IsString(v)) {
        put_str(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!isfinite(d)) return dl_fail("manifest: a number out of range");
        char t[40];
        /* Integers as integers; anything else in the shortest %g form that
         * reads back the same double (0.01, not 0.010000000000000000208),
         * so signer and verifier print alike and people can check it. */
        if (d == floor(d) && fabs(d) < 9007199254740992.0) {
            snprintf(t, sizeof t, "%lld", (long long)d);
        } else {
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(t, sizeof t, "%.*g", prec, d);
                if (strtod(t, NULL) == d) break;
            }
        }
        put(b, t, strlen(t));
    } else if (cJSON_IsBool(v)) {
        put(b, cJSON_IsTrue(v) ? "true" : "false", cJSON_IsTrue(v) ? 4 : 5);
    } else if (cJSON_IsNull(v)) {
        put(b, "null", 4);
    } else {
        return dl_fail("manifest: a value of unknown type");
    }
    return b->failed ? -1 : 0;
}

static int canonical_of(const cJSON *root, char **out, size_t *out_size) {
    struct sbuf b = {0};
    if (canon(&b, root, 0, true) || b.failed) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    *out_size = b.n;
    return 0;
}

int dl_manifest_canonical(const char *json, size_t size, char **out, size_t *out_size) {
    if (size > DL_MANIFEST_MAX_BYTES) return dl_fail("manifest: %zu bytes (at most %d)", size, DL_MANIFEST_MAX_BYTES);
    cJSON *root = cJSON_ParseWithLength(json, size);
    if (!root) return dl_fail("manifest: not valid JSON");
    int rc = cJSON_IsObject(root) ? canonical_of(root, out, out_size) : dl_fail("manifest: not a JSON object");
    cJSON_Delete(root);
    return rc;
}

/* ---- fields ---------------------------------------------------------------- */

static const char *const known_keys[] = {
    "format", "run_id", "model", "tokenizer", "data", "seq", "micro_batch", "target_batch", "max_steps", "seed",
    "shuffle_buffer", "optimizer", "compression", "aggregation", "precisions", "authority", "signer", "signature",
    "local_steps",
};

static const cJSON *need(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) dl_fail("manifest: '%s' is missing", key);
    return v;
}

static int get_str(const cJSON *o, const char *key, char *out, size_t cap, bool required) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return required ? dl_fail("manifest: '%s' is missing", key) : 1;
    if (!cJSON_IsString(v)) return dl_fail("manifest: '%s' must be a string", key);
    size_t n = strlen(v->valuestring);
    if (n == 0 || n >= cap) return dl_fail("manifest: '%s' must hold 1 to %zu bytes", key, cap - 1);
    memcpy(out, v->valuestring, n + 1);
    return 0;
}

static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, bool required) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return required ? dl_fail("manifest: '%s' is missing", key) : 1;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return dl_fail("manifest: '%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out, bool required) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return required ? dl_fail("manifest: '%s' is missing", key) : 1;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi)) return dl_fail("manifest: '%s' must be a number in [%g, %g]", key, lo, hi);
    *out = d;
    return 0;
}

static int get_hex(const cJSON *o, const char *key, uint8_t *out, size_t n, bool required) {
    char text[160];
    int rc = get_str(o, key, text, sizeof text, required);
    if (rc) return rc;
    size_t got = 0;
    if (strlen(text) != 2 * n || sodium_hex2bin(out, n, text, strlen(text), NULL, &got, NULL) || got != n)
        return dl_fail("manifest: '%s' must be %zu hex digits", key, 2 * n);
    return 0;
}

static int only_keys(const cJSON *o, const char *what, const char *const *keys, size_t n) {
    for (const cJSON *c = o->child; c; c = c->next) {
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++) ok = !strcmp(c->string, keys[i]);
        if (!ok)
            return dl_fail("manifest: unknown setting '%.40s' in %s (this program reads format %s)", c->string, what,
                           DL_MANIFEST_FORMAT);
    }
    return 0;
}

static int read_model(const cJSON *root, struct dl_manifest *m) {
    const cJSON *v = need(root, "model");
    if (!v) return -1;
    dl_albert_config cfg;
    if (cJSON_IsString(v)) {
        if (get_str(root, "model", m->model_preset, sizeof m->model_preset, true)) return -1;
        if (dl_albert_config_preset(m->model_preset, &cfg)) return dl_fail("manifest: unknown model preset '%s'", m->model_preset);
        return 0;
    }
    if (!cJSON_IsObject(v)) return dl_fail("manifest: 'model' must be a preset name or a config object");
    m->model_config_json = cJSON_PrintUnformatted(v);
    if (!m->model_config_json) return dl_fail("out of memory (manifest)");
    return dl_albert_config_parse(m->model_config_json, strlen(m->model_config_json), "the manifest's model", &cfg);
}

static int read_tokenizer(const cJSON *root, struct dl_manifest *m) {
    const cJSON *t = need(root, "tokenizer");
    if (!t) return -1;
    if (!cJSON_IsObject(t)) return dl_fail("manifest: 'tokenizer' must be an object (file, blake2b, size)");
    static const char *const keys[] = {"file", "blake2b", "size"};
    int64_t size;
    if (only_keys(t, "tokenizer", keys, 3) || get_str(t, "file", m->tokenizer_file, sizeof m->tokenizer_file, true) ||
        get_hex(t, "blake2b", m->tokenizer_hash, 32, true) ||
        get_int(t, "size", 1, DL_MANIFEST_TOKENIZER_MAX, &size, true))
        return -1;
    m->tokenizer_size = (uint64_t)size;
    return 0;
}

static int read_data(const cJSON *root, struct dl_manifest *m) {
    const cJSON *d = need(root, "data");
    if (!d) return -1;
    if (!cJSON_IsArray(d) || !d->child) return dl_fail("manifest: 'data' must be a non-empty list of sources");
    for (const cJSON *c = d->child; c; c = c->next) {
        if (m->num_data == DL_MANIFEST_MAX_DATA) return dl_fail("manifest: more than %d data sources", DL_MANIFEST_MAX_DATA);
        if (!cJSON_IsString(c) || !*c->valuestring || strlen(c->valuestring) > 4000)
            return dl_fail("manifest: a data source must be a path or URL of 1 to 4000 bytes");
        m->data[m->num_data] = dl_strdup(c->valuestring);
        if (!m->data[m->num_data]) return -1;
        m->num_data++;
    }
    return 0;
}

static int read_optimizer(const cJSON *root, struct dl_manifest *m) {
    const cJSON *o = need(root, "optimizer");
    if (!o) return -1;
    if (!cJSON_IsObject(o)) return dl_fail("manifest: 'optimizer' must be an object");
    static const char *const keys[] = {"name", "lr", "warmup_steps", "total_steps", "weight_decay", "max_grad_norm"};
    dl_opt_kind kind;
    if (only_keys(o, "optimizer", keys, 6) || get_str(o, "name", m->optimizer, sizeof m->optimizer, true)) return -1;
    if (dl_opt_kind_parse(m->optimizer, &kind)) return dl_fail("manifest: optimizer '%s' unknown", m->optimizer);
    return get_num(o, "lr", 0, 100, &m->lr, true) || get_int(o, "warmup_steps", 0, 1000000000, &m->warmup_steps, true) ||
                   get_int(o, "total_steps", 1, 1000000000, &m->total_steps, true) ||
                   get_num(o, "weight_decay", 0, 10, &m->weight_decay, true) ||
                   get_num(o, "max_grad_norm", 0, 1e6, &m->max_grad_norm, true)
               ? -1
               : 0;
}

static int read_aggregation(const cJSON *root, struct dl_manifest *m) {
    const cJSON *a = need(root, "aggregation");
    if (!a) return -1;
    if (!cJSON_IsObject(a)) return dl_fail("manifest: 'aggregation' must be an object");
    static const char *const keys[] = {"rule", "tau", "iterations", "ban_rounds"};
    char rule[32];
    if (only_keys(a, "aggregation", keys, 4) || get_str(a, "rule", rule, sizeof rule, true)) return -1;
    if (dl_aggregation_from_name(rule, &m->aggregation)) return dl_fail("manifest: aggregation rule '%s' unknown", rule);
    m->clip_tau = DL_CLIP_DEFAULT_TAU;
    int64_t it = DL_CLIP_DEFAULT_ITERATIONS, ban = 10;
    if (get_num(a, "tau", 1e-30, 1e30, &m->clip_tau, false) < 0 ||
        get_int(a, "iterations", 1, DL_CLIP_MAX_ITERATIONS, &it, false) < 0 ||
        get_int(a, "ban_rounds", 0, 1000000, &ban, false) < 0)
        return -1;
    m->clip_iterations = (int)it;
    m->clip_ban_rounds = (int)ban;
    return 0;
}

/* Optional (absent: DeDLOC's exact mode): {"steps": H, "outer_lr",
 * "outer_momentum", "outer_compression"} of local-steps mode. */
static int read_local_steps(const cJSON *root, struct dl_manifest *m) {
    m->local_steps = 0;
    m->outer_lr = 0.7;
    m->outer_momentum = 0.9;
    m->outer_compression = DL_CODEC_NONE;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "local_steps");
    if (!l) return 0;
    if (!cJSON_IsObject(l)) return dl_fail("manifest: 'local_steps' must be an object");
    static const char *const keys[] = {"steps", "outer_lr", "outer_momentum", "outer_compression"};
    char codec[16] = "none";
    if (only_keys(l, "local_steps", keys, 4) || get_int(l, "steps", 1, 1000000000, &m->local_steps, true) ||
        get_num(l, "outer_lr", 1e-9, 100, &m->outer_lr, false) < 0 ||
        get_num(l, "outer_momentum", 0, 0.999999, &m->outer_momentum, false) < 0 ||
        get_str(l, "outer_compression", codec, sizeof codec, false) < 0)
        return -1;
    if (dl_codec_from_name(codec, &m->outer_compression))
        return dl_fail("manifest: local_steps.outer_compression '%s' unknown", codec);
    return 0;
}

static int read_precisions(const cJSON *root, struct dl_manifest *m) {
    const cJSON *p = need(root, "precisions");
    if (!p) return -1;
    if (!cJSON_IsArray(p) || !p->child) return dl_fail("manifest: 'precisions' must be a non-empty list");
    for (const cJSON *c = p->child; c; c = c->next) {
        dl_precision prec;
        if (!cJSON_IsString(c) || dl_precision_parse(c->valuestring, &prec))
            return dl_fail("manifest: precisions hold fp32, fp16 or bf16");
        if (!m->precisions) snprintf(m->precision_default, sizeof m->precision_default, "%s", dl_precision_name(prec));
        m->precisions |= 1u << prec;
    }
    return 0;
}

static int read_fields(const cJSON *root, struct dl_manifest *m) {
    char format[32];
    if (only_keys(root, "the manifest", known_keys, sizeof known_keys / sizeof known_keys[0]) ||
        get_str(root, "format", format, sizeof format, true))
        return -1;
    if (strcmp(format, DL_MANIFEST_FORMAT))
        return dl_fail("manifest: format '%s' (this program reads %s)", format, DL_MANIFEST_FORMAT);
    char compression[16];
    if (get_str(root, "run_id", m->run_id, sizeof m->run_id, true) || read_model(root, m) || read_tokenizer(root, m) ||
        read_data(root, m) || get_int(root, "seq", 8, 65536, &m->seq, true) ||
        get_int(root, "micro_batch", 1, 65536, &m->micro_batch, true) ||
        get_int(root, "target_batch", 1, 1000000000, &m->target_batch, true) ||
        get_int(root, "max_steps", 1, 1000000000, &m->max_steps, true) || read_optimizer(root, m) ||
        get_str(root, "compression", compression, sizeof compression, true) || read_aggregation(root, m) ||
        read_precisions(root, m) || read_local_steps(root, m))
        return -1;
    m->shuffle_buffer = 10000;
    if (get_int(root, "seed", 0, (1LL << 53) - 1, &m->seed, false) < 0 ||
        get_int(root, "shuffle_buffer", 1, 100000000, &m->shuffle_buffer, false) < 0)
        return -1;
    if (dl_codec_from_name(compression, &m->compression)) return dl_fail("manifest: compression '%s' unknown", compression);
    int rc = get_hex(root, "authority", m->authority, DL_AUTHORITY_PK, false);
    if (rc < 0) return -1;
    m->has_authority = rc == 0;
    return get_hex(root, "signer", m->signer, DL_NET_PUBLIC_KEY, true);
}

static int verify(const cJSON *root, struct dl_manifest *m) {
    uint8_t sig[64];
    if (get_hex(root, "signature", sig, sizeof sig, true)) return -1;
    if (m->has_authority && memcmp(m->authority, m->signer, DL_AUTHORITY_PK))
        return dl_fail("manifest: it names a run authority but is signed by another key");
    char *canon_bytes;
    size_t n;
    if (canonical_of(root, &canon_bytes, &n)) return -1;
    size_t total = sizeof SIGN_CONTEXT - 1 + n;
    uint8_t *msg = dl_malloc(total);
    if (!msg) {
        free(canon_bytes);
        return -1;
    }
    memcpy(msg, SIGN_CONTEXT, sizeof SIGN_CONTEXT - 1);
    memcpy(msg + sizeof SIGN_CONTEXT - 1, canon_bytes, n);
    crypto_generichash(m->hash, sizeof m->hash, (const uint8_t *)canon_bytes, n, NULL, 0);
    sodium_bin2hex(m->hash_hex, sizeof m->hash_hex, m->hash, sizeof m->hash);
    int bad = crypto_sign_verify_detached(sig, msg, total, m->signer);
    free(msg);
    free(canon_bytes);
    if (bad) return dl_fail("manifest: the signature does not match its contents (altered, or not signed by its signer)");
    dl_net_peer_id_from_key(m->signer, m->signer_peer_id);
    return 0;
}

int dl_manifest_parse(const char *text, size_t size, struct dl_manifest *m) {
    memset(m, 0, sizeof *m);
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    if (size > DL_MANIFEST_MAX_BYTES) return dl_fail("manifest: %zu bytes (at most %d)", size, DL_MANIFEST_MAX_BYTES);
    cJSON *root = cJSON_ParseWithLength(text, size);
    if (!root) return dl_fail("manifest: not valid JSON");
    int rc = -1;
    if (!cJSON_IsObject(root)) dl_fail("manifest: not a JSON object");
    else if (!read_fields(root, m) && !verify(root, m)) rc = 0;
    cJSON_Delete(root);
    if (!rc) {
        m->text = dl_malloc(size + 1);
        if (!m->text) rc = -1;
        else {
            memcpy(m->text, text, size);
            m->text[size] = 0;
            m->size = size;
        }
    }
    if (rc) dl_manifest_free(m);
    return rc;
}

int dl_manifest_load(const char *path, struct dl_manifest *m) {
    char *text;
    size_t size;
    memset(m, 0, sizeof *m);
    if (dl_read_file(path, DL_MANIFEST_MAX_BYTES, &text, &size)) return dl_fail_context("%s", path);
    int rc = dl_manifest_parse(text, size, m);
    free(text);
    return rc ? dl_fail_context("%s", path) : 0;
}

void dl_manifest_free(struct dl_manifest *m) {
    if (!m) return;
    free(m->text);
    cJSON_free(m->model_config_json);
    for (size_t i = 0; i < m->num_data; i++) free(m->data[i]);
    memset(m, 0, sizeof *m);
}

int dl_manifest_sign(const char *body_json, const uint8_t sk[64], char **signed_text) {
    *signed_text = NULL;
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    cJSON *root = cJSON_Parse(body_json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dl_fail("manifest body: not a JSON object");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "signer");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "signature");
    uint8_t pk[32];
    char hex[129];
    crypto_sign_ed25519_sk_to_pk(pk, sk);
    sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
    int rc = -1;
    char *canon_bytes = NULL, *text = NULL;
    uint8_t *msg = NULL;
    size_t n;
    if (!cJSON_AddStringToObject(root, "signer", hex) || canonical_of(root, &canon_bytes, &n)) goto done;
    msg = dl_malloc(sizeof SIGN_CONTEXT - 1 + n);
    if (!msg) goto done;
    memcpy(msg, SIGN_CONTEXT, sizeof SIGN_CONTEXT - 1);
    memcpy(msg + sizeof SIGN_CONTEXT - 1, canon_bytes, n);
    uint8_t sig[64];
    crypto_sign_detached(sig, NULL, msg, sizeof SIGN_CONTEXT - 1 + n, sk);
    sodium_bin2hex(hex, sizeof hex, sig, sizeof sig);
    if (!cJSON_AddStringToObject(root, "signature", hex)) goto done;
    text = cJSON_Print(root);
    if (!text) {
        dl_fail("out of memory (manifest)");
        goto done;
    }
    struct dl_manifest check;
    if (dl_manifest_parse(text, strlen(text), &check)) goto done;
    dl_manifest_free(&check);
    *signed_text = dl_strdup(text);
    rc = *signed_text ? 0 : -1;
done:
    cJSON_free(text);
    free(msg);
    free(canon_bytes);
    cJSON_Delete(root);
    return rc;
}

int dl_file_blake2b(const char *path, size_t max_size, uint8_t hash[32], uint64_t *size) {
    char *data;
    size_t n;
    if (dl_read_file(path, max_size, &data, &n)) return -1;
    crypto_generichash(hash, 32, (const uint8_t *)data, n, NULL, 0);
    free(data);
    if (size) *size = n;
    return 0;
}
