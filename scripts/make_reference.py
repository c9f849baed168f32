#!/usr/bin/env python3
"""Reference fixtures for the ALBERT model: tests/fixtures/albert_<name>/.

Reference-only: nothing in the build or the tests runs Python. Pinned versions
(scripts/requirements-reference.txt); the script refuses to run with others,
because a different torch or transformers could change the bits:
    torch         1.13.1 (Debian bookworm python3-torch 1.13.1+dfsg-4, CPU;
                  it reports itself as 1.13.0a0)
    transformers  4.40.2   (PyPI)
    safetensors   0.4.3    (PyPI)
    numpy         1.24.2   (Debian python3-numpy)
Run:  $REFENV/bin/python scripts/make_reference.py [--only tiny,odd]

PARAMETER NAMES (what the C model must use, measured with the versions above):
  model.named_parameters() of AlbertForPreTraining lists
    - predictions.bias                       [vocab]   the MLM decoder's bias
    - albert.embeddings.word_embeddings.weight [vocab, embedding]
  and does NOT list predictions.decoder.bias (it is the same Parameter object
  as predictions.bias: AlbertMLMHead sets decoder.bias = self.bias) nor
  predictions.decoder.weight (tied to the word embeddings by tie_weights()).
  named_parameters() skips the duplicates, so each appears once, under the
  names above. The gradient of albert.embeddings.word_embeddings.weight is the
  sum of its two uses (embedding lookup + MLM decoder); predictions.bias
  carries the decoder bias gradient. save_pretrained(safe_serialization=True)
  writes model.safetensors with exactly the same key set (no
  predictions.decoder.* keys), metadata {"format": "pt"}.
  The word embedding is nn.Embedding(padding_idx=pad_token_id=0): the lookup
  adds no gradient to row 0 (only the decoder use does). The `groups` and
  `odd` batches contain id 0 (`odd` as padding), so this is exercised.

LAYER GROUPS (HF AlbertTransformer): layer i in [0, num_hidden_layers) runs
  group g = floor(i / (num_hidden_layers / num_hidden_groups)), and a group runs
  its inner_group_num AlbertLayers in order. So with 4 layers, 2 groups and
  inner_group_num 2 (the `groups` fixture) the sequence of layer weights is
  g0.l0 g0.l1 | g0.l0 g0.l1 | g1.l0 g1.l1 | g1.l0 g1.l1 (8 layer applications);
  parameters are albert.encoder.albert_layer_groups.<g>.albert_layers.<l>.*.

Each fixture folder holds:
  config.json, model.safetensors  as model.save_pretrained(dir, safe_serialization=True)
  batch.safetensors     input_ids, token_type_ids, attention_mask, labels
                        (int64 [B,T]; labels -100 = not masked, also at padding),
                        sentence_order_label (int64 [B])
  expected.safetensors  loss, mlm_loss, sop_loss (float32 [1]);
                        the gradient of every parameter under its HF name;
                        activations for debugging (float32):
                          embedding_output   [B,T,E] embeddings after LayerNorm
                          hidden_states.<k>  [B,T,H] k=0: after the projection
                                             to hidden, k=i+1: after layer i
                                             (one entry per num_hidden_layers)
                          pooled_output      [B,H]   tanh pooler
                          prediction_logits  [B,T,V] MLM logits at every position
                          sop_logits         [B,2]

Determinism: model.train() with every dropout probability 0; float32; one
thread. Init is HF's (normal(0, 0.02) weights, zero biases, unit LayerNorm),
then every bias and every LayerNorm weight/bias is perturbed with small random
values so that their gradients are not trivial.

loss = MLM cross-entropy (mean over masked tokens) + SOP cross-entropy (mean
over the batch); the script checks that this equals outputs.loss.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
import safetensors
from safetensors.torch import save_file
from transformers import AlbertConfig, AlbertForPreTraining

PINNED = {"torch": "1.13", "transformers": "4.40.2", "safetensors": "0.4.3"}

# name -> (config overrides, batch size, sequence length, padding?, seed)
FIXTURES = {
    "tiny": dict(
        config=dict(vocab_size=97, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                    num_hidden_groups=1, inner_group_num=1, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64),
        batch=2, seq=16, padding=False, seed=1),
    "groups": dict(
        config=dict(vocab_size=61, embedding_size=12, hidden_size=24, num_hidden_layers=4,
                    num_hidden_groups=2, inner_group_num=2, num_attention_heads=3,
                    intermediate_size=40, max_position_embeddings=32),
        batch=2, seq=19, padding=False, seed=2),
    "odd": dict(
        config=dict(vocab_size=131, embedding_size=24, hidden_size=48, num_hidden_layers=3,
                    num_hidden_groups=1, inner_group_num=1, num_attention_heads=4,
                    intermediate_size=80, max_position_embeddings=48),
        batch=3, seq=37, padding=True, seed=3),
}

COMMON_CONFIG = dict(hidden_act="gelu_new", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                     type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12)


def check_versions():
    found = {"torch": torch.__version__, "transformers": transformers.__version__,
             "safetensors": safetensors.__version__}
    bad = [f"{k} {found[k]} (want {v})" for k, v in PINNED.items() if not found[k].startswith(v)]
    if bad:
        sys.exit("make_reference.py: unpinned versions: " + ", ".join(bad) +
                 "; see scripts/requirements-reference.txt")


def perturb(model, gen):
    """Small random offsets on every bias and LayerNorm parameter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))


def make_batch(cfg, B, T, padding, gen):
    V = cfg.vocab_size
    input_ids = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    token_type_ids = torch.zeros(B, T, dtype=torch.int64)
    attention_mask = torch.ones(B, T, dtype=torch.int64)
    lengths = []
    for b in range(B):
        # Row 0 always full length; with padding, later rows end early.
        length = T
        if padding and b > 0:
            length = T - int(torch.randint(3, T // 2, (1,), generator=gen))
        lengths.append(length)
        attention_mask[b, length:] = 0
        input_ids[b, length:] = cfg.pad_token_id
        # A second segment (token type 1) over the latter part of the real tokens.
        split = int(torch.randint(length // 3, 2 * length // 3, (1,), generator=gen))
        token_type_ids[b, split:length] = 1
    labels = torch.full((B, T), -100, dtype=torch.int64)
    for b in range(B):
        length = lengths[b]
        # 15% of the real tokens of each row (at least one), at random positions.
        count = max(1, round(0.15 * length))
        positions = torch.randperm(length, generator=gen)[:count].sort().values
        # The label is the original token; the input becomes another token at
        # some of the positions (as 80/10/10 masking would), which the model
        # need not know about: it only sees ids.
        labels[b, positions] = input_ids[b, positions]
        replace = torch.randint(0, V, (len(positions),), generator=gen)
        input_ids[b, positions] = replace
    # Both classes present when B >= 2 (a batch of one class hides SOP sign errors).
    sentence_order_label = torch.randperm(B, generator=gen) % 2
    return dict(input_ids=input_ids, token_type_ids=token_type_ids,
                attention_mask=attention_mask, labels=labels,
                sentence_order_label=sentence_order_label)


def build(name, spec, root):
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(1000 + spec["seed"])
    cfg = AlbertConfig(**COMMON_CONFIG, **spec["config"])
    model = AlbertForPreTraining(cfg).float()
    perturb(model, gen)
    model.train()

    out_dir = os.path.join(root, f"albert_{name}")
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)

    batch = make_batch(cfg, spec["batch"], spec["seq"], spec["padding"], gen)
    captured = {}
    hook = model.albert.embeddings.register_forward_hook(
        lambda mod, inp, out: captured.__setitem__("embedding_output", out))
    model.zero_grad(set_to_none=True)
    outputs = model(**batch, output_hidden_states=True, return_dict=True)
    hook.remove()

    V = cfg.vocab_size
    mlm_loss = torch.nn.functional.cross_entropy(
        outputs.prediction_logits.reshape(-1, V), batch["labels"].reshape(-1), ignore_index=-100)
    sop_loss = torch.nn.functional.cross_entropy(
        outputs.sop_logits.reshape(-1, 2), batch["sentence_order_label"].reshape(-1))
    total = mlm_loss + sop_loss
    if not torch.allclose(total, outputs.loss, rtol=1e-6, atol=0):
        sys.exit(f"{name}: mlm+sop {total.item()} != outputs.loss {outputs.loss.item()}")
    outputs.loss.backward()

    expected = {
        "loss": outputs.loss.detach().reshape(1).float(),
        "mlm_loss": mlm_loss.detach().reshape(1).float(),
        "sop_loss": sop_loss.detach().reshape(1).float(),
    }
    for pname, p in model.named_parameters():
        if p.grad is None:
            sys.exit(f"{name}: parameter {pname} has no gradient")
        expected[pname] = p.grad.detach().clone().contiguous()
    # Debugging aids; none of these names is a parameter name.
    expected["embedding_output"] = captured["embedding_output"].detach().contiguous()
    for k, h in enumerate(outputs.hidden_states):
        expected[f"hidden_states.{k}"] = h.detach().contiguous()
    pooled = model.albert.pooler_activation(model.albert.pooler(outputs.hidden_states[-1][:, 0]))
    expected["pooled_output"] = pooled.detach().contiguous()
    expected["prediction_logits"] = outputs.prediction_logits.detach().contiguous()
    expected["sop_logits"] = outputs.sop_logits.detach().contiguous()

    # One metadata key: the library keeps metadata in a hash map, so several keys
    # would come out in a different order each run and the files would not be
    # byte-for-byte reproducible.
    meta = {"source": f"make_reference.py fixture={name} seed={spec['seed']} torch={torch.__version__} "
                      f"transformers={transformers.__version__} safetensors={safetensors.__version__}"}
    save_file({k: v.contiguous() for k, v in batch.items()},
              os.path.join(out_dir, "batch.safetensors"), metadata=meta)
    save_file(expected, os.path.join(out_dir, "expected.safetensors"), metadata=meta)

    sizes = {f: os.path.getsize(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}
    masked = int((batch["labels"] != -100).sum())
    print(f"albert_{name}: loss {outputs.loss.item():.6f} (mlm {mlm_loss.item():.6f} "
          f"sop {sop_loss.item():.6f}), {masked} masked tokens, "
          f"{sum(p.numel() for p in model.parameters())} parameters, "
          f"{sum(sizes.values())} bytes: " + json.dumps(sizes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "tests", "fixtures"))
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = ap.parse_args()
    check_versions()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = [n for n in args.only.split(",") if n] or list(FIXTURES)
    for name in names:
        if name not in FIXTURES:
            sys.exit(f"unknown fixture {name}; known: {', '.join(FIXTURES)}")
        build(name, FIXTURES[name], os.path.abspath(args.out))


if __name__ == "__main__":
    main()
