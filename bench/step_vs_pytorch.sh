#!/usr/bin/env bash
# dedloc's training step beside PyTorch's on the same CPU, the two programs
# alternating so that both see the same machine (see bench/RESULTS.md, "Side
# by side with current PyTorch").
#
#   bench/step_vs_pytorch.sh --python VENV/bin/python [--model tiny|sahajbert]
#                            [--batch 8] [--seq 128] [--rounds 3] [--steps N]
#                            [--warmup 1] [--threads N] [--modes fp32,bf16] [--json]
#
# --python names an interpreter with torch and transformers (e.g. a venv made
# with `python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch
# transformers`); nothing of it is needed to build or test dedloc. Each round
# runs `dedloc bench step` then scripts/bench_pytorch_step.py with the same
# model, shape, warm-up and step count; every core for both unless --threads
# (then OPENBLAS_NUM_THREADS for dedloc, --threads for PyTorch). Prints one
# row per round (median step of each program, its ratio, the load average)
# and the median ratio; --json prints the rows as one JSON object instead.
# --modes (default fp32) lists the precisions to compare, each run in every
# round, alternating: fp32 is dedloc fp32 beside PyTorch eager fp32; bf16 is
# `dedloc bench step --precision bf16` (bf16 compute where the CPU has
# AVX512-BF16; the row says which compute ran) beside PyTorch's
# torch.autocast("cpu", dtype=torch.bfloat16).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="" MODEL=tiny BATCH=8 SEQ=128 ROUNDS=3 STEPS="" WARMUP=1 THREADS="" MODES=fp32 JSON=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "step_vs_pytorch.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$PY" ] || { echo "step_vs_pytorch.sh: --python PATH is required: an interpreter with torch and transformers" >&2; exit 2; }
"$PY" -c 'import torch, transformers' 2>/dev/null ||
  { echo "step_vs_pytorch.sh: $PY cannot import torch and transformers" >&2; exit 2; }
[ -x build/dedloc ] || { echo "step_vs_pytorch.sh: build/dedloc is missing: run ./scripts/setup.sh" >&2; exit 2; }
for n in "$BATCH" "$SEQ" "$ROUNDS" "$WARMUP" ${STEPS:+"$STEPS"} ${THREADS:+"$THREADS"}; do
  case "$n" in ''|*[!0-9]*) echo "step_vs_pytorch.sh: '$n' is not a whole number" >&2; exit 2 ;; esac
done
for mode in ${MODES//,/ }; do
  case "$mode" in fp32|bf16) ;; *) echo "step_vs_pytorch.sh: --modes takes fp32 and bf16, got '$mode'" >&2; exit 2 ;; esac
done
# Enough timed steps for a median without making a sahajbert round take minutes.
[ -n "$STEPS" ] || { [ "$MODEL" = tiny ] && STEPS=15 || STEPS=2; }
. scripts/env.sh

dl_env=() py_threads=()
if [ -n "$THREADS" ]; then dl_env=(env "OPENBLAS_NUM_THREADS=$THREADS"); py_threads=(--threads "$THREADS"); fi
field() { sed -n "s/.*\"$1\": \\([0-9.e+-]*\\).*/\\1/p"; }
load() { cut -d' ' -f1 /proc/loadavg; }

str_field() { sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p"; }

rows=()
declare -A ratios=()
for r in $(seq 1 "$ROUNDS"); do
  for mode in ${MODES//,/ }; do
    autocast=off; [ "$mode" = bf16 ] && autocast=bf16
    l0=$(load)
    d=$("${dl_env[@]}" build/dedloc bench step --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --precision "$mode" \
          --warmup "$WARMUP" --steps "$STEPS" --json 2>/dev/null | grep '"bench": "step"')
    p=$("$PY" scripts/bench_pytorch_step.py --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --autocast "$autocast" \
          --warmup "$WARMUP" --steps "$STEPS" "${py_threads[@]}" --json 2>/dev/null | tail -1)
    l1=$(load)
    ds=$(echo "$d" | field step_s) ps=$(echo "$p" | field step_seconds)
    share=$(echo "$d" | field share_of_sgemm) compute=$(echo "$d" | str_field compute)
    ratio=$(awk -v a="$ps" -v b="$ds" 'BEGIN { printf "%.3f", a / b }')
    ratios[$mode]+="$ratio "
    rows+=("$r $mode ${compute:-?} $autocast $ds $ps $ratio $share $l0 $l1")
  done
done
torch_v=$(echo "$p" | sed -n 's/.*"torch": "\([^"]*\)".*/\1/p')
tf_v=$(echo "$p" | sed -n 's/.*"transformers": "\([^"]*\)".*/\1/p')
median_of() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [ "$JSON" = 1 ]; then
  printf '{"bench": "step_vs_pytorch", "model": "%s", "batch": %s, "seq": %s, "steps": %s, "threads": "%s", "torch": "%s", "transformers": "%s", "median_ratio": {' \
    "$MODEL" "$BATCH" "$SEQ" "$STEPS" "${THREADS:-all}" "$torch_v" "$tf_v"
  sep=""
  for mode in ${MODES//,/ }; do printf '%s"%s": %s' "$sep" "$mode" "$(median_of "${ratios[$mode]}")"; sep=", "; done
  printf '}, "rounds": ['
  sep=""
  for row in "${rows[@]}"; do
    set -- $row
    printf '%s{"round": %s, "mode": "%s", "dedloc_compute": "%s", "pytorch_autocast": "%s", "dedloc_step_s": %s, "pytorch_step_s": %s, "dedloc_faster_by": %s, "dedloc_share_of_sgemm": %s, "load_before": %s, "load_after": %s}' \
      "$sep" "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}"
    sep=", "
  done
  printf ']}\n'
else
  echo "$MODEL $BATCH x $SEQ, $STEPS timed steps after $WARMUP, threads: ${THREADS:-all}; PyTorch $torch_v, transformers $tf_v"
  printf '%5s %5s %8s %9s %12s %12s %10s %12s %12s\n' round mode "compute" "autocast" "dedloc s" "PyTorch s" "faster by" "GEMM share" "load"
  for row in "${rows[@]}"; do
    set -- $row
    printf '%5s %5s %8s %9s %12.4f %12.4f %9sx %12s %12s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9-${10}"
  done
  for mode in ${MODES//,/ }; do
    echo "median, $mode: dedloc faster by $(median_of "${ratios[$mode]}")x (PyTorch step / dedloc step; below 1: slower)"
  done
fi
