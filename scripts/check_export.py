#!/usr/bin/env python3
"""Checks that a model exported by `dedloc export` loads in transformers and
computes what dedloc computed.

    $REFENV/bin/python scripts/check_export.py --model DIR --batch BATCH.safetensors \\
        [--logits LOGITS.safetensors] [--tol 1e-4] [--save-logits OUT.safetensors]

DIR            written by `dedloc export`: config.json + model.safetensors.
BATCH          input_ids, token_type_ids, attention_mask (int64 [B,T]); labels
               and sentence_order_label are used when present (loss check).
LOGITS         written by dedloc for that batch, a safetensors holding
                 sop_logits         float [B,2]
                 prediction_logits  float [B,T,V] (every position), or [M,V]
                                    (the M positions with labels != -100, in
                                    row-major order; needs labels in BATCH)
               and optionally loss, mlm_loss, sop_loss (float [1]).
               Without --logits only the load and a forward pass are checked.
--save-logits  writes transformers' prediction_logits [B,T,V], sop_logits and
               loss for the batch, in the LOGITS format.

The model is loaded with AlbertForPreTraining.from_pretrained (missing or
unexpected weights are an error: the export must load unchanged) and run in
eval mode in float32. For each tensor the script prints the max abs diff and
the max abs reference value; it exits 1 if any max abs diff exceeds --tol
(padding positions, attention_mask 0, are not compared), 2 on bad input.
Reference-only; pinned versions in scripts/requirements-reference.txt.
"""

import argparse
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AlbertForPreTraining


def fail_input(msg):
    print(f"check_export.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Compare a dedloc export with transformers.")
    ap.add_argument("--model", required=True, help="folder with config.json + model.safetensors")
    ap.add_argument("--batch", required=True, help="batch safetensors")
    ap.add_argument("--logits", help="safetensors with dedloc's logits (without it: load check only)")
    ap.add_argument("--save-logits", help="also write transformers' logits for the batch here")
    ap.add_argument("--tol", type=float, default=1e-4, help="max abs diff allowed (default 1e-4)")
    ap.add_argument("--json", action="store_true", help="also print a JSON summary line")
    args = ap.parse_args()

    torch.set_num_threads(1)
    model, info = AlbertForPreTraining.from_pretrained(args.model, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                             "mismatched_keys", "error_msgs")}
    if problems:
        print(f"check_export.py: {args.model} does not load unchanged: {problems}", file=sys.stderr)
        sys.exit(1)
    model.float().eval()

    batch = load_file(args.batch)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        if key not in batch:
            fail_input(f"{args.batch} lacks {key}")
    inputs = {k: batch[k].long() for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = batch.get("labels")
    sop_labels = batch.get("sentence_order_label")
    with torch.no_grad():
        kwargs = dict(inputs)
        if labels is not None and sop_labels is not None:
            kwargs.update(labels=labels.long(), sentence_order_label=sop_labels.long())
        out = model(**kwargs)

    if args.save_logits:
        saved = {"prediction_logits": out.prediction_logits.contiguous(),
                 "sop_logits": out.sop_logits.contiguous()}
        if out.loss is not None:
            saved["loss"] = out.loss.reshape(1)
        save_file(saved, args.save_logits)
    if not args.logits:
        print(f"OK: {args.model} loads unchanged and runs the batch"
              + (f" (loss {out.loss.item():.6f})" if out.loss is not None else ""))
        sys.exit(0)
    dedloc = load_file(args.logits)
    for key in ("prediction_logits", "sop_logits"):
        if key not in dedloc:
            fail_input(f"{args.logits} lacks {key}")

    B, T = inputs["input_ids"].shape
    V = model.config.vocab_size
    real = inputs["attention_mask"].bool()
    ref_pred = out.prediction_logits
    got_pred = dedloc["prediction_logits"].float()
    if tuple(got_pred.shape) == (B, T, V):
        ref_cmp, got_cmp = ref_pred[real], got_pred[real]
    elif got_pred.dim() == 2 and got_pred.shape[1] == V:
        if labels is None:
            fail_input("prediction_logits is [M,V] but the batch has no labels to locate rows")
        rows = labels != -100
        if int(rows.sum()) != got_pred.shape[0]:
            fail_input(f"prediction_logits has {got_pred.shape[0]} rows, the batch "
                       f"{int(rows.sum())} masked positions")
        ref_cmp, got_cmp = ref_pred[rows], got_pred
    else:
        fail_input(f"prediction_logits shape {tuple(got_pred.shape)}, expected [{B},{T},{V}] or [M,{V}]")
    got_sop = dedloc["sop_logits"].float()
    if tuple(got_sop.shape) != (B, 2):
        fail_input(f"sop_logits shape {tuple(got_sop.shape)}, expected [{B},2]")

    compared = [("prediction_logits", ref_cmp, got_cmp), ("sop_logits", out.sop_logits, got_sop)]
    if out.loss is not None:
        for key in ("loss",):
            if key in dedloc:
                compared.append((key, out.loss.reshape(1), dedloc[key].float().reshape(-1)[:1]))

    worst, summary = 0.0, {}
    for name, ref, got in compared:
        diff = (ref - got).abs().max().item() if ref.numel() else 0.0
        if diff != diff:  # NaN
            diff = float("inf")
        scale = ref.abs().max().item() if ref.numel() else 0.0
        print(f"{name:<18} max abs diff {diff:.3e}  (max abs value {scale:.3e})")
        summary[name] = diff
        worst = max(worst, diff)
    ok = worst <= args.tol
    print(f"{'OK' if ok else 'FAIL'}: max abs diff {worst:.3e}, tolerance {args.tol:.1e}")
    if args.json:
        print(json.dumps({"ok": ok, "tolerance": args.tol, "max_abs_diff": summary}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
