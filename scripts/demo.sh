#!/usr/bin/env bash
# Installs, builds, lists the OpenCL devices, then starts a local swarm on
# loopback: an aux peer and three trainers (one in fp16, one in client mode)
# train the tiny ALBERT on the demo Bengali corpus together; midway one
# trainer is killed and restarted and rejoins by downloading the state; the
# loss curve is saved as a PNG and every peer's param_hash compared
# (scripts/demo_swarm.sh, output in build/demo-swarm/). A monitor serves the
# dashboard beside the swarm: its URL (127.0.0.1, a free port) comes first.
#   ./scripts/demo.sh [--minutes N] [--peers N]     (3 minutes, 3 trainers)
#   ./scripts/demo.sh --single                       (the single-peer demo below)
#   ./scripts/demo.sh --help                         (this text)
# The single-peer demo trains the tiny ALBERT for a few minutes on this machine
# (one peer, no network) and shows the loss falling. Everything lands in build/demo/:
#   train.jsonl (one record per optimizer step), ckpt/ (checkpoints), hf/ (export).
#   DEMO_MINUTES=3 ./scripts/demo.sh      (at most 3 minutes of training, the default)
#   DEMO_STEPS=300 ./scripts/demo.sh      (optimizer steps; the schedule decays over them)
# Run it again to start over; `build/dedloc train --checkpoint-dir build/demo/ckpt`
# continues the last run instead.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=swarm
SWARM_ARGS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --single) MODE=single ;;
    *) SWARM_ARGS+=("$arg") ;;
  esac
done
# The build's ~200 lines of compiler output go to a log, shown only on failure.
echo "== Building build/dedloc (log: build/setup.log)"
mkdir -p build
if ! ./scripts/setup.sh > build/setup.log 2>&1; then
  tail -n 40 build/setup.log
  echo "demo: the build failed; the whole log is build/setup.log"
  exit 1
fi
. scripts/env.sh
echo "== OpenCL devices"
build/dedloc devices

echo "== Demo corpus"
CORPUS=build/corpus/bn.txt
if [ ! -s "$CORPUS" ]; then
  ./scripts/make_corpus_bn.sh build/corpus || echo "demo: could not build the corpus (offline?)"
fi
if [ ! -s "$CORPUS" ] && [ -s tests/fixtures/text/corpus_bn_sample.txt ]; then
  CORPUS=tests/fixtures/text/corpus_bn_sample.txt
  echo "demo: using the committed sample $CORPUS"
fi
[ -s "$CORPUS" ] || { echo "demo: no corpus"; exit 1; }
echo "$CORPUS: $(wc -l < "$CORPUS") lines, $(du -h "$CORPUS" | cut -f1)"
if [ "$MODE" = swarm ]; then
  exec scripts/demo_swarm.sh "$CORPUS" "${SWARM_ARGS[@]}"
fi

MINUTES=${DEMO_MINUTES:-3}
STEPS=${DEMO_STEPS:-300}
RUN=build/demo
rm -rf "$RUN"
mkdir -p "$RUN"
echo "== Training the tiny ALBERT for $STEPS steps or $MINUTES minutes (LAMB on the host, fp32)"
# sahajBERT's recipe scaled to a tiny model and a 2-core CPU: micro-batches of
# 8 x 64 tokens, 16 samples per step, and the tiny preset's optimizer defaults
# (LAMB at 0.1, warmup over 10% of the steps, then linear decay to zero over
# DEMO_STEPS steps; docs/training.md measures them). The corpus is grouped by
# source package, so the shuffle buffer holds all of it (50000 examples) to
# keep each step's batch representative.
build/dedloc train --model tiny --data "$CORPUS" --seq 64 --batch 8 --target-batch 16 \
  --max-steps "$STEPS" --max-minutes "$MINUTES" --shuffle-buffer 50000 \
  --checkpoint-dir "$RUN/ckpt" --save-every 50 --log "$RUN/train.jsonl" --seed 1

echo "== Loss by step (from $RUN/train.jsonl)"
# Our log lines have a fixed field order: pull the numbers out with sed.
sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+), "mlm_loss": ([^,]+), "sop_loss": ([^,]+), "lr": ([^,]+),.*"samples_per_second": ([^,]+),.*/\1 \2 \3 \4 \5 \6/' \
  "$RUN/train.jsonl" > "$RUN/loss.txt"
awk 'BEGIN { printf "%6s %9s %9s %9s %10s %10s\n", "step", "loss", "mlm", "sop", "lr", "samples/s" }
     { n = NR; step[n] = $1; line[n] = sprintf("%6d %9.4f %9.4f %9.4f %10.4g %10.1f", $1, $2, $3, $4, $5, $6) }
     END { every = n > 20 ? int(n / 20) : 1
           for (i = 1; i <= n; i++) if (i == 1 || i == n || i % every == 0) print line[i] }' "$RUN/loss.txt"
awk '{ n++; mlm[n] = $3 }
     END { k = n >= 40 ? 10 : (n >= 10 ? 5 : 1); a = 0; b = 0
           for (i = 1; i <= k; i++) { a += mlm[i]; b += mlm[n - k + i] }
           printf "MLM loss: %.3f over the first %d steps -> %.3f over the last %d (%d steps)\n", a / k, k, b / k, k, n }' \
  "$RUN/loss.txt"

echo "== Export for Hugging Face transformers"
build/dedloc export --checkpoint "$RUN/ckpt" --out "$RUN/hf"
