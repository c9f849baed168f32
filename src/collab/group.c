/* The signed group record: layout, ordering, checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collab/balance.h"
#include "collab/bytes.h"
#include "collab/group.h"
#include "collab/wirecodec.h"
#include "dedloc/util.h"

static const uint8_t group_magic[4] = {'D', 'L', 'G', 'R'};
/* Version 2 appends the aggregation settings after the members; version 1
 * records (no tail) still parse, as mean rounds. */
#define GROUP_VERSION 2

static int cmp_member(const void *a, const void *b) {
    return strcmp(((const struct dl_group_member *)a)->peer_id, ((const struct dl_group_member *)b)->peer_id);
}

int dl_group_sort(struct dl_group *g, const char *leader_id) {
    if (g->n < 1 || g->n > DL_AVG_MAX_MEMBERS)
        return dl_fail("a group holds 1..%d members, not %zu", DL_AVG_MAX_MEMBERS, g->n);
    qsort(g->members, g->n, sizeof g->members[0], cmp_member);
    for (size_t i = 1; i < g->n; i++)
        if (!strcmp(g->members[i - 1].peer_id, g->members[i].peer_id))
            return dl_fail("peer %s joined the group twice", g->members[i].peer_id);
    int li = dl_group_find(g, leader_id);
    if (li < 0) return dl_fail("the leader is not a member of its group");
    g->leader = (size_t)li;
    return 0;
}

int dl_group_plan(struct dl_group *g) {
    double declared[DL_AVG_MAX_MEMBERS], bw[DL_AVG_MAX_MEMBERS], fractions[DL_AVG_MAX_MEMBERS];
    enum dl_member_role roles[DL_AVG_MAX_MEMBERS];
    size_t parts[DL_AVG_MAX_MEMBERS];
    if (g->n < 1 || g->n > DL_AVG_MAX_MEMBERS) return dl_fail("a group holds 1..%d members", DL_AVG_MAX_MEMBERS);
    for (size_t i = 0; i < g->n; i++) declared[i] = g->members[i].bandwidth_mbit;
    dl_balance_clamp_bandwidths(g->n, declared);
    for (size_t i = 0; i < g->n; i++) {
        g->members[i].bandwidth_mbit = declared[i];
        bw[i] = declared[i] * 1e6 / 8;
        roles[i] = g->members[i].role;
    }
    double bytes = (double)dl_codec_size(g->codec, DL_AVG_CHUNK_ELEMS) / DL_AVG_CHUNK_ELEMS * (double)g->elements;
    if (dl_balance_solve(g->n, bw, roles, bytes, fractions, &g->lp_bound_s)) return -1;
    dl_balance_split(g->n, fractions, (size_t)g->elements, parts);
    uint64_t off = 0;
    for (size_t i = 0; i < g->n; i++) {
        g->members[i].part_offset = off;
        g->members[i].part_elems = parts[i];
        off += parts[i];
    }
    return 0;
}

int dl_group_check_plan(struct dl_group *g) {
    struct dl_group *mine = dl_malloc(sizeof *mine);
    if (!mine) return -1;
    memcpy(mine, g, sizeof *mine);
    int rc = dl_group_plan(mine);
    for (size_t i = 0; !rc && i < g->n; i++) {
        const struct dl_group_member *theirs = &g->members[i], *ours = &mine->members[i];
        if (theirs->bandwidth_mbit != ours->bandwidth_mbit)
            rc = dl_fail("group record: member %zu declares %g Mbit/s, above %g times the group's median", i,
                         theirs->bandwidth_mbit, DL_BALANCE_BANDWIDTH_SPREAD);
        else if (theirs->part_elems != ours->part_elems)
            rc = dl_fail("group record: member %zu aggregates %llu elements, its bandwidth and role give %llu", i,
                         (unsigned long long)theirs->part_elems, (unsigned long long)ours->part_elems);
    }
    if (!rc) g->lp_bound_s = mine->lp_bound_s;
    free(mine);
    return rc;
}

int dl_group_check_settings(const struct dl_group *g, const struct dl_avg_options *opt) {
    if (g->codec != opt->compression)
        return dl_fail("the group record says codec %s, this run uses %s", dl_codec_name(g->codec),
                       dl_codec_name(opt->compression));
    if (g->aggregation != opt->aggregation)
        return dl_fail("the group record says aggregation %s, this run uses %s", dl_aggregation_name(g->aggregation),
                       dl_aggregation_name(opt->aggregation));
    /* The record holds whole milliseconds. */
    if (lround(g->stall_s * 1000.0) != lround(opt->stall_s * 1000.0))
        return dl_fail("the group record says stall time %.3f s, this run uses %.3f s", g->stall_s, opt->stall_s);
    if (opt->aggregation == DL_AGG_CENTERED_CLIP &&
        (g->clip_tau != opt->clip_tau || g->clip_iterations != opt->clip_iterations))
        return dl_fail("the group record says centered clip with tau %g and %d iterations, this run uses tau %g and "
                       "%d iterations", g->clip_tau, g->clip_iterations, opt->clip_tau, opt->clip_iterations);
    return 0;
}

int dl_group_check_join(const struct dl_group *g, const char *leader, const char *self, enum dl_member_role role,
                        uint64_t elements, enum dl_codec codec, uint64_t epoch, size_t *me) {
    int i = dl_group_find(g, self);
    if (strcmp(g->members[g->leader].peer_id, leader)) return dl_fail("the group record is signed by another leader");
    if (i < 0 || g->members[i].role != role) return dl_fail("the group record does not hold us in our role");
    if (g->elements != elements || g->codec != codec)
        return dl_fail("the group record is for %llu elements in %s, we joined with %llu in %s",
                       (unsigned long long)g->elements, dl_codec_name(g->codec), (unsigned long long)elements,
                       dl_codec_name(codec));
    if (g->epoch != epoch)
        return dl_fail("the group record is for epoch %llu, we joined for epoch %llu", (unsigned long long)g->epoch,
                       (unsigned long long)epoch);
    *me = (size_t)i;
    return 0;
}

int dl_group_find(const struct dl_group *g, const char *peer_id) {
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->members[i].peer_id, peer_id)) return (int)i;
    return -1;
}

static size_t record_size(size_t n, int version) {
    return DL_GROUP_HEADER + n * DL_GROUP_MEMBER + (version >= 2 ? DL_GROUP_TAIL : 0);
}

size_t dl_group_record_size(size_t n) { return record_size(n, GROUP_VERSION); }

/* Header: magic[4] version u8 codec u8 n u16 | epoch u64 | elements u64 |
 * round_id[16] | stall_ms u32 leader u16 reserved u16.
 * Member: peer_id[32] pk[32] weight f64 bandwidth f64 role u8 pad[7]
 * part_offset u64 part_elems u64.
 * Tail (version 2): aggregation u8 pad[3] clip_iterations u32 clip_tau f64. */
void dl_group_write(const struct dl_group *g, uint8_t *out) {
    memset(out, 0, dl_group_record_size(g->n));
    memcpy(out, group_magic, 4);
    out[4] = GROUP_VERSION;
    out[5] = (uint8_t)g->codec;
    dl_put_u16(out + 6, (uint16_t)g->n);
    dl_put_u64(out + 8, g->epoch);
    dl_put_u64(out + 16, g->elements);
    memcpy(out + 24, g->round_id, DL_GROUP_ROUND_ID);
    dl_put_u32(out + 40, (uint32_t)(g->stall_s * 1000.0 + 0.5));
    dl_put_u16(out + 44, (uint16_t)g->leader);
    for (size_t i = 0; i < g->n; i++) {
        const struct dl_group_member *m = &g->members[i];
        uint8_t *p = out + DL_GROUP_HEADER + i * DL_GROUP_MEMBER;
        memcpy(p, m->peer_id, 32);
        memcpy(p + 32, m->pk, 32);
        dl_put_f64(p + 64, m->weight);
        dl_put_f64(p + 72, m->bandwidth_mbit);
        p[80] = (uint8_t)m->role;
        dl_put_u64(p + 88, m->part_offset);
        dl_put_u64(p + 96, m->part_elems);
    }
    uint8_t *tail = out + DL_GROUP_HEADER + g->n * DL_GROUP_MEMBER;
    tail[0] = (uint8_t)g->aggregation;
    dl_put_u32(tail + 4, (uint32_t)g->clip_iterations);
    dl_put_f64(tail + 8, g->clip_tau);
}

uint8_t *dl_group_sign(const struct dl_group *g, dl_net *net, size_t *size) {
    size_t body = dl_group_record_size(g->n);
    uint8_t *out = dl_malloc(body + DL_NET_SIGNATURE);
    if (!out) return NULL;
    dl_group_write(g, out);
    dl_net_sign(net, out, body, out + body);
    *size = body + DL_NET_SIGNATURE;
    return out;
}

static bool is_hex_id(const uint8_t *p) {
    for (int i = 0; i < 32; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return false;
    return true;
}

int dl_group_parse(const uint8_t *data, size_t size, struct dl_group *g) {
    if (size < DL_GROUP_HEADER + DL_NET_SIGNATURE) return dl_fail("group record: %zu bytes is too short", size);
    int version = data[4];
    if (memcmp(data, group_magic, 4) || version < 1 || version > GROUP_VERSION)
        return dl_fail("group record: not a version 1..%d group record", GROUP_VERSION);
    memset(g, 0, sizeof *g);
    g->codec = data[5];
    g->n = dl_get_u16(data + 6);
    if (g->n < 1 || g->n > DL_AVG_MAX_MEMBERS) return dl_fail("group record: %zu members", g->n);
    if (size != record_size(g->n, version) + DL_NET_SIGNATURE)
        return dl_fail("group record: %zu bytes for %zu members", size, g->n);
    if (g->codec >= DL_CODEC_COUNT) return dl_fail("group record: unknown codec %d", g->codec);
    g->epoch = dl_get_u64(data + 8);
    g->elements = dl_get_u64(data + 16);
    memcpy(g->round_id, data + 24, DL_GROUP_ROUND_ID);
    g->stall_s = dl_get_u32(data + 40) / 1000.0;
    g->leader = dl_get_u16(data + 44);
    if (g->leader >= g->n) return dl_fail("group record: leader index out of range");
    if (!(g->stall_s >= 0.1) || g->stall_s > 3600) return dl_fail("group record: stall time out of range");
    uint64_t next = 0;
    size_t aggregators = 0, senders = 0;
    for (size_t i = 0; i < g->n; i++) {
        struct dl_group_member *m = &g->members[i];
        const uint8_t *p = data + DL_GROUP_HEADER + i * DL_GROUP_MEMBER;
        if (!is_hex_id(p)) return dl_fail("group record: member %zu has a malformed peer id", i);
        memcpy(m->peer_id, p, 32);
        m->peer_id[32] = 0;
        memcpy(m->pk, p + 32, 32);
        m->weight = dl_get_f64(p + 64);
        m->bandwidth_mbit = dl_get_f64(p + 72);
        m->role = p[80];
        m->part_offset = dl_get_u64(p + 88);
        m->part_elems = dl_get_u64(p + 96);
        char owner[DL_PEER_ID_HEX];
        dl_net_peer_id_from_key(m->pk, owner);
        if (strcmp(owner, m->peer_id)) return dl_fail("group record: the key of member %zu does not belong to its peer id", i);
        if (i && strcmp(g->members[i - 1].peer_id, m->peer_id) >= 0)
            return dl_fail("group record: members are not in ascending peer id order");
        if (m->role >= DL_MEMBER_ROLE_COUNT) return dl_fail("group record: member %zu has unknown role %d", i, m->role);
        if (!isfinite(m->weight) || m->weight < 0 || (m->role == DL_MEMBER_AUX && m->weight != 0))
            return dl_fail("group record: member %zu has weight %g", i, m->weight);
        if (!isfinite(m->bandwidth_mbit) || m->bandwidth_mbit < 0)
            return dl_fail("group record: member %zu has bandwidth %g", i, m->bandwidth_mbit);
        if (m->part_offset != next || m->part_elems > g->elements - next)
            return dl_fail("group record: parts do not tile the vector at member %zu", i);
        if (m->role == DL_MEMBER_CLIENT && m->part_elems)
            return dl_fail("group record: client member %zu aggregates a part", i);
        next += m->part_elems;
        if (m->part_elems) aggregators++;
        if (m->role != DL_MEMBER_AUX) senders++;
    }
    if (next != g->elements) return dl_fail("group record: parts cover %llu of %llu elements",
                                            (unsigned long long)next, (unsigned long long)g->elements);
    if (g->elements && (!aggregators || !senders)) return dl_fail("group record: no aggregator or no contributor");
    /* Whatever the split's inputs, nobody may hold more than the share cap
     * (one element of slack for the largest-remainder rounding). */
    size_t able = 0;
    for (size_t i = 0; i < g->n; i++) able += g->members[i].role != DL_MEMBER_CLIENT;
    double cap = dl_balance_share_cap(able) * (double)g->elements + 1;
    for (size_t i = 0; i < g->n; i++)
        if ((double)g->members[i].part_elems > cap)
            return dl_fail("group record: member %zu aggregates %llu of %llu elements, above the cap of %.3g of the "
                           "vector", i, (unsigned long long)g->members[i].part_elems,
                           (unsigned long long)g->elements, dl_balance_share_cap(able));
    g->aggregation = DL_AGG_MEAN;
    if (version >= 2) {
        const uint8_t *tail = data + DL_GROUP_HEADER + g->n * DL_GROUP_MEMBER;
        g->aggregation = tail[0];
        uint32_t iterations = dl_get_u32(tail + 4);
        g->clip_tau = dl_get_f64(tail + 8);
        if (g->aggregation >= DL_AGG_COUNT)
            return dl_fail("group record: unknown aggregation %d", g->aggregation);
        if (g->aggregation == DL_AGG_CENTERED_CLIP &&
            (iterations > DL_CLIP_MAX_ITERATIONS || !isfinite(g->clip_tau) || !(g->clip_tau > 0)))
            return dl_fail("group record: centered clip with tau %g and %u iterations", g->clip_tau, iterations);
        g->clip_iterations = (int)iterations;
    }
    size_t body = record_size(g->n, version);
    const struct dl_group_member *leader = &g->members[g->leader];
    if (dl_net_verify(leader->peer_id, leader->pk, data, body, data + body))
        return dl_fail_context("group record");
    return 0;
}
