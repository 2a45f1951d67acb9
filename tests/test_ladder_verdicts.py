"""The ladder's prediction verdicts (experiments/ladder_verdicts.py) on synthetic result files:
the direction rule (holds / does not hold / within noise / pending), the share condition of
L3, the unpaired size comparison of L7 against scipy's Welch test, and the lr rule of L10."""

import json
from pathlib import Path

import pytest
from scipy import stats as st

from asyncpp.study import stats as S
from asyncpp.study.ladder import ladder_verdicts as lv
from asyncpp.study.ladder import primary, stats, sweep
from asyncpp.study.ladder import tables_opt as to
from asyncpp.study.ladder.report_common import load_results

EXP = Path(__file__).resolve().parent.parent / "experiments"


def _write(results: Path, cell: str, values: dict[int, float]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for seed, v in values.items():
        rec = {"cell": cell, "seed": seed, "status": "ok",
               "final": {"val_loss": v, "params": 180_512, "tokens_per_param": 20.0,
                         "epochs": 0.12}}
        (results / f"{cell}-seed{seed}.json").write_text(json.dumps(rec))


def _paired(diffs):
    return stats.paired(dict(enumerate(diffs)), dict.fromkeys(range(len(diffs)), 0.0))


def test_direction_rule():
    above = _paired([0.10, 0.12, 0.11])
    assert lv.directional(above, +1) == lv.HOLDS
    assert lv.directional(above, -1) == lv.FAILS
    assert lv.directional(above, -1, margin=0.2) == lv.HOLDS  # wholly below the margin
    noisy = _paired([0.10, -0.05, 0.02])
    assert lv.directional(noisy, +1) == lv.directional(noisy, -1) == lv.NOISE
    assert lv.directional(_paired([0.1, 0.2]), +1) == lv.PENDING  # 2 seeds < 3
    assert lv.directional(None, +1) == lv.PENDING


def _claims(tmp: Path, ef_offsets) -> dict:
    sync = {0: 4.00, 1: 4.02, 2: 3.99}
    _write(tmp, "adamw-sync", sync)
    _write(tmp, "adamw-async", {k: v + 0.20 + 0.01 * k for k, v in sync.items()})
    _write(tmp, "adamw-ef", {k: v + off for (k, v), off in zip(sync.items(), ef_offsets)})
    return {"opt-180k": load_results(tmp)}


def test_l3_needs_the_interval_and_half_the_gap(tmp_path):
    # EF leaves ~0.05 of a ~0.21 gap: recovers ~76 %, interval of 2BW − EF above zero
    t = _claims(tmp_path / "a", (0.05, 0.06, 0.04))
    adamw = lv.parts("L3", t)[0]
    assert adamw.verdict == lv.HOLDS and "share on the seed means 76 %" in adamw.evidence
    # EF leaves ~0.15: the interval is still above zero but the share is ~29 %
    t = _claims(tmp_path / "b", (0.15, 0.16, 0.14))
    assert lv.parts("L3", t)[0].verdict == lv.FAILS
    # EF indistinguishable from 2BW
    t = _claims(tmp_path / "c", (0.30, 0.11, 0.24))
    assert lv.parts("L3", t)[0].verdict == lv.NOISE
    assert lv.combine(lv.parts("L3", t)) in (lv.NOISE, lv.PENDING)


def test_l3_gives_no_share_of_a_gap_within_noise(tmp_path):
    """Muon's gap with an interval across zero: EF's part is within noise however far EF sits
    below 2BW, and no share (a ratio of noise) is printed."""
    sync = {0: 4.00, 1: 4.02, 2: 3.99}
    _write(tmp_path, "muon-sync", sync)
    _write(tmp_path, "muon-async", {0: 4.03, 1: 4.00, 2: 4.00})  # gap +0.007, across zero
    _write(tmp_path, "muon-ef", {0: 3.97, 1: 3.95, 2: 3.96})  # far below 2BW, every seed
    muon = lv.parts("L3", {"opt-180k": load_results(tmp_path)})[1]
    assert muon.verdict == lv.NOISE
    assert "no share" in muon.evidence and "%" not in muon.evidence


def test_l7_welch_interval_matches_scipy():
    a, b = [0.05, 0.07, 0.06], [0.02, 0.01, 0.04]
    p = lv.welch(a, b)
    res = st.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert p.mean == pytest.approx(sum(a) / 3 - sum(b) / 3)
    assert (p.lo, p.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert lv.welch([0.1], b) is None


def test_l6_gap_growth_is_paired_by_seed(tmp_path):
    for suffix, gap in (("", 0.10), ("-tpp80", 0.04)):
        _write(tmp_path, f"muon-sync{suffix}", {0: 3.0, 1: 3.1})
        _write(tmp_path, f"muon-async{suffix}", {0: 3.0 + gap, 1: 3.1 + gap + 0.001})
    muon = lv.parts("L6", {"opt-180k": load_results(tmp_path)})[0]
    assert muon.verdict == lv.HOLDS  # the gap shrank in both seeds by ~0.06
    assert "gap(80) − gap(20) −0.060" in muon.evidence


def test_l6_ef_share_is_paired_by_seed_across_lengths(tmp_path):
    """EF recovers about half of AdamW's gap at 20 tokens/parameter and 90 % at 80, in both
    seeds: the share did not fall; the reverse lengths make it fall."""
    def ladder(share20, share80):
        for suffix, per in (("", share20), ("-tpp80", share80)):
            _write(tmp_path, f"adamw-sync{suffix}", {0: 4.0, 1: 4.1})
            _write(tmp_path, f"adamw-async{suffix}", {0: 4.2, 1: 4.3})
            _write(tmp_path, f"adamw-ef{suffix}",
                   {k: 4.2 + k / 10 - per[k] * 0.2 for k in (0, 1)})
        return lv.parts("L6", {"opt-180k": load_results(tmp_path)})[-1]

    rose = ladder({0: 0.5, 1: 0.48}, {0: 0.9, 1: 0.9})  # +40 and +42 points
    assert rose.verdict == lv.HOLDS and "share(80) − share(20) +41 [" in rose.evidence
    fell = ladder({0: 0.9, 1: 0.9}, {0: 0.5, 1: 0.48})
    assert fell.verdict == lv.FAILS and "−41 [" in fell.evidence


def test_l6_gives_no_share_of_a_gap_within_noise_at_80(tmp_path):
    """At 80 tokens/parameter AdamW's gap is +0.10 and −0.02 (within noise): a share of it
    is a ratio of noise, so the part is within noise and says why, with EF − 2BW beside it."""
    for suffix, gaps, ef in (("", {0: 0.2, 1: 0.2}, {0: 0.1, 1: 0.1}),
                             ("-tpp80", {0: 0.1, 1: -0.02}, {0: 0.15, 1: 0.05})):
        _write(tmp_path, f"adamw-sync{suffix}", {0: 4.0, 1: 4.0})
        _write(tmp_path, f"adamw-async{suffix}", {k: 4.0 + g for k, g in gaps.items()})
        _write(tmp_path, f"adamw-ef{suffix}", {k: 4.0 + g for k, g in ef.items()})
    part = lv.parts("L6", {"opt-180k": load_results(tmp_path)})[-1]
    assert part.verdict == lv.NOISE
    assert part.evidence.startswith("the gap at 80 is within noise (+0.040 [")
    assert "no share; EF − 2BW at 80 +0.060 [" in part.evidence


def test_l6_gives_no_share_of_a_gap_within_noise_at_20(tmp_path):
    """The same rule at the other end: AdamW's gap at 20 is +0.10 and −0.02, at 80 a clear
    +0.2: the part names the 20-token gap and gives no share."""
    for suffix, gaps, ef in (("", {0: 0.1, 1: -0.02}, {0: 0.05, 1: 0.0}),
                             ("-tpp80", {0: 0.2, 1: 0.2}, {0: 0.1, 1: 0.1})):
        _write(tmp_path, f"adamw-sync{suffix}", {0: 4.0, 1: 4.0})
        _write(tmp_path, f"adamw-async{suffix}", {k: 4.0 + g for k, g in gaps.items()})
        _write(tmp_path, f"adamw-ef{suffix}", {k: 4.0 + g for k, g in ef.items()})
    part = lv.parts("L6", {"opt-180k": load_results(tmp_path)})[-1]
    assert part.verdict == lv.NOISE
    assert part.evidence.startswith("the gap at 20 is within noise (+0.040 [")
    assert "no share; EF − 2BW at 20 −0.015 [" in part.evidence


def test_l10_compares_settled_lrs(tmp_path, monkeypatch):
    tier = sweep.get_tier("opt-180k").at(results=tmp_path)
    monkeypatch.setitem(sweep.TIERS, "opt-180k", tier)
    for m, best in (("sync", 0.01), ("async", 0.02)):
        for lr in (0.005, 0.01, 0.02, 0.04):
            v = 3.5 if lr == best else 3.9
            _write(tmp_path, to.lr_cell_name("adamw", m, lr), {0: v})
    part = lv._lr_part("opt-180k", "adamw", "async")
    assert part.verdict == lv.FAILS and part.evidence == "0.02 vs 0.01"
    assert lv._lr_part("opt-180k", "adamw", "ef").verdict == lv.PENDING


def test_verdicts_on_the_preregistered_seeds_beside_all_seeds(tmp_path):
    """Seeds 3 and 4 narrow an interval the three pre-registered seeds leave wide; the
    restricted reading keeps the 3-seed verdict."""
    gaps = {0: 0.10, 1: 0.30, 2: 0.05, 3: 0.20, 4: 0.15}
    _write(tmp_path, "adamw-sync", dict.fromkeys(gaps, 4.0))
    _write(tmp_path, "adamw-async", {k: 4.0 + g for k, g in gaps.items()})
    tiers = {"opt-180k": load_results(tmp_path)}
    first = lambda t: lv.parts("L1", t)[0]  # noqa: E731  AdamW's gap above zero
    assert first(tiers).verdict == lv.HOLDS
    assert first(lv.restrict(tiers, lv.PREREGISTERED_SEEDS)).verdict == lv.NOISE


def _muon(tmp: Path, cells: dict[str, float], jitter=(0.0, 0.004, -0.003, 0.002, -0.001)):
    """Muon cells at 3.9 + offset, seeds 0–4, each seed's own small wiggle per cell."""
    for i, (cell, off) in enumerate(cells.items()):
        _write(tmp, cell, {k: 3.9 + off + (i + 1) * j for k, j in enumerate(jitter)})
    return load_results(tmp)


def test_l1_reads_muons_gap_by_tost_at_its_declared_margin(tmp_path):
    """A gap of +0.005 with little spread: the old rule says "below 0.04" holds and TOST at
    ±0.04 says equivalent; +0.10 is beyond the margin (does not hold); a gap of +0.02 with a
    spread of ±0.08 is neither (not established) — where the old rule says within noise."""
    def muon_part(offset, jitter=(0.0, 0.004, -0.003, 0.002, -0.001)):
        R = _muon(tmp_path / str(offset) / str(jitter[1]),
                  {"muon-sync": 0.0, "muon-async": offset}, jitter)
        new = [p for p in lv.protocol_parts("L1", {"opt-180k": R}) if "Muon's 2BW gap" in p.text]
        old = [p for p in lv.parts("L1", {"opt-180k": R}) if "Muon's gap below" in p.text]
        return new[0], old[0]
    new, old = muon_part(0.005)
    assert (new.verdict, old.verdict) == (lv.HOLDS, lv.HOLDS)
    assert new.test.startswith("equivalence: TOST within ±0.04")
    assert "declared before the runs" in new.evidence
    assert muon_part(0.10)[0].verdict == lv.FAILS
    new, old = muon_part(0.02, (0.0, 0.08, -0.08, 0.06, -0.05))
    assert (new.verdict, old.verdict) == (lv.OPEN, lv.NOISE)
    assert lv.combine([new, old]) == lv.OPEN


def test_l9_nesterov_equivalence_is_labelled_post_hoc_and_exploratory(tmp_path):
    R = _muon(tmp_path, {"muon-ef": 0.0, "muon-nag": 0.003})
    new = lv.protocol_parts("L9", {"opt-180k": R})
    assert len(new) == 3 and new[2].verdict == lv.HOLDS
    assert f"post-hoc margin ±{lv.post_hoc_margin():g}" in new[2].evidence
    assert "exploratory" in new[2].evidence
    # the old rule reads a tight +0.0034 difference (interval above zero) as "does not hold"
    old = lv.parts("L9", {"opt-180k": R})[2]
    assert old.verdict == lv.FAILS and old.evidence.startswith("+0.003")
    assert lv.post_hoc_margin() > 0 and "L9" in lv.POST_HOC and "L1" not in lv.POST_HOC


def test_l7_does_not_grow_is_the_upper_test_of_tost_unpaired(tmp_path):
    """Muon's gap 0.010 at 180k and 0.012 at 580k, tight: below +margin (holds); 0.20 at
    580k: above it (does not hold); without opt-580k, pending."""
    def tiers(gap580):
        small = _muon(tmp_path / "s", {"muon-sync": 0.0, "muon-async": 0.010})
        big = _muon(tmp_path / f"b{gap580}", {"muon-sync": 0.0, "muon-async": gap580},
                    (0.0, 0.002, -0.004, 0.001, 0.003))
        return {"opt-180k": small, "opt-580k": big}
    assert lv.protocol_parts("L7", tiers(0.012))[0].verdict == lv.HOLDS
    fails = lv.protocol_parts("L7", tiers(0.20))[0]
    assert fails.verdict == lv.FAILS and "one-sided p = " in fails.evidence
    assert lv.protocol_parts("L7", {"opt-180k": tiers(0.012)["opt-180k"]})[0].verdict == \
        lv.PENDING


def test_holm_turns_a_nominal_p_into_not_established(tmp_path):
    """Hand-made opt-180k cells: AdamW's gap is large (P1 holds after Holm); Muon + EF sits
    below sync with a nominal two-sided p ≈ 0.03 (P4) — Holm over the four endpoints that can
    be tested (no token ladder: P5 is not measurable) multiplies it by 3, so it is not
    established; EF recovers nothing (P3), Muon's gap is wide (P2)."""
    base = {k: 4.0 + 0.01 * k for k in range(5)}
    _write(tmp_path, "adamw-sync", base)
    adamw_async = {k: v + g for (k, v), g in zip(base.items(), (0.30, 0.31, 0.29, 0.30, 0.32))}
    _write(tmp_path, "adamw-async", adamw_async)
    _write(tmp_path, "adamw-ef", adamw_async)
    _write(tmp_path, "muon-sync", base)
    _write(tmp_path, "muon-async", {k: v + g for (k, v), g in
                                    zip(base.items(), (0.2, -0.1, 0.3, 0.0, 0.1))})
    _write(tmp_path, "muon-ef", {k: v + g for (k, v), g in
                                 zip(base.items(), (-0.05, -0.01, -0.06, -0.01, -0.04))})
    fam = {q.id: q for q in primary.family(load_results(tmp_path))}
    assert [q for q in fam if fam[q].p is None] == ["P5"] and fam["P5"].verdict == "pending"
    p4 = st.ttest_1samp([-0.05, -0.01, -0.06, -0.01, -0.04], 0.0).pvalue
    assert fam["P4"].p == pytest.approx(p4) and 0.01 < p4 < 0.05
    assert fam["P4"].p_holm == pytest.approx(3 * p4) and fam["P4"].verdict == "not established"
    p1 = st.ttest_1samp([0.30, 0.31, 0.29, 0.30, 0.32], 0.0, alternative="greater").pvalue
    assert fam["P1"].p == pytest.approx(p1) and fam["P1"].p_holm == pytest.approx(4 * p1)
    assert fam["P1"].verdict == "holds"
    assert fam["P3"].p > 0.5  # EF recovers nothing: the one-sided share test is far from it
    assert "Holm p = " in fam["P4"].text()


def test_primary_endpoints_name_ladder_parts_that_exist():
    """Every primary endpoint's ladder part is a part of its prediction under the study
    protocol's reading (a renamed part would silently lose its Holm p), and the family is
    protocol v2's, Holm-adjusted as ``stats.holm`` defines it."""
    tiers = lv.ladder_tiers()
    for pid, (key, text) in primary.PARTS.items():
        assert text in [p.text for p in lv.protocol_parts(key, tiers)], pid
        assert f"**primary {pid}**" in lv.protocol_evidence_of(key, tiers)
    fam = primary.family(tiers["opt-180k"])
    assert [q.id for q in fam] == [e["id"] for e in primary.protocol()["endpoint"]]
    tested = {q.id: q.p for q in fam if q.p is not None}
    assert {q.id: q.p_holm for q in fam if q.p is not None} == S.holm(tested)
    # an exploratory part carries no Holm p
    assert "primary" not in lv.protocol_evidence_of("L9", tiers)


def test_every_part_states_the_test_that_decided_it():
    """Each part of L1–L10, old rule and study protocol alike, names its test beside its
    verdict: a difference's interval, TOST with its margin, the share test with Fieller's
    interval, the slope's interval, or a point comparison without one (L10)."""
    tiers = lv.ladder_tiers()
    kinds = ("difference:", "equivalence: TOST within ±", "non-inferiority: TOST's upper test",
             "share ≥ 0.5 test", "slope of the gap", "point comparison")
    for key in lv.PREDICTIONS:
        for p in lv.parts(key, tiers) + (lv.protocol_parts(key, tiers)
                                         if key in lv.PROTOCOL_KEYS else []):
            assert p.test.startswith(kinds), (key, p.text, p.test)
            point = p.test.startswith("point")
            assert ("no interval" in p.test) if point else ("% interval" in p.test), p.test
        assert lv.evidence_of(key, tiers).count("(*") == len(lv.parts(key, tiers))
    assert all(p.test.startswith("point") for p in lv.parts("L10", tiers))
