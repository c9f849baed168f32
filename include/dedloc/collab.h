/* dedloc collaboration: the averaging round (matchmaking and the
 * load-balanced butterfly all-reduce over net's requests) and state transfer.
 * The protocol and its fault handling are described in docs/protocol.md. */
#ifndef DEDLOC_COLLAB_H
#define DEDLOC_COLLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/net.h"

/* ==== averaging round ==== */

/* Most members one group may hold; more joiners are refused. */
#define DL_AVG_MAX_MEMBERS 256
/* Elements per chunk: parts travel in chunks of 1 MiB of fp32. */
#define DL_AVG_CHUNK_ELEMS 262144

typedef struct dl_collab dl_collab;

struct dl_collab_config {
    double bandwidth_mbit;       /* declared upload bandwidth; 0 = measured from past rounds */
    bool client_mode;            /* cannot be dialled: never aggregates */
    bool aux;                    /* auxiliary peer: aggregates only, has no gradient (weight 0) */
    double matchmaking_floor_s;  /* bounds of the adaptive matchmaking window (default 0.5 .. 10) */
    double matchmaking_ceiling_s;
    double ban_s;                /* how long a misbehaving member is refused (default 60) */
};
void dl_collab_config_default(struct dl_collab_config *config);

/* Registers the averaging methods on net (which must outlive it). */
int dl_collab_start(dl_net *net, const struct dl_collab_config *config, dl_collab **collab);
void dl_collab_stop(dl_collab *collab);

struct dl_avg_options {
    uint64_t epoch;              /* round key: members of one round use the same epoch */
    double weight;               /* samples behind this vector (0 for aux) */
    int compression;             /* wire codec: 0 none, 1 fp16, 2 uint8 (dl_codec_parse names them) */
    double deadline_s;           /* whole round, matchmaking included (default 60) */
    double stall_s;              /* silence after which a sender is left out (0 = deadline / 6, >= 1) */
    size_t expected_peers;       /* leader: close matchmaking once this many joined (0 = the swarm view's count) */
};
void dl_avg_options_default(struct dl_avg_options *options);

enum dl_avg_status {
    DL_AVG_OK = 0,
    DL_AVG_NO_GROUP = 1,         /* matchmaking failed or missed the group: keep the gradient */
    DL_AVG_DEADLINE = 2,         /* the round did not complete in time: nothing applied */
    DL_AVG_DROPPED = 3,          /* another member refused our data */
    DL_AVG_UNSURE = 4,           /* could not be sure to hold the others' bits: apply nothing,
                                    catch up by state download */
    DL_AVG_FAILED = 5,           /* bad arguments, no memory, group invalid */
};
const char *dl_avg_status_name(int status);

/* What one chunk of the result was made of. */
struct dl_avg_chunk_info {
    uint64_t offset, length;     /* elements */
    uint16_t part, reducer;      /* member indices: whose part, who reduced it */
    uint8_t generation;          /* 0: reduced by the part's aggregator; 1: re-reduced by a survivor */
    uint8_t contributors[DL_AVG_MAX_MEMBERS / 8]; /* bit i = member i's vector is in it */
};

struct dl_avg_member {
    char peer_id[DL_PEER_ID_HEX];
    double weight, bandwidth_mbit;
    int role;                    /* 0 trainer, 1 client, 2 aux */
    uint64_t part_offset, part_elems;
};

struct dl_avg_result {
    int status;                  /* enum dl_avg_status */
    char reason[256];            /* why it failed ("" when OK) */
    size_t num_members, my_index;
    struct dl_avg_member *members;  /* group order */
    size_t num_chunks;
    struct dl_avg_chunk_info *chunks;
    int compression;
    uint64_t bytes_sent, bytes_received;  /* payload bytes of this round's requests */
    double matchmaking_s, allreduce_s, total_s;
    double lp_bound_s;           /* the load-balancing optimum for these bandwidths */
    double reduce_s;             /* time spent decoding, reducing and encoding */
    uint64_t reduced_elems;      /* elements of contributions decoded and reduced */
};
void dl_avg_result_free(struct dl_avg_result *result);

/* Averages vec (n floats, finite) with the peers that join the same epoch,
 * weighted by options->weight. On DL_AVG_OK vec holds the average, the same
 * bits as every other member's; on any other status vec is unchanged and the
 * caller keeps its contribution for the next round. Returns the status. */
int dl_collab_average(dl_collab *collab, float *vec, size_t n, const struct dl_avg_options *options,
                      struct dl_avg_result *result);

/* The measured upload bandwidth (Mbit/s) from past rounds; 0 before any. */
double dl_collab_measured_bandwidth(const dl_collab *collab);

#endif
