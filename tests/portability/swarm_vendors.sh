#!/usr/bin/env bash
# A swarm of two vendors' OpenCL: a peer on Intel's OpenCL CPU runtime and a
# peer on the system's OpenCL (PoCL) train the tiny model together, in fp32
# or with --precision fp16 (native half GEMMs on Intel, fp16 storage with
# fp32 arithmetic on PoCL). Every step is a round of both peers, and both hold
# the same param_hash at every step: the host step on the averaged gradient is
# the same bits whatever computed the gradients.
#   swarm_vendors.sh DEDLOC INTEL_RUNTIME_DIR fp32|fp16
# Skips (77) where Intel's runtime is not installed.
set -uo pipefail
BIN=$1 INTEL=$2 PRECISION=$3
here=$(cd "$(dirname "$0")" && pwd)
CORPUS=$here/../fixtures/text/corpus_bn_sample.txt
# Intel's half GEMMs are slow on a CPU (about 3 s a step here): fewer steps in fp16.
STEPS=8
[ "$PRECISION" = fp16 ] && STEPS=5
command -v jq >/dev/null || { echo "SKIP: jq is needed"; exit 77; }
W=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
fail() {
  echo "FAIL ($PRECISION): $*"
  for f in "$W"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
  exit 1
}
# The Intel peer first: on_intel.sh skips when the runtime is missing.
"$here/on_intel.sh" "$INTEL" true >"$W/probe" 2>&1 || { rc=$?; cat "$W/probe"; exit "$rc"; }

COMMON=(train --model tiny --data "$CORPUS" --seq 32 --batch 4 --lr 0.01 --warmup-steps 1
        --shuffle-buffer 100 --seed 1 --run-id "swarm-vendors-$PRECISION-$$" --no-dht --expiry 30
        --quiet --linger 3 --target-batch 8 --local-batch 4 --min-peers 2 --max-steps $STEPS
        --precision "$PRECISION" --listen 127.0.0.1:0)
: >"$W/intel.err"
"$here/on_intel.sh" "$INTEL" "$BIN" "${COMMON[@]}" --data-shard 0/2 --log "$W/intel.jsonl" \
  >"$W/intel.out" 2>>"$W/intel.err" &
PIDS+=($!)
addr=""
for _ in $(seq 3600); do
  addr=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/intel.err" | head -n 1)
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || fail "the Intel peer did not report its address"
"$BIN" "${COMMON[@]}" --data-shard 1/2 --initial-peers "$addr" --log "$W/pocl.jsonl" \
  >"$W/pocl.out" 2>"$W/pocl.err" &
PIDS+=($!)
for p in "${PIDS[@]}"; do wait "$p" || fail "a peer exited with an error"; done
PIDS=()
if [ "$PRECISION" = fp16 ]; then
  grep -q "GEMMs compute in fp16$" "$W/intel.err" || fail "the Intel peer did not compute in half"
fi
for p in intel pocl; do
  n=$(jq -s '[.[] | select(.step)] | length' "$W/$p.jsonl")
  [ "$n" = $STEPS ] || fail "$p logged $n of $STEPS steps"
  both=$(jq -s '[.[] | select(.step) | select((.members | length) == 2)] | length' "$W/$p.jsonl")
  [ "$both" = $STEPS ] || fail "only $both of $STEPS steps of $p were rounds of both peers"
done
paste <(jq -r 'select(.step) | "\(.step) \(.param_hash)"' "$W/intel.jsonl") \
      <(jq -r 'select(.step) | "\(.step) \(.param_hash)"' "$W/pocl.jsonl") |
  awk '{ print "step " $1 ": Intel " $2 ", PoCL " $4; if ($1 != $3 || $2 != $4 || $2 == "") bad = 1 }
       END { exit bad }' || fail "the peers' param_hash differ"
echo "swarm of Intel and PoCL in $PRECISION: the same param_hash at all $STEPS steps"
