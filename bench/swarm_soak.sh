#!/usr/bin/env bash
# Soak of the swarm layer: N light peers (`dedloc peer`, no model) on
# loopback, with churn: every --churn-every seconds one peer (never one of
# the --long-lived first peers) is killed with SIGKILL and the peer killed
# before it restarts with its identity (a new port). For --duration seconds.
#   bench/swarm_soak.sh [--peers 64] [--duration 180] [--churn-every 3]
#                       [--expiry 30] [--long-lived 8] [--sample-every 5] [--json]
# (--duration, --expiry and --sample-every in whole seconds)
# It measures:
# - views: each peer prints its view (the ids it counts alive) every second.
#   A view line of a peer up for --expiry seconds is right when it misses no
#   peer that has been up for
#   --expiry seconds and holds no peer dead for longer than --expiry plus
#   2 s (a record outlives its owner by up to the expiry). Reported: the share
#   of right view lines after the warm-up, the most missing and stale ids in
#   one line, and after the churn stops (one expiry plus 5 s later) whether
#   every peer's last view is exactly the live set.
# - resources of the long-lived peers: open file descriptors (/proc/PID/fd)
#   and RSS, sampled every --sample-every seconds; growth is the last sample
#   minus the first one after the warm-up (--expiry + 10 s, when everyone has
#   met everyone), and the largest over the peers.
# Prints a table, and one JSON object with --json. Exits 1 when the views did
# not converge at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/dedloc}
N=64; DURATION=180; CHURN=3; EXPIRY=30; LONG=8; SAMPLE=5; JSON=0
while [ $# -gt 0 ]; do
  case "$1" in
    --peers) N=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --churn-every) CHURN=$2; shift 2 ;;
    --expiry) EXPIRY=$2; shift 2 ;;
    --long-lived) LONG=$2; shift 2 ;;
    --sample-every) SAMPLE=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "swarm_soak: unknown option $1"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "swarm_soak: jq is missing"; exit 1; }
[ "$LONG" -ge 1 ] && [ "$N" -gt "$LONG" ] || { echo "swarm_soak: need 1 <= --long-lived < --peers"; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/dedloc-soak.XXXXXX")
declare -a PID=() ID=()
cleanup() {
  for p in "${PID[@]}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
now() { echo "$EPOCHREALTIME"; }
RUN="soak-$$"
BOOT=""

# start I: peer I in the background, appending its view lines to $W/I.jsonl.
start() {
  local i=$1 extra=()
  [ -n "$BOOT" ] && extra=(--initial-peers "$BOOT")
  "$BIN" peer --run-id "$RUN" --listen 127.0.0.1:0 --no-dht --expiry "$EXPIRY" --status-every 1 --json \
    --identity "$W/id$i" "${extra[@]}" >>"$W/$i.jsonl" 2>>"$W/$i.err" &
  PID[$i]=$!
  echo "$(now) start $i" >>"$W/events"
}

# id_of I: peer I's id, from its first view line (waits for it).
id_of() {
  for _ in $(seq 400); do
    local id
    id=$(head -n 1 "$W/$1.jsonl" 2>/dev/null | jq -r '.peer_id // empty' 2>/dev/null || true)
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.05
  done
  echo "swarm_soak: peer $1 did not start:" >&2; tail -n 5 "$W/$1.err" >&2; exit 1
}

TICKS=$(getconf CLK_TCK)
sample() { # one line per long-lived peer: time index fds rss_kb cpu_s
  local t; t=$(now)
  for i in $(seq 0 $((LONG - 1))); do
    local p=${PID[$i]} fds rss cpu
    fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
    # utime + stime (fields 14 and 15; the name in field 2 has no spaces here)
    cpu=$(awk -v hz="$TICKS" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$p/stat" 2>/dev/null || echo 0)
    echo "$t $i $fds $rss $cpu" >>"$W/resources"
  done
}

start 0
ID[0]=$(id_of 0)
BOOT=$(head -n 1 "$W/0.jsonl" | jq -r .listen)
for i in $(seq 1 $((N - 1))); do start "$i"; done
for i in $(seq 1 $((N - 1))); do ID[$i]=$(id_of "$i"); done
for i in $(seq 0 $((N - 1))); do echo "${ID[$i]} $i"; done >"$W/ids"
# The clock of the run starts once every peer is up (starting 64 processes
# takes a while on a busy machine).
t0=$(now)

# Churn: kill one (not long-lived) peer, restart the one killed before.
end=$((EPOCHSECONDS + DURATION))
next_sample=0; down=""; kills=0
while [ "$EPOCHSECONDS" -lt "$end" ]; do
  if [ "$EPOCHSECONDS" -ge "$next_sample" ]; then
    sample
    next_sample=$((EPOCHSECONDS + SAMPLE))
  fi
  victim=$((LONG + RANDOM % (N - LONG)))
  if [ "$victim" != "$down" ]; then
    kill -9 "${PID[$victim]}" 2>/dev/null || true
    wait "${PID[$victim]}" 2>/dev/null || true
    echo "$(now) kill $victim" >>"$W/events"
    PID[$victim]=""
    kills=$((kills + 1))
    [ -n "$down" ] && start "$down"
    down=$victim
  fi
  sleep "$CHURN"
done
# The churn stops: the last victim comes back, then one expiry for the records to settle.
[ -n "$down" ] && start "$down"
churn_end=$EPOCHSECONDS
settle_until=$((churn_end + ${EXPIRY%.*} + 6))
while [ "$EPOCHSECONDS" -lt "$settle_until" ]; do sample; sleep "$SAMPLE"; done
sample
t_end=$(now)
for i in $(seq 0 $((LONG - 1))); do [ -d "/proc/${PID[$i]}" ] || { echo "swarm_soak: long-lived peer $i died" >&2; exit 1; }; done
# Done measuring: stop the peers, so their logs stop growing.
for i in "${!PID[@]}"; do [ -n "${PID[$i]}" ] && kill -9 "${PID[$i]}" 2>/dev/null || true; done
wait 2>/dev/null || true
PID=()

# Views: merge the lifecycle events and every view line in time order.
{
  awk '{ print $1, "E", $2, $3 }' "$W/events"
  # sed, not jq: ~100 MB of view lines, and sed is many times faster. The
  # peer prints the fields in this order (src/cli/cmd_peer.c).
  cat "$W"/[0-9]*.jsonl | sed -nE 's/^\{"time":([0-9.e+]+),"peer_id":"([0-9a-f]+)",.*"peers":\[([^]]*)\].*/\1 V \2 \3/p' | tr -d '"' | tr ',' ' ' 
} | sort -n -k1,1 >"$W/timeline"
warm=$(awk -v a="$t0" -v e="$EXPIRY" 'BEGIN { printf "%.3f", a + e + 10 }')
views=$(awk -v warm="$warm" -v expiry="$EXPIRY" -v settle="$settle_until" -v churn_end="$churn_end" -v n="$N" '
  FILENAME == ARGV[1] { idx[$1] = $2; next }
  $2 == "E" { i = $4; if ($3 == "start") { up[i] = 1; since[i] = $1 } else { up[i] = 0; died[i] = $1 } next }
  $2 == "V" {
    t = $1; v = idx[$3]
    if (!up[v] || t - since[v] <= expiry) next # a newcomer has an expiry to meet everyone
    delete seen; miss = 0; stale = 0
    for (k = 4; k <= NF; k++) seen[idx[$k]] = 1
    for (i = 0; i < n; i++) {
      if (up[i] && !(i in seen) && t - since[i] > expiry) miss++
      if (!up[i] && (i in seen) && t - died[i] > expiry + 2) stale++
    }
    if (t >= warm && t < churn_end) { lines++; right += (miss == 0 && stale == 0)
      if (miss > maxmiss) maxmiss = miss; if (stale > maxstale) maxstale = stale }
    if (t >= settle - 1) { # the last lines: exactly the live set
      exact = (miss == 0); for (i = 0; i < n; i++) if ((up[i] != 0) != ((i in seen) != 0)) exact = 0
      final[v] = exact
    }
  }
  END {
    ok = 0; for (v in final) ok += final[v]
    printf "%d %d %d %d %d %d\n", lines, right, maxmiss + 0, maxstale + 0, ok, length(final)
  }' "$W/ids" "$W/timeline")
read -r lines right maxmiss maxstale final_ok final_n <<<"$views"

# Resources: per long-lived peer, first sample after the warm-up and the last.
res=$(awk -v warm="$warm" '
  $1 >= warm { if (!($2 in f0)) { f0[$2] = $3; r0[$2] = $4; c0[$2] = $5; c0s += $5; if (!t0) t0 = $1 }
               if ($1 > t1) { t1 = $1 } if ($2 in c1) c1s -= c1[$2]; c1[$2] = $5; c1s += $5
               f1[$2] = $3; r1[$2] = $4
               if ($3 > fmax) fmax = $3; if ($4 > rmax) rmax = $4 }
  END { for (i in f0) { df = f1[i] - f0[i]; dr = r1[i] - r0[i]; if (!n++ || df > mdf) mdf = df; if (n == 1 || dr > mdr) mdr = dr
                        fs += f0[i]; fe += f1[i]; rs += r0[i]; re += r1[i] }
        printf "%.1f %.1f %d %.0f %.0f %d %d %d %.3f\n", fs / n, fe / n, mdf, rs / n, re / n, mdr, fmax, rmax,
               (c1s - c0s) / n / (t1 - t0) }' "$W/resources")
read -r fd_first fd_last fd_growth rss_first rss_last rss_growth fd_max rss_max cpu_share <<<"$res"
elapsed=$(awk -v a="$t0" -v b="$t_end" 'BEGIN { printf "%.0f", b - a }')
converged=$([ "$final_ok" = "$final_n" ] && [ "$final_n" = "$N" ] && echo true || echo false)

if [ "$JSON" = 1 ]; then
  jq -n -c --argjson peers "$N" --argjson duration "$DURATION" --argjson churn "$CHURN" --argjson expiry "$EXPIRY" \
    --argjson long "$LONG" --argjson kills "$kills" --argjson elapsed "$elapsed" --argjson lines "$lines" \
    --argjson right "$right" --argjson maxmiss "$maxmiss" --argjson maxstale "$maxstale" \
    --argjson final_ok "$final_ok" --argjson final_n "$final_n" --argjson converged "$converged" \
    --argjson fd_first "$fd_first" --argjson fd_last "$fd_last" --argjson fd_growth "$fd_growth" --argjson fd_max "$fd_max" \
    --argjson rss_first "$rss_first" --argjson rss_last "$rss_last" --argjson rss_growth "$rss_growth" --argjson rss_max "$rss_max" --argjson cpu "$cpu_share" \
    '{bench: "swarm_soak", peers: $peers, duration_s: $duration, churn_every_s: $churn, expiry_s: $expiry,
      long_lived: $long, kills: $kills, elapsed_s: $elapsed,
      views: {lines: $lines, right: $right, right_share: (if $lines > 0 then $right / $lines else 0 end),
              max_missing: $maxmiss, max_stale: $maxstale, final_exact: $final_ok, final_peers: $final_n,
              converged: $converged},
      long_lived_peers: {fds_first_mean: $fd_first, fds_last_mean: $fd_last, fds_growth_max: $fd_growth, fds_max: $fd_max,
              rss_kb_first_mean: $rss_first, rss_kb_last_mean: $rss_last, rss_kb_growth_max: $rss_growth,
              rss_kb_max: $rss_max, cpu_share_mean: $cpu}}'
else
  echo "$N peers, churn: one killed and one restarted every ${CHURN}s ($kills kills), expiry ${EXPIRY}s, ${elapsed}s in all"
  printf '%-44s %s\n' "view lines after the warm-up, right" "$right of $lines ($(awk -v a="$right" -v b="$lines" 'BEGIN { printf "%.1f", b ? 100 * a / b : 0 }')%)"
  printf '%-44s %s\n' "most ids missing / stale in one line" "$maxmiss / $maxstale"
  printf '%-44s %s\n' "last views exactly the live set (settled)" "$final_ok of $final_n peers"
  printf '%-44s %s\n' "long-lived peers: fds first -> last (mean)" "$fd_first -> $fd_last (largest growth $fd_growth, max $fd_max)"
  printf '%-44s %s\n' "long-lived peers: RSS kB first -> last (mean)" "$rss_first -> $rss_last (largest growth $rss_growth, max $rss_max)"
  printf '%-44s %s\n' "long-lived peers: CPU per peer (mean)" "$(awk -v c="$cpu_share" 'BEGIN { printf "%.1f%%", 100 * c }') of one core"
fi
[ "$converged" = true ]
