#!/usr/bin/env python3
"""HF tokenizers' side of bench/bench_data.c: encodes the same sentences (split
with the same rules as src/data/sentences.c) with the same tokenizer.json and
reports MB/s of sentence text and tokens/s, one thread and all threads.

    $REFENV/bin/python scripts/bench_data_hf.py \
        --tokenizer assets/tokenizer_bn_demo.json --data tests/fixtures/data/bn_paragraphs.txt

Pinned: tokenizers==0.19.1 (see requirements-reference.txt). Reference only.
"""
import argparse
import os
import time

DANDAS = ("\u0964", "\u0965")


def split_sentences(text):
    """Same rules as dl_split_sentences: after a run of dandas; after a run of
    . ! ? followed by white space or the end; at newlines. Trimmed, non-empty."""
    out, start, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in DANDAS:
            while i < n and text[i] in DANDAS:
                i += 1
            out.append(text[start:i])
            start = i
            continue
        if c in ".!?":
            j = i
            while j < n and text[j] in ".!?":
                j += 1
            if j == n or text[j] in " \t\r\n\f\v":
                out.append(text[start:j])
                start = j
            i = j
            continue
        if c == "\n":
            out.append(text[start:i])
            start = i + 1
        i += 1
    out.append(text[start:])
    return [s.strip(" \t\r\n\f\v") for s in out if s.strip(" \t\r\n\f\v")]


def timed(fn, sentences, min_seconds=1.0):
    reps, tokens, start = 0, 0, time.perf_counter()
    while True:
        tokens += fn(sentences)
        reps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return reps, tokens, elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="assets/tokenizer_bn_demo.json")
    ap.add_argument("--data", default="tests/fixtures/data/bn_paragraphs.txt")
    args = ap.parse_args()
    import tokenizers
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(args.tokenizer)
    with open(args.data, encoding="utf-8", errors="replace") as f:
        sentences = [s for line in f for s in split_sentences(line.rstrip("\n"))]
    nbytes = sum(len(s.encode("utf-8")) for s in sentences)

    def one_by_one(batch):
        return sum(len(tok.encode(s, add_special_tokens=False).ids) for s in batch)

    def batched(batch):
        return sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))

    print(f"HF tokenizers {tokenizers.__version__}: {args.data}, {len(sentences)} sentences, "
          f"{nbytes / 1e6:.2f} MB per pass")
    for name, fn in (("encode, 1 thread", one_by_one), ("encode_batch, all threads", batched)):
        reps, tokens, secs = timed(fn, sentences)
        print(f"  {name:26s} {reps * nbytes / 1e6 / secs:8.2f} MB/s {tokens / secs:12.0f} tokens/s "
              f"({tokens // reps} tokens per pass, {reps} passes)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
