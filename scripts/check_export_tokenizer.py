#!/usr/bin/env python3
"""Encodes text lines with the tokenizer of a folder written by `dedloc export`,
loaded the way users load it: transformers' AutoTokenizer.from_pretrained(DIR).

    VENV/bin/python scripts/check_export_tokenizer.py --model DIR --input LINES [--out IDS]

Prints (or writes to --out) one line of ids per input line, special tokens
included ([CLS] ... [SEP], transformers' default), in the format of
`dedloc tokenize --special`. Exits 1 if transformers did not build a fast
tokenizer from the folder's tokenizer.json (a fallback to a SentencePiece
tokenizer without its vocabulary turns Bengali into <unk>), 2 on bad input.

tests/fixtures/export/tokenizer_ids_bn.txt was made with it:
    build/dedloc export --checkpoint CKPT --out /tmp/exp
    VENV/bin/python scripts/check_export_tokenizer.py --model /tmp/exp \\
        --input tests/fixtures/export/tokenizer_lines_bn.txt \\
        --out tests/fixtures/export/tokenizer_ids_bn.txt
Needs only transformers and tokenizers (no torch):
    python3 -m venv VENV && VENV/bin/pip install transformers tokenizers
"""

import argparse
import sys

import transformers
from transformers import AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="folder written by dedloc export")
    ap.add_argument("--input", required=True, help="UTF-8 text, one example per line")
    ap.add_argument("--out", help="write the ids here instead of standard output")
    args = ap.parse_args()
    try:
        with open(args.input, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        print(f"check_export_tokenizer.py: {e}", file=sys.stderr)
        return 2
    if lines and lines[-1] == "":
        lines.pop()
    tok = AutoTokenizer.from_pretrained(args.model)
    print(f"transformers {transformers.__version__}: {type(tok).__name__}, {len(tok)} tokens",
          file=sys.stderr)
    if not tok.is_fast or len(tok) < 100:
        print("check_export_tokenizer.py: the folder's tokenizer.json was not used", file=sys.stderr)
        return 1
    unk = 0
    rows = []
    for line in lines:
        ids = tok(line)["input_ids"]
        unk += sum(1 for i in ids if i == tok.unk_token_id)
        rows.append(" ".join(str(i) for i in ids))
    text = "\n".join(rows) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(f"{len(rows)} lines, {unk} unknown tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
