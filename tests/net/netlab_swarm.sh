#!/usr/bin/env bash
# Three dedloc peers in separate network namespaces (scripts/netlab.sh), each
# link shaped to 20 Mbit/s up and down, form one swarm from one initial peer
# over 10.213.0.0/24. Skipped (77) without root or network namespaces.
set -uo pipefail
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export NETLAB_PREFIX="nt$$"
LAB="$SRC/scripts/netlab.sh"
if [[ $(id -u) != 0 ]] || ! ip netns add "$NETLAB_PREFIX-probe" 2>/dev/null; then
  echo "netlab_swarm: skipped (needs root and network namespaces)"; exit 77
fi
ip netns del "$NETLAB_PREFIX-probe"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$LAB" destroy
  rm -rf "$tmp"
}
trap cleanup EXIT
"$LAB" create 3 20mbit 20mbit >/dev/null || exit 1
for i in 1 2 3; do
  extra=()
  [[ $i != 1 ]] && extra=(--initial-peers 10.213.0.1:7000)
  "$LAB" exec "$i" "$BIN" peer --run-id netlab --listen "10.213.0.$i:7000" --no-dht \
    --status-every 0.25 --duration 20 --expiry 6 --fake-epoch 2 --fake-samples "$((i * 10))" \
    --max-upload 15 "${extra[@]}" >"$tmp/p$i.out" 2>"$tmp/p$i.err" &
  pids+=($!)
done
# Bounded wait: every peer's newest line shows 3 peers, epoch 2, 60 samples.
for ((t = 0; t < 60; t++)); do
  ok=0
  for i in 1 2 3; do
    tail -n 1 "$tmp/p$i.out" 2>/dev/null | grep -q '"num_peers":3,.*"global_epoch":2,"collective_samples":60,' && ok=$((ok + 1))
  done
  [[ $ok == 3 ]] && { echo "netlab_swarm: 3 peers in namespaces converged"; exit 0; }
  sleep 0.25
done
echo "netlab_swarm: no convergence"; for i in 1 2 3; do tail -n 1 "$tmp/p$i.out"; tail -n 5 "$tmp/p$i.err"; done
exit 1
