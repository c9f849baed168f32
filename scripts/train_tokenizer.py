#!/usr/bin/env python3
"""Trains a Unigram tokenizer with the sahajBERT text pipeline and writes a
HF tokenizers tokenizer.json (reference script; never needed to build or test).

Pipeline (see docs of the text module / DESIGN.md):
  normalizer    Nmt, NFKC, repeated spaces -> one, Bengali danda variants unified,
                ':' after a Bengali letter -> visarga (U+0983), lowercase
  pre-tokenizer Metaspace('▁'), digits one by one, punctuation isolated
  post-process  [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1

Requires tokenizers==0.19.1 (e.g. $REFENV/bin/python).
  scripts/train_tokenizer.py --corpus build/corpus/bn.txt --vocab-size 8000 \
      --out assets/tokenizer_bn_demo.json
"""
import argparse
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer

PINNED = "0.19.1"
SPECIAL_TOKENS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]


def sahajbert_normalizer():
    return normalizers.Sequence([
        normalizers.Nmt(),
        normalizers.NFKC(),
        normalizers.Replace(Regex(" {2,}"), " "),
        normalizers.Replace("\u09e4", "\u0964"),
        normalizers.Replace("|", "\u0964"),
        normalizers.Replace("\u09f7", "\u0964"),
        normalizers.Replace("\u09e5", "\u0965"),
        normalizers.Replace(Regex("(?<=[\u0980-\u09ff]):"), "\u0983"),
        normalizers.Lowercase(),
    ])


def sahajbert_pre_tokenizer():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])


def build(corpus, vocab_size):
    tok = Tokenizer(Unigram())
    tok.normalizer = sahajbert_normalizer()
    tok.pre_tokenizer = sahajbert_pre_tokenizer()
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                             unk_token="<unk>", show_progress=False)
    tok.train([corpus], trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="UTF-8 text, one document or sentence per line")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--out", required=True, help="tokenizer.json to write")
    args = ap.parse_args()
    if tokenizers.__version__ != PINNED:
        sys.exit(f"train_tokenizer: needs tokenizers=={PINNED}, found {tokenizers.__version__}")
    tok = build(args.corpus, args.vocab_size)
    tok.save(args.out, pretty=False)
    print(f"train_tokenizer: {tok.get_vocab_size()} pieces -> {args.out}")


if __name__ == "__main__":
    main()
