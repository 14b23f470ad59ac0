#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Writes a per-layer profile of a BERT-style transformer encoder in the simple
profile format (``name forward_ms backward_ms param_bytes``), which
``mercury-replay`` and ``make bench-torch`` read like the PipeDream graphs.

Parameter bytes are those of the real PyTorch modules (``nn.Embedding``,
``nn.TransformerEncoderLayer``, ``nn.Linear``), fp32, one line per module
that holds parameters, in forward order. Times are FLOP-proportional, since
no GPU is at hand to measure them: each matrix product costs 2·m·n·k FLOPs
forward and twice that backward, at ``--tflops`` effective; the attention
scores (QKᵀ and the weighted sum of V, 4·B·S²·d forward) are charged to the
attention module; layer norms and embedding look-ups are memory-bound, at
``--gbps`` (their activations read and written once forward, twice
backward, plus the embedding's dense gradient written once). The absolute
scale matters only to the replayer: the torch bench rescales an iteration's
compute to ``COMPUTE_S``.

``experiment/profiles/bert-base.txt`` is this script's output with its
defaults (BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, vocabulary
30522, sequence 128, batch 32, 30 TFLOP/s, 800 GB/s: a V100-class GPU).

usage: transformer.py [--layers N] [--hidden D] ... > PROFILE.txt
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Tuple

import torch.nn as nn

# (name, forward FLOPs, backward FLOPs, memory-bound bytes forward, backward, module)
Row = Tuple[str, float, float, float, float, nn.Module]


def param_bytes(m: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in m.parameters(recurse=False))


def rows(a: argparse.Namespace) -> List[Row]:
    tokens = a.batch * a.seq
    act = tokens * a.hidden * 4                       # one fp32 activation tensor
    out: List[Row] = []
    word = nn.Embedding(a.vocab, a.hidden)
    position = nn.Embedding(a.max_positions, a.hidden)
    token_type = nn.Embedding(2, a.hidden)
    emb_norm = nn.LayerNorm(a.hidden)
    for name, m in (("embeddings.word", word), ("embeddings.position", position),
                    ("embeddings.token_type", token_type)):
        # Look-up: read rows, write the activation; backward also writes the dense gradient.
        out.append((name, 0, 0, 2 * act, 2 * act + param_bytes(m), m))
    out.append(("embeddings.norm", 0, 0, 2 * act, 4 * act, emb_norm))
    for i in range(a.layers):
        layer = nn.TransformerEncoderLayer(a.hidden, a.heads, a.ffn, batch_first=True)
        p = f"encoder.{i}."
        in_proj = 2 * tokens * a.hidden * 3 * a.hidden
        scores = 4 * a.batch * a.seq * a.seq * a.hidden
        out.append((p + "attention", in_proj + scores, 2 * (in_proj + scores), 0, 0, layer.self_attn))
        out.append((p + "attention.out", 2 * tokens * a.hidden * a.hidden, 4 * tokens * a.hidden * a.hidden,
                    0, 0, layer.self_attn.out_proj))
        out.append((p + "norm1", 0, 0, 2 * act, 4 * act, layer.norm1))
        out.append((p + "ffn.in", 2 * tokens * a.hidden * a.ffn, 4 * tokens * a.hidden * a.ffn, 0, 0, layer.linear1))
        out.append((p + "ffn.out", 2 * tokens * a.ffn * a.hidden, 4 * tokens * a.ffn * a.hidden, 0, 0, layer.linear2))
        out.append((p + "norm2", 0, 0, 2 * act, 4 * act, layer.norm2))
    pooler = nn.Linear(a.hidden, a.hidden)
    out.append(("pooler", 2 * a.batch * a.hidden * a.hidden, 4 * a.batch * a.hidden * a.hidden, 0, 0, pooler))
    classifier = nn.Linear(a.hidden, a.classes)
    out.append(("classifier", 2 * a.batch * a.hidden * a.classes, 4 * a.batch * a.hidden * a.classes, 0, 0,
                classifier))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--tflops", type=float, default=30.0, help="effective matrix-product rate, TFLOP/s")
    ap.add_argument("--gbps", type=float, default=800.0, help="memory bandwidth for memory-bound layers, GB/s")
    a = ap.parse_args()
    if min(a.layers, a.hidden, a.heads, a.ffn, a.vocab, a.seq, a.batch) < 1 or a.tflops <= 0 or a.gbps <= 0:
        ap.error("every size and rate must be positive")
    if a.hidden % a.heads:
        ap.error("--hidden must be a multiple of --heads")
    print(f"# BERT-style encoder ({a.layers} layers, hidden {a.hidden}, {a.heads} heads, FFN {a.ffn}, "
          f"vocabulary {a.vocab}), sequence {a.seq}, batch {a.batch}: parameter bytes of the PyTorch modules, "
          f"times FLOP-proportional at {a.tflops:g} TFLOP/s, memory-bound layers at {a.gbps:g} GB/s "
          f"(experiment/profiles/transformer.py)")
    print("# name forward_ms backward_ms param_bytes")
    for name, ff, bf, fm, bm, m in rows(a):
        fwd = ff / (a.tflops * 1e12) + fm / (a.gbps * 1e9)
        bwd = bf / (a.tflops * 1e12) + bm / (a.gbps * 1e9)
        print(f"{name} {fwd * 1e3:.4f} {bwd * 1e3:.4f} {param_bytes(m)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
