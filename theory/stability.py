r"""T3 — exact linear stability of delayed EMA-momentum gradient descent on a quadratic.

Recursion (production semantics, ``formulation="gradient"``): :math:`f(x) = h x^2/2`,
:math:`c = \eta h`, :math:`\mu_t = \eta m_t`:

.. math::
    \mu_t &= \beta\mu_{t-1} + (1-\beta)\,c\,x_{t-\tau},\\
    x_{t+1} &= x_t - \mu_t \qquad \text{(no EF)},\\
    x_{t+1} &= x_t - 2\mu_t + \mu_{t-1} \qquad \text{(EF, } \tau\ge1\text{)}

(torch SGD with ``momentum=β, dampening=β`` is this EMA; EF doubles the applied update and
adds back the previous applied one; the delay core applies no correction to synchronous
steps, so EF with :math:`\tau = 0` is the plain method). With :math:`p = c(1 - \beta)` the
characteristic polynomials are (step SC1 checks them against :math:`\det(zI - A)` of the state
matrix):

* :math:`\tau = 0`: :math:`(z-1)(z-\beta) + p z`
* :math:`\tau \ge 1`, no EF: :math:`z^{\tau-1}(z-1)(z-\beta) + p`
* :math:`\tau \ge 1`, EF: :math:`z^{\tau}(z-1)(z-\beta) + p(2z - 1)`

**Critical step** :math:`c^*(\beta, \tau, \text{EF}) = \sup\{c : \text{the recursion is
asymptotically stable for every } \eta h \in (0, c)\}`, from the Schur–Cohn conditions (all
leading coefficients :math:`\delta_k` of the Schur transforms positive), derived symbolically:

* :math:`\tau = 0`: :math:`c^* = 2(1+\beta)/(1-\beta)`
* :math:`\tau = 1`: :math:`c^* = 1` (independent of :math:`\beta`)
* :math:`\tau = 2`: :math:`c^* = \bigl(\sqrt{\beta^2-2\beta+5} - 1 - \beta\bigr) / (2(1-\beta))`
  (0.618 at :math:`\beta = 0`, :math:`\to 1/2` as :math:`\beta \to 1`)
* :math:`\tau = 1`, EF: :math:`c^* = \bigl(\sqrt{(5-\beta)/(1-\beta)} - 1\bigr) / 2` (0.618 at
  :math:`\beta = 0`, grows like :math:`1/\sqrt{1-\beta}`)
* :math:`\tau = 2`, EF: :math:`c^* = p^*/(1-\beta)`, :math:`p^*` the unique positive root of
  :math:`\varphi(p) = p^3 + (3-\beta)p^2 + \beta(2-\beta)p - (1-\beta)` (0.532 at
  :math:`\beta = 0`, 0.85 at :math:`\beta = 0.9`)

So without EF a delay caps the stable :math:`\eta h` at :math:`\le 1` whatever the momentum,
while with EF the stable range grows with :math:`\beta`: this is the mechanism by which
momentum and EF make training robust to delay. For diagonal/matrix quadratics the recursion
decouples along eigenvectors: stable iff :math:`\eta h_{\max} < c^*`. The critical step is
itself the tightness instance (exact). Other :math:`\tau`: :func:`critical_step` falls back
to an exact root-locus computation (numeric).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from .assumptions import Result, Step, beta, c, eq, ge, le, p, z

_t = sp.Symbol("t", nonnegative=True)
_s = sp.Symbol("s", nonnegative=True)
#: p ∈ (0, 1], β ∈ [0, 1) made manifest
DOMAIN_P01 = {p: 1 / (1 + _t), beta: _s / (1 + _s)}
#: p > 0, β ∈ [0, 1)
DOMAIN_P = {beta: _s / (1 + _s)}


def _validate(beta_v, tau, ef):
    if not (isinstance(tau, (int, np.integer)) and tau >= 0):
        raise ValueError(f"tau must be an integer delay >= 0, got {tau!r}")
    if not isinstance(ef, (bool, np.bool_)):
        raise ValueError(f"ef must be True or False, got {ef!r}")
    if isinstance(beta_v, sp.Basic) and not beta_v.is_number:
        return
    if not (0.0 <= float(beta_v) < 1.0):
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta_v!r}")


def char_poly_expr(beta_v, tau: int, ef: bool = False, var=None) -> sp.Expr:
    """The characteristic polynomial as an expression in z, with p = ``var`` (default c(1−β))."""
    pv = c * (1 - beta_v) if var is None else var
    if tau == 0:
        return (z - 1) * (z - beta_v) + pv * z
    if not ef:
        return z ** (tau - 1) * (z - 1) * (z - beta_v) + pv
    return z**tau * (z - 1) * (z - beta_v) + pv * (2 * z - 1)


def char_poly(beta, tau, ef=False) -> sp.Poly:
    r"""Characteristic polynomial of the delayed EMA-momentum recursion on f = h x²/2, as a
    sympy ``Poly`` in z whose coefficients contain the symbol ``c`` = ηh (and β if symbolic):
    τ=0: (z−1)(z−β) + c(1−β)z; τ≥1: z^{τ−1}(z−1)(z−β) + c(1−β); EF: z^τ(z−1)(z−β) + c(1−β)(2z−1).
    """
    _validate(beta, tau, ef)
    b = sp.nsimplify(beta) if not isinstance(beta, sp.Basic) else beta
    return sp.Poly(sp.expand(char_poly_expr(b, tau, ef)), z)


def state_matrix(beta_v, tau: int, ef: bool, cv=c) -> sp.Matrix:
    r"""The (τ+2)×(τ+2) matrix A with s_{t+1} = A s_t, s_t = (x_t, …, x_{t−τ}, μ_{t−1})."""
    n = tau + 2
    A = sp.zeros(n, n)
    ix_old = tau  # index of x_{t-τ}
    im = tau + 1  # index of μ_{t-1}
    # μ_t = β μ_{t-1} + (1-β) c x_{t-τ}
    mu = {im: beta_v, ix_old: (1 - beta_v) * cv}
    if ef and tau >= 1:
        # x_{t+1} = x_t - 2 μ_t + μ_{t-1}
        row = {0: 1}
        for key, val in mu.items():
            row[key] = row.get(key, 0) - 2 * val
        row[im] = row.get(im, 0) + 1
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


def schur_cohn(poly_expr: sp.Expr, var=z) -> list[sp.Expr]:
    r"""δ_1, …, δ_n: leading coefficients of the successive Schur transforms
    T P = (a_n P − a_0 P*)/z (real coefficients). All roots lie in |z| < 1 iff all δ_k > 0
    (Schur–Cohn)."""
    P = sp.Poly(poly_expr, var)
    out = []
    while P.degree() > 0:
        a = P.all_coeffs()[::-1]
        nn = P.degree()
        an, a0 = a[nn], a[0]
        out.append(sp.expand(an**2 - a0**2))
        Ps = sum(a[nn - i] * var**i for i in range(nn + 1))
        T = sp.expand(an * P.as_expr() - a0 * Ps)
        P = sp.Poly(sp.cancel(T / var), var)
    return out


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
def _QR(beta_v: float, tau: int, ef: bool):
    """numpy coefficient arrays (highest degree first) of Q and R with P = Q + c·R."""
    base = np.polymul([1.0, -1.0], [1.0, -beta_v])
    if tau == 0:
        return base, np.array([1.0 - beta_v, 0.0])
    if not ef:
        return np.concatenate([base, np.zeros(tau - 1)]), np.array([1.0 - beta_v])
    return np.concatenate([base, np.zeros(tau)]), (1.0 - beta_v) * np.array([2.0, -1.0])


def _coeffs(beta_v: float, cv: float, tau: int, ef: bool) -> np.ndarray:
    Q, R = _QR(beta_v, tau, ef)
    return np.polyadd(Q, cv * R)


def spectral_radius(beta, c, tau, ef=False) -> float:
    """max |z| over the roots of the characteristic polynomial at ηh = c (float64)."""
    _validate(beta, tau, ef)
    return float(np.max(np.abs(np.roots(_coeffs(float(beta), float(c), tau, ef)))))


def is_stable(beta, c, tau, ef=False) -> bool:
    """True when the recursion at ηh = c is asymptotically stable (spectral radius < 1)."""
    return spectral_radius(beta, c, tau, ef) < 1.0


def critical_step_numeric(beta, tau, ef=False) -> float:
    r"""c* by the root locus (D-decomposition): P = Q + cR has a root on |z| = 1 only where
    c = −Q(z)/R(z) is real, i.e. at the unit-circle roots of z^n(Q(z)R(1/z) − Q(1/z)R(z));
    c* is the smallest positive such c (for small c > 0 the recursion is stable: the root
    at 1 moves inside, the τ-fold root at 0 stays near 0)."""
    _validate(beta, tau, ef)
    b = float(beta)
    Q, R = _QR(b, tau, ef)
    n = max(len(Q), len(R)) - 1
    Qp = np.concatenate([np.zeros(n + 1 - len(Q)), Q])
    Rp = np.concatenate([np.zeros(n + 1 - len(R)), R])
    H = np.polysub(np.polymul(Qp, Rp[::-1]), np.polymul(Qp[::-1], Rp))
    H = np.trim_zeros(H, "f")
    cands = []
    for zz in np.roots(H):
        if abs(abs(zz) - 1.0) > 1e-6:
            continue
        zz = zz / abs(zz)
        cv = -np.polyval(Q, zz) / np.polyval(R, zz)
        if abs(cv.imag) <= 1e-7 * max(1.0, abs(cv)) and cv.real > 1e-9:
            cands.append(cv.real)
    if not cands:
        return float("inf")
    return float(min(cands))


def critical_step(beta, tau, ef=False) -> float:
    r"""c*(β, τ, EF) = sup{c : stable for every ηh ∈ (0, c)} for f = h x²/2 with EMA momentum
    β and delay τ (see the module docstring for the closed forms). Closed forms for τ ≤ 2
    ((τ=2, EF): the positive root of the cubic φ), root locus otherwise. EF with τ = 0 is
    the plain method (the delay core does not correct synchronous steps)."""
    _validate(beta, tau, ef)
    b = float(beta)
    if tau == 0:
        return 2.0 * (1.0 + b) / (1.0 - b)
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


def simulate(beta, c, tau, ef=False, steps=1000, x0=1.0, init="zero"):
    r"""Run the recursion exactly as the production delay core does (float64): τ idle start
    steps, EF memory u_{−1} = 0; returns x_0..x_steps (h = 1, η = c). ``init="zero"``: the
    momentum buffer starts at 0 (Muon: μ_0 = (1−β)c·x_0); ``init="first"``: torch SGD, whose
    first step sets the buffer to the gradient itself (μ_0 = c·x_0). Asymptotic stability does
    not depend on ``init``."""
    _validate(beta, tau, ef)
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
        if ef and tau >= 1:
            xs.append(x - 2.0 * u + u_prev)
        else:
            xs.append(x - u)
        u_prev = u
    return np.array(xs)


def tightness_instance(beta, tau, ef=False, h=1.0, margin=0.05):
    r"""The exact tightness instance of T3: f = h x²/2 at η = (1 ∓ margin)·c*/h.

    Returns c_star, eta_star = c*/h, eta_stable, eta_unstable, the spectral radii there, and
    a step count after which |x| has shrunk (grown) by a factor 1e6 at those step sizes."""
    cs = critical_step(beta, tau, ef)
    if not h > 0:
        raise ValueError(f"h (curvature) must be > 0, got {h!r}")
    if not 0 < margin < 1:
        raise ValueError(f"margin must lie in (0, 1), got {margin!r}")
    lo, hi = (1 - margin) * cs, (1 + margin) * cs
    r_lo, r_hi = spectral_radius(beta, lo, tau, ef), spectral_radius(beta, hi, tau, ef)
    n_lo = int(np.ceil(np.log(1e6) / max(1e-12, -np.log(r_lo)))) + 10 * (tau + 2)
    n_hi = int(np.ceil(np.log(1e6) / max(1e-12, np.log(r_hi)))) + 10 * (tau + 2)
    return {"beta": float(beta), "tau": tau, "ef": bool(ef), "h": h, "c_star": cs,
            "eta_star": cs / h, "eta_stable": lo / h, "eta_unstable": hi / h,
            "rho_stable": r_lo, "rho_unstable": r_hi, "steps": max(n_lo, n_hi)}


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
    steps.append(Step("SC12 sign bookkeeping", "cited",
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


def results() -> list[Result]:
    """All T3 results (τ ∈ {0,1,2}, with and without EF)."""
    return [result(t, e) for t, e in _CASES]


__all__ = ["char_poly", "char_poly_expr", "state_matrix", "schur_cohn", "critical_step",
           "critical_step_expr", "critical_p_expr", "critical_step_numeric", "ef2_cubic",
           "spectral_radius", "is_stable", "simulate", "tightness_instance", "result",
           "results"]
