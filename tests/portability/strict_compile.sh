#!/usr/bin/env bash
# Compiles every kernel source of cl/ the way the program builds it (prefixed
# with common.cl, src/device/program.c) with every set of build options the
# program passes, through a strict OpenCL C 1.2 front end: clang for spir64 at
# -O0, where nothing is inlined away. Fails on a compile error or warning,
# and on an undefined function that is not an OpenCL built-in: built-ins are
# overloaded, hence Itanium-mangled (_Z...), while our helpers have plain C
# names; an undefined one (an `inline` without `static`) is an external call
# that a strict driver may refuse to link.
#   strict_compile.sh CL_DIR SRC_DIR
# Skips (77) when clang or its spir64 target is missing.
set -uo pipefail
cl_dir=$1
src_dir=$2
clang=${DEDLOC_STRICT_CLANG:-$(command -v clang || command -v clang-15 || command -v clang-14 || true)}
nm=$(command -v llvm-nm || command -v llvm-nm-15 || command -v llvm-nm-14 || true)
if [ -z "$clang" ] || [ -z "$nm" ]; then
  echo "SKIP: clang and llvm-nm are needed (Debian: clang, llvm)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! echo 'kernel void k(global float *x) { x[0] = 1.0f; }' > "$work/probe.cl" ||
   ! "$clang" -target spir64 -cl-std=CL1.2 -O0 -c -emit-llvm -Xclang -finclude-default-header \
     "$work/probe.cl" -o "$work/probe.bc" 2>"$work/probe.log"; then
  echo "SKIP: $clang cannot compile OpenCL C for spir64:"; cat "$work/probe.log"
  exit 77
fi

# The option sets of the program, file by file (src/model/model.c,
# src/device/gemm_half.c, src/device/convert.c): the row kernels in a CPU's
# shape and in a GPU's (the group a GPU gets, and the smallest one a device
# with little local memory would), the storage precisions, native and
# emulated half GEMM; every set also with the reversed reductions that
# DEDLOC_CL_BUILD_OPTIONS may add.
row_sets=("-DDL_ROW_GROUP=16 -DDL_COL_VEC=16 -DDL_ROW_LANES" "-DDL_ROW_GROUP=256 -DDL_COL_VEC=1"
          "-DDL_ROW_GROUP=1 -DDL_COL_VEC=1")
declare -A sets
for f in "$cl_dir"/*.cl; do
  name=$(basename "$f")
  case $name in
    common.cl) continue ;;
    storage.cl) sets[$name]="|-DDL_STORE_F16|-DDL_STORE_BF16" ;;
    half_gemm.cl) sets[$name]="|-DDL_HALF_NATIVE" ;;
    convert.cl) sets[$name]="" ;;
    *) sets[$name]=$(IFS='|'; echo "${row_sets[*]}") ;;
  esac
done

# Every -DDL_ macro the program passes must be one this test compiles with,
# so that a new build option cannot skip this check.
all_sets=$(printf '%s|' "${sets[@]}")
missing=0
for macro in $(grep -rhoE -- '-D(DL_[A-Z0-9_]+)' "$src_dir" | sort -u); do
  case $macro in -DDL_REDUCE_REVERSE) continue ;; esac
  if [[ $all_sets != *"$macro"* ]]; then
    echo "FAIL: the program builds kernels with $macro, which this test does not compile with"
    missing=1
  fi
done

failures=$missing compiled=0
for name in $(printf '%s\n' "${!sets[@]}" | sort); do
  { cat "$cl_dir/common.cl"; echo; cat "$cl_dir/$name"; } > "$work/$name"
  IFS='|' read -r -a opts_list <<< "${sets[$name]}|"
  [ ${#opts_list[@]} -eq 0 ] && opts_list=("")
  for opts in "${opts_list[@]}"; do
    for reverse in "" "-DDL_REDUCE_REVERSE"; do
      label="$name [${opts:-no options}${reverse:+ $reverse}]"
      # shellcheck disable=SC2086
      if ! "$clang" -target spir64 -cl-std=CL1.2 -O0 -Werror -c -emit-llvm \
           -Xclang -finclude-default-header $opts $reverse "$work/$name" -o "$work/out.bc" \
           2>"$work/log"; then
        echo "FAIL: $label does not compile:"; cat "$work/log"
        failures=$((failures + 1))
        continue
      fi
      undefined=$("$nm" --undefined-only "$work/out.bc" | awk '{print $NF}' | grep -v '^_Z' || true)
      if [ -n "$undefined" ]; then
        echo "FAIL: $label calls functions it does not define: $(echo $undefined)"
        failures=$((failures + 1))
      fi
      compiled=$((compiled + 1))
    done
  done
done
echo "strict compile: $compiled builds, $failures failures ($clang)"
[ "$failures" -eq 0 ]
