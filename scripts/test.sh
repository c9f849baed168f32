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
