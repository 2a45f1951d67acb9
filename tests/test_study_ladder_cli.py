"""``asyncpp-study report`` on a ladder study (the project's own tiers): it hands the study to
the ladder's report, which rebuilds the tier's tables.md from the result files alone — here a
copy of opt-180k's study file and results in a temporary folder, so the repository's files are
only read — byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIER = ROOT / "experiments" / "opt-180k"


@pytest.mark.timeout(900)
def test_report_of_a_ladder_study_rebuilds_its_tables_byte_for_byte(tmp_path):
    copy = tmp_path / "opt-180k"
    copy.mkdir()
    shutil.copy(TIER / "study.toml", copy / "study.toml")
    shutil.copytree(TIER / "results", copy / "results")
    r = subprocess.run([sys.executable, "-m", "asyncpp.study.cli", "report",
                        str(copy / "study.toml")], capture_output=True, text=True,
                       timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(copy / "tables.md")
    assert (copy / "tables.md").read_bytes() == (TIER / "tables.md").read_bytes()


def _study(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asyncpp.study.cli", *args],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)


def test_plan_and_status_of_a_ladder_study_list_its_tables_through_the_sweep():
    gpu = ROOT / "experiments" / "gpu"
    on_disk = sorted(p.name for p in (gpu / "results").glob("*-seed*.json"))
    r = _study("plan", str(gpu / "study.toml"))
    assert r.returncode == 0, r.stderr
    done = [ln.split()[1] + ".json" for ln in r.stdout.splitlines() if ln.startswith("done")]
    assert sorted(done) == on_disk
    assert f"gpu: {len(on_disk)} of " in r.stdout.splitlines()[-1]
    s = _study("status", str(gpu / "study.toml"))
    assert s.returncode == 0 and s.stdout.strip() == r.stdout.splitlines()[-1]


@pytest.mark.timeout(900)
def test_run_of_a_settled_ladder_study_trains_nothing_and_exits_0(tmp_path):
    """opt-180k is settled: the lane (a clean worktree of HEAD under TMPDIR) passes over every
    table, trains nothing, and the study command exits 0; no result file changes."""
    import os

    results = TIER / "results"
    before = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    env = dict(os.environ, TMPDIR=str(tmp_path))
    try:
        r = _study("run", str(TIER / "study.toml"), env=env)
    finally:  # the lane's worktree is registered in the repository: remove it
        for wt in tmp_path.glob("asyncpp-lane-*"):
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)],
                           capture_output=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "ladder: opt-180k settled" in r.stdout
    assert "0 to do" in r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")} == before
