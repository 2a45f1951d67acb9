"""Configuration: TOML + dotted overrides, round trip, validation messages, and the CLI's
bad-input contract (one line on stderr, exit code 2, nothing written)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncpp.train.config import (
    Config,
    ConfigError,
    from_dict,
    load_config,
    parse_overrides,
    to_toml,
    tomllib,
    validate,
)

ROOT = Path(__file__).resolve().parents[1]
# every training config; configs/study-*.toml are study files (tests/test_study_spec.py)
CONFIGS = sorted(p for p in (ROOT / "configs").glob("*.toml")
                 if not p.name.startswith("study-"))


def test_defaults_are_valid_and_resolve():
    cfg = Config()
    validate(cfg)
    mc = cfg.model_config()
    assert mc.name == "tiny" and mc.vocab_size == 512
    assert cfg.stage_delays() == [0]
    assert cfg.run_dir == Path("runs/run")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_and_round_trip(path, tmp_path):
    cfg = load_config(str(path))
    again = tmp_path / "again.toml"
    again.write_text(to_toml(cfg))
    assert load_config(str(again)) == cfg
    resolved = cfg.resolved()
    again.write_text(to_toml(resolved))
    back = load_config(str(again))
    assert back == resolved and back.model_config() == cfg.model_config()


def test_demo_config_is_the_specified_run():
    cfg = load_config(str(ROOT / "configs" / "demo.toml"))
    assert (cfg.model.name, cfg.optimizer.name, cfg.delay.correction) == ("small", "muon", "ef")
    assert (cfg.pipeline.schedule, cfg.pipeline.stages, cfg.data.source) == ("2bw", 2, "bible")
    assert cfg.stage_delays() == [1, 1]


def test_overrides_are_typed_and_win_over_the_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[optimizer]\nname = "adamw"\nlr = 1\n[train]\nsteps = 10\n')
    cfg = load_config(str(f), [("optimizer.name", "muon"), ("train.grad_clip", "0.5"),
                               ("pipeline.simulate", "yes"), ("model.dim", "32")])
    assert cfg.optimizer.name == "muon" and cfg.optimizer.lr == 1.0
    assert cfg.train.steps == 10 and cfg.train.grad_clip == 0.5 and cfg.pipeline.simulate
    assert cfg.model_config().dim == 32
    assert parse_overrides([("delay.sync_start", "3")]) == {"delay": {"sync_start": 3}}


def test_pipedream_delays_follow_stage_depth():
    cfg = from_dict({"model": {"name": "tiny", "n_layers": 4, "tie_embeddings": False},
                     "pipeline": {"schedule": "pipedream", "stages": 4, "microbatches": 4}})
    validate(cfg)
    assert cfg.stage_delays() == [3, 2, 1, 0]


BAD = [
    ({"optimizer": {"nme": "muon"}}, "unknown config key 'optimizer.nme'; did you mean 'name'"),
    ({"optimiser": {}}, "unknown config key 'optimiser'"),
    ({"train": {"steps": "ten"}}, "train.steps must be an integer, got 'ten'"),
    ({"train": {"steps": 2.0}}, "train.steps must be an integer"),
    ({"run": {"compile": 1}}, "run.compile must be true or false"),
    ({"train": {"steps": 0}}, "train.steps=0 is out of range"),
    ({"optimizer": {"lr": float("nan")}}, "optimizer.lr must be a finite number"),
    ({"data": {"val_fraction": 0.9}}, "data.val_fraction=0.9 is out of range"),
    ({"pipeline": {"schedule": "zero-bubble"}}, "pipeline.schedule='zero-bubble' is not allowed"),
    # 2BW needs m >= P - 1 (two weight versions suffice then; the registry's rule).
    ({"pipeline": {"schedule": "2bw", "stages": 3, "microbatches": 1}, "train": {"batch_size": 4},
      "model": {"n_layers": 3}},
     "pipeline.schedule='2bw' on 3 stages needs pipeline.microbatches >= 2"),
    ({"pipeline": {"schedule": "gpipe", "stages": 3}}, "pipeline.stages=3 exceeds the model's 2"),
    ({"pipeline": {"schedule": "none", "stages": 2}}, "needs a pipeline schedule"),
    ({"delay": {"correction": "taylor"}},
     "delay.correction='taylor' needs an asynchronous schedule"),
    ({"pipeline": {"schedule": "gpipe", "stages": 2}, "delay": {"correction": "nesterov"}},
     "delay.correction='nesterov' needs an asynchronous schedule"),
    ({"pipeline": {"schedule": "1f1b"}, "delay": {"sync_start": 5}}, "delay.sync_start=5 needs"),
    ({"pipeline": {"schedule": "pipedream", "stages": 2, "microbatches": 2}},
     "set --model.tie_embeddings false"),
    ({"pipeline": {"schedule": "pipedream", "stages": 2, "microbatches": 2},
      "model": {"tie_embeddings": False}, "delay": {"sync_start": 1}}, "not pipedream"),
    ({"pipeline": {"schedule": "zb-v", "stages": 2, "microbatches": 2}},
     "'zb-v' runs the first and last stage as two stages of one device, so the tied"),
    ({"pipeline": {"schedule": "2bw"}, "delay": {"correction": "taylor",
                                                 "formulation": "update"}}, "taylor"),
    ({"train": {"batch_size": 6}, "pipeline": {"microbatches": 4}}, "not divisible"),
    ({"data": {"seq_len": 4096}}, "data.seq_len=4096 exceeds model.max_seq_len=256"),
    ({"model": {"dim": 62}}, "model.dim=62 is not divisible by model.n_heads=4"),
    ({"model": {"dim": 60}}, "head size dim/n_heads = 15 must be even"),
    ({"model": {"name": "gpt5"}}, "model.name='gpt5' is not allowed"),
    ({"data": {"source": "files"}}, "data.source='files' needs data.path"),
    ({"run": {"device": "tpu"}}, "run.device='tpu' is not allowed"),
    ({"data": {"vocab_size": 1000}}, "data.vocab_size=1000 exceeds model.vocab_size=512"),
    ({"delay": {"spectral_drift": True}}, "set --delay.track_updates true"),
]


@pytest.mark.parametrize("d,msg", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_values_name_the_value_and_the_fix(d, msg):
    with pytest.raises(ConfigError) as e:
        validate(from_dict(d))
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


def test_world_size_must_divide_into_stages():
    cfg = from_dict({"pipeline": {"schedule": "gpipe", "stages": 2}})
    validate(cfg, world_size=4)
    with pytest.raises(ConfigError, match="world size 3 is not divisible"):
        validate(cfg, world_size=3)
    tracked = from_dict({"pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2},
                         "delay": {"track_updates": True, "spectral_drift": True}})
    validate(tracked, world_size=1)
    with pytest.raises(ConfigError, match="spectral_drift needs every stage in one process"):
        validate(tracked, world_size=2)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().train.steps = 3  # type: ignore[misc]


# -- the CLI contract ---------------------------------------------------------------------------
def _cli(args, cwd, env_extra=None):
    """The console script in a subprocess (the real exit code and streams)."""
    env = {**os.environ, "ASYNCPP_CACHE": str(cwd / "cache"), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "asyncpp.train.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def _main(args, cwd, monkeypatch, capsys, env_extra=None):
    """``asyncpp.train.cli.main`` in this process (what the console script calls)."""
    from asyncpp.train import cli

    monkeypatch.chdir(cwd)
    monkeypatch.setenv("ASYNCPP_CACHE", str(cwd / "cache"))
    for k, v in (env_extra or {}).items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    try:
        code = cli.main(args)
    except SystemExit as e:  # argparse errors
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


CLI_BAD = [
    ["--optimizer.nme", "muon"],
    ["--train.steps", "-1"],
    ["--train.steps", "x"],
    ["--optimizer.lr", "inf"],
    ["--pipeline.schedule", "2bw", "--pipeline.stages", "3", "--pipeline.microbatches", "1",
     "--model.n_layers", "3", "--train.batch_size", "4"],
    ["--pipeline.schedule", "none", "--delay.correction", "taylor"],
    ["--pipeline.schedule", "gpipe", "--pipeline.stages", "5"],
    ["--config", "missing.toml"],
    ["--config", "broken.toml"],
    ["--data.source", "files", "--data.path", "nothing/*.txt"],
    ["--data.source", "files", "--data.path", "empty.txt"],
    ["--data.tokenizer", "no/such/tokenizer.json"],
    ["--resume"],
]


def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken.toml").write_text("[train\nsteps = 3\n")
    (tmp_path / "empty.txt").write_text("")
    import torch

    cases = CLI_BAD + ([] if torch.cuda.is_available() else [["--run.device", "cuda:0"]])
    for args in cases:
        before = sorted(p.name for p in tmp_path.iterdir() if p.name != "cache")
        code, _, err = _main([*args, "--run.dir", "out", "--data.max_documents", "20"],
                             tmp_path, monkeypatch, capsys)
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert lines[-1].startswith("asyncpp-train: error: "), (args, err)
        assert "Traceback" not in err
        assert not (tmp_path / "out").exists(), args
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == before, args


def test_cli_process_exit_codes(tmp_path):
    """The same contract through the real console entry point (two cases: before and after
    torch is imported)."""
    for args in (["--pipeline.schedule", "none", "--delay.correction", "taylor"],
                 ["--data.source", "files", "--data.path", "nothing/*.txt"]):
        r = _cli([*args, "--run.dir", "out"], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("asyncpp-train: error: ")
        assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_cli_refuses_to_overwrite_an_existing_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "metrics.jsonl").write_text("keep me\n")
    code, _, err = _main(["--run.dir", "out"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "already holds files" in err
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == "keep me\n"


def test_cli_help_and_print_config(tmp_path, monkeypatch, capsys):
    code, out, _ = _main(["--help"], tmp_path, monkeypatch, capsys)
    assert code == 0
    for opt in ("--optimizer.name", "--delay.correction", "--pipeline.schedule", "--resume"):
        assert opt in out
    code, out, err = _main(["--config", str(ROOT / "configs" / "demo.toml"), "--print-config",
                            "--delay.correction", "none"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    d = tomllib.loads(out)
    assert d["delay"]["correction"] == "none" and d["model"]["dim"] == 256
    assert from_dict(d).model_config().name == "small"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_cli_under_an_incomplete_torchrun_environment_is_a_clear_error(tmp_path, monkeypatch,
                                                                         capsys):
    for k in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    code, _, err = _main(["--pipeline.schedule", "2bw", "--pipeline.stages", "2",
                          "--pipeline.microbatches", "2", "--run.dir", "out"], tmp_path,
                         monkeypatch, capsys, {"RANK": "0", "WORLD_SIZE": "2"})
    assert code == 2 and "MASTER_ADDR" in err and "torchrun" in err
    assert not (tmp_path / "out").exists()
    code, _, err = _main(["--pipeline.schedule", "gpipe", "--pipeline.stages", "2",
                          "--run.dir", "out"], tmp_path, monkeypatch, capsys,
                         {"RANK": "0", "WORLD_SIZE": "3"})
    assert code == 2 and "world size 3 is not divisible" in err
