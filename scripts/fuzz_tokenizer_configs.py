#!/usr/bin/env python3
"""Differential test of dedloc tokenize against HF tokenizers on random
tokenizer configurations (reference script; tokenizers==0.19.1): the demo
tokenizer's Unigram model under random normalizer and pre-tokenizer sequences,
random added tokens and byte_fallback, each encoding fixture texts both ways.

  scripts/fuzz_tokenizer_configs.py [--seed 1] [--configs 40] [--dedloc build/dedloc]

Prints each configuration that differs with its first differing text; the
last line counts cases, ids and differing configurations.
"""
import argparse, json, os, random, subprocess, sys, tempfile
import tokenizers
from tokenizers import Tokenizer
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--configs", type=int, default=40)
ap.add_argument("--dedloc", default=os.path.join(ROOT, "build", "dedloc"))
args = ap.parse_args()
if tokenizers.__version__ != "0.19.1":
    sys.exit("fuzz_tokenizer_configs: needs tokenizers==0.19.1")
rng = random.Random(args.seed)
work = tempfile.mkdtemp(prefix="dl_fuzz_tok_")
base = json.load(open(os.path.join(ROOT, "assets", "tokenizer_bn_demo.json")))
spm = json.load(open(os.path.join(ROOT, "tests", "fixtures", "text", "tok_spm_albert.json")))
charsmap = [n for n in spm["normalizer"]["normalizers"] if n["type"] == "Precompiled"][0]
lines = [bytes.fromhex(l.split("\t")[0]).decode("utf-8", "replace")
         for l in open(os.path.join(ROOT, "tests", "fixtures", "text", "tok_mixed_bytefb.ids")) if not l.startswith("P\t")]
lines = [l for l in lines if "\n" not in l and "\r" not in l and "\x85" not in l and "\u2028" not in l and "\u2029" not in l]
def rnd_pattern():
    return rng.choice([{"String": " "}, {"String": "।"}, {"String": "ab"}, {"String": "▁"}, {"Regex": "\\s+"}, {"Regex": "[০-৯]+"},
                       {"Regex": "\\p{P}"}, {"Regex": "(?<=[ঀ-৿]):"}, {"Regex": "[a-z]+"}, {"Regex": "\\d"}, {"Regex": "'s|'t"}, {"Regex": "\\w+"}])
def rnd_norm():
    t = rng.choice(["Nmt","NFC","NFD","NFKC","NFKD","Lowercase","Strip","StripAccents","Replace","Prepend","BertNormalizer","Precompiled"])
    if t == "Strip": return {"type": t, "strip_left": rng.random() < .5, "strip_right": rng.random() < .5}
    if t == "Replace": return {"type": t, "pattern": rnd_pattern(), "content": rng.choice(["", " ", "▁", "x", "।"])}
    if t == "Prepend": return {"type": t, "prepend": rng.choice(["▁", " ", "#"])}
    if t == "BertNormalizer": return {"type": t, "clean_text": rng.random() < .5, "handle_chinese_chars": rng.random() < .5, "strip_accents": rng.choice([None, True, False]), "lowercase": rng.random() < .5}
    if t == "Precompiled": return charsmap
    return {"type": t}
def rnd_pre():
    t = rng.choice(["Metaspace","Digits","Punctuation","WhitespaceSplit","Whitespace","BertPreTokenizer","Split","CharDelimiterSplit"])
    beh = rng.choice(["Removed","Isolated","MergedWithPrevious","MergedWithNext","Contiguous"])
    if t == "Metaspace": return {"type": t, "replacement": "▁", "prepend_scheme": rng.choice(["always","first","never"]), "split": rng.random() < .7}
    if t == "Digits": return {"type": t, "individual_digits": rng.random() < .5}
    if t == "Punctuation": return {"type": t, "behavior": beh}
    if t == "Split": return {"type": t, "pattern": rnd_pattern(), "behavior": beh, "invert": rng.random() < .3}
    if t == "CharDelimiterSplit": return {"type": t, "delimiter": rng.choice([" ", "।", "a"])}
    return {"type": t}
bad_total = 0; n_cases = 0; n_ids = 0
for k in range(args.configs):
    cfg = json.loads(json.dumps(base))
    cfg["normalizer"] = rng.choice([None, {"type": "Sequence", "normalizers": [rnd_norm() for _ in range(rng.randint(1, 4))]}])
    cfg["pre_tokenizer"] = rng.choice([None, {"type": "Sequence", "pretokenizers": [rnd_pre() for _ in range(rng.randint(1, 4))]}])
    if rng.random() < 0.3: cfg["model"]["byte_fallback"] = True
    extra = []
    if rng.random() < 0.5:
        extra = [{"id": 8000 + i, "content": c, "single_word": rng.random() < .3, "lstrip": rng.random() < .3, "rstrip": rng.random() < .3, "normalized": rng.random() < .5, "special": rng.random() < .5}
                 for i, c in enumerate(rng.sample(["hello", "বাংলা", "<x>", "ক", "AB", " ", "।"], 3))]
        cfg["added_tokens"] = cfg["added_tokens"] + extra
    path = os.path.join(work, f"cfg{k}.json")
    json.dump(cfg, open(path, "w"), ensure_ascii=False)
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:
        print("HF refuses config", k, e); continue
    texts = rng.sample(lines, 150)
    inp = os.path.join(work, "in.txt")
    open(inp, "w").write("\n".join(texts) + "\n")
    try:
        exp = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    except Exception as e:
        print("HF fails", k, e); continue
    r = subprocess.run([args.dedloc, "tokenize", "--tokenizer", path, "--input", inp], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        print("dedloc fails", k, r.stderr.decode()[:300]); bad_total += 1; continue
    got = [list(map(int, l.split())) for l in r.stdout.decode().split("\n")[:len(texts)]]
    bad = [(t, e, g) for t, e, g in zip(texts, exp, got) if e != g]
    n_cases += len(texts); n_ids += sum(map(len, exp))
    if bad:
        bad_total += 1
        print(f"config {k}: {len(bad)} differ; norm={json.dumps(cfg['normalizer'], ensure_ascii=False)[:300]} pre={json.dumps(cfg['pre_tokenizer'])} added={[(a['content'], a['normalized'], a['single_word'], a['lstrip'], a['rstrip']) for a in extra]} bf={cfg['model'].get('byte_fallback')}")
        t, e, g = bad[0]
        print("   ", repr(t[:100])); print("    HF", e[:30]); print("    dd", g[:30])
print(f"fuzz: {n_cases} cases, {n_ids} ids, {bad_total} configs with differences")
