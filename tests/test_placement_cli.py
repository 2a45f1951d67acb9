"""Several stages per rank through ``asyncpp-train`` under real ``torchrun --standalone`` (2
gloo ranks): WPipe's 4 partitions on 2 ranks (``pipeline.placement`` auto → paired: rank d runs
partitions d and 2 + d) and looped 2BW (stage s on rank s mod 2), against the one-process
``--simulate`` run of the same configuration; a stop-and-resume equal to the straight run;
one clear line and exit status 2 for a placement that cannot work.

What is exact (measured): every step's training loss and the learning rates are bit-equal to
the simulation's; the gradient norm equals it up to the order of a float64 sum (the
simulation adds the stages' squared norms in stage order, the ranks add theirs per rank
first); the validation loss up to float32 rounding (the pipeline evaluates microbatch by
microbatch, the simulation the whole batch). A run stopped after step 3 and resumed equals
the straight run bit for bit: metrics and every live weight version of every stage.
``train.log_every = 2``: with several stages per rank the trainer streams calls of log_every
steps, so these runs cross call boundaries inside a segment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

BASE = ["--model.name", "tiny", "--model.n_layers", "4", "--model.tie_embeddings", "false",
        "--data.max_documents", "60", "--data.seq_len", "16", "--train.steps", "6",
        "--train.batch_size", "4", "--train.eval_every", "3", "--train.eval_batches", "1",
        "--train.log_every", "2", "--train.clip_scope", "stage",
        "--optimizer.name", "muon", "--optimizer.lr", "0.02", "--optimizer.adamw_lr", "0.006",
        "--pipeline.stages", "4", "--pipeline.microbatches", "4", "--run.threads", "1",
        "--log.progress", "false", "--log.plot", "false", "--log.tensorboard", "off"]
WPIPE = [*BASE, "--pipeline.schedule", "wpipe"]
LOOPED = [*BASE, "--pipeline.schedule", "2bw", "--delay.correction", "ef"]
VAL_TOL = 2e-6  # float32 losses of ~6: a few ulp (measured ≤ 3.6e-7)


def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def torchrun(argv: list[str], cache: Path, timeout: float = 120.0):
    """``torchrun --standalone --nproc-per-node 2 -m asyncpp.train.cli ARGV``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "asyncpp.train.cli", *argv]
    try:
        return subprocess.run(cmd, env=_env(cache), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish within {timeout} s: {e.stdout} {e.stderr}")


def simulate(argv: list[str], run_dir: Path, cache: Path) -> None:
    """The same configuration in this process (``--simulate``)."""
    import torch

    from asyncpp.train import cli

    threads = torch.get_num_threads()
    try:
        assert cli.main([*argv, "--simulate", "--run.dir", str(run_dir), "--data.cache_dir",
                         str(cache)]) == 0
    finally:
        torch.set_num_threads(threads)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _ok(proc, what: str) -> None:
    assert proc.returncode == 0, f"{what} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("placement")
    cache = root / "cache"
    simulate(WPIPE, root / "wpipe-sim", cache)  # also trains and caches the tokenizer
    simulate(LOOPED, root / "looped-sim", cache)
    _ok(torchrun([*WPIPE, "--run.dir", str(root / "wpipe")], cache), "wpipe on 2 ranks")
    stop = torchrun([*WPIPE, "--run.dir", str(root / "wpipe-resumed"), "--train.stop_after",
                     "3"], cache)
    _ok(stop, "the stopped wpipe run")
    resume = torchrun([*WPIPE, "--run.dir", str(root / "wpipe-resumed"), "--resume"], cache)
    _ok(resume, "the resumed wpipe run")
    _ok(torchrun([*LOOPED, "--run.dir", str(root / "looped"), "--train.checkpoint_every",
                  "3"], cache), "looped 2bw on 2 ranks")
    return {"root": root, "cache": cache, "stop": stop, "resume": resume}


def _same_as_simulation(sim: list[dict], dist: list[dict]) -> None:
    assert [r["step"] for r in dist] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(sim, dist, strict=True):
        assert a["step"] == b["step"] and a["lr"] == b["lr"] and a["delay"] == b["delay"]
        assert a["train_loss"] == b["train_loss"], (a, b)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-14, abs=0)
        assert ("val_loss" in a) == ("val_loss" in b)
        if "val_loss" in a:
            assert abs(a["val_loss"] - b["val_loss"]) <= VAL_TOL, (a, b)
    assert dist[-1]["train_loss"] < dist[0]["train_loss"]


def test_wpipe_four_partitions_on_two_ranks_equal_the_simulation(runs):
    import torch

    root = runs["root"]
    _same_as_simulation(records(root / "wpipe-sim"), records(root / "wpipe"))
    summary = json.loads((root / "wpipe" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["stages"] == 4
    assert summary["placement"] == "paired" and summary["rank_stages"] == [[0, 2], [1, 3]]
    assert sorted((d["stage"], d["rank"]) for d in summary["stage_times"]) == \
        [(0, 0), (1, 1), (2, 0), (3, 1)]
    # each rank's shard holds its two partitions: G0 (τ = 1) two versions, G1 (τ = 0) one
    shards = root / "wpipe" / "checkpoints" / "step-00000006.shards"
    for r in range(2):
        ex = torch.load(shards / f"rank-{r:05d}.pt", weights_only=True)["executor"]
        assert ex["stage"] == [r, r + 2] and ex["next_step"] == 6
        assert {s: len(st["versions"]) for s, st in ex["stages"].items()} == {r: 2, r + 2: 1}
    manifest = torch.load(root / "wpipe" / "checkpoints" / "step-00000006.pt",
                          weights_only=True)
    assert manifest["distributed"]["placement"] == "paired"


def test_wpipe_stopped_and_resumed_equals_the_straight_run_bit_for_bit(runs):
    import torch

    root = runs["root"]
    assert "stopped at step 3" in runs["stop"].stderr
    # rank 0 says where the stages run
    assert "; 2 ranks, paired placement: rank r runs stages [[0, 2], [1, 3]][r]" \
        in runs["stop"].stderr, runs["stop"].stderr[-2000:]
    assert "resumed from step 3" in runs["resume"].stderr
    straight, resumed = records(root / "wpipe"), records(root / "wpipe-resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(straight, resumed, strict=True):
        for key in ("train_loss", "grad_norm", "val_loss", "lr", "delay"):
            assert a.get(key) == b.get(key), (key, a, b)
    rel = Path("checkpoints") / "step-00000006.shards"
    for r in range(2):
        ea = torch.load(root / "wpipe" / rel / f"rank-{r:05d}.pt", weights_only=True)
        eb = torch.load(root / "wpipe-resumed" / rel / f"rank-{r:05d}.pt", weights_only=True)
        for s, st in ea["executor"]["stages"].items():
            other = eb["executor"]["stages"][s]
            assert sorted(st["versions"]) == sorted(other["versions"])
            for v, ws in st["versions"].items():
                for n, t in ws.items():
                    assert torch.equal(t, other["versions"][v][n]), (r, s, v, n)
        assert ea["sampler"] == eb["sampler"]


def test_looped_2bw_equals_the_simulation_and_resumes_in_one_process(runs, tmp_path):
    import shutil

    root, cache = runs["root"], runs["cache"]
    sim = records(root / "looped-sim")
    _same_as_simulation(sim, records(root / "looped"))
    summary = json.loads((root / "looped" / "summary.json").read_text())
    assert summary["placement"] == "looped" and summary["rank_stages"] == [[0, 2], [1, 3]]
    # its step-3 checkpoint (two ranks, two stages each) resumes in one process, by names
    run = tmp_path / "looped"
    shutil.copytree(root / "looped", run)
    ck = run / "checkpoints"
    (ck / "step-00000006.pt").unlink()
    shutil.rmtree(ck / "step-00000006.shards")
    simulate([*LOOPED, "--resume"], run, cache)
    for a, b in zip(sim, records(run), strict=True):
        assert a["train_loss"] == b["train_loss"], (a, b)
    assert records(run)[-1]["val_loss"] == sim[-1]["val_loss"]


# -- placements that cannot work ---------------------------------------------------------------
BAD = [
    (["--pipeline.schedule", "1f1b", "--pipeline.stages", "3"],
     "the world size 2 is not divisible by pipeline.stages=3, nor is 3 a multiple of it; "
     "launch a multiple of 3 processes"),
    (["--pipeline.schedule", "wpipe", "--pipeline.stages", "3"],
     "wpipe splits the partitions into two groups of equal size, so it needs an even number"),
    (["--pipeline.schedule", "1f1b", "--pipeline.placement", "paired"],
     "pipeline.placement='paired' places the stages two per rank as wpipe and zb-v do, but "
     "pipeline.schedule='1f1b' has no such pairing"),
    (["--pipeline.schedule", "wpipe", "--pipeline.stages", "2", "--pipeline.placement",
      "paired"], "runs the 2 stages two per rank on 1 rank, but torchrun launched 2; launch 1"),
    (["--pipeline.schedule", "1f1b", "--pipeline.stages", "3", "--pipeline.placement",
      "looped"], "pipeline.stages=3 must be a multiple of the world size 2"),
    (["--pipeline.schedule", "1f1b", "--pipeline.placement", "one-per-rank",
      "--model.n_layers", "4", "--pipeline.stages", "4"],
     "the world size 2 is not divisible by pipeline.stages=4 (pipeline.placement=one-per-rank); "
     "launch a multiple of 4 processes (one stage per rank), or 2 processes for several stages "
     "per rank (--pipeline.placement looped)"),
    (["--pipeline.schedule", "1f1b", "--model.n_layers", "4", "--pipeline.stages", "4",
      "--train.clip_scope", "global"],
     "4 stages on 2 ranks (pipeline.placement=looped) must clip each stage by its own "
     "gradient norm"),
    (["--pipeline.schedule", "1f1b", "--model.n_layers", "4", "--pipeline.stages", "4",
      "--model.tie_embeddings", "true"],
     "cannot hold the embedding/head tied between the first and the last stage; set "
     "--model.tie_embeddings false"),
]


@pytest.mark.parametrize("extra, message", BAD)
def test_a_placement_that_cannot_work_is_one_line_and_exit_2(extra, message, monkeypatch,
                                                              capsys, tmp_path):
    """Decided from the configuration and WORLD_SIZE, before any process group or file."""
    from asyncpp.train import cli

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = ["--model.name", "tiny", "--model.n_layers", "4", "--model.tie_embeddings",
            "false", "--train.batch_size",
            "4", "--train.clip_scope", "stage", "--pipeline.microbatches", "4",
            "--pipeline.stages", "2", "--run.dir", str(tmp_path / "run"), *extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("asyncpp-train: error: "), err
    assert message in err, err
    assert not (tmp_path / "run").exists()


def test_a_bad_placement_under_torchrun_stops_every_rank_with_exit_2(tmp_path):
    proc = torchrun([*BASE, "--pipeline.schedule", "1f1b", "--pipeline.stages", "3",
                     "--run.dir", str(tmp_path / "run")], tmp_path / "cache", timeout=90)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    line = ("asyncpp-train: error: the world size 2 is not divisible by pipeline.stages=3, nor "
            "is 3 a multiple of it; launch a multiple of 3 processes (one stage per rank)\n")
    lines = [ln + "\n" for ln in out.splitlines() if ln.startswith("asyncpp-train: error:")]
    # one line from each rank that got to say it (torchrun stops the others once one exits)
    assert 1 <= len(lines) <= 2 and set(lines) == {line}, out[-3000:]
    # torchrun prints its own ChildFailedError traceback; none runs through asyncpp's code
    assert "site-packages/asyncpp" not in out and "src/asyncpp" not in out, out[-3000:]
    assert "exitcode  : 2" in out, out[-3000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("schedule, P, world", [("wpipe", 4, 2), ("wpipe", 8, 4),
                                                ("zb-v", 4, 2), ("zb-v", 6, 3),
                                                ("1f1b", 6, 2), ("2bw", 8, 4),
                                                ("2bw", 4, 4), ("gpipe", 2, 4)])
def test_the_placement_is_the_libraries_own(schedule, P, world):
    """auto: the schedule's own pairing (``default_devices``) on P/2 ranks, a looped placement
    (``looped_devices``) where P is a multiple of the world, else one stage per rank."""
    from asyncpp.pipeline import build, default_devices, looped_devices
    from asyncpp.train.config import from_dict, resolve_placement

    cfg = from_dict({"model": {"name": "tiny", "n_layers": 8, "tie_embeddings": False},
                     "train": {"clip_scope": "stage"},
                     "pipeline": {"schedule": schedule, "stages": P,
                                  "microbatches": max(1, P - 1)}})
    got = resolve_placement(cfg, world)
    ranks = [list(d) for d in got.ranks]
    if world % P == 0:
        assert got.name == "one-per-rank" and ranks == [[s] for s in range(P)]
        assert got.dp == world // P
    elif 2 * world == P and schedule in ("wpipe", "zb-v"):
        assert got.name == "paired" and ranks == default_devices(build(schedule, P, P))
    else:
        assert got.name == "looped" and ranks == looped_devices(P, world)


def test_sigterm_with_several_stages_per_rank_stops_at_a_call_boundary(runs, tmp_path):
    """A stop needs no cut in a rank's merged program: both ranks end the call of
    ``train.log_every`` steps in progress, checkpoint the same step and exit 143; resumed, the
    run equals the one-process simulation step for step."""
    import re
    import signal
    import time

    steps, every = 80, 4
    argv = [*WPIPE, "--train.steps", str(steps), "--train.log_every", str(every),
            "--train.eval_every", "0", "--train.final_eval", "sample",
            "--data.cache_dir", str(runs["cache"])]
    run, log = tmp_path / "run", tmp_path / "stopped.log"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "--monitor-interval", "0.1", "-m", "asyncpp.train.cli", *argv,
           "--run.dir", str(run)]
    with open(log, "w") as out:
        tr = subprocess.Popen(cmd, env=_env(runs["cache"]), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not ((run / "metrics.jsonl").is_file() and len(records(run)) >= every):
            assert tr.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
        tr.send_signal(signal.SIGTERM)  # torchrun forwards it to both workers
        tr.wait(timeout=60)
    text = log.read_text()
    stopped = dict(re.findall(r"rank (\d): interrupted; checkpoint written at step (\d+) .*"
                              r"exit status 143", text))
    assert sorted(stopped) == ["0", "1"], text[-3000:]
    k = int(stopped["0"])
    assert stopped["1"] == stopped["0"] and k % every == 0 and every <= k < steps, stopped
    resume = torchrun([*argv, "--run.dir", str(run), "--resume"], runs["cache"])
    _ok(resume, "the resumed run")
    simulate(argv, tmp_path / "sim", runs["cache"])
    got, want = records(run), records(tmp_path / "sim")
    assert [r["step"] for r in got] == list(range(1, steps + 1))
    assert [r["train_loss"] for r in got] == [r["train_loss"] for r in want]
