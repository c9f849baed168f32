#!/usr/bin/env bash
# Runs a test program on Intel's OpenCL CPU runtime alone: OCL_ICD_VENDORS
# names the folder scripts/intel_opencl.sh registered it in, so the loader
# sees no other implementation. Skips (77) with the reason when the runtime
# is not installed there or does not start.
#   on_intel.sh RUNTIME_DIR COMMAND [ARGS...]
set -uo pipefail
dir=$1
shift
if [ ! -f "$dir/vendors/intel-cpu.icd" ] || [ ! -f "$dir/lib/libintelocl.so" ]; then
  echo "SKIP: Intel's OpenCL runtime is not installed in $dir (scripts/setup.sh installs it with"
  echo "      scripts/intel_opencl.sh; it needs python3 with pip and PyPI, or DEDLOC_INTEL_OPENCL=0 was set)"
  exit 77
fi
export OCL_ICD_VENDORS=$dir/vendors
if ! command -v clinfo >/dev/null || ! clinfo -l 2>/dev/null | grep -q "Intel(R) OpenCL"; then
  echo "SKIP: Intel's OpenCL runtime in $dir does not start here:"
  clinfo -l 2>&1 | head -5
  exit 77
fi
exec "$@"
