#!/usr/bin/env python3
"""Compares `dedloc tokenize` with HF tokenizers id for id on any tokenizer.json
and any text file (reference script; needs tokenizers==0.19.1, e.g. $REFENV from scripts/make_refenv.sh).

  scripts/compare_tokenizer.py --tokenizer tok.json --input text.txt [--pair] \
      [--dedloc build/dedloc]

Lines are split on '\\n' only (a trailing '\\r' is dropped, as dedloc does);
invalid UTF-8 is decoded with errors='replace', which is what dedloc does too.
With --pair each line is split at its first tab into two segments. Prints the
number of lines and ids compared and the first mismatches; exit 1 on any.
"""
import argparse
import subprocess
import sys

import tokenizers
from tokenizers import Tokenizer

PINNED = "0.19.1"


def read_lines(path):
    data = open(path, "rb").read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [l[:-1] if l.endswith(b"\r") else l for l in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--pair", action="store_true")
    ap.add_argument("--dedloc", default="build/dedloc")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print")
    args = ap.parse_args()
    if tokenizers.__version__ != PINNED:
        sys.exit(f"compare_tokenizer: needs tokenizers=={PINNED}, found {tokenizers.__version__}")
    tok = Tokenizer.from_file(args.tokenizer)
    lines = read_lines(args.input)
    expected = []
    for raw in lines:
        text = raw.decode("utf-8", errors="replace")
        if args.pair:
            a, _, b = text.partition("\t")
            expected.append(tok.encode(a, b, add_special_tokens=True).ids)
        else:
            expected.append(tok.encode(text, add_special_tokens=False).ids)
    cmd = [args.dedloc, "tokenize", "--tokenizer", args.tokenizer, "--input", args.input]
    if args.pair:
        cmd.append("--pair")
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout.decode().split("\n")
    if out and out[-1] == "":
        out.pop()
    got = [[int(x) for x in l.split()] for l in out]
    bad = 0
    n_ids = 0
    if len(got) != len(expected):
        print(f"line count differs: dedloc {len(got)}, HF {len(expected)}")
        bad += 1
    for i, (g, e) in enumerate(zip(got, expected)):
        n_ids += len(e)
        if g != e:
            bad += 1
            if bad <= args.show:
                text = lines[i].decode("utf-8", errors="replace")
                print(f"line {i + 1}: {text[:200]!r}\n  HF     {e[:60]}\n  dedloc {g[:60]}")
                print("  HF tokens    ", tok.encode(text, add_special_tokens=False).tokens[:40])
    print(f"compare_tokenizer: {len(expected)} lines, {n_ids} ids, {bad} lines differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
