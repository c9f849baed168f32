/* Accountable aggregation within a round, shared by its two files
 * (private to src/collab): audit_round.c runs the round's checks (the seed,
 * projections, the fast check, attestations, disclosure, rosters) and
 * audit_spot.c the spot disclosure under centered clip (docs/protocol.md,
 * accountable aggregation, 3d). */
#ifndef DEDLOC_COLLAB_AUDIT_INTERNAL_H
#define DEDLOC_COLLAB_AUDIT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collab/audit.h"
#include "collab/round.h"

/* Scratch for one chunk: its contribution, the result, the direction.
 * Made at the round's first pump and kept to its end: the pump runs at
 * every event, and 2.5 MB mapped and unmapped each time cost the round
 * more than the checks it serves (page faults on 2 shared cores). */
struct dl_audit_scratch {
    float *x, *q;
    int16_t *z;
};

/* Whether result's contributor mask names member j. */
static inline bool in_mask(const uint8_t *result, size_t j) { return dl_round_result_counts(result, j); }

/* ---- audit_round.c ---- */

/* How many chunks of one part a member may ask us for in a round: one
 * disputed chunk (3c), one a spot check drew (3d), one an escalation names
 * (each up to 512 KiB in fp32, so a bound, not one). */
#define DL_AUDIT_DISCLOSURES 3
/* Whether we disclosed chunk k of part p to member m this round. */
bool dl_audit_disclosed(const struct dl_round *r, size_t m, size_t p, size_t k);
/* Records a disclosure of chunk k of part p to member m: false when m
 * already had DL_AUDIT_DISCLOSURES of that part (then refuse it). */
bool dl_audit_note_disclosed(struct dl_round *r, size_t m, size_t p, size_t k);

/* The size of a sender's signed projections of part `part`. */
size_t dl_audit_proj_size(const struct dl_round *r, size_t part);
/* The result of (part, k) if it is generation 0 from the part's aggregator
 * (the only ones audited), else NULL. */
const uint8_t *dl_audit_audited_result(const struct dl_round *r, size_t part, size_t k);
bool dl_audit_decode_result(const struct dl_round *r, const uint8_t *res, size_t len, float *q);
/* From a sender's signed projections of a part: its weight and its
 * measures of chunk k. */
void dl_audit_read_projection(const uint8_t *proj, size_t k, double *weight, struct dl_audit_measure *m);
/* Measures of a signed chunk against the result of (part, k), under seed. */
bool dl_audit_measure_chunk(struct dl_round *r, struct dl_audit_scratch *sc, const uint8_t *seed, size_t part,
                            size_t k, const uint8_t *chunk, const uint8_t *res, struct dl_audit_measure *m);
/* Not checkable, with nobody to blame: the round is not applied. */
void dl_audit_unsure(struct dl_round *r, const char *why);
bool dl_audit_projections_signed(const struct dl_round *r, const uint8_t *proj, size_t psz, size_t j);
/* Whether chunk is member j's signed chunk k of part p that res committed to. */
bool dl_audit_committed_chunk(const struct dl_round *r, size_t p, size_t k, size_t j, const uint8_t *chunk,
                              size_t chunk_size, const uint8_t *res, uint64_t len);
/* The first chunk whose measures two projections of part p give differently (0 if none). */
size_t dl_audit_projections_differ_at(const struct dl_round *r, size_t p, const uint8_t *a, const uint8_t *b);
/* Disclosure (3c) of chunk fast_failed_k[p]: ask its contributors, whether
 * all answered (or stall_s passed), and the verdict with their chunks. */
void dl_audit_ask_disclosure(struct dl_round *r, size_t p, double now);
bool dl_audit_disclosure_ready(const struct dl_round *r, size_t p, double now);
void dl_audit_check_disclosed(struct dl_round *r, struct dl_audit_scratch *sc, size_t p);

/* ---- audit_spot.c ---- */

/* Whether this round has spot checks (centered clip, reducers sitting out). */
bool dl_audit_spot_active(const struct dl_round *r);
/* Part p's two checkers under our seed (SIZE_MAX where there are fewer). */
void dl_audit_spot_checkers(const struct dl_round *r, size_t p, size_t out[2]);
/* A sender of part p convicted on chunk k: every contributor of it is asked
 * for its chunk, and the aggregator judged on them. */
void dl_audit_spot_escalate(struct dl_round *r, size_t p, size_t k, double now);
/* Our spot checks, the others' verdicts, escalations: true while we wait. */
bool dl_audit_spot_pump(struct dl_round *r, struct dl_audit_scratch *sc, double now);
/* An avg.audit message of type DL_AUDIT_DISCLOSE_KEPT or DL_AUDIT_VERDICT
 * from member j about part `part`: true when it was answered here, false
 * when the caller acknowledges it. */
bool dl_audit_spot_on_event(struct dl_round *r, struct dl_avg_event *ev, size_t j, size_t part);

#endif
