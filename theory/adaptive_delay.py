r"""AD — why the delay gap depends on the update rule: Adam-, Adan- and sign-like updates on a
quadratic under a fixed delay.

T3 (:mod:`theory.stability`) is the linear theory: SGD with EMA momentum diverges above
:math:`\eta h = c^*(\beta, \tau, \text{EF})`. Adam-like and sign-like updates do not diverge on a
quadratic; they settle into an oscillation whose size is the *loss floor*. This module computes
that floor with and without delay, so that the gap async − sync and EF's share of it can be
compared across update rules.

**Model** (production semantics, ``formulation="gradient"``, float64). f(x) = h x²/2 per
coordinate (a diagonal quadratic decouples, because every update below is coordinate-wise),
gradient :math:`g_t = h x_{t-\tau} + \sigma\xi_t` (ξ standard normal, σ = 0 unless stated),
τ idle start steps, k = t − τ + 1 the optimizer's own step count, then

.. math::
    m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t

.. math::
    \text{Adam:}\quad u_t = \frac{\eta\,\hat m_t}{\sqrt{\hat n_t} + \epsilon},\qquad
    n_t = \beta_2 n_{t-1} + (1-\beta_2) g_t^2

.. math::
    \text{Adan:}\quad u_t = \frac{\eta\,(\hat m_t + \beta_2 \hat v_t)}{\sqrt{\hat n_t} + \epsilon},

.. math::
    v_t = \beta_2 v_{t-1} + (1-\beta_2)(g_t - g_{t-1}),

.. math::
    n_t = \beta_3 n_{t-1} + (1-\beta_3)\big(g_t + \beta_2(g_t - g_{t-1})\big)^2

.. math::
    \text{sign (1-D Muon):}\quad u_t = \eta\,\mathrm{sign}(m_t)\ \text{or}\
    \eta\,\mathrm{sign}\big((1-\beta_1)g_t + \beta_1 m_t\big)

with bias correction :math:`\hat m = m/(1-\beta_1^k)` etc. and Adan's :math:`g_0 := g_1`
(``pytorch_optimizer.Adan``, the authors' code), then :math:`x_{t+1} = x_t - u_t` or, with EF,
:math:`x_{t+1} = x_t - 2u_t + u_{t-1}` (:math:`u_{\tau-1} = 0`). Floor F: the mean of f over the
second half of a long run.

**AD1, scale invariance (exact).** With x = ηy, m = hημ, n = (hη)²ν the Adam/Adan update is
:math:`\eta\mu/(\sqrt\nu + \epsilon/(h\eta))` and the gradient :math:`h\eta(y_{t-\tau} +
(\sigma/(h\eta))\xi)`: y's recursion depends on (η, h, σ, ε) only through
:math:`\nu_\sigma = \sigma/(\eta h)` and :math:`\epsilon' = \epsilon/(\eta h)`; sign updates
do not see ε at all. Hence

.. math::  F(\eta, h, \sigma, \epsilon) = h\eta^2\,\Phi(\beta\text{'s}, \tau, \text{EF};\
           \sigma/(\eta h),\ \epsilon/(\eta h)).

Noise-free and with ε ≪ ηh·RMS(x): **F ∝ hη² for every one of these methods**, so the
delayed/sync ratio of floors does not depend on η or h, and lowering the lr k-fold shrinks every
gap exactly k²-fold. On a diagonal quadratic F = η² Σᵢ hᵢ Φ: the ratios do not depend on the
spectrum either.

**AD2, Adam's edge is T3's (exact, linearisation).** At the origin n → 0 and
∂u/∂m = η/ε, so the linearised Adam is T3's recursion with c = ηh/ε: the origin is
asymptotically stable iff ηh/ε < c*(β₁, τ, EF) (with noise, ε is replaced by about
σ + ε — numerical only). The *preconditioned* stable step keeps T3's delayed/sync ratio,
:math:`c^*(\beta,1)/c^*(\beta,0) = (1-\beta)/(2(1+\beta))`.

**AD3–AD4, the floor: self-tuning to the delayed edge (an assumed law, checked numerically).**
Above that edge the oscillation grows until the denominator has grown enough to bring the
preconditioned gain κ = ηh/√n̂ back to the edge: with √n̂ = ρ h RMS(x) (for β₂ → 1,
n̂ is the mean of the squared input of n over the cycle; ρ = 1 for Adam, for Adan
:math:`\rho(\omega^*) = |1 + \beta_2(1 - e^{-i\omega^*})|`, ω* the frequency of the critical
root),
κ = c* gives RMS(x) = η/(c*ρ) and

.. math::  F = \frac{h\eta^2}{2\,c^{*2}\rho^2}
           \qquad(\text{Adam: } \rho = 1,\ c^* \text{ of T3}).

This is the edge-of-stability mechanism of adaptive methods, on a quadratic. It is assumed
(AD3) and checked by simulation (:func:`eos_floor` against :func:`simulate`, numeric check
AD3-4; the book gives the measured agreement with delay and in sync, where the cycle is a spiky
relaxation and the simulated floor lies above the law). Consequences for Adam (τ = 1,
:math:`c^*(\beta, 1) = 1`, :math:`c^*(\beta, 0) = 2(1+\beta)/(1-\beta)`,
:math:`c^{*2}_\mathrm{EF} + c^*_\mathrm{EF} = 1/(1-\beta)`):

.. math::
    \frac{F_\text{async}}{F_\text{sync}} = \frac{4(1+\beta)^2}{(1-\beta)^2},

.. math::
    \text{EF share} = \frac{1 - 1/c^{*2}_\text{EF}}{1 - (1-\beta)^2/(4(1+\beta)^2)}

(the book's table gives the values).

The delayed Adam floor hη²/2 does not depend on β (the τ = 1 edge is 1 whatever β), while the
sync floor falls like (1−β)²: the gap is essentially the delayed floor.

**Adan's gradient difference is a delay compensator.** Adan's numerator filter
:math:`(1-\beta_1)/(1-\beta_1 z^{-1}) + \beta_2(1-\beta_2)(1-z^{-1})/(1-\beta_2 z^{-1})` has a
phase lead; its delayed edge
c*(β₁, β₂, τ = 1) (:func:`critical_gain`, numerical root locus; at β₂ = 0 :func:`char_poly` is
T3's polynomial times z³, or z² with EF or at τ = 0, step AD7, checked on the function
itself) is 2.11, 5.75, 10.39 at β₁ = 0.9, 0.95, 0.98 (β₂ = 0.92) against Adam's 1.
Adan's delayed floor is 0.078, 0.0081, 0.0019 hη² against Adam's 0.5: **with the reference
β₁ = 0.98, Adan's gap is ~270× smaller than AdamW's and ~40× smaller than with β₁ = 0.9**, and
EF *increases* Adan's floor at β₁ = 0.98 (it over-corrects on top of the built-in compensation).
With Alg. 1's β's read in the torch convention, (0.02, 0.08, 0.01), n follows (g + β₂Δg)² step
by step and Adan is nearly signSGD without momentum (simulated floors 0.112, 0.449, 1.14 hη² in
sync, async, EF: ratio 4, EF hurts, as for sign descent at β = 0).

**Sign-like (Muon in 1-D).** Delayed sign descent has a *set* of certified cycles
(:mod:`theory.muon_attractors`), and which one a run reaches depends on its start's lattice
offset. The floor of one cycle is exact, F = hη²·mean(x*²)/2 (x* in units of η); the floor
reported here is its average over the starts of the grid (:data:`SIGN_GRID`: J offsets, R = 1,
each cycle weighted by its basin share), and EF's share comes with its range over the
offsets (:func:`floors`). The sync floor is not small (fixed step length), so the delay
multiplies it by a modest factor; EF's share depends on the offset strongly enough that a
single start's figure says little (the book's table gives average and range).

**Lower lr (H1), with gradient noise (numerical, Monte Carlo).** By AD1 the floor at lr η*/k is
that at η* with :math:`\nu_\sigma` multiplied by k. :func:`h1_table` gives the gap at η*/k
relative to the gap at η*, and EF's share. Noise-free, the gap shrinks exactly k²-fold for
every method and the shares stay put. With noise, Adam's gap (in units of hη²) falls as
:math:`\nu_\sigma` grows towards the linear regime and sign's rises, so Adam's gap shrinks a
little faster than k² and sign's a little slower; Adam's EF share drifts down and sign's up
(the book's table has the numbers). The quadratic therefore predicts neither an Adam share
that rises toward the paper's figures as the lr falls (it is *already* at the paper's level in
this model) nor a gap that stays large when the lr is lowered.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from .assumptions import Result, Step, beta, eq, eta
from .stability import char_poly_expr, critical_step, critical_step_expr
from .stability import z as z_

METHODS = ("adam", "adan", "sign", "sgd")


# --------------------------------------------------------------------------- recursion
def simulate(method: str, eta: float, h, *, beta1: float, beta2: float = 0.999,
             beta3: float = 0.99, eps: float = 0.0, tau: int = 0, ef: bool = False,
             steps: int = 20000, x0=0.3, sigma: float = 0.0, seed: int = 0,
             nesterov: bool = False) -> np.ndarray:
    r"""The iterates for t = 0..steps (shape (steps+1, d), float64) of the model in the module
    docstring on the diagonal quadratic f = Σ hᵢxᵢ²/2 (``h`` a scalar or a vector of curvatures).

    ``method``: ``adam`` (β₂ the second-moment EMA), ``adan`` (torch convention: β₂ the
    gradient-difference EMA and its weight, β₃ the second moment; bias correction and
    g₀ := g₁ as ``pytorch_optimizer.Adan``), ``sign`` (sign of the momentum, heavy ball or
    ``nesterov``: 1-D Muon with the exact polar factor), ``sgd`` (EMA momentum, T3's model).
    ``sigma``: standard deviation of the additive gradient noise (``seed`` fixes it)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(tau, int) and tau >= 0):
        raise ValueError(f"tau must be an integer >= 0, got {tau!r}")
    h = np.atleast_1d(np.asarray(h, dtype=np.float64))
    d = h.size
    rng = np.random.default_rng(seed)
    out = np.empty((steps + 1, d), dtype=np.float64)
    out[0] = np.broadcast_to(np.asarray(x0, dtype=np.float64), (d,))
    x = out[0].copy()
    m = np.zeros(d)
    n = np.zeros(d)
    v = np.zeros(d)
    g_prev = None
    u_prev = np.zeros(d)
    k = 0
    for t in range(steps):
        if t < tau:
            out[t + 1] = x
            continue
        g = h * out[t - tau]
        if sigma:
            g = g + sigma * rng.standard_normal(d)
        k += 1
        m = beta1 * m + (1.0 - beta1) * g
        if method == "adam":
            n = beta2 * n + (1.0 - beta2) * g * g
            u = eta * (m / (1.0 - beta1**k)) / (np.sqrt(n / (1.0 - beta2**k)) + eps)
        elif method == "adan":
            diff = np.zeros(d) if g_prev is None else g - g_prev
            v = beta2 * v + (1.0 - beta2) * diff
            w = g + beta2 * diff
            n = beta3 * n + (1.0 - beta3) * w * w
            num = m / (1.0 - beta1**k) + beta2 * v / (1.0 - beta2**k)
            u = eta * num / (np.sqrt(n) / np.sqrt(1.0 - beta3**k) + eps)
            g_prev = g
        elif method == "sign":
            u = eta * np.sign((1.0 - beta1) * g + beta1 * m if nesterov else m)
        else:
            u = eta * m
        x = x - 2.0 * u + u_prev if (ef and tau >= 1) else x - u
        u_prev = u
        out[t + 1] = x
    return out


def floor_value(xs: np.ndarray, h, burn: float = 0.5) -> float:
    """Mean of f = Σ hᵢxᵢ²/2 over the iterates after the first ``burn`` fraction."""
    h = np.atleast_1d(np.asarray(h, dtype=np.float64))
    tail = xs[int(len(xs) * burn):]
    return float(np.mean(0.5 * (h * tail * tail).sum(axis=1)))


def ef_share(f_sync: float, f_async: float, f_ef: float) -> float:
    r"""Share of the gap async − sync that EF recovers:
    :math:`(F_\mathrm{async} - F_\mathrm{EF})/(F_\mathrm{async} - F_\mathrm{sync})`."""
    return (f_async - f_ef) / (f_async - f_sync)


# --------------------------------------------------------------------------- linear edges
def char_poly(method: str, beta1: float, tau: int, c: float, ef: bool = False,
              beta2: float = 0.92) -> np.ndarray:
    r"""Coefficients (highest first) of the characteristic polynomial of the linearised delayed
    recursion :math:`x_{t+1} = x_t - c N_t` (EF: :math:`- c(2N_t - N_{t-1})`), N the numerator
    filter applied to :math:`g_t = x_{t-\tau}`: Adam (EMA) :math:`(1-\beta_1)z/(z-\beta_1)`;
    Adan adds :math:`\beta_2(1-\beta_2)(z-1)/(z-\beta_2)`. Both are written over the common
    denominator (z−β₁)(z−β₂) (Adam: β₂ = 0), so

    .. math::
        P = z^{\tau+1}(z-1)(z-\beta_1)(z-\beta_2) + c\,Q(z)\,(z \text{ or } 2z-1),

        Q = (1-\beta_1)z(z-\beta_2) + \beta_2(1-\beta_2)(z-1)(z-\beta_1).

    At β₂ = 0 (Adam) this is z³ × T3's polynomial (τ ≥ 1, no EF), z² × T3's with EF or at
    τ = 0 (AD7, checked on this function)."""
    b2 = beta2 if method == "adan" else 0.0
    if method not in ("adam", "adan"):
        raise ValueError("char_poly: method must be 'adam' or 'adan'")
    P = np.polymul(np.polymul([1.0, -1.0], [1.0, -beta1]), [1.0, -b2])
    P = np.polymul(P, [1.0] + [0.0] * (tau + 1))
    Q = np.polyadd(np.polymul([1.0 - beta1, 0.0], [1.0, -b2]),
                   b2 * (1.0 - b2) * np.polymul([1.0, -1.0], [1.0, -beta1]))
    Q = np.polymul(Q, [2.0, -1.0] if (ef and tau >= 1) else [1.0, 0.0])
    return np.polyadd(P, c * Q)


def _char_poly_expr(method: str, beta1, tau: int, c, ef: bool, beta2) -> sp.Expr:
    """:func:`char_poly` evaluated on sympy symbols (object arrays), as a polynomial in z."""
    co = char_poly(method, beta1, tau, c, ef, beta2)
    n = len(co) - 1
    return sp.expand(sum(sp.nsimplify(a) * z_ ** (n - i) for i, a in enumerate(co)))


def _radius(method, beta1, tau, c, ef, beta2):
    return float(np.max(np.abs(np.roots(char_poly(method, beta1, tau, c, ef, beta2)))))


@cache
def critical_gain(method: str, beta1: float, tau: int, ef: bool = False,
                  beta2: float = 0.92) -> tuple[float, float]:
    r"""(c*, ω*): the first gain c at which the linearised recursion (:func:`char_poly`) loses
    stability, and the angle ω* ∈ [0, π] of its critical root. Adam: c* is T3's
    :func:`~theory.stability.critical_step` (closed forms); Adan: numerical (geometric bracket,
    then 80 bisections on the spectral radius)."""
    if method == "adam":
        cs = critical_step(beta1, tau, ef)
    else:
        lo, hi = 0.0, 1e-3
        while _radius(method, beta1, tau, hi, ef, beta2) < 1.0:
            lo, hi = hi, hi * 1.25
            if hi > 1e6:
                raise RuntimeError("no critical gain below 1e6")
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if _radius(method, beta1, tau, mid, ef, beta2) < 1.0:
                lo = mid
            else:
                hi = mid
        cs = 0.5 * (lo + hi)
    roots = np.roots(char_poly(method, beta1, tau, cs * (1 + 1e-9), ef, beta2))
    crit = roots[np.argmax(np.abs(roots))]
    return float(cs), float(abs(np.angle(crit)))


def denominator_gain(method: str, omega: float, beta2: float = 0.92) -> float:
    r"""ρ(ω): the gain of the filter feeding the second moment at frequency ω, relative to g:
    1 for Adam, :math:`|1 + \beta_2(1 - e^{-i\omega})|` for Adan (n averages (g + β₂Δg)²)."""
    if method == "adam":
        return 1.0
    return float(abs(1.0 + beta2 * (1.0 - np.exp(-1j * omega))))


def eos_floor(method: str, beta1: float, tau: int, ef: bool = False,
              beta2: float = 0.92) -> float:
    r"""Predicted floor F/(hη²) = 1/(2c*²ρ(ω*)²) of the noise-free Adam/Adan recursion with ε = 0
    (AD3–AD4; a numerical law, checked against :func:`simulate`)."""
    cs, om = critical_gain(method, beta1, tau, ef, beta2)
    r = denominator_gain(method, om, beta2)
    return 1.0 / (2.0 * cs * cs * r * r)


def adam_ef_share(beta1: float) -> float:
    r"""Closed form of the Adam EF share at τ = 1 from :func:`eos_floor`:
    :math:`(1 - 1/c^{*2}_\mathrm{EF})/(1 - (1-\beta)^2/(4(1+\beta)^2))`."""
    ce = critical_step(beta1, 1, True)
    return (1.0 - 1.0 / ce**2) / (1.0 - (1.0 - beta1) ** 2 / (4.0 * (1.0 + beta1) ** 2))


#: The start grid of the sign floors, J offsets (midpoints of [0, 1)) and radius R (units of η).
SIGN_GRID = {"offsets": 20, "radius": 1}


def sign_attractors(beta1: float, tau: int, ef: bool = False, nesterov: bool = True):
    """The certified attractor set of 1-D Muon on :data:`SIGN_GRID`
    (:func:`theory.muon_attractors.attractor_set`)."""
    from .muon_attractors import attractor_set, variant

    return attractor_set(variant(beta1, tau, nesterov, 1 if ef else None),
                         SIGN_GRID["offsets"], SIGN_GRID["radius"])


def sign_floor(beta1: float, tau: int, ef: bool = False, nesterov: bool = True) -> float:
    """Floor F/(hη²) of 1-D Muon: mean(x*²)/2 of each certified cycle, averaged over the starts
    of :data:`SIGN_GRID` (exact rationals, returned as a float)."""
    return float(sign_attractors(beta1, tau, ef, nesterov).mean("floor"))


def floors(method: str, beta1: float, *, tau: int = 1, beta2: float | None = None,
           nesterov: bool = True) -> dict:
    """F/(hη²) in sync, async (delay τ) and async + EF, with the ratio async/sync and EF's
    share: the closed forms (Adam), root locus (Adan) or exact cycles averaged over the start
    grid (sign; then also ``share_min``/``share_max``, the range of the per-offset shares)."""
    extra = {}
    if method == "sign":
        from .muon_attractors import ef_share as set_share

        sets = [sign_attractors(beta1, t, e, nesterov) for t, e in ((0, False), (tau, False),
                                                                    (tau, True))]
        f = [float(x.mean("floor")) for x in sets]
        sh = set_share(*sets)
        extra = {"share_min": sh["min"], "share_max": sh["max"]}
    else:
        b2 = 0.92 if beta2 is None else beta2
        f = [eos_floor(method, beta1, t, e, b2) for t, e in ((0, False), (tau, False), (tau, True))]
    return {"method": method, "beta1": beta1, "tau": tau, "sync": f[0], "async": f[1],
            "ef": f[2], "ratio": f[1] / f[0], "share": ef_share(*f), **extra}


def gap_table(betas=(0.8, 0.9, 0.95, 0.98), tau: int = 1) -> list[dict]:
    """:func:`floors` for Adam, Adan (β₂ = 0.92) and sign/Muon (Nesterov) over ``betas``."""
    return [floors(mth, b, tau=tau) for mth in ("adam", "adan", "sign") for b in betas]


# --------------------------------------------------------------------------- H1 with noise
def noisy_floor(method: str, beta1: float, tau: int, ef: bool, nu: float, *,
                steps: int = 20000, d: int = 16, seed: int = 1, **kw) -> float:
    r"""Monte-Carlo floor F/(hη²) at noise ratio :math:`\nu_\sigma = \sigma/(\eta h)`
    (η = h = 1, d independent coordinates, second half of ``steps``). Sign runs start
    coordinate i at the lattice offset :math:`(2i+1)/(2d)`, so that noise-free they average the
    floor over d offsets as the exact start-averaged floors do; the others start at
    x₀ = 0.3."""
    b2 = kw.pop("beta2", 0.999 if method == "adam" else 0.92)
    x0 = (2 * np.arange(d) + 1) / (2 * d) if method == "sign" else 0.3
    xs = simulate(method, 1.0, np.ones(d), beta1=beta1, beta2=b2, tau=tau, ef=ef,
                  steps=steps, x0=x0, sigma=nu, seed=seed, **kw)
    return floor_value(xs, np.ones(d)) / d


def h1_table(method: str, beta1: float, nu_star: float, ks=(1, 2, 4, 8), **kw) -> list[dict]:
    r"""For lr = η*/k: :math:`\nu_\sigma = k\nu^*`, and (AD1)
    :math:`F(\eta^*/k) = F(\eta^*)\,\Phi(k\nu^*)/(k^2\Phi(\nu^*))`. Rows: k, the
    gap relative to the gap at η* (gap(η*/k)/gap(η*)), k²× that (1 = pure η² scaling), and
    EF's share. Monte Carlo (:func:`noisy_floor`)."""
    rows = []
    base = None
    for k in ks:
        nu = k * nu_star
        f = [noisy_floor(method, beta1, t, e, nu, **dict(kw))
             for t, e in ((0, False), (1, False), (1, True))]
        gap = (f[1] - f[0]) / k**2  # in units of h eta*^2
        base = gap if base is None else base
        rows.append({"k": k, "nu": nu, "gap_rel": gap / base, "gap_rel_k2": gap / base * k**2,
                     "share": ef_share(*f)})
    return rows


# --------------------------------------------------------------------------- checks
def numeric_checks() -> list[tuple[str, bool, str]]:
    """Fast float64 checks of the closed forms against the recursion (``python -m theory``)."""
    out = []
    # AD1: identical y = x/η trajectories for two (η, h, σ) with the same σ/(ηh)
    a = simulate("adam", 1.0, 1.0, beta1=0.9, tau=1, steps=400, sigma=0.5, seed=3) / 1.0
    b = simulate("adam", 0.1, 4.0, beta1=0.9, tau=1, steps=400, x0=0.03, sigma=0.2, seed=3) / 0.1
    err = float(np.max(np.abs(a - b)))
    out.append(("AD1 scale invariance", err < 1e-9, f"max|y - y'| = {err:.1e}"))
    # AD2: the linear edge of Adam at the origin is T3's, with c = eta h / eps
    ok2 = True
    for t, e in ((1, False), (1, True)):
        cs = critical_step(0.9, t, e)
        lo = simulate("adam", cs * 0.9, 1.0, beta1=0.9, eps=1.0, tau=t, ef=e, steps=6000,
                      x0=1e-6)
        hi = simulate("adam", cs * 1.1, 1.0, beta1=0.9, eps=1.0, tau=t, ef=e, steps=6000,
                      x0=1e-6)
        ok2 &= abs(lo[-1, 0]) < 1e-12 and np.max(np.abs(hi)) > 1e-3
    out.append(("AD2 Adam's edge at the origin is T3's c*(beta, tau, EF) with c = eta h/eps", ok2,
                "beta 0.9, tau 1, plain and EF, 0.9c* / 1.1c*"))
    # AD3-4: the floor law against the recursion
    worst = 0.0
    for mth, b1, t, e in (("adam", 0.9, 1, False), ("adam", 0.9, 1, True),
                          ("adan", 0.98, 1, False), ("adan", 0.9, 1, True)):
        sim = floor_value(simulate(mth, 1.0, 1.0, beta1=b1, beta2=0.999 if mth == "adam" else 0.92,
                                   beta3=0.999, tau=t, ef=e, steps=20000), 1.0)
        worst = max(worst, abs(sim / eos_floor(mth, b1, t, e) - 1.0))
    out.append((r"AD3-4 floor $h\eta^2/(2c^{*2}\rho^2)$ vs simulation ($\tau = 1$)", worst < 0.02,
                f"worst relative error {worst:.2%}"))
    out.append(("AD6 algebra (the floor law AD3/AD4 assumed)", ad6_algebra_holds(),
                "the ratio of T3's edges, exact"))
    return out


def ad6_algebra_holds() -> bool:
    """AD6's algebra, apart from the floor law it rests on: with T3's edges
    :math:`c^*(\\beta, 1)`, :math:`c^*(\\beta, 0)`, :math:`(1/2c_1^{*2})/(1/2c_0^{*2}) =
    4(1+\\beta)^2/(1-\\beta)^2` (sympy, exact)."""
    c0, c1 = critical_step_expr(0, False), critical_step_expr(1, False)
    return bool(sp.simplify((1 / (2 * c1**2)) / (1 / (2 * c0**2))
                            - 4 * (1 + beta) ** 2 / (1 - beta) ** 2) == 0)


def _steps() -> list[Step]:
    h, mu, nu, eps_, y = sp.symbols("h mu nu epsilon y", positive=True)
    cs, rho_, n_ = sp.symbols("c^* rho n", positive=True)
    m_ = sp.Symbol("m", real=True)
    c_ = sp.Symbol("c", positive=True)
    s1 = Step("AD1 scale invariance", "identity",
              eq(eta * (h * eta * mu) / (sp.sqrt((h * eta) ** 2 * nu) + eps_),
                 eta * mu / (sp.sqrt(nu) + eps_ / (h * eta))),
              r"with $x = \eta y$, $m = h\eta\mu$, $n = (h\eta)^2\nu$ the update is "
              r"$\eta\,\mu/(\sqrt\nu + \epsilon/(h\eta))$: y's recursion sees only "
              r"$\epsilon/(h\eta)$ and $\sigma/(h\eta)$, so $F = h\eta^2\Phi$")
    s2 = Step("AD2 linearisation at the origin", "identity",
              eq(sp.diff(eta * m_ / (sp.sqrt(n_) + eps_), m_).subs(n_, 0), eta / eps_),
              r"$\partial u/\partial m = \eta/\epsilon$ at $n = 0$ ($n$ is quadratic in the "
              r"state): the linearised Adam is T3's recursion with $c = \eta h/\epsilon$")
    s3 = Step("AD3 self-tuning to the delayed edge", "assumption",
              eq(eta * h / (rho_ * h * y), cs),
              r"on the limit cycle $\sqrt{\hat n} = \rho h\,\mathrm{RMS}(x)$ ($\beta_2 \to 1$) and "
              r"the preconditioned gain $\kappa = \eta h/\sqrt{\hat n}$ sits at the delayed edge "
              r"$c^*$; $y = \mathrm{RMS}(x)$. Numerical law: checked against the float64 "
              r"recursion by `adaptive_delay.numeric_checks` and `verify/test_adaptive_delay.py`")
    s4 = Step("AD4 floor", "assumption",
              eq((h / 2) * (eta / (cs * rho_)) ** 2, h * eta**2 / (2 * cs**2 * rho_**2)),
              r"AD3 solved for $\mathrm{RMS}(x) = \eta/(c^*\rho)$ (which gives "
              r"$\kappa = c^*$), and $F = h\,\mathrm{RMS}(x)^2/2$: algebra on the assumed law AD3, "
              r"so the floor is as assumed as AD3; its value is checked against the float64 "
              r"recursion (numeric check AD3-4), not proved")
    ce = critical_step_expr(1, True)
    s5 = Step(r"AD5 EF edge identity ($\tau = 1$)", "identity",
              eq(ce**2 + ce, 1 / (1 - beta)),
              r"T3's $c^*_\mathrm{EF}(\beta, 1)$ (`stability.critical_step_expr`) solves "
              r"$c^2 + c = 1/(1-\beta)$, so $1/c^{*2}_\mathrm{EF} \approx 1 - \beta$ for "
              r"$\beta \to 1$ and Adam's EF share $\to 1$")
    c0, c1 = critical_step_expr(0, False), critical_step_expr(1, False)
    s6 = Step(r"AD6 Adam's async/sync floor ratio ($\tau = 1$)", "assumption",
              eq((1 / (2 * c1**2)) / (1 / (2 * c0**2)), 4 * (1 + beta) ** 2 / (1 - beta) ** 2),
              r"AD4 with $\rho = 1$ and T3's edges $c^*(\beta, 1)$, $c^*(\beta, 0)$ "
              r"(`stability.critical_step_expr`): algebra on the assumed law AD3/AD4, so the "
              r"ratio is as assumed as the floor; the algebra alone (the two edges' ratio) is "
              r"checked by `ad6_algebra_holds`")
    s7 = [Step(rf"AD7 Adan at beta2 = 0 is T3 ($\tau = {t}${', EF' if e else ''})", "identity",
               eq(_char_poly_expr("adan", beta, t, c_, e, 0), z_ ** (2 if (e or t == 0) else 3)
                  * char_poly_expr(beta, t, e, var=c_ * (1 - beta))),
               r"`char_poly` (the function itself, on symbols) with $\beta_2 = 0$ is "
               r"$z^3$ (no EF, $\tau \ge 1$) or $z^2$ (EF, or $\tau = 0$) times T3's "
               r"`char_poly_expr` with $p = c(1-\beta)$")
          for t in (0, 1, 2, 3) for e in ((False, True) if t else (False,))]
    return [s1, s2, s3, s4, s5, s6, *s7]


@cache
def result() -> Result:
    """The AD :class:`~theory.assumptions.Result`: the loss floor of adaptive updates under
    delay."""
    cs, rho_, h = sp.symbols("c^* rho h", positive=True)
    return Result(
        name="AD",
        title="Adam/Adan under delay on a quadratic: the loss floor sits at the delayed edge",
        quantity="loss floor F (mean of f on the limit cycle), noise-free, eps = 0",
        quantity_latex=r"F",
        statement=h * eta**2 / (2 * cs**2 * rho_**2),
        params=(h, eta, cs, rho_),
        steps=_steps(),
        assumptions=("quadratic f = h x^2/2",),  # a diagonal quadratic acts per coordinate
        legend={cs: r"critical gain of the delayed numerator filter (T3's $c^*$ for Adam)",
                rho_: r"gain of the second-moment input at the critical frequency (Adam: 1)"},
        relation="=",
        notes="AD3 is a numerical law (checked against the recursion), not a proof",
    )


__all__ = ["METHODS", "simulate", "floor_value", "ef_share", "char_poly", "critical_gain",
           "denominator_gain", "eos_floor", "adam_ef_share", "sign_floor", "floors",
           "gap_table", "noisy_floor", "h1_table", "numeric_checks", "result", "ad6_algebra_holds"]
