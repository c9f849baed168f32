#!/usr/bin/env bash
# A test network for dedloc peers: network namespaces joined by a bridge,
# each peer's link shaped with tc tbf to chosen upload/download rates. Only
# addresses inside the namespaces it creates are used (10.213.0.0/24); no
# traffic leaves them. Needs root (ip netns, tc). netem (delay) is not
# available in this kernel, so only bandwidth is shaped.
#
#   scripts/netlab.sh create N [UP [DOWN]]   N peers (1..200), rates like 100mbit (default: unshaped)
#   scripts/netlab.sh shape I UP DOWN        reshape peer I (UP = its upload, DOWN = its download)
#   scripts/netlab.sh exec I CMD...          run CMD inside peer I's namespace
#   scripts/netlab.sh addr I                 print peer I's address (10.213.0.I)
#   scripts/netlab.sh status                 list namespaces and qdiscs
#   scripts/netlab.sh destroy                remove everything created
#   scripts/netlab.sh selftest               create 2 peers, check reachability and the
#                                            upload cap (exit 77 = skipped: no root/netns)
#
# NETLAB_PREFIX (default "dl") names the namespaces: <prefix>-hub holds the
# bridge, <prefix>-pI is peer I. Use a distinct prefix per concurrent user.
set -euo pipefail

PREFIX=${NETLAB_PREFIX:-dl}
HUB="$PREFIX-hub"
SUBNET=10.213.0

die() { echo "netlab: $*" >&2; exit 1; }
peer_ns() { echo "$PREFIX-p$1"; }
check_index() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= 1 && $1 <= 200 )) || die "peer index must be 1..200, got '$1'"; }

shape() {
  local i=$1 up=$2 down=$3 ns
  check_index "$i"
  ns=$(peer_ns "$i")
  # Upload: what the peer sends leaves through its eth0.
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  if [[ "$up" != "none" ]]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$up" burst 64kb latency 100ms
  fi
  # Download: what reaches the peer leaves the hub through its veth end.
  ip netns exec "$HUB" tc qdisc del dev "v$i" root 2>/dev/null || true
  if [[ "$down" != "none" ]]; then
    ip netns exec "$HUB" tc qdisc add dev "v$i" root tbf rate "$down" burst 64kb latency 100ms
  fi
}

create() {
  local n=$1 up=${2:-none} down=${3:-${2:-none}}
  [[ "$n" =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 200 )) || die "N must be 1..200"
  ip netns list | grep -q "^$HUB\b" && die "$HUB exists; run destroy first (or set NETLAB_PREFIX)"
  ip netns add "$HUB"
  ip -n "$HUB" link set lo up
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  for ((i = 1; i <= n; i++)); do
    local ns
    ns=$(peer_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Create the pair inside the hub, then move one end: nothing touches the
    # namespace we were started in.
    ip -n "$HUB" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "v$i" master br0
    ip -n "$HUB" link set "v$i" up
    ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$i" "$up" "$down"
  done
  echo "netlab: $n peers at $SUBNET.1..$SUBNET.$n (upload $up, download $down)"
}

destroy() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-(hub|p[0-9]+)$" || true); do
    ip netns del "$ns"
  done
}

status() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-(hub|p[0-9]+)$" | sort -V || true); do
    echo "== $ns"
    ip -n "$ns" -br addr | grep -v '^lo' || true
    ip netns exec "$ns" tc qdisc show | grep tbf || true
  done
}

selftest() {
  if [[ $(id -u) != 0 ]] || ! ip netns add "$PREFIX-probe" 2>/dev/null; then
    echo "netlab selftest: skipped (needs root and network namespaces)"
    exit 77
  fi
  ip netns del "$PREFIX-probe"
  # Own names, so a selftest never meets a lab someone built by hand.
  PREFIX="st$$"; HUB="$PREFIX-hub"
  trap destroy EXIT
  create 2 8mbit 80mbit >/dev/null
  # 2 MB through an 8 Mbit/s upload takes about 2 s; unshaped it takes milliseconds.
  local secs
  secs=$(ip netns exec "$(peer_ns 2)" python3 - "$SUBNET.2" "$(peer_ns 1)" "$SUBNET.1" <<'PY'
import socket, subprocess, sys, time
host, client_ns, client_ip = sys.argv[1], sys.argv[2], sys.argv[3]
srv = socket.socket(); srv.bind((host, 0)); srv.listen(1)
port = srv.getsockname()[1]
sender = subprocess.Popen(["ip", "netns", "exec", client_ns, "python3", "-c",
    "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2]))); s.sendall(b'x'*2000000); s.close()",
    host, str(port)])
conn, _ = srv.accept(); start = time.time(); got = 0
while True:
    b = conn.recv(65536)
    if not b: break
    got += len(b)
sender.wait()
print("%.2f" % (time.time() - start) if got == 2000000 else "short")
PY
)
  echo "netlab selftest: 2 MB over an 8 Mbit/s upload took $secs s (expected about 2)"
  [[ "$secs" != short ]] || die "selftest: transfer incomplete"
  awk -v s="$secs" 'BEGIN { exit !(s > 1.2 && s < 6) }' || die "selftest: shaping not in effect"
  echo "netlab selftest: ok"
}

cmd=${1:-}
shift || true
case "$cmd" in
  create) [[ $# -ge 1 ]] || die "usage: create N [UP [DOWN]]"; create "$@" ;;
  shape) [[ $# -eq 3 ]] || die "usage: shape I UP DOWN"; shape "$@" ;;
  exec) [[ $# -ge 2 ]] || die "usage: exec I CMD..."; check_index "$1"; ns=$(peer_ns "$1"); shift; exec ip netns exec "$ns" "$@" ;;
  addr) check_index "${1:-}"; echo "$SUBNET.$1" ;;
  status) status ;;
  destroy) destroy ;;
  selftest) selftest ;;
  *) sed -n '2,19p' "$0"; [[ -z "$cmd" || "$cmd" == -h || "$cmd" == --help ]] || exit 2 ;;
esac
