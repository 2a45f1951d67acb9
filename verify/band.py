r"""The inexact-LMO band (assumption BAND of ``theory/``) of the production Newton–Schulz.

BAND: the direction :math:`d = \mathrm{NS}(v)` satisfies :math:`\|d\|_2 \le 1+\varepsilon_1` and
:math:`\langle v, d\rangle \ge (1-\varepsilon_2)\|v\|_*`. This module *derives* the constants the
theorems are instantiated with, from the shipped polynomial; property 3 then checks that the
production iteration stays inside them.

Exact arithmetic. With :math:`v = U\Sigma V^\top`, :math:`\|v\|_F \ge` ``eps`` (the
normalisation floor) and :math:`s_i = \sigma_i/\|v\|_F\in(0,1]`, :math:`\sum_i s_i^2 = 1`, the
iteration returns :math:`d = U\varphi(\Sigma/\|v\|_F)V^\top` with
:math:`\varphi = p^{\circ k}`, :math:`p(s) = as + bs^3 + cs^5`, k = 5. Hence

* :math:`\|d\|_2 = \max_i\varphi(s_i) \le \max_{[0,1]}\varphi =: 1 + \varepsilon_1`;
* :math:`\langle v, d\rangle/\|v\|_* = \sum_i s_i\varphi(s_i)/\sum_i s_i`. For
  :math:`r = \min(m,n)` singular values and any :math:`\nu\ge 0`,

  .. math::
      \sum_i s_i(\varphi(s_i) - \lambda)
      = \sum_i \big[s_i(\varphi(s_i)-\lambda) - \nu s_i^2\big] + \nu
      \ge r\min\Big(0, \min_{t\in[0,1]} t(\varphi(t)-\lambda) - \nu t^2\Big) + \nu ,

  so the ratio is :math:`\ge\lambda` whenever the right side is :math:`\ge 0` for some
  :math:`\nu` (a Lagrangian certificate). :math:`1-\varepsilon_2(r)` is the largest such
  :math:`\lambda` (bisection over :math:`\lambda`; the right side is concave in :math:`\nu`, a
  minimum of affine functions, so :math:`\nu` is found by golden-section search), evaluated on a
  grid of :math:`2^{14}` points of :math:`[0,1]` plus :math:`2^{13}` log-spaced points near 0 —
  numerical, accurate to ~1e-6; the grid error is absorbed by the allowance below.

Finite precision. The iteration runs in ``dtype``; the band is widened by the stated tolerance
:math:`\delta = \sqrt u` (u: unit roundoff of the iteration dtype — half of its significand
bits): :math:`\varepsilon_1 + \delta`, :math:`\varepsilon_2 + \delta`. This is an *assumption*
(the theorems are instantiated with it and property 3 tests it), not a derived bound: a
worst-case rounding analysis of five steps is useless here (the output's *matrix* error reaches
hundreds of u in the spectral norm, carried by the small singular values that the polynomial
has not yet moved to the band), while the two band quantities weight those directions little
(alignment) or not at all (largest singular value). The report records the measured values, so
the reader sees how much of δ is used (float32 uses ~15u of its √u ≈ 4096u, bfloat16 ~0.5u of
√u = 16u, float64 nothing measurable of its 1.5e-8).

Outside the band: an input with :math:`\|v\|_F <` ``eps`` is divided by ``eps`` instead of its
norm, so :math:`\sum_i s_i^2 < 1` and the alignment can fall to 0 (a zero input maps to 0).
BAND therefore holds for :math:`\|v\|_F \ge` ``eps`` = 1e-7 only.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import torch

from asyncpp.optim.newton_schulz import DEFAULT_COEFFICIENTS, DEFAULT_EPS, DEFAULT_STEPS

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}
NORM_FLOOR = DEFAULT_EPS


def phi(s: np.ndarray, coefficients=DEFAULT_COEFFICIENTS, steps: int = DEFAULT_STEPS):
    r""":math:`\varphi(s) = p^{\circ k}(s)`, :math:`p(s) = as + bs^3 + cs^5`."""
    a, b, c = coefficients
    x = np.asarray(s, dtype=np.float64)
    for _ in range(steps):
        x2 = x * x
        x = x * (a + x2 * (b + c * x2))
    return x


@cache
def _grid() -> np.ndarray:
    lin = np.linspace(0.0, 1.0, 2**14 + 1)
    log = np.logspace(-9, 0, 2**13)
    return np.unique(np.concatenate([lin, log]))


@cache
def exact_eps1(coefficients=DEFAULT_COEFFICIENTS, steps: int = DEFAULT_STEPS) -> float:
    r""":math:`\varepsilon_1 = \max_{[0,1]}\varphi - 1` (grid, then golden-section refinement)."""
    t = _grid()
    v = phi(t, coefficients, steps)
    i = int(np.argmax(v))
    lo, hi = t[max(i - 1, 0)], t[min(i + 1, len(t) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        if phi(x1, coefficients, steps) > phi(x2, coefficients, steps):
            hi = x2
        else:
            lo = x1
    return float(max(v.max(), phi(0.5 * (lo + hi), coefficients, steps))) - 1.0


@cache
def exact_eps2(r: int, coefficients=DEFAULT_COEFFICIENTS, steps: int = DEFAULT_STEPS) -> float:
    r""":math:`\varepsilon_2(r)`: 1 − the largest certified lower bound λ on
    :math:`\sum s_i\varphi(s_i)/\sum s_i` over r singular values (module docstring)."""
    if r < 1:
        raise ValueError(f"r = min(m, n) must be >= 1, got {r!r}")
    t = _grid()
    v = phi(t, coefficients, steps)
    if r == 1:  # one singular value: s = 1 exactly
        return float(1.0 - phi(1.0, coefficients, steps))
    def certified(lam: float) -> bool:
        base = t * (v - lam)
        t2 = t * t

        def slack(nu: float) -> float:  # concave in nu
            return r * min(0.0, float(np.min(base - nu * t2))) + nu

        lo_nu, hi_nu = 0.0, 10.0
        g = (math.sqrt(5) - 1) / 2
        best = max(slack(lo_nu), slack(hi_nu))
        for _ in range(60):
            n1, n2 = hi_nu - g * (hi_nu - lo_nu), lo_nu + g * (hi_nu - lo_nu)
            s1, s2 = slack(n1), slack(n2)
            best = max(best, s1, s2)
            if best >= 0:
                return True
            if s1 > s2:
                hi_nu = n2
            else:
                lo_nu = n1
        return best >= 0

    lo, hi = 0.0, float(v[t > 0].max())
    if not certified(lo):
        return 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if certified(mid):
            lo = mid
        else:
            hi = mid
    return 1.0 - lo


def allowance(dtype: torch.dtype) -> float:
    r"""Stated rounding tolerance of the band in ``dtype``: :math:`\delta = \sqrt u`."""
    try:
        u = UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no unit roundoff known for {dtype}; use one of "
                         f"{sorted(str(d) for d in UNIT_ROUNDOFF)}") from None
    return math.sqrt(u)


def band(r: int, dtype: torch.dtype = torch.float64) -> tuple[float, float]:
    r"""The (ε₁, ε₂) the theorems are instantiated with for the production Newton–Schulz on
    matrices with r = min(m, n), iterated in ``dtype``: exact band + :func:`allowance`
    (ε₂ certified for the next power of two ≥ r, which bounds ε₂(r))."""
    d = allowance(dtype)
    return exact_eps1() + d, min(exact_eps2(_pow2(r)) + d, 1.0)


def _pow2(r: int) -> int:
    """The next power of two ≥ r: the certificate for r' ≥ r certifies r too (the slack
    r·min(0, ·) + ν only grows as r shrinks), so ε₂ is computed for 7 values of r ≤ 64."""
    if r < 1:
        raise ValueError(f"r = min(m, n) must be >= 1, got {r!r}")
    return 1 << (int(r) - 1).bit_length()
