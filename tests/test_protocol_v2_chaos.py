"""Protocol v2's chaos study: each claims cell's run at one seed with its peak lr moved whole
float32 ulps and every other option the same; its spread beside the seed sd."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from study_files import study_head, study_with_lr_chosen

from asyncpp.study import runner, spec
from asyncpp.study.ladder import protocol_v2_chaos as v2c

STUDY = study_head("v2like") + """[overrides]
"delay.track_updates" = true
[cells.muon-sync]
"optimizer.name" = "muon"
[cells.muon-2bw]
"optimizer.name" = "muon"
"pipeline.schedule" = "2bw"
"pipeline.simulate" = true
[seeds]
selection = [7, 8]
claims = [0, 1, 2]
[lr]
grid = [0.02, 0.04, 0.08]
[lr.tied.muon-sync]
"optimizer.adamw_lr" = 0.15
[lr.tied.muon-2bw]
"optimizer.adamw_lr" = 0.15
"""
CELLS = ("muon-sync", "muon-2bw")


def _write(path: Path, key: str, value: float, commit: str = "abc", dirty: bool = False):
    runner.write_json(path, {"key": key, "value": value,
                             "provenance": {"commit_at_start": commit, "dirty": dirty}})


@pytest.fixture
def study(tmp_path):
    return study_with_lr_chosen(tmp_path, STUDY)


def test_a_chaos_cell_is_a_claims_run_with_only_its_lr_moved_whole_float32_ulps(study):
    text = v2c.chaos_study_text(study, CELLS, seed=1, repeats=3)
    path = study.path.with_name("chaos.toml")
    path.write_text(text)
    chaos = spec.load(path)  # a valid study file, its base the protocol's
    assert chaos.base.resolve() == study.base.resolve() and chaos.claims_seeds == (1,)
    assert sorted(chaos.cells) == sorted(f"{c}-f32ulp{j}" for c in CELLS for j in (1, 2, 3))
    claims = {(r.cell, r.seed): dict(r.options) for r in runner.claims_runs(study)[0]}
    runs = {r.cell: dict(r.options) for r in runner.claims_runs(chaos)[0]}
    for c in CELLS:
        base = claims[(c, 1)]
        assert base["optimizer.lr"] == 0.04 and base["optimizer.adamw_lr"] == 0.006
        f32 = np.float32(base["optimizer.lr"])
        for j in (1, 2, 3):
            got = runs[f"{c}-f32ulp{j}"]
            assert {k: v for k, v in got.items() if k != "optimizer.lr"} == \
                {k: v for k, v in base.items() if k != "optimizer.lr"}
            # exactly j float32 steps above the lr as float32 computes with it
            steps = 0
            x = f32
            while x < np.float32(got["optimizer.lr"]):
                x = np.nextafter(x, np.float32(np.inf))
                steps += 1
            assert steps == j and float(x) == got["optimizer.lr"]


def test_the_chaos_study_waits_for_a_chosen_lr(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text(STUDY)
    with pytest.raises(spec.StudyError, match="no claims run at seed 0 yet for muon-sync"):
        v2c.chaos_cells(spec.load(p), CELLS)


def test_the_spread_sits_beside_the_seed_sd_and_flags_mixed_commits(study):
    path = study.path.with_name("chaos.toml")
    path.write_text(v2c.chaos_study_text(study, CELLS, seed=0, repeats=2))
    chaos = spec.load(path)
    claims = {(r.cell, r.seed): r for r in runner.claims_runs(study)[0]}
    for k, v in enumerate((3.00, 3.10, 2.95)):
        _write(claims[("muon-sync", k)].result, "x", v)
    for r in runner.claims_runs(chaos)[0]:
        if r.cell.startswith("muon-sync"):
            _write(r.result, r.key, {"muon-sync-f32ulp1": 3.01, "muon-sync-f32ulp2": 2.99}[r.cell])
    s = v2c.spread(study, chaos, "muon-sync")
    assert s["runs"] == [3.00, 3.01, 2.99] and s["same_commit"] is True
    assert s["chaos_sd"] == pytest.approx(np.std([3.00, 3.01, 2.99], ddof=1))
    assert s["seed_sd"] == pytest.approx(np.std([3.00, 3.10, 2.95], ddof=1)) and s["seeds"] == 3
    r = next(r for r in runner.claims_runs(chaos)[0] if r.cell == "muon-sync-f32ulp2")
    _write(r.result, r.key, 2.99, commit="def")
    assert v2c.spread(study, chaos, "muon-sync")["same_commit"] is False
    table = v2c.report(study.path, path)
    assert "| muon-sync | 3 | 0.0100 | 3 | 0.0764 | 0.13 |" in table
    assert "more than one commit" in table and "muon-sync" in table.split("commit")[-2]
    assert "| muon-2bw | 0 | — | 0 | — | — |" in table
    assert json.loads(r.result.read_text())["value"] == 2.99
