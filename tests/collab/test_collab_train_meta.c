/* The training state's metadata (epoch, samples, loss scale) as a donor
 * serves it: its bytes against a layout written out by hand, refusals of
 * malformed metadata, and which peers adopt the donor's loss scale. */
#include <math.h>
#include <string.h>

#include "collab/train_sync.h"
#include "dedloc/train.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* Little-endian bytes of v at p (the wire's byte order, spelled out here). */
static void le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_layout(void) {
    struct dl_train_state_meta m = {.epoch = 0x0102030405060708ull, .samples = 4096, .loss_scaling = true,
                                    .loss_scale = 1024.0f, .clean_micro_batches = 17};
    uint8_t got[DL_TRAIN_STATE_META_SIZE];
    dl_train_state_meta_encode(&m, got);
    uint8_t want[48] = {'D', 'L', 'T', 'R', 'A', 'I', 'N', '2'};
    le64(want + 8, 0x0102030405060708ull);
    le64(want + 16, 4096);
    want[24] = 1;
    le64(want + 32, 0x4090000000000000ull); /* 1024.0 as an IEEE-754 double: exponent 1023 + 10 */
    le64(want + 40, 17);
    CHECK(DL_TRAIN_STATE_META_SIZE == 48);
    CHECK_MSG(!memcmp(got, want, sizeof want), "the metadata's bytes differ from the documented layout");

    struct dl_train_state_meta back;
    CHECK_OK(dl_train_state_meta_decode(want, sizeof want, &back));
    CHECK(back.epoch == 0x0102030405060708ull && back.samples == 4096 && back.loss_scaling);
    CHECK(back.loss_scale == 1024.0f && back.clean_micro_batches == 17);

    /* Without loss scaling: flag clear, scale 1. */
    uint8_t plain[48] = {'D', 'L', 'T', 'R', 'A', 'I', 'N', '2'};
    le64(plain + 8, 3);
    le64(plain + 32, 0x3ff0000000000000ull); /* 1.0 */
    CHECK_OK(dl_train_state_meta_decode(plain, sizeof plain, &back));
    CHECK(back.epoch == 3 && !back.loss_scaling && back.loss_scale == 1.0f);
}

/* Each malformed variant of a good metadata block is refused with an error. */
static void test_refusals(void) {
    uint8_t good[48] = {'D', 'L', 'T', 'R', 'A', 'I', 'N', '2'};
    le64(good + 8, 5);
    le64(good + 16, 100);
    good[24] = 1;
    le64(good + 32, 0x40f0000000000000ull); /* 65536.0 */
    struct dl_train_state_meta m;
    CHECK_OK(dl_train_state_meta_decode(good, sizeof good, &m));
    CHECK(dl_train_state_meta_decode(good, 24, &m) != 0);      /* the previous version's size */
    CHECK(dl_train_state_meta_decode(good, 47, &m) != 0);
    uint8_t bad[48];
    struct { size_t at; uint64_t value; const char *what; } cases[] = {
        {0, 0x314E494152544C44ull, "magic DLTRAIN1"},
        {16, ((uint64_t)1 << 62) + 1, "samples beyond 2^62"},
        {32, 0x4008000000000000ull, "scale 3 (not a power of two)"},
        {32, 0x7ff8000000000000ull, "scale NaN"},
        {32, 0x7ff0000000000000ull, "scale Inf"},
        {32, 0, "scale 0"},
        {32, 0xbff0000000000000ull, "scale -1"},
        {32, 0x3690000000000000ull, "scale 2^-150 (below the normal floats)"},
        {32, 0x4800000000000000ull, "scale 2^129 (beyond float)"},
        {40, ((uint64_t)1 << 63), "counter beyond 2^62"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(bad, good, sizeof bad);
        le64(bad + cases[i].at, cases[i].value);
        CHECK_MSG(dl_train_state_meta_decode(bad, sizeof bad, &m) != 0, "accepted %s", cases[i].what);
    }
    memcpy(bad, good, sizeof bad);
    bad[24] = 3;
    CHECK_MSG(dl_train_state_meta_decode(bad, sizeof bad, &m) != 0, "accepted unknown flags");
}

static void test_adoption(void) {
    struct dl_train_state_meta fp16_donor = {.epoch = 9, .loss_scaling = true, .loss_scale = 512.0f,
                                             .clean_micro_batches = 40};
    struct dl_train_state_meta fp32_donor = {.epoch = 9, .loss_scaling = false, .loss_scale = 1.0f};
    dl_loss_scale ls;
    /* An fp16 newcomer (fresh scale 65536) takes an fp16 donor's scale and counter. */
    dl_loss_scale_init(&ls, true);
    dl_train_state_meta_adopt_scale(&fp16_donor, &ls);
    CHECK(ls.scale == 512.0f && ls.clean_steps == 40 && ls.enabled);
    /* ...and keeps its own facing a donor that does not scale. */
    dl_loss_scale_init(&ls, true);
    dl_train_state_meta_adopt_scale(&fp32_donor, &ls);
    CHECK(ls.scale == 65536.0f && ls.clean_steps == 0);
    /* A peer without scaling stays at 1 whatever the donor. */
    dl_loss_scale_init(&ls, false);
    dl_train_state_meta_adopt_scale(&fp16_donor, &ls);
    CHECK(ls.scale == 1.0f && !ls.enabled);
    /* The adopted scale keeps its rule: the next overflow halves it. */
    dl_loss_scale_init(&ls, true);
    dl_train_state_meta_adopt_scale(&fp16_donor, &ls);
    CHECK(!dl_loss_scale_update(&ls, false) && ls.scale == 256.0f);
}

int main(void) {
    test_layout();
    test_refusals();
    test_adoption();
    printf("%d passed, %d failed\n", dl_test_passed, dl_test_failed);
    return dl_test_failed ? 1 : 0;
}
