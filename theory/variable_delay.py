r"""T4 — per-block (per-stage) delays: original PipeDream vs PipeDream-2BW.

**Method.** The parameters split into blocks :math:`s = 0, \dots, P-1` (pipeline stages; each a
set of whole matrices), with the product norm :math:`\|x\| = \max_s \|x_s\|` (dual
:math:`\sum_s \|g_s\|_\dagger`; Muon's per-matrix polar factor is the LMO of this ball).
``DelayedOptimizer(opt, delay=[τ_0, …, τ_{P−1}])`` (``formulation="gradient"``): block
:math:`s` is idle for :math:`t < \tau_s`, then consumes :math:`\nabla_s f` at
:math:`x_{t-\tau_s}`:

.. math::
    m_{s,t} &= (1-\alpha)\, m_{s,t-1} + \alpha\, g_s(x_{t-\tau_s}),\qquad m_{s,\tau_s-1} = 0,\\
    x_{s,t+1} &= x_{s,t} - \eta\,\mathrm{lmo}_s(v_{s,t}).

Original PipeDream: :math:`\tau_s = P-1-s` (:math:`\tau_{\max} = P-1`, :math:`\tau_{\min} = 0`);
PipeDream-2BW: :math:`\tau_s = 1`.

**Theorem (T4).** Under A0, A1 (block variances :math:`\sigma_s^2` with
:math:`\sum_s\sigma_s^2 \le \sigma^2`), A2b (block smoothness :math:`L_s`,
:math:`\sum_s L_s = L`), A3 (block :math:`\rho_s`, :math:`\rho = \sqrt{\sum_s\rho_s^2}`), BAND,
INIT, with :math:`\Delta\tau = \tau_{\max} - \tau_{\min}`,
:math:`\tau_{\mathrm{eff}} = \sum_s L_s \tau_s / L` (:math:`\le \tau_{\max}`) and :math:`K`
steps after all blocks are active,

.. math::
    \frac1K\sum_{t=\tau_{\max}}^{\tau_{\max}+K-1}\mathbb{E}\|\nabla f(x_t)\|_\dagger
    &\le q\Big(\frac{\Delta_0}{\eta K} + \big(1+\tfrac{\Delta\tau}{K}\big)
    \frac{L\eta r^2}{2}\Big)\\
    &\quad + C\Big(\big(1+\tfrac{\Delta\tau}{K}\big)\Big(\sqrt\alpha\rho\sigma
    + L\eta r\big(\tfrac{1-\alpha}{\alpha} + \tau_{\mathrm{eff}}\big)\Big)\\
    &\qquad + \frac{(1-\alpha)(E_0 + L\eta r(\tau_{\mathrm{eff}} - \tau_{\min}))}{\alpha K}\Big).

Uniform delays reduce it to T1 (step W8). The delay term of the bound is
:math:`C L\eta r\,\tau_{\mathrm{eff}}`: 2BW's bound carries :math:`\tau = 1` at every depth;
PipeDream's carries :math:`\tau_{\mathrm{eff}} = (P-1)/2` for equal block smoothness and up to
:math:`\tau_{\max} = P-1` (when the early stages dominate :math:`L`), i.e. it grows linearly
with depth (step W12), and from P = 3 it exceeds 2BW's (step W13c). These compare *upper
bounds*: they say why depth raises PipeDream's guarantee and not 2BW's, not that a PipeDream
run loses more than a 2BW run (that is measured, not bounded). Without knowledge of the
:math:`L_s`, use :math:`\tau_{\mathrm{eff}} = \tau_{\max}` (valid for any split, step W10).
Nesterov: as in T1.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from . import _lmo
from ._lmo import momentum_steps, nesterov_noise_factor, summ
from .assumptions import (
    DOMAIN,
    E0,
    C,
    Delta,
    K,
    L,
    Result,
    Step,
    TexSymbol,
    alpha,
    eps1,
    eps2,
    eq,
    eta,
    ge,
    k,
    le,
    q,
    r,
    rename_steps,
    rho,
    sigma,
    tau,
)
from .delayed_lmo import _check
from .delayed_lmo import statement as t1_statement

w = 1 - alpha
tau_max = sp.Symbol("tau_max", nonnegative=True)
tau_min = sp.Symbol("tau_min", nonnegative=True)
tau_eff = sp.Symbol("tau_eff", nonnegative=True)
Pn = sp.Symbol("P", positive=True, integer=True)
s = sp.Symbol("s", integer=True, nonnegative=True)
PARAMS = (Delta, L, rho, sigma, eta, alpha, K, tau_max, tau_min, tau_eff, eps1, eps2, E0)
_dtau = sp.Symbol("Delta_tau", nonnegative=True)
_pp = sp.Symbol("P_minus_1", nonnegative=True)
#: DOMAIN plus tau_max = tau_min + Δτ (Δτ ≥ 0) and P = 1 + (P−1)
DOMAIN_T4 = {**DOMAIN, tau_max: tau_min + _dtau, Pn: 1 + _pp}

# one generic block b (symbols), then per-block functions of s
n_b = sp.Symbol("n_b", positive=True, integer=True)
L_b = sp.Symbol("L_b", positive=True)
rho_b = sp.Symbol("rho_b", positive=True)
sigma_b = sp.Symbol("sigma_b", positive=True)
G_b = sp.Symbol("G_b", nonnegative=True)
tau_b = sp.Symbol("tau_b", nonnegative=True)
ns = sp.Function("n", positive=True)
Ls = sp.Function("L", positive=True)
RSs = sp.Function(r"\rho\sigma", nonnegative=True)
Gs = sp.Function("G", nonnegative=True)
gs = sp.Function("g", nonnegative=True)
taus = sp.Function(r"\tau", nonnegative=True)
SR = sp.Function(r"\Sigma\mathbb{E}\|e\|", nonnegative=True)


def _factors(nesterov: bool):
    if nesterov:
        return w**2, nesterov_noise_factor(), w**2 / alpha
    return w, _lmo.heavy_noise_factor(), w / alpha


def statement(nesterov: bool = False) -> sp.Expr:
    r"""The T4 bound over ``PARAMS`` (:math:`\tau_{\max}, \tau_{\min}, \tau_{\mathrm{eff}}` as
    symbols)."""
    init, noise, lag = _factors(nesterov)
    dt = 1 + (tau_max - tau_min) / K
    return q * (Delta / (eta * K) + dt * L * eta * r**2 / 2) + C * (
        dt * (noise * rho * sigma + L * eta * r * (lag + tau_eff))
        + init * (E0 + L * eta * r * (tau_eff - tau_min)) / (alpha * K))


def _steps(nesterov: bool) -> list[Step]:
    init, noise, lag = _factors(nesterov)
    steps: list[Step] = [
        Step("MODEL per-block delays", "assumption", le(tau_min, taus(s)),
             r"production: block $s$ is idle for $t < \tau_s$, then consumes $\nabla_s f$ at "
             r"$x_{t-\tau_s}$; $\tau_{\min} \le \tau_s \le \tau_{\max}$ (pinned to the "
             r"multi-process executor by P6.model and P6.orbit of verify/)", refs=("BAND",)),
        Step(r"MODEL' $\tau_s \le \tau_{\max}$", "assumption", le(taus(s), tau_max)),
        Step("W0 product norm", "reasoning", eq(TexSymbol(r"\|x\|"), TexSymbol(r"\max_s\|x_s\|")),
             "the LMO of the max-norm ball is blockwise (Muon per matrix); one step moves every "
             r"block by at most $\eta(1+\epsilon_1)$, so $\|x_t - x_{t-\tau_s}\| \le \tau_s \eta "
             r"(1+\epsilon_1)$",
             refs=("A2b",)),
    ]
    # the momentum lemma for one generic block b (K -> n_b, L -> L_b, ...)
    mom, last, total = momentum_steps(
        L * tau * eta * r,
        r"A2b: $\|\nabla_b f(x_{t-\tau_b}) - \nabla_b f(x_t)\| \le L_b \tau_b \eta "
        r"(1+\epsilon_1)$", nesterov,
        delay_refs=("A2b",))
    mapping = {K: n_b, L: L_b, rho: rho_b, sigma: sigma_b, E0: G_b, tau: tau_b}
    block = rename_steps(mom, mapping, "block: ")
    steps += block
    blast = block[-1]
    sumR = summ(_lmo.R(k)).xreplace({K: n_b})
    inst = {n_b: ns(s), L_b: Ls(s), rho_b * sigma_b: RSs(s), G_b: Gs(s), tau_b: taus(s),
            sumR: SR(s)}
    per_block = sp.expand(total.xreplace(mapping).subs(inst))
    w1 = Step("W1 block s", "inequality", le(SR(s), per_block),
              "the block lemma instantiated for block $s$ (its $n_s$ applied steps, $L_s$, "
              r"$\rho_s \sigma_s$, initial error $G_s$, delay $\tau_s$)",
              uses=((blast, 1, inst),))
    w2 = Step("W2 block initial error", "reasoning",
              le(Gs(s), gs(s) + Ls(s) * (taus(s) - tau_min) * eta * r),
              r"block $s$ starts at $x_{\tau_s - 1}$, at most $\tau_s - \tau_{\min}$ moving steps "
              r"from $x_0$; A2b; $g_s = \mathbb{E}\|m_{s,-1} - \nabla_s f(x_0)\|$",
              refs=("A2b", "INIT"))
    w3a = Step("W3a applied steps of block s", "reasoning", eq(ns(s), K + tau_max - taus(s)),
               r"the run has $\tau_{\max} + K$ steps; block $s$ applies from $t = \tau_s$")
    w3 = Step(r"W3 $n_s \le K + \tau_{\max} - \tau_{\min}$", "inequality",
              le(ns(s), K + tau_max - tau_min), uses=((steps[0], 1),), rewrites=(w3a,))
    Psum = (s, 0, Pn - 1)

    def ssum(e):
        return sp.Sum(e, Psum)

    d_ls = Step("W4a A2b constants", "assumption", eq(ssum(Ls(s)), L), r"$\sum_s L_s = L$",
                refs=("A2b",))
    d_te = Step(r"W4b $\tau_{\text{eff}}$ (definition)", "definition",
                eq(ssum(Ls(s) * taus(s)), L * tau_eff),
                r"$\tau_{\text{eff}} := \sum_s L_s \tau_s / L$",
                model={tau_eff: ssum(Ls(s) * taus(s)) / L})
    d_g = Step("W4c initial errors", "assumption", le(ssum(gs(s)), E0),
               r"INIT per block: $\sum_s g_s \le E_0$ (zero buffers: $= \|\nabla "
               r"f(x_0)\|_\dagger$)",
               refs=("INIT",))
    d_cs = Step("W4d Cauchy-Schwarz", "cited", le(ssum(RSs(s)), rho * sigma),
                r"$\sum_s \rho_s \sigma_s \le \sqrt{\sum_s \rho_s^2}\,\sqrt{\sum_s \sigma_s^2} = "
                r"\rho\sigma$ (A1, A3 per block)", refs=("A1", "A3"))
    dt = K + tau_max - tau_min
    total_all = dt * noise * rho * sigma + dt * L * eta * r * (lag + tau_eff) + init * (
        E0 + L * eta * r * (tau_eff - tau_min)) / alpha
    w5 = Step("W5 sum over blocks", "inequality", le(ssum(SR(s)), total_all),
              uses=((w1, 1, Psum), (w2, init / alpha, Psum),
                    (w3, noise * RSs(s) + Ls(s) * eta * r * (lag + taus(s)), Psum),
                    (d_g, init / alpha), (d_cs, dt * noise)),
              rewrites=(d_ls, d_te), domain=DOMAIN_T4)
    Cp = 2 + eps1 - eps2
    SN = sp.Symbol(r"\Sigma_{t\ge\tau_{\max}}\mathbb{E}\|\nabla f(x_t)\|", nonnegative=True)
    # W6, split: what is checked (telescoping, counting, the combination) and what is cited
    # (the per-step descent on the active blocks, which needs the product norm's duality).
    Tn = sp.Symbol("T", positive=True, integer=True)
    tt = sp.Symbol("t", integer=True, nonnegative=True)
    Ft = sp.Function(r"\mathbb{E}f", real=True)
    SP = sp.Symbol(r"\Sigma_{t<\tau_{\max}}\sum_{s\in S_t}\mathbb{E}\|\nabla_s f\|",
                   nonnegative=True)
    SE = sp.Symbol(r"\Sigma_t\sum_{s\in S_t}\mathbb{E}\|e_s\|", nonnegative=True)
    Mv = sp.Symbol("M", nonnegative=True)
    w6a = Step("W6a per-step descent on the active blocks, summed", "reasoning",
               le(Ft(Tn) - Ft(0), -(1 - eps2) * eta * (SN + SP) + eta * Cp * SE
                  + Mv * L * eta**2 * r**2 / 2),
               "per step t: D1-D10 of T1 for the product norm over the active blocks $S_t$ "
               r"($\|d\| = \max_s\|d_s\| \le 1+\epsilon_1$, $\langle\nabla f, d\rangle = "
               r"\sum_{s\in S_t}\langle\nabla_s f, d_s\rangle$, dual norm "
               r"$\sum_s\|\cdot\|_{\dagger,s}$): "
               r"$f_{t+1} \le f_t - \eta(1-\epsilon_2)\sum_{s\in S_t} n_s + \eta C' \sum_{s\in S_t}"
               r" e_s + [S_t \ne \emptyset] L\eta^2 r^2/2$; for $t \ge \tau_{\max}$ every block "
               r"is active and $\sum_s n_s = \|\nabla f(x_t)\|_\dagger$ (W0); summed over "
               r"$t < T = \tau_{\max} + K$ with W6b (cited: the product-norm facts are not "
               r"algebra the checker can see)", refs=("A2b", "BAND"))
    w6b = Step("W6b telescoping", "sum",
               eq(sp.Sum(Ft(tt + 1) - Ft(tt), (tt, 0, Tn - 1)), Ft(Tn) - Ft(0)),
               induction_var=Tn)
    w6c = Step("W6c bounded below", "assumption", le(Ft(0) - Ft(Tn), Delta),
               r"A0 ($x_0$ is the start of every block)", refs=("A0",))
    w6d = Step("W6d error terms by block (definition)", "definition",
               eq(SE, ssum(SR(s))),
               r"each block's error terms are those of its $n_s$ applied steps: "
               r"$\sum_t\sum_{s\in S_t} e_s(t) = \sum_s \Sigma\mathbb{E}\|e\|(s)$",
               model={SE: ssum(SR(s))})
    w6e = Step("W6e moving steps", "sum",
               eq(sp.Sum(1, (tt, tau_min, tau_max + K - 1)), K + tau_max - tau_min),
               r"step $t$ moves iff some block is active iff $t \ge \tau_{\min}$",
               induction_var=K)
    w6f = Step("W6f count of moving steps", "definition", eq(Mv, K + tau_max - tau_min),
               r"$M$ := the number of moving steps (W6e)", model={Mv: K + tau_max - tau_min})
    w6 = Step("W6 summed descent with active sets", "inequality",
              le((1 - eps2) * eta * SN, Delta + eta * Cp * ssum(SR(s))
                 + dt * L * eta**2 * r**2 / 2),
              r"W6a + W6c, the partially active gradient terms dropped ($SP \ge 0$), "
              r"W6d and W6f substituted",
              uses=((w6a, 1), (w6c, 1)), rewrites=(w6d, w6f), domain=DOMAIN_T4)
    bound = statement(nesterov)
    w7 = Step("W7 final", "inequality", le(SN / K, bound),
              uses=((w6, 1 / ((1 - eps2) * eta * K)), (w5, Cp / ((1 - eps2) * K))))
    w8 = Step("W8 uniform delays reduce to T1", "identity",
              eq(bound.subs({tau_max: tau, tau_min: tau, tau_eff: tau}),
                 t1_statement(nesterov)))
    w9 = Step(r"W9 the bound increases with $\tau_{\text{eff}}$", "monotonicity",
              ge(sp.diff(bound, tau_eff), 0),
              mono=(bound, tau_eff, 1, None), domain=DOMAIN_T4)
    w10 = Step(r"W10 $\tau_{\text{eff}} \le \tau_{\max}$", "inequality",
               le(ssum(Ls(s) * taus(s)), L * tau_max),
               uses=((steps[1], Ls(s), Psum),), rewrites=(d_ls,))
    ss = sp.Symbol("s", integer=True, nonnegative=True)
    w11 = Step("W11 PipeDream mean delay", "sum",
               eq(sp.Sum(Pn - 1 - ss, (ss, 0, Pn - 1)), Pn * (Pn - 1) / 2),
               r"$\tau_s = P-1-s$: equal $L_s$ give $\tau_{\text{eff}} = (P-1)/2$")
    pd = bound.subs({tau_max: Pn - 1, tau_min: 0, tau_eff: (Pn - 1) / 2})
    w12 = Step("W12 the PipeDream bound grows with the depth $P$", "monotonicity",
               ge(sp.diff(pd, Pn), 0), mono=(pd, Pn, 1, None), domain=DOMAIN_T4)
    tb = bound.subs({tau_max: 1, tau_min: 1, tau_eff: 1})
    w13 = Step(r"W13 2BW: $\tau_{\text{eff}} = 1$ at every depth and split", "identity",
               eq(d_te.model[tau_eff].subs(taus(s), 1), 1),
               r"with $\tau_s = 1$ for $s < P$: $\sum_{s<P} L_s\tau_s = \sum_s L_s = L$ (W4a), so "
               r"$\tau_{\text{eff}} = \tau_{\max} = \tau_{\min} = 1$ whatever $P$ and the $L_s$",
               rewrites=(d_ls,))
    w13b = Step(r"W13b the 2BW bound is T1 at $\tau = 1$ for every $P$", "identity",
                eq(tb, t1_statement(nesterov).subs(tau, 1)),
                r"the bound depends on $P$ only through the per-stage delays; for 2BW they are "
                r"all 1 (W13), so it is T1's bound at $\tau = 1$ at every depth")
    p3 = sp.Symbol("P_minus_3", nonnegative=True)
    w13c = Step("W13c PipeDream's upper bound is at least 2BW's from $P = 3$", "inequality",
                ge(pd - tb, 0),
                r"equal $L_s$: $\tau_{\text{eff}} = (P-1)/2 \ge 1$, $\tau_{\max} - \tau_{\min} = "
                r"P - 1 \ge 0$; every term of the bound is non-decreasing in them (W9). A "
                r"comparison of the two upper bounds, not of the runs",
                domain={**DOMAIN_T4, Pn: 3 + p3})
    steps += [w1, w2, w3a, w3, d_ls, d_te, d_g, d_cs, w5, w6a, w6b, w6c, w6d, w6e, w6f, w6, w7,
              w8, w9, w10, w11, w12, w13, w13b, w13c]
    return steps


@cache
def result(nesterov: bool = False) -> Result:
    """The T4 :class:`~theory.assumptions.Result`."""
    return Result(
        name="T4-nesterov" if nesterov else "T4",
        title=r"per-block delays (PipeDream $\tau_s = P-1-s$ against 2BW $\tau_s = 1$)",
        quantity="(1/K) sum_{t=tau_max}^{tau_max+K-1} E||grad f(x_t)||_dual (K steps after "
                 "every block is active)",
        quantity_latex=r"\frac1K\sum_{t=\tau_{\max}}^{\tau_{\max}+K-1}\mathbb{E}"
                       r"\|\nabla f(x_t)\|_\dagger",
        statement=statement(nesterov), params=PARAMS, steps=_steps(nesterov),
        assumptions=("A0", "A1", "A2b", "A3", "BAND", "INIT"),
        legend={**_lmo.LEGEND, tau_eff: r"$\sum_s L_s \tau_s / L$ ($\le \tau_{\max}$)"},
        notes="block lemma = T1's momentum lemma renamed per block and re-checked")


def pipedream_taus(P: int) -> list[int]:
    """Original PipeDream (weight stashing): stage s of P has delay τₛ = P − 1 − s."""
    if not (isinstance(P, (int, np.integer)) and P >= 1):
        raise ValueError(f"P (number of stages) must be an integer >= 1, got {P!r}")
    return [P - 1 - i for i in range(P)]


def twobw_taus(P: int) -> list[int]:
    """PipeDream-2BW: every stage has delay 1."""
    if not (isinstance(P, (int, np.integer)) and P >= 1):
        raise ValueError(f"P (number of stages) must be an integer >= 1, got {P!r}")
    return [1] * P


def effective_delay(taus, weights=None) -> float:
    r""":math:`\tau_{\mathrm{eff}} = \sum_s w_s \tau_s` with :math:`w_s = L_s/L` (normalised);
    ``weights=None`` gives :math:`\tau_{\max}` (valid for every split of L over the blocks)."""
    t = np.asarray(taus, dtype=float)
    if t.ndim != 1 or t.size == 0 or np.any(t < 0):
        raise ValueError(f"taus must be a non-empty list of delays >= 0, got {taus!r}")
    if weights is None:
        return float(t.max())
    wts = np.asarray(weights, dtype=float)
    if wts.shape != t.shape or np.any(wts < 0) or wts.sum() <= 0:
        raise ValueError(f"weights must be {t.size} non-negative numbers (L_s/L) with a "
                         f"positive sum, got {weights!r}")
    return float(np.dot(wts / wts.sum(), t))


def bound(Delta, L, rho, sigma, eta, alpha, K, taus, weights=None, eps1=0.0, eps2=0.0,
          E0=None, nesterov=False):
    r"""T4: bound on
    :math:`\frac1K\sum_{t=\tau_{\max}}^{\tau_{\max}+K-1}\mathbb{E}\|\nabla f(x_t)\|_\dagger`
    with per-block delays ``taus``:

    .. math::
        q\Big(\frac{\Delta_0}{\eta K} + \Big(1+\frac{\Delta\tau}{K}\Big)\frac{L\eta r^2}{2}\Big)
        + C\Big(\Big(1+\frac{\Delta\tau}{K}\Big)\Big(\sqrt{\frac{\alpha}{2-\alpha}}\,\rho\sigma

        + L\eta r\Big(\frac{1-\alpha}{\alpha} + \tau_{\mathrm{eff}}\Big)\Big)

        + \frac{(1-\alpha)(E_0 + L\eta r(\tau_{\mathrm{eff}} - \tau_{\min}))}{\alpha K}\Big),
        \qquad \Delta\tau = \tau_{\max} - \tau_{\min},

    :math:`\tau_{\mathrm{eff}} = \sum_s w_s \tau_s` (``weights`` = :math:`L_s/L`), or
    :math:`\tau_{\max}` when ``weights`` is None. Assumptions
    A0, A1, A2b, A3, BAND, INIT. ``E0=None`` uses √(2LΔ₀) (zero momentum buffers).
    """
    t = np.asarray(taus, dtype=float)
    te = effective_delay(taus, weights)
    _check(Delta, L, rho, sigma, eta, alpha, K, te, eps1, eps2)
    if E0 is None:
        E0 = np.sqrt(2.0 * np.asarray(L, dtype=float) * np.asarray(Delta, dtype=float))
    return result(bool(nesterov)).numeric()(Delta, L, rho, sigma, eta, alpha, K, float(t.max()),
                                            float(t.min()), te, eps1, eps2, E0)


def depth_penalty(P, schedule="pipedream", weights=None):
    r"""The delay factor :math:`\tau_{\mathrm{eff}}` that multiplies CLη(1+ε₁) in T4: 1 for 2BW
    at every depth P; for PipeDream :math:`\tau_{\max} = P-1` (``weights=None``) or
    :math:`\sum_s w_s(P-1-s)` (e.g. equal weights: (P−1)/2)."""
    if schedule == "2bw":
        return effective_delay(twobw_taus(P), weights)
    if schedule == "pipedream":
        return effective_delay(pipedream_taus(P), weights)
    raise ValueError(f"schedule must be 'pipedream' or '2bw', got {schedule!r}")


__all__ = ["PARAMS", "statement", "result", "bound", "pipedream_taus", "twobw_taus",
           "effective_delay", "depth_penalty"]
