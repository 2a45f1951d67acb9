"""Bring your own model, through the entry points users use: a Hugging Face GPT-2 folder
(``--model.hf``) and a plain ``nn.Module`` (``--model.factory``) train with 2BW + Muon + EF on
two torchrun ranks exactly as the one-process simulation does; ``asyncpp-export`` writes a
folder transformers loads with logits equal to asyncpp's (or, for the factory, a state dict the
factory's model loads); ``asyncpp-eval`` scores the run on another corpus; the Llama family
trains and exports too; mistakes exit 2 with one line and nothing written."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_export_eval import _env, _tool, launch

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT / "examples" / "byom" / "gpt2-tiny"
LLAMA = ROOT / "examples" / "byom" / "llama-tiny"
FACTORY = "examples.byom.tiny_gpt:build"
ARGS = ["--data.max_documents", "60", "--data.seq_len", "16", "--train.steps", "6",
        "--train.batch_size", "4", "--train.eval_every", "3", "--train.eval_batches", "1",
        "--train.checkpoint_every", "3", "--optimizer.name", "muon", "--optimizer.lr", "0.02",
        "--delay.correction", "ef", "--pipeline.schedule", "2bw", "--pipeline.stages", "2",
        "--pipeline.microbatches", "2", "--run.threads", "1", "--log.progress", "false",
        "--log.plot", "false", "--log.tensorboard", "off"]

transformers = pytest.importorskip("transformers")


def _cli(argv, cache, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *map(str, argv)],
                          capture_output=True, text=True, env=_env(cache), cwd=cwd, timeout=300)


def _losses(run: Path) -> list[float]:
    return [r["train_loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text()
                                         .splitlines()) if "train_loss" in r]


# -- the adapter, in this process ----------------------------------------------------------------
@pytest.mark.parametrize("folder", [GPT2, LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("tied", [False, True])
def test_the_layers_compose_to_the_models_own_logits(folder, tied, tmp_path):
    from asyncpp.models import hf
    from asyncpp.pipeline import StageModule, build_stages

    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = tied
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ours = hf.build(tmp_path, seed=3, dtype=torch.float64).eval()
    ref = hf.build(tmp_path, seed=3, dtype=torch.float64).eval()
    layers = hf.layers(ours)
    ids = torch.randint(0, cfg["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = ref(ids).logits
        assert torch.equal(StageModule(layers)(ids), want)
        x = ids  # stage by stage, as the pipeline passes (h, position ids) between them
        for stage in build_stages(layers, 3):
            x = stage(*x) if isinstance(x, tuple) else stage(x)
        assert torch.equal(x, want)
    assert set(StageModule(layers).state_dict()) == set(ref.state_dict())


def test_muon_reads_gpt2s_conv1d_matrices_transposed():
    from asyncpp.train.components import build_stage_optimizer
    from asyncpp.train.config import from_dict
    from asyncpp.train.external_model import full_model, stage_groups

    cfg = from_dict({"model": {"hf": str(GPT2)}, "optimizer": {"name": "muon"}})
    mc = cfg.model_config()
    groups = stage_groups(mc, full_model(mc, 0, "cpu"), 1)
    opt = build_stage_optimizer(cfg, groups[0], 0, torch.device("cpu")).optimizer
    names = {id(p): n for n, p in groups[0]}
    flipped = [g for g in opt.param_groups if g.get("transposed")]
    assert len(flipped) == 1
    got = sorted(names[id(p)].split(".")[-2] for p in flipped[0]["params"])
    assert set(got) == {"c_attn", "c_proj", "c_fc"} and len(got) == 4 * 4  # 4 per block
    muon = [g for g in opt.param_groups if g["use_muon"] and not g.get("transposed")]
    assert not muon or not any("c_" in names[id(p)] for g in muon for p in g["params"])


# -- the CLI end to end --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("byom")
    cache = root / "cache"
    out = {}
    for name, model in (("hf", ["--model.hf", GPT2]), ("factory", ["--model.factory", FACTORY])):
        sim = _cli([*ARGS, *model, "--simulate", "--run.dir", root / f"{name}-sim"], cache)
        assert sim.returncode == 0, sim.stderr[-3000:]
        ranks = launch([*ARGS, *map(str, model), "--run.dir", str(root / f"{name}-dist")], 2,
                       root / f"logs-{name}", cache, deadline=240)
        for r, (rc, text) in enumerate(ranks):
            assert rc == 0, f"rank {r} failed:\n{text[-3000:]}"
        done = _tool("asyncpp.train.export_cli", root / f"{name}-dist", "--out",
                     root / f"{name}-export", cache=cache)
        assert done.returncode == 0 and "2 ranks merged" in done.stdout, done.stderr
        out[name] = sim.stdout
    return {"root": root, "cache": cache}


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["hf", "factory"])
def test_two_ranks_train_as_the_simulation(runs, name):
    sim, dist = (_losses(runs["root"] / f"{name}-{k}") for k in ("sim", "dist"))
    assert len(sim) == len(dist) == 6
    assert dist == pytest.approx(sim, rel=1e-6, abs=1e-6)
    assert sim[-1] < sim[0]  # it learned


@pytest.mark.multiprocess
def test_transformers_loads_the_gpt2_export_with_equal_logits(runs):
    from asyncpp.train.restore import restore_run

    folder = runs["root"] / "hf-export"
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(model).__name__ == "GPT2LMHeadModel"
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert tok.eos_token_id is not None and tok.eos_token_id == model.config.eos_token_id
    ids = torch.tensor([tok.encode("In the beginning God created the heaven")])
    ours = restore_run(runs["root"] / "hf-dist").model
    with torch.no_grad():
        delta = (model(ids).logits - ours(ids)).abs().max().item()
    assert delta < 1e-5, delta
    out = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.eos_token_id)
    assert out.shape[1] == ids.shape[1] + 6


@pytest.mark.multiprocess
def test_the_factory_export_loads_into_the_factorys_model(runs, monkeypatch):
    from safetensors.torch import load_file

    from asyncpp.train.restore import restore_run

    folder = runs["root"] / "factory-export"
    meta = json.loads((folder / "asyncpp_model.json").read_text())
    assert meta["factory"] == FACTORY
    monkeypatch.syspath_prepend(str(ROOT))
    from examples.byom.tiny_gpt import build

    model = build()
    missing, unexpected = model.load_state_dict(load_file(folder / "model.safetensors"))
    assert not missing and not unexpected
    ids = torch.randint(0, 512, (2, 10), generator=torch.Generator().manual_seed(0))
    ours = restore_run(runs["root"] / "factory-dist").model
    with torch.no_grad():
        assert torch.equal(model.eval()(ids), ours(ids))


@pytest.mark.multiprocess
def test_eval_scores_another_corpus(runs):
    done = _tool("asyncpp.train.eval_cli", runs["root"] / "hf-dist", cache=runs["cache"])
    assert done.returncode == 0, done.stderr
    own = float(done.stdout.split()[-1])
    final = json.loads((runs["root"] / "hf-dist" / "summary.json").read_text())
    assert own == pytest.approx(final["final_val_loss"], rel=1e-5)
    other = _tool("asyncpp.train.eval_cli", runs["root"] / "hf-dist", "--data.source", "files",
                  "--data.path", str(ROOT / "book" / "howto" / "*.md"),
                  "--data.val_fraction", "0.5", cache=runs["cache"])
    assert other.returncode == 0, other.stderr
    lines = other.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("val loss ")
    x = float(lines[0].split()[-1])
    assert math.isfinite(x) and x != own


def test_a_llama_folder_trains_and_exports(tmp_path):
    run = tmp_path / "run"
    done = _cli([*ARGS, "--model.hf", LLAMA, "--simulate", "--train.steps", "3",
                 "--train.export", "true", "--run.dir", run], tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    model = transformers.AutoModelForCausalLM.from_pretrained(run / "export").eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    from asyncpp.train.restore import restore_run

    ids = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        delta = (model(ids).logits - restore_run(run).model(ids)).abs().max().item()
    assert delta < 1e-5, delta


@pytest.mark.parametrize("extra,message", [
    (["--model.hf", "no/such/folder"], "not a folder holding a config.json"),
    (["--model.hf", str(GPT2), "--model.dim", "32"], "model.dim overrides a named shape"),
    (["--model.hf", str(GPT2), "--model.factory", FACTORY], "give one"),
    (["--model.factory", "examples.byom.tiny_gpt:nothing"], "has no function 'nothing'"),
    (["--model.factory", "examples.byom.tiny_gpt"], "must be 'package.module:function'"),
    (["--model.hf", "NEOX"], "not a supported family"),
    (["--model.hf", str(GPT2), "--data.seq_len", "512"], "exceeds model.max_seq_len=256"),
])
def test_mistakes_exit_2_with_one_line_and_nothing_written(extra, message, tmp_path):
    if "NEOX" in extra:
        neox = tmp_path / "neox"
        neox.mkdir()
        transformers.GPTNeoXConfig(vocab_size=512, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=64
                                   ).save_pretrained(neox)
        extra = [str(neox) if a == "NEOX" else a for a in extra]
    run = tmp_path / "run"
    done = _cli([*ARGS, *extra, "--run.dir", run], tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not run.exists()


def test_a_factory_in_the_current_folder_is_found_without_changing_sys_path(tmp_path,
                                                                             monkeypatch):
    """The console scripts do not put the current folder on sys.path; a factory there is
    found anyway, and sys.path is left as it was."""
    from asyncpp.models.external import describe

    pkg = tmp_path / "byom_here_pkg"
    pkg.mkdir()
    (pkg / "model.py").write_text((ROOT / "examples" / "byom" / "tiny_gpt.py").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    try:
        mc = describe("factory", "byom_here_pkg.model:build")
    finally:
        for name in [n for n in sys.modules if n.startswith("byom_here_pkg")]:
            del sys.modules[name]
    assert sys.path == before
    assert mc.vocab_size == 512 and mc.n_layers == 6 and mc.blocks == 4
