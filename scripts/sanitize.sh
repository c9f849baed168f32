#!/usr/bin/env bash
# Runs the test suite under the sanitizers, each in its own build folder:
#   - the whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
#     (build-asan, -DDEDLOC_SANITIZE=ON; any UB report fails its test), but
#     install/pkgconfig, which links the installed (instrumented) static
#     library into a plain program and so cannot link without the runtimes;
#   - the network and collaboration tests under ThreadSanitizer
#     (build-tsan, -DDEDLOC_TSAN=ON).
#   ./scripts/sanitize.sh [asan|tsan]...   (default: both)
# Suppressions for third-party code only, each with its reason, are in
# scripts/sanitize/. Prints how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
((${#parts[@]})) || parts=(asan tsan)
supp=$PWD/scripts/sanitize
. scripts/env.sh
for part in "${parts[@]}"; do
  start=$(date +%s)
  case "$part" in
    asan)
      BUILD_DIR=build-asan CMAKE_ARGS="-DDEDLOC_SANITIZE=ON -DDEDLOC_BUILD_BENCH=OFF" ./scripts/setup.sh >/dev/null
      built=$(date +%s)
      (cd build-asan &&
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1" \
        LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0" \
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp" \
        ctest --output-on-failure -j "$(nproc)" -E '^install/')
      ;;
    tsan)
      BUILD_DIR=build-tsan CMAKE_ARGS="-DDEDLOC_TSAN=ON -DDEDLOC_BUILD_BENCH=OFF" ./scripts/setup.sh >/dev/null
      built=$(date +%s)
      (cd build-tsan &&
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp" \
        ctest --output-on-failure -j "$(nproc)" -L 'net|collab')
      ;;
    *) echo "sanitize.sh: unknown part '$part' (asan, tsan)" >&2; exit 2 ;;
  esac
  echo "sanitize.sh: $part: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
done
