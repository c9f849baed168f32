#!/usr/bin/env python3
"""Checks a folder written by `dedloc export` against transformers through
losses and gradients (no logits dump needed):

    $REFENV/bin/python scripts/check_export_grads.py --model DIR [--dedloc build/dedloc]

1. AlbertForPreTraining.from_pretrained(DIR) must load with no missing,
   unexpected or mismatched weights (the export loads unchanged);
2. on a random batch (odd sizes, padding, ~15% masked) transformers computes
   the loss and every gradient; `dedloc grad` computes them from the same
   folder; the losses must agree within --tol-loss (relative) and every
   whole gradient within --tol-grad (relative L2) and each tensor whose
   gradient is not negligible (>= 1e-3 of the largest tensor's norm) within
   10x that.
Exit 0 when all agree, 1 otherwise. Reference-only (torch 1.13, transformers
4.40.2, safetensors; see scripts/requirements-reference.txt).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AlbertForPreTraining


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dedloc", default=os.path.join(os.path.dirname(__file__), "..", "build", "dedloc"))
    ap.add_argument("--tol-loss", type=float, default=1e-5)
    ap.add_argument("--tol-grad", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    model, info = AlbertForPreTraining.from_pretrained(args.model, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        print(f"check_export_grads: the export does not load unchanged: {bad}")
        return 1
    model.eval()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    vocab, positions = cfg["vocab_size"], cfg["max_position_embeddings"]
    g = torch.Generator().manual_seed(args.seed)
    B, T = 3, min(37, positions)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[2, T - 9:] = 0
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:] = 1
    labels = torch.full((B, T), -100)
    sel = torch.rand(B, T, generator=g) < 0.15
    sel[:, 0] = False
    sel[2, T - 9:] = False
    sel[:, 1] = True
    labels[sel] = ids[sel]
    ids[sel] = 4
    sop = torch.tensor([0, 1, 1])
    out = model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels,
                sentence_order_label=sop)
    out.loss.backward()

    with tempfile.TemporaryDirectory() as tmp:
        batch = os.path.join(tmp, "batch.safetensors")
        grads = os.path.join(tmp, "grads.safetensors")
        save_file({"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels,
                   "sentence_order_label": sop}, batch)
        subprocess.run([args.dedloc, "grad", "--model", args.model, "--batch", batch, "--out", grads],
                       check=True, stdout=subprocess.DEVNULL)
        got = load_file(grads)

    ok = True
    ref_loss, got_loss = out.loss.item(), got["loss"].item()
    rel = abs(got_loss - ref_loss) / abs(ref_loss)
    print(f"loss: transformers {ref_loss:.7f}, dedloc {got_loss:.7f} (rel {rel:.2e})")
    ok &= rel <= args.tol_loss
    # A trained model can have tensors whose gradient is tiny next to the
    # others (attention query/key: cancellations make even torch's fp32 differ
    # from fp64 by 1e-3 there). Judge the whole gradient by its relative L2
    # error, and single tensors only where their gradient is not negligible.
    names = [n for n, _ in model.named_parameters()]
    missing = [n for n in names if n not in got]
    for n in missing:
        print(f"missing gradient {n}")
    ok &= not missing
    params = {n: p for n, p in model.named_parameters() if n in got}
    num = sum(((got[n] - p.grad).double() ** 2).sum().item() for n, p in params.items())
    den = sum((p.grad.double() ** 2).sum().item() for p in params.values())
    whole = (num / den) ** 0.5
    largest = max(p.grad.norm().item() for p in params.values())
    worst, worst_name = 0.0, ""
    for n, p in params.items():
        norm = p.grad.norm().item()
        if norm < 1e-3 * largest:
            continue
        r = ((got[n] - p.grad).norm() / norm).item()
        if r > worst:
            worst, worst_name = r, n
    print(f"gradients: whole vector relative L2 {whole:.2e}; worst tensor with a non-negligible "
          f"gradient {worst:.2e} ({worst_name})")
    ok &= whole <= args.tol_grad and worst <= 10 * args.tol_grad
    print("check_export_grads: " + ("OK" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
