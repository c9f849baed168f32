/* State of the averaging service (private to src/collab).
 *
 * Layers of the averaging code, each file calling only those below it
 * (types may be shared downwards through headers, calls never go up):
 *
 *   service.c      dl_collab_start/stop/average: net handlers, which route
 *                  incoming requests to the running round's inbox, and the
 *                  outer frame of a round (matchmaking, then the round)
 *   matchmaking.c  forms the group of a round (the leader's record)
 *   allreduce.c    the round's loop                        } round.h
 *   recovery.c     replacing a failed aggregator           }
 *   round.c        the round's state, chunk geometry, failure marking
 *   bans.c         refused peers, clipped streaks (bans.h)
 *   inbox.c        the transport interface and its network side: requests,
 *                  answers, the inbox (inbox.h)
 *   group.c, balance.c, centered_clip.c, wirecodec.c: leaves
 *
 * The round reaches the network only through its transport (a table of
 * operations, inbox.h), so tests run it over one in memory. liveness.c
 * (peers found gone) sits beside matchmaking, on the service's state.
 *
 * Threads: net's handlers and response callbacks run on the network thread;
 * they only copy what arrived into the service's inbox (under lock) and wake
 * the round thread, the caller of dl_collab_average, which does everything
 * else: decoding, reducing, encoding, signing, deciding. */
#ifndef DEDLOC_COLLAB_INTERNAL_H
#define DEDLOC_COLLAB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "collab/bans.h"
#include "collab/group.h"
#include "collab/inbox.h"
#include "collab/round.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

/* A peer found unreachable while its record was still in the view: gone
 * until a record of it newer than record_time arrives. */
struct dl_suspect_entry {
    char peer_id[DL_PEER_ID_HEX];
    double record_time;
};

#define DL_PASSED_OVER_MAX 16

struct dl_collab {
    dl_net *net;
    struct dl_collab_config cfg;
    pthread_mutex_t lock;
    struct dl_inbox inbox;        /* lock: incoming requests and answers for the round thread */
    struct dl_net_transport transport; /* what rounds run on: net and the inbox */
    struct dl_round *cur;         /* lock: the round running now */
    struct dl_round *last;        /* lock: the finished round, kept to serve relays */
    uint64_t next_serial;
    struct dl_bans bans;
    struct dl_suspect_entry suspects[DL_AVG_MAX_MEMBERS]; /* lock */
    size_t num_suspects;
    double spread_ema;            /* arrival spread of past matchmakings (s) */
    double measured_mbit;         /* upload rate of past rounds */
    int misbehaviour;             /* tests only: enum dl_misbehaviour */
    uint64_t rounds_done, last_epoch; /* lock */
    /* Leaders whose group did not complete at passed_over_epoch (no answer
     * before the deadline, or a record we refused): the round thread skips
     * them when it retries that epoch (matchmaking.c). */
    char passed_over[DL_PASSED_OVER_MAX][DL_PEER_ID_HEX];
    size_t num_passed_over;
    uint64_t passed_over_epoch;
    bool test_stalling;           /* tests only: DL_MISBEHAVE_STALL_LEADER latched */
};

/* roles.c: why an averaging request (inbox.h kind, its payload) from a peer
 * whose admission token has `token_role` is refused, or NULL to take it. */
const char *dl_collab_role_refusal(enum dl_role token_role, int kind, const uint8_t *payload, size_t size);

/* matchmaking.c: forms the group of round r for service c (fills r->g,
 * r->me); 0 or -1 with r->status set. */
int dl_matchmake(struct dl_collab *c, struct dl_round *r, const struct dl_avg_options *opt);

/* service.c: after a round, counts its centered-clip evidence into c's
 * clipped streaks (bans.h). */
void dl_collab_count_clipped(struct dl_collab *c, const struct dl_round *r, struct dl_avg_result *result);

#endif
