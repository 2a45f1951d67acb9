"""The GPU tier without a GPU: the planner's arithmetic on the committed corpus manifest, the
committed configuration being the planner's output, the ladder's tables on the gpu tier (the
transfer rule from a stand-in opt-180k folder, the sweep's deadline), the worker's lr loop,
the gpu report, and the CPU dry run of experiments/gpu/run.sh (the whole path at tiny sizes:
96 runs, 2-6 min on a shared 2-core CPU)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest

from asyncpp.study.ladder import gpu_plan as plan
from asyncpp.study.ladder import gpu_transfer_fixture as transfer_fixture
from asyncpp.study.ladder import gpu_worker as worker
from asyncpp.study.ladder import report, sweep
from asyncpp.study.ladder import tables_opt as to

EXP = Path(__file__).resolve().parents[1] / "experiments"


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
    # the ladder's run count: 36 lr runs + 24 claims runs, up to 36 more past the grids' edges
    assert (p.runs, p.runs_max, p.seeds) == (60, 96, 3)
    # passes counted apart: ceil(36/K) + ceil(24/K) waves, each extension pass ceil(12/K)
    k = p.packed
    assert p.waves == math.ceil(36 / k) + math.ceil(24 / k)
    assert p.waves_max == p.waves + 3 * math.ceil(12 / k)
    a = plan.ASSUMED
    for w, t in ((p.waves, p.total_s), (p.waves_max, p.total_max_s)):
        assert t == pytest.approx(a["first_run_s"] + w * p.run_s + (w - 1) * a["next_run_s"])
    # K minimises the worst case, which fits the budget on the planner's assumptions
    assert p.total_s < p.total_max_s <= plan.BUDGET_S
    for other in range(1, int(a["max_packed"]) + 1):
        _, _, rate = plan.speed(p.shape, p.batch, p.seq_len, other, a)
        run_s = other * p.tokens_per_run * (1 + a["eval_frac"]) / rate
        w = math.ceil(36 / other) + math.ceil(24 / other) + 3 * math.ceil(12 / other)
        assert a["first_run_s"] + w * run_s + (w - 1) * a["next_run_s"] >= p.total_max_s - 1e-9
    text = plan.describe(p)
    assert "no token twice" in text and "60 to 96 runs" in text and "the worst case fits" in text


def test_planner_counts_the_ladders_tables():
    # the planner's constants are the ladder's (tables_opt), not copies that may drift
    assert plan.MAX_EXTEND == to.MAX_EXTEND
    assert plan.PAIRS == len(to.TUNED_MAIN)
    assert plan.SEEDS == len(sweep.SEEDS["opt-claims"])
    assert sweep.get_tier("gpu").table_order == ("opt-lr", "opt-claims")


def test_plan_shrinks_with_the_corpus_and_the_budget():
    small = _plan(train=5_000_000)
    assert small.shape["params"] < _plan().shape["params"] and small.tokens_per_run <= 5_000_000
    # a slower host: the protocol without extensions still fits, the worst case does not
    slow = _plan(a={"host_ms": 60.0})
    assert slow.total_s <= plan.BUDGET_S < slow.total_max_s
    assert "the worst case is" in plan.describe(slow, {"host_ms": 60.0})
    with pytest.raises(ValueError, match="no protocol fits"):
        _plan(a={"host_ms": 150.0})
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


@pytest.mark.parametrize("shift", [-4, -1, 0, 3, 4])
def test_transfer_fixture_settles_at_its_choice(tmp_path, shift):
    choices = transfer_fixture.write(tmp_path, shift)
    src = sweep.get_tier("opt-180k").at(results=tmp_path)
    for (o, m), lr in choices.items():
        assert lr == pytest.approx(to.CENTRE[o] * 2.0 ** shift, rel=1e-12)
        assert to.chosen_lr(src, o, m) == lr
        assert len(to.lr_grid(src, o, m)) == 3 + min(abs(shift), to.MAX_EXTEND)
    assert len(choices) == 12
    with pytest.raises(ValueError, match="at most 2"):
        transfer_fixture.write(tmp_path / "x", 5)


def _gpu_with_transfer(tmp_path, monkeypatch, shift=-2):
    src = tmp_path / "opt-180k"
    transfer_fixture.write(src, shift)
    monkeypatch.setenv(to.TRANSFER_ENV, str(src))
    return sweep.get_tier("gpu").at(results=tmp_path / "gpu")


def test_gpu_tier_runs_the_ladder_with_the_transfer_rule(tmp_path, monkeypatch, capsys):
    gpu = _gpu_with_transfer(tmp_path, monkeypatch)
    cells = sweep.table_cells("opt-lr", gpu)
    assert len(cells) == 36 and {c.base for c in cells} == {"gpu.toml"}
    # the centres first, every (optimizer, mode), Muon and AdamW before SOAP, EF(γ*) last
    first = [c.name for c in cells[:12]]
    assert first[:2] == ["lr-muon-sync-0.005", "lr-muon-async-0.005"]
    assert first[5:9] == ["lr-adamw-ef-0.0025", "lr-muon-efg-0.005", "lr-adamw-efg-0.0025",
                          "lr-soap-sync-0.0025"]
    assert first[-1] == "lr-soap-efg-0.0025"
    # the grids are 3 points around opt-180k's choice (centre / 4 here)
    assert to.lr_grid(gpu, "muon", "ef") == [0.0025, 0.005, 0.01]
    assert cells[0].overrides["optimizer.adamw_lr"] == repr(
        to.MUON_ADAMW_LR * 0.005 / to.CENTRE["muon"])
    efg = next(c for c in cells if c.name.startswith("lr-muon-efg"))
    assert efg.overrides["delay.ef_gamma"] == "auto"
    # a run that would end after the deadline is not started
    assert sweep.main(["--tier", "gpu", "--tables", "opt-lr", "--results", str(gpu.results),
                       "--deadline", str(time.time() + 10), "--run-estimate-s", "60"]) == 0
    out = capsys.readouterr().out
    assert "stop: lr-muon-sync-0.005-seed0 would end after the deadline" in out
    assert "0 runs this invocation" in out and list(gpu.results.glob("*.json")) == []


def test_gpu_tier_without_the_transfer_choices_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(to.TRANSFER_ENV, str(tmp_path / "empty"))
    assert sweep.main(["--tier", "gpu", "--tables", "opt-lr", "--results", str(tmp_path),
                       "--list"]) == 2
    err = capsys.readouterr().err
    assert "transfers from opt-180k" in err and "not settled" in err


def _fake_sweep(gpu, trained, best_lr):
    """sweep.main standing in for training: each planned, unfinished opt-lr run of ``gpu``
    gets a val loss that falls towards ``best_lr`` (per optimizer)."""
    def main(argv):
        assert argv[:4] == ["--tier", "gpu", "--tables", "opt-lr"]
        for c, s in sweep.plan(["opt-lr"], None, None, gpu):
            if not sweep.result_path(gpu.results, c.name, s).is_file():
                lr = float(c.overrides["optimizer.lr"])
                v = 3.0 + abs(math.log2(lr / best_lr[c.opt]))
                sweep.write_json_atomic(sweep.result_path(gpu.results, c.name, s), {
                    "cell": c.name, "seed": s, "status": "ok", "final": {"val_loss": v}})
                trained.append(c.name)
        return 0
    return main


def test_worker_extends_the_grids_until_settled(tmp_path, monkeypatch):
    gpu = _gpu_with_transfer(tmp_path, monkeypatch)
    trained = []
    # Muon's optimum 8 x its transferred centre (0.005): three passes past the upper edge;
    # AdamW's at the centre (no extension); SOAP's 4 x below: two passes past the lower edge
    best = {"muon": 0.04, "adamw": 0.0025, "soap": 0.0025 / 4}
    monkeypatch.setattr(sweep, "main", _fake_sweep(gpu, trained, best))
    assert worker.settle_lr(["--results", str(gpu.results)], gpu, time.time() + 600, 1.0, 0.01)
    assert worker.pending(gpu, "opt-lr") == ([], [])
    assert to.lr_grid(gpu, "muon", "sync") == [0.0025, 0.005, 0.01, 0.02, 0.04, 0.08]
    assert to.chosen_lr(gpu, "muon", "sync") == 0.04
    assert to.lr_grid(gpu, "adamw", "ef") == [0.00125, 0.0025, 0.005]
    assert to.lr_grid(gpu, "soap", "efg") == [0.0003125, 0.000625, 0.00125, 0.0025, 0.005]
    assert len(trained) == 36 + 4 * 3 + 4 * 2
    # the claims read every choice now
    claims = {c.name: c for c in sweep.table_cells("opt-claims", gpu)}
    assert claims["muon-ef"].overrides["optimizer.lr"] == repr(0.04)
    assert claims["soap-sync"].overrides["optimizer.lr"] == repr(0.000625)


def test_worker_stops_at_the_deadline_and_tells_held_from_free(tmp_path, monkeypatch):
    gpu = _gpu_with_transfer(tmp_path, monkeypatch)
    gpu.results.mkdir(parents=True)
    calls = []
    monkeypatch.setattr(sweep, "main", lambda argv: calls.append(argv) or 0)
    # nothing trained and no time for a run: one pass, then the worker stops
    assert not worker.settle_lr([], gpu, time.time() + 5, 60.0, 0.01)
    assert len(calls) == 1
    # a lock of a live process holds a run; one of a dead process does not
    live = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        (gpu.results / ".lr-muon-sync-0.005-seed0.lock").write_text(str(live.pid))
        (gpu.results / ".lr-muon-async-0.005-seed0.lock").write_text(str(dead.pid))
        free, held = worker.pending(gpu, "opt-lr")
    finally:
        live.kill()
        live.wait()
    assert held == ["lr-muon-sync-0.005-seed0"] and len(free) == 35
    assert "lr-muon-async-0.005-seed0" in free


def _record(cell, seed, v, opt):
    return {"cell": cell, "seed": seed, "status": "ok",
            "overrides": {"optimizer.name": opt},
            "final": {"val_loss": v, "wall_s": 20.0, "tokens": 25_088_000,
                      "params": 1_262_720, "tokens_per_param": 19.87, "epochs": 0.827,
                      "steady_tokens_per_s": 1.5e6, "mfu": 0.12, "first_step_s": 40.0}}


def test_gpu_report_is_the_ladders(tmp_path, monkeypatch):
    gpu = _gpu_with_transfer(tmp_path, monkeypatch, shift=0)
    for o in ("muon", "adamw", "soap"):
        c = to.CENTRE[o]
        for m, v in (("sync", 3.0), ("async", 3.2), ("ef", 3.1), ("efg", 3.05)):
            for lr, dv in ((c / 2, 0.1), (c, 0.0), (2 * c, 0.2)):
                name = to.lr_cell_name(o, m, lr)
                sweep.write_json_atomic(gpu.results / f"{name}-seed0.json",
                                        _record(name, 0, v + dv, o))
            for s in (0, 1, 2):
                sweep.write_json_atomic(gpu.results / f"{o}-{m}-seed{s}.json",
                                        _record(f"{o}-{m}", s, v + s / 100, o))
    gpu = gpu.at(root=tmp_path / "out")
    md = report.build_report(gpu).read_text()
    assert (tmp_path / "out" / "tables.md").is_file()
    assert md.startswith("# Tables of the Compute-optimal ladder, GPU rung")
    assert "from `experiments/gpu/results/*.json` only" in md
    assert "Regime: 1,262,720 parameters, 19.9 tokens/parameter, 0.827 epochs" in md
    assert "## Learning rates per (optimizer, mode) at full length (seed 0)" in md
    assert "| Muon | 2BW | 0.01: 3.300, 0.02: 3.200, 0.04: 3.400 | 0.02 |" in md
    assert "## The paper's claims at 20 tokens per parameter" in md
    assert "| 2BW + EF | 3.110 ± 0.010 | +0.100 ± 0.000 | [+0.100, +0.100] | 3/3 | worse |" in md
    assert "recovers 50 %" in md  # EF: (3.2 - 3.1) / (3.2 - 3.0)
    # the zero-gap table, once
    assert md.count("| Muon | EF(γ*) (seeds 0–2, 2 corrections) | +0.050 ± 0.000 |") == 1
    assert "| muon-sync | 3 | 25,088,000 | 19.9 | 1,500,000 | 12.00 % | 40.0 s | 20 s |" in md
    # the lr grids' runs are in the speed table too: a first call makes nothing else
    lr_row = f"| {to.lr_cell_name('muon', 'sync', to.CENTRE['muon'])} | 1 | 25,088,000 |"
    assert md.count(lr_row) == 1
    assert "debdocs/debdocs-v1/" in md


def test_gpu_runbook_dry_run():
    """The runbook end to end on the CPU: full-size plan and first-pass configs validated, a
    stand-in opt-180k folder for the transfer rule, a fixture corpus built and verified, the
    ladder trained by 2 workers in process (every lr grid extended to its limit, then the
    claims), the tables printed, and a second invocation trains nothing (resumable)."""
    env = {k: v for k, v in os.environ.items() if k != to.TRANSFER_ENV}
    proc = subprocess.run(["bash", str(EXP / "gpu" / "run.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=1500, env=env)
    out = proc.stdout
    if proc.returncode != 0:
        pytest.fail(f"dry run failed:\n{out[-4000:]}\n{proc.stderr[-3000:]}")
    assert "19.9 tokens/parameter" in out and "no token twice" in out
    assert "transfer fixture: 12 settled grids" in out
    assert "full-size configurations valid: 36 of 36" in out  # 12 pairs x 3 lrs, seed 0
    assert "1.3M params, 25,088,000 tokens" in out
    assert "— verified" in out
    assert "worker: opt-lr settled; opt-claims" in out
    assert "| Muon | synchronous (1F1B) |" in out and "recovers" in out
    assert "second invocation: sweep done: 0 runs this invocation" in out
    assert "dry run ok: opt-lr settled in" in out and "opt-claims 36 runs" in out


def test_run_estimate_prefers_warm_runs_in_a_compiled_worker(tmp_path):
    for i, (wall, first) in enumerate(((80.0, 50.0), (90.0, 55.0), (20.0, 0.5), (22.0, 0.4))):
        sweep.write_json_atomic(tmp_path / f"c{i}-seed0.json", {
            "cell": f"c{i}", "seed": 0, "status": "ok",
            "final": {"wall_s": wall, "first_step_s": first}})
    assert sweep.run_estimate(tmp_path, 60.0) == 90.0  # all four: the upper quartile
    assert sweep.run_estimate(tmp_path, 60.0, warm=True) == 22.0  # the two warm runs
    assert sweep.run_estimate(tmp_path / "none", 60.0, warm=True) == 60.0
