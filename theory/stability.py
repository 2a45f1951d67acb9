r"""T3 — exact linear stability of delayed EMA-momentum gradient descent on a quadratic.

Recursion (production semantics, ``formulation="gradient"``): :math:`f(x) = h x^2/2`,
:math:`c = \eta h`, :math:`\mu_t = \eta m_t`:

.. math::
    \mu_t &= \beta\mu_{t-1} + (1-\beta)\,c\,x_{t-\tau},\\
    x_{t+1} &= x_t - \mu_t \qquad \text{(no EF)},\\
    x_{t+1} &= x_t - 2\mu_t + \mu_{t-1} \qquad \text{(EF, } \tau\ge1\text{)}

(torch SGD with ``momentum=β, dampening=β`` is this EMA; EF doubles the applied update and
adds back the previous applied one; the delay core applies no correction to synchronous
steps, so EF with :math:`\tau = 0` is the plain method unless it is asked for with
``ef_without_delay``, :mod:`theory.ef_nodelay`). With :math:`p = c(1 - \beta)` the
characteristic polynomials are (step SC1 checks them against :math:`\det(zI - A)` of the state
matrix):

* :math:`\tau = 0`: :math:`(z-1)(z-\beta) + p z`
* :math:`\tau \ge 1`, no EF: :math:`z^{\tau-1}(z-1)(z-\beta) + p`
* :math:`\tau \ge 1`, EF: :math:`z^{\tau}(z-1)(z-\beta) + p(2z - 1)`

**Critical step** :math:`c^*(\beta, \tau, \text{EF})`: the supremum of the :math:`c` such that
the recursion is asymptotically stable for every :math:`\eta h \in (0, c)`, from the
Schur–Cohn conditions (all
leading coefficients :math:`\delta_k` of the Schur transforms positive), derived symbolically:

* :math:`\tau = 0`: :math:`c^* = 2(1+\beta)/(1-\beta)`
* :math:`\tau = 1`: :math:`c^* = 1` (independent of :math:`\beta`)
* :math:`\tau = 2`: :math:`c^* = \bigl(\sqrt{\beta^2-2\beta+5} - 1 - \beta\bigr) / (2(1-\beta))`
  (0.618 at :math:`\beta = 0`, :math:`\to 1/2` as :math:`\beta \to 1`)
* :math:`\tau = 1`, EF: :math:`c^* = \bigl(\sqrt{(5-\beta)/(1-\beta)} - 1\bigr) / 2` (0.618 at
  :math:`\beta = 0`; :math:`c^* = 1/\sqrt{1-\beta} - 1/2 + O(\sqrt{1-\beta})` as
  :math:`\beta \to 1`, steps SC13–SC14)
* :math:`\tau = 2`, EF: :math:`c^* = p^*/(1-\beta)`, :math:`p^*` the unique positive root of
  :math:`\varphi(p) = p^3 + (3-\beta)p^2 + \beta(2-\beta)p - (1-\beta)` (0.532 at
  :math:`\beta = 0`, 0.85 at :math:`\beta = 0.9`)

So without EF a delay caps the stable :math:`\eta h` at :math:`\le 1` whatever the momentum.
With the paper's EF (γ = 1) the stable range grows with :math:`\beta` **at τ = 1 only**
(:math:`c^* \approx 1/\sqrt{1-\beta} - 1/2`); at τ = 2 it tends to 1 and at τ = 3 to 1/2 as
:math:`\beta \to 1`. At every τ ≥ 1 the range grows with β exactly for the coefficients
γ > τ (the root near 1 has :math:`|z|^2 = 1 + p(\tau-\gamma) + O(p^{3/2})`, see EF(γ) below):
γ = τ grows like :math:`1/\sqrt{1-\beta}`, the best coefficient γ* like
:math:`K_\tau/(1-\beta)`. :func:`ef_growth_table` gives the numbers and
:func:`ef_growth_checks` checks the scope. Without a delay the EF step only narrows the range
(:mod:`theory.ef_nodelay`: :math:`c^* = 2(1+\beta)/((1+2\gamma)(1-\beta))`).

For diagonal/matrix quadratics the recursion decouples along eigenvectors: stable iff
:math:`\eta h_{\max} < c^*`. The critical step is itself the tightness instance (exact).
Other :math:`\tau`: :func:`critical_step` falls back to an exact root-locus computation
(numeric).

**EF(γ)** (``critical_step(β, τ, ef=True, gamma=γ)``): :math:`x_{t+1} = x_t - (1+\gamma)\mu_t
+ \gamma\mu_{t-1}` (γ = 1 the paper's EF, γ = 0 none), characteristic polynomial
:math:`z^\tau(z-1)(z-\beta) + p\,((1+\gamma)z - \gamma)` (SC1.1–SC1.3, τ = 1, 2, 3).

* :math:`\tau = 1` (result ``T3[tau=1, EF(gamma)]``): :math:`\delta_2 = f g` with
  :math:`f = \gamma^2p^2 + (1-\gamma\beta)p - (1-\beta)`, :math:`g = \gamma^2p^2 - (1-\gamma\beta)p
  - (1+\beta)`; stable iff :math:`f < 0` and :math:`g < 0`, so
  :math:`c^* = \min(p_f, p_g)/(1-\beta)`, :math:`p_f, p_g` their positive roots.
* Optimal coefficient (``T3[tau=1, EF(gamma*)]``): :math:`f = (p\gamma - \beta/2)^2 + p -
  (1-\beta/2)^2`, so no real γ is stable at :math:`p \ge (1-\beta/2)^2`, and exactly
  :math:`\gamma^* = 2\beta/(2-\beta)^2` reaches it:
  :math:`c^*(\beta, 1, \gamma^*) = (2-\beta)^2/(4(1-\beta))`; :math:`\gamma^* \to 2` and
  :math:`(1-\beta)c^* \to 1/4` as :math:`\beta \to 1` (the paper's EF:
  :math:`c^* = 1/\sqrt{1-\beta} - 1/2 + O(\sqrt{1-\beta})`).
* Every τ ≥ 1 (``T3[EF(gamma*), every tau]``, :mod:`theory.ef_gamma_closed`): γ* and c* in
  closed form from the first-lobe maximum of :math:`2(1-u)(U_\tau(u) - \beta U_{\tau-1}(u))`;
  :func:`optimal_gamma` returns it, :func:`optimal_gamma_search` is the independent numeric
  maximisation of the root-locus :math:`c^*(\gamma)`, and :func:`certify_optimal_gamma`
  checks (D-decomposition in γ) that no real γ is stable 1e-6 above it. As
  :math:`\beta \to 1` (:func:`beta_one_limit`) small steps are stable only for
  :math:`\gamma > \tau` (the root near 1 has :math:`|z|^2 = 1 + p(\tau - \gamma) + O(p^{3/2})`):
  c* of the paper's EF (γ = 1) stays bounded for τ ≥ 2, that of γ = τ grows like
  :math:`1/\sqrt{1-\beta}`, that of γ* like :math:`K_\tau/(1-\beta)`, :math:`K_\tau` the
  first-lobe maximum at β = 1 (:math:`K_1 = 1/4`, :math:`K_2 = (4\sqrt6 - 9)/9`), while γ*
  stays finite (τ = 1: 2; τ = 2: :math:`(9 + 4\sqrt6)/5`).
* T2/T4 (``T2[EF(gamma)] virtual point``): :math:`v_t = x_t + \gamma u_{t-1}` follows
  :math:`v_{t+1} = v_t - u_t`; the gradient is taken at :math:`v_t + e_t`,
  :math:`e_t = \sum_{i=1}^{\tau}(u_{t-i} - u_{t-\tau-1}) + (\tau-\gamma)u_{t-\tau-1}`, so
  :math:`\|e_t\| \le \tfrac{\tau(\tau+1)}{2}\delta + |\tau - \gamma|\eta` (δ the drift bound) or
  :math:`(\tau+\gamma)\eta`: T2's :math:`L\delta` term becomes
  :math:`L(\tfrac{\tau(\tau+1)}{2}\delta + |\tau-\gamma|\eta)`, per stage
  :math:`(\tau_s, \gamma_s)` in T4.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from .assumptions import Result, Step, TexSymbol, beta, c, drift, eq, eta, ge, j, le, p, z
from .charpoly import (
    DOMAIN_P,
    DOMAIN_P01,
    char_poly_expr,
    optimal_gamma_tau1_exprs,
    schur_cohn,
)


def _validate(beta_v, tau, ef, gamma=None):
    if not (isinstance(tau, (int, np.integer)) and tau >= 0):
        raise ValueError(f"tau must be an integer delay >= 0, got {tau!r}")
    if not isinstance(ef, (bool, np.bool_)):
        raise ValueError(f"ef must be True or False, got {ef!r}")
    if gamma is not None:
        if not ef:
            raise ValueError(f"gamma={gamma!r} is the coefficient of EF(gamma); it needs ef=True")
        if not (isinstance(gamma, sp.Basic) and not gamma.is_number):
            if (isinstance(gamma, (bool, np.bool_)) or not isinstance(
                    gamma, (int, float, np.integer, np.floating, sp.Basic))
                    or not np.isfinite(float(gamma)) or float(gamma) < 0):
                raise ValueError(f"gamma (EF coefficient) must be a finite number >= 0, "
                                 f"got {gamma!r}")
    if isinstance(beta_v, sp.Basic) and not beta_v.is_number:
        return
    if not (0.0 <= float(beta_v) < 1.0):
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta_v!r}")


def char_poly(beta, tau, ef=False, gamma=None) -> sp.Poly:
    r"""Characteristic polynomial of the delayed EMA-momentum recursion on f = h x²/2, as a
    sympy ``Poly`` in z whose coefficients contain the symbol ``c`` = ηh (and β if symbolic):
    τ = 0: :math:`(z-1)(z-\beta) + c(1-\beta)z`; τ ≥ 1:
    :math:`z^{\tau-1}(z-1)(z-\beta) + c(1-\beta)`; EF:
    :math:`z^\tau(z-1)(z-\beta) + c(1-\beta)(2z-1)`; EF(γ):
    :math:`z^\tau(z-1)(z-\beta) + c(1-\beta)((1+\gamma)z - \gamma)`.
    """
    _validate(beta, tau, ef, gamma)
    b = sp.nsimplify(beta) if not isinstance(beta, sp.Basic) else beta
    g = None if gamma is None else (
        gamma if isinstance(gamma, sp.Basic) else sp.nsimplify(gamma))
    return sp.Poly(sp.expand(char_poly_expr(b, tau, ef, gamma=g)), z)


def state_matrix(beta_v, tau: int, ef: bool, cv=c, gamma=None) -> sp.Matrix:
    r"""The (τ+2)×(τ+2) matrix A with :math:`s_{t+1} = A s_t`,
    :math:`s_t = (x_t, \dots, x_{t-\tau}, \mu_{t-1})`; EF(γ) (``gamma``, None = 1):
    :math:`x_{t+1} = x_t - (1+\gamma)\mu_t + \gamma\mu_{t-1}`."""
    n = tau + 2
    A = sp.zeros(n, n)
    ix_old = tau  # index of x_{t-τ}
    im = tau + 1  # index of μ_{t-1}
    # μ_t = β μ_{t-1} + (1-β) c x_{t-τ}
    mu = {im: beta_v, ix_old: (1 - beta_v) * cv}
    if ef and tau >= 1:
        # x_{t+1} = x_t - (1+γ) μ_t + γ μ_{t-1}  (γ = 1: x_t - 2 μ_t + μ_{t-1})
        gm = 1 if gamma is None else gamma
        row = {0: 1}
        for key, val in mu.items():
            row[key] = row.get(key, 0) - (1 + gm) * val
        row[im] = row.get(im, 0) + gm
    else:
        row = {0: 1}
        for key, val in mu.items():
            row[key] = row.get(key, 0) - val
    for key, val in row.items():
        A[0, key] += val
    for i in range(1, tau + 1):
        A[i, i - 1] = 1
    for key, val in mu.items():
        A[im, key] += val
    return A


# --------------------------------------------------------------------------- closed forms
def critical_p_expr(tau: int, ef: bool):
    """p* = c*(1−β) in closed form (sympy, in β), or None for (τ=2, EF) (implicit root)."""
    if tau == 0:
        return 2 * (1 + beta)
    if tau == 1 and not ef:
        return 1 - beta
    if tau == 2 and not ef:
        return (sp.sqrt(beta**2 - 2 * beta + 5) - 1 - beta) / 2
    if tau == 1 and ef:
        return (sp.sqrt((1 - beta) * (5 - beta)) - (1 - beta)) / 2
    return None


def critical_step_expr(tau: int, ef: bool = False):
    r"""c*(β) as a sympy expression where a closed form exists (τ ≤ 2, and not (τ = 2, EF));
    None otherwise."""
    pe = critical_p_expr(tau, ef)
    if pe is None:
        return None
    if tau == 0:
        return 2 * (1 + beta) / (1 - beta)
    if tau == 1 and not ef:
        return sp.Integer(1)
    if tau == 1 and ef:
        return (sp.sqrt((5 - beta) / (1 - beta)) - 1) / 2
    return pe / (1 - beta)


def ef2_cubic() -> sp.Expr:
    """φ(p) = p³ + (3−β)p² + β(2−β)p − (1−β): p* = c*(1−β) for (τ=2, EF) is its positive root."""
    return p**3 + (3 - beta) * p**2 + beta * (2 - beta) * p - (1 - beta)


# --------------------------------------------------------------------------- numerics
def _QR(beta_v: float, tau: int, ef: bool, gamma=None):
    """numpy coefficient arrays (highest degree first) of Q and R with P = Q + c·R."""
    base = np.polymul([1.0, -1.0], [1.0, -beta_v])
    if tau == 0:
        return base, np.array([1.0 - beta_v, 0.0])
    if not ef:
        return np.concatenate([base, np.zeros(tau - 1)]), np.array([1.0 - beta_v])
    if gamma is None:
        return np.concatenate([base, np.zeros(tau)]), (1.0 - beta_v) * np.array([2.0, -1.0])
    g = float(gamma)
    return np.concatenate([base, np.zeros(tau)]), (1.0 - beta_v) * np.array([1.0 + g, -g])


def _coeffs(beta_v: float, cv: float, tau: int, ef: bool, gamma=None) -> np.ndarray:
    Q, R = _QR(beta_v, tau, ef, gamma)
    return np.polyadd(Q, cv * R)


def spectral_radius(beta, c, tau, ef=False, gamma=None) -> float:
    """max |z| over the roots of the characteristic polynomial at ηh = c (float64)."""
    _validate(beta, tau, ef, gamma)
    return float(np.max(np.abs(np.roots(_coeffs(float(beta), float(c), tau, ef, gamma)))))


def is_stable(beta, c, tau, ef=False, gamma=None) -> bool:
    """True when the recursion at ηh = c is asymptotically stable (spectral radius < 1)."""
    return spectral_radius(beta, c, tau, ef, gamma) < 1.0


def _trim_leading(H: np.ndarray, rel: float = 1e-13) -> np.ndarray:
    """Drop leading coefficients that are zero to working precision (|h| ≤ rel·max|H|): they
    only carry roots near infinity (e.g. γ ≈ 1e−300), never unit-circle ones."""
    H = np.asarray(H, dtype=float)
    scale = float(np.max(np.abs(H))) if H.size else 0.0
    i = 0
    while i < len(H) - 1 and abs(H[i]) <= rel * scale:
        i += 1
    return H[i:]


def critical_step_numeric(beta, tau, ef=False, gamma=None) -> float:
    r"""c* by the root locus (D-decomposition): P = Q + cR has a root on |z| = 1 only where
    c = −Q(z)/R(z) is real, i.e. at the unit-circle roots of z^n(Q(z)R(1/z) − Q(1/z)R(z));
    c* is the smallest positive such c (for small c > 0 the recursion is stable: the root
    at 1 moves inside, the τ-fold root at 0 stays near 0)."""
    _validate(beta, tau, ef, gamma)
    b = float(beta)
    Q, R = _QR(b, tau, ef, gamma)
    n = max(len(Q), len(R)) - 1
    Qp = np.concatenate([np.zeros(n + 1 - len(Q)), Q])
    Rp = np.concatenate([np.zeros(n + 1 - len(R)), R])
    H = np.polysub(np.polymul(Qp, Rp[::-1]), np.polymul(Qp[::-1], Rp))
    H = _trim_leading(H)
    cands = []
    for zz in np.roots(H):
        if abs(abs(zz) - 1.0) > 1e-6:
            continue
        zz = zz / abs(zz)
        if abs(np.polyval(R, zz)) < 1e-14:
            continue
        cv = -np.polyval(Q, zz) / np.polyval(R, zz)
        # a crossing at p = c(1−β) ≲ 1e−14 is z = 1 itself (c = 0) seen through rounding:
        # as β → 1 the roots of H at z ≈ 1, β blur into the unit circle
        if abs(cv.imag) <= 1e-7 * max(1.0, abs(cv)) and cv.real > 1e-9 \
                and cv.real * (1.0 - b) > 1e-14:
            cands.append(cv.real)
    if not cands:
        return float("inf")
    return float(min(cands))


def critical_step(beta, tau, ef=False, gamma=None) -> float:
    r"""c*(β, τ, EF) = sup{c : stable for every ηh ∈ (0, c)} for f = h x²/2 with EMA momentum
    β and delay τ (see the module docstring for the closed forms). Closed forms for τ ≤ 2
    ((τ=2, EF): the positive root of the cubic φ), root locus otherwise. EF with τ = 0 is
    the plain method (the delay core does not correct synchronous steps).

    ``gamma`` (with ``ef=True``): EF(γ), :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`;
    None or 1 is the paper's EF, 0 is no correction. τ = 1: the closed form of
    :func:`critical_step_gamma_expr`, :math:`c^* = \min(p_f, p_g)/(1-\beta)`; τ ≥ 2: the root
    locus."""
    _validate(beta, tau, ef, gamma)
    b = float(beta)
    if tau == 0:
        return 2.0 * (1.0 + b) / (1.0 - b)
    if gamma is not None and float(gamma) == 1.0:
        gamma = None
    if gamma is not None:
        g = float(gamma)
        if g == 0.0:
            return critical_step(b, tau, False)
        if tau == 1:
            pf, pg = _pf_pg(b, g)
            return min(pf, pg) / (1.0 - b)
        return critical_step_numeric(b, tau, True, g)
    if tau == 1 and not ef:
        return 1.0
    if tau == 2 and not ef:
        return (np.sqrt(b * b - 2 * b + 5) - 1 - b) / (2 * (1 - b))
    if tau == 1 and ef:
        return (np.sqrt((5 - b) / (1 - b)) - 1) / 2
    if tau == 2 and ef:
        roots = np.roots([1.0, 3.0 - b, b * (2.0 - b), -(1.0 - b)])
        pos = [x.real for x in roots if abs(x.imag) < 1e-12 and x.real > 0]
        return float(min(pos)) / (1.0 - b)
    return critical_step_numeric(b, tau, ef)


def simulate(beta, c, tau, ef=False, steps=1000, x0=1.0, init="zero", gamma=None):
    r"""Run the recursion exactly as the production delay core does (float64): τ idle start
    steps, EF memory :math:`u_{-1} = 0`; returns x₀, …, x_steps (h = 1, η = c). ``init="zero"``:
    the momentum buffer starts at 0 (Muon: μ₀ = (1−β)c·x₀); ``init="first"``: torch SGD, whose
    first step sets the buffer to the gradient itself (μ₀ = c·x₀). Asymptotic stability does
    not depend on ``init``. ``gamma``: EF(γ),
    :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`."""
    _validate(beta, tau, ef, gamma)
    if init not in ("zero", "first"):
        raise ValueError(f"init must be 'zero' (Muon) or 'first' (torch SGD), got {init!r}")
    b, cv = float(beta), float(c)
    xs = [float(x0)]
    mu = 0.0
    u_prev = 0.0
    for t in range(steps):
        x = xs[-1]
        if t < tau:
            xs.append(x)
            continue
        if t == tau and init == "first":
            mu = cv * xs[t - tau]
        else:
            mu = b * mu + (1.0 - b) * cv * xs[t - tau]
        u = mu
        if ef and tau >= 1 and gamma is not None:
            g = float(gamma)
            xs.append(x - (1.0 + g) * u + g * u_prev)
        elif ef and tau >= 1:
            xs.append(x - 2.0 * u + u_prev)
        else:
            xs.append(x - u)
        u_prev = u
    return np.array(xs)


def tightness_instance(beta, tau, ef=False, h=1.0, margin=0.05, gamma=None):
    r"""The exact tightness instance of T3: f = h x²/2 at η = (1 ∓ margin)·c*/h.

    Returns c_star, eta_star = c*/h, eta_stable, eta_unstable, the spectral radii there, and
    a step count after which |x| has shrunk (grown) by a factor 1e6 at those step sizes."""
    cs = critical_step(beta, tau, ef, gamma)
    if not h > 0:
        raise ValueError(f"h (curvature) must be > 0, got {h!r}")
    if not 0 < margin < 1:
        raise ValueError(f"margin must lie in (0, 1), got {margin!r}")
    lo, hi = (1 - margin) * cs, (1 + margin) * cs
    r_lo = spectral_radius(beta, lo, tau, ef, gamma)
    r_hi = spectral_radius(beta, hi, tau, ef, gamma)
    n_lo = int(np.ceil(np.log(1e6) / max(1e-12, -np.log(r_lo)))) + 10 * (tau + 2)
    n_hi = int(np.ceil(np.log(1e6) / max(1e-12, np.log(r_hi)))) + 10 * (tau + 2)
    return {"beta": float(beta), "tau": tau, "ef": bool(ef), "gamma": gamma, "h": h,
            "c_star": cs,
            "eta_star": cs / h, "eta_stable": lo / h, "eta_unstable": hi / h,
            "rho_stable": r_lo, "rho_unstable": r_hi, "steps": max(n_lo, n_hi)}


# --------------------------------------------------------------------------- EF(γ)
#: the EF coefficient γ of EF(γ): :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`
gamma_sym = sp.Symbol("gamma", nonnegative=True)


def ef_gamma_f(pv=p, gv=gamma_sym, bv=beta):
    r"""f(p, γ) = γ²p² + (1−γβ)p − (1−β): δ₂ = f·g for τ = 1, EF(γ) (the binding factor)."""
    return gv**2 * pv**2 + (1 - gv * bv) * pv - (1 - bv)


def ef_gamma_g(pv=p, gv=gamma_sym, bv=beta):
    r"""g(p, γ) = γ²p² − (1−γβ)p − (1+β): the other factor of δ₂ for τ = 1, EF(γ)."""
    return gv**2 * pv**2 - (1 - gv * bv) * pv - (1 + bv)


def critical_p_gamma_exprs():
    r""":math:`(p_f, p_g)`: the positive roots of f and g in p (τ = 1, EF(γ)), rationalised so
    that γ = 0 is allowed:

    .. math::
        p_f = \frac{2(1-\beta)}{(1-\gamma\beta) + \sqrt{(1-\gamma\beta)^2 + 4\gamma^2(1-\beta)}},

        p_g = \frac{2(1+\beta)}{\sqrt{(1-\gamma\beta)^2 + 4\gamma^2(1+\beta)} - (1-\gamma\beta)}.
    """
    a1 = 1 - gamma_sym * beta
    pf = 2 * (1 - beta) / (a1 + sp.sqrt(a1**2 + 4 * gamma_sym**2 * (1 - beta)))
    pg = 2 * (1 + beta) / (sp.sqrt(a1**2 + 4 * gamma_sym**2 * (1 + beta)) - a1)
    return pf, pg


def critical_step_gamma_expr():
    r""":math:`c^*(\beta, 1, \gamma) = \min(p_f, p_g)/(1-\beta)` (τ = 1, EF(γ), γ ≥ 0)."""
    pf, pg = critical_p_gamma_exprs()
    return sp.Min(pf, pg) / (1 - beta)


def _pf_pg(b: float, g: float) -> tuple[float, float]:
    a1 = 1.0 - g * b
    pf = 2.0 * (1.0 - b) / (a1 + np.sqrt(a1 * a1 + 4.0 * g * g * (1.0 - b)))
    den = np.sqrt(a1 * a1 + 4.0 * g * g * (1.0 + b)) - a1
    pg = 2.0 * (1.0 + b) / den if den > 0 else float("inf")
    return float(pf), float(pg)


def _critical_p_at(b: float, tau: int, g: float) -> float:
    """p* = c*(1−β) of EF(γ) by the root locus (τ ≥ 1); works at β = 1 too."""
    Q = np.concatenate([np.polymul([1.0, -1.0], [1.0, -b]), np.zeros(tau)])
    R = np.array([1.0 + g, -g])
    n = len(Q) - 1
    Rp = np.concatenate([np.zeros(n + 1 - len(R)), R])
    H = _trim_leading(np.polysub(np.polymul(Q, Rp[::-1]), np.polymul(Q[::-1], Rp)))
    best = float("inf")
    for zz in np.roots(H):
        if abs(abs(zz) - 1.0) > 1e-6:
            continue
        zz = zz / abs(zz)
        den = np.polyval(Rp, zz)
        if abs(den) < 1e-14:
            continue
        v = -np.polyval(Q, zz) / den
        if abs(v.imag) <= 1e-7 * max(1.0, abs(v)) and v.real > 1e-12:
            best = min(best, float(v.real))
    return best


def _maximise_p(b: float, tau: int, hi: float | None = None,
                lo: float = 0.0) -> tuple[float, float]:
    """argmax_{γ ∈ [lo, hi]} p*(β, τ, γ) (grid of 401 points, then golden section to 1e-10)."""
    hi = 3.0 * tau + 3.0 if hi is None else hi
    grid = np.linspace(lo, hi, 401)
    vals = np.array([_critical_p_at(b, tau, g) for g in grid])
    i = int(np.argmax(vals))
    a, d = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
    r = (np.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = d - r * (d - a), a + r * (d - a)
    f1, f2 = _critical_p_at(b, tau, x1), _critical_p_at(b, tau, x2)
    while d - a > 1e-10:
        if f1 >= f2:
            d, x2, f2 = x2, x1, f1
            x1 = d - r * (d - a)
            f1 = _critical_p_at(b, tau, x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + r * (d - a)
            f2 = _critical_p_at(b, tau, x2)
    g = 0.5 * (a + d)
    pg = _critical_p_at(b, tau, g)
    if pg < vals[i]:
        return float(grid[i]), float(vals[i])
    return float(g), float(pg)


def optimal_gamma(beta, tau) -> tuple[float, float]:
    r"""(γ*, c*(β, τ, γ*)): the EF coefficient that maximises the critical step, and that step.

    τ = 1: γ* = 2β/(2−β)², c* = (2−β)²/(4(1−β)) (result ``T3[tau=1, EF(gamma*)]``, proved:
    unique maximiser over all real γ). τ ≥ 2: the closed form of ``T3[EF(gamma*), every tau]``
    (:func:`theory.ef_gamma_closed.optimal_gamma_closed`: the first-lobe maximum of
    :math:`2(1-u)(U_\tau(u) - \beta U_{\tau-1}(u))`); :func:`optimal_gamma_search` is the
    independent numeric maximisation and :func:`certify_optimal_gamma` checks that no real γ
    whatever is stable at a step 1e-6 above it. τ = 0: :math:`(0, 2(1+\beta)/(1-\beta))`
    (nothing to correct)."""
    _validate(beta, tau, True)
    b = float(beta)
    if tau == 0:
        return 0.0, 2.0 * (1.0 + b) / (1.0 - b)
    if tau == 1:
        return 2.0 * b / (2.0 - b) ** 2, (2.0 - b) ** 2 / (4.0 * (1.0 - b))
    from .ef_gamma_closed import optimal_gamma_closed

    return optimal_gamma_closed(b, int(tau))


def optimal_gamma_search(beta, tau) -> tuple[float, float]:
    r"""(γ*, c*) by numeric maximisation of the exact root locus c*(γ) over γ ∈ [0, 3τ+3]
    (grid, then golden section): the check of the closed form, independent of it. Near the
    maximum c*(γ) is flat, so γ is found to about 1e-6, c* to about 1e-12."""
    _validate(beta, tau, True)
    b = float(beta)
    if tau == 0:
        return 0.0, 2.0 * (1.0 + b) / (1.0 - b)
    g, pv = _maximise_p(b, tau)
    return g, pv / (1.0 - b)


def _gamma_boundaries(b: float, tau: int, pv: float) -> np.ndarray:
    """The real γ at which z^τ(z−1)(z−β) + p((1+γ)z − γ) has a root on |z| = 1 (p fixed):
    γ = −A(z)/B(z) real at the unit-circle roots of z^n(A(z)B(1/z) − A(1/z)B(z)),
    A = z^τ(z−1)(z−β) + pz, B = p(z−1)."""
    A = np.polyadd(np.concatenate([np.polymul([1.0, -1.0], [1.0, -b]), np.zeros(tau)]),
                   [pv, 0.0])
    n = len(A) - 1
    B = np.concatenate([np.zeros(n - 1), [pv, -pv]])
    H = _trim_leading(np.polysub(np.polymul(A, B[::-1]), np.polymul(A[::-1], B)))
    out = []
    for zz in np.roots(H):
        if abs(abs(zz) - 1.0) > 1e-6:
            continue
        zz = zz / abs(zz)
        den = np.polyval(B, zz)
        if abs(den) < 1e-12:
            continue
        v = -np.polyval(A, zz) / den
        if abs(v.imag) <= 1e-7 * max(1.0, abs(v)):
            out.append(float(v.real))
    return np.unique(np.round(np.array(out), 12))


def stabilising_gammas(beta, tau, pv) -> list[tuple[float, float]]:
    r"""The real γ (an open interval list) for which EF(γ) is stable at p = ηh(1−β) = ``pv``:
    D-decomposition in γ (the number of roots in ∣z∣ < 1 is constant between consecutive
    boundary values of ``_gamma_boundaries``, so one test point per interval decides it)."""
    b = float(beta)
    bounds = list(_gamma_boundaries(b, tau, float(pv)))
    edges = [-np.inf, *bounds, np.inf]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        if np.isinf(lo) and np.isinf(hi):
            t = 0.0
        elif np.isinf(lo):
            t = hi - 1.0
        elif np.isinf(hi):
            t = lo + 1.0
        else:
            t = 0.5 * (lo + hi)
        Q = np.concatenate([np.polymul([1.0, -1.0], [1.0, -b]), np.zeros(tau)])
        coeffs = np.polyadd(Q, float(pv) * np.array([1.0 + t, -t]))
        if np.max(np.abs(np.roots(coeffs))) < 1.0:
            out.append((float(lo), float(hi)))
    return out


def certify_optimal_gamma(beta, tau, rel: float = 1e-6) -> dict:
    r"""Certificate that γ* of :func:`optimal_gamma` maximises c*(β, τ, γ) over all real γ, to
    relative accuracy ``rel``: (i) c*(γ*) is attained (root locus at γ*); (ii) at
    p̄ = (1+rel)·p*(γ*) no real γ gives a stable recursion (:func:`stabilising_gammas` is
    empty), so c*(β, τ, γ) ≤ p̄/(1−β) for every γ (stability on (0, c) needs stability at
    every point of it). Returns the numbers and ``certified`` (bool)."""
    g, cs = optimal_gamma(beta, tau)
    b = float(beta)
    pstar = cs * (1.0 - b)
    probe = (1.0 + rel) * pstar
    stab = stabilising_gammas(b, tau, probe) if tau >= 1 else []
    below = stabilising_gammas(b, tau, (1.0 - rel) * pstar) if tau >= 1 else []
    return {"beta": b, "tau": tau, "gamma_star": g, "c_star": cs, "p_star": pstar,
            "p_probe": probe, "stable_gammas_at_probe": stab,
            "stable_gammas_below": below,
            "certified": tau == 0 or (not stab and any(lo < g < hi for lo, hi in below))}


def beta_one_limit(tau: int) -> tuple[float, float]:
    r"""(lim γ*, lim (1−β)c*) as β → 1: the first-lobe maximum of
    :math:`2(1-u)(U_\tau(u) - U_{\tau-1}(u))` (:func:`theory.ef_gamma_closed.beta_one_limits`;
    the polynomial is continuous in β). The limit polynomial
    :math:`z^\tau(z-1)^2 + p((1+\gamma)z - \gamma)` has small p stable iff γ > τ: the root near
    1 is :math:`z = 1 + i\sqrt{p} + p(\tau-1-\gamma)/2 + O(p^{3/2})`, so
    :math:`\lvert z\rvert^2 = 1 + p(\tau-\gamma) + O(p^{3/2})`. τ = 1: (2, 1/4)."""
    if tau == 1:
        return 2.0, 0.25
    from .ef_gamma_closed import beta_one_limits

    return beta_one_limits(tau)


def ef_growth_table(taus=(1, 2, 3), betas=(0.9, 0.95, 0.99)) -> list[dict]:
    r"""c* of EF(γ) for γ = 1 (the paper's), γ = τ and γ = γ*, per delay τ and momentum β
    (float64, exact root locus / closed forms): where the stable range grows with β and
    where it does not."""
    rows = []
    for tau in taus:
        for b in betas:
            gs, cs = optimal_gamma(b, tau)
            rows.append({"tau": tau, "beta": b, "c_ef": critical_step(b, tau, True),
                         "c_gamma_tau": critical_step(b, tau, True, gamma=float(tau)),
                         "gamma_star": gs, "c_gamma_star": cs})
    return rows


def ef_growth_checks() -> list[tuple[str, bool, str]]:
    r"""The scope of "EF's stable range grows with β", checked in float64 on
    β ∈ {0.9, 0.95, 0.99, 0.999}: γ = 1 grows at τ = 1 and stays below 1 (τ = 2) and 1/2 + 0.05
    (τ = 3); γ = τ and γ* grow at τ = 1, 2, 3, and γ*'s :math:`(1-\beta)c^*` approaches
    :math:`K_\tau` (:func:`beta_one_limit`) within 2 %."""
    betas = (0.9, 0.95, 0.99, 0.999)
    out = []
    for tau in (1, 2, 3):
        rows = ef_growth_table((tau,), betas)
        c1 = [r["c_ef"] for r in rows]
        ct = [r["c_gamma_tau"] for r in rows]
        cg = [r["c_gamma_star"] for r in rows]
        inc = all(a < b for a, b in zip(c1, c1[1:]))
        if tau == 1:
            out.append(("EF grows with beta, tau=1", inc, f"c* = {c1}"))
        else:
            cap = 1.0 if tau == 2 else 0.55
            out.append((f"EF bounded by {cap}, tau={tau}", max(c1) < cap, f"c* = {c1}"))
        out.append((f"EF(gamma=tau) grows, tau={tau}",
                    all(a < b for a, b in zip(ct, ct[1:])), f"c* = {ct}"))
        k = beta_one_limit(tau)[1]
        last = cg[-1] * (1.0 - betas[-1])
        out.append((f"EF(gamma*) grows like K/(1-beta), tau={tau}",
                    all(a < b for a, b in zip(cg, cg[1:])) and abs(last - k) < 0.02 * k,
                    f"c* = {cg}, (1-beta)c* at 0.999 = {last:.5f}, K = {k:.5f}"))
    return out


# --------------------------------------------------------------------------- proofs
def _common_steps(tau: int, ef: bool) -> tuple[list[Step], list[sp.Expr]]:
    P = char_poly_expr(beta, tau, ef, var=p)
    A = state_matrix(beta, tau, ef, cv=p / (1 - beta))
    extra = (tau + 2) - sp.degree(P, z)
    lam = sp.Symbol("lambda")
    s1 = Step("SC1 characteristic polynomial", "identity",
              eq(A.charpoly(lam).as_expr().subs(lam, z), z**extra * P),
              r"$\det(zI - A)$ for the state $(x_t, \dots, x_{t-\tau}, \mu_{t-1})$, $c = "
              r"p/(1-\beta)$")
    s2 = Step("SC2 Schur-Cohn criterion", "cited", ge(sp.Symbol(r"\delta_k"), 0),
              r"all roots lie in $|z|<1$ iff every leading coefficient $\delta_k$ of the "
              "successive Schur transforms $TP = (a_n P - a_0 P^*)/z$ is $> 0$ (Schur 1917, Cohn "
              "1922; Marden, *Geometry of Polynomials*, §42–43)")
    return [s1, s2], schur_cohn(P)


def _factored(tau: int, ef: bool) -> list[sp.Expr]:
    """Hand factorisations of the δ_k (checked in step SC3)."""
    b, q_ = beta, p
    if tau == 0:
        return [(1 - b) * (1 + b), q_ * (1 - b) ** 2 * (2 + 2 * b - q_)]
    if tau == 1 and not ef:
        return [(1 - b - q_) * (1 + b + q_), q_ * (b + q_ - 1) ** 2 * (2 * b + q_ + 2)]
    g2 = q_**2 + (1 + b) * q_ + b - 1
    if tau == 2 and not ef:
        return [(1 - q_) * (1 + q_), (q_**2 - (1 + b) * q_ - (1 + b)) * g2,
                q_ * (q_ - 1) * (q_ + 1) * (q_ - 2 - 2 * b) * g2**2]
    g1 = q_**2 + (1 - b) * q_ - (1 - b)
    if tau == 1 and ef:
        return [(1 - q_) * (1 + q_), g1 * (q_**2 - (1 - b) * q_ - (1 + b)),
                -q_ * (q_ - 1) * (q_ + 1) * (2 * b + 3 * q_ + 2) * g1**2]
    phi = ef2_cubic()
    psi = q_**3 + (b - 3) * q_**2 - b**2 * q_ + b + 1
    h1 = q_**2 + (1 - b) * q_ - 1
    h2 = q_**2 - (1 - b) * q_ - 1
    return [(1 - q_) * (1 + q_), h1 * h2, (q_ - 1) * (q_ + 1) * psi * phi,
            -q_ * (q_ - 1) ** 2 * (q_ + 1) ** 2 * (3 * q_ - 2 - 2 * b) * h1 * h2 * phi**2]


def _case_steps(tau: int, ef: bool) -> list[Step]:
    steps, deltas = _common_steps(tau, ef)
    fac = _factored(tau, ef)
    for i, (dk, fk) in enumerate(zip(deltas, fac), start=1):
        steps.append(Step(rf"SC3.{i} $\delta_{i}$ factorised", "identity", eq(dk, fk)))
    pstar = critical_p_expr(tau, ef)
    b = beta
    if tau == 0:
        steps += [
            Step(r"SC4 $\delta_1 > 0$", "inequality", ge(fac[0], 0), domain=DOMAIN_P),
            Step(r"SC5 $\delta_2 > 0$ iff $p < 2(1+\beta)$", "identity",
                 eq(fac[1], p * (1 - b) ** 2 * (pstar - p)),
                 r"$p\,(1-\beta)^2 > 0$, so the sign is that of $p^* - p$"),
        ]
    elif tau == 1 and not ef:
        steps += [
            Step(r"SC4 $\delta_1 > 0$ iff $p < 1 - \beta$", "identity",
                 eq(fac[0], (pstar - p) * (1 + b + p)), r"$1 + \beta + p > 0$"),
            Step(r"SC5 $\delta_2 \ge 0$, zero only at $p = 1 - \beta$", "inequality", ge(fac[1], 0),
                 domain=DOMAIN_P),
        ]
    elif tau == 2 and not ef:
        g2 = p**2 + (1 + b) * p + b - 1
        steps += _root_steps(g2, pstar, r"$g = p^2 + (1+\beta)p + \beta - 1$")
        steps += [
            Step("SC8 $p^* < 1$", "inequality", le(pstar, 1)),
            Step(r"SC9 first factor of $\delta_2 < 0$ on $(0,1)$", "inequality",
                 le(p**2 - (1 + b) * p - (1 + b), 0), domain=DOMAIN_P01),
            Step(r"SC10 $\delta_3 \ge 0$ on $(0,1)$", "inequality",
                 ge(p * (1 - p) * (1 + p) * (2 + 2 * b - p), 0), domain=DOMAIN_P01,
                 note=r"$\delta_3 = p(p-1)(p+1)(p-2-2\beta)\,g^2 = p(1-p)(1+p)(2+2\beta-p)\,g^2$"),
        ]
    elif tau == 1 and ef:
        g1 = p**2 + (1 - b) * p - (1 - b)
        steps += _root_steps(g1, pstar, r"$g = p^2 + (1-\beta)p - (1-\beta)$")
        steps += [
            Step("SC8 $p^* < 1$", "inequality", le(pstar, 1)),
            Step(r"SC9 second factor of $\delta_2 < 0$ on $(0,1)$", "inequality",
                 le(p**2 - (1 - b) * p - (1 + b), 0), domain=DOMAIN_P01),
            Step(r"SC10 $\delta_3 \ge 0$ on $(0,1)$", "inequality",
                 ge(p * (1 - p) * (1 + p) * (2 * b + 3 * p + 2), 0), domain=DOMAIN_P01),
            Step("SC11 closed form in $c$", "identity",
                 eq(pstar / (1 - b), critical_step_expr(1, True)), domain=DOMAIN_P),
            *_ef_asymptote_steps(),
        ]
    else:
        steps += _ef2_steps()
    glue = {
        (0, False): r"$\delta_1 > 0$ always; $\delta_2 > 0$ iff $0 < p < 2(1+\beta)$: "
                    r"$c^* = 2(1+\beta)/(1-\beta)$",
        (1, False): r"$\delta_1 > 0$ iff $p < 1-\beta$, and $\delta_2 > 0$ there: "
                    r"stable iff $c < 1$",
        (2, False): r"on $(0, p^*)$: $\delta_1 > 0$ ($p^* < 1$), "
                    r"$\delta_2 = (\text{neg})\cdot(g<0) > 0$, $\delta_3 > 0$; "
                    r"$\delta_2 = 0$ at $p^*$: $c^* = p^*/(1-\beta)$",
        (1, True): r"on $(0, p^*)$: $\delta_1 > 0$, $\delta_2 = (g<0)\cdot(\text{neg}) > 0$, "
                   r"$\delta_3 > 0$; $\delta_2 = 0$ at $p^*$",
        (2, True): r"on $(0, p^*)$: $\delta_1 > 0$ ($p^* < 1$), "
                   r"$\delta_2 = h_1 h_2 > 0$ ($p^* < p_1$), "
                   r"$\delta_3 = (\text{neg})\,\psi\varphi > 0$ ($\psi > 0 > \varphi$), "
                   r"$\delta_4 > 0$ ($p^* < 2/3$); $\delta_3 = 0$ at $p^*$",
    }[(tau, ef)]
    steps.append(Step("SC12 sign bookkeeping", "reasoning",
                      eq(sp.Symbol("c^*"), sp.Symbol("p^*") / (1 - beta)),
                      "combination of the verified sign facts above with SC2: " + glue))
    return steps


def _root_steps(g: sp.Expr, pstar: sp.Expr, name: str) -> list[Step]:
    return [
        Step("SC5 $g(p^*) = 0$", "identity", eq(g.subs(p, pstar), 0), name),
        Step("SC6 $g$ increases in $p > 0$", "monotonicity", ge(sp.diff(g, p), 0),
             mono=(g, p, 1, None), domain=DOMAIN_P),
        Step("SC7 $g(0) < 0$", "inequality", le(g.subs(p, 0), 0), domain=DOMAIN_P),
    ]


def _ef_asymptote_steps() -> list[Step]:
    r"""c*_EF(β, 1) = 1/√(1−β) − 1/2 + r, 0 ≤ r ≤ √(1−β)/8, written in s = √(1−β) > 0."""
    s_ = sp.Symbol("s", positive=True)
    ce = critical_step_expr(1, True).subs(beta, 1 - s_**2)
    rem = ce - (1 / s_ - sp.Rational(1, 2))
    return [
        Step(r"SC13 $c^* - (1/\sqrt{1-\beta} - 1/2) \ge 0$", "inequality", ge(rem, 0),
             r"$s = \sqrt{1-\beta}$: $c^* = (\sqrt{4+s^2}/s - 1)/2$, so the remainder is "
             r"$(\sqrt{4+s^2} - 2)/(2s)$", domain={}),
        Step(r"SC14 $c^* - (1/\sqrt{1-\beta} - 1/2) \le \sqrt{1-\beta}/8$", "inequality",
             le(rem, s_ / 8),
             r"so $c^*\sqrt{1-\beta} \to 1$ and $c^* = 1/\sqrt{1-\beta} - 1/2 + "
             r"O(\sqrt{1-\beta})$ as $\beta \to 1$ (not $1/(2\sqrt{1-\beta})$)",
             domain={}),
    ]


def _ef2_steps() -> list[Step]:
    b = beta
    phi = ef2_cubic()
    psi = p**3 + (b - 3) * p**2 - b**2 * p + b + 1
    h1 = p**2 + (1 - b) * p - 1
    dd = sp.Symbol("d", positive=True)  # d = 1 - beta
    tt, ss = sp.Symbol("t", nonnegative=True), sp.Symbol("s", nonnegative=True)
    rem = 2 - dd + p * (2 - 2 * dd - dd**2)
    return [
        Step(r"SC5 $\varphi$ increases in $p > 0$", "monotonicity", ge(sp.diff(phi, p), 0),
             mono=(phi, p, 1, None), domain=DOMAIN_P),
        Step(r"SC6 $\varphi(0) < 0$", "inequality", le(phi.subs(p, 0), 0), domain=DOMAIN_P),
        Step(r"SC7 $\varphi(2/3) > 0$, so $p^* < 2/3 \le (2+2\beta)/3$", "inequality",
             ge(phi.subs(p, sp.Rational(2, 3)), 0), domain=DOMAIN_P),
        Step(r"SC8 $\varphi \bmod h_1$", "identity",
             eq(sp.expand(phi.subs(beta, 1 - dd)),
                (p + 2) * (p**2 + dd * p - 1) + rem),
             r"$\varphi = (p+2)\, h_1 + \text{rem}$ with $d = 1 - \beta$"),
        Step(r"SC9 $\text{rem} > 0$ for $p \in (0,1]$: $\varphi(p_1) > 0$, so $p^* < p_1$ (root of "
             "$h_1$)", "inequality",
             ge(rem, 0), domain={p: 1 / (1 + tt), dd: 1 / (1 + ss)}),
        Step("SC10 $h_2 < 0$ on $(0,1)$", "inequality",
             le(p**2 - (1 - b) * p - 1, 0), domain=DOMAIN_P01),
        Step(r"SC11 $\psi + \varphi \ge 0$, so $\psi > -\varphi > 0$ on $(0, p^*)$", "inequality",
             ge(psi + phi, 0), domain=DOMAIN_P01),
        Step("SC11b $h_1$ increases in $p$ ($h_1 < 0$ below its root $p_1$)", "monotonicity",
             ge(sp.diff(h1, p), 0), mono=(h1, p, 1, None), domain=DOMAIN_P),
    ]


_CASES = ((0, False), (1, False), (2, False), (1, True), (2, True))


@cache
def result(tau: int, ef: bool = False) -> Result:
    """The T3 :class:`~theory.assumptions.Result` for one (τ, EF) case (τ ∈ {0,1,2})."""
    if (tau, ef) not in _CASES:
        raise ValueError(f"T3 results exist for (tau, ef) in {_CASES}, got {(tau, ef)!r}; "
                         "use critical_step() for other delays")
    expr = critical_step_expr(tau, ef)
    tag = f"T3[tau={tau}{', EF' if ef else ''}]"
    if expr is None:
        stmt = ef2_cubic()
        quantity = "phi(p); c* = p*/(1-beta) with p* the unique positive root of phi"
        qlatex = r"\varphi(p)"
    else:
        stmt = expr
        quantity = "c*(beta) = sup{c: stable for all eta*h in (0, c)}"
        qlatex = r"c^*(\beta)"
    return Result(
        name=tag,
        title=r"critical $\eta h$ of delayed EMA-momentum GD on $h x^2/2$"
              + (" with EF" if ef else "")
              + (r"; $c^* = p^*/(1-\beta)$, $p^*$ the positive root of $\varphi$"
                 if expr is None else ""),
        quantity=quantity, quantity_latex=qlatex, statement=stmt,
        params=(beta,) if expr is not None else (p, beta),
        steps=_case_steps(tau, ef), assumptions=("quadratic f = h x^2/2",),
        relation="=",
        notes="exact; the tightness instance is the critical step itself")


# --------------------------------------------------------------------------- EF(γ) proofs
def _ef_gamma_charpoly_steps() -> list[Step]:
    """SC1 for EF(γ), τ = 1, 2, 3, with γ a free symbol."""
    lam = sp.Symbol("lambda")
    out = []
    for tau in (1, 2, 3):
        P = char_poly_expr(beta, tau, True, var=p, gamma=gamma_sym)
        A = state_matrix(beta, tau, True, cv=p / (1 - beta), gamma=gamma_sym)
        extra = (tau + 2) - sp.degree(P, z)
        out.append(Step(rf"SC1.{tau} characteristic polynomial, $\tau = {tau}$", "identity",
                        eq(A.charpoly(lam).as_expr().subs(lam, z), z**extra * P),
                        r"$\det(zI - A)$ for $x_{t+1} = x_t - (1+\gamma)\mu_t + \gamma\mu_{t-1}$, "
                        r"state $(x_t, \dots, x_{t-\tau}, \mu_{t-1})$, $c = p/(1-\beta)$"))
    return out


def _sc2() -> Step:
    return Step("SC2 Schur-Cohn criterion", "cited", ge(sp.Symbol(r"\delta_k"), 0),
                r"all roots lie in $|z|<1$ iff every leading coefficient $\delta_k$ of the "
                "successive Schur transforms $TP = (a_n P - a_0 P^*)/z$ is $> 0$ (Schur 1917, "
                "Cohn 1922; Marden, *Geometry of Polynomials*, §42–43)")


def _ef_gamma_tau1_core() -> list[Step]:
    """δ_k of z(z−1)(z−β) + p((1+γ)z − γ) factorised, and what they say."""
    P = char_poly_expr(beta, 1, True, var=p, gamma=gamma_sym)
    d = schur_cohn(P)
    g_, f, gg = gamma_sym, ef_gamma_f(), ef_gamma_g()
    fac = [(1 - g_ * p) * (1 + g_ * p), f * gg,
           p * (1 - g_ * p) * (1 + g_ * p) * (2 + 2 * beta + p * (1 + 2 * g_)) * f**2]
    steps = [Step(rf"SC3.{i} $\delta_{i}$ factorised", "identity", eq(dk, fk),
                  r"$f = \gamma^2p^2 + (1-\gamma\beta)p - (1-\beta)$, "
                  r"$g = \gamma^2p^2 - (1-\gamma\beta)p - (1+\beta)$" if i == 2 else "")
             for i, (dk, fk) in enumerate(zip(d, fac), start=1)]
    steps += [
        Step(r"SC4 $f + g = 2(\gamma^2 p^2 - 1)$", "identity", eq(f + gg, 2 * (g_**2 * p**2 - 1)),
             r"so $\delta_1 > 0$ ($\gamma p < 1$) rules out $f, g$ both $> 0$; with "
             r"$\delta_2 = fg > 0$ and $\delta_3 > 0$ ($f \ne 0$): stable iff $f < 0$ and "
             r"$g < 0$ (any real $\gamma$)"),
        Step("SC5 $f(0) < 0$", "inequality", le(f.subs(p, 0), 0), domain=DOMAIN_P),
        Step("SC6 $g(0) < 0$", "inequality", le(gg.subs(p, 0), 0), domain=DOMAIN_P),
        Step("SC7 $f$ convex in $p$", "inequality", ge(sp.diff(f, p, 2), 0)),
        Step("SC8 $g$ convex in $p$", "inequality", ge(sp.diff(gg, p, 2), 0)),
    ]
    return steps


def _ef_gamma_tau1_steps() -> list[Step]:
    pf, pg = critical_p_gamma_exprs()
    f, gg = ef_gamma_f(), ef_gamma_g()
    steps = [*_ef_gamma_charpoly_steps(), _sc2(), *_ef_gamma_tau1_core()]
    steps += [
        Step("SC9 $f(p_f) = 0$", "identity", eq(f.subs(p, pf), 0), domain=DOMAIN_P),
        Step("SC10 $g(p_g) = 0$", "identity", eq(gg.subs(p, pg), 0), domain=DOMAIN_P),
        Step(r"SC11 $\gamma = 1$ gives T3[$\tau = 1$, EF]", "identity",
             eq(pf.subs(gamma_sym, 1), critical_p_expr(1, True)), domain=DOMAIN_P),
        Step(r"SC12 $\gamma = 0$ gives T3[$\tau = 1$]", "identity",
             eq(pf.subs(gamma_sym, 0), critical_p_expr(1, False))),
        Step("SC13 sign bookkeeping", "reasoning",
             eq(sp.Symbol("c^*"), sp.Min(sp.Symbol("p_f"), sp.Symbol("p_g")) / (1 - beta)),
             r"SC4–SC8 with SC2: $\{f<0\}$ and $\{g<0\}$ are intervals $(0, p_f)$, $(0, p_g)$ "
             r"of $p > 0$ (convex, negative at 0), so the recursion is stable exactly for "
             r"$0 < p < \min(p_f, p_g)$"),
    ]
    return steps


def _ef_gamma_opt_steps() -> list[Step]:
    g_ = gamma_sym
    f, gg = ef_gamma_f(), ef_gamma_g()
    ghat, chat = optimal_gamma_tau1_exprs()
    phat = (1 - beta / 2) ** 2
    steps = [*_ef_gamma_charpoly_steps()[:1], _sc2(), *_ef_gamma_tau1_core()]
    steps += [
        Step(r"SO1 $f = (p\gamma - \beta/2)^2 + p - (1 - \beta/2)^2$", "identity",
             eq(f, (p * g_ - beta / 2) ** 2 + p - phat),
             r"stable $\Rightarrow f < 0 \Rightarrow p < \hat p = (1-\beta/2)^2$ for every real "
             r"$\gamma$: $c^*(\beta, 1, \gamma) \le \hat p/(1-\beta)$"),
        Step(r"SO2 $f(\hat p, \gamma) = (\hat p\gamma - \beta/2)^2$", "identity",
             eq(f.subs(p, phat), (phat * g_ - beta / 2) ** 2),
             r"$> 0$ unless $\gamma = \hat\gamma = \beta/(2\hat p)$: then $p_f(\gamma) < \hat p$, "
             r"so $\hat\gamma$ is the only maximiser"),
        Step(r"SO3 $\hat\gamma = \beta/(2\hat p)$", "identity", eq(ghat, beta / (2 * phat))),
        Step(r"SO4 $f(p, \hat\gamma)$ factorised", "identity",
             eq(f.subs(g_, ghat), (phat - p) * (beta**2 * (phat - p) / (4 * phat**2) - 1))),
        Step(r"SO5 $\beta^2/(4\hat p) \le 1$", "inequality", le(beta**2 / (4 * phat), 1),
             r"so the second factor of SO4 is $< 0$ on $0 < p < \hat p$: $f(p, \hat\gamma) < 0$ "
             r"there", domain=DOMAIN_P),
        Step(r"SO6 $g - f = 2((\gamma\beta - 1)p - \beta)$", "identity",
             eq(gg - f, 2 * ((g_ * beta - 1) * p - beta))),
        Step(r"SO7 $\beta + \hat p(1 - \hat\gamma\beta) \ge 0$", "inequality",
             ge(beta + phat * (1 - ghat * beta), 0),
             r"$a(p) = \beta + p(1-\hat\gamma\beta)$ is linear, $a(0) = \beta \ge 0$, so "
             r"$a \ge 0$ on $[0, \hat p]$ and $g = f - 2a \le f < 0$ there", domain=DOMAIN_P),
        Step(r"SO8 $c^* = \hat p/(1 - \beta)$", "identity", eq(phat / (1 - beta), chat)),
        Step(r"SO9 $\beta \to 1$: $\gamma^* \to 2$", "identity", eq(ghat.subs(beta, 1), 2)),
        Step(r"SO10 $\beta \to 1$: $(1 - \beta)c^* \to 1/4$", "identity",
             eq(sp.cancel(chat * (1 - beta)).subs(beta, 1), sp.Rational(1, 4))),
        Step("SO11 sign bookkeeping", "reasoning", eq(sp.Symbol("c^*"), chat),
             r"SO1: no $(p, \gamma)$ with $p \ge \hat p$ is stable; SO4, SO5, SO7: at "
             r"$\hat\gamma$ every $p \in (0, \hat p)$ has $f < 0$, $g < 0$ (stable by SC4); "
             r"SO2: every other $\gamma$ has $p_f(\gamma) < \hat p$"),
    ]
    return steps


def _virtual_steps() -> list[Step]:
    """T2/T4 for EF(γ): the virtual point v_t = x_t + γ u_{t−1} and its offset."""
    g_ = gamma_sym
    us = sp.symbols("u_0:6")            # u_{t-5}, ..., u_t  (us[5] = u_t)
    x = sp.Symbol("x_t")
    steps = [Step("V1 $v_{t+1} = v_t - u_t$", "identity",
                  eq((x - (1 + g_) * us[5] + g_ * us[4]) + g_ * us[5], (x + g_ * us[4]) - us[5]),
                  r"$x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}$ and $v_t = x_t + \gamma "
                  r"u_{t-1}$: the virtual point runs the undelayed method on the applied updates")]
    for tau in (1, 2, 3):
        # x_{t-tau} = v_{t-tau} - γ u_{t-tau-1};  v_t = v_{t-tau} - Σ_{i=1}^{τ} u_{t-i}
        v_old = sp.Symbol("v_old")
        x_old = v_old - g_ * us[4 - tau]
        v_t = v_old - sum(us[5 - i] for i in range(1, tau + 1))
        off = sum(us[5 - i] - us[4 - tau] for i in range(1, tau + 1)) + (tau - g_) * us[4 - tau]
        steps.append(Step(rf"V2.{tau} offset for $\tau = {tau}$", "identity", eq(x_old - v_t, off),
                          r"$e_t = x_{t-\tau} - v_t = \sum_{i=1}^{\tau}(u_{t-i} - u_{t-\tau-1}) + "
                          r"(\tau - \gamma)\,u_{t-\tau-1}$"))
    for tau in (1, 2, 3):
        # d_k = u_k − u_{k−1} (us[k] − us[k−1]); u_{t−i} − u_{t−τ−1} telescopes into τ+1−i of them
        lhs = sum(us[5 - i] - us[4 - tau] for i in range(1, tau + 1))
        rhs = sum(us[k] - us[k - 1] for i in range(1, tau + 1) for k in range(5 - tau, 6 - i))
        n_terms = sum(1 for i in range(1, tau + 1) for _ in range(5 - tau, 6 - i))
        plural = "s" if n_terms > 1 else ""
        steps.append(Step(rf"V3.{tau} the offset's first sum is {n_terms} drift{plural}, "
                          rf"$\tau = {tau}$", "identity", eq(lhs, rhs),
                          r"$u_{t-i} - u_{t-\tau-1} = \sum_{k=t-\tau}^{t-i}(u_k - u_{k-1})$: "
                          r"$\tau + 1 - i$ drifts each"))
    steps += [
        Step(r"V3 the drift count: $\sum_{i=1}^{\tau}(\tau+1-i) = \tau(\tau+1)/2$", "sum",
             eq(sp.Sum(sp.Symbol("tau") + 1 - j, (j, 1, sp.Symbol("tau"))),
                sp.Symbol("tau") * (sp.Symbol("tau") + 1) / 2),
             r"so $\|\sum_i (u_{t-i} - u_{t-\tau-1})\| \le \tfrac{\tau(\tau+1)}{2}\delta$",
             induction_var=sp.Symbol("tau")),
        Step("V4 triangle inequality", "cited",
             le(TexSymbol(r"\|e_t\|"), sp.Symbol("tau") * (sp.Symbol("tau") + 1) / 2 * drift
                + sp.Abs(sp.Symbol("tau") - g_) * eta),
             r"$\|u_k - u_{k-1}\| \le \delta$, $\|u_k\| \le \eta$; also "
             r"$\|e_t\| \le (\tau + \gamma)\eta$ directly"),
    ]
    return steps


@cache
def ef_gamma_results() -> list[Result]:
    """The EF(γ) results: c*(β, 1, γ) exact, γ*(β, 1) optimal, and the virtual point of
    EF(γ) (T2/T4's offset)."""
    tau_s = sp.Symbol("tau", positive=True, integer=True)
    r1 = Result(
        name="T3[tau=1, EF(gamma)]",
        title=r"critical $\eta h$ of EF($\gamma$), $x_{t+1} = x_t - (1+\gamma)u_t + \gamma "
              r"u_{t-1}$, delay 1, on $h x^2/2$",
        quantity="c*(beta, gamma) = sup{c: stable for all eta*h in (0, c)}",
        quantity_latex=r"c^*(\beta, 1, \gamma)", statement=critical_step_gamma_expr(),
        params=(beta, gamma_sym), steps=_ef_gamma_tau1_steps(),
        assumptions=("quadratic f = h x^2/2",), relation="=",
        legend={gamma_sym: "EF coefficient (1 = the paper's EF, 0 = none)"},
        notes="exact for every gamma >= 0; tau >= 2: critical_step(..., gamma=) by root locus")
    ghat, chat = optimal_gamma_tau1_exprs()
    r2 = Result(
        name="T3[tau=1, EF(gamma*)]",
        title=r"the best EF coefficient for delay 1: $\gamma^* = 2\beta/(2-\beta)^2$, unique "
              r"maximiser of $c^*(\beta, 1, \gamma)$ over all real $\gamma$",
        quantity="max over gamma of c*(beta, 1, gamma)",
        quantity_latex=r"\max_\gamma c^*(\beta, 1, \gamma)", statement=chat,
        params=(beta,), steps=_ef_gamma_opt_steps(),
        assumptions=("quadratic f = h x^2/2",), relation="=",
        legend={sp.Symbol(r"\gamma^*"): r"$2\beta/(2 - \beta)^2 \to 2$ as $\beta \to 1$"},
        notes="c* ~ 1/(4(1-beta)) as beta -> 1 (EF: 1/sqrt(1-beta) - 1/2 + O(sqrt(1-beta)); "
              "none: 1)")
    r3 = Result(
        name="T2[EF(gamma)] virtual point",
        title=r"EF($\gamma$) is an undelayed run of $v_t = x_t + \gamma u_{t-1}$ whose gradient "
              r"is taken at $v_t + e_t$",
        quantity="||e_t|| (the offset that replaces T2's drift term, per block for T4)",
        quantity_latex=r"\|e_t\|",
        statement=tau_s * (tau_s + 1) / 2 * drift + sp.Abs(tau_s - gamma_sym) * eta,
        params=(tau_s, gamma_sym, drift, eta), steps=_virtual_steps(),
        assumptions=("A2",), relation="<=",
        legend={drift: r"max drift $\|u_k - u_{k-1}\|$", eta: r"step ($\|u_k\| \le \eta$)"},
        notes="gamma = tau = 1 is T2 (offset u_{t-1} - u_{t-2}); the Lη term of T1/T2 becomes "
              "L(tau(tau+1)/2 delta + |tau - gamma| eta); T4: per stage s with tau_s, gamma_s")
    return [r1, r2, r3]


def results() -> list[Result]:
    """All T3 results (τ ∈ {0,1,2}, with and without EF), then the EF(γ) results."""
    return [*(result(t, e) for t, e in _CASES), *ef_gamma_results()]


__all__ = ["char_poly", "char_poly_expr", "state_matrix", "schur_cohn", "critical_step",
           "critical_step_expr", "critical_p_expr", "critical_step_numeric", "ef2_cubic",
           "spectral_radius", "is_stable", "simulate", "tightness_instance", "result",
           "results", "gamma_sym", "ef_gamma_f", "ef_gamma_g", "critical_p_gamma_exprs",
           "critical_step_gamma_expr", "optimal_gamma_tau1_exprs", "optimal_gamma",
           "optimal_gamma_search",
           "certify_optimal_gamma", "stabilising_gammas", "beta_one_limit",
           "ef_gamma_results", "ef_growth_table", "ef_growth_checks"]
