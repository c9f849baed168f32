#!/usr/bin/env bash
# Static analysis of src/ with the compile commands of a configured build:
#   ./scripts/static_check.sh cppcheck   [BUILD_DIR]   (default build)
#   ./scripts/static_check.sh clang-tidy [BUILD_DIR]
#   ./scripts/static_check.sh clang-tidy build src/net/conn.c ...   (only these)
# Every C file under src/ that the build compiles is checked (so a new module
# folder is covered as soon as CMakeLists.txt builds it), with the headers of
# src/ and include/ it pulls in. Exits non-zero on any finding, 77 if the tool
# is missing. Run by ctest as static/cppcheck and static/clang-tidy.
#
# The check sets look for defects (undefined behaviour, leaks, wrong sizes,
# misuse of the C library), not style, so that new code passes unless it has
# a real bug. A finding that is wrong gets an inline suppression at its line
# with the reason beside it:
#   cppcheck:   /* cppcheck-suppress <id> */ on the line before, and why
#   clang-tidy: /* NOLINT(<check>): why */   (or NOLINTNEXTLINE)
# The analyzer reads one file at a time; include/dedloc/util.h tells it that
# dl_fail() returns -1, which removes a whole family of impossible paths.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tool=${1:?usage: static_check.sh cppcheck|clang-tidy [BUILD_DIR [FILE...]]}
build=$(cd "${2:-$root/build}" && pwd)
shift $(($# < 2 ? $# : 2))
only=("$@")
db=$build/compile_commands.json
jobs=${STATIC_JOBS:-$(nproc)}
if [ ! -f "$db" ]; then
  echo "static_check: $db missing (configure the build first: ./scripts/setup.sh)" >&2
  exit 1
fi

# The C files under src/ in the compile database (or those named), one per line.
sources() {
  if ((${#only[@]})); then
    for f in "${only[@]}"; do realpath "$f"; done
    return
  fi
  sed -n 's/^ *"file": "\(.*\)",\{0,1\}$/\1/p' "$db" | grep "^$root/src/.*\.c$" | sort -u
}

if [ -z "$(sources)" ]; then
  echo "static_check: no C file of src/ in $db" >&2
  exit 1
fi

case $tool in
cppcheck)
  command -v cppcheck >/dev/null || { echo "static_check: cppcheck not installed" >&2; exit 77; }
  # Classes: errors (always on), warning, portability. Left out: style and
  # performance (taste, not defects) and information (it reports every
  # system header cppcheck was not given).
  # The filters must be absolute like the database's path ($db is).
  filters=()
  while read -r f; do filters+=("--file-filter=$f"); done < <(sources)
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  status=0
  cppcheck --project="$db" "${filters[@]}" --std=c11 \
    --enable=warning,portability --inline-suppr --error-exitcode=1 --quiet \
    -j "$jobs" --template='{file}:{line}: {severity} ({id}): {message}' >"$log" 2>&1 || status=$?
  cat "$log"
  # A filter that matches nothing is no check at all, yet cppcheck exits 0.
  if grep -q 'could not find any files' "$log"; then exit 1; fi
  exit "$status"
  ;;
clang-tidy)
  command -v clang-tidy >/dev/null || { echo "static_check: clang-tidy not installed" >&2; exit 77; }
  checks=(
    '-*'
    'bugprone-*'
    'clang-analyzer-*'
    # Two adjacent parameters of one type (m, n, k of a GEMM; rows, cols) are
    # the natural shape of this code's kernels and routines; not a defect.
    '-bugprone-easily-swappable-parameters'
    # Fires on constant products such as 64 * 1024 passed as a size_t; those
    # cannot overflow unnoticed (the compiler's -Woverflow checks them), and
    # every finding in src/ was of that kind.
    '-bugprone-implicit-widening-of-multiplication-result'
    # C's integer promotions make every char expression an int, and every
    # figure we print converts a count to double: the findings in src/ were
    # all of these kinds, none a lost value.
    '-bugprone-narrowing-conversions'
    # Flags sizeof of every pointer to a struct, and every OpenCL handle
    # (cl_mem, cl_platform_id) is one: sizeof(cl_mem) is how clSetKernelArg
    # is called. Wrong allocation sizes are still caught by
    # clang-analyzer-unix.MallocSizeof, and memcpy/memset misuse by gcc's
    # -Wsizeof-pointer-memaccess (-Wall). (clang-tidy 15 can turn off just
    # that part: WarnOnSizeOfPointerToAggregate.)
    '-bugprone-sizeof-expression'
    # Asks for C11 Annex K (memcpy_s, ...), which glibc does not provide.
    '-clang-analyzer-security.insecureAPI.DeprecatedOrUnsafeBufferHandling'
  )
  # Keeps the check's defect findings (strcmp compared with 1, or its result
  # cast) and drops the idiom `if (strcmp(a, b))`, which is plain C.
  options='{key: bugprone-suspicious-string-compare.WarnOnImplicitComparison, value: false}'
  config="{Checks: '$(IFS=,; echo "${checks[*]}")', WarningsAsErrors: '*',
    HeaderFilterRegex: '^$root/(src|include)/', CheckOptions: [$options]}"
  # One clang-tidy per file, $jobs at a time: the analyzer is the slow part
  # and each file is independent. xargs exits non-zero if any run failed.
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  status=0
  # -Wno-unknown-warning-option: the commands are gcc's, with warning flags
  # clang does not know.
  sources | xargs -r -P "$jobs" -n 1 clang-tidy -p "$build" --quiet --config="$config" \
    --extra-arg=-Wno-unknown-warning-option >"$log" 2>&1 || status=$?
  # Drop clang-tidy's per-file "N warnings generated." chatter.
  grep -v '^[0-9]* warnings\? generated\.$' "$log" || true
  exit "$status"
  ;;
*)
  echo "static_check: unknown tool '$tool' (cppcheck or clang-tidy)" >&2
  exit 2
  ;;
esac
