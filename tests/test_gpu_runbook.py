"""The GPU tier without a GPU: the planner's arithmetic on the committed corpus manifest, the
committed configuration being the planner's output, the sweep's deadline, the gpu report, and
the CPU dry run of experiments/gpu/run.sh (the whole path at tiny sizes, ≈ 1-2 min)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXP = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXP))
sys.path.insert(0, str(EXP / "gpu"))

import plan  # noqa: E402
import report  # noqa: E402
import sweep  # noqa: E402

MANIFEST = json.loads((EXP / "gpu" / "corpus-manifest.json").read_text())


def _plan(train=None, **kw):
    t = MANIFEST["totals"]
    return plan.make_plan(train or t["train_tokens"], t["val_tokens"],
                          MANIFEST["tokenizer"]["vocab_size"], **kw)


def test_plan_of_the_committed_corpus():
    p = _plan()
    # no run sees a token twice, and tokens/parameter as close to 20 as the ladder allows
    assert p.tokens_per_run <= p.corpus_train
    assert 19.0 <= p.tokens_per_param <= 20.0
    assert p.shape["params"] * 20 <= p.corpus_train
    bigger = [s for s in plan.ladder(p.vocab) if s["params"] > p.shape["params"]]
    assert all(s["params"] * 20 > p.corpus_train for s in bigger)
    # Table 1's cells with EF(gamma*), at least 2 seeds, inside the budget
    assert p.runs == 12 * p.seeds and p.seeds >= 2 and p.total_s <= plan.BUDGET_S
    text = plan.describe(p)
    assert "no token twice" in text and f"{p.runs} runs" in text


def test_plan_shrinks_with_the_corpus_and_the_budget():
    small = _plan(train=5_000_000)
    assert small.shape["params"] < _plan().shape["params"] and small.tokens_per_run <= 5_000_000
    slow = _plan(a={"host_ms": 150.0})
    assert slow.seeds < _plan().seeds or slow.shape["params"] < _plan().shape["params"]
    with pytest.raises(ValueError, match="no protocol fits"):
        _plan(budget_s=30.0)


def test_committed_config_is_the_planners_output():
    p = _plan()
    assert (EXP / "configs" / "gpu.toml").read_text() == plan.config_text(p, MANIFEST)
    assert plan.check_config(MANIFEST).startswith("ok gpu.toml")
    short = json.loads(json.dumps(MANIFEST))
    short["shards"] = [s for s in short["shards"] if s["split"] == "val" or s["tokens"] < 10**6]
    with pytest.raises(ValueError, match="it would repeat data"):
        plan.check_config(short)


def test_gpu_tier_cells_and_deadline(tmp_path, capsys):
    gpu = sweep.get_tier("gpu")
    cells = sweep.table_cells("gpu", gpu)
    assert [c.name for c in cells[:4]] == ["muon-sync", "muon-async", "muon-ef", "muon-efg"]
    assert len(cells) == 12 and {c.base for c in cells} == {"gpu.toml"}
    assert cells[3].overrides["delay.ef_gamma"] == "auto"
    todo = sweep.plan(["gpu"], None, None, gpu)
    assert [s for _, s in todo[:24]] == [0] * 12 + [1] * 12 and len(todo) == 60
    # a run that would end after the deadline is not started
    assert sweep.main(["--tier", "gpu", "--tables", "gpu", "--results", str(tmp_path),
                       "--deadline", str(time.time() + 10), "--run-estimate-s", "60"]) == 0
    out = capsys.readouterr().out
    assert "stop: muon-sync-seed0 would end after the deadline" in out
    assert "0 runs this invocation" in out and list(tmp_path.glob("*.json")) == []


def test_gpu_report(tmp_path):
    for o in ("muon", "adamw", "soap"):
        for s in (0, 1):
            for m, v in (("sync", 3.0), ("async", 3.2), ("ef", 3.1), ("efg", 3.05)):
                rec = {"cell": f"{o}-{m}", "seed": s, "status": "ok",
                       "final": {"val_loss": v + s / 100, "wall_s": 20.0, "tokens": 25_088_000,
                                 "params": 1_262_720, "steady_tokens_per_s": 1.5e6,
                                 "mfu": 0.12, "first_step_s": 40.0}}
                sweep.write_json_atomic(tmp_path / f"{o}-{m}-seed{s}.json", rec)
    gpu = sweep.get_tier("gpu").at(results=tmp_path, root=tmp_path / "out")
    md = report.build_report(gpu).read_text()
    assert (tmp_path / "out" / "tables.md").is_file()
    assert "from `experiments/gpu/results/*.json` only" in md
    assert "| Muon | 3.005 ± 0.007 (n=2) | 3.205 ± 0.007 (n=2) |" in md
    assert "| 50 % | 75 % |" in md  # EF recovers 0.1 of 0.2, EF(γ*) 0.15
    assert "| muon-sync | 2 | 25,088,000 | 19.9 | 1,500,000 | 12.0 % | 40.0 s | 20 s |" in md
    assert "debdocs/debdocs-v1/" in md


def test_gpu_runbook_dry_run():
    """The runbook end to end on the CPU: full-size plan and configs validated, a fixture
    corpus built and verified, 12 cells trained by 2 workers in process, the table printed, and
    a second invocation trains nothing (resumable)."""
    proc = subprocess.run(["bash", str(EXP / "gpu" / "run.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    if proc.returncode != 0:
        pytest.fail(f"dry run failed:\n{out[-4000:]}\n{proc.stderr[-3000:]}")
    assert "19.9 tokens/parameter" in out and "no token twice" in out
    assert "full-size configurations valid: 24 of 24" in out  # 12 cells x seeds 0, 1
    assert "1.3M params, 25,088,000 tokens" in out
    assert "— verified" in out
    assert "| Muon |" in out and "EF(γ*) recovers" in out
    assert "second invocation: sweep done: 0 runs this invocation" in out
    assert "dry run ok: 12 of 12" in out


def test_run_estimate_prefers_warm_runs_in_a_compiled_worker(tmp_path):
    for i, (wall, first) in enumerate(((80.0, 50.0), (90.0, 55.0), (20.0, 0.5), (22.0, 0.4))):
        sweep.write_json_atomic(tmp_path / f"c{i}-seed0.json", {
            "cell": f"c{i}", "seed": 0, "status": "ok",
            "final": {"wall_s": wall, "first_step_s": first}})
    assert sweep.run_estimate(tmp_path, 60.0) == 80.0  # all four: the upper median
    assert sweep.run_estimate(tmp_path, 60.0, warm=True) == 22.0
    assert sweep.run_estimate(tmp_path / "none", 60.0, warm=True) == 60.0
