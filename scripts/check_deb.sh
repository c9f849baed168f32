#!/usr/bin/env bash
# Installs the .deb (cmake --build BUILD --target package) into a fresh Debian
# root of this machine's release with apt, as a user would, and runs it there:
# the package's declared dependencies must bring everything it needs (PoCL
# included), `dedloc devices` must find a device and a short `dedloc train`
# must complete steps.
#   scripts/check_deb.sh [BUILD_DIR]        (default: build)
# The mirror and the suite are the ones this machine's apt uses (its Debian
# source for its own release, read from /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list and *.sources); DEDLOC_DEBIAN_MIRROR and
# DEDLOC_DEBIAN_SUITE override them. Needs root and debootstrap; exits 77
# (skipped) without them, and without a reachable mirror unless CI=true (there
# an unreachable mirror is a failure, not a skip). The base root (debootstrap
# --variant=minbase), the packages apt downloads and the kernel caches are kept
# under $DEDLOC_CACHE_DIR/deb-check, so only the first run downloads the
# system. DEDLOC_DEB_CHECK_COLD=0 (what the ctest sets) skips instead of making
# that cache, a few minutes' work, except when CI=true: a CI machine starts
# without the cache every run, and the install would never be tested there.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=$(cd "${1:-build}" && pwd)
cache_root=${DEDLOC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dedloc}
cache=$cache_root/deb-check
start=$(date +%s)
say() { echo "check_deb: $* ($(($(date +%s) - start)) s)"; }
skip() { echo "check_deb: skipped: $*"; exit 77; }
# What a CI machine must be able to do is a failure there, a skip elsewhere.
unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "check_deb: $* (CI=true: a failure, not a skip)" >&2
    exit 1
  fi
  skip "$*"
}

# The first enabled `deb` source of this machine's release with the main
# component, in the order apt reads its files: "URI SUITE". Entries signed by a
# keyring other than Debian's are passed over: debootstrap checks the release
# against Debian's archive keyring, so they cannot be the Debian archive.
apt_debian_source() {
  local release files=() f
  # shellcheck source=/dev/null
  release=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  [ -n "$release" ] || return 0
  [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*; do
    case $f in *.list | *.sources) [ -f "$f" ] && files+=("$f") ;; esac
  done
  for f in "${files[@]}"; do
    case $f in
      *.sources) # deb822 stanzas; prints "TYPES|URIS|SUITES|COMPONENTS|SIGNED-BY|ENABLED"
        awk 'function flush() {
               if (types != "") print types "|" uris "|" suites "|" comps "|" signed "|" enabled
               types = uris = suites = comps = signed = ""; enabled = "yes"; last = ""
             }
             BEGIN { enabled = "yes" }
             /^#/ { next }
             /^[ \t]*$/ { flush(); next }
             /^[ \t]/ { if (last == "signed-by") signed = signed " (inline key)"; next }
             {
               key = tolower($0); sub(/:.*/, "", key)
               value = $0; sub(/^[^:]*:[ \t]*/, "", value); sub(/[ \t]+$/, "", value)
               last = key
               if (key == "types") types = value
               else if (key == "uris") uris = value
               else if (key == "suites") suites = value
               else if (key == "components") comps = value
               else if (key == "signed-by") signed = value
               else if (key == "enabled") enabled = tolower(value)
             }
             END { flush() }' "$f"
        ;;
      *) # one-line entries: deb [options] URI SUITE COMPONENT...
        awk '{ sub(/#.*/, "") }
             $1 == "deb" {
               line = $0; sub(/^[ \t]*deb[ \t]+/, "", line); signed = ""
               if (line ~ /^\[/) {
                 options = line; sub(/\].*/, "", options); sub(/^\[/, "", options)
                 sub(/^[^]]*\][ \t]*/, "", line)
                 n = split(options, opt, /[ \t]+/)
                 for (i = 1; i <= n; i++) if (opt[i] ~ /^signed-by=/) { signed = opt[i]; sub(/^signed-by=/, "", signed) }
               }
               n = split(line, word, /[ \t]+/)
               comps = ""; for (i = 3; i <= n; i++) comps = comps " " word[i]
               print "deb|" word[1] "|" word[2] "|" comps "|" signed "|yes"
             }' "$f"
        ;;
    esac
  done | awk -F'|' -v release="$release" '
    $6 == "no" || (" " $1 " ") !~ / deb / || (" " $4 " ") !~ / main / { next }
    $5 != "" && $5 !~ /^\/.*debian-archive-keyring[^ ]*$/ { next }
    {
      n = split($3, suite, /[ \t]+/)
      for (i = 1; i <= n; i++) if (suite[i] == release) { split($2, uri, /[ \t]+/); print uri[1], release; exit }
    }'
}

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot and mounts)"
command -v debootstrap >/dev/null || skip "needs debootstrap (apt-get install debootstrap)"
command -v dpkg-shlibdeps >/dev/null || skip "needs dpkg-shlibdeps to build the package (apt-get install dpkg-dev)"
read -r apt_mirror apt_suite < <(apt_debian_source) || true
mirror=${DEDLOC_DEBIAN_MIRROR:-${apt_mirror:-}}
suite=${DEDLOC_DEBIAN_SUITE:-${apt_suite:-}}
if [ -z "$mirror" ] || [ -z "$suite" ]; then
  unavailable "no Debian source for this machine's release in its apt sources (set DEDLOC_DEBIAN_MIRROR and DEDLOC_DEBIAN_SUITE)"
fi
mirror=${mirror%/}
base=$cache/$suite-minbase.tar
mirror_host=$(sed -E 's#^[a-z]+://([^/]+).*#\1#' <<<"$mirror")
mirror_port=80
case $mirror in https://*) mirror_port=443 ;; esac
if [[ $mirror_host =~ ^(.*):([0-9]+)$ ]]; then
  mirror_host=${BASH_REMATCH[1]}
  mirror_port=${BASH_REMATCH[2]}
fi
case $mirror in
  http://* | https://*)
    if ! timeout 10 bash -c "exec 3<>/dev/tcp/$mirror_host/$mirror_port" 2>/dev/null; then
      unavailable "the Debian mirror $mirror is not reachable"
    fi
    ;;
esac
say "Debian $suite from $mirror"
if [ ! -f "$base" ] && [ "${DEDLOC_DEB_CHECK_COLD:-1}" = 0 ] && [ "${CI:-}" != true ]; then
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
  say "making the Debian $suite base root (cold cache)"
  rm -rf "$cache/base-root"
  debootstrap --variant=minbase "$suite" "$cache/base-root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
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
