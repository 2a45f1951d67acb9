r"""T1 — LMO with EMA momentum under a fixed gradient delay τ (Muon is the spectral-norm case).

**Method (what the production code runs).** ``DelayedOptimizer(Muon(...), delay=τ)`` in the
default ``formulation="gradient"``: the gradient :math:`g_t = g(x_t; \xi_t)` is computed at
every step; for :math:`t < \tau` nothing is applied (:math:`x_{t+1} = x_t`, the pipeline
fills); for :math:`t \ge \tau` the optimizer consumes :math:`g_{t-\tau}`:

.. math::
    m_t &= (1-\alpha)\, m_{t-1} + \alpha\, g(x_{t-\tau}),\qquad m_{\tau-1} = 0,\\
    x_{t+1} &= x_t - \eta\, d_t,\qquad d_t = \mathrm{lmo}(v_t),

with :math:`v_t = m_t` (heavy-ball EMA; Muon ``nesterov=False``) or
:math:`v_t = \alpha\, g(x_{t-\tau}) + (1-\alpha)\, m_t` (Muon ``nesterov=True``, the production
default); :math:`\alpha = 1 - \beta` for Muon's momentum :math:`\beta`; :math:`\eta` is Muon's
(shape-adjusted) learning rate — with several matrices whose adjustments :math:`r_i` differ,
read :math:`\|\cdot\|` as the weighted norm :math:`\max_i \|X_i\|_2/r_i`, whose LMO is Muon's
step with learning rate :math:`\eta`. Decoupled weight decay is not covered.

Re-indexing by applied steps, :math:`y_k = x_{k+\tau}` (:math:`k \ge 0`; :math:`y_0 = x_0`
because the :math:`\tau` idle steps do not move :math:`x`), the gradient consumed at applied
step :math:`k` is taken at :math:`z_k = y_{\max(k-\tau, 0)}`, so
:math:`\|y_k - z_k\| \le \min(k, \tau)\,\eta(1+\epsilon_1) \le \tau\eta(1+\epsilon_1)`.

**Theorem (T1).** Under A0–A3, BAND (inexact LMO with constants :math:`\epsilon_1 \ge 0`,
:math:`0 \le \epsilon_2 < 1`) and INIT, for every :math:`K \ge 1` the average over the
:math:`K` applied steps satisfies

.. math::
    \frac1K\sum_{k=0}^{K-1}\mathbb{E}\|\nabla f(x_{k+\tau})\|_\dagger
    &\le q\Big(\frac{\Delta_0}{\eta K} + \frac{L\eta r^2}{2}\Big)\\
    &\quad + C\Big(\frac{(1-\alpha)E_0}{\alpha K} + \sqrt{\frac{\alpha}{2-\alpha}}\,\rho\sigma
    + L\eta r\Big(\frac{1-\alpha}{\alpha} + \tau\Big)\Big)

with :math:`r = 1+\epsilon_1`, :math:`q = 1/(1-\epsilon_2)`,
:math:`C = (2+\epsilon_1-\epsilon_2)/(1-\epsilon_2)`. For Nesterov, :math:`(1-\alpha)` becomes
:math:`(1-\alpha)^2` in the :math:`E_0` and lag terms and :math:`\sqrt{\alpha/(2-\alpha)}`
becomes :math:`\nu_N = \sqrt{\alpha(1-\alpha)^4/(2-\alpha) + \alpha^2(2-\alpha)^2}` (the noise
variance is the exact fixed point :math:`\alpha\sigma^2/(2-\alpha)` of its recursion, step
M13: about :math:`\sqrt2` below :math:`\sqrt\alpha` for small :math:`\alpha`). The minimum
over :math:`k` is at most the average. With the production zero buffer,
:math:`E_0 = \|\nabla f(x_0)\|_\dagger \le \sqrt{2L\Delta_0}` (step G3).

The delay adds exactly :math:`C L\eta(1+\epsilon_1)\tau` (:math:`= 2\tau L\eta` for the exact
LMO) to the momentum-lag term :math:`2L\eta(1-\alpha)/\alpha`: a relative cost of order
:math:`\alpha\tau`. At :math:`\tau = 0`, :math:`\epsilon_1 = \epsilon_2 = 0` and
:math:`E_0 = \rho\sigma` (Kovalev's :math:`m_0 = g(x_0)`), the bound is Kovalev's Theorem 2
minus at least :math:`2\rho\sigma/K + 3L\eta` (step KV1), because the lag term is kept as
:math:`(1-\alpha)/\alpha` instead of :math:`1/\alpha` and the curvature term as
:math:`L\eta/2` instead of :math:`3L\eta/2`, and the noise term is
:math:`2\sqrt{\alpha/(2-\alpha)}\rho\sigma` instead of :math:`2\sqrt{\alpha}\rho\sigma`.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import sympy as sp

from . import _lmo
from ._lmo import (
    N,
    descent_steps,
    final_steps,
    heavy_noise_factor,
    momentum_steps,
    nesterov_noise_factor,
    summ,
)
from .assumptions import (
    E0,
    C,
    Delta,
    K,
    L,
    Result,
    Step,
    alpha,
    eps,
    eps1,
    eps2,
    eq,
    eta,
    ge,
    k,
    le,
    q,
    r,
    rho,
    sigma,
    tau,
)

w = 1 - alpha
#: κ² with ν_N ≤ κ√α (Nesterov), certified in step P0
KAPPA2_NESTEROV = sp.Rational(3, 2)
#: κ² of the heavy-ball noise √(α/(2−α)) to leading order in α (α → 0): the optimal-momentum
#: steps O5–O8 use it; the complexity steps P3–P10 use the exact factor
KAPPA2_HEAVY = sp.Rational(1, 2)

PARAMS = (Delta, L, rho, sigma, eta, alpha, K, tau, eps1, eps2, E0)


def statement(nesterov: bool = False) -> sp.Expr:
    r"""The T1 bound as a sympy expression over ``PARAMS`` (see the module docstring)."""
    if nesterov:
        init, noise, lag = w**2, nesterov_noise_factor(), w**2 / alpha
    else:
        init, noise, lag = w, heavy_noise_factor(), w / alpha
    return q * (Delta / (eta * K) + L * eta * r**2 / 2) + C * (
        init * E0 / (alpha * K) + noise * rho * sigma + L * eta * r * (lag + tau))


def kovalev_statement() -> sp.Expr:
    r"""Kovalev (2025) Thm 2: :math:`\Delta_0/(\eta K) + 2\rho\sigma/(\alpha K)
    + 2\sqrt{\alpha}\rho\sigma + 3L\eta/2 + 2L\eta/\alpha` (τ = 0, exact LMO)."""
    return (Delta / (eta * K) + 2 * rho * sigma / (alpha * K) + 2 * sp.sqrt(alpha) * rho * sigma
            + 3 * L * eta / 2 + 2 * L * eta / alpha)


def surrogate(nesterov: bool = False) -> sp.Expr:
    r"""B̄ ≥ B: qΔ/(ηK) + CE₀/(αK) + Cν̄ρσ + Lηr(C/α + Cτ + qr/2), ν̄ = √(α/(2−α)) (heavy
    ball, exact) or √(3α/2) (Nesterov); the bound that the complexity K(ε) is derived from."""
    return (q * Delta / (eta * K) + C * E0 / (alpha * K) + C * _noise_bar(nesterov) * rho * sigma
            + L * eta * r * (C / alpha + C * tau + q * r / 2))


def _noise_bar(nesterov: bool) -> sp.Expr:
    return sp.sqrt(KAPPA2_NESTEROV * alpha) if nesterov else heavy_noise_factor()


def _lag_coefficient(nesterov: bool) -> sp.Expr:
    lag = w**2 / alpha if nesterov else w / alpha
    return L * r * (C * (lag + tau) + q * r / 2)


def _steps(nesterov: bool) -> list[Step]:
    steps: list[Step] = []
    steps.append(Step(
        "MODEL delayed LMO", "assumption",
        le(sp.Symbol(r"\|y-z\|"), tau * eta * r),
        r"production semantics: $y_k = x_{k+\tau}$, $z_k = y_{\max(k-\tau,0)}$ (the $\tau$ idle "
        r"start steps repeat $x_0$); $y_k - z_k$ is $\eta$ times a sum of at most $\tau$ "
        "directions; pinned to the production code by the exact identity I3 of verify/ (the "
        "applied step is the optimizer's step on the gradient at the stated stale weights)",
        refs=("BAND",)))
    d, desc = descent_steps()
    steps += d
    m, mom, total = momentum_steps(
        L * tau * eta * r,
        r"A2: $\|\nabla f(z_k) - \nabla f(y_k)\|_\dagger \le L\|y_k - z_k\| \le L \tau \eta "
        r"(1+\epsilon_1)$ (triangle inequality over the at most $\tau$ directions between $z_k$ "
        "and $y_k$)",
        nesterov)
    steps += m
    bound = statement(nesterov)
    steps += final_steps(desc, mom, total, bound)
    steps.append(Step(r"F3 $\min \le$ average", "cited",
                      le(sp.Symbol(r"\mathbb{E}\min_k\|\nabla f(y_k)\|"), summ(N(k)) / K),
                      r"$\mathbb{E}\min_k X_k \le \min_k \mathbb{E} X_k \le \frac{1}{K}\sum_k "
                      r"\mathbb{E} X_k$"))
    steps += _g0_steps()
    if not nesterov:
        steps += _kovalev_steps()
    steps += _optimal_steps(nesterov)
    steps += _complexity_steps(nesterov)
    steps += _tightness_steps()
    return steps


def _g0_steps() -> list[Step]:
    G0 = sp.Symbol("G_0", nonnegative=True)
    t = sp.Symbol("t", positive=True)
    t_star = sp.sqrt(2 * Delta / L)
    g1 = Step("G1 descent along the exact LMO at x0", "cited", le(t * G0, Delta + L * t**2 / 2),
              r"A2 at $x_0$ with $y = x_0 - t d^*$, $d^* = \operatorname{lmo}(\nabla f(x_0))$ "
              r"exact ($\|d^*\| = 1$, $\langle\nabla f(x_0), d^*\rangle = G_0 = \|\nabla "
              r"f(x_0)\|_\dagger$): $\inf f \le f(x_0) - t G_0 + L t^2/2$",
              refs=("A0", "A2"))
    g2 = Step("G2 choice of t", "identity",
              eq(((Delta + L * t**2 / 2) / t).subs(t, t_star), sp.sqrt(2 * L * Delta)),
              r"$t = \sqrt{2\Delta/L}$")
    g3 = Step("G3 zero-buffer initial error", "inequality",
              le(G0, sp.sqrt(2 * L * Delta)), r"$E_0 = G_0 \le \sqrt{2 L \Delta_0}$ for a zero "
                                              "buffer",
              uses=((g1, 1 / t_star, {t: t_star}),))
    return [g1, g2, g3]


def _kovalev_steps() -> list[Step]:
    sub = {tau: 0, eps1: 0, eps2: 0, E0: rho * sigma}
    ours = statement(False).subs(sub)
    return [Step(r"KV1 $\tau = 0$ reduces to Kovalev's Theorem 2", "inequality",
                 le(ours, kovalev_statement()),
                 r"$\tau = 0$, exact LMO, $E_0 = \rho\sigma$ ($m_0 = g(x_0)$): ours $\le$ "
                 r"Kovalev's; the gap is $2\rho\sigma/K + 3 L \eta + 2(\sqrt{\alpha} - "
                 r"\sqrt{\alpha/(2-\alpha)})\rho\sigma$")]


def _optimal_steps(nesterov: bool) -> list[Step]:
    bnd = statement(nesterov)
    a_val = q * Delta / K
    b_val = _lag_coefficient(nesterov)
    c0 = sp.expand(bnd - a_val / eta - b_val * eta)
    a_, b_ = sp.symbols("a b", positive=True)
    o1 = Step(r"O1 the bound is $a/\eta + b\eta + c$", "definition",
              eq(bnd, a_ / eta + b_ * eta + c0),
              r"$a = q\Delta/K > 0$, $b = L r\,(C(\text{lag} + \tau) + q r/2) > 0$, $c$ "
              r"independent of $\eta$",
              model={a_: a_val, b_: b_val})
    o1b = Step("O1b $a, b > 0$", "inequality", ge(a_val * b_val, 0))
    eta_star = sp.sqrt(a_ / b_)
    phi = a_ / eta + b_ * eta
    o2 = Step("O2 stationary step size", "identity",
              eq(sp.diff(phi, eta).subs(eta, eta_star), 0), r"$\eta^*(\alpha) = \sqrt{a/b}$")
    o3 = Step(r"O3 convex in $\eta$", "monotonicity", ge(sp.diff(phi, eta, 2), 0),
              r"the derivative increases ($2a/\eta^3 > 0$): $\eta^*$ is the global minimiser",
              mono=(sp.diff(phi, eta), eta, 1, None))
    o4 = Step(r"O4 value at $\eta^*$", "identity",
              eq(phi.subs(eta, eta_star), 2 * sp.sqrt(a_ * b_)))
    A_, B_ = sp.symbols("A B", positive=True)
    h = 2 * A_ / sp.sqrt(alpha) + B_ * sp.sqrt(alpha)
    a_star = 2 * A_ / B_
    o5 = Step("O5 leading-order momentum", "identity", eq(sp.diff(h, alpha).subs(alpha, a_star), 0),
              r"$h(\alpha) = 2A/\sqrt{\alpha} + B\sqrt{\alpha}$ with $A = \sqrt{q \Delta L r "
              r"C/K}$, $B = \kappa C \rho \sigma$ (the terms of the bound at $\eta^*(\alpha)$ "
              r"that dominate for large $K$); $\alpha^* = 2A/B = "
              r"\frac{2}{\kappa\rho\sigma}\sqrt{q \Delta L r/(C K)}$")
    s_ = sp.Symbol("s", positive=True)
    hs = 2 * A_ / s_ + B_ * s_
    o6 = Step(r"O6 $h$ is convex in $\sqrt{\alpha}$", "monotonicity", ge(sp.diff(hs, s_, 2), 0),
              mono=(sp.diff(hs, s_), s_, 1, None))
    o7 = Step("O7 leading-order rate", "identity",
              eq(h.subs(alpha, a_star), 2 * sp.sqrt(2 * A_ * B_)),
              r"$\min h = 2\sqrt{2AB} = O(K^{-1/4})$")
    kappa = sp.sqrt(KAPPA2_NESTEROV if nesterov else KAPPA2_HEAVY)
    o8 = Step(r"O8 $\alpha^*$ in the parameters", "identity",
              eq(2 * A_ / B_, optimal_alpha_expr(nesterov)),
              model={A_: sp.sqrt(q * Delta * L * r * C / K), B_: kappa * C * rho * sigma})
    return [o1, o1b, o2, o3, o4, o5, o6, o7, o8]


def optimal_alpha_expr(nesterov: bool = False) -> sp.Expr:
    r"""α* = (2/(κρσ))·√(qΔ₀L r/(C K)): minimiser of the leading terms (clip to 1); κ² = 1/2
    (heavy ball: √(α/(2−α)) ≈ √(α/2)) or 3/2 (Nesterov)."""
    kappa = sp.sqrt(KAPPA2_NESTEROV if nesterov else KAPPA2_HEAVY)
    return 2 / (kappa * rho * sigma) * sp.sqrt(q * Delta * L * r / (C * K))


def _complexity_steps(nesterov: bool) -> list[Step]:
    steps: list[Step] = []
    if nesterov:
        nu = nesterov_noise_factor()
        p0a = Step("P0a Nesterov noise factor squared", "inequality",
                   le(nu**2, KAPPA2_NESTEROV * alpha),
                   r"$\nu_N^2 = \alpha\bigl((1-\alpha)^4 + \alpha(2-\alpha)^2\bigr) \le 3\alpha/2$")
        p0 = Step("P0 Nesterov noise factor", "monotonicity",
                  le(nu, sp.sqrt(KAPPA2_NESTEROV * alpha)),
                  mono=(sp.sqrt(_lmo._v), _lmo._v, 1, p0a))
        steps += [p0a, p0]
        steps.append(Step("P1 surrogate (Nesterov)", "inequality",
                          le(statement(True), surrogate(True)),
                          uses=((p0, C * rho * sigma),)))
    else:
        steps.append(Step("P1 surrogate", "inequality", le(statement(False), surrogate(False)),
                          r"drop the factors $(1-\alpha) \le 1$: the gap is "
                          r"$C E_0/K + C L \eta r$"))
    lag = C / alpha + C * tau + q * r / 2
    eta_eps = eps / (4 * L * r * lag)
    steps.append(Step(r"P2 lag group at $\eta_\varepsilon$", "identity",
                      eq(L * eta_eps * r * lag, eps / 4),
                      r"$\eta_\varepsilon = \varepsilon/\bigl(4 L r\,(C/\alpha + C \tau + q "
                      r"r/2)\bigr)$"))
    a0 = alpha0_expr(nesterov)
    noise = C * _noise_bar(nesterov) * rho * sigma
    if nesterov:
        at_a0 = noise.subs(alpha, a0)
    else:
        a0_small = eps**2 / (16 * C**2 * rho**2 * sigma**2)
        a_ = sp.Symbol("a_0", positive=True)
        steps.append(Step(r"P3a $\alpha_0/(2-\alpha_0) = a_0$", "identity",
                          eq((2 * a_ / (1 + a_)) / (2 - 2 * a_ / (1 + a_)), a_),
                          r"$\alpha_0 = 2a_0/(1+a_0)$ solves $\alpha/(2-\alpha) = a_0$"))
        at_a0 = C * sp.sqrt(a0_small) * rho * sigma
    steps.append(Step(r"P3 noise group at $\alpha_0$", "identity",
                      eq(at_a0, eps / 4),
                      (r"$\alpha_0 = \varepsilon^2/(16 \kappa^2 C^2 \rho^2 \sigma^2)$, $\kappa^2 = "
                       r"3/2$; " if nesterov else
                       r"$\alpha_0 = 2a_0/(1+a_0)$, $a_0 = \varepsilon^2/(16 C^2 \rho^2 \sigma^2)$ "
                       r"(solves $\alpha/(2-\alpha) = a_0$); ")
                      + r"$\alpha_\varepsilon = \min(1, \alpha_0)$"))
    steps.append(Step(r"P4 noise group increases with $\alpha$", "monotonicity",
                      ge(sp.diff(noise, alpha), 0), mono=(noise, alpha, 1, None)))
    K1 = 4 * q * Delta / (eps * eta)
    K2 = 4 * C * E0 / (alpha * eps)
    steps.append(Step(r"P5 $\Delta$ group at $K_1$", "identity",
                      eq((q * Delta / (eta * K)).subs(K, K1), eps / 4), "$K_1 = 4 q "
                                                                        r"\Delta/(\varepsilon "
                                                                        r"\eta)$"))
    steps.append(Step(r"P6 $\Delta$ group decreases in $K$", "monotonicity",
                      le(sp.diff(q * Delta / (eta * K), K), 0),
                      mono=(q * Delta / (eta * K), K, -1, None)))
    steps.append(Step("P7 $E_0$ group at $K_2$", "identity",
                      eq((C * E0 / (alpha * K)).subs(K, K2), eps / 4), r"$K_2 = 4 C E_0/(\alpha "
                                                                       r"\varepsilon)$"))
    steps.append(Step("P8 $E_0$ group decreases in $K$", "monotonicity",
                      le(sp.diff(C * E0 / (alpha * K), K), 0),
                      mono=(C * E0 / (alpha * K), K, -1, None)))
    steps.append(Step("P9 $K_1$ in closed form", "identity",
                      eq(K1.subs(eta, eta_eps), 16 * q * L * r * Delta * lag / eps**2)))
    if not nesterov:
        leading = (16 * q * L * r * Delta * C / a0 / eps**2).subs({eps1: 0, eps2: 0})
        steps.append(Step("P10 leading term is half Kovalev's", "identity",
                          eq(leading, 1024 * L * Delta * rho**2 * sigma**2 / eps**4
                             + 16 * L * Delta / eps**2),
                          r"exact LMO, $\alpha_\varepsilon = \alpha_0$: the $\varepsilon^{-4}$ "
                          r"term of $K(\varepsilon)$ is $1024 L \Delta \rho^2 "
                          r"\sigma^2/\varepsilon^4$, half Kovalev's 2048 (M13's exact fixed point "
                          r"$\alpha\sigma^2/(2-\alpha)$ instead of $\alpha\sigma^2$), plus "
                          r"$16 L\Delta/\varepsilon^2$"))
    # K₁ is affine in τ and in 1/α: each term is its derivative times the variable
    k1 = K1.subs(eta, eta_eps)
    inv_alpha = sp.Symbol("a_inv", positive=True)
    delay_term = sp.diff(k1, tau) * tau
    momentum_term = (sp.diff(k1.subs(alpha, 1 / inv_alpha), inv_alpha) * inv_alpha).subs(
        inv_alpha, 1 / alpha)
    steps.append(Step("P11 the delay is lower order", "identity",
                      eq(delay_term / momentum_term, alpha * tau),
                      r"the $\tau$-term of $K_1$ (P9) over its $1/\alpha$-term, both read off "
                      r"$K_1$, equals $\alpha\tau$"))
    return steps


def optimal_eta_expr(nesterov: bool = False) -> sp.Expr:
    r"""η*(α) = √(qΔ₀/(K·Lr(C(lag + τ) + qr/2))), the exact minimiser of the bound in η."""
    return sp.sqrt(q * Delta / (K * _lag_coefficient(nesterov)))


def complexity_expr(nesterov: bool = False) -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    r"""(α₀, :math:`\eta_\epsilon`, K₁, K₂): :math:`\alpha_\epsilon = \min(1, \alpha_0)`,
    :math:`\eta_\epsilon = \epsilon/(4Lr(C/\alpha_\epsilon + C\tau + qr/2))`,
    K(ε) = ⌈max(K₁, K₂)⌉ with
    :math:`K_1 = 16qLr\Delta_0(C/\alpha_\epsilon + C\tau + qr/2)/\epsilon^2`,
    :math:`K_2 = 4CE_0/(\alpha_\epsilon \epsilon)` (expressions in α; substitute
    :math:`\alpha = \alpha_\epsilon`)."""
    lag = C / alpha + C * tau + q * r / 2
    return (alpha0_expr(nesterov), eps / (4 * L * r * lag),
            16 * q * L * r * Delta * lag / eps**2, 4 * C * E0 / (alpha * eps))


def alpha0_expr(nesterov: bool = False) -> sp.Expr:
    """α₀ where the noise group of B̄ equals ε/4: heavy ball 2a₀/(1+a₀) with
    a₀ = ε²/(16C²ρ²σ²) (α₀/(2−α₀) = a₀); Nesterov ε²/(16κ²C²ρ²σ²), κ² = 3/2."""
    if nesterov:
        return eps**2 / (16 * KAPPA2_NESTEROV * C**2 * rho**2 * sigma**2)
    a0 = eps**2 / (16 * C**2 * rho**2 * sigma**2)
    return 2 * a0 / (1 + a0)


# --------------------------------------------------------------------------- tightness
def _tightness_steps() -> list[Step]:
    jj = sp.Symbol("j", integer=True, nonnegative=True)
    s1 = Step("TI1 half-period sum (lower)", "sum",
              eq(sp.Sum(jj + sp.Rational(1, 2), (jj, 0, tau)), (tau + 1)**2 / 2))
    s2 = Step("TI2 half-period sum (upper)", "sum",
              eq(sp.Sum(jj + sp.Rational(1, 2), (jj, 0, tau - 1)), tau**2 / 2))
    orbit = Step("TI3 periodic orbit", "reasoning",
                 eq(sp.Symbol(r"\overline{|y|}"), eta * tightness_average_expr()),
                 r"sign descent $y_{k+1} = y_k - \eta\,\operatorname{sign}(y_{k-\tau})$ from $y_0 "
                 r"= \eta/2$ (idle start) is the triangle wave between $-(\tau+\frac12)\eta$ and "
                 r"$(\tau+\frac12)\eta$, of period $2(2\tau+1)$ (proof in `tightness_instance`; "
                 r"exact check for $\tau \le 8$ in `verify/`); one period sums $|y|$ to "
                 r"$\eta(2\tau^2+2\tau+1)$ by TI1 + TI2")
    avg = tightness_average_expr()
    bnd = tightness_bound_expr(2 * (2 * tau + 1))
    s4 = Step(r"TI4 measured/bound $\ge 1/4$", "inequality", ge(L * eta * avg, L * eta * bnd / 4),
              "at $K$ = one period (and any multiple: the bound decreases in $K$)")
    tp = sp.Symbol("t", nonnegative=True)
    inc = (avg - sp.Rational(1, 2)).subs(tau, 1 + tp)
    s5 = Step("TI5 delay increment attained within 1/6", "inequality",
              ge(L * eta * inc, L * eta * 2 * (1 + tp) / 6),
              r"the measured increase over $\tau = 0$ is $L \eta \tau^2/(2\tau+1) \ge \frac16\, "
              r"2\tau L \eta$ for $\tau = 1 + t \ge 1$ (the ratio $\tau/(4\tau + 2) \to 1/4$)")
    return [s1, s2, orbit, s4, s5]


def tightness_average_expr() -> sp.Expr:
    r""":math:`(2\tau^2 + 2\tau + 1)/(2(2\tau+1))`: the average of :math:`|y_k|/\eta` over one
    period of the orbit."""
    return (2 * tau**2 + 2 * tau + 1) / (2 * (2 * tau + 1))


def tightness_bound_expr(K_value=K) -> sp.Expr:
    """T1 bound / (Lη) on the instance (σ = 0, α = 1, exact LMO, Δ₀ = Lη²/8), at K_value."""
    expr = statement(False).subs({alpha: 1, sigma: 0, eps1: 0, eps2: 0, Delta: L * eta**2 / 8})
    return sp.simplify(expr.subs(K, K_value) / (L * eta))


@cache
def result(nesterov: bool = False) -> Result:
    """The T1 :class:`~theory.assumptions.Result` (heavy-ball, or Nesterov)."""
    name = "T1-nesterov" if nesterov else "T1"
    return Result(
        name=name,
        title="LMO/Muon with " + ("Nesterov " if nesterov else "") + "EMA momentum under a "
              r"fixed gradient delay $\tau$ (inexact LMO)",
        quantity="(1/K) sum_{k<K} E||grad f(x_{k+tau})||_dual over the K applied steps "
                 "(also bounds E min_k)",
        quantity_latex=r"\frac1K\sum_{k<K}\mathbb{E}\|\nabla f(x_{k+\tau})\|_\dagger",
        statement=statement(nesterov),
        params=PARAMS,
        steps=_steps(nesterov),
        assumptions=("A0", "A1", "A2", "A3", "BAND", "INIT"),
        legend=dict(_lmo.LEGEND),
        notes="Nesterov covered by T1-nesterov; decoupled weight decay not covered.",
    )


# --------------------------------------------------------------------------- numerics
def _check(Delta, L, rho, sigma, eta, alpha, K, tau, eps1, eps2):
    for name, v, lo in (("Delta", Delta, 0), ("L", L, 0), ("rho", rho, 0),
                        ("sigma", sigma, 0), ("eps1", eps1, 0), ("eps2", eps2, 0)):
        if v is not None and np.any(np.asarray(v, dtype=float) < lo):
            raise ValueError(f"{name} must be >= {lo}, got {v!r}")
    if eta is not None and np.any(np.asarray(eta, dtype=float) <= 0):
        raise ValueError(f"eta must be > 0, got {eta!r}")
    if alpha is not None:
        a = np.asarray(alpha, dtype=float)
        if np.any(a <= 0) or np.any(a > 1):
            raise ValueError(f"alpha = 1 - beta must lie in (0, 1], got {alpha!r}")
    if K is not None and np.any(np.asarray(K, dtype=float) < 1):
        raise ValueError(f"K (number of applied steps) must be >= 1, got {K!r}")
    if tau is not None and np.any(np.asarray(tau, dtype=float) < 0):
        raise ValueError(f"tau must be a delay >= 0, got {tau!r}")
    if np.any(np.asarray(eps2, dtype=float) >= 1):
        raise ValueError(f"eps2 must be < 1 (the LMO must make progress), got {eps2!r}")


def initial_error_bound(Delta, L):
    r"""E₀ for the production zero momentum buffer: ‖∇f(x₀)‖† ≤ √(2LΔ₀) (step G3)."""
    return np.sqrt(2.0 * np.asarray(L, dtype=float) * np.asarray(Delta, dtype=float))


def bound(Delta, L, rho, sigma, eta, alpha, K, tau, eps1=0.0, eps2=0.0, E0=None,
          nesterov=False):
    r"""T1: upper bound on :math:`\frac1K\sum_{k<K}\mathbb{E}\|\nabla f(x_{k+\tau})\|_\dagger`
    (average over the K applied steps; it also bounds :math:`\mathbb{E}\min_k`), for LMO/Muon
    with EMA momentum α = 1 − β and delay τ:

    .. math::
        q\Big(\frac{\Delta_0}{\eta K} + \frac{L\eta r^2}{2}\Big)
        + C\Big(\frac{(1-\alpha)E_0}{\alpha K} + \sqrt{\frac{\alpha}{2-\alpha}}\,\rho\sigma
        + L\eta r\Big(\frac{1-\alpha}{\alpha} + \tau\Big)\Big),

    :math:`r = 1+\epsilon_1`, :math:`q = 1/(1-\epsilon_2)`,
    :math:`C = (2+\epsilon_1-\epsilon_2)/(1-\epsilon_2)`; Nesterov: :math:`1-\alpha` becomes
    :math:`(1-\alpha)^2` and :math:`\sqrt{\alpha/(2-\alpha)}` becomes :math:`\nu_N`.

    Assumptions A0–A3, BAND, INIT. ``E0=None`` uses the zero-buffer value √(2LΔ₀).
    Accepts numpy arrays (broadcast).
    """
    _check(Delta, L, rho, sigma, eta, alpha, K, tau, eps1, eps2)
    if E0 is None:
        E0 = initial_error_bound(Delta, L)
    return result(bool(nesterov)).numeric()(Delta, L, rho, sigma, eta, alpha, K, tau, eps1,
                                            eps2, E0)


def kovalev_bound(Delta, L, rho, sigma, eta, alpha, K):
    r"""Kovalev (2025) Thm 2, :math:`\mathbb{E}\min_k \|\nabla f\|_\dagger \le
    \Delta_0/(\eta K) + 2\rho\sigma/(\alpha K) + 2\sqrt{\alpha}\rho\sigma + 3L\eta/2
    + 2L\eta/\alpha`."""
    return (Delta / (eta * K) + 2 * rho * sigma / (alpha * K) + 2 * np.sqrt(alpha) * rho * sigma
            + 1.5 * L * eta + 2 * L * eta / alpha)


def optimal_eta(Delta, L, alpha, K, tau, eps1=0.0, eps2=0.0, nesterov=False):
    r"""Exact minimiser of the T1 bound in η for fixed α (steps O1–O4):
    η*(α) = √(qΔ₀/(K·Lr(C(lag + τ) + qr/2))), lag = (1−α)/α (Nesterov: (1−α)²/α)."""
    _check(Delta, L, 0, 0, 1.0, alpha, K, tau, eps1, eps2)
    r_ = 1 + eps1
    q_ = 1 / (1 - eps2)
    C_ = (2 + eps1 - eps2) / (1 - eps2)
    lag = (1 - alpha) ** 2 / alpha if nesterov else (1 - alpha) / alpha
    b = L * r_ * (C_ * (lag + tau) + q_ * r_ / 2)
    return np.sqrt(q_ * Delta / K / b)


def optimal_params(Delta, L, rho, sigma, K, tau, eps1=0.0, eps2=0.0, nesterov=False):
    r"""(η, α) for a budget of K applied steps: α = min(1, α*) with
    α* = (2/(κρσ))√(qΔ₀Lr/(CK)) (minimiser of the leading terms, steps O5–O7; κ = 1, or
    √(3/2) for Nesterov), and η = η*(α) the exact minimiser in η (steps O1–O4).
    The delay τ enters η only, through the lower-order term Cτ next to C(1−α)/α."""
    _check(Delta, L, rho, sigma, 1.0, None, K, tau, eps1, eps2)
    kappa = math.sqrt(1.5) if nesterov else math.sqrt(0.5)
    r_ = 1 + eps1
    q_ = 1 / (1 - eps2)
    C_ = (2 + eps1 - eps2) / (1 - eps2)
    if rho * sigma == 0:
        a = 1.0
    else:
        a = min(1.0, 2.0 / (kappa * rho * sigma) * math.sqrt(q_ * Delta * L * r_ / (C_ * K)))
    return float(optimal_eta(Delta, L, a, K, tau, eps1, eps2, nesterov)), a


def complexity(epsilon, Delta, L, rho, sigma, tau, eps1=0.0, eps2=0.0, E0=None,
               nesterov=False):
    r"""Iteration complexity (steps P1–P11): with :math:`\alpha_\epsilon = \min(1, \alpha_0)`,
    α₀ = 2a₀/(1+a₀), a₀ = ε²/(16C²ρ²σ²) (Nesterov: α₀ = ε²/(24C²ρ²σ²)),
    :math:`\eta_\epsilon = \epsilon/(4Lr(C/\alpha_\epsilon + C\tau + qr/2))` and

    .. math::
        K(\epsilon) = \Big\lceil\max\Big(\frac{16 q L r \Delta_0 (C/\alpha_\epsilon + C\tau
        + qr/2)}{\epsilon^2}, \frac{4 C E_0}{\alpha_\epsilon \epsilon}\Big)\Big\rceil

    the T1 bound is ≤ ε. Exact LMO, large σ: K = 1024LΔ₀ρ²σ²/ε⁴ + 16LΔ₀(2τ + 3/2)/ε² + ...
    (half Kovalev's leading constant 2048: step M13 uses the exact fixed point ασ²/(2−α));
    τ enters only the ε⁻² term (relative size :math:`\alpha_\epsilon \tau`).
    Returns a dict with K, eta, alpha (K counts applied steps; the run has K + τ steps)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    _check(Delta, L, rho, sigma, 1.0, None, None, tau, eps1, eps2)
    if E0 is None:
        E0 = float(initial_error_bound(Delta, L))
    r_ = 1 + eps1
    q_ = 1 / (1 - eps2)
    C_ = (2 + eps1 - eps2) / (1 - eps2)
    if rho * sigma == 0:
        a = 1.0
    elif nesterov:
        a = min(1.0, epsilon**2 / (16 * 1.5 * C_**2 * (rho * sigma)**2))
    else:
        a0 = epsilon**2 / (16 * C_**2 * (rho * sigma)**2)
        a = min(1.0, 2 * a0 / (1 + a0))
    lag = C_ / a + C_ * tau + q_ * r_ / 2
    e = epsilon / (4 * L * r_ * lag)
    K1 = 4 * q_ * Delta / (epsilon * e)
    K2 = 4 * C_ * E0 / (a * epsilon)
    return {"K": int(math.ceil(max(K1, K2, 1.0))), "eta": e, "alpha": a}


def tightness_instance(L=1.0, eta=0.1, tau=1, periods=1):
    r"""A 1-D instance on which the T1 delay term is attained up to the constant 1/4.

    :math:`f(x) = L x^2/2` on R with the norm :math:`|\cdot|` (self-dual, ρ = 1), deterministic
    gradients (σ = 0), no momentum (α = 1, β = 0) and the exact LMO d = sign(·). A 1×1 Muon
    step is s₀·sign(·),
    s₀ = p⁵(1) ≈ 0.6964 the Newton–Schulz output for a 1×1 input (default coefficients), so
    production ``Muon(lr, momentum=0)`` under ``DelayedOptimizer(delay=τ)`` follows this orbit
    exactly with η = s₀·lr (checked in verify/test_theory_lmo.py).
    Start x₀ = η/2, so Δ₀ = Lη²/8. With delay τ and the idle start, the applied iterates
    :math:`y_k = x_{k+\tau}` follow the triangle wave between −(τ+½)η and (τ+½)η: from y₀ = η/2
    the first τ+1 steps see x₀ > 0 and go down to −(τ+½)η; afterwards the sign seen at step k
    is that of :math:`y_{k-\tau}`, which stays negative for 2τ+1 steps (up to (τ+½)η), then positive
    for 2τ+1 steps, and so on: period P = 2(2τ+1), and y₀..y_τ are already on the orbit.
    Over any whole number of periods the average of :math:`|\nabla f(y_k)| = L|y_k|` is exactly

    .. math::
        \mathrm{measured} = \frac{L\eta(2\tau^2 + 2\tau + 1)}{2(2\tau+1)},

    while the T1 bound at K = m·P is Lη(1/(8K) + 1/2 + 2τ). Hence measured/bound ≥ 1/4 for
    every τ ≥ 0 (step TI4; → 1/4 as τ → ∞, = 8/9 at τ = 0), and the delay increment
    measured(τ) − measured(0) = Lητ²/(2τ+1) is ≥ 1/6 of the bound's delay term 2τLη
    (step TI5; → 1/4).

    Returns a dict: x0, L, eta, tau, alpha, beta, sigma, rho, Delta, K (= periods·P),
    period, measured (exact average over K applied steps), bound (T1 at these values),
    ratio, ratio_lower (1/4), delay_ratio_lower (1/6, for τ ≥ 1), orbit
    (:math:`y_0, \dots, y_{P-1}`).
    """
    if not (isinstance(tau, (int, np.integer)) and tau >= 0):
        raise ValueError(f"tau must be an integer >= 0, got {tau!r}")
    if not (isinstance(periods, (int, np.integer)) and periods >= 1):
        raise ValueError(f"periods must be an integer >= 1, got {periods!r}")
    if not (L > 0 and eta > 0):
        raise ValueError(f"L and eta must be > 0, got L={L!r}, eta={eta!r}")
    P = 2 * (2 * tau + 1)
    Kk = periods * P
    orbit = tightness_orbit(eta, tau)
    measured = L * float(np.mean(np.abs(orbit)))
    delta0 = L * eta**2 / 8
    b = float(bound(delta0, L, 1.0, 0.0, eta, 1.0, Kk, tau))
    return {"x0": eta / 2, "L": L, "eta": eta, "tau": tau, "alpha": 1.0, "beta": 0.0,
            "sigma": 0.0, "rho": 1.0, "Delta": delta0, "K": Kk, "period": P,
            "measured": measured, "bound": b, "ratio": measured / b, "ratio_lower": 0.25,
            "delay_ratio_lower": 1 / 6, "orbit": orbit}


def tightness_orbit(eta, tau):
    r""":math:`y_0, \dots, y_{P-1}` of the instance (P = 2(2τ+1)): :math:`y_k = Y((k + \tau)
    \bmod P)`, where Y starts at the top (τ+½)η, goes down 2τ+1 steps, then up 2τ+1 steps."""
    P = 2 * (2 * tau + 1)
    top = (tau + 0.5) * eta
    Y = [top - i * eta for i in range(2 * tau + 1)] + \
        [-top + i * eta for i in range(2 * tau + 1)]
    return np.array([Y[(kk + tau) % P] for kk in range(P)], dtype=float)


__all__ = ["PARAMS", "statement", "kovalev_statement", "surrogate", "result", "bound",
           "kovalev_bound", "initial_error_bound", "optimal_eta", "optimal_params",
           "optimal_alpha_expr", "optimal_eta_expr", "complexity", "complexity_expr",
           "alpha0_expr", "tightness_instance",
           "tightness_orbit", "tightness_average_expr", "tightness_bound_expr", "E0"]
