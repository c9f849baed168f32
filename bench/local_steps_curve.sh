#!/usr/bin/env bash
# Convergence at equal compute, DeDLOC mode against local-steps mode (DiLoCo):
# PEERS `dedloc train` peers on loopback, the tiny model on the demo corpus
# (micro-batches of 4 x 32 tokens, peer i feeding micro-batches i, i+P, ...
# of the stream, --local-batch so that every setting sees the same samples),
# the same total samples for every setting:
#   DeDLOC mode: a step every 4 micro-batches per peer (target P x 16);
#   local-steps mode, for each H and each pseudo-gradient codec: an inner LAMB
#   step per micro-batch, a sync every H micro-batches per peer, the outer
#   Nesterov step (0.7, 0.9).
# The final loss is that of the final weights (peer 0's last checkpoint,
# exported) on the same 4 fixed evaluation batches for every setting (a
# `dedloc train` of 4 steps at lr 1e-12 from them: its step losses are the
# weights' losses). Bytes per sample: payload bytes the peers sent in their
# rounds (the logs' bytes_sent), summed, divided by the samples they
# computed.
#   bench/local_steps_curve.sh [--peers 4] [--samples 6400] [--h "10 50 200"]
#       [--codecs "none fp16 uint8 int8 topk"] [--timeout 600] [--out DIR] [--json]
# Codecs the binary does not know are left out (said on stderr). A setting
# whose peers have not all finished after --timeout seconds is stopped and
# reported as failed (its row says so), and the others still run. --samples
# must be a multiple of PEERS x 4 x each H and of PEERS x 16. Writes into
# --out (default build/local-steps-curve): per setting its logs, summary.json
# (one object per setting), and curve.png (final loss and bytes per sample per
# setting) when gnuplot is installed. Prints a table; --json also prints
# summary.json. Size: the default (4 peers, 6400 samples, 10 settings) is
# about 10 minutes of two idle cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
PEERS=4; SAMPLES=6400; HS="10 50 200"; CODECS="none fp16 uint8 int8 topk"; OUT=build/local-steps-curve; JSON=0
TIMEOUT=600
while [ $# -gt 0 ]; do
  case "$1" in
    --peers) PEERS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --h) HS=$2; shift 2 ;;
    --codecs) CODECS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local_steps_curve: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "local_steps_curve: jq is missing" >&2; exit 1; }
CORPUS=tests/fixtures/text/corpus_bn_sample.txt
MICRO=4
mkdir -p "$OUT"
rm -f "$OUT/summary.jsonl" "$OUT/summary.json" "$OUT/curve.png" "$OUT/curve.dat"
COMMON=(--model tiny --data "$CORPUS" --seq 32 --batch $MICRO --shuffle-buffer 100 --seed 1 --no-dht --quiet
        --linger 3 --expiry 10 --save-every 0 --round-deadline 120)

known=()
for c in $CODECS; do
  if "$BIN" train --outer-compression "$c" --help >/dev/null 2>&1; then known+=("$c")
  else echo "local_steps_curve: codec $c unknown to $BIN: left out" >&2; fi
done

# run NAME ARGS...: PEERS peers of one setting; then the evaluation of peer 0's final weights.
run() {
  local name=$1; shift
  local dir="$OUT/$name" first="" pids=() start
  rm -rf "$dir"; mkdir -p "$dir"
  start=$(date +%s)
  for i in $(seq 0 $((PEERS - 1))); do
    local peers=()
    [ -n "$first" ] && peers=(--initial-peers "$first")
    : > "$dir/p$i.err"
    timeout -s TERM -k 20 "$TIMEOUT" "$BIN" train "${COMMON[@]}" --run-id "lsc-$name-$$" --listen 127.0.0.1:0 "${peers[@]}" --data-shard "$i/$PEERS" \
      --min-peers "$PEERS" --checkpoint-dir "$dir/ck$i" --log "$dir/p$i.jsonl" "$@" 2>"$dir/p$i.err" &
    pids+=($!)
    if [ -z "$first" ]; then
      for _ in $(seq 1200); do
        first=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$dir/p0.err" | head -n 1)
        [ -n "$first" ] && break
        sleep 0.05
      done
      [ -n "$first" ] || { echo "local_steps_curve: $name: peer 0 did not start" >&2; return 1; }
    fi
  done
  local status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  local elapsed=$(( $(date +%s) - start ))
  if [ "$status" != 0 ]; then
    echo "local_steps_curve: $name: a peer failed or stalled past --timeout (see $dir)" >&2
    jq -n --arg name "$name" --argjson elapsed "$elapsed" \
      '{setting: $name, failed: true, elapsed_s: $elapsed, rounds: null, final_loss: null,
        bytes_per_peer_per_sample: null}' >> "$OUT/summary.jsonl"
    return 0
  fi
  "$BIN" export --checkpoint "$dir/ck0" --out "$dir/final" >/dev/null 2>"$dir/export.err"
  "$BIN" train --model "$dir/final" --data "$CORPUS" --seq 32 --batch $MICRO --target-batch 16 --shuffle-buffer 100 \
    --seed 99 --peer-seed 99 --max-steps 4 --lr 1e-12 --warmup-steps 0 --quiet --log "$dir/eval.jsonl" \
    2>"$dir/eval.err"
  cat "$dir"/p*.jsonl | jq -s --arg name "$name" --argjson peers "$PEERS" --argjson samples "$SAMPLES" \
    --argjson elapsed "$elapsed" --slurpfile eval <(jq -c 'select(.step)' "$dir/eval.jsonl") '
    (map(select(.step))) as $r
    | {setting: $name, peers: $peers, samples: $samples, elapsed_s: $elapsed,
       rounds: ($r | map(.step) | max),
       final_loss: ($eval | map(.loss) | add / length),
       last_train_loss: ($r | max_by(.step) | .loss),
       bytes_sent: ($r | map(.bytes_sent) | add),
       bytes_per_peer_per_sample: (($r | map(.bytes_sent) | add) / $samples)}' >> "$OUT/summary.jsonl"
}

per_step=$((PEERS * 16))
[ $((SAMPLES % per_step)) = 0 ] || { echo "local_steps_curve: --samples must be a multiple of $per_step" >&2; exit 2; }
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
echo "local_steps_curve: dedloc mode" >&2
run dedloc --target-batch $per_step --local-batch 16 --max-steps $((SAMPLES / per_step))
for h in $HS; do
  per_sync=$((PEERS * MICRO * h))
  if [ $((SAMPLES % per_sync)) != 0 ]; then
    echo "local_steps_curve: H=$h left out: --samples is not a multiple of $per_sync" >&2
    continue
  fi
  for c in "${known[@]}"; do
    echo "local_steps_curve: H=$h, $c" >&2
    run "h$h-$c" --local-steps "$h" --outer-compression "$c" --local-batch $((MICRO * h)) \
      --target-batch $per_sync --max-steps $((SAMPLES / per_sync))
  done
done
LOAD_END=$(cut -d' ' -f1 /proc/loadavg)
jq -s --arg load "$LOAD_START -> $LOAD_END" '
  (.[0]) as $base
  | map(. + {loss_vs_dedloc: (if .final_loss and $base.final_loss then .final_loss / $base.final_loss - 1 else null end),
             traffic_reduction: (if (.bytes_per_peer_per_sample // 0) > 0 and $base.bytes_per_peer_per_sample
                                 then $base.bytes_per_peer_per_sample / .bytes_per_peer_per_sample else null end)})
  | {load_average: $load, settings: .}' "$OUT/summary.jsonl" > "$OUT/summary.json"
jq -r '"| setting | rounds | final loss | vs DeDLOC | bytes/peer/sample | less traffic | wall s |",
       "|---|---|---|---|---|---|---|",
       (.settings[] | if .failed then "| \(.setting) | failed or stalled | - | - | - | - | \(.elapsed_s) |"
                      else "| \(.setting) | \(.rounds) | \(.final_loss * 10000 | round / 10000) | \(.loss_vs_dedloc * 1000 | round / 10)% | \(.bytes_per_peer_per_sample | round) | \(.traffic_reduction * 10 | round / 10)x | \(.elapsed_s) |" end),
       "load average \(.load_average)"' "$OUT/summary.json"
if command -v gnuplot >/dev/null; then
  jq -r '.settings | to_entries[] | select(.value.failed | not)
         | "\(.key) \(.value.setting) \(.value.final_loss) \(.value.bytes_per_peer_per_sample)"' \
    "$OUT/summary.json" > "$OUT/curve.dat"
  gnuplot -e "set terminal pngcairo size 1000,500 noenhanced; set output '$OUT/curve.png';
    set style fill solid 0.6; set boxwidth 0.4; set xtics rotate by -45; set ylabel 'final loss';
    set y2label 'bytes per peer per sample (log)'; set y2tics; set logscale y2;
    set title 'tiny model, $PEERS peers, $SAMPLES samples: DeDLOC vs local steps';
    plot '$OUT/curve.dat' using (\$1-0.2):3:xtic(2) with boxes title 'final loss',
         '' using (\$1+0.2):4 axes x1y2 with boxes title 'bytes/peer/sample'" 2>/dev/null ||
    echo "local_steps_curve: gnuplot failed; no PNG" >&2
else
  echo "local_steps_curve: gnuplot not installed; no PNG" >&2
fi
[ "$JSON" = 1 ] && jq -c . "$OUT/summary.json"
exit 0
