#!/usr/bin/env bash
# Installs what the build, the tests and the demo need (Debian packages, only
# those missing), then configures and builds into build/. Idempotent.
#   ./scripts/setup.sh            install + build (RelWithDebInfo)
#   BUILD_DIR=... CMAKE_ARGS=... ./scripts/setup.sh
# This is the development and test build: test hooks on (DEDLOC_TEST_HOOKS=OFF
# ./scripts/setup.sh for a build like an install's).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  # OpenCL: the CPU driver (PoCL), the loader and headers, CLBlast for GEMM
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo libclblast-dev clblast-utils
  # networking, serialisation, compression, crypto, DHT
  libevent-dev libmsgpack-dev zlib1g-dev libsodium-dev libopendht-c-dev
  # https data sources (libevent_openssl over OpenSSL); the tests make certificates with openssl
  libssl-dev openssl
  # the .deb package (dpkg-shlibdeps) and its install test in a Debian root
  dpkg-dev debootstrap
  # text: Unicode, regex, JSON; hashing
  libutf8proc-dev libpcre2-dev libcjson-dev libxxhash-dev
  # benchmarks compare CPU GEMM with OpenBLAS
  libopenblas-dev
  # bf16 GEMMs on CPUs with AVX512-BF16 (--precision bf16)
  libdnnl-dev
  # the network test lab (namespaces, veth, tc)
  iproute2
  # the monitor page's charts (embedded into the binary: the page works offline)
  libjs-chart.js
  # the monitor page test drives it headless (skipped without it; about 15 s to install)
  chromium
  # static analysis, run by the tests static/cppcheck and static/clang-tidy
  cppcheck clang-tidy
  # kernels through a strict OpenCL C front end (portability/strict_compile) and
  # under a race and bounds checker that presents a GPU (ctest -L oclgrind)
  clang llvm oclgrind
  # fetches Intel's OpenCL CPU runtime from PyPI (scripts/intel_opencl.sh)
  python3-pip
  # the swarm tests and demo read JSON-lines logs; the demo plots the loss
  jq gnuplot-nox
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DDEDLOC_TEST_HOOKS=${DEDLOC_TEST_HOOKS:-ON} ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: built $BUILD_DIR/dedloc"
# Intel's OpenCL CPU runtime, a second vendor's OpenCL for the intel/* tests,
# into the build tree (pinned wheels from PyPI; DEDLOC_INTEL_OPENCL=0 skips
# it, and those tests then report a skip with the reason).
if [ "${DEDLOC_INTEL_OPENCL:-1}" != 0 ]; then
  scripts/intel_opencl.sh "$BUILD_DIR/opencl-intel" ||
    echo "setup: Intel's OpenCL runtime was not installed; the intel/* tests will be skipped"
fi
