"""The per-claim verdicts of ``experiments/claims.py`` on synthetic result folders.

Each test writes result files as ``experiments/sweep.py`` does (one JSON per run) and checks the
verdict the rule gives: a word only when the paired 95 % interval excludes zero, "within noise"
otherwise; the regime read from the configuration; the paper's regime listed first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncpp.study.ladder import claims

ROOT = Path(__file__).resolve().parent.parent



def _write(root: Path, tier: str, cell: str, seed: int, val: float, *, params=131_392,
           steps=300, batch=16, seq=64, epochs=0.18):
    d = root / tier / "results"
    d.mkdir(parents=True, exist_ok=True)
    rec = {"cell": cell, "seed": seed, "status": "ok",
           "config": {"train": {"steps": steps, "batch_size": batch},
                      "data": {"seq_len": seq}, "model": {"vocab_size": 512}},
           "final": {"val_loss": val, "params": params, "tokens": steps * batch * seq,
                     "epochs": epochs}}
    (d / f"{cell}-seed{seed}.json").write_text(json.dumps(rec), encoding="utf-8")


def _table1(root, tier, sync, asyn, ef, opt="muon", **kw):
    for k, (s, a, e) in enumerate(zip(sync, asyn, ef)):
        _write(root, tier, f"{opt}-sync", k, s, **kw)
        _write(root, tier, f"{opt}-async", k, a, **kw)
        _write(root, tier, f"{opt}-ef", k, e, **kw)


def _verdict(root, tier, key):
    return next(v for v in claims.verdicts(tier, root)[1] if v.claim == key)


def test_ef_reproduced_when_every_seed_agrees(tmp_path):
    _table1(tmp_path, "t", [3.00, 3.10, 3.05], [3.20, 3.31, 3.24], [3.10, 3.20, 3.15])
    v = _verdict(tmp_path, "t", "muon-ef")
    assert v.word == "reproduced"
    assert v.paired.hi < 0 and v.paired.n == 3


def test_within_noise_when_the_interval_straddles_zero(tmp_path):
    _table1(tmp_path, "t", [3.0, 3.0, 3.0], [3.2, 3.2, 3.2], [3.25, 3.10, 3.20])
    assert _verdict(tmp_path, "t", "muon-ef").word == "within noise"


def test_not_reproduced_when_ef_is_worse(tmp_path):
    _table1(tmp_path, "t", [3.0, 3.1, 3.2], [3.2, 3.3, 3.4], [3.30, 3.41, 3.50])
    assert _verdict(tmp_path, "t", "muon-ef").word == "not reproduced"


def test_share_size_against_the_papers_range(tmp_path):
    # shares 0.5, 0.55, 0.6: the interval [0.43, 0.67] is not wholly inside 50-70 %
    _table1(tmp_path, "t", [3.0, 3.0, 3.0], [3.2, 3.2, 3.2], [3.10, 3.09, 3.08])
    assert _verdict(tmp_path, "t", "muon-share").word == "within noise"
    # AdamW at 20-30 %, all seeds: wholly below the paper's 85-90 %
    _table1(tmp_path, "t", [3.0, 3.0, 3.0], [4.0, 4.0, 4.0], [3.80, 3.75, 3.70], opt="adamw")
    v = _verdict(tmp_path, "t", "adamw-share")
    assert v.word == "not reproduced" and "85–90 %" in v.evidence


def test_one_seed_gives_no_verdict_word(tmp_path):
    _table1(tmp_path, "t", [3.0], [3.2], [3.1])
    assert _verdict(tmp_path, "t", "muon-ef").word == "too few seeds"


def test_regime_and_the_papers_regime_first(tmp_path):
    _table1(tmp_path, "tiny", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2])
    # 20 tokens/parameter: 409,600 tokens on 20,480 parameters, one pass
    _table1(tmp_path, "opt-20k", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2], params=20_480,
            steps=400, batch=8, seq=128, epochs=0.5)
    _table1(tmp_path, "opt-big", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2], params=40_960,
            steps=800, batch=8, seq=128, epochs=0.9)
    assert claims.tiers(tmp_path) == ["opt-20k", "opt-big", "tiny"]
    reg = claims.regime("opt-20k", claims.load("opt-20k", tmp_path))
    assert reg.tokens == 400 * 8 * 128 and reg.tokens_per_param == pytest.approx(20.0)
    assert reg.paper_regime
    tiny = claims.regime("tiny", claims.load("tiny", tmp_path))
    assert not tiny.paper_regime and tiny.tokens_per_param == pytest.approx(307_200 / 131_392)
    md = claims.summary_md(tmp_path)
    assert md.index("`opt-20k`") < md.index("`tiny`")
    regime_lines = {ln.split("`")[1]: ln for ln in md.splitlines() if ln.startswith("- `")}
    assert "**not the paper's regime**" in regime_lines["tiny"]
    assert "not the paper's" not in regime_lines["opt-20k"]


def test_more_than_one_epoch_is_not_the_papers_regime(tmp_path):
    _table1(tmp_path, "rep", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2], params=20_480, steps=400,
            batch=8, seq=128, epochs=1.5)
    assert not claims.regime("rep", claims.load("rep", tmp_path)).paper_regime


def test_failed_runs_are_left_out(tmp_path):
    _table1(tmp_path, "t", [3.0, 3.1, 3.2], [3.2, 3.3, 3.4], [3.1, 3.2, 3.3])
    bad = tmp_path / "t" / "results" / "muon-ef-seed2.json"
    rec = json.loads(bad.read_text())
    rec["status"] = "failed"
    bad.write_text(json.dumps(rec))
    assert _verdict(tmp_path, "t", "muon-ef").paired.n == 2


def test_no_share_of_a_gap_within_noise(tmp_path):
    # async − sync: +0.10, −0.08, +0.01 (interval holds zero); EF recovers "shares" of noise
    _table1(tmp_path, "t", [3.00, 3.10, 3.05], [3.10, 3.02, 3.06], [3.05, 3.00, 3.00])
    v = _verdict(tmp_path, "t", "muon-share")
    assert v.word == "within noise" and "no share" in v.evidence
    assert "%" not in v.cell
    md = claims.summary_md(tmp_path)
    row = next(ln for ln in md.splitlines() if "50–70 %" in ln)
    assert "no share of a gap within noise" in row and "%" not in row.split("|")[2]
    table = claims.paper_table_md("t", tmp_path)
    assert "none: the gap is within noise" in table
    # the same seeds with a clear gap give a share again
    _table1(tmp_path, "t", [3.00, 3.10, 3.05], [3.20, 3.31, 3.24], [3.10, 3.20, 3.15])
    v = _verdict(tmp_path, "t", "muon-share")
    assert "no share" not in v.evidence and v.cell.endswith("]")
    assert "none:" not in claims.paper_table_md("t", tmp_path)


def test_summary_gives_the_papers_regime_its_own_table(tmp_path):
    _table1(tmp_path, "tiny", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2])
    _table1(tmp_path, "opt-20k", [3.0, 3.1], [3.2, 3.3], [3.1, 3.2], params=20_480,
            steps=400, batch=8, seq=128, epochs=0.5)
    # a tier in the paper's regime with runs but no claim's cells yet (its lr grid)
    _write(tmp_path, "opt-40k", "lr-muon-sync-0.04", 0, 3.0, params=40_960, steps=800,
           batch=8, seq=128, epochs=0.9)
    md = claims.summary_md(tmp_path)
    heads = [ln for ln in md.splitlines() if ln.startswith("| claim of the paper")]
    assert len(heads) == 2
    assert "`opt-20k`" in heads[0] and "`tiny`" not in heads[0]
    assert "`tiny`" in heads[1] and "`opt-20k`" not in heads[1]
    assert md.index("In the paper's regime") < md.index("Outside the paper's regime")
    assert not any("`opt-40k`" in h for h in heads)
    line = next(ln for ln in md.splitlines() if ln.startswith("- `opt-40k`"))
    assert "none of the paper's claims has its cells yet (1 run finished)" in line
    assert "not the paper's regime" not in line


def test_share_is_the_ratio_of_mean_gaps_with_fiellers_interval(tmp_path):
    """EF's share is (2BW − EF)/(2BW − sync) on the mean paired gaps with Fieller's 95 %
    interval — the study statistics' definition — not the mean of the per-seed shares. Seed 0's
    gap is tiny (0.02) and its own share 1.5; the per-seed shares' interval is [28 %, 128 %]
    (within noise against 50–70 %), while Fieller's interval of the ratio of means lies wholly
    inside the paper's range."""
    from asyncpp.study import stats as study_stats

    gaps = [0.02, 0.50, 0.55, 0.60, 0.50]
    recovered = [0.03, 0.30, 0.33, 0.36, 0.30]
    sync = [3.0, 3.1, 2.9, 3.05, 3.0]
    asyn = [s + g for s, g in zip(sync, gaps)]
    ef = [a - r for a, r in zip(asyn, recovered)]
    _table1(tmp_path, "t", sync, asyn, ef)
    v = _verdict(tmp_path, "t", "muon-share")
    f = study_stats.fieller_share(dict(enumerate(asyn)), dict(enumerate(ef)),
                                  dict(enumerate(sync)))
    assert f.estimate == pytest.approx(sum(recovered) / sum(gaps), rel=1e-9)
    assert 0.50 < f.lo < f.hi < 0.70
    assert v.word == "reproduced"
    assert v.cell == f"{100 * f.estimate:.0f} % [{100 * f.lo:.0f}, {100 * f.hi:.0f}]"
    assert "Fieller" in v.evidence and "n = 5" in v.evidence
    table = claims.paper_table_md("t", tmp_path)
    row = next(ln for ln in table.splitlines() if ln.startswith("| share of the gap EF"))
    assert v.cell in row


def test_share_outside_or_overlapping_the_papers_range(tmp_path):
    """Fieller's interval wholly outside the paper's range: not reproduced; overlapping an
    end: within noise (AdamW against 85–90 %, Muon against 50–70 %)."""
    # AdamW: gaps ≈ 1, EF recovers ≈ 40 %: the interval lies wholly below 85 %
    _table1(tmp_path, "t", [3.0, 3.1, 3.2, 3.0], [4.0, 4.2, 4.1, 3.9],
            [3.6, 3.75, 3.75, 3.55], opt="adamw")
    v = _verdict(tmp_path, "t", "adamw-share")
    assert v.word == "not reproduced"
    # Muon: a share near 70 % whose interval straddles the range's upper end
    _table1(tmp_path, "t", [3.0, 3.0, 3.0, 3.0], [3.2, 3.3, 3.25, 3.22],
            [3.06, 3.10, 3.07, 3.08])
    v = _verdict(tmp_path, "t", "muon-share")
    lo, hi = (float(x) for x in v.cell.split("[")[1].rstrip("]").split(","))
    assert lo < 70 < hi and v.word == "within noise"
