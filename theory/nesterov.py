r"""T3[Nesterov] — linear stability of the Nesterov delay correction on a quadratic.

The correction (``asyncpp.delay.nesterov``, after Ajanthan et al., ICML 2025): the plain
delayed EMA-momentum sequence

.. math::
    \mu_t = \beta\mu_{t-1} + (1-\beta)\,c\,\theta_{t-\tau},\qquad x_{t+1} = x_t - \mu_t,

on :math:`f = h x^2/2` (:math:`c = \eta h`, ``SGD(momentum=β, dampening=β)``), with every
gradient taken at the look-ahead point

.. math::
    \theta_t = x_t + \kappa\,(x_t - x_{t-1}),\qquad
    \kappa = \kappa_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k .

State :math:`(x_t, \dots, x_{t-\tau-1}, \mu_{t-1})` (τ+3 entries). In z,
:math:`(z-1)X = -M`, :math:`(z-\beta)M = p\,z^{-\tau}(1+\kappa-\kappa z^{-1})X`, so

.. math::
    \det(zI - A) = z\,\big[z^\tau(z-1)(z-\beta) + p\,((1+\kappa)z - \kappa)\big],
    \qquad p = c(1-\beta),

step N1.τ (checked symbolically for τ = 1, 2, 3 with β, κ, p free): the EF(γ) polynomial of
T3 at γ = κ. So the critical step is :math:`c^*_{\rm Nesterov}(\beta,\tau) =
c^*(\beta, \tau, \gamma = \kappa_\tau(\beta))` of ``theory.stability`` (closed form for τ = 1,
root locus for τ ≥ 2). It never exceeds EF(γ*)'s, and that is true by definition: γ*
maximises c* over *all* γ (T3[EF(gamma*), every tau]), κ is one γ. :func:`comparison`
tabulates it against no correction, EF (γ = 1) and EF(γ*) at a few β; :func:`fine_comparison`
measures on a fine β grid what holds between those points — the largest gap to EF(γ*), and
the β intervals where the look-ahead is *below* the paper's EF (it is not above EF
everywhere: for each τ = 1, 2, 3 there is one such interval at moderate β).
"""

from __future__ import annotations

import sympy as sp

from .assumptions import Result, Step, beta, c, eq, p, z
from .stability import (
    critical_p_gamma_exprs,
    critical_step,
    gamma_sym,
    optimal_gamma,
)

kappa = sp.Symbol("kappa", nonnegative=True)

BETAS = (0.5, 0.9, 0.95, 0.99)
TAUS = (1, 2, 3)


def lookahead(beta_v, tau: int):
    r""":math:`\kappa_\tau(\beta) = \sum_{k=1}^{\tau+1}\beta^k` (τ ≥ 1; the product's
    ``asyncpp.delay.lookahead_coefficient``)."""
    return sum(beta_v**k for k in range(1, tau + 2))


def state_matrix(beta_v, tau: int, cv=c, kappa_v=kappa) -> sp.Matrix:
    r"""A with :math:`s_{t+1} = A s_t`, :math:`s_t = (x_t, \dots, x_{t-\tau-1}, \mu_{t-1})`:
    :math:`\mu_t = \beta\mu_{t-1} + (1-\beta)c\,(x_{t-\tau} + \kappa(x_{t-\tau} -
    x_{t-\tau-1}))`, :math:`x_{t+1} = x_t - \mu_t`. Built from the look-ahead form, not from
    the EF recursion it turns out to equal."""
    n = tau + 3
    A = sp.zeros(n, n)
    im = tau + 2
    mu = {im: beta_v, tau: (1 - beta_v) * cv * (1 + kappa_v),
          tau + 1: -(1 - beta_v) * cv * kappa_v}
    A[0, 0] = 1
    for k, v in mu.items():
        A[0, k] -= v
        A[im, k] += v
    for i in range(1, tau + 2):
        A[i, i - 1] = 1
    return A


def char_poly_expr(beta_v, tau: int, pv=p, kappa_v=kappa) -> sp.Expr:
    r""":math:`z^\tau(z-1)(z-\beta) + p((1+\kappa)z - \kappa)` (EF(γ) at γ = κ)."""
    return z**tau * (z - 1) * (z - beta_v) + pv * ((1 + kappa_v) * z - kappa_v)


def critical_step_nesterov(beta_v: float, tau: int) -> float:
    r""":math:`c^*(\beta, \tau, \gamma = \kappa_\tau(\beta))`: the sup of ηh below which the
    Nesterov-corrected recursion is stable for every smaller ηh (τ ≥ 1)."""
    if tau < 1:
        raise ValueError(f"the correction acts on delayed steps only: tau >= 1, got {tau!r}")
    return critical_step(float(beta_v), tau, True, gamma=float(lookahead(float(beta_v), tau)))


def comparison(betas=BETAS, taus=TAUS) -> list[dict]:
    """Per (β, τ): κ, γ*, and the critical ηh of no correction, EF (γ = 1), EF(γ*) and the
    Nesterov look-ahead, with the answers "Nesterov > EF?" and "Nesterov > EF(γ*)?"."""
    rows = []
    for b in betas:
        for tau in taus:
            g_star, c_star = optimal_gamma(b, tau)
            row = {"beta": b, "tau": tau, "kappa": float(lookahead(b, tau)),
                   "gamma_star": float(g_star),
                   "none": critical_step(b, tau, False),
                   "ef": critical_step(b, tau, True),
                   "ef_gamma_star": float(c_star),
                   "nesterov": critical_step_nesterov(b, tau)}
            row["nesterov_gt_ef"] = row["nesterov"] > row["ef"]
            row["nesterov_gt_ef_gamma_star"] = row["nesterov"] > row["ef_gamma_star"] * (1 + 1e-9)
            rows.append(row)
    return rows


def _crossing(f, lo: float, hi: float) -> float:
    """A sign change of f on [lo, hi] by bisection (to 1e-12)."""
    flo = f(lo)
    while hi - lo > 1e-12:
        mid = 0.5 * (lo + hi)
        if (f(mid) > 0) == (flo > 0):
            lo, flo = mid, f(mid)
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fine_comparison(tau: int, n: int = 1999, beta_max: float = 0.999,
                    split: float = 0.95) -> dict:
    r"""Nesterov against EF and EF(γ*) on n equispaced β in [0, ``beta_max``] (τ ≥ 1).

    Returns ``gap_max`` / ``gap_beta``: the largest relative shortfall
    :math:`1 - c^*_N/c^*_{EF(\gamma^*)}` and its β; ``gap_max_low`` / ``gap_beta_low``: the
    same over β ≤ ``split``; ``below_ef``: the β intervals where :math:`c^*_N < c^*_{EF}`
    (endpoints refined by bisection); ``ratio_min`` / ``ratio_beta``: the smallest
    :math:`c^*_N/c^*_{EF}`; ``above_ef_gamma_star``: the number of grid points where
    Nesterov beats EF(γ*) (0 by definition of γ*)."""
    import numpy as np

    bs = np.linspace(0.0, beta_max, n)
    cn = np.array([critical_step_nesterov(b, tau) for b in bs])
    ce = np.array([critical_step(b, tau, True) for b in bs])
    cg = np.array([optimal_gamma(b, tau)[1] for b in bs])
    gap = 1.0 - cn / cg
    low = bs <= split
    i, il = int(np.argmax(gap)), int(np.argmax(np.where(low, gap, -np.inf)))

    def diff(b):
        return critical_step_nesterov(b, tau) - critical_step(b, tau, True)

    below, k = [], 0
    neg = cn < ce
    while k < n:
        if neg[k]:
            m = k
            while m + 1 < n and neg[m + 1]:
                m += 1
            a = _crossing(diff, bs[k - 1], bs[k]) if k > 0 else 0.0
            b = _crossing(diff, bs[m], bs[m + 1]) if m + 1 < n else float(bs[m])
            below.append((float(a), float(b)))
            k = m + 1
        else:
            k += 1
    r = cn / ce
    j = int(np.argmin(r))
    return {"tau": tau, "n": n, "beta_max": beta_max, "split": split,
            "gap_max": float(gap[i]), "gap_beta": float(bs[i]),
            "gap_max_low": float(gap[il]), "gap_beta_low": float(bs[il]),
            "below_ef": below, "ratio_min": float(r[j]), "ratio_beta": float(bs[j]),
            "above_ef_gamma_star": int(np.sum(cn > cg * (1 + 1e-9)))}


def _steps() -> list[Step]:
    lam = sp.Symbol("lambda")
    out = []
    for tau in (1, 2, 3):
        A = state_matrix(beta, tau, cv=p / (1 - beta))
        P = char_poly_expr(beta, tau)
        out.append(Step(rf"N1.{tau} characteristic polynomial, $\tau = {tau}$", "identity",
                        eq(A.charpoly(lam).as_expr().subs(lam, z), z * P),
                        r"$\det(zI - A)$ of the look-ahead recursion, state "
                        r"$(x_t, \dots, x_{t-\tau-1}, \mu_{t-1})$, $c = p/(1-\beta)$: the "
                        r"EF($\gamma$) polynomial at $\gamma = \kappa$"))
    pf, pg = critical_p_gamma_exprs()
    k1 = lookahead(beta, 1)
    out += [
        *(Step(rf"N2.{t} closed form of $\kappa_{t}$", "identity",
               eq(lookahead(beta, t) * (1 - beta), beta * (1 - beta ** (t + 1))),
               r"$\kappa_\tau = \beta(1-\beta^{\tau+1})/(1-\beta)$: the look-ahead to the "
               r"step where a gradient taken now is applied ($\tau$ steps) plus NAG's one")
          for t in (1, 2, 3)),
        Step(r"N3 T3[$\tau=1$, EF($\gamma$)] at $\gamma = \kappa_1$", "reasoning",
             eq(sp.Symbol("c^*_N"), sp.Min(pf, pg).subs(gamma_sym, k1) / (1 - beta)),
             r"N1.1 makes the recursion EF($\kappa_1$); T3[$\tau=1$, EF($\gamma$)] gives "
             r"$c^* = \min(p_f, p_g)/(1-\beta)$ for every $\gamma \ge 0$"),
        Step(r"N4 no better than EF($\gamma^*$)", "reasoning",
             sp.Le(sp.Symbol("c^*_N"), sp.Symbol(r"c^*_{EF(\gamma^*)}")),
             r"true by definition: $\gamma^*$ maximises $c^*$ over all real $\gamma$ "
             r"(T3[$\tau=1$, EF($\gamma^*$)]; every $\tau$: T3[EF($\gamma^*$), every "
             r"$\tau$]) and $\kappa$ is one $\gamma$"),
    ]
    return out


def result() -> Result:
    pf, pg = critical_p_gamma_exprs()
    k1 = lookahead(beta, 1)
    return Result(
        name="T3[tau=1, Nesterov]",
        title=r"critical $\eta h$ of the Nesterov look-ahead correction "
              r"$\theta_t = x_t + \kappa(x_t - x_{t-1})$, $\kappa = \beta + \beta^2$, delay 1, "
              r"on $h x^2/2$",
        quantity="c*_N(beta) = sup{c: stable for all eta*h in (0, c)}",
        quantity_latex=r"c^*_{\rm N}(\beta, 1)",
        statement=sp.Min(pf, pg).subs(gamma_sym, k1) / (1 - beta),
        params=(beta,), steps=_steps(), assumptions=("quadratic f = h x^2/2",),
        relation="=",
        legend={kappa: r"look-ahead $\sum_{k=1}^{\tau+1}\beta^k$"},
        notes="tau >= 2: critical_step_nesterov (root locus of the same polynomial); "
              "theory.nesterov.comparison() tabulates it against none, EF and EF(gamma*)")


__all__ = ["BETAS", "TAUS", "char_poly_expr", "comparison", "critical_step_nesterov",
           "fine_comparison",
           "kappa", "lookahead", "result", "state_matrix"]
