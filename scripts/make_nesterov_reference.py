#!/usr/bin/env python3
"""Writes tests/fixtures/train/nesterov_ref.json: torch.optim.SGD with
Nesterov momentum (DiLoCo's outer optimizer: lr 0.7, momentum 0.9, no weight
decay; and one case with weight decay) over two small tensors for five steps,
the weights and momentum buffer after each step. Pinned: torch 2.x, CPU,
float32. Run: /work/venv-bench/bin/python scripts/make_nesterov_reference.py"""
import json
import os
import sys

import torch

torch.manual_seed(24)
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train", "nesterov_ref.json")
SIZES = [7, 3]
STEPS = 5


def case(lr, momentum, weight_decay):
    params = [torch.randn(n, dtype=torch.float32) for n in SIZES]
    init = [p.clone() for p in params]
    grads = [[torch.randn(n, dtype=torch.float32) * 0.1 for n in SIZES] for _ in range(STEPS)]
    ps = [torch.nn.Parameter(p) for p in params]
    # foreach=False: the single-tensor path, one operation at a time as ours
    opt = torch.optim.SGD(ps, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay, foreach=False)
    steps = []
    for s in range(STEPS):
        for p, g in zip(ps, grads[s]):
            p.grad = g.clone()
        opt.step()
        steps.append({
            "params": [float(x) for p in ps for x in p.detach().flatten()],
            "buf": [float(x) for p in ps for x in opt.state[p]["momentum_buffer"].flatten()],
        })
    return {
        "lr": lr, "momentum": momentum, "weight_decay": weight_decay,
        "init": [float(x) for p in init for x in p.flatten()],
        "grads": [[float(x) for g in gs for x in g.flatten()] for gs in grads],
        "steps": steps,
    }


doc = {"torch": torch.__version__, "sizes": SIZES,
       "cases": [case(0.7, 0.9, 0.0), case(0.3, 0.5, 0.01)]}
with open(OUT, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print("wrote", OUT, file=sys.stderr)
