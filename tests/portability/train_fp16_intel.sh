#!/usr/bin/env bash
# `dedloc train --precision fp16` on Intel's OpenCL CPU runtime (native half
# GEMMs) beside the same run on the system's OpenCL (PoCL: fp16 storage,
# fp32 arithmetic), 30 steps of the tiny model on the same data:
# - the loss scale stays sane on Intel: at least 2^12 at every step (it
#   starts at 2^16 and halves once per dropped micro-batch; a broken half
#   product makes every micro-batch non-finite and drove it to 1e-38);
# - Intel's loss over steps 21-30 is within 1% of PoCL's. The mean of ten
#   steps, since a single step's loss (8 sequences) moves by about 1% with
#   the rounding of half products alone.
#   train_fp16_intel.sh DEDLOC INTEL_RUNTIME_DIR DATA
set -uo pipefail
dedloc=$1 intel=$2 data=$3
here=$(dirname "$0")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v jq >/dev/null || { echo "SKIP: jq is needed"; exit 77; }
args=(train --model tiny --data "$data" --batch 4 --seq 32 --target-batch 8 --seed 3
      --shuffle-buffer 64 --max-steps 30 --precision fp16 --quiet)
# A broken half product drops every micro-batch, and the run then never
# reaches a step: bounded (it takes about 90 s on two loaded cores).
timeout 600 "$here/on_intel.sh" "$intel" "$dedloc" "${args[@]}" --log "$work/intel.jsonl" 2>"$work/intel.err"
rc=$?
[ $rc -eq 77 ] && { cat "$work/intel.err"; exit 77; }
[ $rc -eq 124 ] && { echo "FAIL: the Intel run made $(wc -l < "$work/intel.jsonl") of 30 steps in 600 s"; tail -5 "$work/intel.err"; exit 1; }
[ $rc -ne 0 ] && { echo "FAIL: the Intel run exited with $rc:"; cat "$work/intel.err"; exit 1; }
"$dedloc" "${args[@]}" --log "$work/pocl.jsonl" 2>"$work/pocl.err" ||
  { echo "FAIL: the run on the system's OpenCL failed:"; cat "$work/pocl.err"; exit 1; }
grep -q "GEMMs compute in fp16" "$work/intel.err" ||
  { echo "FAIL: the Intel run did not compute in half:"; cat "$work/intel.err"; exit 1; }
min_scale=$(jq -s 'map(.loss_scale) | min' "$work/intel.jsonl")
steps=$(jq -s 'length' "$work/intel.jsonl")
intel_loss=$(jq -s 'map(select(.step > 20)) | map(.loss) | add / length' "$work/intel.jsonl")
pocl_loss=$(jq -s 'map(select(.step > 20)) | map(.loss) | add / length' "$work/pocl.jsonl")
echo "Intel fp16: $steps steps, smallest loss scale $min_scale, mean loss of steps 21-30 $intel_loss"
echo "PoCL fp16:  mean loss of steps 21-30 $pocl_loss"
fail=0
[ "$steps" -eq 30 ] || { echo "FAIL: $steps steps logged, 30 expected"; fail=1; }
jq -e -n "$min_scale >= 4096" >/dev/null || { echo "FAIL: the loss scale fell to $min_scale"; fail=1; }
jq -e -n "($intel_loss - $pocl_loss | fabs) <= 0.01 * $pocl_loss" >/dev/null ||
  { echo "FAIL: the losses differ by more than 1%"; fail=1; }
exit $fail
