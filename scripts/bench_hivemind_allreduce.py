#!/usr/bin/env python3
"""Reference figure for `dedloc bench allreduce`: hivemind's butterfly
all-reduce (DecentralizedAverager) with N peers on loopback.

Run by hand only; nothing in the build or the tests uses it. Needs PyPI
hivemind==1.1.12 (its wheel ships the libp2p daemon) and torch; Debian's
python3-torch (1.13, built against numpy 1.x) works from a venv of Debian's
own Python:

    apt-get install python3-torch python3-venv
    /usr/bin/python3 -m venv --system-site-packages /tmp/hmvenv   # sees python3-torch
    /tmp/hmvenv/bin/pip install hivemind==1.1.12 'numpy<2'
    /tmp/hmvenv/bin/python scripts/bench_hivemind_allreduce.py \
        --peers 4 --elements 18000000 --compression fp16 --rounds 3

Each peer is its own process (its own DHT node and libp2p daemon). Every round,
all peers call step(require_trigger=True): matchmaking forms the group first,
and once a peer's group is formed it triggers the all-reduce; the time printed
is from that trigger to the averaged result, so it leaves matchmaking out
(compare: dedloc's round time after the group record). Prints one JSON line
per peer and round, then a summary line (per round: the slowest peer).

Bandwidth caps: hivemind's `bandwidth` argument (--bandwidth-mbit, optionally
per peer) only feeds its load balancing (the linear program that sets each
peer's share); it does not throttle traffic, and on loopback `tc` cannot shape
processes separately. To cap real links, run each peer in its own network
namespace with a shaped veth, as scripts/netlab.sh does for dedloc peers.
"""
import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time


def peer_main(index, args, maddr_queue, result_queue, start_barrier):
    import torch
    import hivemind
    from hivemind.averaging.control import AveragingStage
    from hivemind.compression import Float16Compression, NoCompression, Uniform8BitQuantization

    compression = {"none": NoCompression(), "fp16": Float16Compression(),
                   "uint8": Uniform8BitQuantization()}[args.compression]
    if index == 0:
        dht = hivemind.DHT(host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True)
        maddrs = [str(a) for a in dht.get_visible_maddrs()]
        for _ in range(args.peers - 1):
            maddr_queue.put(maddrs)
    else:
        maddrs = maddr_queue.get()
        dht = hivemind.DHT(host_maddrs=["/ip4/127.0.0.1/tcp/0"], initial_peers=maddrs, start=True)
    bandwidths = [float(b) for b in args.bandwidth_mbit.split(",")] if args.bandwidth_mbit else None
    bandwidth = None
    if bandwidths:
        bandwidth = (bandwidths[index] if len(bandwidths) > 1 else bandwidths[0]) * 1e6 / 8  # bytes/s
    torch.manual_seed(index)
    tensor = torch.randn(args.elements, dtype=torch.float32) * 1e-3
    averager = hivemind.averaging.DecentralizedAverager(
        averaged_tensors=[tensor], dht=dht, prefix="bench_allreduce", target_group_size=args.peers,
        min_group_size=args.peers, min_matchmaking_time=args.matchmaking_s, request_timeout=30.0,
        compression=compression, bandwidth=bandwidth, part_size_bytes=args.part_bytes, start=True)
    start_barrier.wait()
    for r in range(args.rounds):
        control = averager.step(require_trigger=True, wait=False, timeout=args.round_timeout_s)
        t_match = time.perf_counter()
        while control.stage in (AveragingStage.IDLE, AveragingStage.LOOKING_FOR_GROUP) and not control.done():
            time.sleep(0.001)
        t0 = time.perf_counter()
        control.allow_allreduce()
        try:
            gathered = control.result(timeout=args.round_timeout_s)
            ok = True
        except Exception as e:  # a failed round is reported, not hidden
            gathered, ok = None, False
            print(f"peer {index} round {r}: {type(e).__name__}: {e}", file=sys.stderr)
        t1 = time.perf_counter()
        result_queue.put({"peer": index, "round": r, "ok": ok, "allreduce_s": t1 - t0,
                          "matchmaking_s": t0 - t_match, "group_size": len(gathered) if gathered else 0})
    averager.shutdown()
    dht.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", type=int, default=4)
    p.add_argument("--elements", type=int, default=18_000_000)
    p.add_argument("--compression", choices=["none", "fp16", "uint8"], default="fp16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bandwidth-mbit", default="",
                   help="declared upload bandwidth for load balancing only: one value, or one per peer (a,b,c,...)")
    p.add_argument("--part-bytes", type=int, default=2 ** 19, help="hivemind part_size_bytes (chunk size)")
    p.add_argument("--matchmaking-s", type=float, default=2.0)
    p.add_argument("--round-timeout-s", type=float, default=600.0)
    args = p.parse_args()

    # fork: hivemind starts its own processes (DHT) with the default method,
    # and a spawned parent would make that spawn too (its objects do not pickle).
    ctx = mp.get_context("fork")
    maddr_queue, result_queue = ctx.Queue(), ctx.Queue()
    start_barrier = ctx.Barrier(args.peers)
    procs = [ctx.Process(target=peer_main, args=(i, args, maddr_queue, result_queue, start_barrier))
             for i in range(args.peers)]
    for proc in procs:
        proc.start()
    results = []
    for _ in range(args.peers * args.rounds):
        res = result_queue.get(timeout=args.round_timeout_s * 2 + 120)
        results.append(res)
        print(json.dumps(res), flush=True)
    for proc in procs:
        proc.join(timeout=60)
    per_round = []
    for r in range(args.rounds):
        times = [x["allreduce_s"] for x in results if x["round"] == r and x["ok"]]
        if len(times) == args.peers:
            per_round.append(max(times))
    import hivemind
    summary = {"bench": "hivemind_allreduce", "hivemind": hivemind.__version__, "peers": args.peers,
               "elements": args.elements, "compression": args.compression, "rounds": args.rounds,
               "bandwidth_mbit": args.bandwidth_mbit or None, "part_bytes": args.part_bytes,
               "round_s": per_round, "median_round_s": statistics.median(per_round) if per_round else None}
    if per_round:
        vector_bytes = 4.0 * args.elements
        t = statistics.median(per_round)
        summary["algbw_GBps"] = vector_bytes / t / 1e9  # nccl-tests' algbw over the fp32 vector
        summary["busbw_GBps"] = summary["algbw_GBps"] * 2 * (args.peers - 1) / args.peers
    print(json.dumps(summary), flush=True)
    return 0 if per_round else 1


if __name__ == "__main__":
    sys.exit(main())
