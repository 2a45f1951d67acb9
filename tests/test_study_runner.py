"""``asyncpp-study run`` and ``report`` on real runs: the tiny study of configs/ end to end on
the embedded corpus (2 cells × 3 seeds × 4 steps, two lanes), then what makes a study
resumable — results on disk skipped, identical runs trained once, the deadline, the lr chosen
on the selection seeds before the claims run."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scipy import stats as sps

from asyncpp.study import report, runner, spec

ROOT = Path(__file__).resolve().parents[1]
TINY_STUDY = ROOT / "configs" / "study-tiny.toml"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "asyncpp.study.cli", *args],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)


@pytest.mark.timeout(1800)
def test_the_tiny_study_runs_resumes_and_reports(tmp_path):
    out = tmp_path / "study"
    r = _cli("run", str(TINY_STUDY), "--out", str(out), "--lanes", "2")
    assert r.returncode == 0, r.stderr
    assert "ETA" in r.stderr and "[6/6]" in r.stderr
    files = sorted((out / "results").glob("*/seed*.json"))
    assert [f"{f.parent.name}/{f.name}" for f in files] == [
        f"{c}/seed{k}.json" for c in ("2bw", "sync") for k in (0, 1, 2)]
    recs = {(f.parent.name, int(f.stem[4:])): json.loads(f.read_text()) for f in files}
    for (cell, seed), rec in recs.items():
        assert (rec["cell"], rec["seed"], rec["role"]) == (cell, seed, "claims")
        summary = json.loads((out / rec["run_dir"] / "summary.json").read_text())
        assert rec["value"] == summary["final_val_loss"]
        assert rec["steps"] == 4 and rec["tokens"] == 4 * 8 * 64
        assert rec["tokens_per_param"] == pytest.approx(rec["tokens"] / rec["params"])
        prov = rec["provenance"]
        assert len(prov["tokenizer_sha256"]) == 64 and prov["cpu"]
        assert prov["packages"]["torch"] and "commit_at_start" in prov and "dirty" in prov
        assert "manifest_content_sha256" in prov and "subnormals_flushed" in rec
        assert rec["subnormals_flushed"] == summary["subnormals_flushed"]
        # the resolved configuration: the cell's options and the seed applied to the base
        assert rec["config"]["run"]["seed"] == seed and rec["config"]["train"]["steps"] == 4
        assert not list(out.rglob("*.tmp"))
        # per-step curves, gradient and update norms among them (the study tracks updates)
        cur = rec["curves"]
        assert cur["step"] == [1, 2, 3, 4] and len(cur["train_loss"]) == 4
        assert len(cur["grad_norm"]) == 4 and all(g > 0 for g in cur["grad_norm"])
        # a one-step delay applies no update at step 1: None there, a norm everywhere else
        first = [None] if cell == "2bw" else []
        assert [u for u in cur["update_norm"] if u is None] == first
        assert len(cur["update_norm"]) == 4 and all(u > 0 for u in cur["update_norm"] if u)
    mtimes = {f: f.stat().st_mtime_ns for f in files}

    again = _cli("run", str(TINY_STUDY), "--out", str(out), "--lanes", "2")
    assert again.returncode == 0, again.stderr
    assert "trained 0, reused 0, already on disk 6" in again.stderr
    assert {f: f.stat().st_mtime_ns for f in files} == mtimes

    rep = _cli("report", str(TINY_STUDY), "--out", str(out))
    assert rep.returncode == 0, rep.stderr
    doc = json.loads((out / "report.json").read_text())
    tables = (out / "tables.md").read_text()
    a = [recs[("2bw", k)]["value"] for k in range(3)]
    b = [recs[("sync", k)]["value"] for k in range(3)]
    ref = sps.ttest_rel(a, b)
    eq, diff = doc["endpoints"]
    assert diff["test"] == "difference" and diff["label"] == "exploratory"
    assert diff["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    ci = ref.confidence_interval(0.95)
    assert (diff["lo"], diff["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert eq["test"] == "equivalence" and eq["label"].startswith("primary")
    assert eq["p_holm"] == eq["p"]  # one primary: Holm leaves it as it is
    # every endpoint number printed in tables.md is the JSON's
    for row in (eq, diff):
        assert f"{row['estimate']:+.3f}".replace("-", "−") in tables
        assert row["verdict"] in tables
    assert doc["cells"]["sync"]["values"] == {str(k): b[k] for k in range(3)}
    if doc["figures"]:
        assert (out / "figures" / "cells.png").stat().st_size > 1000


def _fake_result(study, r: runner.Run, value: float) -> None:
    runner.write_json(r.result, {"key": r.key, "cell": r.cell, "seed": r.seed,
                                 "role": r.role, "value": value, "tokens": 1024,
                                 "tokens_per_param": 1.0, "params": 1024})


def _endpoints(*eps: dict) -> str:
    """``[[endpoints]]`` tables of a study file, one per dict (JSON scalars are TOML's)."""
    return "".join("\n[[endpoints]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in e.items())
                   for e in eps)


def _study(tmp_path: Path, extra: str = "", cells: str = "") -> spec.Study:
    p = tmp_path / "s.toml"
    p.write_text(f"""
[study]
name = "u"
base = "{ROOT / 'configs' / 'tiny.toml'}"
out = "out"
[cells.a]
"optimizer.name" = "adamw"
[cells.b]
"optimizer.name" = "adamw"
{cells}
[seeds]
claims = [0, 1]
{extra}
""")
    return spec.load(p)


def test_identical_cells_are_one_run_and_a_recorded_twin_is_reused(tmp_path):
    s = _study(tmp_path)
    runs, _ = runner.claims_runs(s)
    a0, a1, b0, b1 = runs
    assert a0.key == b0.key and a1.key == b1.key and a0.key != a1.key
    _fake_result(s, a0, 3.0)
    _fake_result(s, a1, 3.5)
    out = runner.execute(s, runs, lanes=2, say=lambda m: None)
    assert (out.trained, out.reused, out.skipped) == (0, 2, 2)
    assert runner.read_result(b1.result)["value"] == 3.5
    assert runner.read_result(b1.result)["reused_from"] == "results/a/seed1.json"
    assert not (s.root / "runs").exists()


def test_a_passed_deadline_starts_nothing(tmp_path):
    s = _study(tmp_path)
    runs, _ = runner.claims_runs(s)
    said = []
    out = runner.execute(s, runs, lanes=2, deadline=time.time() - 1, say=said.append)
    assert out.trained == 0 and out.left == 2  # two distinct runs
    assert not (s.root / "runs").exists() and any("deadline" in m for m in said)


def test_a_changed_option_is_a_new_run_not_the_old_result(tmp_path):
    s = _study(tmp_path)
    r = runner.claims_runs(s)[0][0]
    _fake_result(s, r, 3.0)
    assert runner.done(r)
    s2 = dataclasses.replace(s, overrides={"train.steps": 3})
    r2 = runner.claims_runs(s2)[0][0]
    assert r2.result == r.result and r2.key != r.key and not runner.done(r2)


def test_claims_wait_for_the_lr_chosen_on_the_selection_seeds(tmp_path):
    s = _study(tmp_path, extra="selection = [7, 8]\n[lr]\ngrid = [0.001, 0.01]\n")
    assert runner.claims_runs(s) == ([], ["a", "b"])
    sel = runner.selection_runs(s)
    assert {(r.lr, r.seed) for r in sel if r.cell == "a"} == {
        (lr, k) for lr in (0.001, 0.01) for k in (7, 8)}
    loss = {(0.001, 7): 3.0, (0.001, 8): 3.4, (0.01, 7): 3.3, (0.01, 8): 3.0}
    for r in sel:
        if r.cell == "a":
            _fake_result(s, r, loss[(r.lr, r.seed)])
    claims, waiting = runner.claims_runs(s)
    assert waiting == ["b"]
    assert {r.lr for r in claims} == {0.01}  # mean 3.15 beats 3.2
    assert {r.seed for r in claims} == {0, 1}
    assert ("optimizer.lr", 0.01) in claims[0].options
    cmd = runner.command(s, claims[0], resume=False)
    assert cmd[cmd.index("--optimizer.lr") + 1] == "0.01"
    assert cmd[cmd.index("--run.seed") + 1] == "0"


def test_report_holm_adjusts_primaries_and_not_exploratory_ones(tmp_path):
    cells = "[cells.c]\n\"optimizer.name\" = \"muon\"\n"
    eps = """
[[endpoints]]
name = "ab"
test = "difference"
a = "a"
b = "c"
primary = true
[[endpoints]]
name = "bc"
test = "difference"
a = "b"
b = "c"
primary = true
[[endpoints]]
name = "x"
test = "difference"
a = "a"
b = "c"
"""
    s = _study(tmp_path, extra=eps, cells=cells)
    s = dataclasses.replace(s, claims_seeds=(0, 1, 2, 3))
    vals = {"a": [3.0, 3.0, 3.3, 3.2], "b": [3.0, 3.4, 3.1, 3.2], "c": [2.9, 2.95, 3.1, 3.0]}
    for r in runner.claims_runs(s)[0]:
        _fake_result(s, r, vals[r.cell][r.seed])
    rows = {r["name"]: r for r in report.judge(s, report.cell_values(s))}
    pa, pb = rows["ab"]["p"], rows["bc"]["p"]
    lo_p, hi_p = sorted((pa, pb))
    assert min(rows["ab"]["p_holm"], rows["bc"]["p_holm"]) == pytest.approx(min(1, 2 * lo_p))
    assert max(rows["ab"]["p_holm"], rows["bc"]["p_holm"]) == pytest.approx(
        max(min(1, 2 * lo_p), hi_p))
    assert rows["x"]["p_holm"] is None and rows["x"]["label"] == "exploratory"
    assert rows["x"]["p"] == rows["ab"]["p"]
    # the same comparison: significant on its own p, not once adjusted for two primaries
    assert rows["ab"]["p"] < 0.05 < rows["ab"]["p_holm"]
    assert rows["x"]["verdict"] == "a > c" and rows["ab"]["verdict"] == "not established"


def test_an_endpoint_missing_a_declared_seed_is_pending_and_holds_back_the_primaries(tmp_path):
    """Each test runs once, on the seeds declared before the runs: an endpoint whose cells
    lack one is pending (interim numbers, no verdict), and no primary is judged while another
    primary is pending; a complete exploratory endpoint is judged on its own p."""
    cells = "[cells.c]\n\"optimizer.name\" = \"muon\"\n"
    eps = _endpoints(*({"name": n, "test": "difference", "a": a, "b": "c", "primary": prim}
                       for n, a, prim in (("ac", "a", True), ("bc", "b", True),
                                          ("x", "a", False), ("y", "b", False))))
    s = _study(tmp_path, extra=eps, cells=cells)
    s = dataclasses.replace(s, claims_seeds=(0, 1, 2, 3))
    vals = {"a": [3.0, 3.0, 3.3, 3.2], "b": [3.0, 3.4, 3.1, 3.2], "c": [2.5, 2.55, 2.7, 2.6]}
    last = None
    for r in runner.claims_runs(s)[0]:
        if (r.cell, r.seed) == ("b", 3):
            last = r
            continue
        _fake_result(s, r, vals[r.cell][r.seed])
    rows = {r["name"]: r for r in report.judge(s, report.cell_values(s))}
    assert rows["bc"]["verdict"] == "pending (1 declared run(s) missing)"
    assert rows["bc"]["n"] == 3 and rows["bc"]["p"] is not None  # interim numbers shown
    assert rows["y"]["verdict"].startswith("pending") and rows["y"]["missing"] == 1
    assert rows["ac"]["verdict"] == "pending (the primary family waits for bc)"
    assert rows["ac"]["p_holm"] is None and rows["ac"]["missing"] == 0
    # the family is both declared primaries, the pending one too
    assert rows["ac"]["label"] == "primary (Holm over 2)" == rows["bc"]["label"]
    assert rows["x"]["verdict"] == "a > c"  # exploratory and complete: judged
    _fake_result(s, last, vals["b"][3])
    rows = {r["name"]: r for r in report.judge(s, report.cell_values(s))}
    assert rows["ac"]["verdict"] == "a > c" and rows["bc"]["verdict"] == "b > c"
    assert all(r["missing"] == 0 for r in rows.values()) and rows["ac"]["p_holm"] is not None


def test_torchrun_studies_launch_one_torchrun_per_run(tmp_path):
    s = dataclasses.replace(_study(tmp_path), launcher="torchrun", nproc=2)
    r = runner.claims_runs(s)[0][0]
    cmd = runner.command(s, r, resume=True)
    assert cmd[:5] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m",
                       "asyncpp.train.cli"]
    assert cmd[-1] == "--resume" and "--run.overwrite" not in cmd
    assert r.key != runner.claims_runs(_study(tmp_path))[0][0].key  # launcher is in the key


LADDER = ROOT / "experiments" / "opt-180k" / "results"


def _ladder_as_study(tmp_path: Path, names: dict[str, str], eps: str) -> spec.Study:
    """A study whose cell c reads the committed opt-180k result ``names[c]`` of each of seeds
    0-4 as its claims result (each cell a distinct run: its own train.steps); a cell with
    fewer committed seeds declares those as its own (``[seeds] cells``), as a study would."""
    cells = "".join(f"[cells.{c}]\n\"train.steps\" = {i + 10}\n" for i, c in enumerate(names))
    have = {c: [k for k in range(5) if (LADDER / f"{n}-seed{k}.json").is_file()]
            for c, n in names.items()}
    own = "".join(f"{c} = {ks}\n" for c, ks in have.items() if ks != list(range(5)))
    p = tmp_path / "s.toml"
    p.write_text(f'[study]\nname = "a"\nbase = "{ROOT / "configs" / "tiny.toml"}"\n'
                 f'out = "out"\n{cells}[seeds]\nclaims = [0, 1, 2, 3, 4]\n'
                 + (f"[seeds.cells]\n{own}" if own else "") + eps)
    s = spec.load(p)
    for r in runner.claims_runs(s)[0]:
        f = LADDER / f"{names[r.cell]}-seed{r.seed}.json"
        if f.is_file():
            fin = json.loads(f.read_text())["final"]
            runner.write_json(r.result, {"key": r.key, "cell": r.cell, "seed": r.seed,
                                         "value": fin["val_loss"], "tokens": fin["tokens"],
                                         "params": fin["params"], "tokens_per_param": 1.0})
    return s


def test_report_of_share_and_slope_endpoints_reads_as_the_audit(tmp_path):
    """AdamW at opt-180k, its committed results as a study's: EF's share of the 2BW gap is
    70 % with Fieller's interval [38 %, 82 %], and "share ≥ 50 %" is not established; the
    gap's slope against log2 tokens over the token ladder is negative."""
    names = {"none": "adamw-async", "corr": "adamw-ef", "sync": "adamw-sync",
             "none5": "adamw-async-tpp5", "sync5": "adamw-sync-tpp5",
             "none80": "adamw-async-tpp80", "sync80": "adamw-sync-tpp80"}
    eps = """
[[endpoints]]
name = "half"
test = "share"
none = "none"
corr = "corr"
sync = "sync"
s = 0.5
primary = true
[[endpoints]]
name = "trend"
test = "slope"
pairs = [["none5", "sync5"], ["none", "sync"], ["none80", "sync80"]]
"""
    s = _ladder_as_study(tmp_path, names, eps)
    half, trend = report.judge(s, report.cell_values(s))
    sh = half["share"]
    assert (round(sh["lo"], 2), round(sh["estimate"], 2), round(sh["hi"], 2)) == (0.38, 0.70,
                                                                                  0.82)
    assert (round(half["estimate"], 3), round(half["lo"], 3)) == (0.048, -0.014)
    assert half["verdict"] == "not established" and half["label"].startswith("primary")
    assert trend["n"] == 9 and trend["hi"] < 0 and trend["verdict"] == "shrinks"
    md = report.tables(s, report.cell_values(s), {}, [half, trend], [])
    assert "- half: 70 % [38, 82]" in md  # percent, as every page prints a share


@pytest.mark.timeout(600)
@pytest.mark.parametrize("after_s", [1, 20])  # while the run starts up; while it trains
def test_the_deadline_stops_a_running_run_without_a_result_or_a_failure(tmp_path, after_s):
    s = dataclasses.replace(_study(tmp_path), cells={"a": {"train.steps": 100000}},
                            claims_seeds=(0,))
    runs, _ = runner.claims_runs(s)
    said = []
    t0 = time.time()
    out = runner.execute(s, runs, deadline=t0 + after_s, say=said.append)
    assert (out.trained, out.left, out.failed) == (0, 1, [])
    assert any(m.startswith("deadline reached") for m in said)
    assert not runs[0].result.exists()
    assert time.time() - t0 < 200


def _fake_selection(s, cell: str, loss_of) -> int:
    """Write every selection run of ``cell`` not yet on disk; returns how many were new."""
    new = 0
    for r in runner.selection_runs(s):
        if r.cell == cell and not r.result.is_file():
            _fake_result(s, r, loss_of(r.lr, r.seed))
            new += 1
    return new


def test_each_cell_has_its_own_grid_and_an_edge_widens_it_once(tmp_path):
    s = _study(tmp_path, extra="selection = [7, 8]\n[lr]\ngrid = [0.01, 0.02]\nextend = 1\n"
               "[lr.cells]\nb = [0.1, 0.2, 0.4]\n")
    assert runner.cell_grid(s, "a") == (0.01, 0.02) and runner.cell_grid(s, "b") == (0.1, 0.2,
                                                                                    0.4)

    # a's loss falls to the largest lr: one point beyond it (×2), then lr* is chosen there
    def falling(lr, seed):
        return 3.0 - lr + 0.001 * seed
    assert _fake_selection(s, "a", falling) == 4
    assert runner.cell_grid(s, "a") == (0.01, 0.02, 0.04)
    assert "a" not in runner.chosen_lrs(s)  # the new point is not run yet
    assert _fake_selection(s, "a", falling) == 2
    assert runner.cell_grid(s, "a") == (0.01, 0.02, 0.04)  # extend = 1: no second widening
    ch = runner.chosen_lrs(s)["a"]
    assert ch["lr"] == 0.04 and ch["grid"] == [0.01, 0.02, 0.04] and "edge" in ch["note"]

    # b's best lr is interior: no widening, chosen at once, no note
    def bowl(lr, seed):
        return (math.log2(lr / 0.2)) ** 2 + 0.01 * seed
    assert _fake_selection(s, "b", bowl) == 6
    assert runner.cell_grid(s, "b") == (0.1, 0.2, 0.4)
    assert runner.chosen_lrs(s)["b"]["lr"] == 0.2 and runner.chosen_lrs(s)["b"]["note"] == ""
    claims, waiting = runner.claims_runs(s)
    assert waiting == [] and {(r.cell, r.lr) for r in claims} == {("a", 0.04), ("b", 0.2)}


def test_the_low_edge_widens_downwards_at_the_grid_ratio(tmp_path):
    s = _study(tmp_path, extra="selection = [7, 8]\n[lr]\ngrid = [0.01, 0.03, 0.09]\n"
               "extend = 2\n")
    def rising(lr, seed):
        return 3.0 + lr
    _fake_selection(s, "a", rising)
    assert runner.cell_grid(s, "a") == (0.00333333, 0.01, 0.03, 0.09)
    _fake_selection(s, "a", rising)
    assert runner.cell_grid(s, "a")[0] == pytest.approx(0.01 / 9, rel=1e-5)
    _fake_selection(s, "a", rising)
    assert len(runner.cell_grid(s, "a")) == 5 and runner.chosen_lrs(s)["a"]["lr"] == min(
        runner.cell_grid(s, "a"))


def test_one_sided_endpoints_take_the_one_sided_p_and_their_own_direction(tmp_path):
    cells = "[cells.c]\n\"optimizer.name\" = \"muon\"\n"
    eps = _endpoints(*({"name": n, "test": "difference", "a": "a", "b": "c",
                        "alternative": alt}
                       for n, alt in (("two", "two-sided"), ("gt", "greater"), ("lt", "less"))))
    s = _study(tmp_path, extra=eps, cells=cells)
    s = dataclasses.replace(s, claims_seeds=(0, 1, 2, 3))
    vals = {"a": [3.0, 3.1, 3.3, 3.2], "b": [3.0] * 4, "c": [2.9, 2.95, 3.1, 3.05]}
    for r in runner.claims_runs(s)[0]:
        _fake_result(s, r, vals[r.cell][r.seed])
    rows = {r["name"]: r for r in report.judge(s, report.cell_values(s))}
    two, gt, lt = rows["two"], rows["gt"], rows["lt"]
    assert gt["p"] == pytest.approx(two["p"] / 2) and lt["p"] == pytest.approx(1 - two["p"] / 2)
    assert gt["verdict"] == "a > c" and lt["verdict"] == "not established"
    # the one-sided test prints the 90 % interval: its lower end is the one-sided 95 % bound
    assert gt["interval_level"] == pytest.approx(0.9) and gt["lo"] > two["lo"]
    assert gt["estimate"] == two["estimate"]


def test_a_tied_option_moves_with_the_cells_lr(tmp_path):
    s = _study(tmp_path, extra="selection = [7, 8]\n[lr]\ngrid = [0.04, 0.08]\n"
               "[lr.tied.a]\n\"optimizer.adamw_lr\" = 0.15\n")
    sel = {(r.cell, r.lr, r.seed): r for r in runner.selection_runs(s)}
    a = dict(sel[("a", 0.08, 7)].options)
    assert a["optimizer.lr"] == 0.08 and a["optimizer.adamw_lr"] == 0.012  # not 0.0120…02
    assert "optimizer.adamw_lr" not in dict(sel[("b", 0.08, 7)].options)
    assert sel[("a", 0.08, 7)].key != sel[("b", 0.08, 7)].key
    cmd = runner.command(s, sel[("a", 0.04, 8)], resume=False)
    assert cmd[cmd.index("--optimizer.adamw_lr") + 1] == "0.006"


def test_a_matched_cell_runs_at_the_lr_chosen_for_another(tmp_path):
    s = _study(tmp_path, extra="selection = [7, 8]\n[lr]\ngrid = [0.01, 0.02, 0.04]\n"
               "[lr.same]\nm = \"a\"\n", cells="[cells.m]\n\"optimizer.name\" = \"muon\"\n")
    assert {r.cell for r in runner.selection_runs(s)} == {"a", "b"}  # m has none of its own
    assert runner.claims_runs(s)[1] == ["a", "b", "m"]
    _fake_selection(s, "a", lambda lr, seed: abs(lr - 0.02) + seed)
    lrs = runner.chosen_lrs(s)
    assert lrs["m"]["lr"] == lrs["a"]["lr"] == 0.02 and "matched" in lrs["m"]["note"]
    claims, waiting = runner.claims_runs(s)
    assert waiting == ["b"] and {(r.cell, r.lr) for r in claims} == {("a", 0.02), ("m", 0.02)}


def test_a_per_seed_slope_reads_protocol_v2s_p5_from_the_token_ladder(tmp_path):
    """P5 of protocol v2 (AdamW's 2BW gap over log2 tokens per parameter, a slope per seed, a
    one-sided one-sample t) as a study endpoint over the committed opt-180k token ladder: the
    same estimate and p as the ladder's own reading (asyncpp.study.ladder.primary)."""
    from asyncpp.study.ladder import primary, report_common
    ks = (5, 10, 20, 40, 80)
    names = {f"{m}{k}": f"adamw-{m}" + ("" if k == 20 else f"-tpp{k}")
             for k in ks for m in ("async", "sync")}
    pairs = ", ".join(f'["async{k}", "sync{k}"]' for k in ks)
    eps = (f'[[endpoints]]\nname = "P5"\ntest = "slope"\npairs = [{pairs}]\nper_seed = true\n'
           'alternative = "less"\n[[endpoints]]\nname = "pooled"\ntest = "slope"\n'
           f'pairs = [{pairs}]\n')
    s = _ladder_as_study(tmp_path, names, eps)
    rows = {r["name"]: r for r in report.judge(s, report.cell_values(s))}
    (p5,) = [q for q in primary.family(report_common.load_results(LADDER)) if q.id == "P5"]
    assert rows["P5"]["n"] == p5.n == 2
    # the study's x is log2 of the tokens trained, the ladder's log2 of the nominal k: steps are
    # rounded to whole steps, so the slopes agree to 1e-4, not bit for bit
    assert rows["P5"]["estimate"] == pytest.approx(p5.estimate, abs=1e-4)
    assert rows["P5"]["p"] == pytest.approx(p5.p, abs=1e-4)
    assert rows["P5"]["verdict"] == "not established"  # p = 0.051 on 2 seeds
    # pooling the 13 gaps as if independent makes the same data look decisive
    assert rows["pooled"]["n"] == 13 and rows["pooled"]["verdict"] == "shrinks"
