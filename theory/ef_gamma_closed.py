r"""T3[EF(γ*), every τ] — the best EF coefficient in closed form for every delay.

EF(γ), :math:`x_{t+1} = x_t - (1+\gamma)u_t + \gamma u_{t-1}`, on :math:`f = h x^2/2` with EMA
momentum β and delay τ ≥ 1 has the characteristic polynomial of :mod:`theory.stability`,

.. math::
    P(z) = z^\tau(z-1)(z-\beta) + p\,z + q\,(z-1),\qquad p = \eta h(1-\beta),\ q = p\gamma,

affine in the pair (p, q). Put :math:`F(z) = P(z)/(z-1)`, :math:`u = (z + z^{-1})/2` and
:math:`\Gamma(u) = \beta T_\tau(u) - T_{\tau+1}(u) - p/2` (Chebyshev :math:`T_n, U_n`). Then
(steps E1.τ, E2.τ, rational identities in z, τ = 1…6)

.. math::
    F(z) - F(z^{-1}) = -\frac{z+1}{z-1}\,\big(\pi_\tau(u) - p\big),\qquad
    F(z) + F(z^{-1}) = 2\,\big(q - \Gamma(u)\big),

    \pi_\tau(u) = 2(1-u)\big(U_\tau(u) - \beta U_{\tau-1}(u)\big).

On :math:`z = e^{i\omega}`, :math:`\omega \in (0, \pi)`: :math:`\operatorname{Im}F =
\tfrac12\cot(\omega/2)\,(\pi_\tau(\cos\omega) - p)` and :math:`\operatorname{Re}F = q -
\Gamma(\cos\omega)`, i.e. :math:`\pi_\tau(\cos\omega) = 2\tan(\omega/2)(\sin(\tau+1)\omega
- \beta\sin\tau\omega)`; a root on the unit circle at :math:`e^{\pm i\omega}` sits exactly at
:math:`(p, q) = (\pi_\tau(u), \Gamma(u))`.

**Counting lemma (step E4).** :math:`P` has :math:`n = \tau+2` roots and :math:`P(1) = p \ne 0`.
All lie in :math:`|z| < 1` iff the argument of :math:`P(e^{i\omega})` grows by :math:`2\pi n`
over a turn; :math:`\arg(e^{i\omega} - 1)` grows by π on :math:`(0, 2\pi)` and
:math:`F(e^{-i\omega}) = \overline{F(e^{i\omega})}`, so :math:`\arg F` must grow by
:math:`(\tau+1)\pi + \pi/2` on :math:`(0, \pi)`: from :math:`-\pi/2` (:math:`F \to -i\infty`
as :math:`\omega \to 0^+`) to :math:`(\tau+1)\pi`. It passes :math:`0, \pi, \dots, \tau\pi` on
the way, at distinct ω where :math:`\operatorname{Im} F = 0`: a stable (p, q) needs **τ + 1
distinct solutions** :math:`u \in (-1, 1)` of :math:`\pi_\tau(u) = p`. Conversely, when there
are τ + 1 of them, :math:`u^{(0)} > \dots > u^{(\tau)}`, stability holds iff the signs
alternate, :math:`(-1)^k(q - \Gamma(u^{(k)})) > 0`, and :math:`(1+\beta) -
(-1)^\tau(q + p/2) > 0` (the sign of :math:`F(-1)`).

**Lobes (E5, E6).** :math:`U_\tau - \beta U_{\tau-1}` has τ simple zeros in (−1, 1) (it
interlaces with :math:`U_{\tau-1}`), so :math:`\pi_\tau` (degree τ + 1, zero at u = 1) has
τ + 1 simple zeros :math:`1 = u_0 > u_1 > \dots > u_\tau > -1` and, by Rolle, one critical
point per gap: τ unimodal lobes :math:`(u_{k+1}, u_k)` of alternating sign, lobe 0 positive
(:math:`\pi_\tau \approx 2(1-u)(1 + \tau(1-\beta))` near 1), and a monotone end piece on
:math:`(-1, u_\tau)`. For p > 0 the positive lobes k = 0, 2, 4, … (⌈τ/2⌉ of them) give at most
two solutions each and the end piece (positive iff τ is even) at most one: τ + 1 in all, so
**every** positive lobe must give two. Hence, with :math:`p^* = \max_{\text{lobe }0}\pi_\tau`:

* no (p, q) with :math:`p \ge p^*` is stable, whatever q (i.e. whatever γ): lobe 0 then gives
  at most one solution and the rest at most τ − 1;
* :math:`p^*` is attained at the largest root :math:`u^*` of :math:`\pi_\tau'` (it lies in lobe
  0 by Rolle) and the stable q-interval at :math:`p \uparrow p^*` shrinks to the one point
  :math:`q^* = \Gamma(u^*)`: the only candidate is

.. math::
    c^* = \frac{p^*}{1-\beta},\qquad
    \gamma^* = \frac{\beta T_\tau(u^*) - T_{\tau+1}(u^*)}{p^*} - \frac12 .

That this candidate *is* stable for every :math:`p \in (0, p^*)` (the ray q = γ*p meets no
boundary before the tip) is certified exactly at rational β by :func:`certify` (Sturm counts
and exact root isolation in rational arithmetic, no floating point in the decision) and
checked against the numeric root-locus search of :mod:`theory.stability` on fine β grids by
``verify/``. Closed forms: τ = 1, :math:`u^* = (2+\beta)/4` (T3[τ=1, EF(γ*)] again, E8–E9);
τ = 2, :math:`12u^2 - (8+4\beta)u - (1-2\beta) = 0`, :math:`u^* = (2+\beta+\sqrt{\beta^2 -
2\beta + 7})/6` (E10–E11). As β → 1, :math:`(1-\beta)c^* \to K_\tau = p^*|_{\beta=1}` and
γ* stays finite: τ = 2, :math:`K_2 = (4\sqrt6 - 9)/9`, :math:`\gamma^* \to (9 + 4\sqrt6)/5`
(E12); every τ: :func:`beta_one_limits`.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import sympy as sp

from .assumptions import Result, Step, beta, eq, ge, p, z
from .charpoly import (
    DOMAIN_P,
    char_poly_expr,
    optimal_gamma_tau1_exprs,
    schur_cohn,
)

u = sp.Symbol("u", real=True)
q = sp.Symbol("q", real=True)
omega = sp.Symbol("omega", positive=True)
TAUS = (1, 2, 3, 4, 5, 6)


def lobe_p(tau: int, bv=beta, uv=u) -> sp.Expr:
    r""":math:`\pi_\tau(u) = 2(1-u)(U_\tau(u) - \beta U_{\tau-1}(u))`: the p at which
    :math:`e^{\pm i\omega}`, u = cos ω, is a root (any γ)."""
    return sp.expand(2 * (1 - uv) * (sp.chebyshevu(tau, uv) - bv * sp.chebyshevu(tau - 1, uv)))


def gamma_num(tau: int, bv=beta, uv=u) -> sp.Expr:
    r""":math:`\beta T_\tau(u) - T_{\tau+1}(u)`: q + p/2 on the boundary at u."""
    return sp.expand(bv * sp.chebyshevt(tau, uv) - sp.chebyshevt(tau + 1, uv))


def stationary_poly(tau: int, bv=beta) -> sp.Expr:
    r""":math:`\pi_\tau'(u)` (degree τ in u); its largest root is u*."""
    return sp.expand(sp.diff(lobe_p(tau, bv), u))


def _F(tau: int, zz):
    P = char_poly_expr(beta, tau, True, var=p, gamma=q / p).subs(z, zz)
    return P / (zz - 1)


def tau2_ustar() -> sp.Expr:
    r"""u* for τ = 2: the larger root of 12u² − (8+4β)u − (1−2β)."""
    return (2 + beta + sp.sqrt(beta**2 - 2 * beta + 7)) / 6


def closed_form(tau: int):
    r"""(u*, p*, γ*) as sympy expressions in β for τ ∈ {1, 2} (radicals), else None."""
    if tau == 1:
        us = (2 + beta) / 4
    elif tau == 2:
        us = tau2_ustar()
    else:
        return None
    ps = sp.simplify(lobe_p(tau, uv=us))
    gs = gamma_num(tau, uv=us) / ps - sp.Rational(1, 2)
    return us, ps, gs


# --------------------------------------------------------------------------- exact numerics
def _qq_poly(expr, bv):
    return sp.Poly(sp.expand(expr.subs(beta, bv)), u, domain=sp.QQ)


def lobe_maximum(beta_v, tau: int, prec: int = 30):
    r"""(u*, p*, γ*) at one β, from the exact polynomial :math:`\pi_\tau'` (sympy root isolation
    at a rational β, refined to ``prec`` digits): u* its largest real root."""
    bv = sp.nsimplify(beta_v) if not isinstance(beta_v, sp.Basic) else beta_v
    dp = _qq_poly(stationary_poly(tau), bv)
    roots = dp.real_roots()
    us = max(roots, key=lambda r: r.evalf(prec))
    usf = sp.Float(us.evalf(prec), prec)
    pf = lobe_p(tau, bv, usf).evalf(prec)
    gf = (gamma_num(tau, bv, usf) / pf - sp.Rational(1, 2)).evalf(prec)
    return float(usf), float(pf), float(gf)


def _p_bounds(P: sp.Poly, a: Fraction, b: Fraction, lip: Fraction):
    """Rational bounds of a polynomial on [a, b]: endpoint values ± Lipschitz·width."""
    va, vb = Fraction(str(P.eval(sp.Rational(a.numerator, a.denominator)))), \
        Fraction(str(P.eval(sp.Rational(b.numerator, b.denominator))))
    w = lip * (b - a)
    return min(va, vb) - w, max(va, vb) + w


def certify(beta_v, tau: int, rel: float = 1e-9, gamma=None, p_star=None) -> dict:
    r"""Exact certificate (rational arithmetic, Sturm counts, exact root isolation) that
    :math:`\max_\gamma c^*(\beta, \tau, \gamma) \in [\tilde p, \hat p]/(1-\beta)` with
    :math:`\hat p/\tilde p - 1 \approx 2\,\mathrm{rel}` around the lobe maximum :math:`p^*`:

    (a) :math:`\pi_\tau` has τ + 1 distinct zeros in (−1, 1] (the lobe structure);
    (b) upper bound: :math:`\pi_\tau - \hat p` has no zero on :math:`[c_0, 1]`, :math:`c_0` the
        left end of an isolating interval of :math:`u_1`: so :math:`p^* < \hat p` and, by the
        counting lemma, no γ is stable at :math:`p \ge \hat p`;
    (c) lower bound at a rational :math:`\tilde\gamma \approx \gamma^*`: the ray
        :math:`q = \tilde\gamma p` is stable at :math:`p = \tilde p/2` (Schur–Cohn, exact) and
        meets no boundary for :math:`0 < p < \tilde p`: every real zero of
        :math:`R = \beta T_\tau - T_{\tau+1} - (\tilde\gamma + \tfrac12)\pi_\tau` in (−1, 1) has
        :math:`\pi_\tau \le 0` or :math:`\ge \tilde p` (isolating intervals refined until the
        rational bounds decide), and the z = −1 line :math:`p(1 + 2\tilde\gamma) =
        (-1)^\tau 2(1+\beta)` has no p in :math:`(0, \tilde p)`.

    So :math:`c^*(\beta, \tau, \tilde\gamma) \ge \tilde p/(1-\beta)`. ``gamma`` / ``p_star``
    replace the closed form's γ* / p* (to see the certificate refuse a wrong claim)."""
    bq = sp.nsimplify(beta_v)
    bf = Fraction(int(sp.numer(bq)), int(sp.denom(bq)))
    P = _qq_poly(lobe_p(tau), bq)
    out = {"beta": float(bq), "tau": tau}
    # (a) lobe structure: tau+1 simple zeros in (-1, 1]
    sqf = sp.degree(sp.gcd(P, P.diff(u))) == 0
    out["zeros_in_(-1,1]"] = int(P.count_roots(-1, 1)) - (1 if P.eval(-1) == 0 else 0)
    ok_a = sqf and out["zeros_in_(-1,1]"] == tau + 1
    us, ps, gs = lobe_maximum(bq, tau)
    ps = ps if p_star is None else float(p_star)
    gs = gs if gamma is None else float(gamma)
    out.update(u_star=us, p_star=ps, gamma_star=gs)
    # (b) upper bound
    Q = _qq_poly(sp.chebyshevu(tau, u) - beta * sp.chebyshevu(tau - 1, u), bq)
    c0 = sp.Rational(max(iv[0][0] for iv in Q.intervals()))  # isolates u_1 alone
    phat = sp.Rational(ps * (1 + rel))
    ok_b = (sp.Poly(P.as_expr() - phat, u).count_roots(c0, 1) == 0
            and P.eval(1) - phat < 0)
    out["p_hat"] = float(phat)
    # (c) lower bound along the ray of slope g~
    gt = sp.Rational(gs)  # the float's exact binary value
    pt = sp.Rational(ps * (1 - rel))
    R = sp.Poly(sp.expand(gamma_num(tau, bq) - (gt + sp.Rational(1, 2)) * P.as_expr()), u,
                domain=sp.QQ)
    dP = P.diff(u)
    dco = [Fraction(str(co)) for co in dP.all_coeffs()[::-1]]  # lowest degree first

    def lip(a: Fraction, b: Fraction) -> Fraction:
        # |π'(u)| ≤ Σ_j |c_j| M^j on |u| ≤ M = max(1, |a|, |b|)
        m = max(Fraction(1), abs(a), abs(b))
        return sum(abs(co) * m**k for k, co in enumerate(dco))

    ok_c = True
    ptf = Fraction(int(sp.numer(pt)), int(sp.denom(pt)))
    for (a, b), _ in R.intervals():
        a, b = sp.Rational(a), sp.Rational(b)
        if b <= -1 or a >= 1:
            continue
        for _ in range(200):
            fa, fb = Fraction(int(a.p), int(a.q)), Fraction(int(b.p), int(b.q))
            lo, hi = _p_bounds(P, fa, fb, lip(fa, fb))
            if hi <= 0 or lo >= ptf:
                break
            if a == b:
                ok_c = False
                break
            a, b = R.refine_root(a, b, eps=(b - a) / 1024)
            a, b = sp.Rational(a), sp.Rational(b)
        else:
            ok_c = False
    Pz = sp.Poly(char_poly_expr(bq, tau, True, var=pt / 2, gamma=gt), z)
    ok_c &= all(d > 0 for d in schur_cohn(Pz.as_expr()))
    if tau % 2 == 0:
        ok_c &= 2 * (1 + bf) / (1 + 2 * Fraction(int(sp.numer(gt)), int(sp.denom(gt)))) > ptf
    out.update(p_tilde=float(pt), gamma_tilde=float(gt), lobes=ok_a, upper=ok_b, lower=ok_c,
               certified=bool(ok_a and ok_b and ok_c))
    return out


CERT_BETAS = ("0", "1/10", "1/4", "1/2", "3/4", "9/10", "19/20", "99/100", "999/1000")


def numeric_checks() -> list[tuple[str, bool, str]]:
    """The exact certificates of :func:`certify` on a grid (``python -m theory``)."""
    out = []
    for tau in TAUS:
        bad = [b for b in CERT_BETAS if not certify(sp.Rational(b), tau)["certified"]]
        out.append((f"EG certificate tau={tau}: lobe maximum is max over gamma of c*", not bad,
                    f"beta in {{{', '.join(CERT_BETAS)}}}" + (f"; FAILED at {bad}" if bad else "")))
    return out


def beta_one_limits(tau: int) -> tuple[float, float]:
    r"""(lim γ*, :math:`K_\tau = \lim\,(1-\beta)c^*`) as β → 1: the lobe maximum of
    :math:`\pi_\tau` at β = 1 (a polynomial in u, so the limit is its value there)."""
    _, ps, gs = lobe_maximum(1, tau)
    return gs, ps


# --------------------------------------------------------------------------- proof
def _steps() -> list[Step]:
    zi = 1 / z
    uz = (z + zi) / 2
    Fz, Fzi = sp.Symbol("F(z)"), sp.Symbol("F(1/z)")
    t_ = sp.Symbol("t", positive=True)  # t = tan(ω/2): cos ω = (1-t²)/(1+t²)
    zt = (1 + sp.I * t_) / (1 - sp.I * t_)

    def sin_k(k):
        return (zt**k - zt**-k) / (2 * sp.I)

    steps = []
    for tau in TAUS:
        pi_u, gam_u = sp.Symbol(rf"\pi_{{{tau}}}(u)"), sp.Symbol(rf"\Gamma_{{{tau}}}(u)")
        model = {Fz: _F(tau, z), Fzi: _F(tau, zi), pi_u: lobe_p(tau, uv=uz),
                 gam_u: gamma_num(tau, uv=uz) - p / 2}
        steps.append(Step(
            rf"E1.{tau} $F(z) - F(1/z) = -\frac{{z+1}}{{z-1}}(\pi_{tau}(u) - p)$", "identity",
            eq(Fz - Fzi, -(z + 1) / (z - 1) * (pi_u - p)),
            r"$F = P/(z-1)$, $P$ = T3's EF($\gamma$) polynomial with $q = p\gamma$, "
            r"$u = (z + 1/z)/2$, $\pi_\tau(u) = 2(1-u)(U_\tau(u) - \beta U_{\tau-1}(u))$: on "
            r"$|z| = 1$, $\mathrm{Im}\,F = \tfrac12\cot(\omega/2)(\pi_\tau - p)$", model=model))
        steps.append(Step(
            rf"E2.{tau} $F(z) + F(1/z) = 2(q - \Gamma_{tau}(u))$", "identity",
            eq(Fz + Fzi, 2 * (q - gam_u)),
            r"$\Gamma_\tau(u) = \beta T_\tau(u) - T_{\tau+1}(u) - p/2$: "
            r"$\mathrm{Re}\,F = q - \Gamma_\tau$", model=model))
    for tau in TAUS:
        pi_c = sp.Symbol(rf"\pi_{{{tau}}}(\cos\omega)")
        rhs = 2 * sp.tan(omega / 2) * (sp.sin((tau + 1) * omega) - beta * sp.sin(tau * omega))
        model = {pi_c: lobe_p(tau, uv=(1 - t_**2) / (1 + t_**2)), sp.tan(omega / 2): t_,
                 sp.sin((tau + 1) * omega): sin_k(tau + 1), sp.sin(tau * omega): sin_k(tau)}
        steps.append(Step(
            rf"E3.{tau} trigonometric form of $\pi_{tau}$", "identity", eq(pi_c, rhs),
            r"checked as a rational identity in $t = \tan(\omega/2)$ "
            r"($e^{i\omega} = (1+it)/(1-it)$)", model=model))
    tau_s = sp.Symbol("tau", nonnegative=True, integer=True)
    steps += [
        Step("E4 counting lemma (argument principle)", "reasoning",
             ge(sp.Symbol(r"\#\{u\in(-1,1):\pi_\tau(u)=p\}"), sp.Symbol(r"\tau") + 1),
             r"stable $\Rightarrow$ $\arg F$ grows by $(\tau+1)\pi + \pi/2$ on $(0,\pi)$, "
             r"crossing the real axis at $\tau+1$ distinct $\omega$ (E1: $\mathrm{Im}F = 0$ iff "
             r"$\pi_\tau(\cos\omega) = p$); converse with alternating signs of E2 (argument "
             r"principle, Marden, *Geometry of Polynomials*, §1; the count is in the module "
             r"docstring)"),
        Step(r"E5 zeros of $U_\tau - \beta U_{\tau-1}$", "cited",
             ge(sp.Symbol(r"\#\{u\in(-1,1): U_\tau = \beta U_{\tau-1}\}"), sp.Symbol(r"\tau")),
             r"real, simple, in $(-1, 1)$: interlacing of consecutive orthogonal polynomials "
             r"(Szegő, *Orthogonal Polynomials*, §3.3); also counted exactly by the "
             r"certificate (a) at every certified $\beta$"),
        Step(r"E6 lobe 0 is positive: $U_\tau(1) - \beta U_{\tau-1}(1) > 0$", "inequality",
             ge((tau_s + 1) - beta * tau_s, 0), domain=DOMAIN_P,
             note=r"$U_n(1) = n + 1$"),
    ]
    steps += [Step(rf"E6.{t} $U_{t}(1) - \beta U_{t-1}(1) = {t + 1} - {t}\beta$", "identity",
                   eq(sp.chebyshevu(t, 1) - beta * sp.chebyshevu(t - 1, 1), (t + 1) - t * beta))
              for t in TAUS]
    # τ = 1
    us1, ps1, gs1 = closed_form(1)
    gh, ch = optimal_gamma_tau1_exprs()
    steps += [
        Step(r"E8 $\tau = 1$: $\pi_1'(u) = -8(u - (2+\beta)/4)$", "identity",
             eq(stationary_poly(1), -8 * (u - (2 + beta) / 4))),
        Step(r"E9 $\tau = 1$: $p^*/(1-\beta)$ is T3[$\tau=1$, EF($\gamma^*$)]'s $c^*$",
             "identity", eq(ps1 / (1 - beta), ch), r"$u^* = (2+\beta)/4$: $p^* = (2-\beta)^2/4$"),
        Step(r"E9b $\tau = 1$: $\gamma^* = 2\beta/(2-\beta)^2$ (T3[$\tau=1$, EF($\gamma^*$)])",
             "identity", eq(gs1, gh)),
    ]
    us2, ps2, gs2 = closed_form(2)
    steps += [
        Step(r"E10 $\tau = 2$: $\pi_2'(u) = -2(12u^2 - (8+4\beta)u - (1-2\beta))$", "identity",
             eq(stationary_poly(2), -2 * (12 * u**2 - (8 + 4 * beta) * u - (1 - 2 * beta)))),
        Step(r"E11 $\tau = 2$: $u^* = (2+\beta+\sqrt{\beta^2-2\beta+7})/6$ is a root", "identity",
             eq(sp.expand(12 * us2**2 - (8 + 4 * beta) * us2 - (1 - 2 * beta)), 0)),
        Step(r"E11b $\tau = 2$: $u^* \le 1$", "inequality", ge(1 - us2, 0), domain=DOMAIN_P,
             note=r"the larger root of $\pi_2'$ lies in lobe 0 $(u_1, 1)$ by Rolle (E5)"),
        Step(r"E12 $\tau = 2$, $\beta \to 1$: $u^* \to (3+\sqrt6)/6$", "identity",
             eq(us2.subs(beta, 1), (3 + sp.sqrt(6)) / 6)),
        Step(r"E12b $\tau = 2$, $\beta \to 1$: $K_2 = (4\sqrt6 - 9)/9$", "identity",
             eq(sp.radsimp(ps2.subs(beta, 1)), (4 * sp.sqrt(6) - 9) / 9)),
        Step(r"E12c $\tau = 2$, $\beta \to 1$: $\gamma^* \to (9 + 4\sqrt6)/5$", "identity",
             eq(sp.radsimp(gs2.subs(beta, 1)), (9 + 4 * sp.sqrt(6)) / 5)),
        Step("E13 sign bookkeeping", "reasoning",
             eq(sp.Symbol("c^*"), sp.Symbol("p^*") / (1 - beta)),
             r"E4–E6: no $(p, q)$ with $p \ge p^* = \max_{\rm lobe\,0}\pi_\tau$ is stable, and "
             r"at $p \uparrow p^*$ only $q^* = \Gamma(u^*)$ remains: "
             r"$\gamma^* = (\beta T_\tau(u^*) - T_{\tau+1}(u^*))/p^* - 1/2$; that the ray "
             r"$q = \gamma^* p$ stays stable on $(0, p^*)$ is certified exactly at rational "
             r"$\beta$ (`ef_gamma_closed.certify`, run by `python -m theory`)"),
    ]
    return steps


@cache
def result() -> Result:
    """The all-τ closed form of EF(γ*) as a :class:`~theory.assumptions.Result`."""
    tau_s = sp.Symbol("tau", positive=True, integer=True)
    return Result(
        name="T3[EF(gamma*), every tau]",
        title=r"the best EF coefficient for every delay: $p^*$ the maximum of "
              r"$\pi_\tau(u) = 2(1-u)(U_\tau(u) - \beta U_{\tau-1}(u))$ on its lobe next to "
              r"$u = 1$, $c^* = p^*/(1-\beta)$, $\gamma^* = (\beta T_\tau(u^*) - "
              r"T_{\tau+1}(u^*))/p^* - 1/2$",
        quantity="p(omega) on the unit circle (p* its maximum on the first lobe)",
        quantity_latex=r"\pi_\tau(\cos\omega)",
        statement=2 * sp.tan(omega / 2) * (sp.sin((tau_s + 1) * omega)
                                           - beta * sp.sin(tau_s * omega)),
        params=(omega, beta, tau_s), steps=_steps(),
        assumptions=("quadratic f = h x^2/2",), relation="=",
        legend={omega: r"$z = e^{i\omega}$, $u = \cos\omega$"},
        notes="no gamma beats the lobe maximum (E4-E6, every tau); gamma* attains it "
              "(certified exactly at rational beta, tau = 1..6); tau = 1, 2 in radicals")


@cache
def _cheb_polys(tau: int):
    r"""(a₀, a₁, g₀, g₁): :math:`\pi_\tau = a_0 + \beta a_1` and
    :math:`\beta T_\tau - T_{\tau+1} = g_0 + \beta g_1` as numpy Chebyshev series (exact small
    integer coefficients in the T basis, well conditioned on [−1, 1] for every τ)."""
    from numpy.polynomial import Chebyshev as Ch

    x = Ch([0.0, 1.0])
    U = [Ch([1.0]), 2 * x]
    while len(U) <= tau:
        U.append(2 * x * U[-1] - U[-2])
    one_minus = Ch([1.0, -1.0])
    return (2 * one_minus * U[tau], -2 * one_minus * U[tau - 1],
            -Ch.basis(tau + 1), Ch.basis(tau))


def lobe_maximum_float(beta_v: float, tau: int) -> tuple[float, float, float]:
    r"""(u*, p*, γ*) in float64: u* the largest real root of :math:`\pi_\tau'` (colleague-matrix
    roots of its Chebyshev series, then Newton steps), :math:`p^* = \pi_\tau(u^*)`,
    :math:`\gamma^* = (\beta T_\tau - T_{\tau+1})(u^*)/p^* - \tfrac12`. An algorithm of its
    own: the product bisects the trigonometric form instead."""
    b = float(beta_v)
    a0, a1, g0, g1 = _cheb_polys(tau)
    P = a0 + b * a1
    dP = P.deriv()
    ddP = dP.deriv()
    r = dP.roots()
    us = float(max(x.real for x in r if abs(x.imag) < 1e-9 and x.real <= 1.0 + 1e-9))
    for _ in range(3):
        us -= float(dP(us) / ddP(us))
    ps = float(P(us))
    return us, ps, float((g0 + b * g1)(us) / ps - 0.5)


def optimal_gamma_closed(beta_v, tau: int) -> tuple[float, float]:
    r"""(γ*, c*) from the closed form (float64, :func:`lobe_maximum_float`); τ ≥ 1."""
    if not (isinstance(tau, int) and tau >= 1):
        raise ValueError(f"tau must be an integer delay >= 1, got {tau!r}")
    b = float(beta_v)
    if not 0.0 <= b < 1.0:
        raise ValueError(f"beta (momentum) must lie in [0, 1), got {beta_v!r}")
    _, ps, gs = lobe_maximum_float(b, tau)
    return gs, ps / (1.0 - b)


__all__ = ["TAUS", "beta_one_limits", "certify", "closed_form", "gamma_num", "lobe_maximum",
           "lobe_maximum_float", "lobe_p", "numeric_checks", "optimal_gamma_closed", "result",
           "stationary_poly", "tau2_ustar"]
