/* A closed run, as an organiser and volunteers meet it with real processes
 * on loopback: run init says what comes next; one string per identity (the
 * authority's key as `authority init` prints it, a peer's id as `authority
 * issue --peer` takes it) in every message and log; a trainer without a
 * token refuses to start and prints the command that gets it one; a join
 * without a token stops at once with the volunteer's peer id; an invite
 * code admits exactly as many peers as it says, also after the inviting
 * peer restarts, and an expired, used-up or unknown code is refused with
 * its reason. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli_sh.h"
#include "dedloc/net.h"
#include "dedloc/util.h"
#include "dl_test.h"

#define B DEDLOC_BINARY
#define TOK DEDLOC_SOURCE_DIR "/assets/tokenizer_bn_demo.json"
#define CORPUS DEDLOC_SOURCE_DIR "/tests/fixtures/text/corpus_bn_sample.txt"

static char authority[DL_AUTHORITY_PK_HEX]; /* as `authority init` printed it */
static pid_t org_pid = -1;
static char org_addr[64];

/* The first line of cli_dir/name, without its newline, into out. */
static void first_line(const char *name, char *out, size_t cap) {
    char *text = read_text(name);
    out[0] = 0;
    if (text) snprintf(out, cap, "%.*s", (int)strcspn(text, "\n"), text);
    free(text);
}

/* The peer id of an identity file in cli_dir, as the peer derives it. */
static void peer_id_of(const char *name, char out[DL_PEER_ID_HEX]) {
    char path[512];
    uint8_t pk[DL_NET_PUBLIC_KEY], sk[64];
    snprintf(path, sizeof path, "%s/%s", cli_dir, name);
    out[0] = 0;
    if (dl_net_identity_keys(path, pk, sk) == 0) dl_net_peer_id_from_key(pk, out);
}

static void org_stop(void) {
    if (org_pid <= 0) return;
    kill(org_pid, SIGKILL);
    waitpid(org_pid, NULL, 0);
    org_pid = -1;
}

/* The organiser's peer (no device: --synthetic-compute), serving invite
 * (NULL: none); waits (bounded) until it listens and keeps its address. */
static int org_start(const char *invite) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec %s train --manifest run.json --identity peer.id --token peer.token %s%s "
             "--listen 127.0.0.1:0 --no-dht --synthetic-compute 0.2 --batch 4 --quiet --expiry 6 >org.out 2>org.err",
             B, invite ? "--invite-file " : "", invite ? invite : "");
    char log[512];
    snprintf(log, sizeof log, "%s/org.err", cli_dir);
    unlink(log); /* the address poll below must not read a previous peer's */
    org_pid = fork();
    if (org_pid == 0) {
        if (chdir(cli_dir) != 0) _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    org_addr[0] = 0;
    for (int i = 0; i < 1200 && !org_addr[0]; i++) {
        char *text = read_text("org.err");
        const char *p = text ? strstr(text, "listening on 127.0.0.1:") : NULL;
        if (p) sscanf(p + strlen("listening on "), "%63[0-9.:]", org_addr);
        free(text);
        if (!org_addr[0]) usleep(50000);
        if (waitpid(org_pid, NULL, WNOHANG) == org_pid) {
            org_pid = -1;
            break;
        }
    }
    CHECK_MSG(org_addr[0], "the organiser's peer did not start");
    return org_addr[0] ? 0 : -1;
}

/* authority init, run init: the authority is written one way everywhere. */
static void organiser_starts(void) {
    CHECK(sh("%s authority init --run-id closed-test --out run.key", B) == 0);
    first_line("out.txt", authority, sizeof authority);
    CHECK_MSG(strlen(authority) == 64, "authority init printed '%s'", authority);
    CHECK(sh("%s run init --model tiny --tokenizer %s --data %s --seq 32 --batch 4 --target-batch 16 "
             "--max-steps 100000 --lr 0.01 --warmup-steps 1 --shuffle-buffer 100 --data-shared --key run.key --out run.json",
             B, TOK, CORPUS) == 0);
    char want[128];
    snprintf(want, sizeof want, "signed by the run authority %s\n", authority);
    CHECK_MSG(file_has("out.txt", want), "run init does not name the authority as authority init printed it");
    /* what comes next: an invite, the first peer's token, the volunteer's command */
    CHECK(file_has("out.txt", "dedloc authority invite --key run.key"));
    CHECK(file_has("out.txt", "dedloc authority issue --key run.key --identity peer.id > peer.token"));
    CHECK(file_has("out.txt", "--invite-file invite.key"));
    CHECK(file_has("out.txt", "dedloc join YOUR.PUBLIC.IP:7000 --invite CODE"));
    CHECK(sh("%s run show run.json", B) == 0);
    snprintf(want, sizeof want, "signed by      the run authority %s\n", authority);
    CHECK(file_has("out.txt", want));
}

/* Without a token the trainer of a closed run refuses to start, naming its
 * peer id and the command that gets it a token; that command, run as
 * printed, makes a token the trainer then starts with. */
static void trainer_needs_token(void) {
    /* (bounded: a trainer that does start would train for ever) */
    CHECK(sh("timeout 60 %s train --manifest run.json --quiet", B) == 2);
    CHECK(file_has("err.txt", "is closed") && file_has("err.txt", "--identity FILE"));
    CHECK(sh("timeout 60 %s train --manifest run.json --identity peer.id --quiet", B) == 2);
    char id[DL_PEER_ID_HEX], want[256];
    peer_id_of("peer.id", id);
    CHECK(strlen(id) == 32);
    snprintf(want, sizeof want, "This peer's id is %s", id);
    CHECK_MSG(file_has("err.txt", want), "the refusal does not give the peer id");
    snprintf(want, sizeof want, "run authority %s,", authority);
    CHECK(file_has("err.txt", want));
    snprintf(want, sizeof want, "    dedloc authority issue --key run.key --peer %s > peer.token\n", id);
    CHECK_MSG(file_has("err.txt", want), "the refusal does not give the issue command");
    /* the line as printed, with this build's binary for "dedloc" */
    char *err = read_text("err.txt");
    const char *line = err ? strstr(err, "    dedloc authority issue ") : NULL;
    char script[512] = "false\n";
    if (line) {
        line += strlen("    dedloc");
        snprintf(script, sizeof script, "%s%.*s\n", B, (int)strcspn(line, "\n"), line);
    }
    free(err);
    write_bytes("issue.sh", script, strlen(script));
    CHECK(sh("sh issue.sh") == 0);
    /* a token for another identity is refused before anything starts */
    CHECK(sh("{ %s authority issue --key run.key --identity other.id > other.token; }", B) == 0);
    CHECK(sh("timeout 60 %s train --manifest run.json --identity peer.id --token other.token --quiet", B) == 2);
    CHECK(file_has("err.txt", "token for another peer id"));
}

/* A join without token or invite stops at once (no retries, no training
 * alone) with the volunteer's peer id and what to send. */
static void join_without_token(void) {
    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol0 --quiet", B, org_addr) == 1);
    char id[DL_PEER_ID_HEX], want[256];
    peer_id_of("vol0/identity", id);
    snprintf(want, sizeof want, "Your peer id is %s.", id);
    CHECK_MSG(file_has("err.txt", want), "join does not give the volunteer's peer id");
    snprintf(want, sizeof want, "    dedloc authority issue --key run.key --peer %s > peer.token\n", id);
    CHECK(file_has("err.txt", want));
    snprintf(want, sizeof want, "    dedloc join %s --invite CODE\n", org_addr);
    CHECK(file_has("err.txt", want));
    CHECK(!file_has("err.txt", "collab: peer")); /* it never started training */
    CHECK(!exists("vol0/token"));
}

/* An invite of one use: the first volunteer joins and trains with it; a
 * second is refused, also after the organiser's restart; the first may
 * redeem it again without taking another place; unknown codes are refused. */
static void invite_uses(void) {
    CHECK(sh("%s authority invite --key run.key --uses 1 --expires 7d --out invite.key", B) == 0);
    char code[64];
    first_line("out.txt", code, sizeof code);
    CHECK(!strncmp(code, "dli1.", 5));
    CHECK(file_has("err.txt", "dedloc join HOST:PORT --invite dli1."));
    if (org_start("invite.key")) return;
    char org_id[DL_PEER_ID_HEX], vol_id[DL_PEER_ID_HEX], want[256];
    peer_id_of("peer.id", org_id);
    snprintf(want, sizeof want, "signed by the run authority %s\n", authority);
    CHECK_MSG(file_has("org.err", want), "the peer's log writes the authority otherwise than authority init");

    CHECK(sh("timeout 120 %s join %s --data " CORPUS " --dir vol1 --invite %s --quiet --max-minutes 0.02", B, org_addr, code) == 0);
    peer_id_of("vol1/identity", vol_id);
    CHECK(file_has("err.txt", "got a token through the invite") && exists("vol1/token"));
    snprintf(want, sizeof want, "authenticated peer %s", org_id);
    CHECK_MSG(file_has("err.txt", want), "the volunteer was not admitted by the organiser's peer");
    snprintf(want, sizeof want, "token for peer %s (trainer), a new peer; 1 of 1", vol_id);
    CHECK(file_has("org.err", want));

    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol2 --invite %s --quiet", B, org_addr, code) == 1);
    CHECK(file_has("err.txt", "refused the invite: invite code used up (1 of 1 peers admitted)"));
    CHECK(!exists("vol2/token"));
    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol2 --invite dli1.AAAAAAAAAAAAAAAAAAAAAA --quiet", B, org_addr) == 1);
    CHECK(file_has("err.txt", "refused the invite: unknown invite code"));
    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol2 --invite nonsense --quiet", B, org_addr) == 1);
    CHECK(file_has("err.txt", "refused the invite: not an invite code"));

    org_stop();
    if (org_start("invite.key")) return;
    CHECK(file_gets("org.err", "1 of 1 places taken", 10));
    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol2 --invite %s --quiet", B, org_addr, code) == 1);
    CHECK_MSG(file_has("err.txt", "invite code used up"), "a restart forgot the invite's uses");
    /* the first volunteer, its token lost, redeems again: same place. Its
     * device (none such) stops it after the token is kept. */
    CHECK(sh("rm vol1/token && timeout 60 %s join %s --data " CORPUS " --dir vol1 --invite %s --quiet --batch 1 --device 999", B,
             org_addr, code) == 1);
    CHECK(file_has("err.txt", "got a token through the invite") && exists("vol1/token"));
    snprintf(want, sizeof want, "token for peer %s (trainer), a peer that redeemed the code before; 1 of 1", vol_id);
    CHECK(file_has("org.err", want));
    org_stop();
}

/* An expired invite is refused; an invite of another run is not served. */
static void invite_expired(void) {
    CHECK(sh("%s authority invite --key run.key --uses 5 --expires 1s --out late.key", B) == 0);
    char code[64];
    first_line("out.txt", code, sizeof code);
    /* Time only moves on: after more than a second the code has expired. */
    usleep(1200 * 1000);
    if (org_start("late.key")) return;
    CHECK(sh("timeout 60 %s join %s --data " CORPUS " --dir vol3 --invite %s --quiet", B, org_addr, code) == 1);
    CHECK(file_has("err.txt", "refused the invite: invite code expired at "));
    CHECK(!exists("vol3/token"));
    org_stop();
    CHECK(sh("{ %s authority init --run-id closed-test --out other.key && %s authority invite --key other.key "
             "--out other.invite; }", B, B) == 0);
    CHECK(sh("timeout 60 %s train --manifest run.json --identity peer.id --token peer.token --invite-file "
             "other.invite --synthetic-compute 0.2 --quiet", B) == 2);
    CHECK(file_has("err.txt", "is not an invite of this run"));
}

int main(void) {
    if (cli_dir_make("/tmp/dedloc-closed-XXXXXX")) return 1;
    organiser_starts();
    trainer_needs_token();
    if (org_start(NULL) == 0) join_without_token();
    org_stop();
    invite_uses();
    invite_expired();
    org_stop();
    int rc = dl_test_finish("cli_closed_run");
    if (rc == 0) cli_dir_remove();
    else fprintf(stderr, "kept %s\n", cli_dir);
    return rc;
}
