/* The signed group record of one averaging round (private to src/collab).
 *
 * Every member of a round holds the same record before any data flows: the
 * members in a fixed order (ascending peer id), each one's weight, upload
 * bandwidth, role and part of the vector, signed by the leader who formed the
 * group. Binary, little-endian, fixed-size fields (docs/protocol.md). */
#ifndef DEDLOC_COLLAB_GROUP_H
#define DEDLOC_COLLAB_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/collab.h"

#define DL_GROUP_ROUND_ID 16
#define DL_GROUP_HEADER 48
#define DL_GROUP_MEMBER 104
#define DL_GROUP_TAIL 16         /* version 2: aggregation settings after the members */

struct dl_group_member {
    char peer_id[DL_PEER_ID_HEX];
    uint8_t pk[DL_NET_PUBLIC_KEY];
    double weight, bandwidth_mbit;
    enum dl_member_role role;
    uint64_t part_offset, part_elems;
};

struct dl_group {
    uint8_t round_id[DL_GROUP_ROUND_ID];
    uint64_t epoch, elements;
    enum dl_codec codec;
    double stall_s;
    double lp_bound_s;
    size_t leader;               /* member index of the signer */
    enum dl_aggregation aggregation;
    double clip_tau;
    int clip_iterations;
    size_t n;
    struct dl_group_member members[DL_AVG_MAX_MEMBERS];
};

/* Sorts the members by peer id (the fixed order every member uses) and fixes
 * up the leader index; refuses duplicates and more than DL_AVG_MAX_MEMBERS. */
int dl_group_sort(struct dl_group *g, const char *leader_id);
/* Record bytes (unsigned part) into out (DL_GROUP_HEADER + n * DL_GROUP_MEMBER + DL_GROUP_TAIL bytes). */
size_t dl_group_record_size(size_t n);
void dl_group_write(const struct dl_group *g, uint8_t *out);
/* Signed record: the bytes followed by the leader's signature. malloc'd. */
uint8_t *dl_group_sign(const struct dl_group *g, dl_net *net, size_t *size);
/* Parses and checks a signed record: sizes, order, parts covering the
 * vector, roles and weights, the leader's key and signature. */
int dl_group_parse(const uint8_t *data, size_t size, struct dl_group *g);
/* The split, from the members' bandwidths and roles alone: caps every
 * bandwidth (dl_balance_clamp_bandwidths), solves the load balance (with
 * its share cap) and fills part_offset, part_elems and lp_bound_s. */
int dl_group_plan(struct dl_group *g);
/* Recomputes the plan from a parsed record's own members and refuses a
 * record whose bandwidths or parts differ from it (a leader that gave
 * someone more of the vector than the rules allow); sets lp_bound_s. */
int dl_group_check_plan(struct dl_group *g);
/* Refuses a record whose leader-chosen settings (codec, aggregation, stall
 * time, centered clip's tau and iterations) differ from this run's own
 * (`opt`, resolved: stall_s > 0): a leader may not dictate them. */
int dl_group_check_settings(const struct dl_group *g, const struct dl_avg_options *opt);
/* Refuses a parsed record that is not the answer to our join: signed by
 * another leader than the one we asked, without us or with us in another
 * role, or for another vector size, codec or epoch (a record of an old epoch
 * replayed by its leader must not run a round that a later step applies).
 * Our member index goes to *me. */
int dl_group_check_join(const struct dl_group *g, const char *leader, const char *self, enum dl_member_role role,
                        uint64_t elements, enum dl_codec codec, uint64_t epoch, size_t *me);
/* Index of peer_id in the group, or -1. */
int dl_group_find(const struct dl_group *g, const char *peer_id);

#endif
