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
    """The prefix validation set (``train.val_sample = "prefix"``): windows 0, 1, 2, … in order,
    ``num_batches`` batches of ``batch_size`` (fewer if the split is small). Same batches at
    every evaluation. A contiguous prefix of one split, kept for the runs that used it; the
    default is :func:`validation_plan`."""
    n = min(windows.num_windows, batch_size * num_batches)
    for i in range(0, n, batch_size):
        yield windows.batch(range(i, min(i + batch_size, n)))


@dataclass(frozen=True)
class Source:
    """A contiguous run of windows ``[lo, hi)`` that come from one source of the split."""

    name: str
    kind: str  # e.g. "prose" or "code"; the name again when unknown
    lo: int
    hi: int

    @property
    def num_windows(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class ValBatch:
    """Validation windows of one source (their indices, in order)."""

    source: str
    indices: tuple[int, ...]


def window_sources(windows: TokenWindows, token_ranges: list[tuple[str, str, int, int]] | None
                   ) -> list[Source]:
    """The sources of ``windows`` from contiguous token ranges ``(name, kind, start, end)`` of
    its concatenated arrays; a window belongs to the range holding its middle token (one window
    per boundary straddles two). ``None``: the whole split is one source ``"all"``."""
    N = windows.num_windows
    if not token_ranges:
        return [Source("all", "all", 0, N)]
    T = windows.seq_len
    out, lo = [], 0
    for k, (name, kind, _start, end) in enumerate(token_ranges):
        # windows j with middle token j*T + T//2 < end (arrays of one split are laid end to
        # end; every window lies inside one array, and shard boundaries never cut a range here
        # because the validation split is one shard)
        hi = N if k == len(token_ranges) - 1 else min(N, max(lo, -(-(end - T // 2) // T)))
        if hi > lo:
            out.append(Source(name, kind, lo, hi))
        lo = hi
    return out


def _allocate(counts: list[int], total: int) -> list[int]:
    """Largest-remainder apportionment of ``total`` items in proportion to ``counts``; then
    every positive count left with none takes one from the largest allocation, while
    ``total`` allows."""
    s = sum(counts)
    if s == 0 or total <= 0:
        return [0] * len(counts)
    quota = [c * total / s for c in counts]
    out = [int(q) for q in quota]
    for i in sorted(range(len(counts)), key=lambda i: -(quota[i] - out[i]))[:total - sum(out)]:
        out[i] += 1
    for i in sorted(range(len(counts)), key=lambda i: -counts[i]):
        if counts[i] > 0 and out[i] == 0:
            donor = max(range(len(out)), key=lambda k: out[k])
            if out[donor] <= 1:
                break
            out[donor] -= 1
            out[i] = 1
    return out


def validation_plan(sources: list[Source], batch_size: int, num_batches: int, *,
                    full: bool = False, multiple: int = 1, seed: int = 0) -> list[ValBatch]:
    r"""The validation batches: each batch holds windows of one source.

    ``full``: every window of the split, source by source in batches of ``batch_size`` (a
    source's last batch is cut to a multiple of ``multiple``, so at most ``multiple − 1``
    windows per source are left out).

    Otherwise a fixed sample spread over the whole split: the ``num_batches`` batches are
    apportioned to the sources in proportion to their windows (largest remainder, at least one
    each while there are batches), and the :math:`n_s` windows of source :math:`s` (windows
    :math:`[l_s, h_s)`, :math:`W_s = h_s - l_s`) are one per stratum,

    .. math::
        j_i = l_s + \left\lfloor \frac{(i + u_i)\, W_s}{n_s} \right\rfloor,

        u_i \sim U[0, 1) \text{ drawn from } \mathtt{default\_rng}([\mathrm{seed}, l_s, W_s, n_s]),

    so the sample covers every part of every source, is the same at every evaluation and
    does not depend on the training seed."""
    if batch_size % multiple:
        raise ValueError(f"validation batches of {batch_size} cannot be split into "
                         f"{multiple} equal microbatches")
    out: list[ValBatch] = []
    if full:
        for src in sources:
            for i in range(src.lo, src.hi, batch_size):
                hi = min(i + batch_size, src.hi)
                hi = i + (hi - i) // multiple * multiple
                if hi > i:
                    out.append(ValBatch(src.name, tuple(range(i, hi))))
        return out
    per = _allocate([s.num_windows // multiple for s in sources], num_batches)
    for src, b in zip(sources, per):
        n = min(b * batch_size, src.num_windows // multiple * multiple)
        if n <= 0:
            continue
        u = np.random.default_rng([seed, src.lo, src.num_windows, n]).random(n)
        idx = src.lo + np.floor((np.arange(n) + u) * src.num_windows / n).astype(np.int64)
        for i in range(0, n, batch_size):
            out.append(ValBatch(src.name, tuple(int(j) for j in idx[i:i + batch_size])))
    return out
