/* What the step loop reads from the swarm view, and its state transfer
 * (private to src/collab). */
#ifndef DEDLOC_COLLAB_TRAIN_SYNC_H
#define DEDLOC_COLLAB_TRAIN_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedloc/collab.h"

/* Most donors one download asks at once. */
#define DL_SYNC_MAX_DONORS 16

/* The swarm seen from a peer at `epoch` holding `my_hash` (NULL: no state). */
struct dl_swarm_look {
    size_t peers;                 /* alive records, ours included */
    size_t at_epoch;              /* peers at our epoch, ours included */
    size_t refused;               /* peers we refuse, at any epoch: left out of everything else
                                   * here, but present (--min-peers counts them, as it waits for
                                   * peers to arrive, not for groups; one refused by everyone
                                   * falls behind and would never arrive at our epoch) */
    size_t at_previous;           /* peers one epoch behind us: most are finishing that round */
    double collective;            /* samples at our epoch: ours exact, others extrapolated to now */
    double samples_per_second;    /* every alive peer's rate */
    uint64_t ahead_epoch;         /* the newest epoch another peer holds a state for that a majority of
                                     the other non-client peers reached (0: none ahead) */
    /* The param hash that a strict majority of the peers holding one at
     * `ref_epoch` (ahead_epoch when a peer is ahead, else our epoch) hold,
     * and who holds it; none on a tie or a mere plurality. */
    uint64_t ref_epoch;
    bool has_ref;
    uint8_t ref_hash[32];
    size_t ref_holders, hashes_at_ref; /* holders of ref_hash / peers with any hash there */
    bool i_disagree;              /* we hold a state at ref_epoch == epoch that is not ref_hash */
    size_t my_holders;            /* peers at our epoch holding our hash, us included */
    char donors[DL_SYNC_MAX_DONORS][DL_PEER_ID_HEX]; /* other holders of ref_hash, non-client first */
    size_t num_donors;
};

/* A group record of `epoch` that we verified as one of its members (its
 * leader signed it and it names us) in a round that failed for us: the
 * other non-client members, who may have completed it without us. A peer
 * cannot make one up for us: it is evidence the swarm's head count is not
 * (docs/collab_training.md, "The epoch and the reference state"). */
struct dl_group_evidence {
    uint64_t epoch;
    size_t n;                     /* 0: none */
    char members[DL_AVG_MAX_MEMBERS][DL_PEER_ID_HEX];
};

/* Notes the group of a failed round of ours at `epoch` (result's members,
 * filled when a group formed; nothing is noted otherwise). */
void dl_group_evidence_note(struct dl_group_evidence *evidence, uint64_t epoch, const struct dl_avg_result *result);

/* The swarm view's epoch_unbacked flags (net/swarm.c) counted every record,
 * refused peers' too: after those are dropped (dl_collab_drop_gone), backs
 * again what a strict majority of the voters left reaches, ourselves always
 * counted as a voter at our own epoch (the stricter of the view's two
 * rules). It only ever backs, never unbacks: with nothing dropped it
 * changes nothing. Two refused attackers otherwise kept an honest side of 3
 * a step ahead "unbacked" for the side of 2 behind it, and the two trained
 * apart. */
void dl_swarm_view_back_epochs(struct dl_swarm_view *view);
/* Reads the view, without the peers collab found gone or refuses (collab may be NULL:
 * an observer's view as it is). samples_mine: our accumulated samples at
 * epoch. evidence: the group of our last failed round, or NULL. */
int dl_swarm_look(dl_net *net, dl_collab *collab, uint64_t epoch, const uint8_t *my_hash, double samples_mine,
                  const struct dl_group_evidence *evidence, struct dl_swarm_look *look);
/* The same reading of a view already taken, at wall-clock time `now` (the
 * records' clock): what dl_swarm_look does after taking the view. */
void dl_swarm_look_at(const struct dl_swarm_view *view, uint64_t epoch, const uint8_t *my_hash, double samples_mine,
                      double now, const struct dl_group_evidence *evidence, struct dl_swarm_look *look);

/* The state a donor serves and a fetcher fills: weights, both moments, and
 * this metadata. The epoch is the schedule's position too: the learning-rate
 * schedule's settings are the run's, its position is the epoch. */
struct dl_train_state_meta {
    uint64_t epoch;               /* optimizer steps taken */
    int64_t samples;              /* samples in those steps, the whole swarm's */
    bool loss_scaling;            /* the donor scales its loss (fp16 storage) */
    float loss_scale;             /* its scale at that step (a power of two; 1 without scaling) */
    int64_t clean_micro_batches;  /* its clean micro-batches since the scale last changed */
};

#define DL_TRAIN_STATE_META_SIZE 48

void dl_train_state_meta_encode(const struct dl_train_state_meta *meta, uint8_t out[DL_TRAIN_STATE_META_SIZE]);
/* Refuses another size or version, a sample count or counter beyond 2^62,
 * and a loss scale that is not a power of two within the normal floats. */
int dl_train_state_meta_decode(const uint8_t *data, size_t size, struct dl_train_state_meta *meta);
/* Takes the donor's loss scale when both it and we scale (fp16 peers); a
 * peer that does not scale keeps its own. */
void dl_train_state_meta_adopt_scale(const struct dl_train_state_meta *meta, dl_loss_scale *ls);

/* Publishes params + opt's moments at opt->step, with ls (the loss scale at that step). */
int dl_train_state_publish(dl_state_donor *donor, const dl_optimizer *opt, const float *params,
                           int64_t samples, const dl_loss_scale *ls);

/* Downloads the state at look->ref_epoch from look's donors into params and
 * opt (whose settings stay ours); on success opt->step = that epoch. stop (may
 * be NULL): non-zero gives up at once, params and opt untouched. */
int dl_train_state_fetch(dl_net *net, const struct dl_swarm_look *look, dl_optimizer *opt, float *params,
                         struct dl_train_state_meta *meta, double timeout_s, const volatile sig_atomic_t *stop);

#endif
