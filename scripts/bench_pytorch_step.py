#!/usr/bin/env python3
"""Times one AlbertForPreTraining forward+backward step in PyTorch on the CPU.

The PyTorch side of `dedloc bench step`: same presets, same batch shape, so the
two run side by side. Reference-only; pinned versions in
scripts/requirements-reference.txt (torch 1.13.1 from Debian's python3-torch,
transformers 4.40.2).

    $REFENV/bin/python scripts/bench_pytorch_step.py --model tiny --batch 8 --seq 128
    $REFENV/bin/python scripts/bench_pytorch_step.py --model sahajbert --batch 8 --seq 128 --json

Presets mirror dl_albert_config_preset() in src/model/config.c; --config takes
a HF config.json instead. The batch is random: no padding, 15% of the tokens
carry MLM labels, SOP labels 0/1. Dropout is 0 (as in the sahajBERT recipe),
fp32. Threads: all cores (torch.set_num_threads(os.cpu_count())) unless
--threads says otherwise; Debian's torch defaults to one.

Reported: seconds per step (median of --steps timed steps after --warmup
untimed ones), tokens/s = batch*seq / step time, the GEMM FLOPs of the step
and the GFLOP/s they imply, peak resident memory. The FLOP count is that of
dl_albert_step_flops() with the MLM head over every position, since HF
computes it for all rows (dedloc computes it at masked rows only).

--autocast bf16 runs forward and loss inside torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's mixed precision on CPUs (linear layers and
matmuls in bf16, softmax, LayerNorm and losses in fp32, fp32 weights and
gradients), the counterpart of `dedloc bench step --precision bf16`; it
needs a torch with CPU autocast (1.10 or later).
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import time

import torch
import transformers
from transformers import AlbertConfig, AlbertForPreTraining

# Keep in step with src/model/config.c (dl_albert_config_preset).
PRESETS = {
    "tiny": dict(vocab_size=8000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                 num_hidden_groups=1, inner_group_num=1, num_attention_heads=4,
                 intermediate_size=512, max_position_embeddings=128),
    "sahajbert": dict(vocab_size=32000, embedding_size=128, hidden_size=1024, num_hidden_layers=24,
                      num_hidden_groups=1, inner_group_num=1, num_attention_heads=16,
                      intermediate_size=4096, max_position_embeddings=512),
}
COMMON = dict(type_vocab_size=2, hidden_act="gelu_new", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
              layer_norm_eps=1e-12, initializer_range=0.02, pad_token_id=0)


def step_flops(cfg, batch, seq, masked):
    """GEMM FLOPs (2mnk) of forward + backward, as dl_albert_step_flops counts them."""
    N, E, H, I, V, T, M = (batch * seq, cfg.embedding_size, cfg.hidden_size,
                           cfg.intermediate_size, cfg.vocab_size, seq, masked)
    layers = cfg.num_hidden_layers * cfg.inner_group_num
    linear = (2 * N * E * H + layers * (2 * N * H * H * 4 + 2 * N * H * I * 2) +
              2 * batch * H * H + 2 * batch * H * 2 + 2 * M * H * E + 2 * M * E * V)
    attention = layers * (2.0 * batch * T * T * H * 2)
    return 3 * linear + 3 * attention


def make_batch(cfg, batch, seq, gen):
    input_ids = torch.randint(5, cfg.vocab_size, (batch, seq), generator=gen)
    token_type_ids = torch.zeros(batch, seq, dtype=torch.int64)
    token_type_ids[:, seq // 2:] = 1
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    labels = torch.full((batch, seq), -100, dtype=torch.int64)
    chosen = torch.rand(batch, seq, generator=gen) < 0.15
    chosen[:, 1] = True  # at least one per row
    labels[chosen] = input_ids[chosen]
    sop = torch.randint(0, 2, (batch,), generator=gen)
    return dict(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                labels=labels, sentence_order_label=sop)


def main():
    ap = argparse.ArgumentParser(description="Time an AlbertForPreTraining training step on the CPU.")
    ap.add_argument("--model", default="tiny", help="preset: tiny or sahajbert")
    ap.add_argument("--config", help="HF config.json (overrides --model)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    args = ap.parse_args()

    if args.config:
        cfg = AlbertConfig.from_json_file(args.config)
        cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
        cfg.classifier_dropout_prob = 0.0
        name = args.config
    elif args.model in PRESETS:
        cfg = AlbertConfig(**COMMON, **PRESETS[args.model])
        name = args.model
    else:
        ap.error(f"unknown --model {args.model} (known: {', '.join(PRESETS)})")
    if args.seq > cfg.max_position_embeddings:
        ap.error(f"--seq {args.seq} exceeds max_position_embeddings {cfg.max_position_embeddings}")
    if args.batch < 1 or args.seq < 2 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--batch, --steps, --threads must be >= 1, --seq >= 2, --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = AlbertForPreTraining(cfg).float()
    model.train()
    batch = make_batch(cfg, args.batch, args.seq, gen)
    masked = int((batch["labels"] != -100).sum())

    def autocast():
        if args.autocast == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        with autocast():
            loss = model(**batch).loss
        loss.backward()
        elapsed = time.perf_counter() - start
        losses.append(loss.item())
        if i >= args.warmup:
            times.append(elapsed)

    step_s = statistics.median(times)
    tokens = args.batch * args.seq
    flops = step_flops(cfg, args.batch, args.seq, tokens)
    result = {
        "framework": "pytorch",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": name,
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch": args.batch,
        "seq": args.seq,
        "masked_tokens": masked,
        "threads": torch.get_num_threads(),
        "autocast": args.autocast,
        "steps": args.steps,
        "step_seconds": step_s,
        "step_seconds_all": times,
        "tokens_per_second": tokens / step_s,
        "gflop_per_step": flops / 1e9,
        "gflops": flops / step_s / 1e9,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "loss_first": losses[0],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"PyTorch {torch.__version__} CPU, {result['threads']} threads, transformers "
          f"{transformers.__version__}, autocast {args.autocast}")
    print(f"{'model':<12} {'params':>10} {'B x T':>10} {'step s':>9} {'tokens/s':>10} "
          f"{'GFLOP/step':>11} {'GFLOP/s':>8} {'RSS MiB':>8}")
    print(f"{os.path.basename(name):<12} {result['parameters']:>10} "
          f"{str(args.batch) + ' x ' + str(args.seq):>10} {step_s:>9.4f} "
          f"{result['tokens_per_second']:>10.1f} {result['gflop_per_step']:>11.2f} "
          f"{result['gflops']:>8.1f} {result['peak_rss_mib']:>8.0f}")


if __name__ == "__main__":
    sys.exit(main())
