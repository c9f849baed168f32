#!/usr/bin/env bash
# Per-peer memory of an idle swarm: N `dedloc peer` processes on loopback
# (the first is the initial peer / DHT bootstrap), left idle for S seconds,
# then VmRSS of each is read from /proc.
#   scripts/net_idle_rss.sh [N=8] [S=15] [--no-dht]
set -euo pipefail
N=${1:-8}; S=${2:-15}; DHT=${3:-}
BIN=${DEDLOC_BIN:-$(dirname "$0")/../build/dedloc}
tmp=$(mktemp -d); pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
dht0=(--dht-port 0); [[ "$DHT" == --no-dht ]] && dht0=(--no-dht)
"$BIN" peer --run-id rss --listen 127.0.0.1:0 "${dht0[@]}" --status-every 1 >"$tmp/0.out" 2>/dev/null &
pids+=($!)
for ((t = 0; t < 100; t++)); do [[ -s "$tmp/0.out" ]] && break; sleep 0.1; done
first=$(head -n 1 "$tmp/0.out")
listen=$(sed -E 's/.*"listen":"([^"]+)".*/\1/' <<<"$first")
dport=$(sed -E 's/.*"dht_port":([0-9]+).*/\1/' <<<"$first")
for ((i = 1; i < N; i++)); do
  if [[ "$DHT" == --no-dht ]]; then extra=(--no-dht); else extra=(--dht-port 0 --dht-bootstrap "127.0.0.1:$dport"); fi
  "$BIN" peer --run-id rss --listen 127.0.0.1:0 --initial-peers "$listen" "${extra[@]}" --status-every 1 \
    >"$tmp/$i.out" 2>/dev/null &
  pids+=($!)
done
sleep "$S"
total=0
for ((i = 0; i < N; i++)); do
  kb=$(awk '/VmRSS/ {print $2}' "/proc/${pids[$i]}/status")
  total=$((total + kb))
  printf "peer %d: %s, RSS %d KiB\n" "$i" "$(tail -n 1 "$tmp/$i.out" | sed -E 's/.*("num_peers":[0-9]+,"connections":[0-9]+).*/\1/')" "$kb"
done
echo "{\"peers\":$N,\"idle_s\":$S,\"dht\":$([[ "$DHT" == --no-dht ]] && echo false || echo true),\"rss_kib_mean\":$((total / N))}"
