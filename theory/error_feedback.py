r"""T2 — delayed LMO/Muon with update-level Error Feedback (EF).

**Method (what the production code runs).** ``DelayedOptimizer(Muon(...), delay=τ,
correction="ef")``, ``formulation="gradient"``, :math:`\tau \ge 1`. Index by applied steps,
:math:`y_k = x_{k+\tau}` (the :math:`\tau` idle start steps do not move :math:`x`). The update
applied at step :math:`k` is :math:`u_k = \eta d_k`, :math:`d_k = \mathrm{lmo}(v_k)`, where
:math:`v_k` is the EMA momentum (or its Nesterov combination) after consuming
:math:`g(z_k)`, :math:`z_k = y_{k-\tau}` (:math:`y_j = y_0` for :math:`j < 0`). EF applies

.. math::  y_{k+1} = y_k - 2u_k + u_{k-1},\qquad u_{-1} = 0

(for :math:`\tau = 1` this is :math:`x_{t+1} = x_t - 2u_{t-1} + u_{t-2}` in the time index of
the trainer).

**Virtual sequence.** :math:`w_k := y_k + u_{k-1}` satisfies :math:`w_{k+1} = w_k - u_k`
(step V1): the EF run is an *undelayed* LMO run on :math:`w`, whose gradients are taken at
:math:`z_k = w_k - o_k` with the offset (steps V2–V5)

.. math::  o_k = w_k - z_k = -(u_{k-1} - u_{k-\tau-1}) - \sum_{j=k-\tau}^{k-2} u_j .

For :math:`\tau = 1`, :math:`o_k = -(u_{k-1} - u_{k-2})`: the delay penalty is the *drift* of
consecutive updates, not their size. (The design's virtual point
:math:`\tilde w_t = x_t - (u_{t-1} - u_{t-2})` is :math:`w_{k+1}`, step V1b.)

**Theorem (T2).** Under A0–A3, BAND, INIT, with the drift
:math:`\delta := \frac1K \sum_{k<K} \mathbb{E}\|u_{k-1} - u_{k-\tau-1}\|/\eta`
(:math:`\le 2(1+\epsilon_1)` always),

.. math::
    \frac1K\sum_{k<K}\mathbb{E}\|\nabla f(w_k)\|_\dagger
    &\le q\Big(\frac{\Delta_0}{\eta K} + \frac{L\eta r^2}{2}\Big)
    + C\Big(\frac{(1-\alpha)E_0}{\alpha K} + \sqrt{\alpha/(2-\alpha)}\,\rho\sigma\\
    &\qquad + L\eta r\frac{1-\alpha}{\alpha} + L\eta\big(\delta + (\tau-1)r\big)\Big)

(virtual point), and the same plus :math:`L\eta r` for
:math:`\frac1K\sum_k \mathbb{E}\|\nabla f(y_k)\|_\dagger`, the average at the real iterates
:math:`x_{k+\tau}` (step X2). Nesterov as in T1. Worst case (:math:`\delta = 2r`): the delay
term is :math:`C L\eta r(\tau+1)`, one :math:`C L\eta r` more than T1's
:math:`C L\eta r\tau`; EF's bound is the lower one when the drift is small (consecutive
updates similar). These are comparisons of
*upper bounds*, not of the runs. The comparison at a common point — the iterates
:math:`x_{k+\tau}` of both runs — is step X6: EF's bound is below T1's iff
:math:`C\delta < r(C-1)` (:math:`\delta < r/2` for the exact LMO). "EF's virtual-point bound is
below T1's iff :math:`\delta < r`" (step X5b) compares the gradient at :math:`w_k` (EF) with the
gradient at :math:`x_{k+\tau}` (no EF): two different points, so it says nothing about which
run is better at the same point. :math:`\delta` is the *spectral* drift (per matrix); the
relative Frobenius ratio :math:`\bar\rho` that ``asyncpp.delay.drift.DriftMeter`` reports is a
different statistic (it can understate :math:`\delta` by up to :math:`\sqrt{\mathrm{rank}}`;
see that module).

For ``verify/``: :math:`w_k = x_{k+\tau} + u_{k-1}`, where :math:`u_{k-1}` is the last applied
update (``DelayedOptimizer.prev_update``); for :math:`\tau = 1`,
:math:`\delta K\eta = \sum_{j=0}^{K-2} \|u_j - u_{j-1}\|`, the sum of the first :math:`K-1`
recorded ``drift_norm`` values of ``track_updates=True`` (the first is :math:`\|u_0\|`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from . import _lmo
from ._lmo import N, descent_steps, final_steps, momentum_steps, nesterov_noise_factor, summ
from .assumptions import (
    E0,
    C,
    Delta,
    K,
    L,
    Result,
    Step,
    alpha,
    drift,
    eps1,
    eps2,
    eq,
    eta,
    ge,
    j,
    k,
    le,
    q,
    r,
    rho,
    sigma,
    tau,
)
from .delayed_lmo import _check
from .delayed_lmo import statement as t1_statement

w = 1 - alpha
PARAMS = (Delta, L, rho, sigma, eta, alpha, K, tau, drift, eps1, eps2, E0)

Y = sp.Function("y")
U = sp.Function("u")
O = sp.Function(r"\mathbb{E}\|o\|", nonnegative=True)
Dr = sp.Function(r"\mathbb{E}\delta", nonnegative=True)
un = sp.Function(r"\|u\|", nonnegative=True)


def statement(point: str = "virtual", nesterov: bool = False) -> sp.Expr:
    r"""The T2 bound over ``PARAMS`` (``drift`` symbolic; worst case: drift = 2(1+ε₁)).
    ``point="virtual"`` bounds the average at :math:`w_k`, ``"iterate"`` at :math:`x_{k+\tau}`
    (adds Lηr)."""
    if nesterov:
        init, noise, lag = w**2, nesterov_noise_factor(), w**2 / alpha
    else:
        init, noise, lag = w, _lmo.heavy_noise_factor(), w / alpha
    b = q * (Delta / (eta * K) + L * eta * r**2 / 2) + C * (
        init * E0 / (alpha * K) + noise * rho * sigma + L * eta * r * lag
        + L * eta * (drift + (tau - 1) * r))
    if point == "iterate":
        return b + L * eta * r
    if point == "virtual":
        return b
    raise ValueError(f"point must be 'virtual' or 'iterate', got {point!r}")


def _virtual_steps() -> list[Step]:
    ef = Step("MODEL EF recursion (production)", "assumption",
              eq(Y(k + 1), Y(k) - 2 * U(k) + U(k - 1)),
              "production EF on applied steps: $y_{k+1} = y_k - 2u_k + u_{k-1}$, $u_{-1} = 0$, "
              r"$u_k = \eta\,\operatorname{lmo}(v_k)$ (zero for $k < 0$: the idle start); pinned "
              "to production Muon + DelayedOptimizer and to the executor's stages by the exact "
              r"identities I1, I2 and P6.ef of verify/ (residual / step $\le 10^{-9}$)")
    v1 = Step("V1 virtual sequence", "identity",
              eq(Y(k + 1) + U(k), (Y(k) + U(k - 1)) - U(k)),
              "$w_k := y_k + u_{k-1}$ gives $w_{k+1} = w_k - u_k$", rewrites=(ef,))
    v1b = Step("V1b the design's virtual point", "identity",
               eq(Y(k) - (U(k) - U(k - 1)), Y(k + 1) + U(k)),
               r"the virtual point $\tilde w = x - (u_{t-1} - u_{t-2})$ of the Error Feedback "
               "design is $w_{k+1}$", rewrites=(ef,))
    v2 = Step("V2 delay telescoping", "sum",
              eq(sp.Sum(-2 * U(j) + U(j - 1), (j, k - tau, k - 1)), Y(k) - Y(k - tau)),
              r"$y_k - y_{k-\tau}$ is the sum of the $\tau$ EF steps before $k$ (induction on "
              r"$\tau$)",
              induction_var=tau, rewrites=((ef, {k: k - tau}),))
    v3 = Step("V3 collect the updates", "sum",
              eq(sp.Sum(-2 * U(j) + U(j - 1), (j, k - tau, k - 1)),
                 -sp.Sum(U(j), (j, k - tau, k - 1)) - U(k - 1) + U(k - tau - 1)),
              induction_var=tau)
    v4 = Step("V4 peel the newest update", "sum",
              eq(sp.Sum(U(j), (j, k - tau, k - 1)),
                 sp.Sum(U(j), (j, k - tau, k - 2)) + U(k - 1)), induction_var=tau)
    v5 = Step("V5 offset", "identity",
              eq(sp.Sum(-2 * U(j) + U(j - 1), (j, k - tau, k - 1)) + U(k - 1),
                 -(U(k - 1) - U(k - tau - 1)) - sp.Sum(U(j), (j, k - tau, k - 2))),
              r"$o_k = w_k - z_k = (y_k - y_{k-\tau}) + u_{k-1}$ (V2) $= -(u_{k-1} - u_{k-\tau-1}) "
              r"- \sum_{j=k-\tau}^{k-2} u_j$", rewrites=(v3, v4))
    v6 = Step("V6 offset norm", "reasoning",
              le(O(k), eta * Dr(k) + (tau - 1) * eta * r),
              r"triangle inequality on V5 and BAND ($\|u_j\| \le \eta(1+\epsilon_1)$); $\delta_k "
              r":= \|u_{k-1} - u_{k-\tau-1}\|/\eta$; then expectation", refs=("BAND",))
    v7 = Step("V7 drift (definition)", "definition", eq(summ(Dr(k)), K * drift),
              r"$\delta := \frac{1}{K}\sum_{k<K} \mathbb{E}\,\delta_k$ (the drift)",
              model={drift: summ(Dr(k)) / K})
    v8 = Step("V8 summed offset", "inequality",
              le(summ(O(k)), K * eta * (drift + (tau - 1) * r)),
              uses=((v6, 1, (k, 0, K - 1)),), rewrites=(v7,))
    return [ef, v1, v1b, v2, v3, v4, v5, v6, v7, v8]


def _steps(nesterov: bool) -> list[Step]:
    steps = _virtual_steps()
    v8 = steps[-1]
    d, desc = descent_steps()
    steps += d
    m, mom, total = momentum_steps(
        L * O(k),
        r"A2: $\|\nabla f(z_k) - \nabla f(w_k)\|_\dagger \le L \|o_k\|$; then expectation",
        nesterov)
    steps += m
    total2 = total.subs(summ(O(k)), K * eta * (drift + (tau - 1) * r))
    m_ef = Step("E1 input error with the EF offset", "inequality", le(summ(_lmo.R(k)), total2),
                uses=((mom, 1), (v8, L)))
    steps.append(m_ef)
    bv = statement("virtual", nesterov)
    f1, f2 = final_steps(desc, m_ef, total2, bv)
    Ny = sp.Function(r"\mathbb{E}\|\nabla f(y)\|", nonnegative=True)
    x1 = Step("X1 back to the iterate", "reasoning", le(Ny(k), N(k) + L * eta * r),
              r"A2: $\|\nabla f(y_k) - \nabla f(w_k)\|_\dagger \le L \|u_{k-1}\| \le L \eta "
              r"(1+\epsilon_1)$",
              refs=("A2", "BAND"))
    x2 = Step("X2 average at the iterate", "inequality",
              le(summ(Ny(k)) / K, statement("iterate", nesterov)),
              uses=((x1, 1 / K, (k, 0, K - 1)), (f2, 1)))
    steps += [f1, f2, x1, x2]
    steps.append(Step("X3 worst case drift", "reasoning", le(drift, 2 * r),
                      r"$\|u_{k-1} - u_{k-\tau-1}\| \le 2 \eta (1+\epsilon_1)$ (triangle "
                      "inequality, BAND)",
                      refs=("BAND",)))
    steps.append(Step("X4 bound increases with drift", "monotonicity",
                      ge(sp.diff(bv, drift), 0), mono=(bv, drift, 1, None)))
    if not nesterov:
        steps.append(Step("X5 EF's worst-case bound vs T1's bound", "identity",
                          eq(bv.subs(drift, 2 * r) - t1_statement(False), C * L * eta * r),
                          r"worst case: EF's upper bound is one $C L \eta r$ above T1's (offset "
                          r"$2 \eta r$ against $\eta r$); a comparison of upper bounds, not of "
                          r"the runs"))
        steps.append(Step("X5b virtual-point bound vs T1 (different points)", "identity",
                          eq(bv - t1_statement(False), C * L * eta * (drift - r)),
                          r"EF's upper bound at $w_k$ minus T1's at $x_{k+\tau}$: negative iff "
                          r"$\delta < r$ (upper bounds, at two different points)"))
        bi = statement("iterate", False)
        steps.append(Step("X6 EF's bound vs T1's bound at the iterate (common point)",
                          "identity",
                          eq(bi - t1_statement(False), L * eta * (C * drift - r * (C - 1))),
                          r"both upper bounds at the iterates $x_{k+\tau}$: EF's is below T1's "
                          r"iff $C\delta < r(C-1)$, i.e. $\delta < r/2$ for the exact LMO "
                          r"($C = 2$); which run is better is not decided by two upper bounds"))
    return steps


@cache
def result(nesterov: bool = False) -> Result:
    """The T2 :class:`~theory.assumptions.Result` (virtual-point statement; X2 gives the
    iterate version)."""
    return Result(
        name="T2-nesterov" if nesterov else "T2",
        title="delayed LMO/Muon with Error Feedback, worst-case and data-dependent (drift)",
        quantity="(1/K) sum_{k<K} E||grad f(w_k)||_dual, w_k = x_{k+tau} + u_{k-1} (virtual "
                 "point); +L eta (1+eps1) for the iterates x_{k+tau} (step X2)",
        quantity_latex=r"\frac1K\sum_{k<K}\mathbb{E}\|\nabla f(w_k)\|_\dagger",
        statement=statement("virtual", nesterov),
        params=PARAMS,
        steps=_steps(nesterov),
        assumptions=("A0", "A1", "A2", "A3", "BAND", "INIT"),
        legend={**_lmo.LEGEND, O(k): r"$\mathbb{E}$ of the offset norm $\|w_k - z_k\|$",
                drift: r"$\operatorname{mean}_k \mathbb{E}\|u_{k-1} - u_{k-\tau-1}\|/\eta$"},
        notes="Requires tau >= 1 (EF is not applied to synchronous steps).",
    )


@cache
def _iterate_numeric(nesterov: bool):
    return sp.lambdify(PARAMS, statement("iterate", nesterov), "numpy")


def bound(Delta, L, rho, sigma, eta, alpha, K, tau=1, drift=None, eps1=0.0, eps2=0.0,
          E0=None, point="iterate", nesterov=False):
    r"""T2: bound on the average stationarity of the EF run over K applied steps.

    .. math::
        q\Big(\frac{\Delta_0}{\eta K} + \frac{L\eta r^2}{2}\Big)
        + C\Big(\frac{(1-\alpha)E_0}{\alpha K} + \sqrt{\frac{\alpha}{2-\alpha}}\,\rho\sigma

        + L\eta r\frac{1-\alpha}{\alpha} + L\eta(\mathrm{drift} + (\tau-1)r)\Big)

    [+ Lηr when ``point="iterate"``], :math:`r = 1+\epsilon_1`, :math:`q = 1/(1-\epsilon_2)`,
    :math:`C = (2+\epsilon_1-\epsilon_2)/(1-\epsilon_2)`.

    ``point="iterate"`` (default) bounds
    :math:`\frac1K\sum_{k<K}\mathbb{E}\|\nabla f(x_{k+\tau})\|_\dagger`; ``"virtual"``
    bounds :math:`\frac1K\sum\mathbb{E}\|\nabla f(w_k)\|_\dagger` with
    :math:`w_k = x_{k+\tau} + u_{k-1}`. ``drift=None`` is the worst case 2(1+ε₁); a measured
    drift is :math:`\frac{1}{K\eta}\sum_{k<K}\|u_{k-1} - u_{k-\tau-1}\|` (:math:`u_j = 0`
    for j < 0).
    ``E0=None`` uses √(2LΔ₀) (zero momentum buffer). Assumptions A0–A3, BAND, INIT; τ ≥ 1.
    """
    _check(Delta, L, rho, sigma, eta, alpha, K, tau, eps1, eps2)
    if np.any(np.asarray(tau, dtype=float) < 1):
        raise ValueError(f"EF needs a delay tau >= 1 (synchronous steps are not corrected), "
                         f"got tau={tau!r}")
    if point not in ("virtual", "iterate"):
        raise ValueError(f"point must be 'virtual' or 'iterate', got {point!r}")
    if drift is None:
        drift = 2.0 * (1.0 + np.asarray(eps1, dtype=float))
    elif np.any(np.asarray(drift, dtype=float) < 0):
        raise ValueError(f"drift is a mean norm ratio, must be >= 0, got {drift!r}")
    if E0 is None:
        E0 = np.sqrt(2.0 * np.asarray(L, dtype=float) * np.asarray(Delta, dtype=float))
    fn = result(bool(nesterov)).numeric() if point == "virtual" else \
        _iterate_numeric(bool(nesterov))
    return fn(Delta, L, rho, sigma, eta, alpha, K, tau, drift, eps1, eps2, E0)


def measured_drift(updates, eta, tau=1):
    r""":math:`\mathrm{drift} = \frac{1}{K\eta}\sum_{k<K}\|u_{k-1} - u_{k-\tau-1}\|` from the K
    applied updates ``updates[0..K−1]`` (arrays; :math:`u_j = 0` for j < 0). The norm is the
    Euclidean (Frobenius) norm of the flattened difference, an upper bound on the spectral norm,
    so the resulting bound stays valid for Muon."""
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta!r}")
    ups = [np.asarray(u, dtype=float) for u in updates]
    Kk = len(ups)
    if Kk == 0:
        raise ValueError("measured_drift needs at least one update")
    zero = np.zeros_like(ups[0])

    def u(i):
        return ups[i] if i >= 0 else zero

    total = sum(float(np.linalg.norm((u(kk - 1) - u(kk - tau - 1)).ravel()))
                for kk in range(Kk))
    return total / (Kk * eta)


__all__ = ["PARAMS", "statement", "result", "bound", "measured_drift"]
