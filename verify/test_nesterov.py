"""The Nesterov delay correction on T3's quadratic (``theory.nesterov``).

Property: production ``torch.optim.SGD(momentum=β, dampening=β)`` inside
``DelayedOptimizer(delay=τ, correction="nesterov")`` (look-ahead κ_τ(β) = β + … + β^{τ+1},
resolved by the product from the group's own momentum) on f = h x²/2 converges at
ηh = 0.95·c*_N and diverges at 1.05·c*_N, c*_N = ``theory.nesterov.critical_step_nesterov``
(the EF(γ) polynomial at γ = κ, step N1 of ``T3[tau=1, Nesterov]``). The runner and the
classification are P5's (``verify.properties.stability_check``); only the delay core handed
out differs. The mutant whose look-ahead ignores the delay (κ = β, plain NAG) is caught.

And the answer to "is its critical step larger than EF's?" on the grid β ∈ {0.5, 0.9, 0.95,
0.99}, τ ∈ {1, 2, 3}: larger than EF's (γ = 1) everywhere, never larger than EF(γ*)'s.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncpp.delay import DelayedOptimizer
from verify.profiles import examples
from verify.properties import stability_check
from verify.strategies import check, log_uniform
from verify.systems import System

DESC = ("T3[Nesterov]: production SGD(momentum=b, dampening=b) in "
        "DelayedOptimizer(correction='nesterov') converges at 0.95 c*_N and diverges at "
        "1.05 c*_N; measured = growth factor per step, bound = spectral radius predicted by "
        "theory.stability at gamma = kappa_tau(b)")


class _Nesterov(System):
    """Production, with the delay core asked for ``correction="nesterov"`` (P5's runner asks
    for EF; the theory side is EF(γ = κ), the same polynomial by step N1)."""

    name = "production_nesterov"

    def delayed(self, opt, delay, correction="none", track_updates=False, ef_gamma=1.0):
        return DelayedOptimizer(opt, delay=delay, correction="nesterov",
                                track_updates=track_updates)


NESTEROV = _Nesterov()


def _records(beta, h, tau, system=NESTEROV):
    from theory.nesterov import lookahead

    return stability_check([(beta, h)], tau, True, system, gamma=float(lookahead(beta, tau)))


@pytest.mark.parametrize("tau", [1, 2, 3])
@examples(3)
@given(beta=st.one_of(st.floats(0.0, 0.95), st.sampled_from([0.0, 0.5, 0.9, 0.95])),
       h=log_uniform(-2, 2))
def test_critical_step_is_exact_nesterov(tau, beta, h):
    check(_records(beta, h, tau), DESC)


def test_critical_step_matches_theory_nesterov():
    """The c* the property uses is theory.nesterov's."""
    from theory import stability
    from theory.nesterov import critical_step_nesterov, lookahead

    for b, tau in ((0.5, 1), (0.9, 2), (0.95, 3)):
        assert critical_step_nesterov(b, tau) == stability.critical_step(
            b, tau, True, gamma=float(lookahead(b, tau)))


def test_nesterov_mutant_is_caught():
    """Production passes the probe (β = 0.9, τ ∈ {2, 3}, h = 2); the delay-blind look-ahead
    (:class:`verify.mutants.NesterovDelayBlind`) fails it."""
    from verify.mutants import NESTEROV_MUTANT
    from verify.report import REPORT

    def probe(system):
        return [r for tau in (2, 3) for r in _records(0.9, 2.0, tau, system)]

    assert all(r.passed for r in probe(NESTEROV))
    recs = probe(NESTEROV_MUTANT)
    bad = [r for r in recs if not r.passed]
    msg = (f"{len(bad)}/{len(recs)} checks failed, e.g. {bad[0].prop}: params={bad[0].params} "
           f"verdict={bad[0].extra['verdict']}" if bad else f"all {len(recs)} checks passed")
    REPORT.mutant(NESTEROV_MUTANT.name, "P5-nesterov", bool(bad), msg)
    assert bad, f"the delay-blind Nesterov mutant survived: {msg}"


def test_nesterov_vs_ef_critical_steps():
    """Larger than EF's (γ = 1) on the whole grid; at most EF(γ*)'s (γ* maximises c*)."""
    from theory.nesterov import comparison

    rows = comparison()
    assert len(rows) == 12
    for r in rows:
        assert r["nesterov"] > r["ef"] >= r["none"], r
        assert r["nesterov"] <= r["ef_gamma_star"] * (1 + 1e-6), r
        assert not r["nesterov_gt_ef_gamma_star"]
    # hand-checkable corner: β = 0.5, τ = 1, κ = 0.75: p_f = 0.5/(0.625 + √(0.625² + 1.125))
    import math

    r = next(r for r in rows if r["beta"] == 0.5 and r["tau"] == 1)
    pf = 2 * 0.5 / (0.625 + math.sqrt(0.625**2 + 4 * 0.75**2 * 0.5))
    assert r["nesterov"] == pytest.approx(pf / 0.5, rel=1e-12)
