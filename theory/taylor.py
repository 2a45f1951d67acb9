r"""TC — what the Taylor (DC-ASGD) compensation guarantees on a separable quadratic.

``DelayedOptimizer(correction="taylor")`` replaces the stale gradient
:math:`g = \nabla f(x_s)` by

.. math::  \hat g = g + \lambda\, g\odot g\odot(x_n - x_s)

(:math:`x_n` the weights it is applied at). On :math:`f = \sum_i h_i x_i^2/2` the fresh
gradient is :math:`\nabla_i f(x_n) = g_i + h_i\Delta_i` (:math:`\Delta = x_n - x_s`), so
coordinatewise (TC1)

.. math::  \hat g_i - \nabla_i f(x_n) = (\lambda g_i^2 - h_i)\,\Delta_i ,

and whenever :math:`0 \le \lambda g_i^2 \le 2h_i` (TC2–TC3) the compensated gradient is at
least as close to the fresh one as the stale gradient:
:math:`\lvert\hat g_i - \nabla_i f(x_n)\rvert \le h_i\lvert\Delta_i\rvert
= \lvert g_i - \nabla_i f(x_n)\rvert` (TC4), with equality only at
:math:`\lambda g_i^2 \in \{0, 2h_i\}`. A sign error in the correction gives
:math:`-(\lambda g_i^2 + h_i)\Delta_i`, strictly farther whenever
:math:`\lambda g_i^2\Delta_i \ne 0`: property ``L3.taylor_lemma`` of ``verify/identities.py``
measures this on the production core.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from .assumptions import Result, Step, eq, ge, le

lam = sp.Symbol("lambda", nonnegative=True)
g = sp.Symbol("g", real=True)
h = sp.Symbol("h", positive=True)
xs, xn = sp.symbols("x_s x_n", real=True)
G2 = sp.Symbol("g^2", nonnegative=True)


class _Tex(sp.Symbol):
    """A symbol that prints as its name, verbatim LaTeX: sympy would read the ``_`` of
    ``|\\Delta_i|`` as a subscript of everything before it and print ``|\\Delta_{i|}``."""

    def _latex(self, printer) -> str:
        return self.name


DELTA_ABS = _Tex(r"\lvert\Delta_i\rvert", nonnegative=True)


def _steps() -> list[Step]:
    ghat = g + lam * g**2 * (xn - xs)
    fresh = g + h * (xn - xs)
    t1 = Step("TC1 compensation error", "identity",
              eq(ghat - fresh, (lam * g**2 - h) * (xn - xs)),
              r"quadratic coordinate: $\nabla f(x_n) = g + h (x_n - x_s)$, $g = h x_s$")
    t2 = Step("TC2 step-size condition", "assumption", le(lam * G2, 2 * h),
              r"$\lambda g^2 \le 2h$ (the instance chooses $\lambda$ so)")
    t3 = Step("TC3 factor at most h (upper)", "inequality", le(lam * G2 - h, h),
              uses=((t2, 1),))
    t4 = Step("TC3b factor at least -h (lower)", "inequality", ge(lam * G2 - h, -h),
              r"$\lambda g^2 \ge 0$")
    dd = sp.Symbol(r"\Delta", real=True)  # x_n - x_s
    t5 = Step("TC4 compensated is closer (squared)", "inequality",
              le((lam * G2 - h) ** 2 * dd**2, h**2 * dd**2),
              r"$h^2 - (\lambda g^2 - h)^2 = \lambda g^2 (2h - \lambda g^2)$: TC2 times "
              r"$\lambda g^2\Delta^2 \ge 0$; by TC1 the left side is "
              r"$|\hat g - \nabla f(x_n)|^2$ and the right $|g - \nabla f(x_n)|^2$",
              uses=((t2, lam * G2 * dd**2),))
    return [t1, t2, t3, t4, t5]


@cache
def result() -> Result:
    """The TC :class:`~theory.assumptions.Result`."""
    return Result(
        name="TC",
        title="Taylor (DC-ASGD) compensation on a separable quadratic",
        quantity="|g^_i - grad_i f(x_n)| per coordinate",
        quantity_latex=r"|\hat g_i - \nabla_i f(x_n)|",
        statement=sp.Abs(lam * G2 - h) * DELTA_ABS,
        params=(lam, G2, h),
        steps=_steps(),
        assumptions=("quadratic f = h x^2/2",),
        relation="=",
    )


__all__ = ["result"]
