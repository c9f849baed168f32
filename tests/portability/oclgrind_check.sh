#!/usr/bin/env bash
# Runs a command under Oclgrind (a simulated GPU: the GPU kernel shapes and
# CLBlast's GPU kernels run) with its data-race and bounds checks, and fails
# if the command fails or Oclgrind reports anything.
#   oclgrind_check.sh COMMAND [ARGS...]
# Oclgrind's --uninitialized is left out: with Oclgrind 21.10 it crashes in
# test_kernels and reports values that earlier kernels computed from defined
# inputs (docs/devices.md). Skips (77) when oclgrind is not installed.
set -uo pipefail
if ! command -v oclgrind >/dev/null; then
  echo "SKIP: oclgrind is not installed (Debian: apt-get install oclgrind; scripts/setup.sh does)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A program cache of its own: binaries of other devices are never loaded
# here, and a warm cache of Oclgrind's would still be checked on every run.
export DEDLOC_CACHE_DIR=${DEDLOC_OCLGRIND_CACHE_DIR:-$work/cache}
oclgrind --data-races --max-errors 20 --log "$work/oclgrind.log" "$@"
rc=$?
if [ -s "$work/oclgrind.log" ]; then
  echo "FAIL: Oclgrind reported errors:"
  cat "$work/oclgrind.log"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "FAIL: the command exited with $rc under Oclgrind"
  exit 1
fi
echo "oclgrind: no race or out-of-bounds access reported"
