"""Checkpoints resumed in another layout, on real runs: a 2-rank torchrun 2BW + Muon + EF run
(4 layers) resumed from its step-3 checkpoint in one process (``--simulate`` at P = 2, and plain
P = 1) and under torchrun at P = 4 (stopped at step 5 and finished at P = 2); a one-process run
resumed under torchrun. Without tied embeddings each continuation's per-step training losses
and final weights equal the uninterrupted run's (which a resume in the same layout reproduces
bit for bit) exactly: the state moves by full-model names without arithmetic (the queued 2BW
update is applied with the simulation's own code), and every layout here computes a step with
the same operations on the same operands (dp = 1; the global clipping norm is summed over two
stages or one, the same float). With a tied embedding/head one process sums the matrix's
gradient over the microbatches in another order than the pipeline (each stage's sum, then the
all-reduce of the two), so a 2-rank run resumed in one process agrees to float32 rounding only.
Refused changes (PipeDream at another P or backend, per-stage clipping at another P, update
tracking) exit 2 with one line and leave the run folder as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from asyncpp.pipeline.launch import RankTimeout, run_ranks
from asyncpp.train.config import from_dict
from asyncpp.train.layouts import Layout, change_error, parameter_delays

ARGS = ["--model.name", "tiny", "--model.n_layers", "4", "--data.max_documents", "60",
        "--data.seq_len", "16", "--train.steps", "6", "--train.batch_size", "4",
        "--train.eval_every", "3", "--train.eval_batches", "1", "--train.checkpoint_every", "3",
        "--model.tie_embeddings", "false", "--optimizer.name", "muon", "--optimizer.lr", "0.02",
        "--optimizer.adamw_lr", "0.006", "--delay.correction", "ef", "--pipeline.schedule",
        "2bw", "--pipeline.stages", "2", "--pipeline.microbatches", "4", "--run.threads", "1",
        "--log.progress", "false", "--log.plot", "false", "--log.tensorboard", "off"]


def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def train(root: Path, run: str, *argv: str, ranks: int = 1) -> list[tuple[int, str]]:
    """``asyncpp-train`` on ``ranks`` processes (one: a plain process; more: the ranks of a
    local process group, as torchrun starts them); (exit status, output) of each."""
    cmd = [sys.executable, "-m", "asyncpp.train.cli", *argv, "--run.dir", str(root / run)]
    env = _env(root / "cache")
    if ranks == 1:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        return [(done.returncode, done.stdout + done.stderr)]
    logs = root / "logs" / run
    try:
        codes = run_ranks(cmd, ranks, logs, deadline=240, env=env, log_name="rank{rank}.log")
    except RankTimeout as e:
        pytest.fail(str(e))
    return [(rc, (logs / f"rank{r}.log").read_text()) for r, rc in enumerate(codes)]


def ok(out: list[tuple[int, str]]) -> str:
    for r, (rc, text) in enumerate(out):
        assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
    return out[0][1]


def losses(root: Path, run: str) -> dict[int, float]:
    rows = [json.loads(line) for line in (root / run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows}


def fork(root: Path, src: str, dst: str, step: int = 3) -> None:
    """Copy run ``src`` as it was at its checkpoint of ``step`` (newer ones left out)."""
    shutil.copytree(root / src, root / dst)
    for p in (root / dst / "checkpoints").iterdir():
        if int(p.name[5:13]) > step:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def weights(root: Path, run: str) -> dict:
    from asyncpp.train.restore import restore_run

    return restore_run(root / run).model.state_dict()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reshard")
    ok(train(root, "dist", *ARGS, ranks=2))
    for name in ("dist-sim", "dist-p1", "dist-p4"):
        fork(root, "dist", name)
    said = {}
    said["sim"] = ok(train(root, "dist-sim", *ARGS, "--resume", "--simulate"))
    ok(train(root, "dist-p1", *ARGS, "--resume", "--pipeline.stages", "1"))
    ok(train(root, "dist-p4", *ARGS, "--resume", "--pipeline.stages", "4",
             "--train.stop_after", "2", ranks=4))
    said["p4"] = ok(train(root, "dist-p4", *ARGS, "--resume", ranks=2))
    ok(train(root, "one", *ARGS, "--simulate"))
    fork(root, "one", "one-dist")
    said["dist"] = ok(train(root, "one-dist", *ARGS, "--resume", ranks=2))
    tied = [*ARGS, "--model.tie_embeddings", "true"]
    ok(train(root, "tied", *tied, ranks=2))
    fork(root, "tied", "tied-sim")
    ok(train(root, "tied-sim", *tied, "--resume", "--simulate"))
    return {"root": root, "said": said}


@pytest.mark.multiprocess
def test_a_two_rank_checkpoint_resumes_exactly_in_one_process_and_at_four_stages(runs):
    root = runs["root"]
    whole, final = losses(root, "dist"), weights(root, "dist")
    assert sorted(whole) == [1, 2, 3, 4, 5, 6]
    for run in ("dist-sim", "dist-p1", "dist-p4"):
        assert losses(root, run) == whole, run
        got = weights(root, run)
        assert got.keys() == final.keys() and all(got[k].equal(final[k]) for k in final), run
    assert ("the checkpoint of step 3 was written by a torchrun launch of 2 ranks (P=2); "
            "resuming it in one process at P=2") in runs["said"]["sim"]
    assert ("the checkpoint of step 5 was written by a torchrun launch of 4 ranks (P=4); "
            "resuming it in a torchrun launch of 2 ranks (P=2)") in runs["said"]["p4"]
    # retention removed the P=2 checkpoint of step 3 with its shards (keep 2: steps 5, 6)
    kept = sorted(p.name for p in (root / "dist-p4" / "checkpoints").iterdir())
    assert kept == ["step-00000005.pt", "step-00000005.shards", "step-00000006.pt",
                    "step-00000006.shards"], kept
    assert len(list((root / "dist-p4" / "checkpoints" / "step-00000005.shards").iterdir())) == 4


@pytest.mark.multiprocess
def test_a_one_process_checkpoint_resumes_exactly_under_torchrun(runs):
    root = runs["root"]
    whole, final = losses(root, "one"), weights(root, "one")
    assert losses(root, "one-dist") == whole
    got = weights(root, "one-dist")
    assert all(got[k].equal(final[k]) for k in final)
    assert "written by one process at P=2; resuming it in a torchrun launch of 2 ranks" \
        in runs["said"]["dist"]


@pytest.mark.multiprocess
def test_a_tied_embedding_resumes_in_one_process_to_float32_rounding(runs):
    root = runs["root"]
    whole, got = losses(root, "tied"), losses(root, "tied-sim")
    assert sorted(got) == sorted(whole)
    # a few float32 roundings of the tied gradient's sum per step, over three steps
    assert all(got[t] == pytest.approx(whole[t], rel=1e-6) for t in whole), (got, whole)
    a, b = weights(root, "tied"), weights(root, "tied-sim")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-6, worst


@pytest.mark.multiprocess
def test_export_and_eval_read_a_run_resumed_across_layouts(runs, monkeypatch, capsys):
    from safetensors.torch import load_file

    from asyncpp.train import eval_cli, export_cli

    root = runs["root"]
    monkeypatch.setenv("ASYNCPP_CACHE", str(root / "cache"))
    for run in ("dist", "dist-p4"):
        assert export_cli.main([str(root / run), "--out", str(root / f"hf-{run}")]) == 0
    a = load_file(root / "hf-dist" / "model.safetensors")
    b = load_file(root / "hf-dist-p4" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    capsys.readouterr()
    assert eval_cli.main([str(root / "dist-p4")]) == 0
    said = capsys.readouterr().out
    assert said.startswith("val loss ") and said.count("\n") == 1, said


@pytest.mark.multiprocess
def test_a_stopped_run_exports_the_same_model_whichever_backend_ran_it(runs):
    """At step 3 one process still queues the update of step 2's gradient that the pipeline
    has applied; export and eval apply it as a drain would, so both give the same model."""
    root = runs["root"]
    fork(root, "dist", "dist-at3")
    fork(root, "one", "one-at3")
    a, b = weights(root, "dist-at3"), weights(root, "one-at3")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def _snapshot(folder: Path) -> dict[str, tuple]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


REFUSED = [
    pytest.param(["--pipeline.schedule", "pipedream"],
                 ["--pipeline.stages", "4"], 1,
                 "pipeline.schedule='pipedream' delays stage s of P by P−1−s updates",
                 id="pipedream-P"),
    pytest.param(["--pipeline.schedule", "pipedream"], [], 2,
                 "pipedream keeps one weight version per microbatch in flight",
                 id="pipedream-torchrun", marks=pytest.mark.multiprocess),
    pytest.param(["--train.clip_scope", "stage"], ["--pipeline.stages", "1"], 1,
                 "train.clip_scope='stage' clips each stage by its own gradient norm",
                 id="stage-clip"),
    pytest.param(["--delay.track_updates", "true"], ["--pipeline.stages", "1"], 1,
                 "delay.track_updates keeps its drift statistics per stage optimizer",
                 id="tracking"),
]


@pytest.mark.parametrize("setting,change,ranks,reason", REFUSED)
def test_a_change_of_layout_that_changes_the_algorithm_is_refused_with_nothing_written(
        tmp_path, monkeypatch, capsys, setting, change, ranks, reason):
    from asyncpp.train import cli

    base = [*ARGS, *setting, "--train.steps", "4", "--train.eval_every", "0",
            "--run.dir", str(tmp_path / "run")]
    monkeypatch.setenv("ASYNCPP_CACHE", str(tmp_path / "cache"))
    assert cli.main([*base, "--simulate", "--train.stop_after", "1"]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path / "run")
    if ranks == 1:  # in this process: the refusal comes before any training
        code = cli.main([*base, "--resume", *change])
        out = [(code, capsys.readouterr().err)]
    else:
        out = train(tmp_path, "run", *base, "--resume", *change, ranks=ranks)
    for rc, text in out:
        errors = [ln for ln in text.splitlines() if "error:" in ln]
        assert rc == 2 and len(errors) == 1 and "Traceback" not in text, text[-3000:]
        assert reason in errors[0] and "resume it in one process with --pipeline.stages 2" \
            in errors[0], errors[0]
    assert _snapshot(tmp_path / "run") == before


def test_another_microbatch_count_resumes_to_float32_rounding(tmp_path, monkeypatch, capsys):
    """P = 2, m = 2 resumed at P = 1, m = 4: the same mean gradient over the same batch, its sum
    rounded in another order (float32: a few ulps per step)."""
    from asyncpp.train import cli

    monkeypatch.setenv("ASYNCPP_CACHE", str(tmp_path / "cache"))
    base = [*ARGS, "--pipeline.microbatches", "2", "--train.eval_every", "0", "--simulate"]
    assert cli.main([*base, "--run.dir", str(tmp_path / "whole")]) == 0
    fork(tmp_path, "whole", "part")
    capsys.readouterr()
    assert cli.main([*base, "--resume", "--pipeline.stages", "1", "--pipeline.microbatches", "4",
                     "--run.dir", str(tmp_path / "part")]) == 0
    assert "at P=2 with m=2; resuming it in one process at P=1 with m=4" in \
        capsys.readouterr().err
    whole, part = losses(tmp_path, "whole"), losses(tmp_path, "part")
    assert sorted(part) == sorted(whole) == [1, 2, 3, 4, 5, 6]
    assert all(part[t] == pytest.approx(whole[t], rel=1e-6) for t in whole), (part, whole)


# -- the rule, without running anything ---------------------------------------------------------
def _cfg(schedule: str, layers: int = 4, **train) -> object:
    return from_dict({"model": {"name": "tiny", "n_layers": layers, "tie_embeddings": False},
                      "pipeline": {"schedule": schedule, "stages": 2, "microbatches": 4},
                      "train": train})


def test_parameter_delays_follow_the_stage_that_owns_each_layer():
    assert set(parameter_delays(_cfg("2bw"), 4).values()) == {1}
    assert set(parameter_delays(_cfg("1f1b"), 1).values()) == {0}
    assert parameter_delays(_cfg("pipedream"), 4)["layers.1"] == 2
    assert parameter_delays(_cfg("wpipe", 6), 2)["layers.3"] == 0
    assert parameter_delays(_cfg("wpipe", 6), 4)["layers.3"] == 1


def test_another_microbatch_count_is_refused_where_a_microbatch_is_more_than_a_sum_part():
    def m(cfg, k):
        return from_dict({**cfg.to_dict(), "pipeline": {**cfg.to_dict()["pipeline"],
                                                        "microbatches": k}})

    two = _cfg("2bw")
    assert change_error(m(two, 2), two, Layout(2, 2), Layout(4, 4), 3) is None
    pd = _cfg("pipedream")
    assert "pipedream makes one update per microbatch" in change_error(
        m(pd, 2), pd, Layout(1, 2), Layout(1, 2), 3)
    moe = from_dict({"model": {"name": "moe-tiny"}, "pipeline": {"schedule": "2bw", "stages": 2,
                                                                 "microbatches": 4}})
    got = change_error(m(moe, 2), moe, Layout(1, 2), Layout(1, 2), 3)
    assert "load-balancing loss per microbatch" in got and "--pipeline.microbatches 2" in got


@pytest.mark.parametrize("schedule,layers,old,new,found", [
    ("2bw", 4, Layout(2, 2), Layout(1, 1), None),
    ("2bw", 4, Layout(1, 2), Layout(4, 4), None),
    ("gpipe", 4, Layout(4, 2, 2), Layout(1, 1), None),
    ("wpipe", 4, Layout(2, 2), Layout(4, 4), None),
    ("wpipe", 6, Layout(2, 2), Layout(4, 4), "the delay of layers.3 is 0 at P=2 but 1 at P=4"),
    ("pipedream", 4, Layout(2, 2), Layout(2, 2), None),
    ("pipedream", 4, Layout(2, 2), Layout(1, 2), "pipedream keeps one weight version"),
])
def test_change_error_allows_exactly_the_changes_that_keep_every_delay(schedule, layers, old,
                                                                        new, found):
    cfg = _cfg(schedule, layers)
    got = change_error(cfg, cfg, old, new, 3)
    if found is None:
        assert got is None
    else:
        assert found in got and got.startswith("the checkpoint of step 3 was written by "), got
        assert "\n" not in got


def test_a_model_from_outside_resumes_in_its_own_layout_only():
    folder = Path(__file__).resolve().parents[1] / "examples" / "byom" / "gpt2-tiny"
    cfg = from_dict({"model": {"hf": str(folder)},
                     "pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2}})
    assert change_error(cfg, cfg, Layout(2, 2), Layout(2, 2), 3) is None
    got = change_error(cfg, cfg, Layout(2, 2), Layout(1, 2), 3)
    assert "a model from model.hf is split by parameter counts" in got, got
    assert got.endswith("resume it under torchrun --nproc-per-node 2 with --pipeline.stages 2")
