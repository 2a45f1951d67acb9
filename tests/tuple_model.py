"""A model whose stages pass a tuple — or, with ``as_dict``, a dict — of hidden states
(float64, differentiable), position ids (int64) and a constant float scale that depends on
nothing differentiable: the three kinds a tuple message holds. Shared by the in-process and
the torchrun tests."""

from __future__ import annotations

import torch
from torch import nn

D, T, ROWS = 6, 5, 8


class Embed(nn.Module):
    def __init__(self, as_dict=False):
        super().__init__()
        self.as_dict = as_dict
        self.weight = nn.Parameter(torch.randn(11, D, dtype=torch.float64) * 0.3)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1]).expand_as(tokens)
        scale = torch.full((1,), 0.5, dtype=torch.float64)
        if self.as_dict:  # keys out of alphabetical order: the order is the dict's own
            return {"scale": scale, "h": self.weight[tokens], "pos": pos}
        return self.weight[tokens], pos, scale


class Block(nn.Module):
    def __init__(self, as_dict=False):
        super().__init__()
        self.as_dict = as_dict
        self.lin = nn.Linear(D, D, dtype=torch.float64)

    def forward(self, h, pos, scale):
        h = h + torch.tanh(self.lin(h)) * scale + 0.01 * pos.unsqueeze(-1)
        return {"scale": scale, "h": h, "pos": pos} if self.as_dict else (h, pos, scale)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 11, dtype=torch.float64)

    def forward(self, h, pos, scale):
        return self.lin(h)


def layers(n_blocks: int, seed: int = 0, as_dict: bool = False):
    torch.manual_seed(seed)
    return [("embed", Embed(as_dict)), *[(f"blocks.{i}", Block(as_dict))
                                         for i in range(n_blocks)], ("head", Head())]


def loss(logits, y):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def batches(steps: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 11, (ROWS, T), generator=g),
             torch.randint(0, 11, (ROWS, T), generator=g)) for _ in range(steps)]
