#!/usr/bin/env bash
# What resuming costs a swarm peer (`dedloc train --run-id`) at an early and
# at a late step: seeking the data stream to the position its checkpoint
# records, against re-reading the stream up to there (`--replay-data`, what a
# checkpoint without the position gets, and what every swarm peer did before).
#   bench/swarm_resume.sh [--data SOURCE] [--at "10 300"] [--shard I/K] [--batch B] [--seq T]
#                         [--shuffle N] [--json]
# A lone swarm peer (tiny ALBERT, one micro-batch a step) trains to each
# step of --at in turn, keeping a checkpoint of each; its share is --shard I/K of
# the stream (default 0/64: a peer feeding one of 64 shares reads 64 stream
# batches per micro-batch of its own). Then each checkpoint is resumed twice,
# by seeking and by re-reading, for one more step; the cost is the time from
# the process's start to its "start" log event (the stream is at the peer's
# position by then; opening the device and the model is the same in both),
# with the batches re-read as the event reports them. Prints a table, and
# one JSON line with --json.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
DATA=tests/fixtures/text/corpus_bn_sample.txt; AT="10 300"; SHARD=0/64; BATCH=4; SEQ=32; SHUFFLE=10000; JSON=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --at) AT=$2; shift 2 ;;
    --shard) SHARD=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --seq) SEQ=$2; shift 2 ;;
    --shuffle) SHUFFLE=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "swarm_resume: unknown option $1"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "swarm_resume: jq is missing"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-swarm-resume.XXXXXX")
# KEEP=1 keeps the logs and checkpoints (the folder is named on stderr).
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi; }
trap cleanup EXIT
PEER=(--model tiny --data "$DATA" --seq "$SEQ" --batch "$BATCH" --target-batch "$BATCH" --shuffle-buffer "$SHUFFLE"
      --seed 1 --no-dht --listen 127.0.0.1:0 --join-wait 0 --linger 0 --quiet --data-shard "$SHARD")
echo "training a lone swarm peer to step(s) $AT (share $SHARD of $DATA)..." >&2
for s in $(tr ' ' '\n' <<<"$AT" | sort -n -u); do
  # Each leg continues the previous one's checkpoint (a seek) and saves at its end.
  "$BIN" train "${PEER[@]}" --run-id "resume-bench-$$" --max-steps "$s" --checkpoint-dir "$W/ck" --save-every 0 \
    --keep 1 2>>"$W/train.err" || { tail -n 5 "$W/train.err"; exit 1; }
  cp "$(printf '%s/ck/checkpoint-%010d.safetensors' "$W" "$s")" "$W/at-$s.safetensors"
done
rows=()
for s in $AT; do
  ck="$W/at-$s.safetensors"
  for how in seek replay; do
    d="$W/resume-$s-$how"; mkdir -p "$d/ck"; cp "$ck" "$(printf '%s/ck/checkpoint-%010d.safetensors' "$d" "$s")"
    extra=(); [ "$how" = replay ] && extra=(--replay-data)
    t0=$(date +%s.%N)
    "$BIN" train "${PEER[@]}" --run-id "resume-bench-$$-$s-$how" --checkpoint-dir "$d/ck" --max-steps $((s + 1)) \
      --log "$d/log.jsonl" "${extra[@]}" 2>"$d/err" || { tail -n 5 "$d/err"; exit 1; }
    rows+=("$(jq -c --argjson t0 "$t0" --argjson step "$s" --arg how "$how" \
      'select(.event == "start") | {step: $step, how: $how, data: .data, micro_batches: .micro_batches,
       batches_reread: .data_skipped, seconds: (.time - $t0)}' "$d/log.jsonl")")
  done
done
if [ "$JSON" = 0 ]; then
  printf '%-8s %-8s %14s %16s %10s\n' step resume micro-batches "batches re-read" seconds
  for r in "${rows[@]}"; do
    jq -r '"\(.step) \(.how) \(.micro_batches) \(.batches_reread) \(.seconds)"' <<<"$r" |
      awk '{ printf "%-8s %-8s %14s %16s %10.3f\n", $1, $2, $3, $4, $5 }'
  done
fi
printf '{"bench": "swarm_resume", "data": "%s", "shard": "%s", "batch": %s, "seq": %s, "shuffle": %s, "points": [%s]}\n' \
  "$DATA" "$SHARD" "$BATCH" "$SEQ" "$SHUFFLE" "$(IFS=,; echo "${rows[*]}")"
