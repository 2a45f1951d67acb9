"""The study protocol's tests the ladder reports beside its old rule (``ladder.protocol``):
Fieller's interval of a share, the test of "recovers at least a share s" and the slope of the
gap against log₂ tokens — checked against independent characterisations, and, on the
committed opt-180k results, against the values an independent audit computed from the JSON."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from scipy import stats as st

from asyncpp.study.ladder import protocol, stats
from asyncpp.study.ladder.report_common import load_results, vals
from asyncpp.study.ladder.report_opt import token_slope
from asyncpp.study.ladder.tiers import get_tier

R180 = load_results(get_tier("opt-180k").results)
finite = hs.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)


def _cells(n, draw_a, draw_n, draw_d):
    sync = {k: 3.0 for k in range(n)}
    delayed = {k: 3.0 + draw_d[k] for k in range(n)}
    corrected = {k: delayed[k] - draw_n[k] for k in range(n)}
    return sync, delayed, corrected


@settings(max_examples=200, deadline=None)
@given(n=hs.integers(2, 7), data=hs.data())
def test_fieller_ends_are_where_the_paired_t_of_n_minus_rho_d_reaches_its_quantile(n, data):
    """Fieller's interval is {ρ : the paired t-interval of N_k − ρ D_k holds 0}: at each end,
    stats.paired on N − ρD (an independent computation) has an interval end at zero, and ρ
    just inside the interval keeps zero inside, just outside does not."""
    dd = [data.draw(hs.floats(0.05, 1.0)) for _ in range(n)]
    nn = [data.draw(finite) for _ in range(n)]
    sync, delayed, corrected = _cells(n, None, nn, dd)
    sh = protocol.fieller_share(sync, delayed, corrected)
    assert sh.n == n and sh.share == pytest.approx(100 * sum(nn) / sum(dd))
    p_gap = stats.paired({k: dd[k] for k in range(n)}, dict.fromkeys(range(n), 0.0))
    if p_gap.lo is None or p_gap.lo <= 0:  # the gap not established: no bounded interval
        assert sh.lo is None
        return
    tol = 1e-9 * (1 + abs(sh.share))
    assert sh.lo is not None and sh.lo - tol <= sh.share <= sh.hi + tol

    def holds_zero(rho):
        p = stats.paired({k: nn[k] - rho * dd[k] for k in range(n)}, dict.fromkeys(range(n), 0.0))
        return p.lo <= 0 <= p.hi, p

    for end in (sh.lo / 100, sh.hi / 100):
        _, p = holds_zero(end)
        assert min(abs(p.lo), abs(p.hi)) == pytest.approx(0, abs=1e-9 * (1 + abs(end)))
    width = (sh.hi - sh.lo) / 100
    if width > 1e-9:
        assert holds_zero(sh.share / 100)[0]
        assert not holds_zero(sh.hi / 100 + 0.01 * width + 1e-6)[0]
        assert not holds_zero(sh.lo / 100 - 0.01 * width - 1e-6)[0]


@settings(max_examples=100, deadline=None)
@given(pts=hs.lists(hs.tuples(hs.sampled_from([5, 10, 20, 40, 80]), finite), min_size=3,
                    max_size=15))
def test_gap_slope_is_least_squares_on_log2_tokens(pts):
    sl = protocol.gap_slope(pts)
    if len({k for k, _ in pts}) < 2:
        assert sl is None
        return
    x = np.log2([k for k, _ in pts])
    y = np.array([g for _, g in pts])
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    se = math.sqrt(resid @ resid / (len(x) - 2) / ((x - x.mean()) @ (x - x.mean())))
    half = st.t.ppf(0.975, len(x) - 2) * se
    assert sl.slope == pytest.approx(b, abs=1e-9) and sl.m == len(pts)
    assert sl.lo == pytest.approx(b - half, abs=1e-9) and sl.hi == pytest.approx(b + half, abs=1e-9)


def test_the_audit_values_on_opt_180k():
    """AdamW's EF share 70 % with Fieller's interval [38 %, 82 %]; "at least half":
    +0.048 [−0.014, +0.111], not established; the gap per doubling of tokens −0.104
    [−0.149, −0.059] (Muon) and −0.174 [−0.250, −0.098] (AdamW), over 13 gaps each."""
    s, a, c = (vals(R180, f"adamw-{m}") for m in ("sync", "async", "ef"))
    sh = protocol.fieller_share(s, a, c)
    assert (round(sh.share), round(sh.lo), round(sh.hi), sh.n) == (70, 38, 82, 5)
    half = protocol.share_at_least(s, a, c, 0.5)
    assert (round(half.mean, 3), round(half.lo, 3), round(half.hi, 3)) == (0.048, -0.014, 0.111)
    assert protocol.share_test_word(half) == "not established"
    for o, want in (("muon", (-0.104, -0.149, -0.059)), ("adamw", (-0.174, -0.250, -0.098))):
        sl = token_slope(R180, o)
        assert (round(sl.slope, 3), round(sl.lo, 3), round(sl.hi, 3)) == want and sl.m == 13
        assert sl.word == "shrinks"


def test_the_tables_show_the_new_verdicts_beside_the_old_rule():
    text = (get_tier("opt-180k").root / "tables.md").read_text(encoding="utf-8")
    old = text.index("2BW + EF recovers 70 % [38, 82] of the gap (its difference to 2BW:")
    new = text.index("2BW + EF recovers 70 % [38, 82] (Fieller's 95 % interval")
    assert old < new < text.index("**SOAP**")
    assert "(2BW − EF) − ½ (2BW − sync) = +0.048 [−0.014, +0.111], not established" in text
    assert "Muon −0.104 [−0.149, −0.059] per doubling over 13 gaps: shrinks" in text


def test_l3_and_l6_read_by_the_protocol_beside_the_old_rule():
    """Where the protocol changes a part: AdamW's "EF recovers ≥ 50 %" holds by the old rule
    (2BW − EF above zero, share 70 % on the means) but is not established by the share ≥ 50 %
    test; the two gaps of L6 hold by the slope over every length (shrinking), where a paired t
    on two seeds read them within noise."""
    from asyncpp.study.ladder import ladder_verdicts as lv

    tiers = {"opt-180k": R180}
    old3 = {p.text: p.verdict for p in lv.parts("L3", tiers)}
    assert old3["EF recovers ≥ 50 % of AdamW's gap"] == lv.HOLDS
    # the protocol's reading names its test beside the verdict (Part.test), not in the text
    share = next(p for p in lv.protocol_parts("L3", tiers)
                 if p.text == "EF recovers ≥ 50 % of AdamW's gap")
    assert share.verdict == lv.NOISE and share.test.startswith("share ≥ 0.5 test")
    old6 = [p.verdict for p in lv.parts("L6", tiers)]
    new6 = [p.verdict for p in lv.protocol_parts("L6", tiers)]
    assert old6[:2] == [lv.NOISE, lv.NOISE] and new6[:2] == [lv.HOLDS, lv.HOLDS]
    assert old6[2] == new6[2]
