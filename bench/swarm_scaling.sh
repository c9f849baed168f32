#!/usr/bin/env bash
# Collective samples/s of a local swarm with 1, 2, 3... trainers on loopback
# (tiny ALBERT, demo corpus sample), and per-peer utilization (compute time /
# wall time). Prints a table, and one JSON line with --json.
#   bench/swarm_scaling.sh [--peers "1 2 3"] [--steps N] [--synthetic-compute S]
#                          [--model M] [--target-batch N] [--batch B] [--compression C]
#                          [--max-upload MBIT] [--delay-update] [--json]
# With --synthetic-compute S a micro-batch sleeps S seconds instead of
# computing (and still yields a full-size gradient), so the figures show the
# network and the step loop apart from CPU contention between the peers.
# --delay-update runs each averaging round beside the next step's
# micro-batches (docs/collab_training.md, "Delayed update").
# The first two steps are left out (kernel compilation, joining).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
PEERS="1 2 3"; STEPS=12; SYN=""; MODEL=tiny; TARGET=48; BATCH=8; COMP=none; MAXUP=""; JSON=0; DELAY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --peers) PEERS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --synthetic-compute) SYN=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --target-batch) TARGET=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --compression) COMP=$2; shift 2 ;;
    --max-upload) MAXUP=$2; shift 2 ;;
    --delay-update) DELAY=1; shift ;;
    --json) JSON=1; shift ;;
    *) echo "swarm_scaling: unknown option $1"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "swarm_scaling: jq is missing"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-scaling.XXXXXX")
PIDS=()
# KEEP=1 keeps the peers' logs (the folder is named on stderr).
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
ARGS=(--model "$MODEL" --batch "$BATCH" --seq 64 --target-batch "$TARGET" --max-steps "$STEPS" --lr 0.01
      --warmup-steps 1 --quiet --no-dht --expiry 10 --compression "$COMP" --linger 2)
if [ -n "$SYN" ]; then ARGS+=(--synthetic-compute "$SYN"); else ARGS+=(--data tests/fixtures/text/corpus_bn_sample.txt --shuffle-buffer 1000); fi
[ -n "$MAXUP" ] && ARGS+=(--max-upload "$MAXUP")
[ "$DELAY" = 1 ] && ARGS+=(--delay-update)
rows=()
for n in $PEERS; do
  PIDS=(); boot=""
  for i in $(seq 0 $((n - 1))); do
    extra=(); [ -n "$boot" ] && extra=(--initial-peers "$boot")
    "$BIN" train "${ARGS[@]}" --run-id "scaling-$$-$n" --listen 127.0.0.1:0 --min-peers "$n" --peer-seed "$i" \
      "${extra[@]}" --log "$W/$n-$i.jsonl" 2>"$W/$n-$i.err" &
    PIDS+=($!)
    if [ -z "$boot" ]; then
      for _ in $(seq 1200); do
        boot=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/$n-$i.err" | head -n 1)
        [ -n "$boot" ] && break; sleep 0.05
      done
    fi
  done
  for p in "${PIDS[@]}"; do wait "$p" || { echo "swarm_scaling: a peer failed:"; tail -n 5 "$W"/$n-*.err; exit 1; }; done
  # Collective samples/s: samples between step 2 and the last step over that time (peer 0's log).
  sps=$(jq -s '[.[] | select(.step)] | (map(select(.step == 2))[0]) as $a | last as $b
               | (($b.samples - $a.samples) / ($b.time - $a.time))' "$W/$n-0.jsonl")
  util=$(cat "$W"/$n-*.jsonl | jq -s '[.[] | select(.step and .step > 2)] | (map(.compute_s) | add) / (map(.compute_s + .wait_s) | add)')
  # The same without the last step: there a delayed peer has nothing left to
  # compute beside its round (steps 3..N-1; all of 3..N when N <= 3).
  steady=$(cat "$W"/$n-*.jsonl | jq -s --argjson last "$STEPS" '[.[] | select(.step and .step > 2)] as $all
             | ([$all[] | select(.step < $last)] | if length > 0 then . else $all end)
             | (map(.compute_s) | add) / (map(.compute_s + .wait_s) | add)')
  round=$(jq -s '[.[] | select(.step and .step > 2) | .round_s] | sort | .[length / 2 | floor]' "$W/$n-0.jsonl")
  rows+=("$n $sps $util $round $steady")
done
if [ "$JSON" = 1 ]; then
  printf '%s\n' "${rows[@]}" | jq -R -s -c --arg syn "${SYN:-0}" --arg model "$MODEL" --arg comp "$COMP" \
    --argjson delay "$DELAY" '{bench: "swarm_scaling", model: $model, synthetic_compute_s: ($syn | tonumber), compression: $comp,
      delay_update: ($delay == 1),
      rows: [split("\n")[] | select(length > 0) | split(" ") | {trainers: (.[0] | tonumber),
      samples_per_second: (.[1] | tonumber), utilization: (.[2] | tonumber), median_round_s: (.[3] | tonumber),
      utilization_before_last_step: (.[4] | tonumber)}]}'
else
  echo "model $MODEL, target batch $TARGET, micro-batch $BATCH, ${SYN:+synthetic compute ${SYN}s, }compression $COMP$([ "$DELAY" = 1 ] && echo ", delayed update"), steps 3..$STEPS"
  printf '%8s %12s %12s %14s %18s\n' trainers samples/s utilization median_round_s util_before_last
  printf '%s\n' "${rows[@]}" | awk '{ printf "%8d %12.1f %11.1f%% %14.3f %17.1f%%\n", $1, $2, 100 * $3, $4, 100 * $5 }'
fi
