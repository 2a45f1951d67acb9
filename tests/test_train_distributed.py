"""``asyncpp-train`` under torchrun on the real pipeline executor (2 gloo ranks), against the
single-process ``--simulate`` run of the same configuration.

Two launches of the real CLI (``python -m asyncpp.train.cli``, started the way ``torchrun``
starts workers — RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT — without its agent, killed at a
hard deadline): a 6-step 2BW Muon + EF run of ``tiny``, and a resume of a copy of it from its
step-3 checkpoint. Checked: per-step train and validation losses equal the simulation's (fp32:
up to a few ulp, from the tied embedding/head gradient being summed in another order), the
resumed steps are bit-identical, outputs are written once (rank 0), the checkpoint holds both
live 2BW weight versions on every rank.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from asyncpp.pipeline.launch import RankTimeout, run_ranks
from asyncpp.train.config import ConfigError, from_dict, validate

TOL = 5e-6  # fp32 losses of ~6; measured deviation ≤ 2.4e-7 (1 ulp), see the module docstring
ARGS = ["--model.name", "tiny", "--data.max_documents", "60", "--data.seq_len", "16",
        "--train.steps", "6", "--train.batch_size", "4", "--train.eval_every", "3",
        "--train.eval_batches", "1", "--train.checkpoint_every", "3",
        "--optimizer.name", "muon", "--optimizer.lr", "0.02", "--optimizer.adamw_lr", "0.006",
        "--delay.correction", "ef", "--delay.track_updates", "true",
        "--pipeline.schedule", "2bw", "--pipeline.stages", "2",
        "--pipeline.microbatches", "2", "--run.threads", "1", "--log.progress", "false",
        "--log.plot", "false", "--log.tensorboard", "off"]




def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def launch(argv: list[str], nprocs: int, logdir: Path, cache: Path,
           deadline: float = 60.0) -> list[tuple[int, str]]:
    """Run the CLI on ``nprocs`` ranks; ``(exit code, output)`` of each rank."""
    try:
        codes = run_ranks([sys.executable, "-m", "asyncpp.train.cli", *argv], nprocs, logdir,
                          deadline=deadline, env=_env(cache), log_name="rank{rank}.log")
    except RankTimeout as e:
        pytest.fail(str(e))
    return [(rc, (logdir / f"rank{r}.log").read_text()) for r, rc in enumerate(codes)]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_distributed")
    cache = root / "cache"
    import torch

    from asyncpp.train import cli

    threads = torch.get_num_threads()
    try:  # the simulation in this process (it also trains and caches the tokenizer)
        assert cli.main([*ARGS, "--simulate", "--data.cache_dir", str(cache),
                         "--run.dir", str(root / "sim")]) == 0
    finally:
        torch.set_num_threads(threads)
    full = launch([*ARGS, "--run.dir", str(root / "dist")], 2, root / "logs-full", cache)
    for r, (rc, out) in enumerate(full):
        assert rc == 0, f"rank {r} failed:\n{out[-3000:]}"
    # Resume a copy from its step-3 checkpoint (drop the final one).
    shutil.copytree(root / "dist", root / "resumed")
    ck = root / "resumed" / "checkpoints"
    (ck / "step-00000006.pt").unlink()
    shutil.rmtree(ck / "step-00000006.shards")
    resumed = launch([*ARGS, "--run.dir", str(root / "resumed"), "--resume",
                      "--log.progress", "true"], 2, root / "logs-resume", cache)
    for r, (rc, out) in enumerate(resumed):
        assert rc == 0, f"rank {r} failed on resume:\n{out[-3000:]}"
    return {"root": root, "full": full, "resumed": resumed}


@pytest.mark.multiprocess
def test_two_ranks_equal_the_simulation(runs):
    root = runs["root"]
    sim, dist = records(root / "sim"), records(root / "dist")
    assert [r["step"] for r in dist] == [1, 2, 3, 4, 5, 6]  # written once, by rank 0
    worst = 0.0
    for a, b in zip(sim, dist, strict=True):
        assert a["step"] == b["step"] and a["lr"] == b["lr"] and a["delay"] == b["delay"]
        for key in ("train_loss", "val_loss", "grad_norm"):
            assert (key in a) == (key in b)
            if key in a:
                assert math.isfinite(b[key])
                worst = max(worst, abs(a[key] - b[key]))
                assert abs(a[key] - b[key]) <= TOL * max(1.0, abs(a[key])), (key, a, b)
    assert worst <= TOL
    assert records(root / "dist")[-1]["train_loss"] < records(root / "dist")[0]["train_loss"]
    summary = json.loads((root / "dist" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["stages"] == 2
    # --delay.track_updates: the executor applies the same update sequence as the simulation
    # (one step earlier: the simulation's first step only fills the delay queue), so the drift
    # statistics agree, the tied embedding/head counted once.
    ref = json.loads((root / "sim" / "summary.json").read_text())
    assert summary["drift_updates"] == ref["drift_updates"] == 6
    for key in ("drift_ratio_mean", "drift_ratio_mean_second_half"):
        assert summary[key] == pytest.approx(ref[key], rel=1e-5), key
    norms_sim = [r["update_norm"] for r in sim if "update_norm" in r]
    norms_dist = [r["update_norm"] for r in dist if "update_norm" in r]
    assert len(norms_dist) == 6 and len(norms_sim) == 5
    assert norms_dist[:4] == pytest.approx(norms_sim[:4], rel=1e-5)


@pytest.mark.multiprocess
def test_outputs_are_written_once_and_checkpoints_hold_every_version(runs):
    import torch

    root = runs["root"]
    run = root / "dist"
    for name in ("config.toml", "config.json", "metrics.jsonl", "summary.json", "tokenizer.json"):
        assert (run / name).is_file(), name
    ck = run / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == [
        "step-00000003.pt", "step-00000003.shards", "step-00000006.pt", "step-00000006.shards"]
    for r in range(2):
        shard = torch.load(ck / "step-00000006.shards" / f"rank-{r:05d}.pt", weights_only=True)
        ex = shard["executor"]
        assert ex["stage"] == r and ex["next_step"] == 6
        assert len(ex["versions"]) == 2  # 2BW: the newest and the one the next step reads
        assert ex["optimizer"]["step_count"] >= 6
    # Quiet ranks: nothing from rank 1; rank 0 reports through the progress bar on resume.
    assert runs["full"][1][1].strip() == "" and runs["resumed"][1][1].strip() == ""
    assert "resumed from step 3" in runs["resumed"][0][1]


@pytest.mark.multiprocess
def test_resume_continues_bit_identically(runs):
    root = runs["root"]
    full, resumed = records(root / "dist"), records(root / "resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, resumed, strict=True):
        for key in ("train_loss", "val_loss", "grad_norm", "lr", "update_norm", "drift_ratio"):
            assert a.get(key) == b.get(key), (key, a, b)
    summaries = [json.loads((root / r / "summary.json").read_text()) for r in ("dist", "resumed")]
    assert summaries[0]["drift_ratio_mean"] == summaries[1]["drift_ratio_mean"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("how,why", [("flipped", "fails its checksum; it is truncated or corrupt"),
                                     ("missing", "is missing")])
def test_resume_skips_a_checkpoint_with_a_damaged_shard(runs, tmp_path, how, why):
    """Step 6's shard of rank 1 has one flipped bit, or is gone: both ranks agree to resume
    from step 3, rank 0 says which checkpoint was skipped, on which rank, and why, in one line;
    the steps redone equal the uninterrupted run's bit for bit, and the run keeps exactly
    ``train.keep_checkpoints`` = 2 checkpoints."""
    root = runs["root"]
    run = tmp_path / "run"
    shutil.copytree(root / "dist", run)
    shard = run / "checkpoints" / "step-00000006.shards" / "rank-00001.pt"
    data = shard.read_bytes()
    i = len(data) // 2
    if how == "missing":
        shard.unlink()
    else:
        shard.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    out = launch([*ARGS, "--run.dir", str(run), "--resume"], 2, tmp_path / "logs",
                 root / "cache")
    for r, (rc, text) in enumerate(out):
        assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
        assert "Traceback" not in text
    notes = [ln for ln in out[0][1].splitlines() if "skipped" in ln]
    assert notes == [f"asyncpp-train: skipped step-00000006.pt: on rank 1, rank-00001.pt {why}; "
                     "resuming from step-00000003.pt"], out[0][1]
    assert "resumed from step 3" in out[0][1]
    full, redone = records(root / "dist"), records(run)
    assert [r["step"] for r in redone] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full, redone, strict=True):
        assert (a["train_loss"], a.get("val_loss")) == (b["train_loss"], b.get("val_loss"))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-00000003.pt", "step-00000003.shards", "step-00000006.pt", "step-00000006.shards"]


def _cfg(**sections):
    d = {"model": {"name": "tiny"}, "train": {"batch_size": 4},
         "pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2}}
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    cfg = from_dict(d)
    validate(cfg)
    return cfg


def test_layout_checks_before_any_process_group():
    from asyncpp.train.pipelined import check_layout

    assert check_layout(_cfg(), 2) == (1, 2)
    assert check_layout(_cfg(), 4) == (2, 2)
    with pytest.raises(ConfigError, match="batch_size=4 must split into 3"):
        check_layout(_cfg(), 6)
    with pytest.raises(ConfigError, match="clip_scope='stage'"):
        check_layout(_cfg(train={"clip_scope": "stage"}), 2)
    with pytest.raises(ConfigError, match="on_nonfinite='skip'"):
        check_layout(_cfg(train={"on_nonfinite": "skip"}), 2)
    assert check_layout(_cfg(run={"compile": True}), 2) == (1, 2)  # compiled stages run


@pytest.mark.multiprocess
def test_data_parallel_replicas_count_the_update_once(runs, tmp_path):
    """DP = 2 × PP = 2 (4 ranks): the replicas' equal updates are divided out of the drift, so
    it equals the single-process simulation's, as do the losses."""
    root = runs["root"]
    out = launch([*ARGS, "--run.dir", str(tmp_path / "dp")], 4, tmp_path / "logs",
                 root / "cache")
    for r, (rc, text) in enumerate(out):
        assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
    sim, dp = records(root / "sim"), records(tmp_path / "dp")
    for a, b in zip(sim, dp, strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) <= TOL * max(1.0, abs(a["train_loss"]))
    ref = json.loads((root / "sim" / "summary.json").read_text())
    got = json.loads((tmp_path / "dp" / "summary.json").read_text())
    assert got["dp"] == 2 and got["drift_updates"] == ref["drift_updates"]
    assert got["drift_ratio_mean"] == pytest.approx(ref["drift_ratio_mean"], rel=1e-5)
    norms_sim = [r["update_norm"] for r in sim if "update_norm" in r]
    norms_dp = [r["update_norm"] for r in dp if "update_norm" in r]
    assert norms_dp[:4] == pytest.approx(norms_sim[:4], rel=1e-5)


@pytest.mark.multiprocess
def test_compiled_stages_under_torchrun_match_the_eager_run(runs, tmp_path):
    """``run.compile`` under torchrun: each rank compiles its stage's forward (the last stage's
    with the loss inside the graph) over ``functional_call``; the losses equal the eager run's
    up to the float reordering of the compiled kernels."""
    root = runs["root"]
    out = launch([*ARGS, "--run.compile", "true", "--run.dir", str(tmp_path / "compiled")], 2,
                 tmp_path / "logs", root / "cache", deadline=600)
    for r, (rc, text) in enumerate(out):
        assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
    eager, compiled = records(root / "dist"), records(tmp_path / "compiled")
    assert [r["step"] for r in compiled] == [r["step"] for r in eager]
    for a, b in zip(eager, compiled, strict=True):
        for key in ("train_loss", "val_loss"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), (key, a, b)
    summary = json.loads((tmp_path / "compiled" / "summary.json").read_text())
    assert summary["first_step_s"] > 0 and summary["steady_tokens_per_s"] > 0


@pytest.mark.multiprocess
def test_flush_denormal_holds_under_torchrun(runs, tmp_path):
    """``run.flush_denormal`` under torchrun: rank 0 trains with subnormals flushed (its
    summary's probe, taken as training ends, reads flushed), the losses match the IEEE run's
    (these 6 steps meet no subnormal), and the same launch without the key records IEEE
    arithmetic."""
    root = runs["root"]
    out = launch([*ARGS, "--run.flush_denormal", "true", "--run.dir", str(tmp_path / "ftz")], 2,
                 tmp_path / "logs", root / "cache")
    for r, (rc, text) in enumerate(out):
        assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
    assert json.loads((tmp_path / "ftz" / "summary.json").read_text())["subnormals_flushed"]
    assert not json.loads((root / "dist" / "summary.json").read_text())["subnormals_flushed"]
    for a, b in zip(records(root / "dist"), records(tmp_path / "ftz"), strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) <= TOL * max(1.0, abs(a["train_loss"]))
