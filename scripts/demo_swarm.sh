#!/usr/bin/env bash
# The swarm demo (scripts/demo.sh runs it after building): a local
# collaboration on loopback, an aux peer and N trainers (the second in fp16,
# the third in client mode) training the tiny ALBERT on the demo corpus, and
# a monitor serving the dashboard (its URL is printed at the start) and
# keeping checkpoints and a Hugging Face export of the swarm's state.
# Midway one trainer is killed (SIGKILL) and restarted with the same
# identity: it rejoins by downloading the state. At the end every peer is
# stopped at the same step, the loss curve is saved as a PNG and the peers'
# param_hash compared. Ctrl-C stops everything cleanly.
#   scripts/demo_swarm.sh CORPUS [--minutes N] [--peers N]
# Everything lands in build/demo-swarm/ (logs, checkpoints, loss.png, monitor.ckpt/,
# monitor.hf/).
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=$1; shift
MINUTES=3
PEERS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    *) echo "demo: unknown option $1 (--minutes N, --peers N, --single)"; exit 2 ;;
  esac
done
[[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "demo: --minutes takes a number"; exit 2; }
[[ "$PEERS" =~ ^[1-9][0-9]?$ ]] || { echo "demo: --peers takes 1..99"; exit 2; }
command -v jq >/dev/null || { echo "demo: jq is missing (scripts/setup.sh installs it)"; exit 1; }
BIN=build/dedloc
D=build/demo-swarm
rm -rf "$D"
mkdir -p "$D"
RUN="demo-$$"
# Micro-batches of 8 x 64 tokens, 48 samples per collective step: with three
# trainers a step is two micro-batches each, a few seconds on two cores.
TRAIN=(--model tiny --data "$CORPUS" --seq 64 --batch 8 --target-batch 48 --lr 0.02 --warmup-steps 10
       --total-steps 400 --max-steps 100000 --shuffle-buffer 50000 --seed 1 --save-every 20 --quiet)
NET=(--run-id "$RUN" --no-dht --listen 127.0.0.1:0 --expiry 8)
declare -A PID=()
BOOT=""

stop_all() {
  # SIGINT first: each peer saves the state of its last step and says goodbye.
  for n in "${!PID[@]}"; do kill -INT "${PID[$n]}" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=0
    for n in "${!PID[@]}"; do kill -0 "${PID[$n]}" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for n in "${!PID[@]}"; do kill -9 "${PID[$n]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PID=()
}
on_interrupt() {
  echo; echo "demo: stopping every peer"
  stop_all
  exit 130
}
trap on_interrupt INT TERM
trap stop_all EXIT

# peer NAME COMMAND ARGS...: one peer in the background, logs in $D/NAME.*
peer() {
  local name=$1; shift
  local boot=()
  [ -n "$BOOT" ] && boot=(--initial-peers "$BOOT")
  "$BIN" "$@" "${NET[@]}" "${boot[@]}" --identity "$D/$name.id" --log "$D/$name.jsonl" 2>>"$D/$name.err" &
  PID[$name]=$!
}

trainer_args() {
  case "$1" in
    1) echo "--precision fp16" ;;
    2) echo "--client-mode" ;;
    *) echo "" ;;
  esac
}

start_trainer() {
  local i=$1
  # shellcheck disable=SC2046
  peer "t$i" train "${TRAIN[@]}" --checkpoint-dir "$D/t$i.ckpt" $(trainer_args "$i")
}

echo "== Swarm demo: 1 aux peer + $PEERS trainers on 127.0.0.1 (run $RUN, $MINUTES min); logs in $D/"
peer aux aux --model tiny --seed 1 --target-batch 48 --max-steps 100000 --quiet
for _ in $(seq 200); do
  BOOT=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$D/aux.err" | head -n 1)
  [ -n "$BOOT" ] && break
  sleep 0.05
done
[ -n "$BOOT" ] || { echo "demo: the aux peer did not start:"; cat "$D/aux.err"; exit 1; }
echo "aux peer at $BOOT"
# The monitor: an observer (trains nothing) serving the dashboard on a free
# loopback port; it also keeps checkpoints and an export of the swarm's state.
"$BIN" monitor --run-id "$RUN" --no-dht --initial-peers "$BOOT" --listen-http 127.0.0.1:0 --expiry 8 \
  --target-batch 48 --identity "$D/monitor.id" --history "$D/monitor-history.jsonl" --sample-every 2 \
  --checkpoint-dir "$D/monitor.ckpt" --checkpoint-every 20 --export-dir "$D/monitor.hf" --export-every 50 \
  >"$D/monitor.out" 2>>"$D/monitor.err" &
PID[monitor]=$!
URL=""
for _ in $(seq 200); do
  URL=$(head -n 1 "$D/monitor.out" 2>/dev/null | jq -r '.http // empty' 2>/dev/null || true)
  [ -n "$URL" ] && break
  sleep 0.05
done
if [ -n "$URL" ]; then
  echo "== Dashboard: $URL (open it in a browser; live loss, peers, contributors)"
else
  echo "demo: the monitor did not start (see $D/monitor.err); training goes on without it"
fi
for i in $(seq 0 $((PEERS - 1))); do
  start_trainer "$i"
  echo "trainer t$i started $(trainer_args "$i")"
done

latest() { { tail -n 50 "$D/t0.jsonl" | jq -c 'select(.step)' | tail -n 1; } 2>/dev/null || true; }
max_step() { cat "$D"/t*.jsonl 2>/dev/null | jq -s '[.[] | select(.step) | .step] | max // 0' 2>/dev/null || echo 0; }

TOTAL=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
KILL_AT=$((TOTAL / 2))
VICTIM=$((PEERS > 1 ? 1 : 0))
START=$(date +%s)
killed=0
echo "    time  step    loss  peers  samples/s"
while :; do
  now=$(( $(date +%s) - START ))
  [ "$now" -ge "$TOTAL" ] && break
  line=$(latest)
  if [ -n "$line" ]; then
    echo "$line" | jq -r --arg t "$(printf '%3d:%02d' $((now / 60)) $((now % 60)))" \
      '"  \($t)  \(.step | tostring | (" " * (4 - length)) + .)  \(.loss * 1000 | round / 1000)  \(.members | length | tostring | (" " * (5 - length)) + .)  \(.samples_per_second * 10 | round / 10)"'
  fi
  if [ $killed = 0 ] && [ "$now" -ge "$KILL_AT" ] && [ "$PEERS" -gt 1 ]; then
    echo "== Killing trainer t$VICTIM (SIGKILL): its un-averaged samples are lost, the others go on"
    kill -9 "${PID[t$VICTIM]}" 2>/dev/null || true
    wait "${PID[t$VICTIM]}" 2>/dev/null || true
    unset "PID[t$VICTIM]"
    sleep 3
    echo "== Restarting t$VICTIM with the same identity: it downloads the state and rejoins"
    start_trainer "$VICTIM"
    killed=1
  fi
  if [ $killed = 1 ] && jq -e -s 'any(.[]; .event == "download")' "$D/t$VICTIM.jsonl" >/dev/null 2>&1; then
    jq -r -s '[.[] | select(.event == "download")] | last | "== t'"$VICTIM"' rejoined: \(.detail)"' "$D/t$VICTIM.jsonl"
    killed=2
  fi
  sleep 5
done

# Stop every peer at the same step: right after all trainers logged it, while
# they accumulate the next one (a round takes a fraction of a step).
echo "== Stopping the swarm at a step boundary"
target=$(max_step)
for _ in $(seq 600); do
  all=1
  for i in $(seq 0 $((PEERS - 1))); do
    s=$(jq -s '[.[] | select(.step) | .step] | max // 0' "$D/t$i.jsonl" 2>/dev/null || echo 0)
    [ "$s" -gt "$target" ] && target=$s && all=0
    [ "$s" -lt "$target" ] && all=0
  done
  [ $all = 1 ] && break
  sleep 0.1
done
stop_all
trap - EXIT

ck=$(ls "$D/monitor.ckpt" 2>/dev/null | tail -n 1 || true)
if [ -n "$ck" ]; then
  echo "== The monitor's newest checkpoint of the swarm: $D/monitor.ckpt/$ck"
  echo "   (build/dedloc train --resume it, with the run's --lr/--warmup-steps/--total-steps, to go on alone)"
fi

echo "== Loss curve"
jq -r 'select(.step) | "\(.step) \(.loss)"' "$D/t0.jsonl" | sort -n -u -k1,1 > "$D/loss.txt"
if command -v gnuplot >/dev/null; then
  gnuplot -e "set terminal pngcairo size 800,500 noenhanced; set output '$D/loss.png'; \
    set title 'dedloc swarm demo: collective loss (tiny ALBERT, $PEERS trainers + aux)'; \
    set xlabel 'step'; set ylabel 'loss (MLM + SOP)'; set grid; \
    plot '$D/loss.txt' using 1:2 with lines lw 2 title 'loss'" 2>/dev/null ||
  gnuplot -e "set terminal png size 800,500; set output '$D/loss.png'; set xlabel 'step'; set ylabel 'loss'; \
    plot '$D/loss.txt' using 1:2 with lines title 'loss'"
  echo "saved $D/loss.png ($(wc -l < "$D/loss.txt") steps)"
else
  echo "gnuplot is missing (scripts/setup.sh installs it): the curve is in $D/loss.txt"
fi
awk 'NR == 1 { a = $2 } { b = $2; n = $1 } END { printf "loss %.3f at step 1 -> %.3f at step %d\n", a, b, n }' "$D/loss.txt"

echo "== Param hash of every peer"
# At the last step every trainer logged (one may have stopped a step later
# than another), each trainer's logged param_hash must be the same.
common=""
for i in $(seq 0 $((PEERS - 1))); do
  s=$(jq -s '[.[] | select(.step) | .step] | max // 0' "$D/t$i.jsonl" 2>/dev/null || echo 0)
  if [ -z "$common" ] || [ "$s" -lt "$common" ]; then common=$s; fi
done
declare -A HASHES=()
for i in $(seq 0 $((PEERS - 1))); do
  h=$(jq -r -s "[.[] | select(.step == $common) | .param_hash] | last // \"?\"" "$D/t$i.jsonl" 2>/dev/null || echo "?")
  echo "t$i: step $common param_hash $h"
  HASHES["$h"]=1
done
if [ "${#HASHES[@]}" = 1 ] && [ "$common" -gt 0 ] && [ -z "${HASHES[?]:-}" ]; then
  echo "OK: all $PEERS trainers hold the same param_hash at step $common (${h:0:16}...)"
else
  echo "MISMATCH: the trainers do not all hold the same weights at step $common"
  exit 1
fi
