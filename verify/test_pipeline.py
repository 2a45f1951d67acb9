"""Property 6: runs of the real multi-process pipeline executor (gloo, float64) satisfy the
delay model and the bounds of the theorems.

Two launches, started the way ``torchrun`` starts its workers (``verify/pipeline_worker.py``):
2 ranks (2BW with and without EF, PipeDream, the separable sign problem whose per-stage orbits
theory.muon_cycle predicts exactly) and 4 ranks (PipeDream, 2BW with EF, PipeDream + EF on
the sign problem). A third launch, ``LAUNCHES["pm"]`` (2 ranks), runs the pipeline mutants of
property 8 — 2BW with every forward on the newest weights instead of the scheduled version, and
2BW + EF with stage 0 alone one version off — from ``verify/test_mutants.py``. See
``verify.properties.pipeline_check``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from asyncpp.pipeline.launch import RankTimeout, log_tail, run_ranks
from verify.properties import pipeline_check, pipeline_scenario
from verify.strategies import check

WORKER = Path(__file__).with_name("pipeline_worker.py")
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multiprocess

DESC_MODEL = ("pipeline executor realises the delay model: gradient applied as update u on "
              "stage s equals grad_s f(x_u) (relative deviation <= 1e-9)")
DESC_EF = ("executor stages realise the EF recursion x(u+1) - x(u) + 2u(u) - u(u-1) = 0 (plain "
           "x(u+1) - x(u) + u(u) = 0 without EF or delay), u = lr NS(momentum recomputed from "
           "the applied gradients); residual / lr <= 1e-9")
DESC_ORBIT = ("executor on the separable sign problem: every stage follows theory.muon_cycle's "
              "exact trajectory for its own delay (|dx|/eta <= 1e-9)")
DESC_BOUND = ("pipeline executor: average ||grad f(x_t)||_dagger over the applied window <= "
              "T1 (2BW), T2 worst case (2BW + EF), T4 (PipeDream)")

S2 = ((3, 2), (2, 4))
S4 = ((3, 2), (2, 3), (2, 2), (3, 3))
ONE2, ONE4 = ((1, 1),) * 2, ((1, 1),) * 4
MUTANT = "2bw-none-wrong-version"
#: pipeline mutant -> its scenarios (measurement problem: P6.model; sign problem: P6.orbit)
PIPELINE_MUTANTS = {
    "pipeline_wrong_weight_version": (MUTANT, "2bw-sign-wrong-version"),
    "pipeline_stage_version_off_by_one": ("2bw-off-by-one", "2bw-sign-off-by-one"),
}
LAUNCHES = {
    "p2": {"P": 2, "scenarios": [
        pipeline_scenario("2bw-none", "2bw", "none", shapes=S2, problem_seed=11),
        pipeline_scenario("2bw-ef", "2bw", "ef", shapes=S2, problem_seed=12),
        pipeline_scenario("pipedream-none", "pipedream", "none", shapes=S2, problem_seed=13),
        pipeline_scenario("2bw-sign-ef", "2bw", "ef", shapes=ONE2, problem="sign", beta=0.5,
                          steps=40),
        pipeline_scenario("pipedream-sign", "pipedream", "none", shapes=ONE2, problem="sign",
                          beta=0.9, steps=40),
        ]},
    "pm": {"P": 2, "scenarios": [
        pipeline_scenario(MUTANT, "2bw", "none", shapes=S2, problem_seed=11, steps=8,
                          mutant="wrong_version"),
        pipeline_scenario("2bw-sign-wrong-version", "2bw", "none", shapes=ONE2,
                          problem="sign", beta=0.5, steps=24, mutant="wrong_version"),
        pipeline_scenario("2bw-off-by-one", "2bw", "ef", shapes=S2, problem_seed=12, steps=8,
                          mutant="off_by_one"),
        pipeline_scenario("2bw-sign-off-by-one", "2bw", "ef", shapes=ONE2, problem="sign",
                          beta=0.5, steps=24, mutant="off_by_one")]},
    "p4": {"P": 4, "scenarios": [
        pipeline_scenario("pipedream-none", "pipedream", "none", shapes=S4, m=4,
                          problem_seed=21),
        pipeline_scenario("2bw-ef", "2bw", "ef", shapes=S4, m=4, problem_seed=22),
        pipeline_scenario("pipedream-sign-ef", "pipedream", "ef", shapes=ONE4, m=4,
                          problem="sign", beta=0.9, steps=40)]},
}




def launch(cfg: dict, outdir: Path, deadline: float = 240.0) -> list[dict]:
    """Start ``cfg['P']`` worker processes, wait (at most ``deadline`` s), return results."""
    nprocs = cfg["P"]
    (outdir / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        run_ranks([sys.executable, str(WORKER), str(outdir / "config.json"), str(outdir)],
                  nprocs, outdir, deadline=deadline, env=env)
    except RankTimeout as e:
        pytest.fail(f"pipeline workers: {e}")
    results = []
    for r in range(nprocs):
        path = outdir / f"rank{r}.json"
        if not path.exists():
            pytest.fail(f"rank {r} wrote no result; its log ends with:\n{log_tail(outdir, r)}")
        results.append(json.loads(path.read_text()))
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The two launches of correct-code scenarios (the mutant launch ``pm`` runs in
    ``verify/test_mutants.py``, so that it prints every mutant)."""
    return {name: launch(cfg, tmp_path_factory.mktemp(f"pipeline_{name}"))
            for name, cfg in LAUNCHES.items() if name != "pm"}


@pytest.mark.parametrize("launch_name,scenario", [
    (n, sc["name"]) for n in ("p2", "p4") for sc in LAUNCHES[n]["scenarios"]])
def test_executor_satisfies_delay_model_and_bound(runs, launch_name, scenario):
    sc = next(s for s in LAUNCHES[launch_name]["scenarios"] if s["name"] == scenario)
    recs = pipeline_check(sc, runs[launch_name])
    for r in recs:
        r.params = {**r.params, "ranks": LAUNCHES[launch_name]["P"]}
    check([r for r in recs if r.prop == "P6.model"], DESC_MODEL)
    check([r for r in recs if r.prop == "P6.bound"], DESC_BOUND)
    check([r for r in recs if r.prop == "P6.ef"], DESC_EF)
    check([r for r in recs if r.prop == "P6.orbit"], DESC_ORBIT)
