"""``asyncpp-export`` and ``asyncpp-eval`` on real runs: a 2-rank ``torchrun`` 2BW + Muon + EF
run (its shards merged by full-model names) and the one-process simulation of the same
configuration. Checked through the console entry points: the two exports hold the same
weights; transformers loads the export with logits equal to asyncpp's and a tokenizer whose
end-of-text token is ``config.json``'s, and generates text; the files are 0644; ``val loss``
equals the run's own final validation, and another corpus can be scored; a used ``--out`` is
refused with nothing changed."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncpp.pipeline.launch import RankTimeout, run_ranks

ARGS = ["--model.name", "tiny", "--data.max_documents", "60", "--data.seq_len", "16",
        "--train.steps", "6", "--train.batch_size", "4", "--train.eval_every", "3",
        "--train.eval_batches", "1", "--train.checkpoint_every", "3",
        "--optimizer.name", "muon", "--optimizer.lr", "0.02", "--optimizer.adamw_lr", "0.006",
        "--delay.correction", "ef", "--pipeline.schedule", "2bw", "--pipeline.stages", "2",
        "--pipeline.microbatches", "2", "--run.threads", "1", "--log.progress", "false",
        "--log.plot", "false", "--log.tensorboard", "off"]


def _env(cache: Path) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ASYNCPP_CACHE=str(cache),
                PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def launch(argv: list[str], nprocs: int, logdir: Path, cache: Path,
           deadline: float) -> list[tuple[int, str]]:
    """Run the CLI on ``nprocs`` ranks the way torchrun starts workers; ``(exit code,
    output)`` of each rank."""
    try:
        codes = run_ranks([sys.executable, "-m", "asyncpp.train.cli", *argv], nprocs, logdir,
                          deadline=deadline, env=_env(cache), log_name="rank{rank}.log")
    except RankTimeout as e:
        pytest.fail(str(e))
    return [(rc, (logdir / f"rank{r}.log").read_text()) for r, rc in enumerate(codes)]


def _tool(module: str, *argv, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], capture_output=True,
                          text=True, env=_env(cache), timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("export_eval")
    cache = root / "cache"
    old = os.umask(0o022)
    try:
        sim = subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *ARGS, "--simulate",
                              "--run.dir", str(root / "sim")], capture_output=True, text=True,
                             env=_env(cache), timeout=300)
        assert sim.returncode == 0, sim.stderr[-3000:]
        out = launch([*ARGS, "--run.dir", str(root / "dist")], 2, root / "logs", cache,
                     deadline=180)
        for r, (rc, text) in enumerate(out):
            assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
        exports = {}
        for name in ("sim", "dist"):
            done = _tool("asyncpp.train.export_cli", root / name, "--out", root / f"hf-{name}",
                         cache=cache)
            assert done.returncode == 0, done.stderr
            exports[name] = (root / f"hf-{name}", done.stdout)
    finally:
        os.umask(old)
    return {"root": root, "cache": cache, "exports": exports}


@pytest.mark.multiprocess
def test_the_merged_export_equals_the_simulations(runs):
    from safetensors.torch import load_file

    (sim_dir, _), (dist_dir, said) = runs["exports"]["sim"], runs["exports"]["dist"]
    assert "exported step 6" in said and "2 ranks merged" in said
    a, b = load_file(sim_dir / "model.safetensors"), load_file(dist_dir / "model.safetensors")
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    # fp32 training, equal losses up to a few ulp: the weights agree to ~1e-6
    assert worst < 1e-5, worst
    for f in dist_dir.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
    assert not [p for p in dist_dir.parent.iterdir() if p.name.startswith(".hf-")]


@pytest.mark.multiprocess
def test_transformers_loads_the_export_with_equal_logits_and_generates(runs):
    transformers = pytest.importorskip("transformers")
    from asyncpp.train.restore import restore_run

    folder = runs["exports"]["dist"][0]
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    cfg = json.loads((folder / "config.json").read_text())
    assert tok.eos_token is not None and tok.eos_token_id == cfg["eos_token_id"]
    ours = restore_run(runs["root"] / "dist").model
    ids = torch.tensor([tok.encode("In the beginning God created")])
    with torch.no_grad():
        delta = (hf(ids).logits - ours(ids)).abs().max().item()
    assert delta < 1e-4, delta
    out = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.eos_token_id)
    assert out.shape[1] > ids.shape[1]
    assert isinstance(tok.decode(out[0, ids.shape[1]:]), str)


@pytest.mark.multiprocess
def test_eval_scores_the_run_and_another_corpus(runs, tmp_path):
    root, cache = runs["root"], runs["cache"]
    done = _tool("asyncpp.train.eval_cli", root / "dist", cache=cache)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("val loss ")
    loss = float(lines[0].split()[-1])
    final = json.loads((root / "dist" / "summary.json").read_text())["final_val_loss"]
    assert loss == pytest.approx(final, rel=1e-5)
    corpus = tmp_path / "other"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"doc{i}.txt").write_text(
            f"Note {i}: the river rose in spring and the mill turned day and night. " * 12)
    other = _tool("asyncpp.train.eval_cli", root / "dist", "--data.source", "files",
                  "--data.path", corpus, "--data.val_fraction", "0.5", cache=cache)
    assert other.returncode == 0, other.stderr
    x = float(other.stdout.split()[-1])
    assert math.isfinite(x) and x != loss


@pytest.mark.multiprocess
def test_export_refuses_a_used_folder_and_a_run_without_checkpoint(runs, tmp_path):
    cache = runs["cache"]
    used = tmp_path / "used"
    used.mkdir()
    (used / "mine.txt").write_text("keep me")
    done = _tool("asyncpp.train.export_cli", runs["root"] / "dist", "--out", used, cache=cache)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--force" in done.stderr and (used / "mine.txt").read_text() == "keep me"
    empty = tmp_path / "run"
    empty.mkdir()
    done = _tool("asyncpp.train.export_cli", empty, "--out", tmp_path / "x", cache=cache)
    assert done.returncode == 2 and "no checkpoint" in done.stderr, done.stderr
    assert not (tmp_path / "x").exists()


def test_export_of_a_mixture_of_experts_is_refused_with_nothing_written(tmp_path, capsys):
    from asyncpp.train import cli, export_cli

    run = tmp_path / "moe"
    assert cli.main(["--model.name", "moe-tiny", "--data.max_documents", "30",
                     "--data.seq_len", "16", "--train.steps", "1", "--train.batch_size", "2",
                     "--train.eval_batches", "1", "--run.threads", "1", "--log.plot", "false",
                     "--log.tensorboard", "off", "--data.cache_dir", str(tmp_path / "cache"),
                     "--run.dir", str(run)]) == 0
    capsys.readouterr()
    assert export_cli.main([str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mixture of experts" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "moe"]


def test_train_export_under_torchrun_points_to_asyncpp_export():
    from asyncpp.train.config import ConfigError, from_dict
    from asyncpp.train.pipelined import check_layout

    cfg = from_dict({"model": {"name": "tiny"}, "train": {"export": True, "batch_size": 4},
                     "pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2},
                     "run": {"dir": "runs/x"}})
    with pytest.raises(ConfigError, match=r"asyncpp-export runs/x --out DIR"):
        check_layout(cfg, 2)
