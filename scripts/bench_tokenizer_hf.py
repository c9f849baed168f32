#!/usr/bin/env python3
"""HF tokenizers side of the tokenizer benchmark (reference script; needs
tokenizers==0.19.1, e.g. $REFENV/bin/python). Encodes every line of the
input like build/bench_tokenizer does: one `encode` per line on one thread,
then `encode_batch` over all lines (Rust threads, RAYON_NUM_THREADS or all
cores). With --dedloc it also runs build/bench_tokenizer on the same input and
tokenizer and prints both in one table.

  scripts/bench_tokenizer_hf.py [--input build/corpus/bn.txt]
      [--tokenizer assets/tokenizer_bn_demo.json] [--seconds 2] [--dedloc build/bench_tokenizer]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import tokenizers
from tokenizers import Tokenizer

PINNED = "0.19.1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(fn, seconds):
    passes, t0 = 0, time.perf_counter()
    while True:
        tokens = fn()
        passes += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return passes, elapsed, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_input = os.path.join(ROOT, "build", "corpus", "bn.txt")
    if not os.path.exists(default_input):
        default_input = os.path.join(ROOT, "tests", "fixtures", "text", "corpus_bn_sample.txt")
    ap.add_argument("--input", default=default_input)
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "assets", "tokenizer_bn_demo.json"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--dedloc", help="path of build/bench_tokenizer to run on the same input")
    ap.add_argument("--threads", type=int, default=2, help="threads for the dedloc side")
    args = ap.parse_args()
    if tokenizers.__version__ != PINNED:
        sys.exit(f"bench_tokenizer_hf: needs tokenizers=={PINNED}, found {tokenizers.__version__}")
    tok = Tokenizer.from_file(args.tokenizer)
    data = open(args.input, "rb").read()
    lines = [l.decode("utf-8", errors="replace") for l in data.split(b"\n")]
    if lines and lines[-1] == "":
        lines.pop()
    size = len(data)

    def one_by_one():
        return sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)

    def batch():
        return sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))

    rows = []
    for name, fn in [("HF encode (1 thread)", one_by_one), ("HF encode_batch", batch)]:
        passes, elapsed, tokens = timed(fn, args.seconds)
        rows.append({"name": name, "mb_per_s": size * passes / 1e6 / elapsed,
                     "tokens_per_s": tokens * passes / elapsed, "tokens_per_pass": tokens})
    if args.dedloc:
        out = subprocess.run([args.dedloc, "--input", args.input, "--tokenizer", args.tokenizer, "--seconds",
                              str(args.seconds), "--threads", str(args.threads)],
                             stdout=subprocess.PIPE, check=True).stdout.decode()
        result = json.loads(out.strip().splitlines()[-1])
        for r in result["results"]:
            rows.append({"name": f"dedloc ({r['threads']} thread{'s' if r['threads'] > 1 else ''})",
                         "mb_per_s": r["mb_per_s"], "tokens_per_s": r["tokens_per_s"],
                         "tokens_per_pass": r["tokens_per_pass"]})
    print(f"bench_tokenizer_hf: {args.input}, {len(lines)} lines, {size / 1e6:.2f} MB, {args.tokenizer}, "
          f"tokenizers {tokenizers.__version__}, {os.cpu_count()} cores")
    print(f"{'':24s} {'MB/s':>8s} {'tokens/s':>12s} {'tokens/pass':>12s}")
    for r in rows:
        print(f"{r['name']:24s} {r['mb_per_s']:8.2f} {r['tokens_per_s']:12.0f} {r['tokens_per_pass']:12d}")
    print(json.dumps({"bench": "tokenizer_hf", "input": args.input, "bytes": size, "lines": len(lines),
                      "results": rows}))


if __name__ == "__main__":
    main()
