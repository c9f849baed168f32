#!/usr/bin/env bash
# Training under attack (docs/collab_training.md, "Robust aggregation"): 8
# tiny-model trainers on loopback, 4 samples each (32 per step), against
# one peer fed the whole batch of 32 (the clean reference). Runs:
#   clean-mean   8 honest trainers, --aggregation mean
#   clean-noaudit the same, every peer skipping accountable aggregation's
#                checks (--test-misbehave skip-audit): what the checks cost
#   clean-clip   8 honest trainers, centered-clip (tau 10, ban after 3 rounds)
#   clean-clip-nospot the same without spot disclosure (--test-misbehave
#                skip-spot): what the spot checks cost
#   attack-clip  the same with 3 attackers: peer 5 sends its gradient x -1000,
#                peer 6 uniform noise, peer 7 sends x -1000 and, as an
#                aggregator, signs results -1000 times the average
#                (--test-attack, --test-misbehave result-scale; another of
#                round.h's misbehaviours with MISBEHAVE=, e.g. own-claim)
#                or, with PAIR=1, peer 5 sign-flip and a colluding pair: peer
#                6 scales its part by -1000 (collude), peer 7 covers it
#                with false projections (cover)
# and prints, per run, the mean loss of the last W steps against the clean
# reference's, the wall time (every peer done) and the seconds per step, and
# honest_s, the time until the five honest peers are done; then a JSON line.
# Needs a test-hook build (scripts/setup.sh builds one).
#   bench/attack_curve.sh [DEDLOC_BINARY]     (STEPS=20 W=5 by default;
#   RUNS="ac" runs the attacked swarm alone, beside the clean reference)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$SRC/build/dedloc}
STEPS=${STEPS:-20}
W=${W:-5}
CORPUS=$SRC/tests/fixtures/text/corpus_bn_sample.txt
command -v jq >/dev/null || { echo "jq is missing"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-attack-curve.XXXXXX")
declare -A PID=()
cleanup() {
  for p in "${PID[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

SCHED=(--lr 0.1 --warmup-steps $((STEPS / 10 > 0 ? STEPS / 10 : 1)) --total-steps "$STEPS")
COMMON=(--model tiny --data "$CORPUS" --seq 32 --batch 4 --shuffle-buffer 100 --seed 1 --quiet "${SCHED[@]}")

now() { date +%s.%N; }

t0=$(now)
"$BIN" train "${COMMON[@]}" --target-batch 32 --max-steps "$STEPS" --log "$TMP/single.jsonl" 2>"$TMP/single.err"
single_s=$(echo "$(now) - $t0" | bc -l)

# swarm TAG AGGREGATION-OPTIONS... (ATTACK=1: peers 5, 6, 7 attack)
swarm() {
  local tag=$1; shift
  local first="" t0
  t0=$(now)
  for i in 0 1 2 3 4 5 6 7; do
    local bad=() peers=()
    if [ "${ATTACK:-0}" = 1 ]; then
      case $i in
        5) bad=(--test-attack sign-flip) ;;
        6) bad=(--test-attack noise) ;;
        7) bad=(--test-attack sign-flip --test-misbehave "${MISBEHAVE:-result-scale}") ;;
      esac
      # PAIR=1: peers 6 and 7 collude instead (6 scales its part by -1000
      # and hides its senders' chunks, 7 signs the claims that cover it)
      [ "${PAIR:-0}" = 1 ] && case $i in
        6) bad=(--test-misbehave collude) ;;
        7) bad=(--test-misbehave cover) ;;
      esac
    fi
    [ -n "$first" ] && peers=(--initial-peers "$first")
    : >"$TMP/$tag$i.err"
    "$BIN" train "${COMMON[@]}" --run-id "attack-curve-$tag-$$" --no-dht --expiry 6 --linger 3 \
      --listen 127.0.0.1:0 "${peers[@]}" --identity "$TMP/id$i" --target-batch 32 --local-batch 4 \
      --data-shard "$i/8" --min-peers 8 --max-steps "$STEPS" --log "$TMP/$tag$i.jsonl" "$@" "${bad[@]}" \
      >/dev/null 2>>"$TMP/$tag$i.err" &
    PID[$tag$i]=$!
    if [ -z "$first" ]; then
      for _ in $(seq 1800); do
        first=$(sed -nE 's/.*listening on (127\.0\.0\.1:[0-9]+).*/\1/p' "$TMP/${tag}0.err" | head -n 1)
        [ -n "$first" ] && break
        sleep 0.05
      done
      [ -n "$first" ] || { echo "${tag}0 did not report its address"; exit 1; }
    fi
  done
  # peers 0-4 are honest in every run: their end is what a user waits for
  # (an attacker may keep trying alone long after)
  for i in 0 1 2 3 4; do wait "${PID[$tag$i]}" || true; unset "PID[$tag$i]"; done
  echo "$(now) - $t0" | bc -l >"$TMP/$tag.honest_seconds"
  for i in 5 6 7; do wait "${PID[$tag$i]}" || true; unset "PID[$tag$i]"; done
  echo "$(now) - $t0" | bc -l >"$TMP/$tag.seconds"
}

RUNS=${RUNS:-cm cn cc ac}
for tag in $RUNS; do
  case $tag in
    cm) swarm cm --aggregation mean ;;
    cn) swarm cn --aggregation mean --test-misbehave skip-audit ;;
    cc) swarm cc --aggregation centered-clip --clip-tau 10 --clip-ban-rounds 3 ;;
    cs) swarm cs --aggregation centered-clip --clip-tau 10 --clip-ban-rounds 3 --test-misbehave skip-spot ;;
    ac) ATTACK=1 swarm ac --aggregation centered-clip --clip-tau 10 --clip-ban-rounds 3 ;;
    *) echo "RUNS: unknown run '$tag' (cm cn cc cs ac)"; exit 2 ;;
  esac
done

tail_loss() { jq -s "[.[] | select(.step) | (.loss // 1e30)] | .[-$W:] | add / length" "$1"; }
steps_of() { jq -s '[.[] | select(.step) | .step] | max // 0' "$1"; }
clean=$(tail_loss "$TMP/single.jsonl")
printf '%-12s %6s %10s %9s %8s %8s %9s\n' run steps loss vs_clean wall_s s/step honest_s
printf '%-12s %6s %10.4f %9s %8.1f %8.2f %9s\n' single "$(steps_of "$TMP/single.jsonl")" "$clean" "" "$single_s" \
  "$(echo "$single_s / $STEPS" | bc -l)" ""
misb=${MISBEHAVE:-result-scale}
[ "${PAIR:-0}" = 1 ] && misb="sign-flip, collude + cover"
json="{\"steps\":$STEPS,\"attacker_misbehaviour\":\"$misb\",\"window\":$W,\"clean_loss\":$clean,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\""
for tag in $RUNS; do
  loss=$(tail_loss "$TMP/${tag}0.jsonl")
  secs=$(cat "$TMP/$tag.seconds")
  honest=$(cat "$TMP/$tag.honest_seconds")
  rel=$(echo "($loss - $clean) / $clean * 100" | bc -l)
  case $tag in
    cm) name=clean-mean ;; cn) name=clean-noaudit ;; cc) name=clean-clip ;; cs) name=clean-clip-nospot ;;
    ac) name=attack-clip ;;
  esac
  printf '%-12s %6s %10.4f %+8.2f%% %8.1f %8.2f %9.1f\n' "$name" "$(steps_of "$TMP/${tag}0.jsonl")" "$loss" "$rel" \
    "$secs" "$(echo "$secs / $STEPS" | bc -l)" "$honest"
  # what the honest peers logged: liars caught, peers refused for clipping
  refusals=$(cat "$TMP/${tag}"[0-4].err | grep -cE "refusing peer|caught lying" || true)
  agree=$(for i in 0 1 2 3 4; do grep -o 'param_hash [0-9a-f]*' "$TMP/$tag$i.err" | tail -n 1; done | sort -u | wc -l)
  json+=",\"$name\":{\"loss\":$loss,\"wall_s\":$secs,\"honest_wall_s\":$honest,\"refusals\":$refusals,\"honest_final_hashes\":$agree}"
done
echo "$json}"
