#!/usr/bin/env bash
# Line coverage of src/ by the test suite, per module (one row per src/<folder>,
# found at run time, so a new folder gets its own row without editing this).
#   ./scripts/coverage.sh                 build-coverage/, whole suite
#   ./scripts/coverage.sh -R text         extra arguments go to ctest
#   COVERAGE_DIR=... ./scripts/coverage.sh
# Builds with gcov instrumentation (DEDLOC_COVERAGE) into its own folder, so the
# ordinary build/ stays untouched. Left out: the static-analysis tests (they run
# no program code) and the install test (an instrumented library needs gcov's
# runtime at link time, which the installed pkg-config file does not name). Writes build-coverage/coverage/summary.json and
# index.html (per file) and prints the table. Exits non-zero if a test failed,
# after printing the table all the same.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcovr reads gcov's output; installed here, not by setup.sh, because only
# this script needs it.
if ! dpkg-query -W -f='${Status}' gcovr 2>/dev/null | grep -q "install ok installed"; then
  echo "coverage: installing gcovr"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gcovr
fi

dir=${COVERAGE_DIR:-build-coverage}
BUILD_DIR=$dir BUILD_TYPE=Debug CMAKE_ARGS="-DDEDLOC_COVERAGE=ON ${CMAKE_ARGS:-}" ./scripts/setup.sh
. scripts/env.sh

# Counters accumulate across runs: start from zero.
find "$dir" -name '*.gcda' -delete
tests_rc=0
(cd "$dir" && ctest --output-on-failure -j "$(nproc)" -E '^(static|install)/' "$@") || tests_rc=$?

out=$dir/coverage
mkdir -p "$out"
gcovr --root . --filter 'src/' --object-directory "$dir" -j "$(nproc)" \
  --json-summary "$out/summary.json" --html-details "$out/index.html" >/dev/null

python3 - "$out/summary.json" <<'EOF'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
modules = {}
for f in files:
    parts = f["filename"].split("/")
    if len(parts) < 3 or parts[0] != "src":
        continue
    m = modules.setdefault("/".join(parts[:2]), [0, 0, 0])
    m[0] += f["line_covered"]; m[1] += f["line_total"]; m[2] += 1
print(f"{'module':<14}{'files':>6}{'lines':>8}{'covered':>9}{'line %':>8}")
tot = [0, 0, 0]
for name in sorted(modules):
    c, t, n = modules[name]
    tot = [tot[0] + c, tot[1] + t, tot[2] + n]
    print(f"{name:<14}{n:>6}{t:>8}{c:>9}{100.0 * c / max(t, 1):>7.1f}%")
print(f"{'total':<14}{tot[2]:>6}{tot[1]:>8}{tot[0]:>9}{100.0 * tot[0] / max(tot[1], 1):>7.1f}%")
EOF
echo "coverage: per file in $out/index.html"
if [ "$tests_rc" != 0 ]; then
  echo "coverage: some tests failed (ctest exit $tests_rc)" >&2
fi
exit "$tests_rc"
