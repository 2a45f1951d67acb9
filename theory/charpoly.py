r"""The characteristic polynomials of T3 and the Schur–Cohn transform, shared by
:mod:`theory.stability` and :mod:`theory.ef_gamma_closed` (which it keeps apart: the closed
forms of EF(γ*) read the polynomial, and the stability results read the closed forms).

EF(γ) with delay τ on :math:`f = h x^2/2`, :math:`p = \eta h(1-\beta)`:
:math:`z^\tau(z-1)(z-\beta) + p((1+\gamma)z - \gamma)`.
"""

from __future__ import annotations

import sympy as sp

from .assumptions import beta, c, p, z

_t = sp.Symbol("t", nonnegative=True)
_s = sp.Symbol("s", nonnegative=True)
#: p ∈ (0, 1], β ∈ [0, 1) made manifest
DOMAIN_P01 = {p: 1 / (1 + _t), beta: _s / (1 + _s)}
#: p > 0, β ∈ [0, 1)
DOMAIN_P = {beta: _s / (1 + _s)}


def char_poly_expr(beta_v, tau: int, ef: bool = False, var=None, gamma=None) -> sp.Expr:
    r"""The characteristic polynomial as an expression in z, with p = ``var`` (default c(1−β));
    ``gamma`` (EF only; None = 1, the paper's EF) is the coefficient of EF(γ):
    :math:`z^\tau(z-1)(z-\beta) + p((1+\gamma)z - \gamma)`."""
    pv = c * (1 - beta_v) if var is None else var
    if tau == 0:
        return (z - 1) * (z - beta_v) + pv * z
    if not ef:
        return z ** (tau - 1) * (z - 1) * (z - beta_v) + pv
    if gamma is None:
        return z**tau * (z - 1) * (z - beta_v) + pv * (2 * z - 1)
    return z**tau * (z - 1) * (z - beta_v) + pv * ((1 + gamma) * z - gamma)


def schur_cohn(poly_expr: sp.Expr, var=z) -> list[sp.Expr]:
    r""":math:`\delta_1, \dots, \delta_n`: leading coefficients of the successive Schur
    transforms :math:`TP = (a_n P - a_0 P^*)/z` (real coefficients). All roots lie in
    :math:`|z| < 1` iff every :math:`\delta_k > 0` (Schur–Cohn)."""
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


def optimal_gamma_tau1_exprs():
    r"""(γ*, c*) for τ = 1 in closed form: γ* = 2β/(2−β)², c* = (2−β)²/(4(1−β))."""
    return 2 * beta / (2 - beta) ** 2, (2 - beta) ** 2 / (4 * (1 - beta))
