"""experiments/stats.py: the paired interval, the verdict rule and the share, on hand-checked
numbers (the t quantiles are the textbook values)."""

import math

import pytest

from asyncpp.study.ladder import stats


def test_t_quantiles_are_the_textbook_values():
    # t_{0.975, 2} = 4.303, t_{0.975, 4} = 2.776
    assert stats.t_quantile(3) == pytest.approx(4.3027, abs=1e-4)
    assert stats.t_quantile(5) == pytest.approx(2.7764, abs=1e-4)


def test_paired_interval_on_known_differences():
    a = {0: 3.0, 1: 3.2, 2: 3.1, 7: 9.9}
    b = {0: 3.1, 1: 3.31, 2: 3.22}  # seed 7 unpaired: dropped
    p = stats.paired(a, b)
    d = (-0.1, -0.11, -0.12)
    mean = sum(d) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)
    assert p.seeds == (0, 1, 2) and p.n == 3
    assert p.mean == pytest.approx(mean) and p.sd == pytest.approx(sd)
    assert (p.lo, p.hi) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert p.negative == 3 and p.positive == 0 and p.signs == "3/3 negative"
    assert p.excludes_zero and stats.verdict(p) == "better"
    assert stats.verdict(p, lower_is_better=False) == "worse"
    # a margin wider than the interval's distance from zero: within noise
    assert stats.verdict(p, margin=0.1) == "within noise"


def test_all_seeds_one_way_is_not_enough():
    # every seed negative, but the interval crosses zero (t = 2.6 on 2 df)
    p = stats.paired({0: 0.0, 1: 0.0, 2: 0.0}, {0: 0.01, 1: 0.02, 2: 0.15})
    assert p.negative == 3 and not p.excludes_zero
    assert stats.verdict(p) == "within noise"


def test_one_seed_has_no_interval():
    p = stats.paired({0: 1.0}, {0: 2.0})
    assert p.lo is None and stats.verdict(p) == "too few seeds"
    with pytest.raises(ValueError, match="share no seed"):
        stats.paired({0: 1.0}, {1: 1.0})


def test_share_per_seed_and_on_means():
    sync = {0: 3.0, 1: 3.1}
    none = {0: 3.4, 1: 3.3}
    corr = {0: 3.2, 1: 3.3}
    on_means, per = stats.share(sync, none, corr)
    assert per == {0: pytest.approx(0.5), 1: pytest.approx(0.0)}
    assert on_means == pytest.approx((3.35 - 3.25) / (3.35 - 3.05))


def test_summary_and_sd_units():
    s = stats.summary({0: 1.0, 1: 3.0})
    assert (s.mean, s.sd, s.n) == (2.0, pytest.approx(math.sqrt(2)), 2)
    assert s.fmt(2) == "2.00 ± 1.41"
    p = stats.paired({0: 2.0, 1: 4.0}, {0: 1.0, 1: 3.0})
    assert stats.in_sd_units(p, s) == pytest.approx(1 / math.sqrt(2))


def test_an_interval_that_excludes_zero_never_prints_a_zero_end():
    # differences 0.0092, 0.0059, 0.0070, 0.0269, 0.0076 (opt-180k's SOAP EF(γ*) − sync):
    # the lower end is +0.0004, which three decimals would print as +0.000 beside "worse";
    # one significant digit in the same width keeps the tables as wide as they were
    a = {k: 4.0 + d for k, d in enumerate((0.0092, 0.0059, 0.0070, 0.0269, 0.0076))}
    b = {k: 4.0 for k in range(5)}
    p = stats.paired(a, b)
    assert 0 < p.lo < 0.0005 and stats.verdict(p) == "worse"
    assert p.interval(3) == f"[+4e-04, {p.hi:+.3f}]"
    assert "+0.000," not in p.fmt(3)
    assert stats.endpoint(-0.00004, 3) == "-4e-05" and stats.endpoint(0.0, 3) == "+0.000"
    assert len(stats.endpoint(-0.0000012, 3)) == len("-0.000")
    assert stats.endpoint(0.0123, 3) == "+0.012" and stats.endpoint(-0.5, 1) == "-0.5"
