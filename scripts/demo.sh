#!/usr/bin/env bash
# Installs, builds and runs the main job on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. scripts/env.sh
echo "== OpenCL devices"
build/dedloc devices
