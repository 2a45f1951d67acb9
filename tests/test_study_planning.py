"""``asyncpp-study power``: the seeds each endpoint needs from the runs a study has — its
claims results, or a pilot of the selection runs at each cell's chosen lr."""

from __future__ import annotations

import statistics

import pytest
from study_files import ROOT, study_head

from asyncpp.study import cli, planning, runner, spec
from asyncpp.study.power import seeds_for_power
from asyncpp.study.stats import gap_slope

STUDY = study_head("plan") + """[cells.sync]
"optimizer.name" = "adamw"
[cells.async]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
[cells.ef]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
"delay.correction" = "ef"
[cells.sync-long]
"optimizer.name" = "adamw"
"train.steps" = 40
[cells.async-long]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
"train.steps" = 40
[cells.sync-longer]
"optimizer.name" = "adamw"
"train.steps" = 80
[cells.async-longer]
"optimizer.name" = "adamw"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
"train.steps" = 80
[seeds]
selection = [7, 8, 9]
claims = [0, 1, 2, 3, 4, 5]
[seeds.cells]
sync-long = [0, 1, 2]
async-long = [0, 1, 2]
sync-longer = [0, 1, 2]
async-longer = [0, 1, 2]
[lr]
grid = [0.01, 0.02]
[lr.same]
sync-long = "sync"
async-long = "async"
sync-longer = "sync"
async-longer = "async"
[[endpoints]]
name = "gap"
test = "difference"
a = "async"
b = "sync"
alternative = "greater"
primary = true
[[endpoints]]
name = "same"
test = "equivalence"
a = "ef"
b = "sync"
margin = 0.05
primary = true
[[endpoints]]
name = "half"
test = "share"
none = "async"
corr = "ef"
sync = "sync"
s = 0.5
alternative = "greater"
[[endpoints]]
name = "trend"
test = "slope"
pairs = [["async", "sync"], ["async-long", "sync-long"], ["async-longer", "sync-longer"]]
per_seed = true
[[endpoints]]
name = "pooled"
test = "slope"
pairs = [["async", "sync"], ["async-long", "sync-long"], ["async-longer", "sync-longer"]]
"""
MEAN = {"sync": 4.00, "async": 4.20, "ef": 4.02}
# each seed's own part (no shared seed effect: the contrasts' sds are the cells' combined)
OWN = {"sync": [0.01, -0.02, 0.03, 0.00, -0.01, 0.02, 0.015, -0.005, 0.0],
       "async": [0.05, -0.04, 0.00, 0.06, -0.03, 0.01, 0.02, 0.05, -0.03],
       "ef": [0.00, 0.01, -0.01, 0.02, 0.00, -0.02, -0.01, 0.0, 0.01]}
TOKENS = {"": 1000, "-long": 2000, "-longer": 4000}
LONG = {"-long": -0.05, "-longer": -0.10}  # the gap shrinks with tokens, seed by seed


def _value(cell: str, seed: int) -> float:
    base, suffix = (cell.split("-", 1) + [""])[:2]
    suffix = f"-{suffix}" if suffix else ""
    idx = seed if seed < 6 else seed - 1  # selection seeds 7, 8, 9 -> 6, 7, 8
    v = MEAN[base] + OWN[base][idx]
    if base == "async" and suffix:
        v += LONG[suffix] * (1 + 0.1 * seed)
    return v


@pytest.fixture
def study(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text(STUDY)
    s = spec.load(p)
    for r in runner.selection_runs(s):  # lr 0.02 chosen; its runs are the pilot
        v = _value(r.cell, r.seed) + (0.0 if r.lr == 0.02 else 0.5)
        runner.write_json(r.result, {"key": r.key, "value": v, "tokens": 1000})
    return s


def _claims(s):
    for r in runner.claims_runs(s)[0]:
        suffix = "-" + r.cell.split("-", 1)[1] if "-" in r.cell else ""
        runner.write_json(r.result, {"key": r.key, "value": _value(r.cell, r.seed),
                                     "tokens": TOKENS[suffix]})


def test_contrast_weights_are_the_paired_tests_contrasts():
    ep = spec.Endpoint(name="s", test="share", none="n", corr="c", sync="y", s=0.25)
    assert planning.contrast_weights(ep) == {"n": 0.75, "c": -1.0, "y": 0.25}
    assert planning.contrast_weights(spec.Endpoint(name="d", test="difference", a="a",
                                                   b="b")) == {"a": 1.0, "b": -1.0}
    assert planning.contrast_weights(spec.Endpoint(name="t", test="slope")) is None


def test_the_pilot_is_the_selection_runs_at_the_chosen_lr(study):
    cells = planning.pilot_cells(study)
    assert sorted(cells["sync"]) == [7, 8, 9] and not cells["sync-long"]  # lr.same: no runs
    assert cells["async"][8]["value"] == pytest.approx(_value("async", 8))  # not lr 0.01's
    rows = {r.name: r for r in planning.needs(study, "selection")}
    gap = [_value("async", k) - _value("sync", k) for k in (7, 8, 9)]
    assert rows["gap"].n == 3 and rows["gap"].mean == pytest.approx(statistics.mean(gap))
    assert rows["gap"].sd == pytest.approx(statistics.stdev(gap))
    assert rows["trend"].n == 0 and rows["trend"].needed is None


def test_each_endpoint_is_planned_by_its_own_test_at_its_level(study):
    _claims(study)
    rows = {r.name: r for r in planning.needs(study, "claims", power=0.8, alpha=0.05)}
    seeds = range(6)
    assert [rows[n].level for n in ("gap", "same", "half", "trend")] == \
        pytest.approx([0.025, 0.025, 0.05, 0.05])  # two primaries: Holm's first level
    gap = [_value("async", k) - _value("sync", k) for k in seeds]
    assert rows["gap"].needed == seeds_for_power("difference", statistics.mean(gap),
                                                 statistics.stdev(gap), 0.025, 0.8, "greater")
    assert rows["gap"].declared == 6 and rows["gap"].verdict() == "enough"
    same = [_value("ef", k) - _value("sync", k) for k in seeds]
    assert rows["same"].mean == pytest.approx(statistics.mean(same))
    assert rows["same"].needed == seeds_for_power("equivalence", statistics.mean(same),
                                                  statistics.stdev(same), 0.025, 0.8,
                                                  margin=0.05)
    z = [(_value("async", k) - _value("ef", k)) - 0.5 * (_value("async", k) - _value("sync", k))
         for k in seeds]
    assert rows["half"].mean == pytest.approx(statistics.mean(z))
    assert rows["half"].sd == pytest.approx(statistics.stdev(z))
    slopes = [gap_slope([(10 + i, _value(f"async{s}", k) - _value(f"sync{s}", k))
                         for i, s in enumerate(("", "-long", "-longer"))]).estimate
              for k in range(3)]
    assert rows["trend"].n == 3 and rows["trend"].declared == 3
    assert rows["trend"].mean == pytest.approx(statistics.mean(slopes))
    assert rows["trend"].sd == pytest.approx(statistics.stdev(slopes))
    assert rows["pooled"].needed is None and "pooled" in rows["pooled"].why


def test_an_equivalence_outside_its_margin_and_a_mean_on_the_wrong_side_get_no_count(study):
    _claims(study)
    text = STUDY.replace("margin = 0.05", "margin = 0.01").replace(
        'a = "async"\nb = "sync"\nalternative = "greater"', 'a = "sync"\nb = "async"\n'
        'alternative = "greater"')
    study.path.write_text(text)
    rows = {r.name: r for r in planning.needs(spec.load(study.path), "claims")}
    assert rows["gap"].mean < 0 and rows["gap"].needed is None
    assert "cannot establish" in rows["gap"].verdict()
    assert abs(rows["same"].mean) > 0.01 and "outside ±0.01" in rows["same"].verdict()


def test_the_command_prints_the_table_and_refuses_bad_input(study, capsys):
    _claims(study)
    assert cli.main(["power", str(study.path)]) == 0
    out = capsys.readouterr().out
    assert "| gap (primary) | difference | 0.0250 | 6 |" in out and "from the claims" in out
    assert cli.main(["power", str(study.path), "--source", "selection"]) == 0
    assert "a pilot" in capsys.readouterr().out
    assert cli.main(["power", str(study.path), "--power", "1.5"]) == 2
    assert "--power and --alpha must lie in (0, 1)" in capsys.readouterr().err
    assert cli.main(["power", str(ROOT / "experiments" / "opt-180k" / "study.toml")]) == 2


def test_a_study_without_an_lr_table_has_no_pilot(capsys):
    assert cli.main(["power", str(ROOT / "configs" / "study-tiny.toml"), "--source",
                     "selection"]) == 2
    assert "chooses no learning rate" in capsys.readouterr().err
