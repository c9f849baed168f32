/* Chunks held during matchmaking (dl_round_hold_early, src/collab/round.c):
 * only chunk requests, at most a sender's window from each peer and
 * DL_AVG_EARLY_MAX (or _BYTES) in all, each refused "unknown round" when
 * dropped, none lost and none answered twice. The multi-process side (a
 * member that takes its record late sends nothing twice) is the scenario
 * collab/round_late_record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collab/bans.h"
#include "collab/inbox.h"
#include "collab/round.h"
#include "dedloc/util.h"
#include "dl_test.h"

/* A transport that only records the answers. */
enum { MAX_ANSWERS = 4096 };
static uint64_t answered[MAX_ANSWERS];
static int num_answered, refused_unknown;

static int t_request(void *ctx, uint64_t serial, const char *peer_id, const char *method, const void *payload,
                     size_t size, double timeout_s, int kind, uint32_t part, uint32_t chunk, uint32_t member) {
    return 0;
}
static int t_respond(void *ctx, uint64_t token, int status, const void *payload, size_t size) {
    if (num_answered < MAX_ANSWERS) answered[num_answered++] = token;
    return 0;
}
static void t_respond_text(void *ctx, uint64_t token, const char *text) {
    if (num_answered < MAX_ANSWERS) answered[num_answered++] = token;
    refused_unknown += !strcmp(text, "unknown round");
}
static struct dl_avg_event *t_wait(void *ctx, double until) { return NULL; }
static void t_sign(void *ctx, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]) {
    memset(sig, 0, DL_NET_SIGNATURE);
}
static double t_now(void *ctx) { return 0; }
static const struct dl_round_transport_ops ops = {t_request, t_respond, t_respond_text, t_wait, t_sign, t_now};

static uint64_t next_token = 1;

static struct dl_avg_event *chunk_from(int peer, size_t size) {
    char id[DL_PEER_ID_HEX];
    snprintf(id, sizeof id, "%032x", peer);
    uint8_t *data = calloc(1, size ? size : 1);
    struct dl_avg_event *ev = dl_avg_event_new(EV_CHUNK, id, data, size);
    free(data);
    if (ev) ev->token = next_token++;
    return ev;
}

/* Offers ev; frees it (answered, as matchmaking does) when not held. */
static bool offer(struct dl_round *r, struct dl_avg_event *ev) {
    if (!ev) return false;
    if (dl_round_hold_early(r, ev)) return true;
    dl_avg_event_free(ev);
    return false;
}

int main(void) {
    struct dl_bans bans;
    dl_bans_init(&bans, 60, 0, 0);
    const struct dl_round_transport tp = {&ops, NULL};
    struct dl_round *r = dl_round_new(&tp, &bans);
    CHECK(r != NULL);
    if (!r) return dl_test_finish("test_collab_early");

    /* One sender: its window of DL_AVG_SEND_WINDOW chunks, no more. */
    int held = 0;
    for (int i = 0; i < DL_AVG_SEND_WINDOW + 3; i++) held += offer(r, chunk_from(1, 1000));
    CHECK_MSG(held == DL_AVG_SEND_WINDOW, "one sender got %d chunks held (window %d)", held, DL_AVG_SEND_WINDOW);
    /* Not a chunk, or no request to answer: not held. */
    struct dl_avg_event *join = dl_avg_event_new(EV_JOIN, "00000000000000000000000000000002", (const uint8_t *)"j", 1);
    if (join) join->token = next_token++;
    CHECK(join && !offer(r, join));
    struct dl_avg_event *answer = chunk_from(3, 10);
    if (answer) answer->token = 0;
    CHECK(answer && !offer(r, answer));

    /* Many senders: DL_AVG_EARLY_MAX in all. */
    for (int p = 10; p < 10 + 2 * DL_AVG_EARLY_MAX; p++) held += offer(r, chunk_from(p, 64));
    CHECK_MSG(held == DL_AVG_EARLY_MAX && r->early_count == DL_AVG_EARLY_MAX, "%d held in all (at most %d)", held,
              DL_AVG_EARLY_MAX);
    CHECK(r->early_bytes == DL_AVG_SEND_WINDOW * 1000 + (size_t)(DL_AVG_EARLY_MAX - DL_AVG_SEND_WINDOW) * 64);

    /* Dropping answers each held chunk once, "unknown round", and frees it. */
    num_answered = refused_unknown = 0;
    dl_round_drop_early(r);
    CHECK(num_answered == DL_AVG_EARLY_MAX && refused_unknown == DL_AVG_EARLY_MAX);
    CHECK(r->early == NULL && r->early_count == 0 && r->early_bytes == 0);
    bool twice = false;
    for (int i = 0; i < num_answered; i++)
        for (int j = 0; j < i; j++) twice |= answered[i] == answered[j];
    CHECK_MSG(!twice, "a held chunk was answered twice");

    /* Bytes: a few large chunks from different senders fill the byte bound first. */
    size_t big = DL_AVG_EARLY_MAX_BYTES / 3 + 1;
    held = 0;
    for (int p = 0; p < 5; p++) held += offer(r, chunk_from(1000 + p, big));
    CHECK_MSG(held == 2 && r->early_bytes <= DL_AVG_EARLY_MAX_BYTES, "%d chunks of %zu bytes held", held, big);

    /* Whatever is still held when the round is freed is answered too. */
    num_answered = refused_unknown = 0;
    dl_round_free(r);
    CHECK(num_answered == 2 && refused_unknown == 2);
    dl_bans_destroy(&bans);
    return dl_test_finish("test_collab_early");
}
