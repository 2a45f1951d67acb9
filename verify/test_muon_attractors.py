"""``theory.muon_attractors``: delayed 1-D Muon as a set of certified cycles — the checks of
``python -m theory`` (MA1–MA5), the facts that make a one-start statement wrong, and the
decision that Muon groups are outside T3's model for ``ef_gamma="auto"``."""

import logging
from fractions import Fraction

import pytest
import torch

from asyncpp.delay import DelayedOptimizer
from asyncpp.optim import Muon
from theory import muon_attractors as MA


def test_numeric_checks_pass():
    for name, ok, detail in MA.numeric_checks():
        assert ok, f"{name}: {detail}"


def test_starts_grid_is_mirror_symmetric_and_avoids_the_minimiser():
    s = MA.starts(4, 2)
    assert len(s) == 16 and len(set(s)) == 16
    assert sorted(-x for x in s) == sorted(s)
    assert all(x.denominator != 1 for x in s)
    with pytest.raises(ValueError, match="offsets and radius"):
        MA.starts(0, 1)


def test_beta0_half_peak_to_peak_is_exact_max_abs_moves_with_the_offset():
    s = MA.attractor_set(MA.variant(0, 1), offsets=10, radius=1)
    assert {c.half_p2p for _, c in s.reached} == {Fraction(3, 2)}
    amps = {c.amplitude for _, c in s.reached}
    assert len(amps) > 1 and min(amps) > Fraction(3, 2)
    for _, c in s.reached:  # max|x| = H + |midpoint|
        assert c.amplitude == c.half_p2p + abs(max(c.xs) + min(c.xs)) / 2


def test_two_starts_on_one_lattice_reach_different_cycles():
    v = MA.variant("19/20", 1)
    a, b = MA.reach(v, Fraction(3, 10)), MA.reach(v, Fraction(103, 10))
    assert a.offset == b.offset and a.key() != b.key()
    assert a.period != b.period and a.amplitude != b.amplitude


def test_ef_nesterov_cycle_translates_with_the_start():
    # the same sign pattern from x0 = 0.3 and 1.3: identical H, mean |x|, different max |x|
    v = MA.variant(0, 1, nesterov=True, gamma=1)
    a, b = MA.reach(v, Fraction(3, 10)), MA.reach(v, Fraction(13, 10))
    rot = [a.signs[i:] + a.signs[:i] for i in range(a.period)]
    assert b.signs in rot
    assert a.half_p2p == b.half_p2p and a.mean_abs == b.mean_abs
    assert a.amplitude != b.amplitude


def test_ef_share_is_a_range_over_offsets():
    b = "19/20"
    sets = [MA.attractor_set(MA.variant(b, t, True, g), 20, 1)
            for t, g in ((0, None), (1, None), (1, 1))]
    sh = MA.ef_share(*sets)
    assert sh["min"] < sh["share"] < sh["max"]
    assert sh["max"] - sh["min"] > 0.1


def test_sgd_gamma_is_not_muons_floor_minimiser():
    # why ef_gamma="auto" warns on Muon groups: on Muon's 1-D cycles T3's gamma* (SGD's) gives
    # Nesterov-Muon a higher start-averaged floor than the paper's EF (gamma = 1)
    scan = MA.gamma_scan("9/10", 1, True, gammas=[0, Fraction(1, 2), 1, 2])
    assert scan["at_sgd_gamma"] > scan["at_one"] > scan["at_best"]
    assert scan["best"] != scan["sgd_gamma"]
    assert scan["plain"] > scan["at_one"]


def _muon_and_sgd():
    w = torch.nn.Parameter(torch.randn(3, 3, dtype=torch.float64))
    v = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
    return Muon([w], lr=0.01, momentum=0.9), torch.optim.SGD([v], lr=0.01, momentum=0.9,
                                                             dampening=0.9)


def test_auto_gamma_warns_on_muon_groups_only(caplog):
    muon, sgd = _muon_and_sgd()
    with caplog.at_level(logging.INFO, logger="asyncpp.delay.ef_gamma"):
        DelayedOptimizer(muon, delay=1, correction="ef", ef_gamma="auto")
    warn = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warn) == 1 and "Muon group" in warn[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="asyncpp.delay.ef_gamma"):
        DelayedOptimizer(sgd, delay=1, correction="ef", ef_gamma="auto")
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
