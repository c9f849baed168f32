#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan+UBSan, in
# build-fuzz/) and runs each one on its seed corpus.
#   ./scripts/fuzz.sh                    2000 executions per harness (what test.sh runs)
#   ./scripts/fuzz.sh --runs N [NAME...]
#   ./scripts/fuzz.sh --seconds S [NAME...]   S seconds per harness (bench/fuzz.sh)
# The working corpus grows in build-fuzz/corpus/NAME (seeded from
# tests/fuzz/corpus/NAME and the fixtures); a crashing input is written to
# build-fuzz/crashes/NAME/ and fails the script: fix it, then commit the input
# under tests/fuzz/regressions/NAME/ so ctest replays it.
# Prints one line per harness: name, executions, seconds, status.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=2000
seconds=""
names=()
while (($#)); do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) names+=("$1"); shift ;;
  esac
done

# clang and its sanitizer/libFuzzer runtimes (Debian 12: clang 14)
PACKAGES=(clang libclang-rt-14-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

FUZZ_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
build_start=$(date +%s)
cmake -S . -B "$FUZZ_DIR" -DCMAKE_C_COMPILER=clang -DDEDLOC_FUZZ=ON -DDEDLOC_BUILD_TESTS=OFF \
  -DDEDLOC_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$FUZZ_DIR" -j "$(nproc)" --target fuzz_all >/dev/null
echo "fuzz.sh: harnesses built in $(( $(date +%s) - build_start )) s ($FUZZ_DIR)"

if ((${#names[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.c; do names+=("$(basename "$f" .c)"); done
fi

# Fixture files that seed some harnesses besides tests/fuzz/corpus/NAME.
fixtures_for() {
  case "$1" in
    fuzz_safetensors) echo tests/fixtures/albert_tiny/batch.safetensors tests/fixtures/albert_groups/batch.safetensors ;;
    fuzz_config_json) echo tests/fixtures/*/config.json ;;
    fuzz_jsonl|fuzz_gzip_lines|fuzz_tokenize_text) echo tests/fixtures/data/bn_paragraphs.txt ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
total_start=$(date +%s)
printf '%-22s %12s %8s  %s\n' harness executions seconds status
for name in "${names[@]}"; do
  corpus="$FUZZ_DIR/corpus/$name"
  crashes="$FUZZ_DIR/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  [ -d "tests/fuzz/regressions/$name" ] && cp -n tests/fuzz/regressions/"$name"/* "$corpus"/ 2>/dev/null || true
  for f in $(fixtures_for "$name"); do cp -n "$f" "$corpus/fixture_$(echo "$f" | tr / _)"; done
  limit=(-runs="$runs")
  [ -n "$seconds" ] && limit=(-max_total_time="$seconds")
  # Encoding kilobytes of text is slow under ASan; short inputs find the same bugs.
  [ "$name" = fuzz_tokenize_text ] && limit+=(-max_len=1024)
  log="$FUZZ_DIR/$name.log"
  start=$(date +%s)
  status=ok
  # -timeout flags inputs that hang; inputs stay at most 4 KiB or the largest seed.
  if ! "$FUZZ_DIR/tests/fuzz/$name" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1; then
    status="CRASH (see $log and $crashes/)"
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf '%-22s %12s %8s  %s\n' "$name" "${execs:-?}" "$(( $(date +%s) - start ))" "$status"
done
echo "fuzz.sh: ran ${#names[@]} harnesses in $(( $(date +%s) - total_start )) s"
exit $failed
