/* The averaging-round scenarios of collab_round_procs, one entry each; a
 * field left out is zero (NULL, false). tests/collab/CMakeLists.txt reads this
 * file and registers the ctest collab/round_<name> for every `.name = "..."`
 * line, so adding a scenario is adding its entry here. Keep `.name` the first
 * field of an entry: a needs_test_hooks flag belongs to the name above it. */
#ifndef DEDLOC_TESTS_COLLAB_ROUND_SCENARIOS_H
#define DEDLOC_TESTS_COLLAB_ROUND_SCENARIOS_H

#include <stdbool.h>
#include <stddef.h>

struct scenario {
    const char *name;
    int member_count;
    size_t vector_size;         /* floats each member averages */
    const char *compression;    /* "fp16" "uint8" "int8" "topk"; NULL = "none" */
    double upload_mbit;         /* per member cap, 0 = none */
    const char *fault;          /* NULL, "kill", "stop" (SIGSTOP, then SIGCONT), "port" (garbage on its port) */
    int victim;                 /* member index the fault, misbehave and victim_delay hit (a kill or
                                 * stop aimed at the group's leader moves to another trainer) */
    double fault_at;            /* seconds after every member started the round */
    const char *roles;          /* one letter per member: t(rainer) c(lient) a(ux); NULL = all trainers */
    const char *misbehave;      /* `--misbehave` mode of member `victim` */
    double victim_delay;        /* member `victim` calls the round this late (s) */
    const char *victim_status;  /* what the victim must report, or NULL */
    const char *aggregation;    /* NULL (mean) or "centered-clip" */
    const char *attacks;        /* per member: '-' honest, 's' sign-flip, 'n' noise, 't' stale, 'r' replay */
    double tau;                 /* centered clip radius (0 = the default, 1) */
    double hand_over;           /* > 0: member i matchmakes first and hands its vector over
                                 * hand_over + 0.25 i s after the round starts */
    bool join_differs;          /* the joins carry 1 + i % 3, the chunks 5 + 3 i */
    double victim_bandwidth;    /* > 0: member `victim` declares this upload bandwidth (Mbit/s) */
    double attacker_weight;     /* > 0: the attackers' chunks and joins carry this weight */
    bool everyone_misbehaves;   /* `misbehave` goes to every member (a leader's attack: whoever leads) */
    const char *refusal;        /* every member but the leader refuses the round with this in its reason */
    int rounds;                 /* > 1: rounds run at epoch 1 (a failed round retried); the last is checked */
    double deadline;            /* round deadline (s); 0 = 40 */
    const char *tokens;         /* a run with an authority: each member's token role, t(rainer) m(onitor);
                                 * a monitor never leads the round (the test draws its key so) */
    const char *victim_reason;  /* what the victim's reason must contain, or NULL */
    bool caught;                /* member `victim` lies (misbehave) and must be caught: every other
                                 * member applies nothing and bans it alone, on signed evidence */
    double sparse;              /* > 0: gradient-like vectors (as with attacks) of which only this
                                 * fraction of rows of 64 values is non-zero, drawn per member */
    bool no_resend;             /* no member sends a chunk twice (bytes_resent 0 everywhere) */
    bool needs_test_hooks;      /* registered only in test-hook builds (the attack modes) */
    const char *accomplice_misbehave; /* `--misbehave` mode of member `accomplice`, who colludes with
                                       * `victim`: with caught, both must be banned */
    int accomplice;
};

/* Member weights are 1 + i % 3 (aux members 0) unless join_differs. */
static const struct scenario scenarios[] = {
    {.name = "two", .member_count = 2, .vector_size = 1000003},
    {.name = "four_fp16", .member_count = 4, .vector_size = 1500001, .compression = "fp16"},
    {.name = "four_uint8", .member_count = 4, .vector_size = 1500001, .compression = "uint8"},
    /* int8 and topk: every member's sent (error feedback) is what the
     * aggregators decoded from it, and each result the weighted mean of those */
    {.name = "four_int8", .member_count = 4, .vector_size = 1500001, .compression = "int8"},
    /* Sparse gradient-like vectors (an embedding's gradient): most of the
     * non-zeros lie beyond mean +- 6 sigma, so the uint8 result's error
     * bound must not assume that grid; every member applies the same bits
     * after checking every other part, under the mean and centered clip,
     * and the other codecs alike. */
    {.name = "sparse_uint8", .member_count = 4, .vector_size = 1000003, .compression = "uint8", .sparse = 0.005,
     .needs_test_hooks = true},
    {.name = "sparse_uint8_clip", .member_count = 4, .vector_size = 1000003, .compression = "uint8", .sparse = 0.005,
     .aggregation = "centered-clip", .tau = 30, .needs_test_hooks = true},
    {.name = "sparse_int8", .member_count = 4, .vector_size = 1000003, .compression = "int8", .sparse = 0.005,
     .needs_test_hooks = true},
    {.name = "sparse_int8_clip", .member_count = 4, .vector_size = 1000003, .compression = "int8", .sparse = 0.005,
     .aggregation = "centered-clip", .tau = 30, .needs_test_hooks = true},
    {.name = "sparse_topk", .member_count = 4, .vector_size = 1000003, .compression = "topk", .sparse = 0.005,
     .needs_test_hooks = true},
    {.name = "sparse_topk_clip", .member_count = 4, .vector_size = 1000003, .compression = "topk", .sparse = 0.005,
     .aggregation = "centered-clip", .tau = 30, .needs_test_hooks = true},
    /* Every member but the leader takes the group record a second late
     * (slow-record, honest): the leader's chunks, and those of the members
     * that wake first, reach them before it. They wait for the record
     * instead of being refused and sent again. */
    {.name = "late_record", .member_count = 4, .vector_size = 1000003, .compression = "fp16",
     .misbehave = "slow-record", .everyone_misbehaves = true, .no_resend = true, .needs_test_hooks = true},
    {.name = "five_topk", .member_count = 5, .vector_size = 1500001, .compression = "topk", .roles = "ttatc"},
    {.name = "topk_clip", .member_count = 5, .vector_size = 1000003, .compression = "topk",
     .aggregation = "centered-clip", .tau = 30},
    {.name = "int8_clip", .member_count = 5, .vector_size = 1000003, .compression = "int8",
     .aggregation = "centered-clip", .roles = "ttttc"},
    /* a client sending a malformed topk chunk (offsets out of order) or an
     * int8 chunk with a NaN scale is dropped */
    {.name = "garbage_topk", .member_count = 4, .vector_size = 1000003, .compression = "topk", .roles = "tttc",
     .victim = 3, .misbehave = "garbage", .victim_status = "dropped"},
    {.name = "nan_int8", .member_count = 4, .vector_size = 1000003, .compression = "int8", .roles = "tttc",
     .victim = 3, .misbehave = "nan", .victim_status = "dropped"},
    /* a killed aggregator in a topk round: its part is re-reduced and its
     * sparse fp16 results (sized by their bitmaps) fetched from survivors */
    {.name = "kill_aggregator_topk", .member_count = 8, .vector_size = 2000003, .upload_mbit = 4,
     .compression = "topk", .fault = "kill", .victim = 5, .fault_at = 0.4},
    {.name = "eight", .member_count = 8, .vector_size = 1200007},
    {.name = "roles", .member_count = 5, .vector_size = 1000003, .roles = "attcc"},
    {.name = "kill_sender", .member_count = 4, .vector_size = 2000003, .upload_mbit = 40,
     .fault = "kill", .victim = 3, .fault_at = 0.8, .roles = "tttc"},
    {.name = "kill_aggregator", .member_count = 8, .vector_size = 2000003, .upload_mbit = 40,
     .fault = "kill", .victim = 5, .fault_at = 1.0},
    {.name = "stall", .member_count = 4, .vector_size = 2000003, .upload_mbit = 40,
     .fault = "stop", .victim = 2, .fault_at = 0.8},
    /* a client sending malformed or non-finite chunks is dropped */
    {.name = "nan", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "nan", .victim_status = "dropped"},
    {.name = "nan_fp16", .member_count = 4, .vector_size = 1000003, .compression = "fp16", .roles = "tttc",
     .victim = 3, .misbehave = "nan", .victim_status = "dropped"},
    {.name = "wrong_size", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "wrong-size", .victim_status = "dropped"},
    {.name = "wrong_part", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "wrong-part", .victim_status = "dropped"},
    {.name = "garbage_chunk", .member_count = 4, .vector_size = 1000003, .compression = "fp16", .roles = "tttc",
     .victim = 3, .misbehave = "garbage", .victim_status = "dropped"},
    {.name = "garbage_port", .member_count = 4, .vector_size = 2000003, .upload_mbit = 40,
     .fault = "port", .victim = 1, .fault_at = 0.5},
    /* a client that calls the round 8 s late misses the group (the first
     * window is about 5 s) and keeps its vector */
    {.name = "late", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .victim_delay = 8, .victim_status = "no group"},
    /* matchmaking ahead of the vector: each member's chunks carry another
     * weight than its join, and the vectors come 0.3-1.05 s after the round starts */
    {.name = "weights_late", .member_count = 4, .vector_size = 1000003, .hand_over = 0.3, .join_differs = true},
    {.name = "weights_late_clients", .member_count = 5, .vector_size = 1000003, .compression = "fp16",
     .roles = "ttcct", .hand_over = 0.3, .join_differs = true},
    /* a client whose chunk headers carry an impossible weight is left out */
    {.name = "weight_nan", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "weight-nan", .victim_status = "dropped"},
    {.name = "weight_negative", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "weight-negative", .victim_status = "dropped", .hand_over = 0.3, .join_differs = true},
    /* a client whose chunks claim 1e12 samples (a valid weight) counts for
     * 4 times the chunk's median weight, no more */
    {.name = "weight_huge", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "weight-huge", .victim_status = "ok"},
    /* a trainer declaring 1e6 Mbit/s aggregates no more than 2/(A+1) of the vector */
    {.name = "bandwidth_liar", .member_count = 4, .vector_size = 1000003, .victim = 2, .victim_bandwidth = 1e6},
    /* a client sending finite values near FLT_MAX under the plain mean is dropped */
    {.name = "huge_values", .member_count = 4, .vector_size = 1000003, .roles = "tttc",
     .victim = 3, .misbehave = "huge-values", .victim_status = "dropped", .needs_test_hooks = true},
    /* whoever leads the first round takes joins and never answers, in every
     * round it leads: the retry at the same epoch passes it over */
    {.name = "stalling_leader", .member_count = 4, .vector_size = 100003, .misbehave = "stall-leader",
     .everyone_misbehaves = true, .rounds = 2, .deadline = 12, .needs_test_hooks = true},
    /* a peer whose token says monitor runs as a trainer: the leader refuses
     * its join, and the three trainers average without it */
    {.name = "monitor_trainer", .member_count = 4, .vector_size = 100003, .tokens = "ttmt", .victim = 2,
     .victim_status = "no group", .victim_reason = "monitor-role"},
    /* a leader that writes another aggregation rule and stall time into its
     * group record: every member refuses the record */
    {.name = "dictating_leader", .member_count = 4, .vector_size = 100003, .misbehave = "dictate",
     .everyone_misbehaves = true, .refusal = "this run uses", .deadline = 10, .needs_test_hooks = true},
    /* 8 members, 3 attackers (at 0, 3, 6: weights 3 of 15), the same inputs
     * aggregated both ways */
    {.name = "robust_mean", .member_count = 8, .vector_size = 600011, .attacks = "s--n--t-",
     .needs_test_hooks = true},
    {.name = "robust_clip", .member_count = 8, .vector_size = 600011, .aggregation = "centered-clip",
     .attacks = "s--n--t-", .needs_test_hooks = true},
    {.name = "robust_clip_replay", .member_count = 8, .vector_size = 600011, .aggregation = "centered-clip",
     .attacks = "s--r--n-", .needs_test_hooks = true},
    /* tau above the honest spread of a chunk (about 15 here): only the attackers are clipped */
    {.name = "robust_clip_tau", .member_count = 8, .vector_size = 600011, .aggregation = "centered-clip",
     .attacks = "s--n--t-", .tau = 30, .needs_test_hooks = true},
    /* a sign-flipped x1000 vector behind a claimed weight of 1e12: its weight
     * is capped, so the result stays near the honest mean and no honest
     * member is clipped */
    {.name = "robust_clip_weight", .member_count = 8, .vector_size = 600011, .aggregation = "centered-clip",
     .attacks = "s-------", .tau = 30, .attacker_weight = 1e12, .needs_test_hooks = true},
    /* accountable aggregation: an aggregator whose signed results are -1000
     * times the average, a sender whose signed projections are not its
     * signed chunks'; each caught by every other member, nobody else blamed */
    {.name = "audit_result_scale", .member_count = 4, .vector_size = 1000003, .victim = 1,
     .misbehave = "result-scale", .caught = true, .needs_test_hooks = true},
    {.name = "audit_result_scale_clip", .member_count = 5, .vector_size = 1000003, .compression = "fp16",
     .aggregation = "centered-clip", .victim = 3, .misbehave = "result-scale", .caught = true,
     .needs_test_hooks = true},
    {.name = "audit_projection_lie", .member_count = 4, .vector_size = 1000003, .victim = 2,
     .misbehave = "projection-lie", .caught = true, .needs_test_hooks = true},
    {.name = "audit_projection_lie_clip", .member_count = 5, .vector_size = 1000003, .compression = "uint8",
     .aggregation = "centered-clip", .roles = "ttttc", .victim = 4, .misbehave = "projection-lie", .caught = true,
     .needs_test_hooks = true},
    /* the same checks on int8 and on topk's sparse fp16 results */
    {.name = "audit_result_scale_int8", .member_count = 4, .vector_size = 1000003, .compression = "int8",
     .victim = 2, .misbehave = "result-scale", .caught = true, .needs_test_hooks = true},
    {.name = "audit_result_scale_topk", .member_count = 4, .vector_size = 1000003, .compression = "topk",
     .victim = 1, .misbehave = "result-scale", .caught = true, .needs_test_hooks = true},
    /* under centered clip the result is a weighted mean too (clip weights w_j c_j): its norm is held the same
     * way, which int8's coarse rounding needs there as under the mean */
    {.name = "audit_result_scale_clip_int8", .member_count = 5, .vector_size = 1000003, .compression = "int8",
     .aggregation = "centered-clip", .victim = 3, .misbehave = "result-scale", .caught = true,
     .needs_test_hooks = true},
    /* the negated average (its norm kept, so the norm bound cannot see it)
     * on the coarse codecs, one chunk per part: the projection alone let it
     * through about one round in two; the alignment check refuses it */
    {.name = "audit_result_flip_uint8", .member_count = 4, .vector_size = 1000003, .compression = "uint8",
     .sparse = 0.002, .victim = 2, .misbehave = "result-flip", .caught = true, .needs_test_hooks = true},
    {.name = "audit_result_flip_int8_clip", .member_count = 5, .vector_size = 1000003, .compression = "int8",
     .sparse = 0.002, .aggregation = "centered-clip", .victim = 1, .misbehave = "result-flip", .caught = true,
     .needs_test_hooks = true},
    {.name = "audit_projection_lie_topk", .member_count = 4, .vector_size = 1000003, .compression = "topk",
     .victim = 3, .misbehave = "projection-lie", .caught = true, .needs_test_hooks = true},
    /* an aggregator that signs its last result after every other and grinds
     * it against the seed it can foresee (the others' nonces are not in it
     * yet); one that sends signed wrong results to the members of odd index:
     * the rosters bring both of its signed results to every member */
    {.name = "audit_grind", .member_count = 4, .vector_size = 1000003, .victim = 2, .misbehave = "grind",
     .caught = true, .needs_test_hooks = true},
    {.name = "audit_two_faced", .member_count = 5, .vector_size = 1000003, .victim = 2, .misbehave = "two-faced",
     .caught = true, .needs_test_hooks = true},
    /* an aggregator that signs -1000 times the average and claims an L1
     * norm of 1e300 for its own chunk of its part, which would widen the
     * equation's tolerance past the lie: under centered clip it must leave
     * its own chunk out, and the result that counts it convicts it (under
     * the mean its impossible claim does: test_collab_round_memory) */
    {.name = "audit_own_claim_clip", .member_count = 5, .vector_size = 1000003, .compression = "fp16",
     .aggregation = "centered-clip", .victim = 3, .misbehave = "own-claim", .caught = true,
     .needs_test_hooks = true},
    /* an aggregator that signs -1000 times the average and, after the
     * seed, claims possible measures of its own chunk that make every
     * chunk's equation hold: two honest contributors cannot pull the
     * result back against that one claim, so only the rule that a reducer
     * leaves its own chunk out under centered clip catches it */
    {.name = "audit_own_pull_clip", .member_count = 3, .vector_size = 1000003, .compression = "fp16",
     .aggregation = "centered-clip", .victim = 1, .misbehave = "own-pull", .caught = true,
     .needs_test_hooks = true},
    /* an aggregator that signs -1000 times the average, delivers its first
     * result to everyone and goes silent: members count it as failed and
     * re-reduce the rest of its part. Its own chunk is in none of its
     * results (centered clip), so the senders' projections check the one it
     * delivered: it fails, no attestation will come, and each member asks
     * the chunk's contributors for the chunks they signed: against those
     * the result is wrong, so every member bans it and nobody applies the
     * round (before disclosure nobody was banned; before the fast check a
     * failed aggregator's delivered results were applied unchecked) */
    {.name = "audit_silent_liar_clip", .member_count = 4, .vector_size = 2500003, .compression = "fp16",
     .aggregation = "centered-clip", .victim = 1, .misbehave = "scale-then-silent", .caught = true,
     .needs_test_hooks = true},
    /* the same aggregator honest: it delivers its first result and hangs;
     * what it delivered passes the senders' projections (counted among the
     * chunks checked), the rest is re-reduced, and the round is applied */
    {.name = "audit_silent_clip", .member_count = 4, .vector_size = 2500003, .compression = "fp16",
     .aggregation = "centered-clip", .victim = 1, .misbehave = "then-silent", .victim_status = "failed",
     .needs_test_hooks = true},
    /* a colluding pair under centered clip, as separate processes: member
     * 1 signs v / 2 + R (v the average, R orthogonal to it, |R| = |v| / 2:
     * no norm or alignment to give it away) with the clip weights that
     * gives its senders, never accuses and hands nobody its senders' chunks; member
     * 3 waits for the other senders' projections and signs, for each chunk
     * of part 1, the projection that makes the equation hold (a possible
     * claim, at its true distance). The fast check passes; the spot checks
     * drawn for part 1 ask member 3 for the chunk behind its claim, which
     * convicts it, and the chunks then disclosed by every contributor
     * convict member 1 (without spot disclosure every member applied the
     * lie). Gradient-like vectors (sparse 1: every row of a shared vector,
     * a tenth of spread): with independent ones the members' chunks lie
     * far apart compared with their average, a lie no larger than the
     * average (all the alignment check leaves) pulls no harder than an
     * honest claim, and every member applied it in 5 of 12 runs */
    {.name = "audit_colluding_pair_clip", .member_count = 5, .vector_size = 1500003, .compression = "fp16",
     .sparse = 1, .aggregation = "centered-clip", .victim = 1, .misbehave = "collude", .caught = true,
     .accomplice = 3, .accomplice_misbehave = "cover", .needs_test_hooks = true},
    /* a clean centered-clip round passes every check */
    {.name = "audit_clean_clip", .member_count = 5, .vector_size = 1000003, .compression = "fp16",
     .aggregation = "centered-clip", .roles = "ttatc"},
};

#endif
