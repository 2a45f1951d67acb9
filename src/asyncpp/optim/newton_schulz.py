r"""Quintic Newton–Schulz orthogonalization, batched over matrices of equal shape.

For a matrix :math:`G` with SVD :math:`G = U \Sigma V^\top`, the spectral-norm LMO direction is
the polar factor :math:`U V^\top`. The quintic iteration

.. math::
    X_0 = G / \max(\|G\|_F, \varepsilon), \qquad
    A_k = X_k X_k^\top, \qquad
    X_{k+1} = a X_k + (b A_k + c A_k^2) X_k

maps every singular value :math:`s \in (0, 1]` of :math:`X_0` through the odd polynomial
:math:`p(s) = a s + b s^3 + c s^5` ``steps`` times. With the default coefficients
(3.4445, −4.7750, 2.0315) and 5 steps the result is not the exact polar factor: its singular
values land in a band around 1 (measured by ``verify/`` and reported by
:func:`singular_value_band`). The theory in ``theory/`` is stated for such an inexact LMO.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
DEFAULT_STEPS = 5
DEFAULT_EPS = 1e-7

_DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float64": torch.float64,
    "fp64": torch.float64,
}


def resolve_ns_dtype(name: str | None, native: torch.dtype) -> torch.dtype:
    """Map a user-facing precision name to a dtype; ``None``/``"native"`` keeps ``native``."""
    if name is None or name == "native":
        return native
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(
            f"unknown Newton–Schulz dtype {name!r}; allowed: {sorted(_DTYPES)} or 'native'"
        ) from None


def newton_schulz(
    G: Tensor,
    steps: int = DEFAULT_STEPS,
    coefficients: tuple[float, float, float] = DEFAULT_COEFFICIENTS,
    eps: float = DEFAULT_EPS,
    dtype: torch.dtype | None = torch.bfloat16,
) -> Tensor:
    r"""Approximate the polar factor of each matrix in ``G`` (shape ``(..., m, n)``).

    One batched matmul chain serves the whole stack: leading dimensions are flattened into a
    batch, tall matrices are transposed so the Gram matrix :math:`X X^\top` is the small one,
    and each matrix is normalised by its own Frobenius norm (so the spectral norm is ≤ 1).
    A zero matrix maps to zero (the norm is clamped at ``eps``), never to NaN.

    Returns a tensor of ``G``'s shape in the iteration dtype (``dtype``; ``None`` keeps G's).
    """
    if G.ndim < 2:
        raise ValueError(f"newton_schulz needs matrices, got a tensor of shape {tuple(G.shape)}")
    a, b, c = coefficients
    work = dtype or G.dtype
    shape = G.shape
    X = G.reshape(-1, shape[-2], shape[-1]).to(work)
    tall = shape[-2] > shape[-1]
    if tall:
        X = X.mT
    norms = torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True).clamp(min=eps)
    X = X / norms
    for _ in range(steps):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)
        X = torch.baddbmm(X, B, X, beta=a)
    if tall:
        X = X.mT
    return X.reshape(shape)


def singular_value_band(O: Tensor) -> tuple[float, float]:
    """Smallest and largest singular value over a stack of matrices (float64 SVD)."""
    s = torch.linalg.svdvals(O.reshape(-1, O.shape[-2], O.shape[-1]).double())
    return float(s.min()), float(s.max())
