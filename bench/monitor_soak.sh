#!/usr/bin/env bash
# The monitor's memory over a long run: a local swarm of trainers with
# synthetic compute (a micro-batch sleeps, the gradient is full-size and
# pseudo-random: the network and the step loop run for real, the CPU stays
# free) on the tiny ALBERT, and a `dedloc monitor` beside it that samples
# fast (a history point every second, the fastest it samples; a small
# --history-points so the downsampling and the file's rewrites happen within
# minutes) and keeps
# checkpoints and exports of the swarm's state. Every --every seconds the
# script reads the monitor's RSS (VmRSS, and its peak VmHWM, /proc) and from
# /api/status the global step, the history's points in memory, the history
# file's lines and rewrites and the state downloads done (each one a
# checkpoint, an export or both); /api/history and /
# are fetched too, as a browser would. Prints a table, or JSON with --json.
#   bench/monitor_soak.sh [--minutes M] [--peers N] [--every S] [--sample-every S]
#                         [--history-points N] [--synthetic-compute S] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
MINUTES=4; PEERS=2; EVERY=15; SAMPLE=1; POINTS=32; SYN=0.05; JSON=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --sample-every) SAMPLE=$2; shift 2 ;;
    --history-points) POINTS=$2; shift 2 ;;
    --synthetic-compute) SYN=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "monitor_soak: unknown option $1"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "monitor_soak: jq is missing (scripts/setup.sh installs it)"; exit 1; }
[ -x "$BIN" ] || { echo "monitor_soak: $BIN is missing (./scripts/setup.sh builds it)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-monitor-soak.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
RUN="soak-$$"
boot=""
for i in $(seq 0 $((PEERS - 1))); do
  extra=(); [ -n "$boot" ] && extra=(--initial-peers "$boot")
  "$BIN" train --model tiny --synthetic-compute "$SYN" --batch 8 --target-batch $((16 * PEERS)) --max-steps 1000000 \
    --lr 0.01 --warmup-steps 1 --quiet --run-id "$RUN" --no-dht --listen 127.0.0.1:0 --expiry 10 \
    --peer-seed "$i" "${extra[@]}" --log "$W/t$i.jsonl" 2>"$W/t$i.err" &
  PIDS+=($!)
  if [ -z "$boot" ]; then
    for _ in $(seq 600); do
      boot=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$W/t$i.err" | head -n 1)
      [ -n "$boot" ] && break; sleep 0.05
    done
    [ -n "$boot" ] || { echo "monitor_soak: the first trainer did not start:"; tail -n 5 "$W/t$i.err"; exit 1; }
  fi
done
"$BIN" monitor --run-id "$RUN" --initial-peers "$boot" --no-dht --listen-http 127.0.0.1:0 --expiry 10 \
  --history "$W/history.jsonl" --history-points "$POINTS" --sample-every "$SAMPLE" \
  --checkpoint-dir "$W/ckpt" --checkpoint-every 25 --keep 2 --export-dir "$W/hf" --export-every 100 \
  >"$W/mon.out" 2>"$W/mon.err" &
MON=$!
PIDS+=("$MON")
port=""
for _ in $(seq 200); do
  port=$(head -n 1 "$W/mon.out" 2>/dev/null | jq -r '.http_port // empty' 2>/dev/null || true)
  [ -n "$port" ] && break; sleep 0.05
done
[ -n "$port" ] || { echo "monitor_soak: the monitor did not start:"; tail -n 5 "$W/mon.err"; exit 1; }

# get PATH: the body of an HTTP GET to the monitor (bash's /dev/tcp, no client program).
get() {
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  sed '1,/^\r*$/d' <&3
  exec 3>&- 3<&-
}
kib() { awk -v k="$1" '$1 == k ":" { print $2 }' "/proc/$MON/status"; }

START=$(date +%s)
TOTAL=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
rows=()
[ "$JSON" = 1 ] || printf '%6s %6s %9s %9s %7s %10s %8s %6s\n' time_s step rss_kib peak_kib points file_lines rewrites fetches
while :; do
  now=$(( $(date +%s) - START ))
  get /api/history >/dev/null || true
  get / >/dev/null || true
  st=$(get /api/status || true)
  rss=$(kib VmRSS); hwm=$(kib VmHWM)
  row=$(jq -c --argjson t "$now" --argjson rss "$rss" --argjson hwm "$hwm" \
    '{time_s: $t, step: .global_epoch, rss_kib: $rss, peak_rss_kib: $hwm, history_points: .history.points,
      history_file_lines: .history.file_lines, history_rewrites: .history.rewrites,
      fetches: (.snapshots.fetches // 0), checkpoint_epoch: (.snapshots.checkpoint.epoch // 0)}' <<<"$st" 2>/dev/null ||
    echo "{\"time_s\": $now, \"rss_kib\": $rss, \"peak_rss_kib\": $hwm}")
  rows+=("$row")
  [ "$JSON" = 1 ] || jq -r '"\(.time_s) \(.step) \(.rss_kib) \(.peak_rss_kib) \(.history_points) \(.history_file_lines) \(.history_rewrites) \(.fetches)"' <<<"$row" |
    awk '{ printf "%6s %6s %9s %9s %7s %10s %8s %6s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
  [ "$now" -ge "$TOTAL" ] && break
  sleep "$EVERY"
done
kill -0 "$MON" 2>/dev/null || { echo "monitor_soak: the monitor died:"; tail -n 5 "$W/mon.err"; exit 1; }
file_bytes=$(stat -c %s "$W/history.jsonl")
if [ "$JSON" = 1 ]; then
  printf '%s\n' "${rows[@]}" | jq -s -c --argjson peers "$PEERS" --argjson points "$POINTS" --arg sample "$SAMPLE" \
    --argjson bytes "$file_bytes" '{bench: "monitor_soak", peers: $peers, history_points_max: $points,
      sample_every_s: ($sample | tonumber), history_file_bytes: $bytes, samples: .}'
else
  echo "history file at the end: $file_bytes bytes; monitor errors: $(grep -c ERROR "$W/mon.err" || true)"
fi
