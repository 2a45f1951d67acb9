"""``asyncpp-train`` with WPipe and with the Nesterov delay correction: the streaming
pipeline under torchrun (gloo ranks) against the single-process ``--simulate`` run of the
same configuration (per-step train/validation losses and gradient norms, fp32 to a few ulp),
and a resume from a checkpoint continuing bit-identically (WPipe's second group holds one
weight version, its first group two)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from asyncpp.pipeline.launch import RankTimeout, run_ranks

TOL = 5e-6
BASE = ["--model.name", "small", "--model.tie_embeddings", "false",
        "--data.max_documents", "60", "--data.seq_len", "16", "--train.steps", "6",
        "--train.batch_size", "4", "--train.eval_every", "3", "--train.eval_batches", "1",
        "--train.checkpoint_every", "3", "--run.threads", "1", "--log.progress", "false",
        "--log.plot", "false", "--log.tensorboard", "off"]
CASES = {
    # WPipe on 4 partitions (2 devices' worth), Muon + the Nesterov correction
    "wpipe_muon_nesterov": (["--optimizer.name", "muon", "--optimizer.lr", "0.02",
                             "--optimizer.adamw_lr", "0.006", "--delay.correction", "nesterov",
                             "--pipeline.schedule", "wpipe", "--pipeline.stages", "4",
                             "--pipeline.microbatches", "4"], 4),
    # the Nesterov correction with PipeDream's per-stage delays, AdamW
    "pipedream_adamw_nesterov": (["--optimizer.name", "adamw", "--optimizer.lr", "0.003",
                                  "--delay.correction", "nesterov", "--delay.nesterov_beta",
                                  "0.9", "--pipeline.schedule", "pipedream",
                                  "--pipeline.stages", "2", "--pipeline.microbatches", "2"], 2),
}


def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def launch(argv, nprocs, logdir, cache, deadline=120.0):
    try:
        codes = run_ranks([sys.executable, "-m", "asyncpp.train.cli", *argv], nprocs, logdir,
                          deadline=deadline, env=_env(cache), log_name="rank{rank}.log")
    except RankTimeout as e:
        pytest.fail(str(e))
    return [(rc, (logdir / f"rank{r}.log").read_text()) for r, rc in enumerate(codes)]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    import torch

    from asyncpp.train import cli

    extra, nprocs = CASES[request.param]
    args = [*BASE, *extra]
    root = tmp_path_factory.mktemp(request.param)
    cache = root / "cache"
    threads = torch.get_num_threads()
    try:
        assert cli.main([*args, "--simulate", "--data.cache_dir", str(cache),
                         "--run.dir", str(root / "sim")]) == 0
    finally:
        torch.set_num_threads(threads)
    for r, (rc, out) in enumerate(launch([*args, "--run.dir", str(root / "dist")], nprocs,
                                         root / "logs", cache)):
        assert rc == 0, f"rank {r} failed:\n{out[-3000:]}"
    shutil.copytree(root / "dist", root / "resumed")
    ck = root / "resumed" / "checkpoints"
    (ck / "step-00000006.pt").unlink()
    shutil.rmtree(ck / "step-00000006.shards")
    for r, (rc, out) in enumerate(launch([*args, "--run.dir", str(root / "resumed"),
                                          "--resume"], nprocs, root / "logs-resume", cache)):
        assert rc == 0, f"rank {r} failed on resume:\n{out[-3000:]}"
    return request.param, root


@pytest.mark.multiprocess
def test_streaming_pipeline_equals_the_simulation_and_resumes(case):
    name, root = case
    sim, dist = records(root / "sim"), records(root / "dist")
    assert [r["step"] for r in dist] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(sim, dist, strict=True):
        assert a["step"] == b["step"] and a["delay"] == b["delay"]
        for key in ("train_loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:
                assert math.isfinite(b[key])
                assert abs(a[key] - b[key]) <= TOL * max(1.0, abs(a[key])), (name, key, a, b)
    assert dist[-1]["train_loss"] < dist[0]["train_loss"]
    resumed = records(root / "resumed")
    assert [r["train_loss"] for r in resumed if r["step"] > 3] == \
        [r["train_loss"] for r in dist if r["step"] > 3]
