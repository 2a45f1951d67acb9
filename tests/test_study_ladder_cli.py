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
