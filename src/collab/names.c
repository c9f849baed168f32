/* Names of collab's closed sets of protocol values (include/dedloc/collab.h).
 *
 * One table per enum, indexed by its values, each checked against the
 * enum's _COUNT sentinel: a value added without its name fails the build.
 * The strings are part of the interface (command-line values, manifest
 * fields, JSON lines that scripts and tests read), so they never change. */
#include <stddef.h>
#include <string.h>

#include "collab/round.h"
#include "dedloc/collab.h"
#include "dedloc/util.h"

#define COUNT_OF(table) (sizeof(table) / sizeof((table)[0]))

static const char *const member_role_names[] = {
    [DL_MEMBER_TRAINER] = "trainer",
    [DL_MEMBER_CLIENT] = "client",
    [DL_MEMBER_AUX] = "aux",
};
_Static_assert(COUNT_OF(member_role_names) == DL_MEMBER_ROLE_COUNT, "a member role without its name");

static const char *const codec_names[] = {
    [DL_CODEC_NONE] = "none",
    [DL_CODEC_FP16] = "fp16",
    [DL_CODEC_UINT8] = "uint8",
    [DL_CODEC_INT8] = "int8",
    [DL_CODEC_TOPK] = "topk",
};
_Static_assert(COUNT_OF(codec_names) == DL_CODEC_COUNT, "a wire codec without its name");

static const char *const aggregation_names[] = {
    [DL_AGG_MEAN] = "mean",
    [DL_AGG_CENTERED_CLIP] = "centered-clip",
};
_Static_assert(COUNT_OF(aggregation_names) == DL_AGG_COUNT, "an aggregation rule without its name");

static const char *const avg_status_names[] = {
    [DL_AVG_OK] = "ok",
    [DL_AVG_NO_GROUP] = "no group",
    [DL_AVG_DEADLINE] = "deadline",
    [DL_AVG_DROPPED] = "dropped",
    [DL_AVG_UNSURE] = "unsure",
    [DL_AVG_FAILED] = "failed",
};
_Static_assert(COUNT_OF(avg_status_names) == DL_AVG_STATUS_COUNT, "a round status without its name");

static const char *const test_attack_names[] = {
    [DL_TEST_ATTACK_NONE] = "none",
    [DL_TEST_ATTACK_SIGN_FLIP] = "sign-flip",
    [DL_TEST_ATTACK_NOISE] = "noise",
    [DL_TEST_ATTACK_EPOCH_SYBIL] = "epoch-sybil",
};
_Static_assert(COUNT_OF(test_attack_names) == DL_TEST_ATTACK_COUNT, "a test attack without its name");

static const char *const train_event_names[] = {
    [DL_TRAIN_EVENT_START] = "start",
    [DL_TRAIN_EVENT_BATCH] = "batch",
    [DL_TRAIN_EVENT_DOWNLOAD] = "download",
    [DL_TRAIN_EVENT_DOWNLOAD_FAILED] = "download_failed",
    [DL_TRAIN_EVENT_ROUND_FAILED] = "round_failed",
    [DL_TRAIN_EVENT_PEERS_GONE] = "peers_gone",
    [DL_TRAIN_EVENT_EARLY_ROUND_FAILED] = "early_round_failed",
    [DL_TRAIN_EVENT_DISAGREE] = "disagree",
};
_Static_assert(COUNT_OF(train_event_names) == DL_TRAIN_EVENT_COUNT, "a training-log event without its name");

/* value is taken as unsigned so that a negative one, cast in from an int
 * read elsewhere, falls outside the table too. */
static const char *name_of(const char *const *names, size_t count, unsigned value) {
    return value < count ? names[value] : "unknown";
}

/* Index of name in the table, or -1 (no error recorded: callers say what
 * they looked for). */
static int index_of(const char *const *names, size_t count, const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < count; i++)
        if (!strcmp(name, names[i])) return (int)i;
    return -1;
}

const char *dl_member_role_name(enum dl_member_role role) {
    return name_of(member_role_names, COUNT_OF(member_role_names), (unsigned)role);
}

int dl_member_role_from_name(const char *name, enum dl_member_role *role) {
    int i = index_of(member_role_names, COUNT_OF(member_role_names), name);
    if (i < 0) return dl_fail("unknown member role '%s' (trainer, client or aux)", name ? name : "(null)");
    *role = (enum dl_member_role)i;
    return 0;
}

const char *dl_codec_name(enum dl_codec codec) {
    return name_of(codec_names, COUNT_OF(codec_names), (unsigned)codec);
}

int dl_codec_from_name(const char *name, enum dl_codec *codec) {
    int i = index_of(codec_names, COUNT_OF(codec_names), name);
    if (i < 0) return dl_fail("unknown compression '%s' (use none, fp16 or uint8)", name ? name : "(null)");
    *codec = (enum dl_codec)i;
    return 0;
}

const char *dl_aggregation_name(enum dl_aggregation aggregation) {
    return name_of(aggregation_names, COUNT_OF(aggregation_names), (unsigned)aggregation);
}

int dl_aggregation_from_name(const char *name, enum dl_aggregation *aggregation) {
    int i = index_of(aggregation_names, COUNT_OF(aggregation_names), name);
    if (i < 0) return dl_fail("unknown aggregation '%s' (mean or centered-clip)", name ? name : "(null)");
    *aggregation = (enum dl_aggregation)i;
    return 0;
}

const char *dl_avg_status_name(enum dl_avg_status status) {
    return name_of(avg_status_names, COUNT_OF(avg_status_names), (unsigned)status);
}

int dl_avg_status_from_name(const char *name, enum dl_avg_status *status) {
    int i = index_of(avg_status_names, COUNT_OF(avg_status_names), name);
    if (i < 0)
        return dl_fail("unknown round status '%s' (ok, no group, deadline, dropped, unsure or failed)",
                       name ? name : "(null)");
    *status = (enum dl_avg_status)i;
    return 0;
}

const char *dl_test_attack_name(enum dl_test_attack attack) {
    return name_of(test_attack_names, COUNT_OF(test_attack_names), (unsigned)attack);
}

int dl_test_attack_from_name(const char *name, enum dl_test_attack *attack) {
    int i = index_of(test_attack_names, COUNT_OF(test_attack_names), name);
    if (i < 0)
        return dl_fail("unknown test attack '%s' (none, sign-flip, noise or epoch-sybil)", name ? name : "(null)");
    *attack = (enum dl_test_attack)i;
    return 0;
}

const char *dl_train_event_name(enum dl_train_event event) {
    return name_of(train_event_names, COUNT_OF(train_event_names), (unsigned)event);
}

int dl_train_event_from_name(const char *name, enum dl_train_event *event) {
    int i = index_of(train_event_names, COUNT_OF(train_event_names), name);
    if (i < 0)
        return dl_fail("unknown training-log event '%s' (start, batch, download, download_failed, round_failed, "
                       "peers_gone, early_round_failed or disagree)",
                       name ? name : "(null)");
    *event = (enum dl_train_event)i;
    return 0;
}

int dl_test_misbehaviour_from_name(const char *name, int *mode) {
    static const struct {
        const char *name;
        int mode;
    } modes[] = {{"result-scale", DL_MISBEHAVE_RESULT_SCALE}, {"projection-lie", DL_MISBEHAVE_PROJECTION_LIE},
                 {"huge-values", DL_MISBEHAVE_HUGE_VALUES},   {"dictate", DL_MISBEHAVE_DICTATE},
                 {"stall-leader", DL_MISBEHAVE_STALL_LEADER}, {"skip-audit", DL_MISBEHAVE_SKIP_AUDIT},
                 {"attest-only", DL_MISBEHAVE_ATTEST_ONLY},   {"own-claim", DL_MISBEHAVE_OWN_CLAIM},
                 {"own-pull", DL_MISBEHAVE_OWN_PULL},         {"scale-then-silent", DL_MISBEHAVE_SCALE_THEN_SILENT},
                 {"then-silent", DL_MISBEHAVE_THEN_SILENT},   {"collude", DL_MISBEHAVE_COLLUDE},
                 {"cover", DL_MISBEHAVE_COVER},               {"skip-spot", DL_MISBEHAVE_SKIP_SPOT},
                 {"result-flip", DL_MISBEHAVE_RESULT_FLIP}};
    for (size_t i = 0; name && i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(name, modes[i].name)) {
            *mode = modes[i].mode;
            return 0;
        }
    return dl_fail("unknown test misbehaviour '%s' (result-scale, projection-lie, huge-values, dictate, "
                   "stall-leader, skip-audit, attest-only, own-claim, own-pull, scale-then-silent, then-silent, "
                   "collude, cover, skip-spot or result-flip)",
                   name ? name : "(null)");
}

