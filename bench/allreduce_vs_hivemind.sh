#!/usr/bin/env bash
# dedloc's averaging round beside hivemind's on loopback, the two programs
# alternating (dedloc, hivemind, dedloc, hivemind, ...) so that both see the
# same machine.
#
#   bench/allreduce_vs_hivemind.sh --python VENV/bin/python [--peers 4] [--size 18000000]
#                                  [--compression fp16] [--rounds 3] [--reps 2] [--json]
#
# --python names an interpreter with hivemind 1.1.12 and torch (see
# scripts/bench_hivemind_allreduce.py); nothing of it is needed to build or
# test dedloc. Each rep runs `dedloc bench allreduce` with every upload
# declared at 100 Gbit/s (far above what loopback carries between these
# processes: no cap in effect) and then scripts/bench_hivemind_allreduce.py
# with the same peers, size, codec and rounds. Per round and program, the
# slowest member's time two ways: the all-reduce alone (from the formed
# group to the result) and with matchmaking (from asking for a group to the
# result: dedloc's total_s, hivemind's matchmaking_s + allreduce_s). Prints
# a row per rep (median round of each program, ratio hivemind / dedloc, load
# average before and after) and the range of the ratios; --json one object.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="" PEERS=4 SIZE=18000000 CODEC=fp16 ROUNDS=3 REPS=2 JSON=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --peers) PEERS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --compression) CODEC="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "allreduce_vs_hivemind.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$PY" ] || { echo "allreduce_vs_hivemind.sh: --python PATH is required: an interpreter with hivemind" >&2; exit 2; }
"$PY" -c 'import torch, hivemind' 2>/dev/null ||
  { echo "allreduce_vs_hivemind.sh: $PY cannot import torch and hivemind" >&2; exit 2; }
[ -x build/dedloc ] || { echo "allreduce_vs_hivemind.sh: build/dedloc is missing: run ./scripts/setup.sh" >&2; exit 2; }
command -v jq >/dev/null || { echo "allreduce_vs_hivemind.sh: jq is missing" >&2; exit 2; }
for n in "$PEERS" "$SIZE" "$ROUNDS" "$REPS"; do
  case "$n" in ''|*[!0-9]*) echo "allreduce_vs_hivemind.sh: '$n' is not a whole number" >&2; exit 2 ;; esac
done
. scripts/env.sh
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "null"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-vs-hivemind.XXXXXX")
trap 'rm -rf "$W"' EXIT

rows=()
for rep in $(seq 1 "$REPS"); do
  l0=$(load)
  build/dedloc bench allreduce --peers "$PEERS" --size "$SIZE" --compression "$CODEC" --bandwidths 100000 \
    --rounds "$ROUNDS" --json >"$W/dedloc.json" 2>"$W/dedloc.err" ||
    { echo "allreduce_vs_hivemind.sh: dedloc bench allreduce failed:" >&2; tail -5 "$W/dedloc.err" >&2; exit 1; }
  # per round: the slowest member, all-reduce alone and with matchmaking
  d_ar=$(jq '.[] | [.peers[] | select(.status == "ok") | .allreduce_s] | max' "$W/dedloc.json" | median)
  d_mm=$(jq '.[] | [.peers[] | select(.status == "ok") | .total_s] | max' "$W/dedloc.json" | median)
  "$PY" scripts/bench_hivemind_allreduce.py --peers "$PEERS" --elements "$SIZE" --compression "$CODEC" \
    --rounds "$ROUNDS" >"$W/hivemind.jsonl" 2>"$W/hivemind.err" ||
    { echo "allreduce_vs_hivemind.sh: the hivemind side failed:" >&2; tail -5 "$W/hivemind.err" >&2; exit 1; }
  h_ar=$(jq -s "[range($ROUNDS) as \$r | [.[] | select(.round == \$r and .ok) | .allreduce_s] | max] | .[]" \
    "$W/hivemind.jsonl" | median)
  h_mm=$(jq -s "[range($ROUNDS) as \$r | [.[] | select(.round == \$r and .ok) | .matchmaking_s + .allreduce_s] | max] | .[]" \
    "$W/hivemind.jsonl" | median)
  l1=$(load)
  rows+=("$rep $d_ar $h_ar $d_mm $h_mm $l0 $l1")
done
hm_v=$("$PY" -c 'import hivemind; print(hivemind.__version__)' 2>/dev/null)
torch_v=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

if [ "$JSON" = 1 ]; then
  printf '{"bench": "allreduce_vs_hivemind", "peers": %s, "size": %s, "compression": "%s", "rounds": %s, "hivemind": "%s", "torch": "%s", "reps": [' \
    "$PEERS" "$SIZE" "$CODEC" "$ROUNDS" "$hm_v" "$torch_v"
  sep=""
  for row in "${rows[@]}"; do
    set -- $row
    printf '%s{"rep": %s, "dedloc_allreduce_s": %s, "hivemind_allreduce_s": %s, "dedloc_with_matchmaking_s": %s, "hivemind_with_matchmaking_s": %s, "load_before": %s, "load_after": %s}' \
      "$sep" "$1" "$2" "$3" "$4" "$5" "$6" "$7"
    sep=", "
  done
  printf ']}\n'
else
  echo "$PEERS peers, $SIZE elements, $CODEC, $ROUNDS rounds a run (median round shown); hivemind $hm_v, torch $torch_v"
  printf '%4s %12s %12s %7s %14s %14s %7s %12s\n' rep "dedloc s" "hivemind s" ratio "dedloc+mm s" "hivemind+mm s" ratio load
  for row in "${rows[@]}"; do
    set -- $row
    printf '%4s %12.3f %12.3f %6sx %14.3f %14.3f %6sx %12s\n' "$1" "$2" "$3" "$(ratio "$3" "$2")" "$4" "$5" \
      "$(ratio "$5" "$4")" "$6-$7"
  done
  echo "ratio: hivemind time / dedloc time (above 1: dedloc faster); mm: matchmaking included"
fi
