"""Property 5: T3 is exact for the production code.

``torch.optim.SGD(momentum=β, dampening=β)`` (EMA momentum) inside
``asyncpp.delay.DelayedOptimizer`` (τ ∈ {0, 1, 2}, EF on/off) on f = h x²/2 converges at
ηh = 0.95·c* and diverges at ηh = 1.05·c*, c* = ``theory.stability.critical_step(β, τ, ef)``.
torch's first step sets the buffer to g (no dampening): this only changes the initial state of
the linear recursion, so it is accounted for by judging the asymptotic behaviour (see
``verify.properties.stability_check``).

EF(γ) (x ← x − (1+γ)u + γu_prev): the same property for τ ∈ {1, 2, 3} and hypothesis-drawn γ
(including 0, 1, τ and the theory's optimum γ*), against ``critical_step(β, τ, True, gamma=γ)``;
and the mutant that misapplies γ is caught by it.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.profiles import examples
from verify.properties import stability_check
from verify.strategies import check, log_uniform
from verify.systems import PRODUCTION

DESC = ("T3: production SGD(momentum=b, dampening=b) in DelayedOptimizer converges at "
        "0.95 c* and diverges at 1.05 c*; measured = growth factor per step, "
        "bound = spectral radius predicted by theory.stability")


@pytest.mark.parametrize("tau,ef", [(0, False), (0, True), (1, False), (2, False), (1, True),
                                    (2, True)])
@examples(4)
@given(beta=st.one_of(st.floats(0.0, 0.95), st.sampled_from([0.0, 0.9, 0.95])),
       h=log_uniform(-2, 2))
def test_critical_step_is_exact(tau, ef, beta, h):
    check(stability_check([(beta, h)], tau, ef), DESC)


# -- EF(γ) ---------------------------------------------------------------------------------------

DESC_GAMMA = ("T3, EF(gamma): production SGD(momentum=b, dampening=b) in "
              "DelayedOptimizer(correction='ef', ef_gamma=gamma) converges at 0.95 c*(b, tau, "
              "gamma) and diverges at 1.05 c*; measured = growth factor per step, bound = "
              "spectral radius predicted by theory.stability")


@st.composite
def _gammas(draw, tau):
    """γ ∈ [0, 3τ], or one of the named points: none (0), the paper's EF (1), τ-scaled (τ) and
    the theory's optimum γ*(β, τ) (marked by None, resolved once β is known)."""
    return draw(st.one_of(st.floats(0.0, 3.0 * tau),
                          st.sampled_from([0.0, 1.0, float(tau), None])))


@pytest.mark.parametrize("tau", [1, 2, 3])
@examples(3)
@given(data=st.data(), beta=st.one_of(st.floats(0.0, 0.95), st.sampled_from([0.0, 0.9, 0.95])),
       h=log_uniform(-2, 2))
def test_critical_step_is_exact_ef_gamma(tau, data, beta, h):
    from theory import stability

    gamma = data.draw(_gammas(tau), label="gamma")
    if gamma is None:
        gamma = stability.optimal_gamma(beta, tau)[0]
    check(stability_check([(beta, h)], tau, True, gamma=gamma), DESC_GAMMA)


def _p5_gamma(system):
    """The fixed probe for the EF(γ) mutant: τ ∈ {1, 2}, γ ∈ {0.5, 2.5}, β = 0.5, h = 2."""
    return [r for tau in (1, 2) for g in (0.5, 2.5)
            for r in stability_check([(0.5, 2.0)], tau, True, system, gamma=g)]


def test_ef_gamma_mutant_is_caught():
    """Production passes the EF(γ) probe; the mutant that applies γ to the fresh update only
    (:class:`verify.mutants.EFGammaMisapplied`) fails it."""
    from verify.mutants import EF_GAMMA_MUTANT
    from verify.report import REPORT

    assert all(r.passed for r in _p5_gamma(PRODUCTION))
    recs = _p5_gamma(EF_GAMMA_MUTANT)
    bad = [r for r in recs if not r.passed]
    msg = (f"{len(bad)}/{len(recs)} checks failed, e.g. {bad[0].prop}: params={bad[0].params} "
           f"verdict={bad[0].extra['verdict']}" if bad else f"all {len(recs)} checks passed")
    REPORT.mutant(EF_GAMMA_MUTANT.name, "P5", bool(bad), msg)
    assert bad, f"the EF(gamma) mutant survived P5 over gamma: {msg}"
