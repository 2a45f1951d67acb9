"""``asyncpp-study reproduce`` on real runs: a result of the tiny study re-runs from its record
bit for bit on the machine that made it; a record that does not match says how far and from
which step; a result the study file no longer declares, or no result at all, is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncpp.study import reproduce, spec

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asyncpp.study.cli", *args],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """The tiny study narrowed to its sync cell and seed 0, run once."""
    tmp = tmp_path_factory.mktemp("reproduce")
    text = (ROOT / "configs" / "study-tiny.toml").read_text()
    text = text.replace('base = "tiny.toml"', f'base = "{ROOT / "configs" / "tiny.toml"}"\n'
                        f'out = "{tmp / "study"}"')
    text = text.replace("claims = [0, 1, 2]", "claims = [0]")
    path = tmp / "study.toml"
    path.write_text(text)
    r = _cli("run", str(path))
    assert r.returncode == 0, r.stderr
    return path, tmp / "study" / "results" / "sync" / "seed0.json"


@pytest.mark.timeout(900)
def test_a_result_reruns_bit_for_bit_from_its_record(one_run, tmp_path):
    path, result = one_run
    r = _cli("reproduce", str(path), str(result), "--keep", str(tmp_path / "again"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("final_val_loss ") and ": bit for bit" in r.stdout
    doc = json.loads((tmp_path / "again" / "reproduction.json").read_text())
    rec = json.loads(result.read_text())
    assert doc["rerun"] == doc["recorded"] == rec["value"] and doc["bit_for_bit"]
    assert doc["first_divergent_step"] is None and doc["max_train_loss_difference"] == 0.0
    assert doc["machine"]["same"] and doc["key"] == rec["key"]
    assert (tmp_path / "again" / "runs" / rec["key"] / "summary.json").is_file()


@pytest.mark.timeout(900)
def test_a_record_that_does_not_match_says_how_far_and_from_which_step(one_run, tmp_path):
    path, result = one_run
    rec = json.loads(result.read_text())
    tl = list(rec["curves"]["train_loss"])
    tl[2] += 1e-6  # the record's third step differs
    fake = tmp_path / "seed0.json"
    fake.write_text(json.dumps({**rec, "value": rec["value"] + 0.01,
                                "curves": {**rec["curves"], "train_loss": tl},
                                "provenance": {**rec["provenance"], "cpu": "another CPU"}}))
    r = _cli("reproduce", str(path), str(fake))
    assert r.returncode == 4, r.stderr
    assert "first differ at step 3" in r.stdout and "(−0.01)" in r.stdout.replace("-", "−")
    assert "machine" in r.stdout.split("(the record's")[1]
    study = spec.load(path)
    doc = reproduce.reproduce(study, fake)  # no folder kept
    assert doc["difference"] == pytest.approx(-0.01) and not doc["bit_for_bit"]
    assert doc["first_divergent_step"] == rec["curves"]["step"][2]


def test_a_result_the_study_does_not_declare_is_refused(one_run, tmp_path):
    path, result = one_run
    rec = json.loads(result.read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**rec, "key": "0" * 20}))
    r = _cli("reproduce", str(path), str(other))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no run of the study has the key" in r.stderr
    (tmp_path / "junk.json").write_text("{")
    r = _cli("reproduce", str(path), str(tmp_path / "junk.json"))
    assert r.returncode == 2 and "not a readable result file" in r.stderr


def test_first_divergence_reads_curves_with_gaps():
    assert reproduce.first_divergence([1.0, None, 2.0, 3.0], [1.0, 5.0, 2.5, 3.0]) == (2, 0.5)
    assert reproduce.first_divergence([1.0, 2.0], [1.0, 2.0, 9.0]) == (None, 0.0)
