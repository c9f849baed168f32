#!/usr/bin/env bash
# Installs Intel's OpenCL CPU runtime (oneAPI, from PyPI wheels at pinned
# versions) into a folder of its own and registers it with an ICD file there,
# without touching the system: programs see it only when OCL_ICD_VENDORS
# names that folder's vendors/ (scripts/setup.sh installs it into the build
# tree for the tests; docs/devices.md says how to train with it).
#   scripts/intel_opencl.sh DIR        install into DIR (idempotent)
# DIR/lib holds the runtime with the libraries it loads (libimf, libsvml,
# libirng, libintlc of intel-cmplr-lib-rt; libtbb of tbb): the runtime finds
# them beside itself ($ORIGIN), so LD_LIBRARY_PATH stays untouched (the wheel
# carries its own libOpenCL, which must not replace the system's loader).
# DIR/vendors/intel-cpu.icd names DIR/lib/libintelocl.so.
set -euo pipefail
dir=${1:?usage: intel_opencl.sh DIR}
# Pinned together: the runtime declares tbb 2023.* and the 2026 compiler
# libraries; about 260 MB of wheels, 800 MB unpacked.
WHEELS=(intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0 tbb==2023.2.0)
stamp="$dir/.installed"
want="${WHEELS[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$dir/lib/libintelocl.so" ]; then
  exit 0
fi
python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "intel_opencl: python3 with pip is needed to fetch the wheels" >&2
  exit 1
fi
# The wheels are kept in the repository's .cache/ (ignored by git), so a
# fresh build folder does not download them again.
wheels=${DEDLOC_WHEEL_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/wheels}
mkdir -p "$wheels"
have_all=1
for spec in "${WHEELS[@]}"; do
  name=${spec%%==*} version=${spec##*==}
  ls "$wheels/${name//-/_}-$version-"*.whl >/dev/null 2>&1 || have_all=0
done
if [ "$have_all" = 0 ]; then
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" "${WHEELS[@]}"
fi
rm -rf "$dir"
mkdir -p "$dir/lib" "$dir/vendors"
for spec in "${WHEELS[@]}"; do
  name=${spec%%==*} version=${spec##*==}
  w=$(ls "$wheels/${name//-/_}-$version-"*.whl)
  # A wheel is a zip; its shared libraries sit under <name>.data/data/lib.
  "$python" - "$w" "$dir/lib" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        parts = info.filename.split('/')
        if len(parts) >= 4 and parts[0].endswith('.data') and parts[1:3] == ['data', 'lib'] and parts[-1]:
            out = os.path.join(dest, *parts[3:])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, 'wb') as dst:
                dst.write(src.read())
            # zip keeps the Unix mode in the top 16 bits of external_attr
            mode = (info.external_attr >> 16) & 0o777
            os.chmod(out, mode or 0o644)
PY
done
# The loader opens exactly the path the ICD file names.
echo "$(cd "$dir/lib" && pwd)/libintelocl.so" > "$dir/vendors/intel-cpu.icd"
echo "$want" > "$stamp"
echo "intel_opencl: installed ${WHEELS[*]} into $dir"
