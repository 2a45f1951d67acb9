"""The training loop in one process: outputs, every schedule × optimizer × correction, the
per-stage simulation against one DelayedOptimizer, lr schedule, clipping, non-finite steps,
bit-identical resume, the CLIs."""

from __future__ import annotations

import json
import math

import pytest
import torch

from asyncpp.delay import DelayedOptimizer
from asyncpp.train import checkpoint as ckpt_io
from asyncpp.train import loop
from asyncpp.train.config import from_dict, validate
from asyncpp.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("asyncpp-cache")


def make_cfg(run_dir, cache, **sections):
    d = {
        "run": {"dir": str(run_dir), "seed": 0},
        "data": {"max_documents": 60, "seq_len": 16, "cache_dir": str(cache)},
        "train": {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 1},
        "optimizer": {"name": "adamw", "lr": 3e-3},
        "log": {"progress": False, "plot": False, "tensorboard": "off"},
    }
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    cfg = from_dict(d)
    validate(cfg)
    return cfg


def losses(run_dir, key="train_loss"):
    return [r[key] for r in read_metrics(run_dir) if key in r]


def test_tiny_run_learns_and_writes_its_outputs(tmp_path, cache):
    pytest.importorskip("matplotlib")
    cfg = make_cfg(tmp_path / "run", cache, train={"steps": 40, "batch_size": 8,
                                                    "eval_every": 20, "eval_batches": 2},
                   data={"seq_len": 32}, log={"plot": True})
    res = loop.train(cfg)
    assert res.finished and res.steps_done == 40
    tl = losses(cfg.run_dir)
    assert len(tl) == 40 and all(math.isfinite(x) for x in tl)
    assert abs(tl[0] - math.log(512)) < 0.3
    assert sum(tl[-5:]) / 5 < tl[0] - 0.6  # clearly falling
    vl = losses(cfg.run_dir, "val_loss")
    assert len(vl) == 2 and vl[-1] < vl[0]
    rec = read_metrics(cfg.run_dir)[-1]
    for key in ("step", "tokens", "train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s",
                "step_time_s", "peak_mem_mb"):
        assert key in rec
    assert rec["tokens"] == 40 * 8 * 32
    out = {p.name for p in cfg.run_dir.iterdir()}
    assert {"config.toml", "config.json", "metrics.jsonl", "summary.json", "loss.png",
            "checkpoints", "tokenizer.json"} <= out
    saved = json.loads((cfg.run_dir / "config.json").read_text())
    assert saved["model"]["dim"] == 64 and saved["optimizer"]["name"] == "adamw"
    ck = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(cfg.run_dir)[-1][1])
    assert ck["step"] == 40 and set(ck) >= {"model", "optimizers", "sampler", "rng", "config"}


SYNC = [(s, o, "none") for s in ("none", "gpipe", "1f1b") for o in ("adamw", "muon")]
ASYNC = [(s, o, c) for s in ("2bw", "pipedream") for o in ("adamw", "muon")
         for c in ("none", "ef", "taylor")]
BASELINES = [("2bw", o, "ef") for o in ("soap", "adan", "lion", "mars")]


@pytest.mark.parametrize("schedule,opt,corr", SYNC + ASYNC + BASELINES,
                         ids=lambda v: str(v))
def test_schedule_optimizer_correction_matrix(tmp_path, cache, schedule, opt, corr):
    stages = 1 if schedule == "none" else 2
    lr = {"muon": 0.02, "lion": 3e-4}.get(opt, 3e-3)
    cfg = make_cfg(tmp_path / "run", cache,
                   model={"tie_embeddings": schedule != "pipedream"},
                   optimizer={"name": opt, "lr": lr},
                   pipeline={"schedule": schedule, "stages": stages,
                             "microbatches": 2 if stages > 1 else 1},
                   delay={"correction": corr})
    res = loop.train(cfg)
    tl = losses(cfg.run_dir)
    assert res.finished and len(tl) == 6 and all(math.isfinite(x) for x in tl)
    delays = [r["delay"] for r in read_metrics(cfg.run_dir)]
    assert delays == [cfg.stage_delays()[0]] * 6
    assert math.isfinite(res.final_val_loss)


def test_sync_start_and_cooldown_switches(tmp_path, cache):
    cfg = make_cfg(tmp_path / "run", cache, train={"steps": 8},
                   pipeline={"schedule": "2bw", "stages": 2, "microbatches": 2},
                   delay={"correction": "ef", "sync_start": 2, "sync_cooldown": 2})
    loop.train(cfg)
    assert [r["delay"] for r in read_metrics(cfg.run_dir)] == [0, 0, 1, 1, 1, 1, 0, 0]


def test_moe_model_trains_with_muon_2bw_ef(tmp_path, cache):
    cfg = make_cfg(tmp_path / "run", cache, model={"name": "moe-tiny"},
                   optimizer={"name": "muon", "lr": 0.02},
                   pipeline={"schedule": "2bw", "stages": 2, "microbatches": 2},
                   delay={"correction": "ef"})
    loop.train(cfg)
    recs = read_metrics(cfg.run_dir)
    assert all(r["aux_loss"] > 0 for r in recs)


@pytest.mark.parametrize("schedule", ["2bw", "pipedream"])
def test_simulation_equals_one_delayed_optimizer(tmp_path, cache, schedule):
    """The loop (one optimizer per stage) realises the update rule of one DelayedOptimizer
    with one parameter group per stage — written out here independently of the loop: 2BW
    delay 1 per batch; PipeDream delays P−1−s, one update per microbatch."""
    cfg = make_cfg(tmp_path / "run", cache, model={"tie_embeddings": False},
                   train={"steps": 7, "grad_clip": 0.0, "eval_every": 0},
                   pipeline={"schedule": schedule, "stages": 2, "microbatches": 2},
                   delay={"correction": "ef"}, optimizer={"weight_decay": 0.1})
    loop.train(cfg)
    got = losses(cfg.run_dir)

    from asyncpp.data import BatchSampler, load_data
    from asyncpp.models import build_model, stage_named_parameters

    data = load_data(cfg.data, 512)
    model = build_model(cfg.model_config(), seed=0)
    groups = [{"params": [p for _, p in g]} for g in stage_named_parameters(model, 2)]
    opt = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    d = DelayedOptimizer(opt, delay=[1, 1] if schedule == "2bw" else [1, 0], correction="ef")
    sampler = BatchSampler(data.train, 4, seed=0)
    ref = []
    for t in range(7):
        for g in opt.param_groups:
            g["lr"] = 3e-3 * loop.lr_factor(t, 7, 0.1, 0.1)
        x, y = sampler.next_batch()
        total = 0.0
        for xm, ym in zip(x.chunk(2), y.chunk(2)):
            loss = loop.lm_loss(model(xm), ym)
            (loss / (2 if schedule == "2bw" else 1)).backward()
            total += loss.item() / 2
            if schedule == "pipedream":
                d.step()
                d.zero_grad()
        if schedule == "2bw":
            d.step()
            d.zero_grad()
        ref.append(total)
    assert got == ref  # bit-identical


def test_lr_schedule_warmup_and_cosine_to_ten_percent():
    f = [loop.lr_factor(t, 100, 0.1, 0.1) for t in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(f[:10], f[1:10]))
    assert all(a >= b for a, b in zip(f[10:], f[11:]))
    assert f[-1] == pytest.approx(0.1, abs=1e-3) and min(f[10:]) >= 0.1
    assert loop.lr_factor(55, 100, 0.1, 0.1) == pytest.approx(0.55)

    from asyncpp.optim import Muon

    w, n = torch.nn.Parameter(torch.randn(4, 4)), torch.nn.Parameter(torch.ones(4))
    opt = Muon([{"params": [w]}, {"params": [n], "use_muon": False}])
    cfg = from_dict({"optimizer": {"name": "muon", "lr": 0.02, "adamw_lr": 0.004}})
    loop.apply_lr(opt, cfg, 0.5)
    assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[1]["adamw_lr"] == 0.002


def test_clipping_global_versus_per_stage():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(4))
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0, 0.0, 0.0])
    from asyncpp.optim import clip_coefficient, scale_, squared_norm

    sq = [squared_norm(g) for g in ([a.grad], [b.grad])]
    assert [float(q) for q in sq] == [9.0, 16.0]
    total = torch.stack(sq).sum()
    for g in (a.grad, b.grad):  # global: ||g|| = 5 → scale 1/5
        scale_([g], clip_coefficient(total, 1.0))
    torch.testing.assert_close(a.grad, torch.tensor([0.6, 0.0, 0.0]), atol=1e-6, rtol=0)
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0, 0.0, 0.0])
    for g in (a.grad, b.grad):  # per stage: each to norm 1
        scale_([g], clip_coefficient(squared_norm([g]), 1.0))
    assert float(a.grad.norm()) == pytest.approx(1.0, abs=1e-6)
    assert float(b.grad.norm()) == pytest.approx(1.0, abs=1e-6)
    # Below the threshold nothing changes (the coefficient is capped at 1), bit for bit.
    g = torch.tensor([0.1, 0.2])
    scale_([g], clip_coefficient(squared_norm([g]), 1.0))
    assert torch.equal(g, torch.tensor([0.1, 0.2]))


def test_non_finite_loss_stops_or_skips(tmp_path, cache, monkeypatch):
    real = loop.lm_loss
    calls = {"n": 0}

    def flaky(logits, targets):
        calls["n"] += 1
        out = real(logits, targets)
        return out * float("nan") if calls["n"] == 3 else out

    from asyncpp.train import simulation

    monkeypatch.setattr(simulation, "lm_loss", flaky)
    cfg = make_cfg(tmp_path / "a", cache, train={"eval_every": 0, "checkpoint_every": 1})
    with pytest.raises(loop.TrainingError, match="non-finite loss at step 3"):
        loop.train(cfg)
    assert [s for s, _ in ckpt_io.list_checkpoints(cfg.run_dir)] == [1, 2]
    calls["n"] = 0
    cfg = make_cfg(tmp_path / "b", cache, train={"eval_every": 0, "on_nonfinite": "skip"})
    res = loop.train(cfg)
    assert res.finished
    assert [r.get("skipped", False) for r in read_metrics(cfg.run_dir)][:4] == \
        [False, False, True, False]


@pytest.mark.parametrize("sections", [
    dict(optimizer={"name": "muon", "lr": 0.02},
         pipeline={"schedule": "2bw", "stages": 2, "microbatches": 2},
         delay={"correction": "ef"}),
    dict(model={"name": "tiny", "n_layers": 3, "tie_embeddings": False},
         pipeline={"schedule": "pipedream", "stages": 3, "microbatches": 2},
         delay={"correction": "taylor"}, optimizer={"weight_decay": 0.1}),
    dict(optimizer={"name": "muon", "lr": 0.02},
         pipeline={"schedule": "2bw", "stages": 2, "microbatches": 2},
         delay={"correction": "ef", "track_updates": True, "spectral_drift": True}),
], ids=["muon-2bw-ef", "adamw-pipedream3-taylor", "muon-2bw-ef-tracked"])
def test_resume_gives_a_bit_identical_loss_sequence(tmp_path, cache, sections):
    train = {"steps": 10, "eval_every": 3, "checkpoint_every": 5}
    full = make_cfg(tmp_path / "full", cache, train=train, **sections)
    loop.train(full)
    part = make_cfg(tmp_path / "part", cache, train={**train, "stop_after": 4}, **sections)
    first = loop.train(part)
    assert not first.finished and first.steps_done == 4
    ck = ckpt_io.load_checkpoint(ckpt_io.list_checkpoints(part.run_dir)[-1][1])
    assert any(len(q) for st in ck["optimizers"] for q in st["queues"])  # pending gradients
    rest = make_cfg(tmp_path / "part", cache, train=train, **sections)
    assert loop.train(rest, resume=True).finished
    a, b = read_metrics(full.run_dir), read_metrics(part.run_dir)
    for key in ("train_loss", "grad_norm", "val_loss", "lr", "update_norm", "drift_norm",
                "drift_ratio", "spectral_drift"):
        assert [r.get(key) for r in a] == [r.get(key) for r in b], key
    tracked = sections.get("delay", {}).get("track_updates", False)
    if tracked:  # T2's drift on every step after the first, restored across the resume
        assert all(r.get("spectral_drift", 0) > 0 for r in a[1:] if "train_loss" in r)
    summaries = [json.loads((c.run_dir / "summary.json").read_text()) for c in (full, part)]
    for key in ("drift_ratio_mean", "drift_ratio_mean_second_half", "drift_updates",
                "spectral_drift_mean", "spectral_drift_mean_second_half"):
        assert (key in summaries[0]) == tracked
        assert summaries[0].get(key) == summaries[1].get(key), key
    sa = torch.load(ckpt_io.list_checkpoints(full.run_dir)[-1][1], weights_only=True)["model"]
    sb = torch.load(ckpt_io.list_checkpoints(part.run_dir)[-1][1], weights_only=True)["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_resume_refuses_another_config(tmp_path, cache):
    cfg = make_cfg(tmp_path / "run", cache, train={"stop_after": 2})
    loop.train(cfg)
    other = make_cfg(tmp_path / "run", cache, optimizer={"name": "muon", "lr": 0.02})
    with pytest.raises(loop.ConfigError, match="optimizer.name='adamw', this run has 'muon'"):
        loop.prepare_run(other, resume=True)
    ckpt = ckpt_io.list_checkpoints(cfg.run_dir)[-1][1]
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # truncated
    with pytest.raises(ValueError, match="truncated or corrupt"):
        loop.prepare_run(cfg, resume=True)


def test_cli_run_export_and_plot(tmp_path, cache, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from asyncpp.train import cli, plot

    monkeypatch.chdir(tmp_path)
    common = ["--data.max_documents", "60", "--data.seq_len", "16", "--train.batch_size", "4",
              "--data.cache_dir", str(cache), "--log.progress", "false", "--run.threads", "1",
              "--train.eval_every", "3", "--train.eval_batches", "1"]
    assert cli.main(["--run.name", "a", "--train.steps", "6", "--train.export", "true",
                     "--simulate", "--pipeline.schedule", "2bw", "--pipeline.stages", "2",
                     "--pipeline.microbatches", "2", "--delay.correction", "ef", *common]) == 0
    out = capsys.readouterr().out
    assert "loss plot: runs/a/loss.png" in out and "exported model: runs/a/export" in out
    assert (tmp_path / "runs/a/export/model.safetensors").is_file()
    cfg_json = json.loads((tmp_path / "runs/a/export/config.json").read_text())
    assert cfg_json["architectures"] == ["LlamaForCausalLM"] and cfg_json["hidden_size"] == 64
    assert (tmp_path / "runs/a/export/tokenizer.json").is_file()
    assert cli.main(["--run.name", "b", "--train.steps", "4", "--train.stop_after", "2",
                     *common]) == 0
    assert "continue with --resume" in capsys.readouterr().out
    assert cli.main(["--run.name", "b", "--resume", "--log.progress", "false"]) == 0
    assert plot.main(["runs/a", "runs/b", "-o", "cmp.png"]) == 0
    assert (tmp_path / "cmp.png").stat().st_size > 1000
    # Without -o the plot goes next to the runs, never into the current directory.
    assert plot.main(["runs/a", "runs/b"]) == 0
    assert (tmp_path / "runs/compare.png").stat().st_size > 1000
    assert not (tmp_path / "loss.png").exists() and not (tmp_path / "compare.png").exists()
    assert plot.main(["nowhere"]) == 2


def test_bf16_autocast_tensorboard_switch_and_finished_resume(tmp_path, cache):
    cfg = make_cfg(tmp_path / "run", cache, run={"precision": "bf16"}, train={"steps": 3})
    res = loop.train(cfg)
    assert res.finished and all(math.isfinite(x) for x in losses(cfg.run_dir))
    again = loop.train(cfg, resume=True)  # nothing left to do: outputs untouched
    assert again.finished and len(losses(cfg.run_dir)) == 3
    from asyncpp.train.metrics import tensorboard_available

    tb = make_cfg(tmp_path / "tb", cache, log={"tensorboard": "on"}, train={"steps": 2})
    if tensorboard_available():
        loop.train(tb)
        assert (tb.run_dir / "tb").is_dir()
    else:
        with pytest.raises(loop.ConfigError, match="tensorboard is not installed"):
            loop.prepare_run(tb, resume=False)
        assert not tb.run_dir.exists()


def test_track_updates_logs_the_applied_updates_without_changing_them(tmp_path, cache):
    """--delay.track_updates: the logged ‖u‖ and drift ratio equal those of the weight changes
    read back from per-step checkpoints (no correction: x_t − x_{t+1} is the applied update),
    and the run's losses equal the untracked run's."""
    T = 7
    sections = dict(optimizer={"name": "muon", "lr": 0.02, "weight_decay": 0.1},
                    pipeline={"schedule": "2bw", "stages": 2, "microbatches": 2},
                    train={"steps": T, "eval_every": 3, "checkpoint_every": 1,
                           "keep_checkpoints": T})
    plain = make_cfg(tmp_path / "plain", cache, **sections)
    tracked = make_cfg(tmp_path / "tracked", cache, delay={"track_updates": True}, **sections)
    loop.train(plain)
    loop.train(tracked)
    for key in ("train_loss", "val_loss", "grad_norm"):
        assert losses(plain.run_dir, key) == losses(tracked.run_dir, key), key
    assert "drift_ratio_mean" not in json.loads((plain.run_dir / "summary.json").read_text())

    def flat(step):
        sd = ckpt_io.load_checkpoint(ckpt_io.checkpoint_dir(tracked.run_dir)
                                     / f"step-{step:08d}.pt")["model"]
        keys = [k for k in sorted(sd) if sd[k].is_floating_point()
                and not (k == "output.weight" and torch.equal(sd[k], sd["tok_embeddings.weight"]))]
        return torch.cat([sd[k].double().reshape(-1) for k in keys])

    xs = {t: flat(t) for t in range(1, T + 1)}
    # 2BW in one process: step 1 fills the queue, step t applies u⁽ᵗ⁻²⁾, the last step also
    # flushes u⁽ᵀ⁻¹⁾, so steps 2 … T−1 each hold exactly one update.
    u = {t - 2: xs[t - 1] - xs[t] for t in range(2, T)}
    rec = {r["step"]: r for r in read_metrics(tracked.run_dir)}
    assert "update_norm" not in rec[1]
    rhos = []
    for n in range(T - 2):
        r = rec[n + 2]
        assert r["update_norm"] == pytest.approx(float(u[n].norm()), rel=1e-5)
        if n == 0:
            assert "drift_ratio" not in r
            continue
        rho = float((u[n] - u[n - 1]).norm() / u[n].norm())
        assert r["drift_ratio"] == pytest.approx(rho, rel=1e-4)
        rhos.append(rho)
    summary = json.loads((tracked.run_dir / "summary.json").read_text())
    assert summary["drift_updates"] == T
    # the last step's record averages its two updates (T−2 and the flushed T−1)
    expect = (sum(rhos) + 2 * rec[T]["drift_ratio"]) / (T - 1)
    assert summary["drift_ratio_mean"] == pytest.approx(expect, rel=1e-4)
    assert 0.0 < summary["drift_ratio_mean_second_half"] < 3.0


def test_ef_gamma_from_the_configuration_reaches_every_stage():
    """``--delay.ef_gamma``: a number, or auto (T3's γ*(β, τ) per stage, β = Muon's momentum);
    γ ≠ 1 without EF is refused before anything runs."""
    import torch

    from asyncpp.delay.ef_gamma import optimal_ef_gamma
    from asyncpp.train.components import build_stage_optimizer
    from asyncpp.train.config import ConfigError

    def cfg(**delay):
        c = from_dict({"model": {"name": "tiny"}, "optimizer": {"name": "muon", "momentum": 0.9},
                       "pipeline": {"schedule": "2bw", "stages": 2, "microbatches": 2},
                       "delay": {"correction": "ef", **delay}})
        validate(c)
        return c

    lin = torch.nn.Linear(4, 4)
    named = list(lin.named_parameters())
    d = build_stage_optimizer(cfg(ef_gamma="0.7"), named, 0, torch.device("cpu"))
    assert set(d.ef_gammas) == {0.7}
    d = build_stage_optimizer(cfg(ef_gamma="auto"), named, 1, torch.device("cpu"))
    assert d.ef_gammas[0] == pytest.approx(optimal_ef_gamma(0.9, 1)) \
        == pytest.approx(2 * 0.9 / (2 - 0.9) ** 2)
    assert set(build_stage_optimizer(cfg(), named, 0, torch.device("cpu")).ef_gammas) == {1.0}
    with pytest.raises(ConfigError, match="ef_gamma"):
        cfg(ef_gamma="-0.5")
    with pytest.raises(ConfigError, match="applies to --delay.correction ef"):
        cfg(ef_gamma="0.5", correction="none")


def _flushes() -> bool:
    return bool((torch.tensor([1e-39], dtype=torch.float32) * 1.0 == 0).item())


@pytest.mark.parametrize("flush", [True, False])
def test_flush_denormal_holds_while_the_run_trains_and_is_undone_after(tmp_path, cache, flush):
    """run.flush_denormal: subnormal float32 values are zero during every step of the run, and
    IEEE subnormals are back once it ends; off, the run computes with subnormals."""
    from asyncpp.train import train
    from asyncpp.train.trainer import Hooks

    seen = []
    cfg = make_cfg(tmp_path / "run", cache, run={"flush_denormal": flush})
    res = train(cfg, hooks=Hooks(on_step=lambda rec: seen.append(_flushes())))
    assert res.finished and len(seen) == cfg.train.steps
    assert set(seen) == {flush}
    assert not _flushes()
    summary = json.loads((cfg.run_dir / "summary.json").read_text())
    assert summary["subnormals_flushed"] is flush
