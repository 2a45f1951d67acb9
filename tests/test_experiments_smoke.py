"""Smoke tests of experiments/: the report from synthetic results and the resumable sweep (the
GPU runbook's CPU dry run is in tests/test_gpu_runbook.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from asyncpp.study.ladder import report, report_markers, sweep

EXP = Path(__file__).resolve().parents[1] / "experiments"



def _record(cell: str, seed: int, val: float, drift: float = 0.5, lr: float = 0.01) -> dict:
    steps = [50, 100, 150]
    return {
        "cell": cell, "seed": seed, "status": "ok", "error": None, "overrides": {},
        "config": {"optimizer": {"lr": lr}},
        "final": {"val_loss": val, "train_loss": val, "wall_s": 1.0},
        "curves": {"step": [1, 2], "train_loss": [6.0, 5.0], "val_step": steps,
                   "val_loss": [val + 0.2, val + 0.1, val]},
        "drift": {"mean": drift, "mean_second_half": drift, "steps": [], "rho": []},
    }


def _write(results: Path, rec: dict) -> None:
    sweep.write_json_atomic(sweep.result_path(results, rec["cell"], rec["seed"]), rec)


TINY, SMALL = sweep.get_tier("tiny"), sweep.get_tier("small")


def test_every_tier_has_the_same_layout():
    """experiments/<tier>/{results,figures,tables.md}, the same for every tier; a tier is an
    explicit object (no module state to switch)."""
    for name, tier in sweep.TIERS.items():
        assert tier.name == name and tier.root == EXP / name
        assert (tier.results, tier.figures, tier.tables) == (
            EXP / name / "results", EXP / name / "figures", EXP / name / "tables.md")
    assert not hasattr(sweep, "set_tier") and not hasattr(sweep, "TIER")
    moved = TINY.at(results="/x/r", root="/x/out")
    assert (moved.results, moved.tables, TINY.results) == (
        Path("/x/r"), Path("/x/out/tables.md"), EXP / "tiny" / "results")


def test_report_from_synthetic_results(tmp_path):
    results = tmp_path / "results"
    for k, o in enumerate(("adamw", "muon", "lion")):
        for s in (0, 1):
            base = 3.0 + 0.01 * s
            _write(results, _record(f"{o}-sync", s, base))
            _write(results, _record(f"{o}-async", s, base + 0.1 * (k + 1), drift=0.3 + k / 10))
            _write(results, _record(f"{o}-ef", s, base + 0.05 * (k + 1), drift=0.4))
    _write(results, _record("lr-adamw-0.001", 0, 3.5))
    _write(results, _record("deep-sync", 0, 4.0))
    _write(results, _record("deep-pipedream-P16", 0, 4.5))
    for m, v in (("sync", 3.0), ("async", 3.2), ("ef", 3.1)):
        _write(results, _record(f"gpu135-muon-{m}", 0, v))
    bad = _record("muon-syncstart", 0, 3.0)
    bad.update(status="diverged")
    _write(results, bad)
    md = report.build_report(TINY.at(results=results, root=tmp_path / "out")).read_text()
    assert "`python experiments/report.py --tier tiny` from `experiments/tiny/results/" in md
    assert "## Table 1" in md and "## Table 6" in md
    # AdamW: gap 0.1, EF leaves 0.05 → 50 % recovered; paired gap identical for both seeds.
    row = next(line for line in md.splitlines() if line.startswith("| AdamW | 0.01 |"))
    # the share with Fieller's interval: no spread in either gap, so the interval is the point
    assert row == "| AdamW | 0.01 | 3.005 ± 0.007 | 3.105 ± 0.007 | 3.055 ± 0.007 | 50 % [50, 50] |"
    assert "| optimizer | lr | sync (n=2) | async (2BW, τ = 1) (n=2) |" in md  # n in the header
    assert "| AdamW | async − sync | +0.100 ± 0.000 | [+0.100, +0.100] | 2/2 | worse |" in md
    assert "diverged (1/1)" in md
    assert "Pearson correlation" in md
    assert "## GPU runbook" in md and "| Muon | 3.000 | 3.200 | 3.100 | 50 % (1 seed) |" in md
    assert "## The zero-gap table" in md
    assert max(line.count("|") - 1 for line in md.splitlines() if line.startswith("|")) <= 7
    figs = sorted(p.name for p in (tmp_path / "out" / "figures").glob("*.png"))
    assert "table1_val_curves.png" in figs and "table6_drift_vs_recovered.png" in figs


def test_sweep_skips_finished_cells(tmp_path, capsys):
    results = tmp_path / "results"
    rec = _record("lr-adamw-0.001", 0, 3.5)
    _write(results, rec)
    path = sweep.result_path(results, "lr-adamw-0.001", 0)
    before = path.read_bytes()
    assert sweep.main(["--tables", "lr", "--only", "lr-adamw-0.001", "--results",
                       str(results)]) == 0
    out = capsys.readouterr().out
    assert "skip lr-adamw-0.001-seed0 (done)" in out and "0 runs this invocation" in out
    assert path.read_bytes() == before
    # --list reports it as done, the other lrs as to do
    sweep.main(["--tables", "lr", "--list", "--results", str(results)])
    listing = capsys.readouterr().out.splitlines()
    assert "done  lr-adamw-0.001-seed0" in listing
    assert "todo  lr-adamw-0.003-seed0" in listing


def test_sweep_plan_is_seed_major_and_locks(tmp_path):
    todo = sweep.plan(["1"], None, None, TINY)
    n = len(sweep.table_cells("1", TINY))
    assert [s for _, s in todo[:n]] == [0] * n and todo[n][1] == 1
    names = [(c.name, s) for c, s in sweep.plan(["1", "3", "2"], None, None, TINY)]
    assert len(names) == len(set(names))  # shared cells (e.g. adamw-ef) planned once
    lock = sweep.claim(tmp_path, "x", 0)
    assert lock is not None and sweep.claim(tmp_path, "x", 0) is None  # held by this process
    lock.write_text("999999999")  # a dead owner: taken over
    assert sweep.claim(tmp_path, "x", 0) is not None


def test_sweep_runs_asyncpp_train_and_reuses_an_identical_run(tmp_path, capsys):
    """One real 3-step run through the asyncpp-train subprocess (with --delay.track_updates),
    then a cell of another table with the same training configuration is recorded from it."""
    results = tmp_path / "results"
    small = ["--set", "train.steps=3", "--set", "train.eval_every=0", "--set",
             "train.eval_batches=1", "--set", "data.max_documents=40", "--set",
             "data.seq_len=16", "--set", "train.batch_size=4",
             # the checkout under test may hold uncommitted work: recorded, not refused
             "--allow-dirty"]
    assert sweep.main(["--tables", "1", "--only", "muon-ef", "--seeds", "0",
                       "--results", str(results), *small]) == 0
    rec = report.load_results(results)["muon-ef"][0]
    assert rec["status"] == "ok" and rec["final"]["val_loss"] > 0
    assert rec["command"].startswith("asyncpp-train --config experiments/configs/base.toml")
    assert "--delay.track_updates true" in rec["command"]
    assert rec["config"]["delay"]["track_updates"] is True
    assert rec["curves"]["step"] == [1, 2, 3]
    # per-step gradient and update norms (2BW + EF: no update at step 1, the delay's)
    assert len(rec["curves"]["grad_norm"]) == 3 and all(g > 0 for g in rec["curves"]["grad_norm"])
    assert rec["curves"]["update_norm"][0] is None and all(rec["curves"]["update_norm"][1:])
    # what made it: the code at the start, the packages, the data and the regime
    prov = rec["provenance"]
    assert len(prov["commit_at_start"]) == 40 and isinstance(prov["dirty"], bool)
    assert (prov["diff_sha256"] is None) == (not prov["dirty"])
    assert prov["packages"]["torch"] and prov["packages"]["numpy"]
    assert len(prov["data"]["tokenizer_sha256"]) == 64
    assert rec["final"]["tokens"] == 3 * 4 * 16
    assert rec["final"]["tokens_per_param"] == rec["final"]["tokens"] / rec["final"]["params"]
    assert rec["final"]["epochs"] == 3 * 4 / prov["data"]["train_windows"]
    assert 0.0 < rec["drift"]["mean"] < 3.0  # 2BW: updates 1 and 2 have a predecessor
    capsys.readouterr()
    # The lr-sweep cell of Muon at its chosen lr trains exactly what muon-sync does.
    muon_lr = sweep.load_lrs(TINY.lrs_file)["muon"]
    assert sweep.main(["--tables", "1", "--only", "muon-sync", "--seeds", "0",
                       "--results", str(results), *small]) == 0
    assert sweep.main(["--tables", "lr", "--only", f"lr-muon-{muon_lr:g}",
                       "--results", str(results), *small]) == 0
    out = capsys.readouterr().out
    assert "reuse lr-muon-" in out and "identical to muon-sync-seed0.json" in out
    R = report.load_results(results)
    lr_cell = R[f"lr-muon-{muon_lr:g}"][0]
    assert lr_cell["reused_from"] == "muon-sync-seed0.json"
    assert lr_cell["final"] == R["muon-sync"][0]["final"]


def test_small_tier_has_its_own_files_and_tables(tmp_path, capsys):
    results = tmp_path / "results"
    for s in (0, 1):
        _write(results, _record("muon-sync", s, 3.0 + s / 100))
        _write(results, _record("muon-async", s, 3.2))
        _write(results, _record("muon-ef", s, 3.1))
    for lr, v in ((0.005, 3.5), (0.01, 3.3), (0.02, 3.0), (0.05, 3.4)):
        _write(results, _record(f"lr-muon-{lr:g}", 0, v))
    _write(results, _record("muon-sync-long", 0, 2.9))  # table "flat": twice the steps
    _write(results, _record("lr-adamw-0.001", 0, 3.5))  # AdamW's grid unfinished
    lrs = tmp_path / "lrs-small.toml"
    assert sweep.main(["--tier", "small", "--pick-lrs", "--results", str(results),
                       "--lrs", str(lrs)]) == 0
    text = lrs.read_text()
    assert "muon = 0.02" in text and "adamw =" not in text
    assert "unfinished, no lr yet: adamw (1 of 3 runs)" in text
    assert sweep.load_lrs(lrs) == {"muon": 0.02}
    capsys.readouterr()
    # cells of AdamW are skipped (no lr yet) instead of failing the sweep
    assert sweep.main(["--tier", "small", "--tables", "1", "--only", "adamw-sync", "--seeds",
                       "0", "--results", str(results), "--lrs", str(lrs)]) == 0
    assert "skip adamw-sync-seed0 (no lr for adamw yet" in capsys.readouterr().out
    assert report.main(["--tier", "small", "--results", str(results),
                        "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "tables.md").read_text()
    assert md.startswith("# Tables of the CPU reproduction, `small` tier")
    assert "experiments/small/results/*.json" in md
    assert "## Table 4" not in md and "## Table 7" not in md
    # flatness row of the two synchronous Muon runs, with the 2×-steps run against seed 0
    row = next(line for line in md.splitlines() if line.startswith("| Muon | 0.1")
               and "vs" in line)  # the second flatness table: drops, then the 2× run
    assert row.endswith("| 2.900 (−0.100 vs 3.000) |")
    cells = sweep.table_cells("1", SMALL)
    assert {c.base for c in cells} == {"small.toml"}
    assert SMALL.mitigations["cooldown"]["delay.sync_cooldown"] == "50"  # 10 % of 500 steps
    assert [c.overrides["train.steps"] for c in sweep.table_cells("flat", SMALL)] == [
        "1000", "1000"]
    assert {c.base for c in sweep.table_cells("1", TINY)} == {"base.toml"}  # untouched


def test_progress_estimates_the_run_time_left_per_optimizer(tmp_path):
    """The time still to spend: per run to do, the median wall time of its optimizer's finished
    runs per base length, scaled by the run's tokens; reused records cost nothing."""
    R = {}

    def add(cell, wall, **over):
        rec = _record(cell, 0, 3.0)
        rec["final"]["wall_s"] = wall
        rec["overrides"] = {k.replace("_", "."): v for k, v in over.items()}
        R.setdefault(cell, {})[0] = rec
        return rec

    add("lr-muon-0.005", 600.0, optimizer_name="muon")
    add("muon-sync-long", 1200.0, optimizer_name="muon", train_steps="1000")  # 600 per base run
    add("adamw-sync-long", 600.0, optimizer_name="adamw", train_steps="1000")  # 300 per base run
    add("lr-muon-0.01", 0.5, optimizer_name="muon")["reused_from"] = "x.json"  # not a cost
    md = report.progress(R, SMALL)
    rows = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    assert rows["flat"] == "| flat | 2 | 2 | 0.0 h |"
    # lr: Muon's two other grid points at 600 s, AdamW's 3 at 300 s, the 13 runs of the four
    # optimizers without a finished run at the median of all (600 s): 9900 s
    assert rows["lr"] == "| lr | 2 | 20 | 2.8 h |"
    # table 5 is AdamW at batch 8, 16, 32 (x 1/2, 1, 2 tokens), sync and async, 3 seeds
    assert rows["5"] == "| 5 | 0 | 18 | 1.8 h |"


def test_stale_run_folders_of_a_claimed_cell_are_removed(tmp_path, monkeypatch):
    """A folder left by a killed run of (cell, seed) goes when the cell is claimed again; the
    folders of another seed, another cell or another results folder stay."""
    monkeypatch.setattr(sweep.tempfile, "tempdir", str(tmp_path))
    results, other = tmp_path / "results", tmp_path / "elsewhere" / "results"
    stale = tmp_path / (sweep.run_dir_prefix(results, "muon-ef", 0) + "k1lled")
    keep = [tmp_path / (sweep.run_dir_prefix(results, "muon-ef", 1) + "live"),
            tmp_path / (sweep.run_dir_prefix(results, "muon-ef-cool", 0) + "live"),
            tmp_path / (sweep.run_dir_prefix(other, "muon-ef", 0) + "live")]
    for d in (stale, *keep):
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text("{}\n")
    assert sweep.remove_stale_run_dirs(results, "muon-ef", 0) == [stale]
    assert not stale.exists() and all(d.is_dir() for d in keep)
    # Through the sweep itself: the leftover is gone by the time the claimed cell trains.
    stale.mkdir()
    seen = {}

    def fake_run(cell, seed, res, lrs=None, extra=None, in_process=False):
        seen["stale_left"] = stale.exists()
        seen["kept"] = all(d.is_dir() for d in keep)
        return {"status": "ok", "final": {"val_loss": 1.0, "wall_s": 0.0},
                "machine": {"loadavg_start": 0.0}}

    monkeypatch.setattr(sweep, "run_cell", fake_run)
    assert sweep.main(["--tables", "1", "--only", "muon-ef", "--seeds", "0",
                       "--results", str(results)]) == 0
    assert seen == {"stale_left": False, "kept": True}


def test_sigterm_stops_the_sweep_and_leaves_nothing_behind(tmp_path):
    """SIGTERM during a real run: the sweep exits 143, its training subprocess is gone, and no
    run folder, lock or results file is left (the cell stays to do)."""
    import os
    import signal
    import time

    tmp, results = tmp_path / "tmp", tmp_path / "results"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    cmd = [sys.executable, str(EXP / "sweep.py"), "--tables", "1", "--only", "muon-ef",
           "--seeds", "0", "--results", str(results), "--set", "train.steps=100000",
           "--set", "data.max_documents=40", "--set", "data.seq_len=16", "--allow-dirty"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 120
        while not (list(tmp.glob("asyncpp-results-*/metrics.jsonl"))) and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert list(tmp.glob("asyncpp-results-*-muon-ef-seed0-*")), "no run started"
        trainer = subprocess.run(["pgrep", "-f", str(tmp)], capture_output=True, text=True)
        assert trainer.stdout.split(), "the training subprocess is not running"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        # Look for a surviving trainer before anything can fail, and never leave one running
        # (it would go on for 100,000 steps).
        left = subprocess.run(["pgrep", "-f", str(tmp)], capture_output=True, text=True)
        subprocess.run(["pkill", "-9", "-f", str(tmp)], capture_output=True)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert left.stdout.split() == [], "the training subprocess outlived the sweep"
    assert list(tmp.glob("asyncpp-*")) == []  # (torch keeps its own cache folder there)
    assert list(results.iterdir()) == []  # no lock, no half-written or finished result


def test_efg_and_why_gap_tables_from_synthetic_results(tmp_path):
    """EF(γ*) depth, H1/H2 (gap vs lr, each mode at its own lr), H3 (re-tuned lr, T2's drift)
    and H4 from synthetic results: cells not run show "—", shares are paired by seed."""
    R = {}

    def add(cell, seed, val, sdrift=None):
        rec = _record(cell, seed, val)
        if sdrift is not None:
            rec["drift"]["spectral_mean"] = sdrift
        R.setdefault(cell, {})[seed] = rec
        if tmp_path is not None:
            _write(tmp_path / "results", rec)

    for s in (0, 1):
        # AdamW: gap 1.0 at lr*, 0.2 at lr*/8 where async is best; EF halves the gap
        for f, g in ((1.0, 1.0), (0.125, 0.2)):
            suf = "" if f == 1 else f"-lrx{f:g}"
            add(f"adamw-sync{suf}", s, 3.0 + (0.3 if f < 1 else 0.0))
            add(f"adamw-async{suf}", s, 3.0 + (0.3 if f < 1 else 0.0) + g)
            add(f"adamw-ef{suf}", s, 3.0 + (0.3 if f < 1 else 0.0) + g / 2)
        add("deep-2bw-P4", s, 4.0)
        add("deep-pipedream-P4", s, 4.4)
        add("deep-pipedream-P4-ef", s, 4.2)
        add("deep-pipedream-P4-efg", s, 4.1 + 0.08 * s)  # shares 75 % and 55 %
        add("muon-sync-beta0.8-tuned", s, 3.0, sdrift=0.5)
        add("muon-async-beta0.8-tuned", s, 3.1, sdrift=0.7 + s / 10)
    add("adamw-sync", 2, 9.0)  # seed 2 of Table 1 is not an H1 seed: not read
    for f, v in ((0.5, 3.2), (1.0, 3.0), (2.0, 3.1)):
        add(f"muon-sync-beta0.8-lrx{f:g}", 0, v)
    md = report.table_h1(R)
    assert ("| AdamW | 1 | 0.01 | 3.000 ± 0.000 | 4.000 ± 0.000 | 3.500 ± 0.000 | 50 % [50, 50] |"
            in md)
    assert "| AdamW | 1 | async − sync | +1.000 ± 0.000 | [+1.000, +1.000] | 2/2 | worse |" in md
    assert "| AdamW | 1 | EF − sync | +0.500 ± 0.000 |" in md
    assert "| AdamW | 1/4 | — | — |" in md and "| Muon | 1/8 | — |" in md
    assert report.h2_best(R, "adamw", "sync") == (1.0, 2)  # lower loss at lr*
    assert report.h2_best(R, "adamw", "async") == (0.125, 2)
    h2 = report.table_h2(R)
    # tuned EF: (3.5 − 3.4)/(3.5 − 3.0) with async and EF at lr*/8, sync at lr*
    assert "| AdamW | 1 (2 of 4) | 1/8 (2 of 4) | 1/8 (2 of 4) | 20 % [20, 20] |" in h2
    # tuned: async at lr*/8 (3.5) − sync at lr* (3.0)
    assert "| AdamW | async − sync, tuned | +0.500 ± 0.000 |" in h2
    depth = report.table_efg_depth(R)
    # the gap 0.4 on both seeds (no spread), so Fieller's interval is the t-interval of the
    # numerator over 0.4: EF(γ*) recovers 0.30, 0.22 → 65 % ± 12.706 · 0.04 / 0.4 = [−62, 192];
    # its gain over EF, (0.10, 0.02) / 0.4 → +15 pp ± 127 = [−112, +142], both seeds positive
    assert "| 4 | 50 % [50, 50] | 65 % [−62, 192] | +15 pp [−112, +142], 2/2 |" in depth
    assert "| 4 | EF(γ*) − EF | −0.060 ± 0.057 | [−0.568, +0.448] | 2/2 | within noise |" in depth
    assert "| 4 | PipeDream − 2BW | +0.400 ± 0.000 |" in depth
    assert "| 8 | — | — | — | — |" in depth
    tier = TINY.at(results=tmp_path / "results")
    h3 = report.table_h3(R, tier)
    assert "| Muon | 0.8 | 3.200 / 3.000 / 3.100 | × 1 |" in h3
    assert ("| Muon | 0.8 | 3.000 ± 0.000 | 3.100 ± 0.000 | 0.750 ± 0.071 | 0.500 ± 0.000 |"
            in h3)
    assert "| Muon | 0.9 | — / — / — | — |" in h3
    assert "| AdamW | 300 | 3.000 ± 0.000 | 4.000 ± 0.000 | 3.500 ± 0.000 |" in report.table_h4(
        R, tier)
    # h3's cells depend on h3-tune: before it has finished, progress says so instead of failing
    rows = {ln.split(" | ")[0][2:]: ln for ln in report.progress(R, tier).splitlines()
            if ln.startswith("| ")}
    assert rows["h3"].startswith("| h3 | 4 | — | — (run --tables h3-tune first)")
    assert rows["h1"].startswith("| h1 | ")


def test_h5_table_reads_every_adan_grid_paired_by_seed():
    """H5: Table 1/H1's Adan rows at lr* x f and the two beta grids of table h5; a cell not run
    is "—", shares are paired by seed, and seed 2 (not an H5 seed) is never read."""
    R = {}

    def add(cell, seed, val):
        R.setdefault(cell, {})[seed] = _record(cell, seed, val)

    for s in (0, 1):
        add("adan-sync", s, 3.0)
        add("adan-async", s, 4.0)
        add("adan-ef", s, 3.5 + 0.1 * s)  # shares 50 % and 40 %
        add("adan-sync-b98-lr0.01", s, 3.2)
        add("adan-async-b98-lr0.01", s, 3.3)
    add("adan-async", 2, 99.0)
    losses, _, cmp = report.table_h5(R).split("\n\n")  # losses, a caption, comparisons
    rows = [ln for ln in losses.splitlines() if ln.startswith("| 0.")]
    assert len(rows) == len(report.H1_FRACTIONS) + 5
    assert len([ln for ln in cmp.splitlines() if ln.startswith("| 0.")]) == len(rows)
    star = next(ln for ln in rows if ln.startswith("| 0.9, 0.92, 0.99 (Table 1, H1) | 0.01 |"))
    # EF recovers 0.5, 0.4 of a gap of 1.0 (no spread): 45 % ± 12.706 · 0.05 = [−19, 109]
    assert star.endswith("| 3.000 ± 0.000 | 4.000 ± 0.000 | 3.550 ± 0.071 | 45 % [−19, 109] |")
    assert ("| 0.9, 0.92, 0.99 (Table 1, H1) | 0.01 | +1.000 ± 0.000 | [+1.000, +1.000] | 2/2 "
            "| worse |") in cmp
    b98 = next(ln for ln in rows if ln.startswith("| 0.98, 0.92, 0.99 (reference) | 0.01 |"))
    assert b98.endswith("| 3.200 ± 0.000 | 3.300 ± 0.000 | — | — |")
    assert "| 0.98, 0.92, 0.99 (reference) | 0.01 | +0.100 ± 0.000 |" in cmp
    assert "| 0.02, 0.08, 0.01 (Alg. 1 as torch β's) | 0.001 | — |" in "\n".join(rows)


def test_nag_and_wpipe_tables_from_synthetic_results(tmp_path, monkeypatch):
    """Tables nag and wpipe (issue 23) from synthetic results: cells not run show "—", shares
    and the gap ratio are on the seed means (shares with Fieller's interval, the gap ratio
    with the seeds' own values in parentheses), the Nesterov − EF(γ*) column is paired by
    seed; both sections and nag_depth.png are written."""
    R = {}

    def add(cell, seed, val):
        rec = _record(cell, seed, val)
        R.setdefault(cell, {})[seed] = rec
        _write(tmp_path / "results", rec)

    for s in (0, 1):
        add("deep-sync", s, 4.0)
        add("deep-2bw-P4", s, 4.4)
        add("deep-2bw-P4-ef", s, 4.2)
        add("deep-2bw-P4-efg", s, 4.1 + 0.08 * s)  # shares 75 % and 55 %
        add("deep-2bw-P4-nag", s, 4.1)  # 75 %, 75 %; Nesterov − EF(γ*): 0, −0.08
        add("deep-adamw-sync", s, 3.0)
        add("deep-adamw-2bw-P4", s, 3.4)
        add("deep-adamw-wpipe-P4", s, 3.1)  # gap ratio 0.25
        add("deep-adamw-wpipe-P4-ef", s, 3.05)  # EF recovers 50 % of WPipe's gap
    nag = report.table_nag(R)
    assert ("| Muon | 2BW (τ = 1,1,1,1) | 4.400 ± 0.000 | 4.200 ± 0.000 | 4.140 ± 0.057 | "
            "4.100 ± 0.000 |") in nag
    # EF(γ*) recovers 0.30, 0.22 of a gap of 0.4: 65 % ± 12.706 · 0.04 / 0.4 = [−62, 192]
    assert "| Muon | 2BW (τ = 1,1,1,1) | 50 % [50, 50] | 65 % [−62, 192] | 75 % [75, 75] |" in nag
    # Nesterov − EF(γ*) per seed: 0 and −0.08; one seed negative, one tied
    assert ("| Muon | 2BW (τ = 1,1,1,1) | Nesterov − EF(γ*) | −0.040 ± 0.057 | [−0.548, +0.468] "
            "| 1/2 | within noise |") in nag
    assert "| Muon | PipeDream (τ = 3,2,1,0) | — | — | — | — |" in nag
    assert "| AdamW | PipeDream (τ = 3,2,1,0) | — | — | — | — |" in nag
    wp = report.table_wpipe(R)
    assert "| AdamW | 3.000 ± 0.000 | 3.100 ± 0.000 | 3.050 ± 0.000 | 3.400 ± 0.000 | — |" in wp
    assert "| AdamW | 50 % [50, 50] | — | 0.25 (0.25, 0.25) |" in wp
    assert "| AdamW | WPipe − 2BW | −0.300 ± 0.000 | [−0.300, −0.300] | 2/2 | better |" in wp
    assert "| Muon | 4.000 ± 0.000 | — | — | 4.400 ± 0.000 | 4.200 ± 0.000 |" in wp
    monkeypatch.setitem(report_markers._R_CACHE, "tiny", R)
    assert report.number("tiny/rec/deep-sync/deep-2bw-P4/deep-2bw-P4-nag") == "75 %"
    assert report.number("tiny/recseeds/deep-sync/deep-2bw-P4/deep-2bw-P4-efg") == "75, 55"
    assert report.number(
        "tiny/gapratio/deep-adamw-sync/deep-adamw-wpipe-P4/deep-adamw-2bw-P4") == "0.25"
    assert report.number("tiny/gapratio/deep-sync/deep-wpipe-P4/deep-2bw-P4") == "—"
    assert report.number("tiny/gap/deep-2bw-P4-efg/deep-2bw-P4-nag") == "−0.040 ± 0.057"
    tier = TINY.at(results=tmp_path / "results", root=tmp_path / "out")
    text = "\n".join(report.sections(R, tier)[0])
    assert "## Delay corrections at depth\n" in text and "## WPipe against 2BW\n" in text
    assert "issue" not in text  # reader-facing: no builder's references
    assert (tmp_path / "out" / "figures" / "nag_depth.png").is_file()


def test_deadline_estimates_a_run_by_its_own_steps(tmp_path, capsys):
    """``--deadline``: the run to come is estimated at the upper quartile of its optimizer's
    wall times per step (all runs' when it has fewer than 3) times its own steps (a 4×-longer
    token-ladder run is not taken for a claims run, nor a SOAP run for an AdamW one), and a
    run that would end after the deadline is not started."""
    import time

    results = tmp_path / "results"
    for cell, name, wall, steps in (
            ("old-adamw-1", "adamw", 30.0, 300), ("old-adamw-2", "adamw", 240.0, 1200),
            ("old-adamw-3", "adamw", 90.0, 300), ("old-adamw-4", "adamw", 120.0, 300),
            ("old-soap-1", "soap", 300.0, 300), ("old-soap-2", "soap", 600.0, 300)):
        rec = _record(cell, 0, 3.5)
        rec["config"]["train"] = {"steps": steps}
        rec["config"]["optimizer"]["name"] = name
        rec["final"]["wall_s"] = wall
        _write(results, rec)
    # AdamW per step: 0.1, 0.2, 0.3, 0.4 → upper quartile 0.4 (the median would be 0.3)
    assert sweep.run_estimate(results, 9.0, steps=1200, optimizer="adamw") == pytest.approx(480.0)
    # SOAP has 2 runs: all six count, per step 0.1 … 0.4, 1.0, 2.0 → 1.0 (its own two: 2.0)
    assert sweep.run_estimate(results, 9.0, steps=1200, optimizer="soap") == pytest.approx(1200.0)
    # whole runs: 30, 90, 120, 240, 300, 600 → 300
    assert sweep.run_estimate(results, 9.0) == pytest.approx(300.0)
    assert sweep.run_estimate(tmp_path / "none", 9.0, steps=100) == 9.0
    tiny_steps = sweep.build_config(next(c for c, _ in sweep.plan(["lr"], None, None, TINY)),
                                    0, tmp_path / "x", None, {})[0].train.steps
    before = sorted(p.name for p in results.iterdir())
    assert sweep.main(["--tables", "lr", "--results", str(results),
                       "--deadline", str(time.time() + 0.4 * tiny_steps / 2)]) == 0
    out = capsys.readouterr().out
    assert f"would end after the deadline (a run takes ~{0.4 * tiny_steps:.0f} s" in out
    assert "0 runs this invocation" in out
    assert sorted(p.name for p in results.iterdir()) == before


def test_max_runs_stops_after_that_many_trained_and_the_next_call_goes_on(tmp_path, capsys,
                                                                        monkeypatch):
    """``--max-runs N`` ends the sweep after N trained runs (the ladder trains one run per call
    so that it can go back to an earlier table); the same command trains the next cells."""
    trained = []

    def fake_run_cell(c, s, results, lrs, extra, in_process):
        rec = _record(c.name, s, 3.5)
        rec["machine"] = {"loadavg_start": 0.0}
        _write(results, rec)
        trained.append(f"{c.name}-seed{s}")
        return rec

    monkeypatch.setattr(sweep, "run_cell", fake_run_cell)
    results = tmp_path / "results"
    cells = [f"{c.name}-seed{s}" for c, s in sweep.plan(["lr"], None, None, TINY)]
    assert len(cells) > 3
    assert sweep.main(["--tables", "lr", "--results", str(results), "--max-runs", "2"]) == 0
    assert trained == cells[:2]
    assert "sweep done: 2 runs this invocation" in capsys.readouterr().out
    assert sweep.main(["--tables", "lr", "--results", str(results), "--max-runs", "1"]) == 0
    assert trained == cells[:3]
    out = capsys.readouterr().out
    assert f"skip {cells[0]} (done)" in out and "sweep done: 1 runs this invocation" in out
