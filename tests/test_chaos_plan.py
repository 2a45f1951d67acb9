"""asyncpp.study.ladder.chaos (experiments/chaos.py): the nudged learning rates and the
resumable plan, on the real opt-180k results (no training)."""

from __future__ import annotations

import json

import numpy as np

from asyncpp.study.ladder import chaos, sweep


def test_nudged_moves_whole_float32_units_in_the_last_place():
    for lr in (0.16, 0.01, 0.04):
        got = [chaos.nudged(lr, j) for j in range(4)]
        assert got[0] == lr
        f32 = [np.float32(g) for g in got[1:]]
        # every nudge survives the cast to float32 and is one float32 ulp from the previous
        assert len(set(f32)) == 3 and f32[0] >= np.float32(lr)
        assert all(float(b - a) == float(np.spacing(a)) for a, b in zip(f32, f32[1:]))


def test_plan_is_the_claims_cell_nudged_and_resumes(tmp_path):
    tier = sweep.get_tier("opt-180k")
    todo = chaos.plan(tier, ["muon-sync"], 0, 3, tmp_path)
    assert [c.name for c, _ in todo] == [f"chaos-muon-sync-f32ulp{j}" for j in (0, 1, 2, 3)]
    claims = json.loads((tier.results / "muon-sync-seed0.json").read_text())["overrides"]
    lrs = [float(c.overrides["optimizer.lr"]) for c, _ in todo]
    assert lrs == [chaos.nudged(float(claims["optimizer.lr"]), j) for j in (0, 1, 2, 3)]
    # everything else is the claims cell's configuration
    rest = {k: v for k, v in todo[0][0].overrides.items()
            if k not in ("optimizer.lr", "optimizer.adamw_lr")}
    assert rest.items() <= {k: v for k, v in claims.items()}.items()
    (tmp_path / "chaos-muon-sync-f32ulp1-seed0.json").write_text("{}")
    assert [c.name for c, _ in chaos.plan(tier, ["muon-sync"], 0, 3, tmp_path)] == [
        "chaos-muon-sync-f32ulp0", "chaos-muon-sync-f32ulp2", "chaos-muon-sync-f32ulp3"]
