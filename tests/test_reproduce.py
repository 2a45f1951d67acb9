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
