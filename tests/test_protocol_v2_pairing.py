"""What pairing by seed removes from a primary contrast, the chaos floor it cannot go below,
and the seeds each test's power needs at both (``protocol_v2_pairing``)."""

from __future__ import annotations

import math
import statistics

import pytest
from study_files import study_head, study_with_lr_chosen

from asyncpp.study import runner, spec
from asyncpp.study.ladder import protocol_v2_chaos as v2c
from asyncpp.study.ladder import protocol_v2_pairing as v2p
from asyncpp.study.power import power_t, power_tost

CELLS = ("muon-sync", "muon-2bw", "muon-ef")
STUDY = study_head("v2pair") + """[cells.muon-sync]
"optimizer.name" = "muon"
[cells.muon-2bw]
"optimizer.name" = "muon"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
[cells.muon-ef]
"optimizer.name" = "muon"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
"delay.correction" = "ef"
[seeds]
selection = [7, 8]
claims = [0, 1, 2, 3, 4, 5]
[lr]
grid = [0.02, 0.04]
[[endpoints]]
name = "P2"
test = "equivalence"
a = "muon-2bw"
b = "muon-sync"
margin = 0.04
primary = true
[[endpoints]]
name = "P3"
test = "share"
none = "muon-2bw"
corr = "muon-ef"
sync = "muon-sync"
s = 0.5
alternative = "greater"
primary = true
[[endpoints]]
name = "P4"
test = "difference"
a = "muon-ef"
b = "muon-sync"
alternative = "less"
primary = true
[[endpoints]]
name = "X"
test = "difference"
a = "muon-ef"
b = "muon-2bw"
"""
# a seed effect every cell shares (what pairing removes) plus each run's own part
SEED = [0.00, 0.09, -0.05, 0.04, -0.11, 0.02]
OWN = {"muon-sync": [0.004, -0.006, 0.001, 0.003, -0.002, 0.000],
       "muon-2bw": [-0.003, 0.005, 0.002, -0.004, 0.001, 0.006],
       "muon-ef": [0.002, 0.000, -0.005, 0.004, 0.003, -0.001]}
MEAN = {"muon-sync": 4.20, "muon-2bw": 4.23, "muon-ef": 4.19}
CHAOS_VALS = {"muon-sync": (4.201, 4.195, 4.203), "muon-2bw": (4.228, 4.236, 4.231),
              "muon-ef": (4.192, 4.188, 4.190)}


def _y(c: str, k: int) -> float:
    return MEAN[c] + SEED[k] + OWN[c][k]


@pytest.fixture
def study(tmp_path):
    s = study_with_lr_chosen(tmp_path, STUDY)
    for r in runner.claims_runs(s)[0]:
        runner.write_json(r.result, {"key": r.key, "value": _y(r.cell, r.seed)})
    path = s.path.with_name("chaos.toml")
    path.write_text(v2c.chaos_study_text(s, CELLS, seed=0, repeats=3))
    chaos = spec.load(path)
    for r in runner.claims_runs(chaos)[0]:
        cell, j = r.cell.rsplit("-f32ulp", 1)
        runner.write_json(r.result, {"key": r.key, "value": CHAOS_VALS[cell][int(j) - 1]})
    return s, chaos


def test_pairing_sets_the_paired_sd_beside_the_unpaired_and_the_chaos_floor(study):
    s, chaos = study
    rows = {r["name"]: r for r in v2p.pairing(s, chaos, seed=0, power=0.8, alpha=0.05)}
    assert set(rows) == {"P2", "P3", "P4"}  # primaries with a contrast only
    seeds = range(6)
    chaos_sd = {c: statistics.stdev([_y(c, 0), *CHAOS_VALS[c]]) for c in CELLS}
    for name, w in (("P2", {"muon-2bw": 1, "muon-sync": -1}),
                    ("P3", {"muon-2bw": 0.5, "muon-ef": -1, "muon-sync": 0.5}),
                    ("P4", {"muon-ef": 1, "muon-sync": -1})):
        r = rows[name]
        d = [sum(wc * _y(c, k) for c, wc in w.items()) for k in seeds]
        unpaired = math.sqrt(sum(wc ** 2 * statistics.variance([_y(c, k) for k in seeds])
                                 for c, wc in w.items()))
        floor = math.sqrt(sum(wc ** 2 * chaos_sd[c] ** 2 for c, wc in w.items()))
        assert r["n"] == 6 and r["level"] == pytest.approx(0.05 / 3)
        assert r["mean"] == pytest.approx(statistics.mean(d), abs=1e-12)
        assert r["paired"] == pytest.approx(statistics.stdev(d), rel=1e-9)
        assert r["unpaired"] == pytest.approx(unpaired, rel=1e-9)
        assert r["floor"] == pytest.approx(floor, rel=1e-9)
        # the shared seed effect is most of each cell's spread: pairing removes most of it
        assert r["removed"] == pytest.approx(1 - r["paired"] ** 2 / unpaired ** 2)
        assert 0.9 < r["removed"] < 1 and r["removable"] == pytest.approx(
            1 - floor ** 2 / unpaired ** 2)


def test_the_seeds_needed_are_the_first_count_with_the_power(study):
    s, chaos = study
    rows = {r["name"]: r for r in v2p.pairing(s, chaos, seed=0, power=0.8, alpha=0.05)}
    lvl = 0.05 / 3
    p2, p4 = rows["P2"], rows["P4"]
    for sd, n in ((p2["paired"], p2["seeds_paired"]), (p2["floor"], p2["seeds_floor"])):
        assert power_tost(n, 0.04, sd, lvl) >= 0.8 > (power_tost(n - 1, 0.04, sd, lvl)
                                                      if n > 3 else 0)
    assert p4["mean"] < 0  # alternative "less": the observed side can be established
    for sd, n in ((p4["paired"], p4["seeds_paired"]), (p4["floor"], p4["seeds_floor"])):
        assert power_t(n, p4["mean"], sd, lvl, 1) >= 0.8 > (
            power_t(n - 1, p4["mean"], sd, lvl, 1) if n > 3 else 0)
    # the share's contrast is (2bw − ef) − ½(2bw − sync) = 0.04 − 0.015 > 0 on average
    assert rows["P3"]["mean"] > 0 and rows["P3"]["seeds_paired"] is not None


def test_a_cell_without_chaos_runs_has_no_floor(study):
    s, _ = study
    rows = v2p.pairing(s, None, seed=0)
    assert all(r["floor"] is None and r["seeds_floor"] is None and r["paired"] > 0
               for r in rows)


def test_the_v2_report_prints_the_spreads_and_the_pairing_of_the_committed_results(capsys):
    from asyncpp.study.ladder import chaos

    assert chaos.main(["--v2-report"]) == 0
    out = capsys.readouterr().out
    assert "| cell | runs (0 = claims) | chaos sd |" in out
    assert "| endpoint | seeds | mean | unpaired sd | paired sd | chaos floor |" in out
    assert [line.split("|")[1].strip() for line in out.splitlines()
            if line.startswith("| P")] == ["P1", "P2", "P3", "P4"]
