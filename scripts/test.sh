#!/usr/bin/env bash
# Installs, builds and runs every test. Extra arguments go to ctest
# (e.g. ./scripts/test.sh -R model).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
start=$(date +%s)
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
echo "test.sh: the suite took $(( $(date +%s) - start )) s"
cd - >/dev/null
# Every fuzz harness for a fixed number of executions (clang build in
# build-fuzz); skipped when ctest was asked for a subset.
if (($# == 0)); then
  ./scripts/fuzz.sh --runs 2000
fi
# The suite under ASan+UBSan and the network tests under TSan (slow: opt in).
if [ "${DEDLOC_SANITIZE_CI:-0}" = 1 ]; then
  ./scripts/sanitize.sh
fi
echo "test.sh: everything took $(( $(date +%s) - start )) s"
