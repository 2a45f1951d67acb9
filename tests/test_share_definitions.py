"""One definition of a share everywhere: the ratio of the mean gaps. A difference of two shares
(two corrections on one gap, or one correction at two lengths) is the difference of the shares
the pages print, with its interval; checked on the committed results and on drawn data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from asyncpp.study import stats as S
from asyncpp.study.ladder import protocol
from asyncpp.study.ladder import report_common as rc
from asyncpp.study.ladder.tiers import get_tier

vals = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)


@pytest.fixture(scope="module")
def small():
    return rc.load_results(get_tier("small").results)


def _delta_by_finite_differences(rows: np.ndarray) -> float:
    """The delta method's standard error of x̄₁/ȳ₁ − x̄₂/ȳ₂ with the gradient taken by central
    differences, not by its formula."""
    n = len(rows)
    m = rows.mean(axis=0)

    def f(v):
        return v[0] / v[1] - v[2] / v[3]

    g = np.zeros(4)
    for i in range(4):
        h = 1e-6 * max(1.0, abs(m[i]))
        e = np.zeros(4)
        e[i] = h
        g[i] = (f(m + e) - f(m - e)) / (2 * h)
    V = np.cov(rows, rowvar=False, ddof=1) / n
    return math.sqrt(max(float(g @ V @ g), 0.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(vals, vals, vals, vals, vals, vals), min_size=3, max_size=8),
       st.floats(0.5, 2.0), st.floats(0.5, 2.0))
def test_share_difference_is_the_shares_difference_with_the_delta_methods_interval(rows, g1, g2):
    # gaps kept clear of zero (the method's own condition, which callers check first)
    n1 = {k: r[0] for k, r in enumerate(rows)}
    c1 = {k: r[1] for k, r in enumerate(rows)}
    s1 = {k: r[0] - (g1 + 0.1 * r[2]) for k, r in enumerate(rows)}  # gap in [g1 ± 0.3]
    n2 = {k: r[3] for k, r in enumerate(rows)}
    c2 = {k: r[4] for k, r in enumerate(rows)}
    s2 = {k: r[3] - (g2 + 0.1 * r[5]) for k, r in enumerate(rows)}
    d = S.share_difference((n1, c1, s1), (n2, c2, s2))
    ks = range(len(rows))
    x1, y1, x2, y2 = (np.mean([a[k] - b[k] for k in ks]) for a, b in
                      ((n1, c1), (n1, s1), (n2, c2), (n2, s2)))
    assert d.estimate == pytest.approx(x1 / y1 - x2 / y2, rel=1e-9, abs=1e-12)
    table = np.array([[n1[k] - c1[k], n1[k] - s1[k], n2[k] - c2[k], n2[k] - s2[k]] for k in ks])
    se = _delta_by_finite_differences(table)
    t = sps.t.ppf(0.975, len(rows) - 1)
    assert d.hi - d.estimate == pytest.approx(t * se, rel=1e-5, abs=1e-9)
    assert d.estimate - d.lo == pytest.approx(t * se, rel=1e-5, abs=1e-9)


def test_the_gain_of_a_correction_is_the_difference_of_the_printed_shares(small):
    for o in ("muon", "adamw", "soap"):
        s, a, e, g = (f"{o}-{m}" for m in ("sync", "async", "ef", "efg"))
        gain = rc.share_diff(small, s, a, e, g)
        share_e = protocol.fieller_share(*(rc.vals(small, c) for c in (s, a, e)))
        share_g = protocol.fieller_share(*(rc.vals(small, c) for c in (s, a, g)))
        assert gain.pp == pytest.approx(share_g.share - share_e.share, abs=1e-9)
        # Fieller's interval of mean(EF − EF(γ*)) / mean(2BW − sync), computed here
        ve, vg, va, vs = (rc.vals(small, c) for c in (e, g, a, s))
        ks = sorted(set(ve) & set(vg) & set(va) & set(vs))
        f = S.fieller_ratio({k: ve[k] - vg[k] for k in ks}, {k: va[k] - vs[k] for k in ks})
        assert (gain.lo, gain.hi) == pytest.approx((100 * f.lo, 100 * f.hi), abs=1e-9)
        assert gain.lo < gain.pp < gain.hi
        per = [(ve[k] - vg[k]) / (va[k] - vs[k]) for k in ks]
        assert gain.agree == sum(1 for v in per if v * gain.pp > 0)
    # the committed figures (experiments/README.md): each interval holds zero
    muon = rc.share_diff(small, "muon-sync", "muon-async", "muon-ef", "muon-efg")
    assert muon.text() == "+9 pp [−1, +24], 3/3"
    assert muon.verdict() == "within noise"


def test_a_share_gain_verdict_reads_its_interval():
    assert protocol.ShareDiff(5.0, 1.0, 9.0, 3).verdict() == "better"
    assert protocol.ShareDiff(-5.0, -9.0, -1.0, 3).verdict() == "worse"
    assert protocol.ShareDiff(5.0, -1.0, 9.0, 3).verdict() == "within noise"
    assert protocol.ShareDiff(5.0, None, None, 3).verdict() == "within noise"
    assert protocol.ShareDiff(5.0, 1.0, 9.0, 1).verdict() == "too few seeds"
    assert protocol.ShareDiff(5.0, None, None, 3, 2).text() == "+5 pp (gap within noise), 2/3"


def test_a_share_gain_with_a_diverged_run_is_not_stated(small):
    R = {c: dict(small[c]) for c in ("muon-sync", "muon-async", "muon-ef", "muon-efg")}
    k = next(iter(R["muon-efg"]))
    R["muon-efg"][k] = {**R["muon-efg"][k], "status": "diverged",
                        "final": {**R["muon-efg"][k]["final"], "val_loss": math.inf}}
    assert rc.share_diff(R, "muon-sync", "muon-async", "muon-ef", "muon-efg") is None


def test_a_share_change_across_lengths_is_the_shares_difference():
    later = ({0: 1.0, 1: 1.1, 2: 0.9}, {0: 2.0, 1: 2.3, 2: 1.8}, {0: 1.4, 1: 1.5, 2: 1.3})
    earlier = ({0: 3.0, 1: 3.2, 2: 2.9}, {0: 3.5, 1: 3.6, 2: 3.5}, {0: 3.1, 1: 3.3, 2: 3.2})
    p = protocol.share_change(later, earlier)

    def on_means(s, a, c):
        return (np.mean(list(a.values())) - np.mean(list(c.values()))) / (
            np.mean(list(a.values())) - np.mean(list(s.values())))

    assert p.mean == pytest.approx(100 * (on_means(*later) - on_means(*earlier)), abs=1e-9)
    d = S.share_difference((later[1], later[2], later[0]),
                           (earlier[1], earlier[2], earlier[0]))
    assert (p.lo, p.hi) == pytest.approx((100 * d.lo, 100 * d.hi), abs=1e-9)
    per = [100 * ((later[1][k] - later[2][k]) / (later[1][k] - later[0][k])
                  - (earlier[1][k] - earlier[2][k]) / (earlier[1][k] - earlier[0][k]))
           for k in range(3)]
    assert (p.positive, p.negative) == (sum(v > 0 for v in per), sum(v < 0 for v in per))
    assert protocol.share_change(({0: 1.0}, {0: 2.0}, {0: 1.5}), ({0: 1.0}, {0: 2.0},
                                                                   {0: 1.5})) is None
    bad = ({0: 1.0, 1: math.inf}, {0: 2.0, 1: 2.0}, {0: 1.5, 1: 1.5})
    assert protocol.share_change(bad, earlier) is None


def test_tables_print_shares_with_fiellers_interval(small):
    v = rc.share_val(small, "muon-sync", "muon-async", "muon-ef")
    sh = protocol.fieller_share(*(rc.vals(small, c) for c in ("muon-sync", "muon-async",
                                                              "muon-ef")))
    assert v.text == sh.text().replace("-", "−") and v.n == sh.n
    assert v.text == "54 % [35, 81]"


def test_a_ratio_without_spread_is_its_point_not_a_rounding_sized_interval():
    # two seeds with the same gap and the same recovery: b² − 4ac is 0 up to rounding
    f = S.fieller_ratio({0: 0.05, 1: 0.05}, {0: 0.87890625, 1: 0.87890625})
    assert f.lo == f.hi == pytest.approx(f.estimate, rel=1e-15)
    sync = {0: 3.0, 1: 3.0}
    delayed = {0: 3.87890625, 1: 3.87890625}
    corrected = {k: delayed[k] - 0.05 for k in delayed}
    sh = protocol.fieller_share(sync, delayed, corrected)
    assert sh.lo == sh.hi == sh.share
