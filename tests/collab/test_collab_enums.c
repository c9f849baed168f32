/* The closed sets of protocol values and their names: every value has a
 * distinct name that parses back to it; the names are the strings the
 * command line, the manifest, the JSON lines and the logs have always used,
 * and the numbers are the ones on the wire; anything outside a set is
 * "unknown" and refused by the parser with a message naming the choices. */
#include <stdint.h>

#include "dedloc/collab.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* Checks names[i] == dl_X_name(i) for every value, that the names are
 * distinct, and that "unknown" comes back outside the set (just past its
 * end, far past it, and for a negative int cast in). */
#define CHECK_NAMES(what, name_fn, type, count, expected)                                                \
    do {                                                                                                 \
        CHECK_MSG((size_t)(count) == sizeof(expected) / sizeof((expected)[0]),                          \
                  "%s: %d values, %zu expected names", what, (int)(count),                               \
                  sizeof(expected) / sizeof((expected)[0]));                                             \
        for (int i_ = 0; i_ < (int)(count); i_++) {                                                      \
            const char *got_ = name_fn((type)i_);                                                        \
            CHECK_MSG(got_ && !strcmp(got_, (expected)[i_]), "%s %d: name '%s', want '%s'", what, i_,    \
                      got_ ? got_ : "(null)", (expected)[i_]);                                           \
            for (int j_ = 0; j_ < i_; j_++)                                                              \
                CHECK_MSG(strcmp(got_, name_fn((type)j_)), "%s %d and %d share the name '%s'", what, i_, \
                          j_, got_);                                                                     \
        }                                                                                                \
        CHECK(!strcmp(name_fn((type)(count)), "unknown"));                                              \
        CHECK(!strcmp(name_fn((type)1000), "unknown"));                                                 \
        CHECK(!strcmp(name_fn((type)-1), "unknown"));                                                   \
    } while (0)

/* Every value's name parses back to it; near misses are refused with an
 * error that names the accepted values (first_choice is one of them). */
#define CHECK_PARSE(what, name_fn, from_fn, type, first, count, first_choice)                              \
    do {                                                                                                   \
        for (int i_ = (int)(first); i_ < (int)(count); i_++) {                                             \
            type out_ = (type)(count);                                                                     \
            CHECK_MSG(from_fn(name_fn((type)i_), &out_) == 0 && (int)out_ == i_,                           \
                      "%s '%s' does not parse back to %d", what, name_fn((type)i_), i_);                   \
        }                                                                                                  \
        const char *bad_[] = {"unknown", "", "Mean", "FP16", "trainer ", " aux", "no_group", "centered_clip"}; \
        for (size_t k_ = 0; k_ < sizeof bad_ / sizeof bad_[0]; k_++) {                                     \
            type out_ = (type)(count);                                                                     \
            dl_clear_error();                                                                              \
            CHECK_MSG(from_fn(bad_[k_], &out_) == -1 && (int)out_ == (int)(count), "%s: '%s' accepted", what, \
                      bad_[k_]);                                                                           \
            CHECK_MSG(strstr(dl_error(), first_choice) != NULL, "%s: the refusal of '%s' says '%s'", what,  \
                      bad_[k_], dl_error());                                                               \
        }                                                                                                  \
        type out_ = (type)(count);                                                                         \
        CHECK(from_fn(NULL, &out_) == -1 && (int)out_ == (int)(count));                                    \
    } while (0)

/* Member roles: one byte in joins and group records; names in the "members"
 * list of the training log's step lines. */
static void test_member_roles(void) {
    CHECK(DL_MEMBER_TRAINER == 0 && DL_MEMBER_CLIENT == 1 && DL_MEMBER_AUX == 2);
    static const char *const names[] = {"trainer", "client", "aux"};
    CHECK_NAMES("member role", dl_member_role_name, enum dl_member_role, DL_MEMBER_ROLE_COUNT, names);
    CHECK_PARSE("member role", dl_member_role_name, dl_member_role_from_name, enum dl_member_role, 0,
                DL_MEMBER_ROLE_COUNT, "client");
}

/* Token roles: one byte in admission tokens; names on `authority issue
 * --role` and `--admit-roles`. "none" is no token's role: it has a name
 * (logs of open runs) but is not accepted where a role is asked for. */
static void test_token_roles(void) {
    CHECK(DL_ROLE_NONE == 0 && DL_ROLE_TRAINER == 1 && DL_ROLE_AUX == 2 && DL_ROLE_MONITOR == 3);
    static const char *const names[] = {"none", "trainer", "aux", "monitor"};
    CHECK_NAMES("token role", dl_role_name, enum dl_role, DL_ROLE_COUNT, names);
    CHECK_PARSE("token role", dl_role_name, dl_role_from_name, enum dl_role, DL_ROLE_TRAINER, DL_ROLE_COUNT,
                "monitor");
    enum dl_role role = DL_ROLE_MONITOR;
    CHECK(dl_role_from_name("none", &role) == -1 && role == DL_ROLE_MONITOR);
}

/* Wire codecs: one byte in joins and group records; names on --compression
 * and in the manifest's "compression". */
static void test_codecs(void) {
    CHECK(DL_CODEC_NONE == 0 && DL_CODEC_FP16 == 1 && DL_CODEC_UINT8 == 2 && DL_CODEC_INT8 == 3 &&
          DL_CODEC_TOPK == 4);
    static const char *const names[] = {"none", "fp16", "uint8", "int8", "topk"};
    CHECK_NAMES("codec", dl_codec_name, enum dl_codec, DL_CODEC_COUNT, names);
    CHECK_PARSE("codec", dl_codec_name, dl_codec_from_name, enum dl_codec, 0, DL_CODEC_COUNT, "uint8");
}

/* Aggregation rules: one byte in the group record's tail; names on
 * --aggregation, in the manifest's aggregation "rule" and the step lines. */
static void test_aggregations(void) {
    CHECK(DL_AGG_MEAN == 0 && DL_AGG_CENTERED_CLIP == 1);
    static const char *const names[] = {"mean", "centered-clip"};
    CHECK_NAMES("aggregation", dl_aggregation_name, enum dl_aggregation, DL_AGG_COUNT, names);
    CHECK_PARSE("aggregation", dl_aggregation_name, dl_aggregation_from_name, enum dl_aggregation, 0, DL_AGG_COUNT,
                "centered-clip");
}

/* Round outcomes: the "status" of `dedloc allreduce` lines (which the round
 * tests and `bench allreduce` read) and the reason of round_failed events. */
static void test_round_statuses(void) {
    CHECK(DL_AVG_OK == 0 && DL_AVG_NO_GROUP == 1 && DL_AVG_DEADLINE == 2 && DL_AVG_DROPPED == 3 &&
          DL_AVG_UNSURE == 4 && DL_AVG_FAILED == 5);
    static const char *const names[] = {"ok", "no group", "deadline", "dropped", "unsure", "failed"};
    CHECK_NAMES("round status", dl_avg_status_name, enum dl_avg_status, DL_AVG_STATUS_COUNT, names);
    CHECK_PARSE("round status", dl_avg_status_name, dl_avg_status_from_name, enum dl_avg_status, 0,
                DL_AVG_STATUS_COUNT, "no group");
}

/* The events of the training log, which scripts and tests read (a failed
 * round is a round_failed line). */
static void test_train_events(void) {
    static const char *const names[] = {"start",        "batch",      "download",           "download_failed",
                                        "round_failed", "peers_gone", "early_round_failed", "disagree"};
    CHECK_NAMES("training-log event", dl_train_event_name, enum dl_train_event, DL_TRAIN_EVENT_COUNT, names);
    CHECK_PARSE("training-log event", dl_train_event_name, dl_train_event_from_name, enum dl_train_event, 0,
                DL_TRAIN_EVENT_COUNT, "round_failed");
}

/* Attacks of test-hook builds: names on --test-attack. */
static void test_test_attacks(void) {
    static const char *const names[] = {"none", "sign-flip", "noise", "epoch-sybil"};
    CHECK_NAMES("test attack", dl_test_attack_name, enum dl_test_attack, DL_TEST_ATTACK_COUNT, names);
    CHECK_PARSE("test attack", dl_test_attack_name, dl_test_attack_from_name, enum dl_test_attack, 0,
                DL_TEST_ATTACK_COUNT, "sign-flip");
}

/* Request outcomes: numbers inside the process only, names in messages. */
static void test_request_statuses(void) {
    CHECK(DL_NET_OK == 0 && DL_NET_NO_HANDLER == 5);
    static const char *const names[] = {"ok", "remote error", "timeout", "cancelled", "disconnected", "no handler"};
    CHECK_NAMES("request status", dl_net_status_name, enum dl_net_status, DL_NET_STATUS_COUNT, names);
}

int main(void) {
    test_member_roles();
    test_token_roles();
    test_codecs();
    test_aggregations();
    test_round_statuses();
    test_train_events();
    test_test_attacks();
    test_request_statuses();
    return dl_test_finish("test_collab_enums");
}
