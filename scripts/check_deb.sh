#!/usr/bin/env bash
# Installs the .deb (cmake --build BUILD --target package) into a fresh Debian
# 12 root with apt, as a user would, and runs it there: the package's declared
# dependencies must bring everything it needs (PoCL included), `dedloc
# devices` must find a device and a short `dedloc train` must complete steps.
#   scripts/check_deb.sh [BUILD_DIR]        (default: build)
# Needs root, debootstrap and the Debian mirror (DEDLOC_DEBIAN_MIRROR, default
# http://deb.debian.org/debian); exits 77 (skipped) without them. The base
# root (debootstrap --variant=minbase bookworm), the packages apt downloads and
# the kernel caches are kept under $DEDLOC_CACHE_DIR/deb-check, so only the
# first run downloads the system. DEDLOC_DEB_CHECK_COLD=0 skips instead of
# making that cache (a cold run takes a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=$(cd "${1:-build}" && pwd)
mirror=${DEDLOC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache_root=${DEDLOC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dedloc}
cache=$cache_root/deb-check
base=$cache/bookworm-minbase.tar
start=$(date +%s)
say() { echo "check_deb: $* ($(($(date +%s) - start)) s)"; }
skip() { echo "check_deb: skipped: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot and mounts)"
command -v debootstrap >/dev/null || skip "needs debootstrap (apt-get install debootstrap)"
command -v dpkg-shlibdeps >/dev/null || skip "needs dpkg-shlibdeps to build the package (apt-get install dpkg-dev)"
mirror_host=$(sed -E 's#^[a-z]+://([^/:]+).*#\1#' <<<"$mirror")
if ! timeout 10 bash -c "exec 3<>/dev/tcp/$mirror_host/80" 2>/dev/null; then
  skip "the Debian mirror $mirror is not reachable"
fi
if [ ! -f "$base" ] && [ "${DEDLOC_DEB_CHECK_COLD:-1}" = 0 ]; then
  skip "no cached Debian root in $cache and DEDLOC_DEB_CHECK_COLD=0; run scripts/check_deb.sh once to make it"
fi

cmake --build "$build" --target package >/dev/null
deb=$(find "$build" -maxdepth 1 -name 'dedloc_*.deb' -printf '%T@ %p\n' | sort -rn | head -n1 | cut -d' ' -f2-)
[ -n "$deb" ] || { echo "check_deb: no dedloc_*.deb in $build after the package target" >&2; exit 1; }
say "package $(basename "$deb")"

mkdir -p "$cache/apt-archives/partial" "$cache/pocl" "$cache/dedloc"
# One run at a time: the cached root and apt's download folder are shared.
exec 9>"$cache/lock"
flock 9

if [ ! -f "$base" ]; then
  say "making the Debian 12 base root (cold cache)"
  rm -rf "$cache/base-root"
  debootstrap --variant=minbase bookworm "$cache/base-root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; echo "check_deb: debootstrap failed" >&2; exit 1; }
  tar -C "$cache/base-root" -cf "$base.tmp" .
  mv "$base.tmp" "$base"
  rm -rf "$cache/base-root"
  say "base root cached in $base"
fi

# The root lives in memory (about 1 GiB): unpacking is fast and cleaning up is
# one umount.
root=$(mktemp -d "$cache/root.XXXXXX")
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  # Only remove the folder once nothing is mounted on or inside it.
  if ! grep -q " ${root}[/ ]" /proc/mounts; then rm -rf "$root"; fi
}
trap 'cleanup; say "cleaned up"' EXIT
bind() { # host-path root-relative-path [options]
  mkdir -p "$root/$2"
  mount --bind "$1" "$root/$2"
  mounts+=("$root/$2")
  if [ -n "${3:-}" ]; then mount -o "remount,bind,$3" "$root/$2"; fi
}
mount -t tmpfs -o size=3g,mode=755 dedloc-deb-check "$root"
mounts+=("$root")
tar -C "$root" -xf "$base"
mkdir -p "$root/proc"
mount -t proc proc "$root/proc"
mounts+=("$root/proc")
bind /sys sys ro
bind /dev dev
bind "$cache/apt-archives" var/cache/apt/archives
bind "$cache/pocl" root/.cache/pocl
bind "$cache/dedloc" root/.cache/dedloc
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
cp "$src/tests/fixtures/text/corpus_bn_sample.txt" "$root/tmp/corpus.txt"
say "fresh root ready"

in_root() {
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive POCL_CACHE_DIR=/root/.cache/pocl DEDLOC_CACHE_DIR=/root/.cache/dedloc "$@"
}
in_root apt-get update -qq
say "apt-get update"
in_root apt-get install -y -qq "/tmp/$(basename "$deb")" >"$root/tmp/apt.log" 2>&1 ||
  { tail -n 30 "$root/tmp/apt.log" >&2; echo "check_deb: apt-get install failed" >&2; exit 1; }
say "installed with apt-get (dependencies from $mirror)"

in_root dpkg -s pocl-opencl-icd >/dev/null
in_root dedloc --version
in_root test -s /usr/share/man/man1/dedloc.1.gz
in_root bash -c '. /usr/share/bash-completion/completions/dedloc && complete -p dedloc' >/dev/null
in_root dedloc devices
count=$(in_root dedloc devices --json | grep -o '"name"' | wc -l)
[ "$count" -ge 1 ] || { echo "check_deb: dedloc devices --json lists no device in the Debian root" >&2; exit 1; }

in_root dedloc train --model tiny --data paragraphs:/tmp/corpus.txt --batch 4 --seq 32 --target-batch 8 \
  --max-steps 2 --lr 0.01 --warmup-steps 1 --shuffle-buffer 64 --quiet --checkpoint-dir /tmp/run \
  --log /tmp/run.jsonl
steps=$(grep -c '"loss"' "$root/tmp/run.jsonl" || true)
[ "$steps" = 2 ] || { echo "check_deb: expected 2 logged steps, got $steps" >&2; cat "$root/tmp/run.jsonl" >&2; exit 1; }
if grep -qiE '"loss": *(nan|inf|-inf|null)' "$root/tmp/run.jsonl"; then
  echo "check_deb: a non-finite loss in the log" >&2
  exit 1
fi
ls "$root/tmp/run"/checkpoint-*.safetensors >/dev/null
say "ok: installed, 'dedloc devices' found $count device(s), 'dedloc train' ran 2 steps"
