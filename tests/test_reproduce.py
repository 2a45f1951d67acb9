"""experiments/reproduce.py on real runs: a record re-run at its commit in a fresh clone
reproduces bit for bit, and one that differs is probed with a perturbed lr (how far the run
amplifies a floating-point difference)."""

import json
import subprocess
from pathlib import Path

import pytest

from asyncpp.study.ladder import reproduce

EXP = Path(__file__).resolve().parent.parent / "experiments"

COMMAND = ("asyncpp-train --config experiments/configs/base.toml --train.steps 3 "
           "--train.eval_every 3 --optimizer.lr 0.01 --run.seed 0 --pipeline.schedule 1f1b "
           "--pipeline.simulate true")


def test_perturbed_changes_only_the_lr():
    rec = {"command": COMMAND}
    alt = reproduce.perturbed(rec)["command"].split()
    assert alt[alt.index("--optimizer.lr") + 1] == repr(0.01 * (1 + reproduce.PERTURBATION))
    assert [a for a in alt if a != alt[alt.index("--optimizer.lr") + 1]] == [
        a for a in COMMAND.split() if a != "0.01"]
    assert reproduce.perturbed({"command": "asyncpp-train --config c.toml"}) is None


@pytest.mark.multiprocess
def test_rerun_reproduces_and_probes_a_difference(tmp_path):
    head = subprocess.run(["git", "-C", str(EXP.parent), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    code = reproduce.checkout(head, tmp_path / "code")
    rec = {"command": COMMAND, "status": "ok", "provenance": {"commit_at_start": head},
           "machine": {"threads": 1}, "final": {}}
    first = reproduce.rerun(rec, code, tmp_path / "a")
    assert "val_loss" in first, first
    same = tmp_path / "same.json"
    same.write_text(json.dumps({**rec, "final": {"val_loss": first["val_loss"]}}))
    off = tmp_path / "off.json"
    off.write_text(json.dumps({**rec, "final": {"val_loss": first["val_loss"] + 1e-3}}))
    rows = reproduce.check([same, off], probe=True)
    assert rows[0]["status"] == "reproduced" and rows[0]["diff"] == 0
    assert rows[1]["status"] == "differs" and rows[1]["diff"] == pytest.approx(-1e-3)
    assert "sensitivity" in rows[1]
    assert any("moves this run by" in w for w in rows[1]["why"])


def _result(folder: Path, name: str, opt: str, schedule: str, corr: str = "none") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{name}-seed0.json"
    p.write_text(json.dumps({"status": "ok", "final": {"val_loss": 4.0}, "config": {
        "optimizer": {"name": opt}, "pipeline": {"schedule": schedule},
        "delay": {"correction": corr}}}))
    return p


def test_a_sample_across_tiers_reaches_a_larger_model_adamw_and_a_synchronous_run(tmp_path):
    """Muon 2BW results dominate the small tier (as in the committed reproductions, both
    Muon 2BW grid runs at 180k); the sample must still reach opt-580k, AdamW and 1F1B, and
    take one result per stratum."""
    small, large = tmp_path / "opt-180k" / "results", tmp_path / "opt-580k" / "results"
    for i in range(12):
        _result(small, f"muon-async-{i}", "muon", "2bw")
    # each required value sits in one stratum only, among distractors as novel as they are
    _result(large, "muon-async", "muon", "2bw")
    _result(small, "adamw-ef", "adamw", "2bw", "ef")
    _result(small, "soap-sync", "soap", "1f1b")
    for opt, sched in (("lion", "pipedream"), ("adan", "gpipe"), ("sgd", "wpipe"),
                       ("signum", "2bw-async")):
        _result(small, f"{opt}-{sched}", opt, sched, "nesterov")
    for seed in range(6):
        picked = reproduce.sample_across(["opt-180k", "opt-580k"], 3, seed, root=tmp_path)
        strata = [reproduce.stratum(json.loads(p.read_text()), p.parts[-3]) for p in picked]
        assert len(set(strata)) == 3
        assert any(s[0] == "opt-580k" for s in strata)
        assert any(s[1] == "adamw" for s in strata)
        assert any(s[2] == "1f1b" for s in strata)
        assert picked == reproduce.sample_across(["opt-180k", "opt-580k"], 3, seed,
                                                 root=tmp_path)


def test_report_rows_name_results_relative_to_the_repository():
    inside = EXP / "opt-180k" / "results" / "muon-sync-seed0.json"
    assert reproduce._repo_relative(inside) == "experiments/opt-180k/results/muon-sync-seed0.json"
    assert reproduce._repo_relative(Path("/elsewhere/x.json")) == "/elsewhere/x.json"
