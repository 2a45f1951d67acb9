r"""A plain PyTorch GPT that asyncpp did not define, trained through
``asyncpp-train --model.factory examples.byom.tiny_gpt:build`` (see the "Bring your own model"
how-to). Pre-norm blocks with learned positions:

.. math::
    h_0 = E[x] + P[p], \qquad h_{i+1} = h_i + \mathrm{MLP}(\mathrm{LN}(h_i + \mathrm{Attn}(
    \mathrm{LN}(h_i); p))), \qquad \text{logits} = \mathrm{LN}(h_L) W^\top,

where :math:`p = (0, \dots, T-1)` are the position ids. The pipeline layers pass the tuple
``(h, p)`` from one to the next — across stage boundaries too — so every block sees the
positions without recomputing them.

The factory protocol: ``build()`` returns an ``nn.Module`` with ``pipeline_layers()`` (the
ordered ``(name, module)`` list whose composition maps token ids to logits, named by the
model's own attribute paths) and a ``vocab_size`` (and here ``max_seq_len``, ``n_layers``,
``dim`` for the sequence check and the FLOPs count).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Embedding(nn.Module):
    def __init__(self, vocab: int, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_seq_len, dim)

    def forward(self, tokens):
        p = torch.arange(tokens.shape[1], device=tokens.device).unsqueeze(0)
        return self.tok(tokens) + self.pos(p), p


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, h, p):
        B, T, D = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(B, T, 3, self.heads, D // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return h + self.down(F.gelu(self.up(self.ln2(h)))), p


class Head(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, h, p):
        return self.out(self.ln(h))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size: int = 512, dim: int = 64, n_layers: int = 4, heads: int = 4,
                 max_seq_len: int = 256) -> None:
        super().__init__()
        self.vocab_size, self.max_seq_len, self.n_layers, self.dim = (vocab_size, max_seq_len,
                                                                      n_layers, dim)
        self.embed = Embedding(vocab_size, dim, max_seq_len)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(n_layers))
        self.head = Head(dim, vocab_size)

    def pipeline_layers(self):
        return [("embed", self.embed), *[(f"blocks.{i}", b) for i, b in enumerate(self.blocks)],
                ("head", self.head)]

    def forward(self, tokens):
        x = tokens
        for _, layer in self.pipeline_layers():
            x = layer(*x) if isinstance(x, tuple) else layer(x)
        return x


def build() -> TinyGPT:
    """The factory ``--model.factory examples.byom.tiny_gpt:build`` calls (after seeding)."""
    return TinyGPT()
