r"""T3 at τ = 0 with EF(γ): the EF step applied without a delay (the "optimistic"
extrapolation of updates), exact critical step on a quadratic.

Recursion (:math:`f = h x^2/2`, :math:`c = \eta h`, :math:`p = c(1-\beta)`):

.. math::
    \mu_t &= \beta\mu_{t-1} + (1-\beta)\,c\,x_t,\\
    x_{t+1} &= x_t - (1+\gamma)\mu_t + \gamma\mu_{t-1},

the production ``DelayedOptimizer(delay=0, correction="ef", ef_without_delay=True)``
(γ = 1) and its EF(γ) form. Characteristic polynomial (step SC1):
:math:`(z-1)(z-\beta) + p((1+\gamma)z - \gamma)`, the τ = 0 member of T3's EF(γ) family.
Schur–Cohn (SC3): :math:`\delta_1 = (1+\beta-\gamma p)(1-\beta+\gamma p)`,
:math:`\delta_2 = p(1-\beta+\gamma p)^2\,(2(1+\beta) - (1+2\gamma)p)`, so

.. math::
    c^*(\beta, 0, \gamma) = \frac{2(1+\beta)}{(1+2\gamma)(1-\beta)},

a factor :math:`1 + 2\gamma` below the plain method's :math:`2(1+\beta)/(1-\beta)` (γ = 1:
a third). As β → 1, :math:`(1-\beta)c^* \to 4/(1+2\gamma)`: like the plain method it grows as
:math:`1/(1-\beta)`, with a smaller constant. Without a delay the extrapolation only narrows
the stable range; at τ = 1 the same step widens it (T3[τ=1, EF]: 1 → about
:math:`1/\sqrt{1-\beta}`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from .assumptions import Result, Step, beta, eq, ge, p, z
from .charpoly import DOMAIN_P, char_poly_expr, schur_cohn

gamma_sym = sp.Symbol("gamma", nonnegative=True)


def char_poly_nodelay(bv=beta, pv=p, gv=gamma_sym) -> sp.Expr:
    r""":math:`(z-1)(z-\beta) + p((1+\gamma)z - \gamma)`: EF(γ) without a delay."""
    return (z - 1) * (z - bv) + pv * ((1 + gv) * z - gv)


def state_matrix_nodelay(bv=beta, pv=p, gv=gamma_sym) -> sp.Matrix:
    r"""A with :math:`(x_{t+1}, \mu_t) = A(x_t, \mu_{t-1})`:
    :math:`\mu_t = \beta\mu_{t-1} + p x_t`,
    :math:`x_{t+1} = x_t - (1+\gamma)\mu_t + \gamma\mu_{t-1}`."""
    return sp.Matrix([[1 - (1 + gv) * pv, gv - (1 + gv) * bv], [pv, bv]])


def critical_p_nodelay_expr() -> sp.Expr:
    r""":math:`p^* = 2(1+\beta)/(1+2\gamma)`."""
    return 2 * (1 + beta) / (1 + 2 * gamma_sym)


def critical_step_nodelay_expr() -> sp.Expr:
    r""":math:`c^*(\beta, 0, \gamma) = 2(1+\beta)/((1+2\gamma)(1-\beta))`."""
    return critical_p_nodelay_expr() / (1 - beta)


def _validate(beta_v, gamma) -> None:
    if not (0.0 <= float(beta_v) < 1.0):
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta_v!r}")
    if not (np.isfinite(float(gamma)) and float(gamma) >= 0):
        raise ValueError(f"gamma (EF coefficient) must be a finite number >= 0, got {gamma!r}")


def critical_step_nodelay(beta_v, gamma=1.0) -> float:
    r"""c* of EF(γ) at delay 0 (float64): :math:`2(1+\beta)/((1+2\gamma)(1-\beta))`."""
    _validate(beta_v, gamma)
    b, g = float(beta_v), float(gamma)
    return 2.0 * (1.0 + b) / ((1.0 + 2.0 * g) * (1.0 - b))


def spectral_radius_nodelay(beta_v, c, gamma=1.0) -> float:
    r""":math:`\max |z|` over the roots of the characteristic polynomial at ηh = c
    (float64)."""
    _validate(beta_v, gamma)
    b, g, pv = float(beta_v), float(gamma), float(c) * (1.0 - float(beta_v))
    return float(np.max(np.abs(np.roots([1.0, -(1.0 + b) + pv * (1.0 + g), b - pv * g]))))


def simulate_nodelay(beta_v, c, gamma=1.0, steps=1000, x0=1.0) -> np.ndarray:
    r"""The recursion in float64 with :math:`\mu_{-1} = 0` (the production buffers start at
    zero): returns :math:`x_0, \dots, x_{\text{steps}}` (h = 1, η = c)."""
    _validate(beta_v, gamma)
    b, cv, g = float(beta_v), float(c), float(gamma)
    xs = [float(x0)]
    mu_prev = 0.0
    for _ in range(steps):
        mu = b * mu_prev + (1.0 - b) * cv * xs[-1]
        xs.append(xs[-1] - (1.0 + g) * mu + g * mu_prev)
        mu_prev = mu
    return np.array(xs)


def _steps() -> list[Step]:
    g_, b = gamma_sym, beta
    P = char_poly_nodelay()
    A = state_matrix_nodelay()
    lam = sp.Symbol("lambda")
    d = schur_cohn(sp.expand(P))
    pstar = critical_p_nodelay_expr()
    fac = [(1 + b - g_ * p) * (1 - b + g_ * p),
           p * (1 - b + g_ * p) ** 2 * (2 * (1 + b) - (1 + 2 * g_) * p)]
    return [
        Step("SC1 characteristic polynomial", "identity",
             eq(A.charpoly(lam).as_expr().subs(lam, z), P),
             r"$\det(zI - A)$ for the state $(x_t, \mu_{t-1})$, $p = c(1-\beta)$"),
        Step(r"SC1b the $\tau = 0$ member of T3's EF($\gamma$) family", "identity",
             eq(P, char_poly_expr(b, 0, var=p) + p * g_ * (z - 1)),
             r"$z^\tau(z-1)(z-\beta) + p((1+\gamma)z - \gamma)$ at $\tau = 0$; $\gamma = 0$ is "
             r"T3[$\tau = 0$]"),
        Step("SC2 Schur-Cohn criterion", "cited", ge(sp.Symbol(r"\delta_k"), 0),
             r"all roots lie in $|z|<1$ iff every leading coefficient $\delta_k$ of the "
             "successive Schur transforms is $> 0$ (Schur 1917, Cohn 1922; Marden, *Geometry of "
             "Polynomials*, §42–43)"),
        Step(r"SC3.1 $\delta_1$ factorised", "identity", eq(d[0], fac[0])),
        Step(r"SC3.2 $\delta_2$ factorised", "identity", eq(d[1], fac[1]),
             r"$p(1-\beta+\gamma p)^2 > 0$, so the sign is that of $p^* - p$"),
        Step(r"SC4 $\gamma p^* \le 1 + \beta$", "inequality", ge(1 + b - g_ * pstar, 0),
             r"$(1+\beta)/(1+2\gamma)$: $\delta_1 > 0$ on $(0, p^*)$", domain=DOMAIN_P),
        Step(r"SC5 $\delta_2 = (1+2\gamma)\,p\,(1-\beta+\gamma p)^2 (p^* - p)$", "identity",
             eq(fac[1], (1 + 2 * g_) * p * (1 - b + g_ * p) ** 2 * (pstar - p))),
        Step(r"SC6 $\gamma = 0$ gives T3[$\tau = 0$]", "identity",
             eq(pstar.subs(g_, 0), 2 * (1 + b))),
        Step(r"SC7 $\gamma = 1$: a third of T3[$\tau = 0$]", "identity",
             eq(pstar.subs(g_, 1) / (1 - b), 2 * (1 + b) / (3 * (1 - b)))),
        Step(r"SC8 $\beta \to 1$: $(1-\beta)c^* \to 4/(1+2\gamma)$", "identity",
             eq(pstar.subs(b, 1), 4 / (1 + 2 * g_))),
        Step("SC9 sign bookkeeping", "reasoning",
             eq(sp.Symbol("c^*"), critical_step_nodelay_expr()),
             r"SC3–SC5 with SC2: on $0 < p < p^*$ both $\delta_1, \delta_2 > 0$; "
             r"$\delta_2 = 0$ at $p^*$ and $< 0$ above, so $c^* = p^*/(1-\beta)$"),
    ]


@cache
def result() -> Result:
    """The T3[τ=0, EF(γ)] :class:`~theory.assumptions.Result`."""
    return Result(
        name="T3[tau=0, EF(gamma)]",
        title=r"critical $\eta h$ of EF($\gamma$) without a delay, $x_{t+1} = x_t - "
              r"(1+\gamma)u_t + \gamma u_{t-1}$, on $h x^2/2$",
        quantity="c*(beta, 0, gamma) = sup{c: stable for all eta*h in (0, c)}",
        quantity_latex=r"c^*(\beta, 0, \gamma)", statement=critical_step_nodelay_expr(),
        params=(beta, gamma_sym), steps=_steps(),
        assumptions=("quadratic f = h x^2/2",), relation="=",
        legend={gamma_sym: "EF coefficient (1 = the paper's EF, 0 = none)"},
        notes="exact; a factor 1 + 2 gamma below the plain method's 2(1+beta)/(1-beta)")


__all__ = ["char_poly_nodelay", "state_matrix_nodelay", "critical_p_nodelay_expr",
           "critical_step_nodelay_expr", "critical_step_nodelay", "spectral_radius_nodelay",
           "simulate_nodelay", "result"]
