#!/usr/bin/env python3
"""Writes the tokenizer fixtures of tests/text (reference script; needs
tokenizers==0.19.1, e.g. $REFENV/bin/python).

  scripts/make_tokenizer_fixtures.py [--corpus build/corpus/bn.txt]

Produces in tests/fixtures/text/:
  tok_mixed_bytefb.json   Unigram trained on Bengali + English with byte_fallback,
                          NFD + StripAccents + Strip + Replace, WhitespaceSplit +
                          Metaspace(prepend first) + Punctuation(contiguous),
                          added tokens with lstrip/rstrip/single_word/normalized
  tok_bert_style.json     BertNormalizer + BertPreTokenizer + Digits(grouped),
                          BertProcessing, no unk fusing surprises
  tok_split_regex.json    NFKD, Replace regex, Split regex (isolated/merged),
                          Whitespace, Metaspace(never, no split)
  tok_spm_albert.json     a SentencePiece Unigram model (sentencepiece 0.2.0) converted
                          by transformers 4.40.2's AlbertTokenizerFast: Replace, NFKD,
                          StripAccents, Lowercase, Precompiled charsmap, Metaspace
                          (only with --spm: needs sentencepiece and transformers)
  <name>.ids for each of those and for assets/tokenizer_bn_demo.json:
      one case per line: hex(utf8 text) TAB ids
      pair cases:        P TAB hex(a) TAB hex(b) TAB ids TAB type_ids
Texts cover Bengali, English, digits, punctuation, repeated spaces, danda
variants, emoji, combining marks, empty lines, long lines, ':' after Bengali
letters, special tokens inside text, invalid UTF-8 and random code points.
"""
import argparse
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer

PINNED = "0.19.1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "text")
SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]


def english_lines():
    lines = []
    for root in ["/usr/share/common-licenses"]:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(path):
                lines += [l.strip() for l in open(path, encoding="utf-8", errors="replace") if l.strip()]
    return lines


def train(lines, vocab_size, normalizer, pre_tokenizer):
    tok = Tokenizer(Unigram())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, unk_token="<unk>",
                             show_progress=False)
    tok.train_from_iterator(lines, trainer)
    return tok


def with_byte_fallback(tok, drop_chars):
    """Rebuilds the model with <0xXX> pieces, byte_fallback and some chars removed."""
    import json
    state = json.loads(tok.to_str())
    vocab = [[p, s] for p, s in state["model"]["vocab"] if not any(c in p for c in drop_chars) or p in SPECIALS]
    min_score = min(s for _, s in vocab)
    vocab += [[f"<0x{b:02X}>", min_score - 1.0] for b in range(256)]
    state["model"]["vocab"] = vocab
    state["model"]["byte_fallback"] = True
    state["model"]["unk_id"] = 1
    return Tokenizer.from_str(json.dumps(state))


def build_tokenizers(bn, en):
    toks = {}
    mixed = bn[:6000] + en
    t = train(mixed, 3000,
              normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Strip(),
                                    normalizers.Replace("``", '"'), normalizers.NFC()]),
              pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                       pre_tokenizers.Metaspace(prepend_scheme="first"),
                                       pre_tokenizers.Punctuation(behavior="contiguous")]))
    t = with_byte_fallback(t, drop_chars="ঝঢ়QZ")
    t.add_tokens([AddedToken("<sep/>", lstrip=True, rstrip=True, normalized=False),
                  AddedToken("hello", single_word=True, normalized=True),
                  AddedToken("ঢাকা", normalized=True)])
    t.add_special_tokens([AddedToken("<extra_0>", normalized=False)])
    t.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS]:1 $A:1 [SEP] [SEP] $B:0 [SEP]:2",
        special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
    toks["tok_mixed_bytefb"] = t

    t = train(mixed, 2500, normalizers.BertNormalizer(lowercase=True),
              pre_tokenizers.Sequence([pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Digits(individual_digits=False)]))
    t.post_processor = processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))
    toks["tok_bert_style"] = t

    t = train(mixed, 2000,
              normalizers.Sequence([normalizers.NFKD(), normalizers.Replace(Regex(r"\s+"), " "),
                                    normalizers.Replace(Regex(r"(\d)\.(\d)"), "$1,$2"), normalizers.Lowercase(),
                                    normalizers.Prepend("#")]),
              pre_tokenizers.Sequence([
                  pre_tokenizers.Split(Regex(r"[\u0964\u0965!?.]"), behavior="merged_with_previous"),
                  pre_tokenizers.Split(Regex(r"'s|'t|'re"), behavior="isolated"),
                  pre_tokenizers.Whitespace(),
                  pre_tokenizers.Metaspace(prepend_scheme="never", split=False)]))
    toks["tok_split_regex"] = t
    toks["tokenizer_bn_demo"] = Tokenizer.from_file(os.path.join(ROOT, "assets", "tokenizer_bn_demo.json"))
    return toks


def build_spm(bn, workdir):
    import sentencepiece as spm
    import transformers
    from transformers import AlbertTokenizerFast
    if spm.__version__ != "0.2.0" or transformers.__version__ != "4.40.2":
        sys.exit("make_tokenizer_fixtures: --spm needs sentencepiece==0.2.0 and transformers==4.40.2")
    corpus = os.path.join(workdir, "bn.txt")
    open(corpus, "w", encoding="utf-8").write("\n".join(bn) + "\n")
    prefix = os.path.join(workdir, "spm_bn")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=2000, model_type="unigram",
                                   character_coverage=0.9995, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   user_defined_symbols=["[MASK]"], control_symbols=["[CLS]", "[SEP]"],
                                   seed_sentencepiece_size=100000, minloglevel=2)
    fast = AlbertTokenizerFast(vocab_file=prefix + ".model", from_slow=True)
    return Tokenizer.from_str(fast._tokenizer.to_str())


def random_text(rng, n):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x900, 0x97F),
              (0x980, 0x9FF), (0x980, 0x9FF), (0x980, 0x9FF), (0x2000, 0x206F), (0x2500, 0x25FF),
              (0x3000, 0x303F), (0x4E00, 0x4E80), (0xAC00, 0xAC40), (0x1100, 0x1175), (0xFB00, 0xFB4F),
              (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F), (0x1D400, 0x1D4FF), (0x0, 0x1F),
              (0x200B, 0x200F), (0x2581, 0x2581), (0x9E4, 0x9E5), (0x9F7, 0x9F7), (0x130, 0x130)]
    out = []
    for _ in range(n):
        a, b = rng.choice(ranges)
        c = rng.randint(a, b)
        if 0xD800 <= c <= 0xDFFF or c in (0x0A, 0x0D):
            c = 0x20
        out.append(chr(c))
        if rng.random() < 0.15:
            out.append(" " * rng.randint(1, 3))
    return "".join(out)


def texts(bn, en, rng):
    t = [
        "", " ", "   ", "\t", "a", "আ", "আমি বাংলায় গান গাই।", "Hello, World!", "HELLO hello Hello",
        "১২৩৪৫ 12345 ৳১০০.৫০ 3.14 1,000,000", "এটা কি? হ্যাঁ! না... (হয়তো) [ঠিক] {আছে} \"উদ্ধৃতি\" 'একক'",
        "অনেক     ফাঁকা      জায়গা   এখানে", "দাঁড়ি৤ পাইপ| বিকল্প৷ দুই দাঁড়ি৥ শেষ।", "দুঃখ দু:খ অত:পর ক: a: 1: :শুরু",
        "ইমোজি 😀🎉👍🏽 👨‍👩‍👧 🇧🇩", "combining: é é ñ ṩ क़ য় য় ড় ড়", "ZWJ ক্‍ষ ZWNJ র‌্যাব",
        "tab\tseparated\ttext", "mixed বাংলা and English in one লাইন 2024 সাল", "[CLS] আমি [SEP] তুমি [MASK]",
        "<pad><unk>[MASK][MASK]x[CLS]", "İstanbul ΣΊΣΥΦΟΣ Straße ǅ ﬁ ① ㎏ ｆｕｌｌ", "▁already▁has▁metaspace",
        "trailing spaces   ", "   leading spaces", "hello<sep/>world  <sep/>  ঢাকা helloworld hello_ hello.",
        "<extra_0>ঢাকায় ঢাকা<extra_0>", "don't it's we're ৩.৫ 3.5 a.b", "ঝড় ঢাকা QUIZ zebra Qatar",
        "\u0000\u0001\u007f\u200b\ufeff\u00a0\u3000\u2028 controls", "\ufffd replacement char",
        "ক" * 300, ("আমাদের দেশ বাংলাদেশ " * 200).strip(), "x" * 1000, " ".join(["1"] * 300),
        "🙂" * 50, "।।।॥॥", "(((", "a-b_c.d,e;f:g!h?i", "e\u0301\u0323 o\u0323\u0301 \u0958\u09dc\u09dd\u09df",
    ]
    t += bn[::97][:300]
    t += en[::11][:200]
    t += [random_text(rng, rng.randint(1, 120)) for _ in range(300)]
    t += ["".join(rng.choice(bn) + rng.choice(["", " ", "  ", "।", "|", ":", "৤"]) for _ in range(rng.randint(2, 6)))
          for _ in range(100)]
    return t


def invalid_utf8_cases():
    return [b"a\xe0\xa6 b\x80 c\xc0\xaf d\xed\xa0\x80 e\xff", b"\xe0\xa6\xae\xe0\xa6", b"\xf0\x9f\x98",
            b"\xfe\xfe\xfe abc", "বাংলা".encode()[:7] + b" ok"]


def write_ids(name, tok, cases, pairs):
    path = os.path.join(OUT, name + ".ids")
    with open(path, "w", encoding="ascii") as f:
        for raw in cases:
            text = raw.decode("utf-8", errors="replace")
            ids = tok.encode(text, add_special_tokens=False).ids
            f.write(raw.hex() + "\t" + " ".join(map(str, ids)) + "\n")
        for a, b in pairs:
            e = tok.encode(a, b, add_special_tokens=True)
            f.write("P\t" + a.encode().hex() + "\t" + b.encode().hex() + "\t" + " ".join(map(str, e.ids)) + "\t" +
                    " ".join(map(str, e.type_ids)) + "\n")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=os.path.join(ROOT, "build", "corpus", "bn.txt"))
    ap.add_argument("--spm", action="store_true", help="also build tok_spm_albert (sentencepiece + transformers)")
    args = ap.parse_args()
    if tokenizers.__version__ != PINNED:
        sys.exit(f"make_tokenizer_fixtures: needs tokenizers=={PINNED}, found {tokenizers.__version__}")
    os.makedirs(OUT, exist_ok=True)
    bn = [l.rstrip("\n") for l in open(args.corpus, encoding="utf-8")]
    en = english_lines()
    rng = random.Random(20240401)
    toks = build_tokenizers(bn, en)
    if args.spm:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            toks["tok_spm_albert"] = build_spm(bn, tmp)
    cases = [s.encode() for s in texts(bn, en, rng)] + invalid_utf8_cases()
    pairs = [(rng.choice(bn), rng.choice(bn)) for _ in range(40)] + [("", ""), ("a", ""), ("", "আ"),
                                                                     ("Hello [MASK]", "বাংলা [SEP]")]
    for name, tok in toks.items():
        if name != "tokenizer_bn_demo":
            tok.save(os.path.join(OUT, name + ".json"), pretty=False)
        path = write_ids(name, tok, cases, pairs)
        print(f"make_tokenizer_fixtures: {name}: {len(cases)} texts + {len(pairs)} pairs -> {path}")


if __name__ == "__main__":
    main()
