r"""Token streams, the train/validation split and deterministic, resumable batch sampling.

A stream of length :math:`n` holds :math:`\lfloor (n-1)/T \rfloor` non-overlapping windows of
:math:`T+1` tokens (inputs = the first T, targets = the last T). Epoch :math:`e` visits every
window of every stream once, in the order :math:`\pi_e` (a permutation drawn from
``numpy.random.default_rng([seed, e])``; above :math:`2^{24}` windows the affine bijection
:math:`i \mapsto (a i + b) \bmod N` with :math:`\gcd(a, N) = 1` instead, to stay O(1) in memory).
The sampler's whole state is ``{seed, epoch, index}`` plus sizes to detect changed data, so a
resumed run draws exactly the batches the uninterrupted run would have drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

_PERMUTE_MAX = 1 << 24


class TokenWindows:
    """Non-overlapping (T+1)-token windows over one or more 1-D token arrays."""

    def __init__(self, arrays: list[np.ndarray], seq_len: int, name: str = "train") -> None:
        self.arrays = [a for a in arrays if len(a) > seq_len]
        self.seq_len = seq_len
        self.counts = [(len(a) - 1) // seq_len for a in self.arrays]
        self.offsets = np.cumsum([0] + self.counts)
        self.num_tokens = int(sum(len(a) for a in arrays))
        if self.num_windows == 0:
            fix = ("raise data.val_fraction, or set it to 0 to skip validation"
                   if name == "validation" else "use more data")
            raise ValueError(
                f"the {name} split has {self.num_tokens} tokens, too few for one sequence of "
                f"data.seq_len={seq_len}+1; {fix}, or shorten data.seq_len"
            )

    @property
    def num_windows(self) -> int:
        """Number of (T+1)-token windows over all the shards."""
        return int(self.offsets[-1])

    def window(self, j: int) -> np.ndarray:
        """Window ``j`` (global index) as T+1 token ids."""
        k = int(np.searchsorted(self.offsets, j, side="right") - 1)
        start = (j - int(self.offsets[k])) * self.seq_len
        return np.asarray(self.arrays[k][start:start + self.seq_len + 1])

    def batch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (B, T), int64, for window indices ``indices``."""
        rows = np.stack([self.window(int(j)) for j in indices]).astype(np.int64)
        t = torch.from_numpy(rows)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()

    def max_token(self, limit: int = 10_000_000) -> int:
        """Largest id among the first ``limit`` tokens of each array (vocabulary check)."""
        return max(int(np.asarray(a[:limit]).max()) for a in self.arrays)


@dataclass
class BatchSampler:
    """Deterministic, resumable sampling of training batches (see the module docstring)."""

    windows: TokenWindows
    batch_size: int
    seed: int = 0
    epoch: int = 0
    index: int = 0
    _order_cache: dict = field(default_factory=dict, repr=False)

    def _order(self, epoch: int):
        if epoch not in self._order_cache:
            N = self.windows.num_windows
            rng = np.random.default_rng([self.seed, epoch])
            if N <= _PERMUTE_MAX:
                perm = rng.permutation(N).astype(np.int64)
                self._order_cache = {epoch: ("perm", perm)}
            else:
                a = int(rng.integers(1, N))
                while math.gcd(a, N) != 1:
                    a = int(rng.integers(1, N))
                self._order_cache = {epoch: ("affine", (a, int(rng.integers(0, N))))}
        return self._order_cache[epoch]

    def _take(self) -> int:
        kind, val = self._order(self.epoch)
        N = self.windows.num_windows
        j = int(val[self.index]) if kind == "perm" else (val[0] * self.index + val[1]) % N
        self.index += 1
        if self.index >= N:
            self.epoch, self.index = self.epoch + 1, 0
        return j

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next ``batch_size`` windows as (inputs, targets), each (B, T) int64."""
        return self.windows.batch([self._take() for _ in range(self.batch_size)])

    def state_dict(self) -> dict:
        """The sampling position (seed, epoch, index) and the shapes it is valid for."""
        return {"seed": self.seed, "epoch": self.epoch, "index": self.index,
                "batch_size": self.batch_size, "seq_len": self.windows.seq_len,
                "num_windows": self.windows.num_windows}

    def load_state_dict(self, state: dict) -> None:
        """Resume from :meth:`state_dict`; refuses a state saved for other data or batch
        settings."""
        mine = (self.windows.seq_len, self.windows.num_windows, self.batch_size)
        theirs = (state["seq_len"], state["num_windows"], state["batch_size"])
        if mine != theirs:
            raise ValueError(
                f"the checkpoint's data position (seq_len, windows, batch) = {theirs} does not "
                f"match this run's {mine}; resume with the same data and batch settings"
            )
        self.seed, self.epoch, self.index = int(state["seed"]), int(state["epoch"]), \
            int(state["index"])


def eval_batches(windows: TokenWindows, batch_size: int, num_batches: int):
    """The fixed validation set: windows 0, 1, 2, … in order, ``num_batches`` batches of
    ``batch_size`` (fewer if the split is small). Same batches at every evaluation."""
    n = min(windows.num_windows, batch_size * num_batches)
    for i in range(0, n, batch_size):
        yield windows.batch(range(i, min(i + batch_size, n)))
