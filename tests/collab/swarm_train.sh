#!/usr/bin/env bash
# Collaborative training with real `dedloc train --run-id` processes on
# loopback: one scenario per call (the ctest names list them). The tiny model
# on the committed Bengali sample, micro-batches of 4 x 32 tokens, a few
# steps: every scenario stays well under a minute on two cores.
#   swarm_train.sh DEDLOC_BINARY SCENARIO
# Checks read the JSON-lines logs (one object per step, see --log) with jq.
set -euo pipefail
BIN=$1
CASE=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CORPUS=$SRC/tests/fixtures/text/corpus_bn_sample.txt
command -v jq >/dev/null || { echo "jq is missing (scripts/setup.sh installs it)"; exit 77; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-swarm-$CASE.XXXXXX")
RUN="swarm-test-$CASE-$$"
declare -A PID=()

cleanup() {
  for p in "${PID[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL ($CASE): $*"
  for f in "$W"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
  exit 1
}

# Common settings: learning rate high enough that the loss moves in a few
# steps, warmup of one step, a short expiry so a killed peer leaves the view.
COMMON=(--model tiny --data "$CORPUS" --seq 32 --batch 4 --lr 0.01 --warmup-steps 1 --shuffle-buffer 100
        --seed 1 --run-id "$RUN" --no-dht --expiry 6 --quiet --linger 3)
FIRST_ADDR=""

# start NAME ARGS...: a trainer in the background, logging to $W/NAME.jsonl.
start() {
  local name=$1; shift
  local peers=()
  [ -n "$FIRST_ADDR" ] && peers=(--initial-peers "$FIRST_ADDR")
  : >>"$W/$name.err" # exists before the child opens it: the address poll below reads it at once
  "$BIN" train "${COMMON[@]}" --listen 127.0.0.1:0 "${peers[@]}" --log "$W/$name.jsonl" "$@" \
    >"$W/$name.out" 2>>"$W/$name.err" &
  PID[$name]=$!
  if [ -z "$FIRST_ADDR" ]; then
    # The first start may compile the kernels (seconds per variant on PoCL).
    for _ in $(seq 1800); do
      FIRST_ADDR=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/$name.err" | head -n 1)
      [ -n "$FIRST_ADDR" ] && break
      sleep 0.05
    done
    [ -n "$FIRST_ADDR" ] || fail "$name did not report its address"
  fi
}

# finish NAME: waits for a trainer (bounded by the test's timeout) and checks its status.
finish() {
  local rc=0
  wait "${PID[$1]}" || rc=$?
  unset "PID[$1]"
  [ "$rc" = 0 ] || fail "$1 exited with status $rc"
}

# wait_step NAME STEP [SECONDS]: until NAME's log has reached STEP.
wait_step() {
  local t=${3:-40}
  for _ in $(seq $((t * 20))); do
    if [ -f "$W/$1.jsonl" ] && [ "$(jq -s '[.[] | select(.step) | .step] | max // 0' "$W/$1.jsonl")" -ge "$2" ]; then
      return 0
    fi
    sleep 0.05
  done
  fail "$1 did not reach step $2 in $t s"
}

# steps_of NAME: "step hash" lines.
steps_of() { jq -r 'select(.step) | "\(.step) \(.param_hash)"' "$W/$1.jsonl"; }

# agree NAMES...: at every step two peers both logged, the same param_hash.
agree() {
  cat $(printf "$W/%s.jsonl " "$@") | jq -r 'select(.step and .param_hash != "") | "\(.step) \(.param_hash)"' | sort -u |
    awk '{ if ($1 in h && h[$1] != $2) { print "step " $1 ": " h[$1] " vs " $2; bad = 1 } h[$1] = $2 }
         END { exit bad }' || fail "param_hash differs between peers at some step"
}

# has FILE CONDITION: some line of the log satisfies the jq condition.
has() { jq -s -e "any(.[]; $2)" "$1" >/dev/null; }

last_step() { jq -s '[.[] | select(.step) | .step] | max // 0' "$W/$1.jsonl"; }

# manifest_init FILE ARGS...: a manifest of the test run (the settings of COMMON).
TOK=$SRC/assets/tokenizer_bn_demo.json
manifest_init() {
  local out=$1; shift
  # --data-shared: the test's peers all read the corpus at its path.
  "$BIN" run init --model tiny --tokenizer "$TOK" --data "$CORPUS" --data-shared --run-id "$RUN" --seq 32 --batch 4 \
    --target-batch 16 --max-steps 10 --lr 0.01 --warmup-steps 1 --shuffle-buffer 100 --seed 1 --out "$out" "$@" \
    >/dev/null 2>"$out.err" || fail "run init $out failed: $(cat "$out.err")"
}

# start_m NAME MANIFEST ARGS...: a trainer of the run a manifest describes.
start_m() {
  local name=$1 manifest=$2; shift 2
  local peers=()
  [ -n "$FIRST_ADDR" ] && peers=(--initial-peers "$FIRST_ADDR")
  : >>"$W/$name.err"
  "$BIN" train --manifest "$manifest" --no-dht --expiry 6 --quiet --linger 3 --listen 127.0.0.1:0 "${peers[@]}" \
    --log "$W/$name.jsonl" "$@" >"$W/$name.out" 2>>"$W/$name.err" &
  PID[$name]=$!
  if [ -z "$FIRST_ADDR" ]; then
    for _ in $(seq 1800); do
      FIRST_ADDR=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/$name.err" | head -n 1)
      [ -n "$FIRST_ADDR" ] && break
      sleep 0.05
    done
    [ -n "$FIRST_ADDR" ] || fail "$name did not report its address"
  fi
}

case "$CASE" in
equivalence)
  # Three peers, each feeding a third of every global batch of 12 (the
  # stream's micro-batches i, i+3, ...), against one peer fed the whole
  # batch. Tolerance: the swarm sums the same gradients in another order
  # (per-peer means, then the weighted average) in fp32; after 6 LAMB steps
  # such rounding moves the mean loss by ~1e-6 relative; we allow 5e-4.
  STEPS=6
  "$BIN" train --model tiny --data "$CORPUS" --seq 32 --batch 4 --lr 0.01 --warmup-steps 1 --shuffle-buffer 100 \
    --seed 1 --quiet --target-batch 12 --max-steps $STEPS --log "$W/single.jsonl" 2>"$W/single.err" ||
    fail "single peer failed"
  for i in 0 1 2; do
    start "p$i" --target-batch 12 --local-batch 4 --data-shard "$i/3" --min-peers 3 --max-steps $STEPS
  done
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  for i in 0 1 2; do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    n=$(jq -s "[.[] | select(.step) | select((.members | length) == 3 and .group_samples == 12)] | length" "$W/p$i.jsonl")
    [ "$n" = $STEPS ] || fail "p$i: only $n of $STEPS steps were made by 3 members with 12 samples"
  done
  paste <(jq -r '.loss' "$W/single.jsonl") <(jq -r 'select(.step) | .loss' "$W/p0.jsonl") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; printf "step %d: single %.7f swarm %.7f\n", NR, $1, $2
           if (d > 5e-4 * $1) bad = 1 } END { exit bad || NR != '$STEPS' }' || fail "loss trajectories differ"
  ;;
churn)
  # Three peers; the third is SIGKILLed after step 3 and restarted with the
  # same identity, and catches up by downloading the state. The survivors
  # never stop and agree on param_hash at every step; all reach the end.
  STEPS=14
  for i in 0 1 2; do
    start "p$i" --target-batch 16 --max-steps $STEPS --identity "$W/id$i" --min-peers 3 --peer-seed $i
  done
  wait_step p2 3
  kill -9 "${PID[p2]}"; wait "${PID[p2]}" 2>/dev/null || true; unset "PID[p2]"
  wait_step p0 6
  mv "$W/p2.jsonl" "$W/p2a.jsonl"
  start p2 --target-batch 16 --max-steps $STEPS --identity "$W/id2" --peer-seed 7
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2a p2
  for i in 0 1 2; do [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"; done
  has "$W/p2.jsonl" '.event == "download"'  || fail "the restarted peer did not download the state"
  # No step was lost: the survivors' logs hold every step (a survivor that
  # missed a round on a busy machine catches up by download, as designed).
  [ "$( (steps_of p0; steps_of p1) | awk '{print $1}' | sort -n -u | wc -l)" = $STEPS ] || fail "a step is missing"
  ;;
survivor)
  # Records that never expire during the test: the two peers SIGKILLed
  # after step 3 stay in every view. The survivor finds them unreachable
  # after a failed round, leaves them out and steps alone to the end
  # instead of waiting for their records to expire.
  STEPS=8
  for i in 0 1 2; do
    start "p$i" --target-batch 16 --max-steps $STEPS --min-peers 3 --peer-seed $i --expiry 3600
  done
  wait_step p0 3
  kill -9 "${PID[p1]}" "${PID[p2]}"
  for n in p1 p2; do wait "${PID[$n]}" 2>/dev/null || true; unset "PID[$n]"; done
  wait_step p0 $STEPS 90
  finish p0
  # Either a round failed and the survivor then found the killed peers
  # unreachable, or (when the closed connections already kept them out of
  # matchmaking) no round failed at all; never a failed round without the probe.
  if has "$W/p0.jsonl" '.event == "round_failed"'; then
    has "$W/p0.jsonl" '.event == "peers_gone"' || fail "the survivor never found the killed peers gone"
  fi
  # Its last steps were its own: one member.
  jq -s -e '[.[] | select(.step)] | last | (.members | length) == 1' "$W/p0.jsonl" >/dev/null ||
    fail "the survivor's last step was not taken alone"
  ;;
delayed)
  # --delay-update: each round runs beside the next step's micro-batches.
  # The weights stay the same bits on every peer at every step (the host
  # step applies the same average to the same weights), every peer reaches
  # the end, and the swarm still trains: its loss falls (the mean of the
  # last four steps below that of the first four, at the preset's rate:
  # which micro-batches land in which round depends on timing, so single
  # steps are too noisy to compare).
  STEPS=16
  for i in 0 1 2; do
    start "p$i" --target-batch 24 --max-steps $STEPS --min-peers 3 --peer-seed $i --delay-update --warmup-steps 2
  done
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  for i in 0 1 2; do [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"; done
  n=$(jq -s '[.[] | select(.step) | select((.members | length) == 3)] | length' "$W/p0.jsonl")
  [ "$n" -ge $((STEPS - 2)) ] || fail "only $n of $STEPS steps were rounds of all three peers"
  jq -s '[.[] | select(.step) | .loss] | (.[0:4] | add) > (.[-4:] | add)' "$W/p0.jsonl" | grep -q true ||
    fail "the delayed swarm's loss did not fall"
  ;;
early)
  # Exact mode matchmakes ahead of the ETA: three peers with a collective
  # batch of 48 (about four micro-batches each per step). Every peer holds
  # the same param_hash at every step; some step's matchmaking ran beside
  # compute (the log counts it); and each step's group samples, which the
  # result headers carry, are what the members logged as their own.
  STEPS=8
  for i in 0 1 2; do
    start "p$i" --target-batch 48 --max-steps $STEPS --min-peers 3 --peer-seed $i
  done
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  for i in 0 1 2; do [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"; done
  n=$(cat "$W"/p?.jsonl | jq -s '[.[] | select(.step and .matchmaking_overlap_s > 0 and .matchmaking_overlap_micro_batches > 0)] | length')
  [ "$n" -ge 1 ] || fail "no step's matchmaking overlapped a micro-batch"
  echo "$n peer-steps matchmade beside compute"
  # steps all three logged as a group of three: the group's samples are the sum of the members' own,
  # each capped at 4 times their lower median (docs/protocol.md, "Bounded claims"): under load one
  # peer may compute far more micro-batches than the others before the group forms
  cat "$W"/p?.jsonl | jq -s -r '[.[] | select(.step and (.members | length) == 3)] | group_by(.step)[] | select(length == 3) |
      ([.[].local_samples | select(. > 0)] | sort) as $w | ($w[(($w | length) - 1) / 2 | floor] * 4) as $cap |
      "\(.[0].step) \(.[0].group_samples) \(.[1].group_samples) \(.[2].group_samples) \($w | map(if . > $cap then $cap else . end) | add)"' |
    awk '{ n++; if ($2 != $5 || $3 != $5 || $4 != $5) { print "step " $1 ": group samples " $2 "/" $3 "/" $4 ", members logged " $5; bad = 1 } }
         END { if (n < 1) { print "no step made by all three"; bad = 1 } exit bad }' ||
    fail "group samples differ from the members' own"
  ;;
newcomer)
  # Two peers train; a third arrives at step 3 with fresh weights of another
  # seed, downloads the swarm's state and trains on with the same hash.
  STEPS=10
  start p0 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 1
  start p1 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 2
  wait_step p0 3
  "$BIN" train "${COMMON[@]}" --seed 5 --listen 127.0.0.1:0 --initial-peers "$FIRST_ADDR" --target-batch 16 \
    --max-steps $STEPS --peer-seed 3 --log "$W/p2.jsonl" 2>"$W/p2.err" &
  PID[p2]=$!
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  has "$W/p2.jsonl" '.event == "download"'  || fail "the newcomer did not download the state"
  [ "$(last_step p2)" = $STEPS ] || fail "the newcomer stopped at step $(last_step p2)"
  ;;
heal)
  # The third peer perturbs its own weights after step 2 (test hook): it
  # must notice that its param_hash disagrees, say so and download the state.
  STEPS=7
  for i in 0 1; do start "p$i" --target-batch 12 --max-steps $STEPS --min-peers 3 --peer-seed $i; done
  start p2 --target-batch 12 --max-steps $STEPS --min-peers 3 --peer-seed 2 --test-corrupt-at-step 2
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1
  has "$W/p2.jsonl" '.event == "disagree"'  || fail "p2 did not notice its disagreement"
  grep -q "disagrees" "$W/p2.err" || fail "p2 did not say so in its log"
  # It heals while training, not only in the linger after its last step
  # (which would hide a step loop that never heals): the download comes
  # before step $STEPS, and p2 then takes steps agreeing with the others.
  heal_epoch=$(jq -s '[.[] | select(.event == "download") | .epoch] | max' "$W/p2.jsonl")
  [ "$heal_epoch" != null ] && [ "$heal_epoch" -lt $STEPS ] ||
    fail "p2 healed only after its last step (download at epoch $heal_epoch)"
  jq -c "select(.step and .step > $heal_epoch)" "$W/p2.jsonl" > "$W/p2late.jsonl"
  [ -s "$W/p2late.jsonl" ] || fail "p2 took no step after healing"
  agree p0 p1 p2late
  [ "$(last_step p2)" = $STEPS ] || fail "p2 stopped at step $(last_step p2)"
  ;;
epoch_sybil|epoch_sybil_half)
  # Two colluding identities (test hook --test-attack epoch-sybil) join
  # three honest trainers after their first step and claim an epoch 20
  # steps ahead, with weights of their own that their donors serve and
  # their records sign. Two of the four others of each honest peer are not
  # a majority: no honest peer follows them (no leader refuses its round
  # because "a peer is past the epoch", no download of their state), and the
  # honest peers train to the end on identical weights
  # (docs/collab_training.md, "The epoch and the reference state").
  # epoch_sybil_half: beside only two honest trainers the pair is two of
  # the three others of each, a majority of the others; each honest peer
  # votes for its own epoch (its state comes from rounds it verified), and
  # two of four voters move nothing.
  STEPS=8
  HONEST=3
  [ "$CASE" = epoch_sybil_half ] && HONEST=2
  for i in $(seq 0 $((HONEST - 1))); do
    start "p$i" --target-batch 12 --max-steps $STEPS --min-peers $HONEST --peer-seed $i
  done
  wait_step p0 1
  for i in 0 1; do start "s$i" --target-batch 12 --max-steps 1000 --peer-seed $((i + 5)) --test-attack epoch-sybil; done
  for i in 0 1; do
    for _ in $(seq 400); do grep -q "claiming epoch" "$W/s$i.err" && break; sleep 0.05; done
    grep -q "claiming epoch" "$W/s$i.err" || fail "s$i never made its claim"
  done
  for i in $(seq 0 $((HONEST - 1))); do finish "p$i"; done
  agree $(seq -f 'p%g' 0 $((HONEST - 1)))
  for i in $(seq 0 $((HONEST - 1))); do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    # a download of an epoch the honest swarm never reached is the liars' state
    ! has "$W/p$i.jsonl" ".event == \"download\" and (.detail | capture(\"state of epoch (?<e>[0-9]+)\").e | tonumber) > $STEPS" ||
      fail "p$i downloaded the liars' state"
    # Their claim made an honest leader drop its round: a round refused
    # because "a peer is already past the epoch" that is not followed by a
    # download of the honest swarm's state (a legitimate refusal is: two
    # honest peers completed the epoch without this one).
    refused=$(jq -s '[.[] | select(.event == "round_failed" and (.detail | test("past epoch")))] | length' "$W/p$i.jsonl")
    caught_up=$(jq -s '[.[] | select(.event == "download")] | length' "$W/p$i.jsonl")
    [ "$refused" -le "$caught_up" ] || fail "p$i dropped $refused round(s) for a peer past its epoch, caught up $caught_up time(s)"
  done
  for i in 0 1; do kill -0 "${PID[s$i]}" 2>/dev/null || fail "s$i was gone before the end: its claim was not tested"; done
  # A Sybil chosen as the leader of epoch 1 in the moment before its claim
  # (about 2 runs in 5 here) forms no group: a joiner stops waiting once
  # its record claims the epoch far ahead, not after the join's timeout
  # (15 s, in which the others trained to the end and left it alone with
  # the Sybils, whose state it then took).
  for s in 0 1; do
    sid=$(grep -o 'peer [0-9a-f]* listening' "$W/s$s.err" | head -n 1 | cut -d' ' -f2)
    for i in $(seq 0 $((HONEST - 1))); do
      ! grep -q "the leader $sid did not take us: timeout" "$W/p$i.err" ||
        fail "p$i waited out the join's timeout on s$s, which claimed an epoch far ahead"
    done
  done
  ;;
monitor_sybil)
  # A closed run: two honest trainers with trainer tokens, then three
  # identities with monitor-role tokens that run the epoch-sybil attack
  # (their records claim an epoch 20 steps ahead, with a hash their donors
  # serve). Counted, they would be three of five voters, a majority; a
  # monitor's record counts for nothing (docs/protocol.md, "Bounded claims,
  # leaders and roles"), so no honest peer downloads their state and the
  # honest pair trains to the end on identical weights.
  STEPS=6
  "$BIN" authority init --run-id "$RUN" --out "$W/auth.key" >"$W/auth.out"
  manifest_init "$W/run.json" --key "$W/auth.key" --max-steps $STEPS --target-batch 12
  for n in p0 p1 s0 s1 s2; do
    role=trainer; [ "${n:0:1}" = s ] && role=monitor
    "$BIN" authority issue --key "$W/auth.key" --identity "$W/$n.id" --role $role >"$W/$n.token" ||
      fail "authority issue for $n failed"
  done
  for i in 0 1; do
    start_m "p$i" "$W/run.json" --min-peers 2 --peer-seed $i --token "$W/p$i.token" --identity "$W/p$i.id"
  done
  wait_step p0 1
  for i in 0 1 2; do
    start_m "s$i" "$W/run.json" --peer-seed $((i + 5)) --token "$W/s$i.token" --identity "$W/s$i.id" \
      --test-attack epoch-sybil
  done
  for i in 0 1 2; do
    for _ in $(seq 600); do grep -q "claiming epoch" "$W/s$i.err" && break; sleep 0.05; done
    grep -q "claiming epoch" "$W/s$i.err" || fail "s$i never made its claim"
  done
  for i in 0 1; do finish "p$i"; done
  agree p0 p1
  for i in 0 1; do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    ! has "$W/p$i.jsonl" ".event == \"download\" and (.detail | capture(\"state of epoch (?<e>[0-9]+)\").e | tonumber) > $STEPS" ||
      fail "p$i downloaded the monitors' state"
  done
  ;;
aux)
  # Two trainers and an aux peer, which aggregates (weight 0) and refreshes
  # its copy of the state; a newcomer could download from it.
  STEPS=6
  start t0 --target-batch 16 --max-steps $STEPS --min-peers 3 --peer-seed 1
  start t1 --target-batch 16 --max-steps $STEPS --min-peers 3 --peer-seed 2
  "$BIN" aux --model tiny --seed 1 --run-id "$RUN" --no-dht --expiry 6 --listen 127.0.0.1:0 \
    --initial-peers "$FIRST_ADDR" --target-batch 16 --max-steps $STEPS --min-peers 3 --linger 3 \
    --log "$W/aux.jsonl" 2>"$W/aux.err" &
  PID[aux]=$!
  for n in t0 t1 aux; do finish $n; done
  agree t0 t1 aux
  has "$W/t0.jsonl" '.step and any(.members[]; .role == "aux")'  || fail "the aux peer never took part"
  has "$W/aux.jsonl" '.event == "download"'  || fail "the aux peer never refreshed its state"
  ;;
clip)
  # CenteredClip agreed in the group record, end to end: two peers as in
  # the equivalence case with --aggregation centered-clip and a radius far
  # above any chunk's spread, so no honest contribution is clipped and the
  # result is the weighted mean up to the iteration's rounding (about 1e-13
  # relative per chunk): the same 5e-4 loss tolerance against one peer.
  # Two, not three: from three senders on, each aggregator leaves its own
  # contribution out of its part (round.h, dl_round_reducer_sits_out), so
  # no single peer's batch is the swarm's; the round tests check that rule.
  STEPS=4
  "$BIN" train --model tiny --data "$CORPUS" --seq 32 --batch 4 --lr 0.01 --warmup-steps 1 --shuffle-buffer 100 \
    --seed 1 --quiet --target-batch 8 --max-steps $STEPS --log "$W/single.jsonl" 2>"$W/single.err" ||
    fail "single peer failed"
  for i in 0 1; do
    start "p$i" --target-batch 8 --local-batch 4 --data-shard "$i/2" --min-peers 2 --max-steps $STEPS \
      --aggregation centered-clip --clip-tau 1e6 --clip-iterations 5
  done
  for i in 0 1; do finish "p$i"; done
  agree p0 p1
  for i in 0 1; do
    n=$(jq -s '[.[] | select(.step) | select((.members | length) == 2 and .aggregation == "centered-clip")] | length' "$W/p$i.jsonl")
    [ "$n" = $STEPS ] || fail "p$i: only $n of $STEPS steps were centered-clip rounds of 2 members"
  done
  paste <(jq -r '.loss' "$W/single.jsonl") <(jq -r 'select(.step) | .loss' "$W/p0.jsonl") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 5e-4 * ($1 < 0 ? -$1 : $1)) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
         END { exit bad }' || fail "the centered-clip swarm's loss left the single peer's"
  ;;
monitor)
  # Trainers' signed metrics records reach a monitor: its /api/status shows
  # each trainer's display name, precision and a finite loss, and the
  # monitor (a client-mode observer) does not keep the trainers from stepping.
  STEPS=6
  start p0 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 1 --name alice --linger 10
  start p1 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 2 --name bob --linger 10
  "$BIN" monitor --run-id "$RUN" --initial-peers "$FIRST_ADDR" --listen-http 127.0.0.1:0 --no-dht \
    --history "$W/history.jsonl" --sample-every 0.5 --expiry 6 --duration 90 >"$W/mon.out" 2>"$W/mon.err" &
  PID[mon]=$!
  port=""
  for _ in $(seq 200); do
    port=$(head -n 1 "$W/mon.out" 2>/dev/null | jq -r '.http_port // empty' 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || fail "the monitor did not report its HTTP port"
  seen=0
  for _ in $(seq 120); do
    # A plain HTTP GET over bash's /dev/tcp: no client program needed.
    if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
      printf 'GET /api/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
      sed '1,/^\r*$/d' <&3 >"$W/status.json" || true
      exec 3>&- 3<&-
    fi
    if jq -e '[.peers[] | select(.metrics != null and (.metrics.name == "alice" or .metrics.name == "bob")
               and .metrics.precision == "fp32" and .metrics.loss != null and .metrics.loss > 0
               and .metrics.samples_total > 0)] | length == 2' "$W/status.json" >/dev/null 2>&1; then
      seen=1
      break
    fi
    sleep 0.25
  done
  [ "$seen" = 1 ] || { cat "$W/status.json" 2>/dev/null | head -c 2000; fail "the monitor never showed both trainers' metrics"; }
  finish p0; finish p1
  agree p0 p1
  for i in 0 1; do [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"; done
  kill "${PID[mon]}" 2>/dev/null || true
  ;;
monitor_keeps)
  # The monitor keeps the run. Every 3 global steps it downloads the swarm's
  # state as a newcomer does (checked against the signed param_hash) and
  # writes a checkpoint and a Hugging Face export; then every trainer is
  # killed. A fresh trainer resumes from the monitor's checkpoint: it starts
  # from the swarm's last param_hash and trains on. The monitor's export and
  # checkpoint hold the very bytes `dedloc export` makes of a trainer's own
  # checkpoint of that step. In test-hook builds each download is held 2 s
  # before its files are written, and /api/status must answer meanwhile
  # (saying a download is under way): downloads do not stall HTTP.
  STEPS=6
  for i in 0 1; do
    start "p$i" --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed $i --linger 60 \
      --checkpoint-dir "$W/ck$i" --save-every 3
  done
  hold=(); [ "${DEDLOC_TEST_HOOKS:-0}" = 1 ] && hold=(--test-hold-download 2)
  "$BIN" monitor --run-id "$RUN" --initial-peers "$FIRST_ADDR" --listen-http 127.0.0.1:0 --no-dht \
    --history "$W/history.jsonl" --sample-every 0.5 --expiry 6 --duration 100 --model tiny \
    --checkpoint-dir "$W/mck" --checkpoint-every 3 --keep 1 --export-dir "$W/mhf" --export-every 3 "${hold[@]}" \
    >"$W/mon.out" 2>"$W/mon.err" &
  PID[mon]=$!
  port=""
  for _ in $(seq 200); do
    port=$(head -n 1 "$W/mon.out" 2>/dev/null | jq -r '.http_port // empty' 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || fail "the monitor did not report its HTTP port"
  status() {
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'GET /api/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    sed '1,/^\r*$/d' <&3 >"$W/status.json"
    exec 3>&- 3<&-
  }
  if [ ${#hold[@]} -gt 0 ]; then
    seen=0
    for _ in $(seq 1200); do
      status
      jq -e '.snapshots.downloading == true' "$W/status.json" >/dev/null 2>&1 && { seen=1; break; }
      sleep 0.05
    done
    [ "$seen" = 1 ] || fail "/api/status never answered during a state download"
  fi
  for _ in $(seq 1200); do grep -q "export of epoch $STEPS" "$W/mon.err" && break; sleep 0.05; done
  grep -q "export of epoch $STEPS" "$W/mon.err" || fail "the monitor wrote no export of step $STEPS"
  status
  jq -e ".snapshots.checkpoint.epoch == $STEPS and .snapshots.export.epoch == $STEPS and .snapshots.failures == 0" \
    "$W/status.json" >/dev/null || fail "/api/status does not show the checkpoint and export of step $STEPS: $(head -c 600 "$W/status.json")"
  # Both trainers have logged the last step (one may log it a moment after
  # the other, which the monitor may already have downloaded from).
  wait_step p0 $STEPS; wait_step p1 $STEPS
  kill -9 "${PID[p0]}" "${PID[p1]}"
  for i in 0 1; do wait "${PID[p$i]}" 2>/dev/null || true; unset "PID[p$i]"; done
  agree p0 p1
  for i in 0 1; do [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"; done
  last_hash=$(jq -r "select(.step == $STEPS) | .param_hash" "$W/p0.jsonl")
  # --keep 1: only the newest checkpoint is left.
  [ "$(ls "$W/mck")" = "checkpoint-0000000006.safetensors" ] || fail "the monitor's checkpoint folder holds: $(ls "$W/mck")"
  "$BIN" train "${COMMON[@]}" --listen 127.0.0.1:0 --join-wait 1 --target-batch 16 --max-steps 8 \
    --total-steps 20 --resume "$W/mck/checkpoint-0000000006.safetensors" --log "$W/r.jsonl" 2>"$W/r.err" ||
    fail "the trainer resuming from the monitor's checkpoint failed"
  first=$(jq -r 'select(.event == "start") | "\(.resumed) \(.epoch) \(.param_hash)"' "$W/r.jsonl")
  [ "$first" = "true $STEPS $last_hash" ] || fail "the resumed trainer started from '$first', not the swarm's 'true $STEPS $last_hash'"
  [ "$(last_step r)" = 8 ] || fail "the resumed trainer stopped at step $(last_step r)"
  # The export against `dedloc export` of p0's own checkpoint of step 6, and
  # of the monitor's checkpoint: the same files, byte for byte.
  "$BIN" export --checkpoint "$W/ck0/checkpoint-0000000006.safetensors" --out "$W/ref" >/dev/null ||
    fail "dedloc export of p0's checkpoint failed"
  "$BIN" export --checkpoint "$W/mck/checkpoint-0000000006.safetensors" --out "$W/mref" >/dev/null ||
    fail "dedloc export of the monitor's checkpoint failed"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json special_tokens_map.json; do
    cmp -s "$W/ref/$f" "$W/mhf/$f" || fail "the monitor's export differs from dedloc export's in $f"
    cmp -s "$W/ref/$f" "$W/mref/$f" || fail "the monitor's checkpoint exports another $f"
  done
  jq -e '.model_type == "albert" and .hidden_size > 0' "$W/mhf/config.json" >/dev/null || fail "config.json: $(cat "$W/mhf/config.json")"
  kill "${PID[mon]}"
  wait "${PID[mon]}" || fail "the monitor did not leave cleanly on SIGTERM"
  unset "PID[mon]"
  ;;
client)
  # A trainer behind NAT (--client-mode) averages through the other, which aggregates everything.
  STEPS=5
  start p0 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 1
  start p1 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 2 --client-mode
  finish p0; finish p1
  agree p0 p1
  has "$W/p0.jsonl" '.step and any(.members[]; .role == "client")'  || fail "no client member"
  [ "$(last_step p1)" = $STEPS ] || fail "the client stopped at step $(last_step p1)"
  ;;
garbage)
  # Garbage on a trainer's port while it trains: refused, training goes on.
  STEPS=8
  start p0 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 1
  start p1 --target-batch 16 --max-steps $STEPS --min-peers 2 --peer-seed 2
  wait_step p0 2
  host=${FIRST_ADDR%:*}; port=${FIRST_ADDR##*:}
  for _ in 1 2 3; do
    (exec 3<>"/dev/tcp/$host/$port" && head -c 200000 /dev/urandom >&3; exec 3>&-) 2>/dev/null || true
    printf '\x00\x00\x00\x10garbage-garbage!' >"/dev/tcp/$host/$port" 2>/dev/null || true
  done
  finish p0; finish p1
  agree p0 p1
  [ "$(last_step p0)" = $STEPS ] || fail "p0 stopped at step $(last_step p0)"
  ;;
sigint)
  # SIGINT to every peer: each saves the state of its last step; peers that
  # stopped at the same step saved the same weights, and each checkpoint loads.
  for i in 0 1; do
    start "p$i" --target-batch 16 --max-steps 1000 --min-peers 2 --peer-seed $i --checkpoint-dir "$W/ck$i" --save-every 0
  done
  wait_step p0 3
  kill -INT "${PID[p0]}" "${PID[p1]}"
  finish p0; finish p1
  for i in 0 1; do
    ls "$W/ck$i"/checkpoint-*.safetensors >/dev/null 2>&1 || fail "p$i saved no checkpoint"
    grep -q "stopped at step" "$W/p$i.err" || fail "p$i did not report its stop"
  done
  s0=$(sed -nE 's/.*stopped at step ([0-9]+).*/\1/p' "$W/p0.err"); s1=$(sed -nE 's/.*stopped at step ([0-9]+).*/\1/p' "$W/p1.err")
  h0=$(sed -nE 's/.*param_hash ([0-9a-f]+).*/\1/p' "$W/p0.err"); h1=$(sed -nE 's/.*param_hash ([0-9a-f]+).*/\1/p' "$W/p1.err")
  if [ "$s0" = "$s1" ]; then [ "$h0" = "$h1" ] || fail "same step $s0, different weights"; fi
  for i in 0 1; do
    # Resuming reads and verifies the checkpoint (no further step: --max-steps is its step).
    s=$(basename "$(ls "$W/ck$i"/checkpoint-*.safetensors | tail -n 1)" .safetensors); s=$((10#${s#checkpoint-}))
    "$BIN" train --checkpoint-dir "$W/ck$i" --max-steps "$s" --quiet 2>"$W/resume$i.err" || fail "p$i's checkpoint does not load"
  done
  ;;
resume|resume_delayed)
  # Resuming without replaying the data stream. Two peers split one stream
  # (--data-shard); p1 is stopped by SIGINT after step 3 and restarted from
  # its checkpoint while p0 trains on. The restarted p1 opens the stream at
  # the recorded position (start event: data "seek", nothing re-read) and
  # feeds exactly the micro-batches after the last one it had applied; its
  # state download from the swarm does not move its data position. A
  # resume with --replay-data re-reads instead (its share: 2 m + 1 batches
  # for m micro-batches of ours) and lands on the same micro-batches. The
  # reference: an uninterrupted lone peer of the same share, one micro-batch
  # a step, whose "batch" events give every index's fingerprint.
  # resume_delayed: the same with --delay-update, where a checkpoint records
  # the position at the start of its last successful round (the micro-batches
  # drawn beside that round were not applied and are fed again).
  STEPS=20
  SHARE=(--target-batch 16 --max-steps $STEPS --min-peers 2)
  [ "$CASE" = resume_delayed ] && SHARE+=(--delay-update)
  start p0 "${SHARE[@]}" --data-shard 0/2
  start p1 "${SHARE[@]}" --data-shard 1/2 --checkpoint-dir "$W/ck1" --save-every 0 --test-log-batches
  wait_step p1 3
  kill -INT "${PID[p1]}"; finish p1
  mv "$W/p1.jsonl" "$W/p1a.jsonl"
  start p1 "${SHARE[@]}" --data-shard 1/2 --checkpoint-dir "$W/ck1" --save-every 0 --test-log-batches
  finish p0; finish p1
  agree p0 p1a p1
  [ "$(last_step p1)" = $STEPS ] || fail "p1 stopped at step $(last_step p1)"
  # Delayed: when p1's last round failed (its gradient not applied), the
  # checkpoint goes without a position and the resume re-reads instead.
  how=seek
  if [ "$CASE" = resume_delayed ] &&
     jq -s -e '[.[] | select(.step or .event == "round_failed")] | last | .event == "round_failed"' "$W/p1a.jsonl" \
       >/dev/null; then
    how=replay
  fi
  jq -s -e '[.[] | select(.event == "start")] | length == 1 and .[0].resumed and .[0].data == "'$how'" and
            (.[0].data_skipped == 0) == ("'$how'" == "seek")' "$W/p1.jsonl" >/dev/null ||
    fail "the restarted p1 did not $how the stream"
  # Applied before the stop: the samples of its steps, 4 a micro-batch.
  applied=$(jq -s '[.[] | select(.step) | .local_samples] | add / 4' "$W/p1a.jsonl")
  [ "$(jq -s '[.[] | select(.event == "start")][0].micro_batches' "$W/p1.jsonl")" = "$applied" ] ||
    fail "the checkpoint's position is not after the $applied micro-batches p1 had applied"
  [ "$(jq -s '[.[] | select(.event == "batch")][0].index' "$W/p1.jsonl")" = "$applied" ] ||
    fail "the restarted p1 did not go on with micro-batch $applied"
  # Another resume of the final checkpoint, re-reading (a lone peer, one step more).
  cp -r "$W/ck1" "$W/ckr"
  "$BIN" train "${COMMON[@]}" --run-id "$RUN-replay" --listen 127.0.0.1:0 --join-wait 0 --data-shard 1/2 \
    --checkpoint-dir "$W/ckr" --max-steps $((STEPS + 1)) --replay-data --test-log-batches --log "$W/r.jsonl" \
    2>"$W/r.err" || fail "the replaying resume failed"
  jq -s -e '[.[] | select(.event == "start")][0] | .data == "replay" and .data_skipped == 2 * .micro_batches + 1' \
    "$W/r.jsonl" >/dev/null || fail "the replaying resume did not re-read 2 m + 1 batches"
  grep -q "re-reading" "$W/r.err" || fail "the replaying resume did not say it re-reads the stream"
  # The reference, uninterrupted, to the highest index any of them drew.
  n=$(cat "$W/p1a.jsonl" "$W/p1.jsonl" "$W/r.jsonl" | jq -s '[.[] | select(.event == "batch") | .index] | max + 1')
  "$BIN" train "${COMMON[@]}" --run-id "$RUN-ref" --listen 127.0.0.1:0 --join-wait 0 --data-shard 1/2 \
    --target-batch 4 --max-steps "$n" --test-log-batches --log "$W/ref.jsonl" 2>"$W/ref.err" ||
    fail "the reference peer failed"
  jq -s -e '[.[] | select(.event == "start")][0].data == "fresh"' "$W/ref.jsonl" >/dev/null || fail "reference: no fresh start"
  for f in p1a p1 r; do
    jq -r 'select(.event == "batch") | "\(.index) \(.fingerprint)"' "$W/$f.jsonl" > "$W/$f.fp"
    [ -s "$W/$f.fp" ] || fail "$f logged no micro-batches"
  done
  jq -r 'select(.event == "batch") | "\(.index) \(.fingerprint)"' "$W/ref.jsonl" > "$W/ref.fp"
  [ "$(wc -l < "$W/ref.fp")" = "$n" ] || fail "the reference drew $(wc -l < "$W/ref.fp") micro-batches, not $n"
  for f in p1a p1 r; do
    awk 'NR == FNR { ref[$1] = $2; next }
         { if (!($1 in ref) || ref[$1] != $2) { print "micro-batch " $1 ": " $2 " vs " ref[$1]; bad = 1 }
           if (FNR > 1 && $1 != last + 1) { print "gap after micro-batch " last; bad = 1 } last = $1 }
         END { exit bad }' "$W/ref.fp" "$W/$f.fp" || fail "$f fed other micro-batches than an uninterrupted peer"
  done
  ;;
fp16_compute)
  # A peer whose GEMMs run in half (emulated: DEDLOC_FP16_COMPUTE=emulate,
  # a test-hook build) trains beside an fp32 peer. The optimizer step is the
  # host's fp32 step on the averaged gradient, so both hold the same master
  # weights (param_hash) at every step, also across the fp16 peer's dropped
  # micro-batches: at the loss scaler's initial 2^16 its first gradients
  # overflow half's range (65504) and are dropped while the scale settles.
  STEPS=5
  start f0 --target-batch 8 --local-batch 4 --data-shard 0/2 --min-peers 2 --max-steps $STEPS
  DEDLOC_FP16_COMPUTE=emulate start f1 --precision fp16 --target-batch 8 --local-batch 4 --data-shard 1/2 \
    --min-peers 2 --max-steps $STEPS
  finish f0; finish f1
  grep -q "GEMMs compute in fp16-emulated" "$W/f1.err" || fail "f1 did not run its GEMMs in (emulated) half"
  agree f0 f1
  for i in 0 1; do [ "$(last_step "f$i")" = $STEPS ] || fail "f$i stopped at step $(last_step "f$i")"; done
  n=$(jq -s '[.[] | select(.step) | select((.members | length) == 2)] | length' "$W/f0.jsonl")
  [ "$n" = $STEPS ] || fail "only $n of $STEPS steps were rounds of both peers"
  has "$W/f1.jsonl" '.step and .loss_scale < 65536' || fail "f1's loss scale never backed off from an overflow"
  ;;
mixed)
  # Cross-vendor convergence: three peers that round differently (fp16
  # storage with 16-wide work-groups; bf16 storage built with -cl-mad-enable,
  # with bf16 compute where the CPU has it;
  # fp32 whose reductions sum in the other order, with 32-wide work-groups
  # and a GPU's kernel shapes: a work-group of up to 256 per row)
  # train together beside a homogeneous fp32 swarm on the same data shares.
  # The mixed swarm holds one param_hash at every step (the host step on the
  # averaged gradient is the same bits everywhere). Its loss (the collective
  # mean of the peers' losses) follows the homogeneous one within 0.05%.
  # Why that bound: every peer computes its loss and gradient with its own
  # rounding (bf16 keeps 8 bits of mantissa, 2^-9 = 0.2% per stored value;
  # fp16 11 bits; mad and summation order change the last bit of sums), but
  # the loss is a mean over thousands of token losses, where such independent
  # roundings mostly cancel, and a third of it comes from each peer; the
  # weights themselves are the same fp32 bits in both swarms up to the
  # gradients' rounding. Measured on PoCL: at most 0.004% over 8 steps. The
  # loss moves by ~1% over these steps, 20x the bound, so a swarm that
  # diverged or trained on the wrong weights would fail it.
  STEPS=8
  for i in 0 1 2; do
    start "h$i" --target-batch 12 --local-batch 4 --data-shard "$i/3" --min-peers 3 --max-steps $STEPS --lr 0.02
  done
  for i in 0 1 2; do finish "h$i"; done
  FIRST_ADDR=""
  RUN="$RUN-mixed"; COMMON=("${COMMON[@]/swarm-test-mixed-$$/$RUN}")
  DEDLOC_WORK_GROUP=16 start m0 --precision fp16 --target-batch 12 --local-batch 4 --data-shard 0/3 --min-peers 3 \
    --max-steps $STEPS --lr 0.02
  DEDLOC_CL_BUILD_OPTIONS=-cl-mad-enable start m1 --precision bf16 --target-batch 12 --local-batch 4 \
    --data-shard 1/3 --min-peers 3 --max-steps $STEPS --lr 0.02
  DEDLOC_CL_BUILD_OPTIONS=-DDL_REDUCE_REVERSE DEDLOC_WORK_GROUP=32 DEDLOC_KERNEL_SHAPE=gpu start m2 --target-batch 12 --local-batch 4 \
    --data-shard 2/3 --min-peers 3 --max-steps $STEPS --lr 0.02
  for i in 0 1 2; do finish "m$i"; done
  # m1's GEMMs (linear layers and attention) run in bf16 where the CPU has
  # AVX512-BF16 (oneDNN); its master weights stay the host's fp32 bits, so
  # the agreement below covers a bf16-compute peer. Elsewhere it runs bf16
  # storage with fp32 arithmetic and says why; on a CPU that has the
  # instructions only a build without oneDNN or DNNL_MAX_CPU_ISA may do that.
  if ! grep -q "bf16: GEMMs compute in bf16" "$W/m1.err"; then
    why=$(sed -nE 's/.*bf16 compute unavailable \((.*)\).*/\1/p' "$W/m1.err" | head -n 1)
    if grep -qw avx512_bf16 /proc/cpuinfo && [[ "$why" != *"no oneDNN"* && "$why" != *DNNL_MAX_CPU_ISA* ]]; then
      fail "m1 did not compute in bf16 on a CPU with AVX512-BF16 (${why:-no reason given})"
    fi
    echo "note: bf16 compute not exercised here (${why:-no reason given}): m1 ran bf16 storage with fp32 arithmetic"
  fi
  agree h0 h1 h2
  agree m0 m1 m2
  # They agree by computing the same step, not by healing: a peer whose
  # weights left the swarm's (a bf16 peer that kept its rounded weights as
  # master weights, say) sees the others' param_hash, disagrees and
  # downloads the state, again and again.
  for i in 0 1 2; do
    ! has "$W/m$i.jsonl" '.event == "disagree"' || fail "m$i held other weights than the swarm and re-downloaded them"
  done
  for i in 0 1 2; do [ "$(last_step "m$i")" = $STEPS ] || fail "m$i stopped at step $(last_step "m$i")"; done
  paste <(jq -r 'select(.step) | .loss' "$W/h0.jsonl") <(jq -r 'select(.step) | .loss' "$W/m0.jsonl") |
    awk '{ d = $1 - $2; if (d < 0) d = -d; printf "step %d: fp32 swarm %.5f mixed swarm %.5f (%.3f%%)\n", NR, $1, $2, 100 * d / $1
           if (d > 0.0005 * $1) bad = 1 } END { exit bad || NR != '$STEPS' }' || fail "the mixed swarm's loss left the tolerance"
  # The tolerance is not vacuous: the loss moved by several times it over the run.
  jq -s '[.[] | select(.step) | .loss] | (first - last) > 0.005 * first' "$W/h0.jsonl" | grep -q true ||
    fail "the loss moved too little in $STEPS steps for the comparison to mean anything"
  ;;
local)
  # Local-steps mode (DiLoCo): three peers take an inner LAMB step after
  # every micro-batch and sync every 3 (--local-batch 12 of micro-batches of
  # 4, their own thirds of the stream), four syncs. One stores fp16 with
  # 16-wide work-groups, one runs the GPU's kernel shapes with reductions
  # summed the other way: their local weights round differently, yet the
  # outer weights (the outer Nesterov step on the same averaged
  # pseudo-gradient) hold one param_hash on every peer at every sync.
  STEPS=4
  LOCAL=(--local-steps 3 --local-batch 12 --min-peers 3 --max-steps $STEPS --target-batch 36)
  start p0 "${LOCAL[@]}" --data-shard 0/3
  DEDLOC_WORK_GROUP=16 start p1 "${LOCAL[@]}" --data-shard 1/3 --precision fp16
  DEDLOC_CL_BUILD_OPTIONS=-DDL_REDUCE_REVERSE DEDLOC_KERNEL_SHAPE=gpu start p2 "${LOCAL[@]}" --data-shard 2/3
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  for i in 0 1 2; do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    n=$(jq -s '[.[] | select(.step) | select(.mode == "local" and (.members | length) == 3 and .group_samples == 36)]
               | length' "$W/p$i.jsonl")
    [ "$n" = $STEPS ] || fail "p$i: only $n of $STEPS syncs were local-mode rounds of 3 members with 36 samples"
    jq -s -e '[.[] | select(.step)] | last | .inner_steps == 12 and .syncs == 4 and (.local_loss > 0)' "$W/p$i.jsonl" \
      >/dev/null || fail "p$i: not 12 inner steps in 4 syncs at the end"
  done
  # The outer weights moved at every sync.
  [ "$(steps_of p0 | awk '{print $2}' | sort -u | wc -l)" = $STEPS ] || fail "the outer weights did not move at every sync"
  ;;
uint8)
  # DeDLOC mode with uint8 on the wire and accountable aggregation: four
  # peers step together to the end, one param_hash at every step (a tiny
  # model's gradient is sparse in its embeddings: the results' rounding
  # must stay within what the audit allows, or every round ends unsure).
  STEPS=4
  for i in 0 1 2 3; do
    start "p$i" --target-batch 16 --max-steps $STEPS --min-peers 4 --peer-seed $i --compression uint8
  done
  for i in 0 1 2 3; do finish "p$i"; done
  agree p0 p1 p2 p3
  for i in 0 1 2 3; do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    has "$W/p$i.jsonl" '.step and (.members | length) >= 2' || fail "p$i averaged with nobody"
  done
  ;;
local_topk | local_int8 | local_uint8)
  # Local-steps mode with a compressed pseudo-gradient: three peers sync
  # every 3 inner steps with error feedback; every sync is a round of all
  # three, the outer weights hold one param_hash on every peer at every
  # sync, and each peer's residual (what its codec did not carry, added to
  # the next sync) is not zero and changes from sync to sync.
  CODEC=${CASE#local_}
  STEPS=4
  LOCAL=(--local-steps 3 --local-batch 12 --min-peers 3 --max-steps $STEPS --target-batch 36
         --outer-compression "$CODEC")
  for i in 0 1 2; do start "p$i" "${LOCAL[@]}" --data-shard "$i/3"; done
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  for i in 0 1 2; do
    [ "$(last_step "p$i")" = $STEPS ] || fail "p$i stopped at step $(last_step "p$i")"
    n=$(jq -s '[.[] | select(.step) | select(.mode == "local" and (.members | length) == 3
                and .outer_compression == "'"$CODEC"'")] | length' "$W/p$i.jsonl")
    [ "$n" = $STEPS ] || fail "p$i: only $n of $STEPS syncs were $CODEC rounds of 3 members"
    jq -s -e '[.[] | select(.step) | .residual_norm] | length == '$STEPS' and all(. > 0) and
              (unique | length) == '$STEPS'' "$W/p$i.jsonl" >/dev/null ||
      fail "p$i: the residual is not carried: $(jq -c 'select(.step) | .residual_norm' "$W/p$i.jsonl" | tr '\n' ' ')"
  done
  ;;
local_newcomer)
  # Local-steps mode with the collective rule (no --local-batch): a sync is
  # due when the swarm's samples since the last one reach 3 inner steps of
  # 4 samples per peer seen. Two peers train; a third arrives after sync 2
  # with fresh weights of another seed, downloads the outer state (weights,
  # momentum, epoch), restarts its local weights from it, and syncs on with
  # the same param_hash.
  STEPS=7
  LOCAL=(--local-steps 3 --max-steps $STEPS --target-batch 24)
  start p0 "${LOCAL[@]}" --min-peers 2 --peer-seed 1
  start p1 "${LOCAL[@]}" --min-peers 2 --peer-seed 2
  wait_step p0 2
  "$BIN" train "${COMMON[@]}" --seed 5 --listen 127.0.0.1:0 --initial-peers "$FIRST_ADDR" "${LOCAL[@]}" \
    --peer-seed 3 --log "$W/p2.jsonl" 2>"$W/p2.err" &
  PID[p2]=$!
  for i in 0 1 2; do finish "p$i"; done
  agree p0 p1 p2
  has "$W/p2.jsonl" '.event == "download"' || fail "the newcomer did not download the outer state"
  has "$W/p2.jsonl" '.step and .mode == "local" and (.members | length) >= 2' ||
    fail "the newcomer took no sync with the others"
  [ "$(last_step p2)" = $STEPS ] || fail "the newcomer stopped at step $(last_step p2)"
  # Its local weights restarted from the outer ones: its pseudo-gradients
  # are of the others' size (its own fresh weights would give outer minus a
  # random initialisation, a norm about 50x larger). The averaged
  # pseudo-gradient's norm (grad_norm) after it joined stays within twice
  # the largest before.
  jq -s -e '([.[] | select(.step and .step <= 2) | .grad_norm] | max) as $b |
            [.[] | select(.step and .step > 2) | .grad_norm] | max <= 2 * $b' "$W/p0.jsonl" >/dev/null ||
    fail "a sync after the newcomer joined carried a pseudo-gradient far larger than before"
  ;;
local_aux)
  # Local-steps mode with an aux peer: it aggregates the pseudo-gradients
  # (weight 0) in the run's codec for them (--outer-compression, not
  # --compression: a member of another codec would be refused), and the
  # trainers agree at every sync.
  STEPS=4
  LOCAL=(--local-steps 3 --outer-compression fp16 --max-steps $STEPS --min-peers 3 --target-batch 24)
  start t0 "${LOCAL[@]}" --local-batch 12 --peer-seed 1
  start t1 "${LOCAL[@]}" --local-batch 12 --peer-seed 2
  "$BIN" aux --model tiny --seed 1 --run-id "$RUN" --no-dht --expiry 6 --listen 127.0.0.1:0 \
    --initial-peers "$FIRST_ADDR" "${LOCAL[@]}" --linger 3 --log "$W/aux.jsonl" 2>"$W/aux.err" &
  PID[aux]=$!
  for n in t0 t1 aux; do finish $n; done
  agree t0 t1 aux
  for n in t0 t1; do [ "$(last_step $n)" = $STEPS ] || fail "$n stopped at step $(last_step $n)"; done
  has "$W/t0.jsonl" '.step and any(.members[]; .role == "aux")' || fail "the aux peer never took part"
  ;;
local_manifest)
  # Local-steps mode from a signed manifest: run init writes the setting,
  # run show prints it, and peers started with --manifest train in that
  # mode (refusing --local-steps beside it: the manifest decides).
  STEPS=3
  manifest_init "$W/run.json" --identity "$W/owner.id" --max-steps $STEPS --local-steps 3 --outer-lr 0.5 \
    --outer-compression fp16
  jq -e '.local_steps == {"steps": 3, "outer_lr": 0.5, "outer_momentum": 0.9, "outer_compression": "fp16"}' \
    "$W/run.json" >/dev/null || fail "run init did not write the local_steps setting"
  jq -e '.optimizer.total_steps == 9' "$W/run.json" >/dev/null || fail "the inner schedule does not span 3 x 3 steps"
  "$BIN" run show "$W/run.json" | grep -q "local steps    3 inner steps per sync, outer Nesterov lr 0.5 momentum 0.9, pseudo-gradient codec fp16" ||
    fail "run show does not print the local_steps setting"
  if "$BIN" train --manifest "$W/run.json" --local-steps 5 --no-dht --quiet 2>"$W/refuse.err"; then
    fail "--local-steps beside --manifest was accepted"
  fi
  grep -q "local-steps is a run setting" "$W/refuse.err" || fail "the refusal does not say why: $(cat "$W/refuse.err")"
  start_m p0 "$W/run.json" --min-peers 2
  start_m p1 "$W/run.json" --min-peers 2
  for i in p0 p1; do finish "$i"; done
  agree p0 p1
  for i in p0 p1; do
    [ "$(last_step "$i")" = $STEPS ] || fail "$i stopped at step $(last_step "$i")"
    jq -s -e '[.[] | select(.step)] | all(.mode == "local" and .outer_compression == "fp16")' "$W/$i.jsonl" \
      >/dev/null || fail "$i did not train in the manifest's local-steps mode"
  done
  ;;
attack)
  # Robust aggregation in a training swarm: 8 trainers on deterministic
  # shares of every global batch (4 samples each, 32 in all), of which 3
  # attack in every round with well-formed data (test hook --test-attack:
  # two send their gradient times -1000, one uniform noise in [-100, 100);
  # their loss elements stay honest, so the logged collective loss still
  # measures the model). The clean run is one peer fed the whole batch of 32:
  # by the equivalence case it is this swarm with the 3 attackers behaving
  # honestly. The loss is the mean over the last W_LAST steps (one step of
  # 32 sequences is noisy).
  # - mean: the loss after STEPS is not within 5% of the clean run's.
  # - centered-clip: it is (the issue's bar), and the swarm still learns:
  #   it keeps at least half of the clean run's drop from the first W_LAST
  #   steps (5% alone is more than tiny's whole drop in these steps, so it
  #   would not show that).
  # - every honest peer reports each attacker and bans it after
  #   --clip-ban-rounds 3 clipped rounds, and puts its optimizer's moments
  #   back to before those rounds; no honest peer is ever clipped.
  # tau: an honest contribution lay at most 6.0 from the result in any
  # chunk (8 honest peers, 6 steps, measured per aggregated part: 0.02 to
  # 6.0 depending on the part); 10 leaves room. The attackers lie 1000x
  # their gradient or ~100 * sqrt(elements / 3) away, far beyond. Clipping
  # alone leaves a bias of up to ~0.6 tau per part (3 of 8 members pulling
  # tau each), several times the honest mean gradient at 4 samples per peer;
  # the ban after 3 rounds ends it, and the moments' guard
  # (docs/collab_training.md, "The attacked rounds' memory") keeps the
  # attacked rounds out of LAMB's second moment, which otherwise slows the
  # steps after the ban by an amount that follows the identities (the part
  # split, who sits out of which part, the noise): over seven fresh sets
  # the swarm kept 83% to 106% of the clean drop in six and 39% in one. So
  # the identities are fixed here (ed25519 seeds hashed from the peers'
  # numbers), and they are a hard set: 34% of the drop without the guard
  # (this check fails), 69% with it. ATTACK_FRESH_IDS=1 draws fresh ones.
  if [ "${ATTACK_FRESH_IDS:-0}" != 1 ]; then
    for i in 0 1 2 3 4 5 6 7; do
      seed=$(printf 'dedloc swarm attack test peer %d' "$i" | sha256sum | cut -c1-64 | sed 's/../\\x&/g')
      { printf 'dedloc-ed25519-v1\n'; printf "$seed"; } >"$W/id$i"
      chmod 600 "$W/id$i"
    done
  fi
  STEPS=${ATTACK_STEPS:-60}; W_LAST=5; CLIP_TAU=10; BAN=${ATTACK_BAN:-3}
  SCHED=(--lr 0.1 --warmup-steps $((STEPS / 10)) --total-steps $STEPS)
  "$BIN" train --model tiny --data "$CORPUS" --seq 32 --batch 4 --shuffle-buffer 100 "${SCHED[@]}" \
    --seed 1 --quiet --target-batch 32 --max-steps $STEPS --log "$W/clean.jsonl" 2>"$W/clean.err" ||
    fail "the clean run failed"
  attack_swarm() { # attack_swarm TAG AGGREGATION-OPTIONS...
    local tag=$1; shift
    FIRST_ADDR=""
    for i in 0 1 2 3 4 5 6 7; do
      local bad=()
      case $i in 5|7) bad=(--test-attack sign-flip) ;; 6) bad=(--test-attack noise) ;; esac
      start "$tag$i" --target-batch 32 --local-batch 4 --data-shard "$i/8" --min-peers 8 --max-steps $STEPS \
        "${SCHED[@]}" --run-id "$RUN-$tag" --identity "$W/id$i" "$@" "${bad[@]}"
    done
    for i in 0 1 2 3 4 5 6 7; do finish "$tag$i"; done
    # The honest peers end on the same weights. (Not checked at every step:
    # 8 trainers on two busy cores may miss a round, split and heal, which
    # the other cases cover.)
    [ "$(for i in 0 1 2 3 4; do grep -o 'param_hash [0-9a-f]*' "$W/$tag$i.err" | tail -n 1; done | sort -u | wc -l)" = 1 ] ||
      fail "$tag: the honest peers ended on different weights"
  }
  attack_swarm m --aggregation mean
  attack_swarm c --aggregation centered-clip --clip-tau $CLIP_TAU --clip-ban-rounds $BAN
  # Mean loss of the first/last W_LAST steps (null, a non-finite loss, counts as 1e30).
  tail_loss() { jq -s "[.[] | select(.step) | (.loss // 1e30)] | .[-$W_LAST:] | add / length" "$1"; }
  head_loss() { jq -s "[.[] | select(.step) | (.loss // 1e30)] | .[:$W_LAST] | add / length" "$1"; }
  clean=$(tail_loss "$W/clean.jsonl"); first=$(head_loss "$W/clean.jsonl")
  mean=$(tail_loss "$W/m0.jsonl"); clip=$(tail_loss "$W/c0.jsonl")
  echo "loss, mean of steps $((STEPS - W_LAST + 1))..$STEPS: clean $clean (steps 1..$W_LAST: $first);" \
       "3 of 8 attacking: mean $mean, centered-clip $clip (tau $CLIP_TAU, ban after $BAN)"
  [ "$(last_step c0)" = $STEPS ] && [ "$(last_step m0)" = $STEPS ] || fail "a swarm stopped early"
  awk -v c="$clean" -v x="$mean" 'BEGIN { d = x - c; if (d < 0) d = -d; exit !(d > 0.05 * c) }' ||
    fail "mean: loss $mean is within 5% of the clean $clean: the attack had no effect"
  awk -v c="$clean" -v x="$clip" 'BEGIN { d = x - c; if (d < 0) d = -d; exit !(d <= 0.05 * c) }' ||
    fail "centered-clip: loss $clip is not within 5% of the clean $clean"
  awk -v c="$clean" -v f="$first" -v x="$clip" 'BEGIN { exit !(f - c > 0 && f - x >= 0.5 * (f - c)) }' ||
    fail "centered-clip: the loss fell from $first to $clip, less than half the clean run's drop to $clean"
  # The identities are the same in both swarms: c5..c7 attack.
  id_of() { jq -r 'select(.step) | .peer_id' "$W/c$1.jsonl" | head -n 1; }
  for i in 0 1 2 3 4; do
    for a in 5 6 7; do
      grep -q "peer $(id_of $a): its contribution was clipped" "$W/c$i.err" ||
        grep -q "refusing peer $(id_of $a) for the rest of the run" "$W/c$i.err" || fail "c$i never reported attacker c$a"
      grep -q "refusing peer $(id_of $a) for the rest of the run" "$W/c$i.err" || fail "c$i did not ban attacker c$a"
    done
    grep -q "the optimizer's moments go back to step" "$W/c$i.err" ||
      fail "c$i did not put its optimizer's moments back when it refused the attackers"
    for h in 0 1 2 3 4; do
      ! grep -q "peer $(id_of $h)[: ].*clipped\|refusing peer $(id_of $h)" "$W"/c*.err ||
        fail "honest peer c$h was clipped (tau $CLIP_TAU too small)"
    done
  done
  echo "centered-clip: each of the 5 honest peers banned each of the 3 attackers; no honest peer was clipped"
  ;;
manifest_join)
  # A swarm of two peers started from a signed manifest trains; a newcomer's
  # whole command is `dedloc join ADDRESS` (plus --listen on loopback and
  # --log for the comparison, and the cache folder in the environment): it
  # fetches the manifest and the tokenizer, downloads the state and trains
  # to the end with the same param_hash as the others. The two train about
  # 0.25 s a step on an idle machine and the newcomer needs about 2 s to
  # start (manifest, tokenizer, model): 10 steps were sometimes over before
  # it joined ("j stopped at step 0", it downloaded the final state); 24
  # leave it over 5 s.
  STEPS=24
  manifest_init "$W/run.json" --identity "$W/owner.id" --max-steps $STEPS
  # The manifest hash against an independent reading of docs/manifest.md:
  # keys sorted, no white space (jq -S -c), without the signature; BLAKE2b-256.
  want=$(jq -S -c 'del(.signature)' "$W/run.json" | tr -d '\n' | b2sum -l 256 | cut -d' ' -f1)
  "$BIN" run show "$W/run.json" >"$W/show.out" || fail "run show refused a fresh manifest"
  grep -q "manifest hash  $want" "$W/show.out" || fail "manifest hash differs from jq + b2sum ($want)"
  # ...and the signature with OpenSSL's ed25519 over "dedloc-manifest-v1\n" + those bytes.
  { printf 'dedloc-manifest-v1\n'; jq -S -c 'del(.signature)' "$W/run.json" | tr -d '\n'; } >"$W/msg"
  { printf '302a300506032b6570032100'; jq -r .signer "$W/run.json"; } | perl -ne 'print pack("H*", $_ =~ s/\s//gr)' >"$W/pub.der"
  jq -r .signature "$W/run.json" | perl -ne 'print pack("H*", $_ =~ s/\s//gr)' >"$W/sig"
  openssl pkeyutl -verify -pubin -inkey "$W/pub.der" -keyform DER -rawin -in "$W/msg" -sigfile "$W/sig" >/dev/null ||
    fail "OpenSSL does not verify the manifest's signature"
  start_m p0 "$W/run.json" --min-peers 2
  start_m p1 "$W/run.json" --min-peers 2
  wait_step p0 3
  mkdir -p "$W/newcomer"
  # --data: the manifest names a path (every test peer has it), which join
  # takes only from the volunteer.
  (cd "$W/newcomer" && DEDLOC_CACHE_DIR="$W/cache" exec "$BIN" join "$FIRST_ADDR" --listen 127.0.0.1:0 --quiet \
    --data "$CORPUS" --log "$W/j.jsonl") 2>"$W/j.err" &
  PID[j]=$!
  for i in p0 p1 j; do finish "$i"; done
  agree p0 p1 j
  for i in p0 p1 j; do [ "$(last_step "$i")" = $STEPS ] || fail "$i stopped at step $(last_step "$i")"; done
  has "$W/j.jsonl" '.event == "download"' || fail "the newcomer did not download the state"
  grep -q "signature ok" "$W/j.err" || fail "the newcomer did not say the signature was checked"
  grep -q "trusting the manifest's signer on first use" "$W/j.err" || fail "trust on first use was not stated"
  cmp -s "$W/cache/runs/$RUN/tokenizer.json" "$TOK" || fail "the fetched tokenizer differs from the run's"
  cmp -s "$W/cache/runs/$RUN/manifest.json" "$W/run.json" || fail "the fetched manifest differs from the run's"
  ;;
manifest_mismatch)
  # Peers of one run id with different manifests (here: another learning
  # rate), or one with a manifest and one without, refuse each other; both
  # logs say why. Auxiliary peers: no device needed.
  manifest_init "$W/a.json" --identity "$W/owner.id" --lr 0.01
  manifest_init "$W/b.json" --identity "$W/owner.id" --lr 0.02
  AUX=(--listen 127.0.0.1:0 --no-dht --quiet --expiry 6)
  : >>"$W/a.err" # exists before the child opens it: the poll below reads it at once
  "$BIN" aux --manifest "$W/a.json" "${AUX[@]}" 2>"$W/a.err" & PID[a]=$!
  for _ in $(seq 600); do
    FIRST_ADDR=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/a.err" | head -n 1)
    [ -n "$FIRST_ADDR" ] && break; sleep 0.05
  done
  [ -n "$FIRST_ADDR" ] || fail "a did not report its address"
  : >>"$W/b.err"; : >>"$W/c.err"
  "$BIN" aux --manifest "$W/b.json" "${AUX[@]}" --initial-peers "$FIRST_ADDR" 2>"$W/b.err" & PID[b]=$!
  "$BIN" aux --run-id "$RUN" "${AUX[@]}" --initial-peers "$FIRST_ADDR" 2>"$W/c.err" & PID[c]=$!
  for _ in $(seq 1200); do
    [ "$(grep -c 'different run manifest' "$W/a.err")" -ge 2 ] && grep -q 'different run manifest' "$W/b.err" &&
      grep -q 'different run manifest' "$W/c.err" && break
    sleep 0.05
  done
  grep -q 'different run manifest: [0-9a-f]*\.\.\. (the refusing peer) vs [0-9a-f]*\.\.\.' "$W/b.err" ||
    fail "the peer with the other manifest does not say why it was refused"
  grep -q 'different run manifest: none' "$W/c.err" || grep -q 'vs none' "$W/c.err" ||
    fail "the peer without a manifest does not say why it was refused"
  [ "$(grep -c 'different run manifest' "$W/a.err")" -ge 2 ] || fail "the refusing peer's log does not say why"
  grep -q 'authenticated' "$W/b.err" && fail "peers of different manifests connected"
  true
  ;;
manifest_dht)
  # join --run-id ID --dht-bootstrap NODE: the newcomer finds a peer of the
  # run through the DHT alone (an aux peer started from the manifest), fetches
  # the run files from it and trains with it (one step).
  manifest_init "$W/run.json" --identity "$W/owner.id"
  : >>"$W/s.err"
  "$BIN" aux --manifest "$W/run.json" --listen 127.0.0.1:0 --quiet --expiry 6 2>"$W/s.err" & PID[s]=$!
  port=""
  for _ in $(seq 600); do
    grep -q "no OpenDHT" "$W/s.err" && { echo "built without OpenDHT"; exit 77; }
    port=$(sed -nE 's/.*DHT node on UDP port ([0-9]+).*/\1/p' "$W/s.err" | head -n 1)
    [ -n "$port" ] && break; sleep 0.05
  done
  [ -n "$port" ] || fail "the serving peer did not report its DHT port"
  rc=0; DEDLOC_CACHE_DIR="$W/cache" "$BIN" join --run-id "$RUN" --dht-bootstrap "127.0.0.1:$port" \
    --listen 127.0.0.1:0 --max-minutes 0.001 --quiet --data "$CORPUS" --log "$W/j.jsonl" 2>"$W/j.err" || rc=$?
  [ "$rc" = 0 ] || fail "join through the DHT exited with $rc"
  grep -q "signature ok" "$W/j.err" || fail "join through the DHT did not get the manifest"
  cmp -s "$W/cache/runs/$RUN/tokenizer.json" "$TOK" || fail "join through the DHT did not get the tokenizer"
  [ "$(last_step j)" -ge 1 ] || fail "join through the DHT did not train"
  ;;
manifest_tamper)
  # A manifest altered after signing, a tokenizer that is not the one it
  # names, another authority than --run-key, and another signer than the one
  # trusted on first use are all refused.
  manifest_init "$W/run.json" --identity "$W/owner.id"
  sed 's/"max_steps":\t\([0-9]*\)/"max_steps":\t9\1/' "$W/run.json" >"$W/tampered.json"
  cmp -s "$W/run.json" "$W/tampered.json" && fail "the test did not alter the manifest"
  rc=0; "$BIN" run show "$W/tampered.json" >/dev/null 2>"$W/show.err" || rc=$?
  [ "$rc" = 1 ] && grep -q "signature does not match" "$W/show.err" || fail "run show accepted an altered manifest"
  rc=0; "$BIN" train --manifest "$W/tampered.json" --quiet 2>"$W/t.err" || rc=$?
  [ "$rc" = 2 ] && grep -q "signature does not match" "$W/t.err" || fail "train accepted an altered manifest ($rc)"
  rc=0; "$BIN" train --manifest "$W/run.json" --tokenizer "$SRC/tests/fixtures/text/tok_bert_style.json" --quiet \
    2>"$W/k.err" || rc=$?
  [ "$rc" = 2 ] && grep -q "is not the manifest's tokenizer" "$W/k.err" || fail "train accepted another tokenizer"
  rc=0; "$BIN" train --manifest "$W/run.json" --lr 0.5 --quiet 2>"$W/l.err" || rc=$?
  [ "$rc" = 2 ] && grep -q "comes from the manifest" "$W/l.err" || fail "train took --lr beside --manifest"
  # Authority: run show --run-key accepts its own authority, refuses another.
  "$BIN" authority init --run-id "$RUN" --out "$W/auth.key" >"$W/auth.out"
  "$BIN" authority init --run-id "$RUN" --out "$W/other.key" >"$W/other.out"
  manifest_init "$W/auth.json" --key "$W/auth.key"
  "$BIN" run show --run-key "$(grep -oE '[0-9a-f]{64}' "$W/auth.out" | head -n 1)" "$W/auth.json" >/dev/null ||
    fail "run show refused the manifest of its own authority"
  rc=0; "$BIN" run show --run-key "$(grep -oE '[0-9a-f]{64}' "$W/other.out" | head -n 1)" "$W/auth.json" \
    >/dev/null 2>&1 || rc=$?
  [ "$rc" = 1 ] || fail "run show accepted another authority's manifest"
  # Trust on first use: this machine joined the run signed by owner.id; a
  # peer now serves a manifest of that run id signed by another identity.
  manifest_init "$W/other.json" --identity "$W/intruder.id"
  mkdir -p "$W/cache/runs/$RUN" && cp "$W/run.json" "$W/cache/runs/$RUN/manifest.json"
  : >>"$W/o.err"
  "$BIN" aux --manifest "$W/other.json" --listen 127.0.0.1:0 --no-dht --quiet 2>"$W/o.err" & PID[o]=$!
  for _ in $(seq 600); do
    FIRST_ADDR=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/o.err" | head -n 1)
    [ -n "$FIRST_ADDR" ] && break; sleep 0.05
  done
  [ -n "$FIRST_ADDR" ] || fail "the serving peer did not report its address"
  rc=0; DEDLOC_CACHE_DIR="$W/cache" "$BIN" join "$FIRST_ADDR" --listen 127.0.0.1:0 2>"$W/j.err" || rc=$?
  [ "$rc" = 1 ] && grep -q "signed by another key than when this machine first joined" "$W/j.err" ||
    fail "join accepted another signer than the one trusted on first use ($rc)"
  rc=0; DEDLOC_CACHE_DIR="$W/cache2" "$BIN" join "$FIRST_ADDR" --run-key "$(grep -oE '[0-9a-f]{64}' "$W/auth.out" | head -n 1)" \
    --listen 127.0.0.1:0 2>"$W/j2.err" || rc=$?
  [ "$rc" = 1 ] && grep -q "not signed by the run authority given with --run-key" "$W/j2.err" ||
    fail "join accepted a manifest without the authority of --run-key ($rc)"
  ;;
*)
  echo "unknown scenario $CASE"; exit 2 ;;
esac
echo "ok: $CASE"
