"""asyncpp.study.stats against independent references: scipy's tests, closed forms, the
audit's values recomputed from the committed opt-180k result files, and hypothesis
properties (Fieller's duality, TOST's interval form, Holm's definition)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from asyncpp.study import stats as S

RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "opt-180k" / "results"

vals = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False)


def _seeded(xs):
    return dict(enumerate(xs))


def _cell(name: str, key: str = "val_loss") -> dict[int, float]:
    out = {}
    for f in sorted(RESULTS.glob(f"{name}-seed*.json")):
        d = json.loads(f.read_text())
        out[d["seed"]] = d["final"][key]
    assert out, name
    return out


def _spread(xs):
    # a sample whose spread is far above rounding: the t statistic is well defined
    return max(xs) - min(xs) > 1e-3


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(vals, vals), min_size=2, max_size=8))
def test_paired_t_is_scipys_paired_t(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    d = [x - y for x, y in pairs]
    iv = S.paired_t(_seeded(a), _seeded(b))
    assert iv.estimate == pytest.approx(sum(d) / len(d), abs=1e-12)
    if _spread(d):
        ref = sps.ttest_rel(a, b)
        ci = ref.confidence_interval(0.95)
        assert iv.p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
        assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(vals, vals), min_size=2, max_size=6), st.lists(vals, min_size=1,
                                                                         max_size=4))
def test_comparisons_use_only_common_seeds(pairs, extra):
    a, b = _seeded([p[0] for p in pairs]), _seeded([p[1] for p in pairs])
    a_more = {**a, **{100 + i: x for i, x in enumerate(extra)}}
    assert S.paired_t(a_more, b) == S.paired_t(a, b)
    assert S.paired_t(a_more, b).seeds == tuple(range(len(pairs)))


def test_too_few_common_seeds_is_an_error_not_a_verdict():
    with pytest.raises(S.TooFewSeeds, match="common"):
        S.paired_t({0: 1.0, 1: 2.0}, {1: 1.5, 2: 0.0})


@settings(max_examples=60, deadline=None)
@given(st.lists(vals, min_size=2, max_size=8), st.floats(0.01, 3.0))
def test_tost_is_two_one_sided_scipy_tests_and_the_90_interval_inside_the_band(d, m):
    iv = S.tost(_seeded(d), _seeded([0.0] * len(d)), m)
    if not _spread(d):
        return
    lower = sps.ttest_1samp([x + m for x in d], 0.0, alternative="greater").pvalue
    upper = sps.ttest_1samp([x - m for x in d], 0.0, alternative="less").pvalue
    assert iv.p == pytest.approx(max(lower, upper), rel=1e-9, abs=1e-12)
    ci = sps.ttest_1samp(d, 0.0).confidence_interval(0.90)
    assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)
    inside = -m < iv.lo and iv.hi < m
    if abs(iv.p - 0.05) > 1e-9:
        assert (iv.p < 0.05) == inside


@settings(max_examples=60, deadline=None)
@given(st.lists(vals, min_size=2, max_size=8), st.floats(0.01, 3.0))
def test_beyond_margin_is_twice_scipys_one_sided_test_past_the_near_edge(d, m):
    iv = S.beyond_margin(_seeded(d), _seeded([0.0] * len(d)), m)
    if not _spread(d):
        return
    mean = sum(d) / len(d)
    if mean >= 0:
        one = sps.ttest_1samp([x - m for x in d], 0.0, alternative="greater").pvalue
    else:
        one = sps.ttest_1samp([x + m for x in d], 0.0, alternative="less").pvalue
    assert iv.p == pytest.approx(min(1.0, 2 * one), rel=1e-9, abs=1e-12)
    ci = sps.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)
    # the test's duality: p < 0.05 exactly when the 95 % interval lies wholly past the margin
    beyond = iv.lo > m or iv.hi < -m
    if abs(iv.p - 0.05) > 1e-9:
        assert (iv.p < 0.05) == beyond


def test_beyond_margin_needs_a_positive_margin():
    with pytest.raises(ValueError, match="positive"):
        S.beyond_margin({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.0}, 0.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(vals, min_size=2, max_size=8), st.lists(vals, min_size=2, max_size=8),
       st.floats(0.01, 3.0))
def test_welch_tost_and_its_upper_test_are_scipys_one_sided_welch_tests(a, b, m):
    if not (_spread(a) and _spread(b)):
        return  # no spread: the t statistic is not defined
    lower = sps.ttest_ind([x + m for x in a], b, equal_var=False, alternative="greater").pvalue
    upper = sps.ttest_ind([x - m for x in a], b, equal_var=False, alternative="less").pvalue
    ci = sps.ttest_ind(a, b, equal_var=False).confidence_interval(0.90)
    both, one = S.welch_tost(a, b, m), S.welch_at_most(a, b, m)
    assert both.p == pytest.approx(max(lower, upper), rel=1e-9, abs=1e-12)
    assert one.p == pytest.approx(upper, rel=1e-9, abs=1e-12)
    for iv in (both, one):
        assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)
        assert iv.estimate == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    if abs(one.p - 0.05) > 1e-9:
        assert (one.p < 0.05) == (one.hi < m)  # established iff the 90 % upper end < m


@settings(max_examples=60, deadline=None)
@given(st.lists(vals, min_size=2, max_size=8), st.floats(0.01, 3.0))
def test_at_most_is_the_upper_one_sided_paired_test(d, m):
    if not _spread(d):
        return
    iv = S.at_most(_seeded(d), _seeded([0.0] * len(d)), m)
    upper = sps.ttest_1samp([x - m for x in d], 0.0, alternative="less").pvalue
    assert iv.p == pytest.approx(upper, rel=1e-9, abs=1e-12)
    assert iv.p <= S.tost(_seeded(d), _seeded([0.0] * len(d)), m).p + 1e-15


def test_unpaired_tests_need_two_values_a_side_and_a_positive_margin():
    with pytest.raises(S.TooFewSeeds, match="2 values a side"):
        S.welch_tost([1.0], [1.0, 2.0], 0.1)
    with pytest.raises(ValueError, match="margin"):
        S.welch_at_most([1.0, 2.0], [1.0, 2.0], 0.0)


def test_tost_needs_a_positive_margin():
    with pytest.raises(ValueError, match="margin"):
        S.tost({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.5}, 0.0)


def test_holm_on_a_worked_example():
    # sorted p: 0.01, 0.03, 0.04 → 3·0.01, max(0.03, 2·0.03), max(0.06, 1·0.04)
    assert S.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx(
        {"a": 0.03, "c": 0.06, "b": 0.06})
    assert S.holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.floats(0.0, 1.0),
                       min_size=1, max_size=8))
def test_holm_is_its_definition(ps):
    adj = S.holm(ps)
    order = sorted(ps, key=lambda k: (ps[k], k))
    m = len(order)
    for i, k in enumerate(order):
        ref = max(min(1.0, (m - j) * ps[order[j]]) for j in range(i + 1))
        assert adj[k] == pytest.approx(ref, abs=1e-15)
        assert ps[k] <= adj[k] <= 1.0


def test_fieller_share_and_share_test_reproduce_the_audit_on_adamw_180k():
    none, corr, sync = _cell("adamw-async"), _cell("adamw-ef"), _cell("adamw-sync")
    sh = S.fieller_share(none, corr, sync)
    assert (round(sh.lo, 2), round(sh.hi, 2)) == (0.38, 0.82)
    assert sh.estimate == pytest.approx(0.70, abs=0.005)
    z = S.share_at_least(none, corr, sync, 0.5)
    assert (round(z.estimate, 3), round(z.lo, 3), round(z.hi, 3)) == (0.048, -0.014, 0.111)
    assert z.p > 0.05  # "EF recovers ≥ 50 %" is not established


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(vals, vals, vals), min_size=3, max_size=8), st.floats(-3.0, 3.0))
def test_fieller_interval_is_the_set_of_shares_a_t_test_does_not_reject(rows, rho):
    none = _seeded([r[0] for r in rows])
    corr = _seeded([r[1] for r in rows])
    sync = _seeded([r[2] for r in rows])
    sh = S.fieller_share(none, corr, sync)
    x = [r[0] - r[1] for r in rows]
    y = [r[0] - r[2] for r in rows]
    w = [u - rho * v for u, v in zip(x, y)]
    if not _spread(w) or not math.isfinite(sh.lo):
        return
    p = sps.ttest_1samp(w, 0.0).pvalue
    if abs(p - 0.05) < 1e-6:
        return  # on the boundary itself
    assert (p >= 0.05) == (sh.lo <= rho <= sh.hi)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(vals, vals, vals), min_size=2, max_size=8), st.floats(0.0, 1.0))
def test_share_test_is_a_t_test_on_the_combined_difference(rows, s):
    none = _seeded([r[0] for r in rows])
    corr = _seeded([r[1] for r in rows])
    sync = _seeded([r[2] for r in rows])
    z = [(r[0] - r[1]) - s * (r[0] - r[2]) for r in rows]
    iv = S.share_at_least(none, corr, sync, s)
    assert iv.estimate == pytest.approx(sum(z) / len(z), abs=1e-12)
    if _spread(z):
        ref = sps.ttest_1samp(z, 0.0)
        assert iv.p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12)
        ci = ref.confidence_interval(0.95)
        assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 10.0), vals), min_size=3, max_size=12))
def test_gap_slope_is_scipys_linregress(points):
    xs = [p[0] for p in points]
    if max(xs) - min(xs) < 1e-2:
        return
    iv = S.gap_slope(points)
    ys = [p[1] for p in points]
    ref = sps.linregress(xs, ys)
    assert iv.estimate == pytest.approx(ref.slope, rel=1e-9, abs=1e-9)
    # The slope's standard error from the residuals themselves: scipy derives it from 1 − r²,
    # which cancels to a rounding residue (e.g. 5e-9 for an exact fit whose own is 0).
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    intercept = my - ref.slope * mx
    ssr = sum((y - intercept - ref.slope * x) ** 2 for x, y in zip(xs, ys))
    se = math.sqrt(ssr / (n - 2) / sxx)
    q = sps.t.ppf(0.975, n - 2)
    tol = 1e-7 * (abs(ref.slope) + q * se) + 1e-9
    assert iv.lo == pytest.approx(ref.slope - q * se, abs=tol)
    assert iv.hi == pytest.approx(ref.slope + q * se, abs=tol)
    if se > 1e-6 * (abs(ref.slope) + 1e-9):  # away from exact fits, scipy's p is accurate
        assert iv.p == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)


def test_gap_slope_reproduces_the_audits_token_ladder_trend():
    """Muon's and AdamW's 2BW − sync gap against log2 tokens, pooled over the five lengths
    of opt-180k (13 gaps each)."""
    expect = {"muon": (-0.104, -0.149, -0.059), "adamw": (-0.174, -0.250, -0.098)}
    for opt, want in expect.items():
        pts = []
        for suffix in ("-tpp5", "-tpp10", "", "-tpp40", "-tpp80"):
            a, b = _cell(f"{opt}-async{suffix}"), _cell(f"{opt}-sync{suffix}")
            tok = _cell(f"{opt}-async{suffix}", "tokens")
            pts += [(math.log2(tok[k]), a[k] - b[k]) for k in S.common(a, b)]
        iv = S.gap_slope(pts)
        assert iv.n == 13
        # the audit printed three decimals (AdamW's upper end, -0.09851, as -0.098)
        assert (iv.estimate, iv.lo, iv.hi) == pytest.approx(want, abs=6e-4)


def test_select_lr_mean_rule_uses_the_seeds_every_lr_has():
    scores = {0.01: {0: 3.0, 1: 3.2, 2: 9.0}, 0.02: {0: 3.1, 1: 3.0}, 0.04: {0: 3.5, 1: 3.6}}
    ch = S.select_lr(scores)
    assert ch.seeds == (0, 1)
    assert ch.lr == 0.02  # mean 3.05 against 0.01's 3.1 on seeds {0, 1}
    assert ch.means[0.01] == pytest.approx(3.1)


def test_select_lr_refuses_a_single_seed():
    with pytest.raises(S.TooFewSeeds, match="at least 2"):
        S.select_lr({0.01: {0: 3.0}, 0.02: {0: 2.9}})


@settings(max_examples=40, deadline=None)
@given(st.floats(-6.0, -2.0), st.floats(0.1, 3.0), st.floats(-1.0, 1.0))
def test_select_lr_fit_finds_the_vertex_of_a_parabola_in_log_lr(u0, c, offset):
    grid = [math.exp(u) for u in (-7.0, -5.5, -4.0, -2.5, -1.0)]
    scores = {lr: {k: c * (math.log(lr) - u0) ** 2 + offset + 0.1 * k for k in (0, 1)}
              for lr in grid}
    ch = S.select_lr(scores, "fit")
    assert math.log(ch.lr) == pytest.approx(u0, abs=1e-6)
    assert ch.note == ""


def test_select_lr_fit_falls_back_to_the_grid_argmin_and_says_why():
    scores = {lr: {0: v, 1: v} for lr, v in ((0.01, 3.0), (0.02, 2.0), (0.04, 1.0))}
    ch = S.select_lr(scores, "fit")
    assert ch.lr == 0.04 and ch.note
