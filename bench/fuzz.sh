#!/usr/bin/env bash
# Runs every fuzz harness (tests/fuzz) for SECONDS each and prints a table of
# executions per harness; --json adds one JSON line. Crashes fail the run and
# are kept in build-fuzz/crashes/NAME/ (see scripts/fuzz.sh).
#   bench/fuzz.sh SECONDS [--json] [NAME...]
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# < 1)) || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: bench/fuzz.sh SECONDS [--json] [NAME...]" >&2
  exit 2
fi
seconds=$1; shift
json=0
names=()
for a in "$@"; do
  if [ "$a" = --json ]; then json=1; else names+=("$a"); fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
./scripts/fuzz.sh --seconds "$seconds" "${names[@]}" | tee "$out" || rc=$?
if ((json)); then
  awk -v s="$seconds" 'BEGIN { printf "{\"seconds_per_harness\": %s, \"harnesses\": [", s; n = 0 }
       $1 ~ /^fuzz_/ { printf "%s{\"name\": \"%s\", \"executions\": %s, \"seconds\": %s, \"ok\": %s}",
                       (n++ ? ", " : ""), $1, ($2 ~ /^[0-9]+$/ ? $2 : "null"), $3, ($4 == "ok" ? "true" : "false") }
       END { print "]}" }' "$out"
fi
exit $rc
