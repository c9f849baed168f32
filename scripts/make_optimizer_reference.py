#!/usr/bin/env python3
"""Writes the optimizer reference fixtures for tests/train/test_optimizer.c.

For a few small sets of parameter tensors with given gradients, runs several
optimizer steps exactly as a Hugging Face training loop does:
  gradient accumulation over micro-batches weighted by their sample counts,
  torch.nn.utils.clip_grad_norm_(max_norm), optimizer.step(), scheduler.step()
with torch_optimizer.Lamb (sahajBERT's optimizer) or torch.optim.AdamW, weight
decay excluded for biases and LayerNorm weights (two parameter groups), and
transformers.get_linear_schedule_with_warmup.

Output (committed, reference-only; nothing at build or test time needs Python):
  tests/fixtures/train/optimizer_ref.bin   raw little-endian float32 arrays
  tests/fixtures/train/optimizer_ref.json  manifest: cases, tensors, array offsets

Pinned versions (the reference venv that scripts/make_refenv.sh makes):
  torch 1.13 (Debian python3-torch), torch-optimizer 0.3.0, transformers 4.40.2
Run:  $REFENV/bin/python scripts/make_optimizer_reference.py
"""
import json
import os
import sys

import numpy as np
import torch
import torch_optimizer
import transformers

EXPECTED = {"torch": "1.13", "torch_optimizer": "0.3.0", "transformers": "4.40.2"}


def check_versions():
    got = {"torch": torch.__version__, "torch_optimizer": torch_optimizer.__version__,
           "transformers": transformers.__version__}
    for k, v in EXPECTED.items():
        if not got[k].startswith(v):
            sys.exit(f"make_optimizer_reference: {k} {got[k]} found, {v} required")


class Blob:
    """Appends float32 arrays to one buffer and remembers their offsets."""

    def __init__(self):
        self.parts = []
        self.count = 0

    def add(self, array):
        a = np.ascontiguousarray(array, dtype="<f4").reshape(-1)
        off = self.count
        self.parts.append(a)
        self.count += a.size
        return {"offset": off, "numel": int(a.size)}

    def bytes(self):
        return b"".join(p.tobytes() for p in self.parts)


def no_decay(name):
    # The rule Hugging Face examples and sahajBERT use.
    return any(nd in name for nd in ("bias", "LayerNorm.weight"))


def run_case(blob, case):
    g = torch.Generator().manual_seed(case["seed"])
    names, params = [], []
    for name, shape, init in case["tensors"]:
        if init == "zeros":
            t = torch.zeros(shape)
        elif init == "ones":
            t = torch.ones(shape)
        else:
            t = torch.randn(shape, generator=g) * float(init)
        names.append(name)
        params.append(torch.nn.Parameter(t))
    flat_init = torch.cat([p.detach().reshape(-1) for p in params])

    decay = [p for n, p in zip(names, params) if not no_decay(n)]
    nodecay = [p for n, p in zip(names, params) if no_decay(n)]
    groups = [{"params": decay, "weight_decay": case["weight_decay"]},
              {"params": nodecay, "weight_decay": 0.0}]
    if case["kind"] == "lamb":
        opt = torch_optimizer.Lamb(groups, lr=case["lr"], betas=tuple(case["betas"]),
                                   eps=case["eps"], weight_decay=case["weight_decay"],
                                   clamp_value=case["clamp_value"], debias=case["debias"])
    else:
        opt = torch.optim.AdamW(groups, lr=case["lr"], betas=tuple(case["betas"]),
                                eps=case["eps"], weight_decay=case["weight_decay"])
    sched = transformers.get_linear_schedule_with_warmup(
        opt, num_warmup_steps=case["warmup_steps"], num_training_steps=case["total_steps"])

    steps = []
    for step in range(case["steps"]):
        lr_used = opt.param_groups[0]["lr"]
        micro = []
        accum = [torch.zeros_like(p) for p in params]
        total = 0
        for k, samples in enumerate(case["micro_samples"]):
            grads = []
            for i, p in enumerate(params):
                gr = torch.randn(p.shape, generator=g) * case["grad_scale"]
                if names[i] in case.get("zero_grad", []):
                    gr.zero_()
                grads.append(gr)
                accum[i].add_(gr * float(samples))
            total += samples
            micro.append({"samples": samples,
                          "grad": blob.add(torch.cat([x.reshape(-1) for x in grads]).numpy())})
        for i, p in enumerate(params):
            p.grad = accum[i].div_(float(total))
        avg = blob.add(torch.cat([p.grad.reshape(-1) for p in params]).numpy())
        norm = torch.nn.utils.clip_grad_norm_(params, case["max_grad_norm"])
        clipped = blob.add(torch.cat([p.grad.reshape(-1) for p in params]).numpy())
        opt.step()
        sched.step()
        after = blob.add(torch.cat([p.detach().reshape(-1) for p in params]).numpy())
        steps.append({"lr": lr_used, "grad_norm": float(norm), "micro": micro,
                      "avg_grad": avg, "clipped_grad": clipped, "params_after": after})

    m = torch.cat([opt.state[p]["exp_avg"].reshape(-1) for p in params])
    v = torch.cat([opt.state[p]["exp_avg_sq"].reshape(-1) for p in params])
    tensors, off = [], 0
    for n, p in zip(names, params):
        tensors.append({"name": n, "shape": list(p.shape), "offset": off, "numel": p.numel(),
                        "no_weight_decay": no_decay(n)})
        off += p.numel()
    out = {k: v for k, v in case.items() if k not in ("tensors", "seed", "zero_grad")}
    out.update({"tensors": tensors, "total": off, "params_init": blob.add(flat_init.numpy()),
                "steps": steps, "final_m": blob.add(m.numpy()), "final_v": blob.add(v.numpy())})
    return out


def main():
    check_versions()
    torch.set_num_threads(1)
    # Odd sizes; names follow HF ALBERT so the no-decay rule is exercised.
    albert_like = [
        ("albert.embeddings.word_embeddings.weight", [37, 5], 0.02),
        ("albert.embeddings.LayerNorm.weight", [5], "ones"),
        ("albert.embeddings.LayerNorm.bias", [5], "zeros"),
        ("albert.encoder.embedding_hidden_mapping_in.weight", [7, 5], 0.02),
        ("albert.encoder.embedding_hidden_mapping_in.bias", [7], "zeros"),
        ("albert.encoder.attention.dense.weight", [7, 7], 0.5),
        ("predictions.bias", [37], "zeros"),
    ]
    cases = [
        # sahajBERT's settings (lr raised so a few steps move the weights visibly).
        {"name": "lamb_sahajbert", "kind": "lamb", "lr": 0.0176, "betas": [0.9, 0.999],
         "eps": 1e-6, "weight_decay": 0.01, "clamp_value": 10000.0, "debias": True,
         "max_grad_norm": 1.0, "warmup_steps": 2, "total_steps": 7, "steps": 6,
         "micro_samples": [3, 5], "grad_scale": 0.3, "seed": 1, "tensors": albert_like},
        # Clamp active (a tensor with norm > 10), no debias, a zero tensor
        # (weight_norm == 0 -> trust 1), a zero gradient (adam_norm == 0 -> trust 1),
        # no clipping triggered (small gradients).
        {"name": "lamb_clamp_zero", "kind": "lamb", "lr": 0.01, "betas": [0.9, 0.999],
         "eps": 1e-6, "weight_decay": 0.01, "clamp_value": 10.0, "debias": False,
         "max_grad_norm": 1.0, "warmup_steps": 0, "total_steps": 5, "steps": 4,
         "micro_samples": [4], "grad_scale": 0.01, "seed": 2,
         "zero_grad": ["head.bias"],
         "tensors": [("big.weight", [9, 11], 3.0), ("zero.weight", [6], "zeros"),
                     ("head.bias", [3], 0.5), ("LayerNorm.weight", [4], "ones")]},
        {"name": "adamw", "kind": "adamw", "lr": 0.001, "betas": [0.9, 0.999],
         "eps": 1e-8, "weight_decay": 0.01, "clamp_value": 0.0, "debias": True,
         "max_grad_norm": 1.0, "warmup_steps": 3, "total_steps": 6, "steps": 6,
         "micro_samples": [2, 1, 6], "grad_scale": 0.3, "seed": 3, "tensors": albert_like},
    ]
    blob = Blob()
    manifest = {"generator": "scripts/make_optimizer_reference.py",
                "versions": {"torch": torch.__version__,
                             "torch_optimizer": torch_optimizer.__version__,
                             "transformers": transformers.__version__},
                "cases": [run_case(blob, c) for c in cases]}
    outdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "train")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "optimizer_ref.bin"), "wb") as f:
        f.write(blob.bytes())
    manifest["floats"] = blob.count
    with open(os.path.join(outdir, "optimizer_ref.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {blob.count} floats in {len(cases)} cases to {outdir}")


if __name__ == "__main__":
    main()
