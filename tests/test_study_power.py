"""The power of the paired tests and the seeds they need, against simulated studies."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from asyncpp.study.power import power_t, power_tost, seeds_for_power

DRAWS = 40_000


def _simulated(n: int, mu: float, sd: float, rng) -> tuple[np.ndarray, np.ndarray]:
    d = rng.normal(mu, sd, size=(DRAWS, n))
    return d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(n)


@pytest.mark.parametrize("n,effect,sd,alpha,sided", [
    (5, 0.10, 0.08, 0.05, 1), (8, 0.03, 0.04, 0.01, 2), (14, -0.05, 0.06, 0.0125, 2),
    (4, 0.2, 0.3, 0.05, 2)])
def test_the_t_tests_power_is_the_rejection_rate_of_simulated_studies(n, effect, sd, alpha,
                                                                       sided):
    m, se = _simulated(n, effect, sd, np.random.default_rng(n))
    crit = stats.t.ppf(1 - alpha / sided, n - 1)
    t = m / se * np.sign(effect)
    rate = np.mean(t > crit)
    # the binomial sd of a rate over DRAWS draws is at most 0.0025: 4 of them
    assert power_t(n, effect, sd, alpha, sided) == pytest.approx(rate, abs=0.01)


@pytest.mark.parametrize("n,margin,sd,alpha,true", [
    (6, 0.04, 0.03, 0.05, 0.0), (11, 0.04, 0.031, 0.01, 0.0), (3, 0.05, 0.05, 0.05, 0.0),
    (20, 0.02, 0.04, 0.01, 0.0), (14, 0.04, 0.03, 0.01, 0.015), (9, 0.04, 0.02, 0.05, -0.02)])
def test_the_tost_power_is_a_lower_bound_tight_where_the_power_is_high(n, margin, sd, alpha,
                                                                       true):
    m, se = _simulated(n, true, sd, np.random.default_rng(100 + n))
    crit = stats.t.ppf(1 - alpha, n - 1)
    rate = np.mean(((m + margin) / se > crit) & ((m - margin) / se < -crit))
    bound = power_tost(n, margin, sd, alpha, true)
    assert bound <= rate + 0.01
    if rate > 0.5:
        assert bound == pytest.approx(rate, abs=0.01)


def test_the_seeds_needed_are_the_first_count_that_reaches_the_power():
    for test, eff, sd, alt, margin in (("difference", 0.08, 0.1, "greater", 0.0),
                                       ("difference", -0.05, 0.04, "two-sided", 0.0),
                                       ("equivalence", 0.0, 0.03, "two-sided", 0.04)):
        n = seeds_for_power(test, eff, sd, 0.01, 0.8, alt, margin)
        pw = [power_tost(k, margin, sd, 0.01) if test == "equivalence" else
              power_t(k, eff, sd, 0.01, 2 if alt == "two-sided" else 1) for k in (n - 1, n)]
        assert n is not None and n > 3 and pw[1] >= 0.8 > pw[0]
    # a one-sided test cannot be powered for an effect on its other side, nor for none
    assert seeds_for_power("difference", -0.1, 0.01, 0.05, 0.8, "greater") is None
    assert seeds_for_power("difference", 0.1, 0.01, 0.05, 0.8, "less") is None
    assert seeds_for_power("difference", 0.0, 0.01, 0.05, 0.8) is None
    assert seeds_for_power("difference", 0.1, 0.01, 0.05, 0.8, "greater") == 3
    assert seeds_for_power("difference", 0.001, 1.0, 0.05, 0.8, most=50) is None
    # a true gap outside the margin: no seed count makes TOST establish equivalence
    assert power_tost(50, 0.04, 0.01, 0.05, 0.04) == 0.0
    assert seeds_for_power("equivalence", -0.05, 0.01, 0.05, 0.8, margin=0.04) is None
    # nearer the margin, more seeds
    assert (seeds_for_power("equivalence", 0.0, 0.03, 0.05, 0.8, margin=0.04)
            < seeds_for_power("equivalence", 0.02, 0.03, 0.05, 0.8, margin=0.04))
