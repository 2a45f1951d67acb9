r"""asyncpp's own convergence theory, derived step by step and checked by sympy.

Modules (one per result; each exposes ``statement``, ``result`` and numeric ``bound`` /
``critical_step`` callables for ``verify/`` and the book):

* :mod:`theory.assumptions` — symbols, standing assumptions (A0–A3, BAND, INIT, A2b), the
  :class:`~theory.assumptions.Step` / :class:`~theory.assumptions.Result` framework;
* :mod:`theory.delayed_lmo` — T1, LMO/Muon with EMA momentum under a fixed delay τ;
* :mod:`theory.error_feedback` — T2, the same with Error Feedback (worst case and drift);
* :mod:`theory.stability` — T3, exact critical step sizes on quadratics;
* :mod:`theory.ef_nodelay` — T3[τ=0, EF(γ)], the EF step without a delay;
* :mod:`theory.charpoly` — T3's characteristic polynomials and the Schur–Cohn transform;
* :mod:`theory.ef_gamma_closed` — T3[EF(γ*)], the best EF coefficient in closed form, every τ;
* :mod:`theory.variable_delay` — T4, per-stage delays (PipeDream vs 2BW);
* :mod:`theory.muon_cycle` — MC, delayed Muon's limit cycle on a quadratic (Muon's T3);
* :mod:`theory.taylor` — TC, what the Taylor (DC-ASGD) compensation guarantees on a quadratic;
* :mod:`theory.nesterov` — T3[Nesterov], the Nesterov delay correction's critical step;
* :mod:`theory.adaptive_delay` — AD, the loss floor of Adam/Adan/sign updates under delay.

``python -m theory`` checks every step of every result and exits non-zero on a failure.
"""

from __future__ import annotations


def all_results() -> list:
    """Every result, in the order ``python -m theory`` reports them."""
    from . import (
        adaptive_delay,
        delayed_lmo,
        ef_gamma_closed,
        ef_nodelay,
        error_feedback,
        muon_cycle,
        nesterov,
        stability,
        taylor,
        variable_delay,
    )

    return [delayed_lmo.result(False), delayed_lmo.result(True),
            error_feedback.result(False), error_feedback.result(True),
            *stability.results(), ef_nodelay.result(), ef_gamma_closed.result(),
            nesterov.result(),
            variable_delay.result(False), variable_delay.result(True),
            muon_cycle.result(), taylor.result(), adaptive_delay.result()]


__all__ = ["all_results"]
