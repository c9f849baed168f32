#!/usr/bin/env bash
# The loss curve of the tiny recipe over a long run: `dedloc train --model tiny`
# with the preset's optimizer defaults (LAMB, warmup over a tenth of the run,
# linear decay to zero at the last step) for --steps steps on the demo corpus,
# one peer, no network. Records every step and says whether the run diverged.
#   bench/recipe_curve.sh [--steps 3000] [--data SOURCE] [--out DIR] [--json] [-- TRAIN_OPTIONS...]
# Default data: build/corpus/bn.txt (scripts/make_corpus_bn.sh), else the
# committed sample. Default shape: scripts/demo.sh's (micro-batches of 8 x 64
# tokens, 16 samples a step, a shuffle buffer of 50000, seed 1); options
# after -- go to `dedloc train` as they are (e.g. -- --seq 128 --target-batch 32
# for train's own defaults, or -- --lr 0.1 --warmup-steps 300 for the former
# recipe at 3000 steps).
# Writes into --out (default build/recipe-curve): train.jsonl (the step log),
# curve.csv (step,loss,mlm_loss,sop_loss,lr,grad_norm), summary.json, and
# curve.png when gnuplot is installed. Prints a summary table; --json also
# prints summary.json's line. "Diverged" means the run stopped with an error,
# or its mean loss over the last 50 steps is above its mean over the first 50,
# or a loss-rise warning was logged.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
STEPS=3000; DATA=""; OUT=build/recipe-curve; JSON=0; EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "recipe_curve: unknown option $1"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "recipe_curve: jq is missing"; exit 1; }
if [ -z "$DATA" ]; then
  DATA=build/corpus/bn.txt
  [ -s "$DATA" ] || DATA=tests/fixtures/text/corpus_bn_sample.txt
fi
mkdir -p "$OUT"
rm -f "$OUT/train.jsonl" "$OUT/curve.csv" "$OUT/summary.json" "$OUT/curve.png"
CMD=("$BIN" train --model tiny --data "$DATA" --seq 64 --batch 8 --target-batch 16 --shuffle-buffer 50000 --seed 1
     --max-steps "$STEPS" --save-every 0 --log "$OUT/train.jsonl" --quiet "${EXTRA[@]}")
echo "recipe_curve: ${CMD[*]}" >&2
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
START=$(date +%s)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
STATUS=0
"${CMD[@]}" 2> "$OUT/train.err" || STATUS=$?
ELAPSED=$(( $(date +%s) - START ))
LOAD_END=$(cut -d' ' -f1 /proc/loadavg)
touch "$OUT/train.jsonl"
echo "step,loss,mlm_loss,sop_loss,lr,grad_norm" > "$OUT/curve.csv"
jq -r 'select(.step != null) | [.step, .loss, .mlm_loss, .sop_loss, .lr, .grad_norm] | @csv' "$OUT/train.jsonl" >> "$OUT/curve.csv"
ERROR=""
if [ "$STATUS" != 0 ]; then ERROR=$(grep -v '^\s*$' "$OUT/train.err" | tail -n 1 || true); fi
jq -s --arg cmd "${CMD[*]}" --arg started "$STARTED" --arg finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg error "$ERROR" \
      --argjson status "$STATUS" --argjson elapsed "$ELAPSED" --argjson steps "$STEPS" \
      --arg load "$LOAD_START -> $LOAD_END" '
  def mean: if length > 0 then add / length else null end;
  (map(select(.step != null))) as $r
  | ($r | map(.loss)) as $l
  | {command: $cmd, started: $started, finished: $finished, load_average: $load, elapsed_s: $elapsed, steps_asked: $steps,
     steps_done: ($r | length), exit_status: $status, error: $error,
     first_loss: ($l[0]), final_loss: ($l[-1]), min_loss: ($l | min), max_loss: ($l | max),
     max_loss_step: (if ($r | length) > 0 then ($r | max_by(.loss) | .step) else null end),
     mean_first_50: ($l[0:50] | mean), mean_last_50: ($l[-50:] | mean),
     max_grad_norm: ($r | map(.grad_norm) | max), peak_lr: ($r | map(.lr) | max),
     warnings: ($r | map(select(.warning != null) | {step, warning}))}
  | .diverged = (.exit_status != 0 or (.warnings | length) > 0
                 or (.mean_last_50 != null and .mean_last_50 > .mean_first_50))' \
  "$OUT/train.jsonl" > "$OUT/summary.json"
if command -v gnuplot >/dev/null && [ "$(wc -l < "$OUT/curve.csv")" -gt 2 ]; then
  gnuplot -e "set terminal pngcairo size 900,500 noenhanced; set output '$OUT/curve.png';
    set datafile separator ','; set key autotitle columnhead; set xlabel 'step'; set ylabel 'loss';
    set y2label 'lr'; set y2tics; set logscale y;
    set title 'tiny recipe, $STEPS steps ($DATA)';
    plot '$OUT/curve.csv' using 1:2 with lines title 'loss', '' using 1:5 axes x1y2 with lines title 'lr'" \
    2>/dev/null || echo "recipe_curve: gnuplot failed; no PNG" >&2
fi
jq -r '"| steps | first loss | final loss | min loss | max loss (step) | peak lr | max grad norm | diverged |",
       "|---|---|---|---|---|---|---|---|",
       "| \(.steps_done)/\(.steps_asked) | \(.first_loss) | \(.final_loss) | \(.min_loss) | \(.max_loss) (\(.max_loss_step)) | \(.peak_lr) | \(.max_grad_norm) | \(.diverged) |"' \
  "$OUT/summary.json"
[ -n "$ERROR" ] && echo "error: $ERROR"
echo "elapsed ${ELAPSED}s, load average $LOAD_START -> $LOAD_END; files in $OUT"
if [ "$JSON" = 1 ]; then jq -c . "$OUT/summary.json"; fi
