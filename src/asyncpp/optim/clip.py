r"""Gradient norms and clipping without host synchronisation (shared by the single-process
trainer and the pipeline executor, so both compute the same numbers in the same order).

.. math::
    s = \sum_p \|g_p\|_2^2 \ \text{(float64)},\qquad
    c = \min\Big(1, \frac{c_{\max}}{\sqrt{s} + 10^{-6}}\Big),\qquad g_p \leftarrow c\, g_p

Everything stays on the device: the norms come from one multi-tensor ``_foreach_norm``, the
coefficient is a 0-dim tensor, and the scaling is one ``_foreach_mul_``. Compared with a loop
of ``vector_norm(g).double() ** 2`` summed one by one, the float64 sum runs in another order,
so s may differ in its last bits; both backends use this function, so they agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def squared_norm(tensors: Sequence[Tensor], device: torch.device | None = None) -> Tensor:
    r""":math:`\sum_p \|t_p\|_2^2` in float64 as a 0-dim tensor on the tensors' device (zero
    for an empty list, on ``device``)."""
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return torch.zeros((), dtype=torch.float64, device=device)
    norms = torch._foreach_norm(tensors)
    return torch.stack([n.double() for n in norms]).square().sum()


def clip_coefficient(sq: Tensor, max_norm: float) -> Tensor:
    r""":math:`\min(1, c_{\max}/(\sqrt{s} + 10^{-6}))` as a 0-dim float64 tensor."""
    return (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)


def scale_(tensors: Sequence[Tensor], coef: Tensor) -> None:
    """Multiply every tensor in place by the 0-dim tensor ``coef`` (one multi-tensor op)."""
    tensors = [t for t in tensors if t is not None]
    if tensors:
        torch._foreach_mul_(tensors, coef.to(tensors[0].device))
