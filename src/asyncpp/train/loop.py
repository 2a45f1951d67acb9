r"""The training loop of one process, and the pieces a multi-process executor reuses.

One optimizer step :math:`t` of a run with P stages and m microbatches:

1. learning rate :math:`\eta_t = \eta_\text{peak}\, f(t)` on every parameter group (Muon's
   matrix groups with ``optimizer.lr``, its AdamW side with ``optimizer.adamw_lr``), with
   linear warmup over :math:`W` steps and cosine decay to :math:`r = ` ``min_lr_ratio``:

   .. math::
       f(t) = \begin{cases} (t+1)/W & t < W\\
       r + (1-r)\,\tfrac12\big(1 + \cos(\pi\,(t-W)/(T-W))\big) & t \ge W\end{cases}

2. gradient :math:`g_t = \frac1m\sum_{i=1}^m \nabla \ell(x_t; \xi_{t,i})` (microbatch
   accumulation, exactly what a pipeline computes for one batch). PipeDream instead makes one
   update per microbatch (each microbatch is a minibatch, as in the executor), so a step of
   PipeDream is m updates, all with :math:`\eta_t`, and its delays count updates;
3. clipping of :math:`g_t` *when it is computed, before it enters the delay queue*:
   ``global`` scales all stages by :math:`\min(1, c/\|g_t\|)`, ``stage`` scales stage s by
   :math:`\min(1, c/\|g_{t,s}\|)`. In a real pipeline the global norm needs one scalar
   all-reduce over the stages of the same batch — a synchronisation point that an async
   schedule otherwise avoids (the last stage finishes batch t's backward while the first is
   still on t's forward of the next version); ``stage`` clipping needs no communication;
4. each stage's :class:`~asyncpp.delay.DelayedOptimizer` consumes :math:`g_{t,s}` and applies
   the update due now: :math:`\tau_s = 0` (none, gpipe, 1f1b), 1 (2bw) or :math:`P-1-s`
   (pipedream), with the configured correction and synchronous start/cooldown.

In one process the stages are parameter groups of one model (the partition of
:func:`asyncpp.models.partition_layers`), each with its own optimizer — exactly what every
rank of the pipeline executor builds for its stage, so the two realise the same update rule.
At the end of the run the pending gradients are applied (:meth:`DelayedOptimizer.flush`), as a
draining pipeline would, before the final validation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data import BatchSampler, DataBundle, eval_batches, load_data
from ..delay import DelayedOptimizer, DriftMeter
from ..models import Transformer, build_model, stage_named_parameters
from ..optim import build_optimizer
from . import checkpoint as ckpt_io
from .config import Config, ConfigError, to_toml
from .metrics import MetricsWriter, tensorboard_available, truncate_metrics

log = logging.getLogger(__name__)

# Config fields that may differ between a checkpoint and the run resuming it.
RESUME_FREE = {
    "run": {"name", "dir", "device", "compile", "overwrite", "threads"},
    "data": {"cache_dir"},
    "train": {"eval_every", "eval_batches", "log_every", "checkpoint_every", "keep_checkpoints",
              "stop_after", "export"},
    "pipeline": {"simulate"},
    "log": {"progress", "tensorboard", "plot"},
}


class TrainingError(RuntimeError):
    """The run cannot continue (non-finite loss, ...); the message names the step."""


# -- building blocks (also for the multi-process executor) ----------------------------------------
def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA if available, else CPU; a CUDA request without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"run.device={name!r} but CUDA is not available; use --run.device cpu")
    return dev


def optimizer_hparams(cfg: Config, device: torch.device) -> dict:
    """Keyword arguments of :func:`asyncpp.optim.build_optimizer` for ``cfg.optimizer``."""
    o = cfg.optimizer
    if o.name == "muon":
        ns = o.ns_dtype if o.ns_dtype != "auto" else (
            "bfloat16" if device.type == "cuda" else "float32")
        return dict(lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                    weight_decay=o.weight_decay, ns_steps=o.ns_steps, ns_dtype=ns,
                    adjust_lr_fn=o.adjust_lr_fn, adamw_lr=o.adamw_lr,
                    adamw_betas=(o.beta1, o.beta2), adamw_eps=o.eps,
                    adamw_weight_decay=o.adamw_weight_decay)
    if o.name == "adamw":
        return dict(lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)
    # SOAP, Adan, Lion, MARS: β1 through "momentum", the other betas at their defaults.
    return dict(lr=o.lr, weight_decay=o.weight_decay, momentum=o.beta1)


def build_stage_optimizer(cfg: Config, named_params, stage: int,
                          device: torch.device) -> DelayedOptimizer:
    """The optimizer of pipeline stage ``stage`` over its ``(name, param)`` pairs, wrapped in a
    :class:`DelayedOptimizer` with the stage's delay τ_s and the configured correction."""
    opt = build_optimizer(cfg.optimizer.name, named_params, **optimizer_hparams(cfg, device))
    d = cfg.delay
    return DelayedOptimizer(opt, delay=cfg.stage_delays()[stage], correction=d.correction,
                            taylor_lambda=d.taylor_lambda, sync_start=d.sync_start,
                            sync_cooldown=d.sync_cooldown, total_steps=cfg.train.steps,
                            formulation=d.formulation, track_updates=d.track_updates)


def lr_factor(step: int, total: int, warmup_frac: float, min_ratio: float) -> float:
    """f(t) of the module docstring (step is 0-based)."""
    W = round(warmup_frac * total)
    if W and step < W:
        return (step + 1) / W
    progress = min(1.0, (step - W) / max(1, total - W))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def apply_lr(optimizer: torch.optim.Optimizer, cfg: Config, factor: float) -> None:
    r"""Set :math:`\eta_t` on every group: Muon groups ``lr``, Muon's AdamW groups
    ``adamw_lr``, other optimizers' groups ``lr`` — each its own peak times ``factor``."""
    o = cfg.optimizer
    for g in optimizer.param_groups:
        if "use_muon" in g and not g["use_muon"]:
            g["adamw_lr"] = o.adamw_lr * factor
        else:
            g["lr"] = o.lr * factor


def grad_norms(stage_params: list[list[torch.nn.Parameter]]) -> list[float]:
    r""":math:`\|g_s\|_2` of each stage's gradient, as
    :math:`\big(\sum_p \|g_p\|_2^2\big)^{1/2}` accumulated in float64 (the executor's sum)."""
    out = []
    for params in stage_params:
        sq = torch.zeros((), dtype=torch.float64)
        for p in params:
            if p.grad is not None:
                sq += torch.linalg.vector_norm(p.grad).double().cpu() ** 2
        out.append(math.sqrt(float(sq)))
    return out


def clip_gradients(stage_params, norms: list[float], max_norm: float, scope: str) -> None:
    r"""Scale gradients in place: ``global`` by :math:`\min(1, c/(\|g\|+10^{-6}))` with
    :math:`\|g\|^2 = \sum_s \|g_s\|^2` (what the executor does, with one scalar all-reduce
    over the stages); ``stage`` each stage by :math:`\min(1, c/(\|g_s\|+10^{-6}))`."""
    if max_norm <= 0:
        return
    if scope == "global":
        total = math.sqrt(sum(n * n for n in norms))
        coefs = [min(max_norm / (total + 1e-6), 1.0)] * len(norms)
    else:
        coefs = [min(max_norm / (n + 1e-6), 1.0) for n in norms]
    for params, c in zip(stage_params, coefs):
        for p in params:
            if p.grad is not None:
                p.grad.mul_(c)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    r"""Mean next-token cross-entropy :math:`-\frac{1}{BT}\sum \log p(y_{b,t}\mid x_{b,\le t})`
    (computed in float32)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


@torch.no_grad()
def evaluate(model, windows, batch_size: int, num_batches: int, device, autocast) -> float:
    """Mean validation loss over the fixed validation batches."""
    was = model.training
    model.eval()
    total, n = 0.0, 0
    for x, y in eval_batches(windows, batch_size, num_batches):
        with autocast():
            logits = model(x.to(device))
        total += float(lm_loss(logits, y.to(device))) * x.shape[0]
        n += x.shape[0]
    model.train(was)
    return total / max(n, 1)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: max allocated; CPU: the process's max resident set size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step_timing(t0: float, tokens: int, device: torch.device) -> dict[str, float]:
    """The timing fields of a step's metrics record: wall time since ``t0`` (after a CUDA
    synchronize, so queued kernels are counted), tokens/s and peak memory."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dt = time.perf_counter() - t0
    return {"tokens_per_s": tokens / dt, "step_time_s": dt, "peak_mem_mb": peak_memory_mb(device)}


def check_resume_config(saved: dict, cfg: Config) -> None:
    """ConfigError naming the first setting that differs from the checkpoint's (except the
    bookkeeping fields in ``RESUME_FREE``)."""
    mine = cfg.resolved().to_dict()
    for sec, body in mine.items():
        for k, v in body.items():
            if k in RESUME_FREE.get(sec, ()):
                continue
            old = saved.get(sec, {}).get(k)
            if old != v:
                raise ConfigError(
                    f"the checkpoint was made with {sec}.{k}={old!r}, this run has {v!r}; resume "
                    f"with the checkpoint's settings (config.toml in the run directory)")


# -- the run ----------------------------------------------------------------------------------
@dataclass
class Hooks:
    """How the loop talks to its caller (the CLI owns the terminal)."""

    on_start: Callable[[int, int], None] = lambda start, total: None
    on_step: Callable[[dict], None] = lambda record: None
    on_message: Callable[[str], None] = lambda text: None
    should_stop: Callable[[], bool] = lambda: False


@dataclass
class RunResult:
    run_dir: Path
    steps_done: int
    finished: bool
    final_train_loss: float | None = None
    final_val_loss: float | None = None
    first_train_loss: float | None = None
    tokens_per_s: float | None = None
    wall_s: float = 0.0
    plot: Path | None = None
    export: Path | None = None


def prepare_run(cfg: Config, *, resume: bool,
                distributed: bool = False) -> tuple[DataBundle, dict | None, torch.device]:
    """Everything that can fail on bad input, before anything is written: device, data,
    tokenizer/vocabulary, resume checkpoint and its config, run directory state
    (``distributed``: called by a rank of a torchrun launch)."""
    device = resolve_device(cfg.run.device)
    if cfg.log.tensorboard == "on" and not tensorboard_available():
        raise ConfigError("log.tensorboard='on' but tensorboard is not installed; "
                          "`pip install tensorboard` or use --log.tensorboard auto")
    run_dir = cfg.run_dir
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run.dir={str(run_dir)!r} is a file; choose a folder")
    mc = cfg.model_config()
    try:  # unwritable folder, a path below a file, too little free space: before training
        ckpt_io.check_writable(run_dir, ckpt_io.estimate_run_bytes(
            mc.num_params(), cfg.train.keep_checkpoints))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    ckpt = None
    if resume:
        found = ckpt_io.list_checkpoints(run_dir)
        if not found:
            raise ConfigError(f"--resume: no checkpoint in {str(run_dir)!r}; start without "
                              "--resume or point --run.dir at the run")
        ckpt = ckpt_io.load_checkpoint(found[-1][1])
        check_resume_config(ckpt["config"], cfg)
        if "distributed" in ckpt and not distributed:
            raise ConfigError(f"the checkpoint was written by a torchrun launch of "
                              f"{ckpt['distributed']['world_size']} ranks; resume it under "
                              "torchrun with as many processes")
    elif run_dir.exists() and any(run_dir.iterdir()) and not cfg.run.overwrite:
        raise ConfigError(f"run directory {str(run_dir)!r} already holds files; pass --resume to "
                          "continue that run, --run.overwrite true to replace it, or another "
                          "--run.name / --run.dir")
    data = load_data(cfg.data, mc.vocab_size)
    return data, ckpt, device


def _clear_run_dir(run_dir: Path) -> None:
    for name in ("metrics.jsonl", "config.toml", "config.json", "summary.json", "loss.png",
                 "tokenizer.json"):
        (run_dir / name).unlink(missing_ok=True)
    for sub in ("checkpoints", "tb", "export"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)


def train(cfg: Config, *, resume: bool = False, hooks: Hooks | None = None,
          prepared: tuple | None = None) -> RunResult:
    """Run (or resume) the single-process training described by ``cfg``."""
    hooks = hooks or Hooks()
    data, ckpt, device = prepared if prepared is not None else prepare_run(cfg, resume=resume)
    run_dir = cfg.run_dir
    # -- from here on, files are written -------------------------------------------------------
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.run.overwrite and not resume:
        _clear_run_dir(run_dir)
    # Per-invocation switches are not part of the run's recorded configuration.
    resolved = dataclasses.replace(
        cfg.resolved(), train=dataclasses.replace(cfg.train, stop_after=0),
        run=dataclasses.replace(cfg.run, overwrite=False))
    (run_dir / "config.toml").write_text(to_toml(resolved))
    (run_dir / "config.json").write_text(json.dumps(resolved.to_dict(), indent=2) + "\n")
    if data.tokenizer_file is not None:
        shutil.copyfile(data.tokenizer_file, run_dir / "tokenizer.json")

    t_wall = time.perf_counter()
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    mc = cfg.model_config()
    model = build_model(mc, device=device, seed=cfg.run.seed)
    torch.manual_seed(cfg.run.seed)
    P, m = cfg.pipeline.stages, cfg.pipeline.microbatches
    stage_named = stage_named_parameters(model, P)
    stage_params = [[p for _, p in named] for named in stage_named]
    dopts = [build_stage_optimizer(cfg, named, s, device) for s, named in enumerate(stage_named)]
    sampler = BatchSampler(data.train, cfg.train.batch_size, seed=cfg.run.seed)
    per_microbatch = cfg.pipeline.schedule == "pipedream"
    # One update per step (PipeDream: one per microbatch), so T·k updates in all.
    meter = DriftMeter.for_optimizers(dopts, cfg.train.steps * (m if per_microbatch else 1)) \
        if cfg.delay.track_updates else None
    start = 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        for d, state in zip(dopts, ckpt["optimizers"]):
            d.load_state_dict(_to_device(state, device))
        if meter is not None:
            meter.load_state_dict(ckpt["drift"])
        sampler.load_state_dict(ckpt["sampler"])
        ckpt_io.set_rng_state(ckpt["rng"])
        start = int(ckpt["step"])
        truncate_metrics(run_dir, start)
        hooks.on_message(f"resumed from step {start}")
    fwd = torch.compile(model) if cfg.run.compile else model
    use_tb = cfg.log.tensorboard == "on" or (cfg.log.tensorboard == "auto"
                                             and tensorboard_available())
    metrics = MetricsWriter(run_dir, tensorboard=use_tb)
    bf16 = cfg.run.precision == "bf16"

    def autocast():
        if not bf16:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=torch.bfloat16)

    T = cfg.train.steps
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    hooks.on_start(start, T)
    result = RunResult(run_dir=run_dir, steps_done=start, finished=False)
    last_ckpt_step = start if ckpt is not None else -1
    tok_time, tok_count = 0.0, 0

    def save(step: int) -> None:
        nonlocal last_ckpt_step
        if last_ckpt_step == step:
            return
        ckpt_io.save_checkpoint(run_dir, {
            "step": step, "config": resolved.to_dict(), "model": model.state_dict(),
            "optimizers": [d.state_dict() for d in dopts], "sampler": sampler.state_dict(),
            "rng": ckpt_io.rng_state(),
            **({"drift": meter.state_dict()} if meter is not None else {})},
            keep=cfg.train.keep_checkpoints)
        last_ckpt_step = step

    model.train()
    step = start
    try:
        while step < T:
            if cfg.train.stop_after and step - start >= cfg.train.stop_after or hooks.should_stop():
                save(step)
                hooks.on_message(f"stopped at step {step}; continue with --resume")
                break
            t0 = time.perf_counter()
            factor = lr_factor(step, T, cfg.train.warmup_frac, cfg.train.min_lr_ratio)
            for d in dopts:
                apply_lr(d.optimizer, cfg, factor)
            x, y = sampler.next_batch()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            record = {"step": step + 1, "tokens": (step + 1) * tokens_per_step,
                      "lr": cfg.optimizer.lr * factor,
                      "delay": max(d.delay_at(d.step_count, g) for d in dopts
                                   for g in range(len(d.param_groups)))}
            # 2BW/GPipe/1F1B: one update per batch (gradients of the m microbatches averaged).
            # PipeDream: one update per microbatch (each microbatch is a minibatch).
            mbs = list(zip(x.chunk(m), y.chunk(m)))
            updates = [[mb] for mb in mbs] if per_microbatch else [mbs]
            loss_sum, aux_sum, gnorms, skipped = 0.0, 0.0, [], False
            for group in updates:
                k = len(group)
                model.set_aux_loss_scale(1.0 / k)
                for xm, ym in group:
                    with autocast():
                        logits = fwd(xm)
                    loss = lm_loss(logits, ym)
                    (loss / k).backward()
                    loss_sum += loss.item() / m
                    aux = model.aux_loss()
                    if aux is not None:
                        aux_sum += aux.item() / m
                norms = grad_norms(stage_params)
                gnorm = math.sqrt(sum(n * n for n in norms))
                gnorms.append(gnorm)
                if not (math.isfinite(loss_sum) and math.isfinite(gnorm)):
                    if cfg.train.on_nonfinite == "stop":
                        good = ckpt_io.list_checkpoints(run_dir)
                        where = f"; last good checkpoint: {good[-1][1]}" if good else ""
                        what = "loss" if not math.isfinite(loss_sum) else "gradient"
                        raise TrainingError(
                            f"non-finite {what} at step {step + 1} (loss {loss_sum}, grad norm "
                            f"{gnorm}){where}; lower optimizer.lr or set "
                            "train.on_nonfinite='skip'")
                    for params in stage_params:
                        for p in params:
                            p.grad = None
                    skipped = True
                    continue
                clip_gradients(stage_params, norms, cfg.train.grad_clip, cfg.train.clip_scope)
                for d in dopts:
                    d.step()
                    d.zero_grad(set_to_none=True)
            train_loss = loss_sum
            record.update(train_loss=train_loss, grad_norm=sum(gnorms) / len(gnorms))
            if model.config.is_moe:
                record["aux_loss"] = aux_sum
            if skipped:
                record["skipped"] = True
            record.update(step_timing(t0, tokens_per_step, device))
            tok_time += record["step_time_s"]
            tok_count += tokens_per_step
            step += 1
            if result.first_train_loss is None and start == 0:
                result.first_train_loss = train_loss
            result.final_train_loss = train_loss
            last = step == T
            if data.val is not None and not last and cfg.train.eval_every \
                    and step % cfg.train.eval_every == 0:
                record["val_loss"] = evaluate(fwd, data.val, cfg.train.batch_size,
                                              cfg.train.eval_batches, device, autocast)
            if last:
                for d in dopts:
                    d.flush()
                if data.val is not None:
                    record["val_loss"] = evaluate(fwd, data.val, cfg.train.batch_size,
                                                  cfg.train.eval_batches, device, autocast)
                    result.final_val_loss = record["val_loss"]
            if meter is not None:
                record.update(meter.step_record(meter.collect(dopts)))
            if last or step % cfg.train.log_every == 0 or "val_loss" in record:
                metrics.write(record)
            hooks.on_step(record)
            if last or (cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0):
                save(step)
        result.steps_done = step
        result.finished = step >= T
    finally:
        metrics.close()
    result.wall_s = time.perf_counter() - t_wall
    result.tokens_per_s = tok_count / tok_time if tok_time else None
    if result.finished and step > start:
        _finish(cfg, model, data, result, meter.summary() if meter is not None else {})
    elif result.finished:
        hooks.on_message(f"the run is already complete ({T} steps); nothing to do")
    return result


def _finish(cfg: Config, model: Transformer, data: DataBundle, result: RunResult,
            extra: dict) -> None:
    run_dir = result.run_dir
    summary = {"steps": result.steps_done, "final_train_loss": result.final_train_loss,
               "final_val_loss": result.final_val_loss, "tokens_per_s": result.tokens_per_s,
               "wall_s": result.wall_s, "params": model.num_params(), **extra}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if cfg.train.export:
        from ..models.export import export_hf

        eos = data.tokenizer.eos_id if data.tokenizer is not None else None
        result.export = export_hf(model, run_dir / "export", tokenizer_file=data.tokenizer_file,
                                  eos_token_id=eos)
    if cfg.log.plot:
        try:
            from .plot import plot_runs

            result.plot = plot_runs([run_dir], run_dir / "loss.png")
        except ImportError:
            log.warning("matplotlib is not installed; no loss plot (pip install matplotlib)")


def _to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


# -- INTEGRATION POINT: the multi-process pipeline executor ------------------------------------
def run_distributed(cfg: Config, *, resume: bool, hooks: Hooks) -> RunResult:
    """Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set, world size > 1): the multi-process run.

    This is the single place where the trainer and :mod:`asyncpp.pipeline` meet; it delegates
    to :func:`asyncpp.train.distributed.train_distributed`. The wiring, per rank, mirrors
    :func:`train` step for step:

    1. ``device = init_distributed()``; ``topo = PipelineTopology.create(num_stages=P)``;
       ``data = load_data(cfg.data, vocab)`` (every rank; the cache writes are atomic);
    2. ``model = build_model(cfg.model_config(), device="meta")``; the stage is
       ``build_stage(model.pipeline_layers(), topo.stage, P, boundaries=pipeline_boundaries(
       L, P))`` (:func:`asyncpp.models.pipeline_boundaries`: the simulation's partition),
       then ``to_empty(device)`` + ``init_weights(cfg.run.seed)`` (split-independent init);
    3. ``dopt = build_stage_optimizer(cfg, stage.named_parameters(), topo.stage, device)``;
       ``PipelineExecutor(stage, dopt, schedule=..., num_microbatches=m, topology=topo,
       loss_fn=lm_loss, max_grad_norm=cfg.train.grad_clip or None, config=cfg.to_dict())``
       (``clip_scope='stage'`` has no executor equivalent yet);
    4. per step: ``apply_lr(dopt.optimizer, cfg, lr_factor(t, ...))``, one
       ``train_steps([sampler.next_batch()])`` call (so the lr changes every step, as here),
       metrics from the last stage through :class:`MetricsWriter`, ``ex.evaluate`` for
       validation, ``ex.state_dict()`` + the sampler state in one checkpoint per rank.
    """
    from .distributed import train_distributed  # the wiring above, in asyncpp.train.distributed

    return train_distributed(cfg, resume=resume, hooks=hooks)
