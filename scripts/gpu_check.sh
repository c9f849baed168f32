#!/usr/bin/env bash
# The prepared GPU check: everything dedloc needs at run time travels with the
# tree, so a GPU machine with an NVIDIA driver but no package access (an
# offline box) can run the device checks and write one JSON report.
#
#   scripts/gpu_check.sh pack [BUNDLE]
#       Here, on a Debian machine with package access and a built tree
#       (./scripts/setup.sh): downloads the Debian packages that hold the
#       runtime libraries of build/dedloc, of the model reference test and of
#       CLBlast's tuner (apt-get download, no install), unpacks each with
#       dpkg -x into BUNDLE/root (default gpu_bundle/) and lists them in
#       BUNDLE/manifest.txt. Copy the tree with build/ and BUNDLE/ to the box.
#
#   scripts/gpu_check.sh run [--bundle DIR] [--out FILE] [--icd LIB]
#                            [--device D] [--tune-seconds S] [--no-sahajbert]
#       On the GPU box: points the loader at the bundle's libraries and the
#       OpenCL ICD loader at the driver's library (libnvidia-opencl.so.1,
#       found in the usual places or given with --icd), then runs
#       `dedloc devices`, the model reference test, `bench gemm`, a `tune` of
#       S seconds (default 120), and `bench step` for tiny (fp32, and fp16:
#       half GEMMs where cl_khr_fp16 is reported) and sahajbert (8 x 128),
#       and writes the report (default gpu_check_report.json).
#       Without an NVIDIA library it says so and uses the machine's own ICDs
#       (PoCL here), which is how the script is tried without a GPU.
#
# Needs on the box: glibc (the bundle leaves libc out), bash and coreutils.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

die() { echo "gpu_check: $*" >&2; exit 1; }

# The packages that own the shared libraries a binary loads (glibc and the
# GCC runtime excepted: the box has its own and must not mix them).
owners_of() {
  ldd "$1" | awk '/=> \//{print $3}' | while read -r lib; do
    local real; real=$(readlink -f "$lib")
    # usrmerge: dpkg may know the file under /lib rather than /usr/lib
    dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
  done | cut -d: -f1 | sort -u | grep -vx -e libc6 -e libgcc-s1 || true
}

pack() {
  local bundle=${1:-gpu_bundle}
  local bins=(build/dedloc build/test_albert_reference)
  for b in "${bins[@]}"; do [ -x "$b" ] || die "$b is missing: build first (./scripts/setup.sh)"; done
  if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then die "pack needs apt-get and dpkg (Debian)"; fi
  local tuner; tuner=$(command -v clblast_tuner_xgemm || true)
  [ -n "$tuner" ] && bins+=("$tuner")
  local pkgs
  pkgs=$( { for b in "${bins[@]}"; do owners_of "$b"; done; echo clblast-utils; } | sort -u)
  rm -rf "$bundle"
  mkdir -p "$bundle/debs" "$bundle/root"
  chmod a+rwx "$bundle/debs"   # apt's unprivileged downloader writes there
  echo "gpu_check: downloading $(echo "$pkgs" | wc -w) packages into $bundle/debs"
  # shellcheck disable=SC2086
  (cd "$bundle/debs" && apt-get download -q $pkgs >/dev/null) ||
    die "apt-get download failed (run 'apt-get update' first?)"
  for deb in "$bundle"/debs/*.deb; do dpkg -x "$deb" "$bundle/root"; done
  {
    echo "# packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME") $(dpkg --print-architecture)"
    for deb in "$bundle"/debs/*.deb; do dpkg-deb -f "$deb" Package Version | sed 's/^[^:]*: //' | paste -sd= ; done
  } > "$bundle/manifest.txt"
  rm -rf "$bundle/debs"
  echo "gpu_check: $bundle/root holds $(du -sh "$bundle/root" | cut -f1) of libraries from:"
  sed 1d "$bundle/manifest.txt" | paste -sd' '
}

# A JSON string of a file's text (escapes backslash, quote and control bytes).
json_text() {
  LC_ALL=C awk 'BEGIN { ORS = "" } {
    gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r");
    gsub(/[\001-\037]/, "?");
    print (NR > 1 ? "\\n" : "") $0 }' "$1"
}

STEPS_JSON=()
# run_step NAME KIND TIMEOUT CMD...: stdout to $OUT_DIR/NAME.out, stderr to
# .err. KIND says what a successful run prints: doc (one JSON value), lines
# (one JSON object per line, among other lines) or text; its JSON goes into
# the report as it is, and every stdout also as a string.
run_step() {
  local name=$1 kind=$2 limit=$3; shift 3
  echo "gpu_check: $name: $*" >&2
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT_DIR/$name.out" 2> "$OUT_DIR/$name.err" || rc=$?
  t1=$(date +%s.%N)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "gpu_check: $name: exit $rc after $secs s" >&2
  local json=null
  if [ "$rc" = 0 ] && [ -s "$OUT_DIR/$name.out" ]; then
    case $kind in
      doc) json=$(cat "$OUT_DIR/$name.out") ;;
      lines) json="[$(grep -E '^\{.*\}$' "$OUT_DIR/$name.out" | paste -sd, || true)]" ;;
    esac
  fi
  tail -n 20 "$OUT_DIR/$name.err" > "$OUT_DIR/$name.tail"
  STEPS_JSON+=("{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $secs, \"json\": ${json},
   \"stdout\": \"$(json_text "$OUT_DIR/$name.out")\", \"stderr_tail\": \"$(json_text "$OUT_DIR/$name.tail")\"}")
}

find_nvidia_icd() {
  local c
  for c in /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 \
           /usr/lib/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1; do
    [ -e "$c" ] && { echo "$c"; return; }
  done
  ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1/{print $NF; exit}'
}

run() {
  local bundle=gpu_bundle out=gpu_check_report.json icd="" device="" tune_s=120 sahajbert=1
  while [ $# -gt 0 ]; do
    case $1 in
      --bundle) bundle=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --icd) icd=$2; shift 2 ;;
      --device) device=$2; shift 2 ;;
      --tune-seconds) tune_s=$2; shift 2 ;;
      --no-sahajbert) sahajbert=0; shift ;;
      *) die "unknown option $1 (see the head of $0)" ;;
    esac
  done
  [ -x build/dedloc ] || die "build/dedloc is missing: copy the built tree (build/) along"
  [ -d "$bundle/root" ] || die "$bundle/root is missing: run '$0 pack' where packages can be downloaded"
  local lib=$ROOT/$bundle/root/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:$ROOT/$bundle/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$ROOT/$bundle/root/usr/bin:$PATH
  OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
  local icd_note
  [ -n "$icd" ] || icd=$(find_nvidia_icd || true)
  if [ -n "$icd" ]; then
    [ -e "$icd" ] || die "--icd $icd does not exist"
    mkdir -p "$OUT_DIR/vendors"
    echo "$icd" > "$OUT_DIR/vendors/nvidia.icd"
    export OCL_ICD_VENDORS=$OUT_DIR/vendors
    icd_note=$icd
  else
    echo "gpu_check: no NVIDIA OpenCL library (libnvidia-opencl.so.1) found: using this machine's own ICDs;" \
         "the report has no GPU figures" >&2
    icd_note="system ICDs (no NVIDIA library found)"
  fi
  # caches inside the run's folder: a cold, honest first compile
  export DEDLOC_CACHE_DIR=$OUT_DIR/cache POCL_CACHE_DIR=$OUT_DIR/cache/pocl
  mkdir -p "$POCL_CACHE_DIR"
  export DEDLOC_TEST_SOURCE_DIR=$ROOT
  local dev=(); [ -n "$device" ] && dev=(--device "$device") && export DEDLOC_TEST_DEVICE=$device
  run_step devices doc 120 build/dedloc devices --json
  run_step model_reference text 1800 build/test_albert_reference
  run_step bench_gemm doc 1200 build/dedloc bench gemm "${dev[@]}" --json
  run_step tune text 1800 build/dedloc tune "${dev[@]}" --model sahajbert --budget-seconds "$tune_s"
  run_step bench_step_tiny lines 1800 build/dedloc bench step "${dev[@]}" --model tiny --batch 8 --seq 128 --json --profile
  # fp16: half GEMMs (CLBlastHgemm) where the device reports cl_khr_fp16; the JSON's "compute" says which
  run_step bench_step_tiny_fp16 lines 1800 build/dedloc bench step "${dev[@]}" --model tiny --batch 8 --seq 128 \
    --precision fp16 --json --profile
  if [ "$sahajbert" = 1 ]; then
    run_step bench_step_sahajbert lines 3600 build/dedloc bench step "${dev[@]}" --model sahajbert --batch 8 --seq 128 \
      --steps 2 --json --profile
  fi
  {
    printf '{"gpu_check": 1, "date": "%s", "host": "%s", "kernel": "%s", "icd": "%s", "commit": "%s",\n "steps": [\n  ' \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" "$(uname -r)" "$icd_note" \
      "$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    local first=1
    for s in "${STEPS_JSON[@]}"; do
      [ $first = 1 ] || printf ',\n  '
      printf '%s' "$s"
      first=0
    done
    printf '\n ]}\n'
  } > "$out"
  echo "gpu_check: report in $out (step outputs in $OUT_DIR)"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
