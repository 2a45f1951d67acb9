"""Property 9: production Muon under delay reproduces the exact certified limit cycle of
``theory.muon_cycle`` (1×1 Muon = sign descent), with and without EF, heavy ball and Nesterov;
and the theory's own consistency checks (harmonic balance vs the exact cycles)."""

import math
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from theory import muon_cycle
from theory.muon_attractors import attractor_set, variant
from verify.cycle import (
    CycleInstance,
    DiagonalInstance,
    cycle_orbit,
    diagonal_cycle,
    predicted_cycle,
    start_point,
)
from verify.profiles import examples
from verify.strategies import check

DESC = {"P9.cycle.orbit": "production 1x1 Muon in DelayedOptimizer follows theory.muon_cycle's "
                          "exact certified trajectory (max |dx|/eta <= 1e-9)",
        "P9.cycle.amplitude": "measured limit-cycle amplitude equals the certified one"}
BETAS = ["0", "3/10", "1/2", "7/10", "4/5", "9/10", "19/20"]


@examples(24)
@example(inst=CycleInstance(beta="9/10", tau=1, ef=False, nesterov=False, eta=0.03))
@given(inst=st.builds(CycleInstance, beta=st.sampled_from(BETAS), tau=st.integers(1, 3),
                      ef=st.booleans(), nesterov=st.booleans(),
                      eta=st.sampled_from([0.1, 0.03, 0.5])))
def test_production_muon_follows_the_certified_cycle(inst):
    for r in cycle_orbit(inst):
        check(r, DESC[r.prop])


def test_the_floor_and_the_float_start_decide_which_attractor():
    # beta = 0.9, tau = 1, eta = 0.03: v passes through -1.8e-6 h eta (below NS's eps = 1e-7
    # for h = 1) at step 58; production steps short there and lands on another lattice offset
    inst = CycleInstance(beta="9/10", tau=1, eta=0.03)
    c = predicted_cycle(inst)
    assert c.floor_steps == (58,)
    naive = muon_cycle.cycle(Fraction(9, 10), 1, x0=Fraction(3, 10))
    assert naive.floor_steps == () and c.offset != naive.offset
    assert all(r.passed for r in cycle_orbit(inst))
    # with a curvature that keeps |v| above eps the same start follows the lattice cycle
    big = CycleInstance(beta="9/10", tau=1, eta=0.03, h=1e3)
    cb = predicted_cycle(big)
    assert cb.floor_steps == () and cb.period == naive.period
    assert abs(cb.amplitude - naive.amplitude) < Fraction(1, 10**12)
    assert all(r.passed for r in cycle_orbit(big))
    # the float start is not 3/10 for a non-dyadic eta, and is for a dyadic one
    assert start_point(inst)[1] != Fraction(3, 10)
    assert start_point(CycleInstance(eta=0.5))[1] == Fraction(0.15) / Fraction(0.5)


def test_tau0_cycles_and_beta0_is_t1_orbit():
    for tau in range(4):
        c = muon_cycle.cycle(0, tau, x0=Fraction(1, 2))
        # beta = 0 from eta/2: T1's tightness orbit, amplitude (tau + 1/2)
        assert c.amplitude == Fraction(2 * tau + 1, 2)
        assert c.period == 2 * (2 * tau + 1)
    r = cycle_orbit(CycleInstance(beta="1/2", tau=0))
    assert all(x.passed for x in r)


def test_harmonic_balance_underestimates_the_certified_cycles_at_large_beta():
    # over the start grid (J = 6 offsets, R = 1): the balance never exceeds the worst half
    # peak-to-peak, equals it at beta = 0, and is below the start-averaged one at beta >= 0.8
    for tau in (1, 2, 3):
        for b in ("0", "4/5", "19/20"):
            for nes in (False, True):
                s = attractor_set(variant(b, tau, nes), 6, 1)
                hb = muon_cycle.harmonic_balance_amplitude(float(Fraction(b)), tau, nes)
                assert hb <= float(s.worst("half_p2p")) + 1e-9
                if b == "0":
                    assert hb == pytest.approx(tau + 0.5, abs=1e-12)
                else:
                    assert hb < float(s.mean("half_p2p"))


def test_momentum_lag_step_rejects_a_decreasing_claim():
    # MC6 is a monotonicity certificate: the same step claiming a decreasing lag must fail
    from dataclasses import replace

    from theory.assumptions import beta

    s6 = next(s for s in muon_cycle.result().steps if s.name.startswith("MC6"))
    g, v, _, prem = s6.mono
    assert s6.check() == "verified"
    assert replace(s6, mono=(g, v, -1, prem), _status=None).check() == "FAILED"
    assert v == beta


def test_large_beta_asymptotics():
    for tau in (1, 2, 3):
        for beta in (0.99, 0.999):
            a = muon_cycle.harmonic_balance_amplitude(beta, tau)
            assert a / (math.pi / 2 * math.sqrt(tau / (1 - beta))) == pytest.approx(1, rel=0.05)


@pytest.mark.parametrize("beta,tau,ef", [("0", 1, False), ("1/2", 2, True), ("9/10", 1, False),
                                         ("9/10", 2, True)])
def test_diagonal_matrix_cycles_carry_over_at_band_level(beta, tau, ef):
    for r in diagonal_cycle(DiagonalInstance(beta=beta, tau=tau, ef=ef)):
        check(r, "production Muon on a diagonal quadratic (h = 1, 3, 10): stays diagonal, each "
                 "coordinate's cycle amplitude/lr in [A_1D/2, (1+eps1)(A_1D + 1)], "
                 "independent of h_i")
