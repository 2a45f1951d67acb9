r"""``asyncpp-train`` under ``torchrun``: the training loop of :mod:`asyncpp.train.loop` on the
multi-process pipeline executor (:class:`asyncpp.pipeline.PipelineExecutor`).

World layout: ``WORLD_SIZE = dp · P`` with ``P = pipeline.stages``; rank ``r`` is stage
``r mod P`` of data-parallel replica ``r div P`` (stage-fastest, as
:meth:`PipelineTopology.create` splits it). Stage s holds the layers of
:func:`asyncpp.models.pipeline_boundaries` — the same groups as the single-process simulation —
initialised by :meth:`Transformer.init_weights` (per-parameter seeds, so a stage draws exactly
the weights the whole model would).

One optimizer step t (``train.batch_size`` = B sequences in all):

- every rank draws the same batch from the same :class:`BatchSampler`; replica k takes rows
  :math:`[kB/dp, (k+1)B/dp)` and splits them into m microbatches, so the gradient is
  :math:`g_t = \frac{1}{dp\,m}\sum_{k,i}\nabla\ell(x;\xi_{t,k,i})` — the simulation's mean over
  the m microbatches of the whole batch (B must be divisible by dp·m);
- one ``train_steps`` call per step; the update that applies a gradient at simulated step
  :math:`a` (``OptimizerStep.applied_at``; PipeDream counts microbatch updates) uses
  :math:`\eta_{\min(\lfloor a/k\rfloor,\,T-1)}` with k = m for PipeDream, 1 otherwise —
  exactly the rate the simulation's ``DelayedOptimizer.step`` (or its final ``flush``) uses
  for that gradient;
- clipping ``global``: the executor's :math:`\min(1, c/(\|g\|+10^{-6}))` over all stages;
  ``stage``: :math:`\min(1, c/(\|g_s\|+10^{-6}))` per stage (not with tied embeddings);
- the logged loss is the mean over microbatches and replicas (computed on the last stage);
  validation runs on the weights the next step reads (the simulation's weights at that point),
  the final one on the newest weights (the simulation's after ``flush``).

Outputs: rank 0 writes the run directory (config, ``metrics.jsonl``, summary, plot) and shows
the progress bar; the other ranks write only their checkpoint shards. A checkpoint of step N is
``checkpoints/step-N.shards/rank-R.pt`` per rank (``PipelineExecutor.state_dict()``: every live
weight version, optimizer + delay/EF state; data position; RNG), committed by rank 0 writing the
manifest ``checkpoints/step-N.pt`` after all shards are on disk (all files atomic).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import shutil
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..data import BatchSampler, eval_batches
from ..data.cache import atomic_write
from ..delay import DriftMeter
from ..models import build_model, pipeline_boundaries, split_stage
from ..pipeline import PipelineExecutor, PipelineTopology, build_stage, init_distributed
from . import checkpoint as ckpt_io
from .config import Config, ConfigError, to_toml
from .loop import (
    Hooks,
    RunResult,
    TrainingError,
    _clear_run_dir,
    apply_lr,
    build_stage_optimizer,
    lm_loss,
    lr_factor,
    prepare_run,
    resolve_device,
    step_timing,
)
from .metrics import MetricsWriter, tensorboard_available, truncate_metrics

log = logging.getLogger(__name__)

TIMEOUT_S = 600.0
"""Seconds any rank waits for a peer (message or collective) before failing with an error."""


def _drift_fields(meter: DriftMeter, dopt, k: int, dp: int, step: int,
                  device: torch.device) -> dict:
    """The drift fields of one step: every rank applied ``k`` updates of its stage; one
    all-reduce sums the squared norms over stages (and over the ``dp`` replicas, which hold the
    same update, hence the division)."""
    pairs = meter.collect([dopt])
    buf = torch.zeros(k, 3, dtype=torch.float64, device=device)
    for i, (u2, d2) in enumerate(pairs[:k]):
        buf[i] = torch.tensor([u2, d2, 1.0], dtype=torch.float64)
    dist.all_reduce(buf)
    world = dist.get_world_size()
    if len(pairs) != k or any(int(c) != world for c in buf[:, 2].tolist()):
        raise TrainingError(f"update tracking at step {step}: expected {k} updates on each of "
                            f"{world} ranks, this rank applied {len(pairs)}")
    return meter.step_record([(u2 / dp, d2 / dp) for u2, d2, _ in buf.tolist()])


def _shard_dir(run_dir: Path, step: int) -> Path:
    return ckpt_io.checkpoint_dir(run_dir) / f"step-{step:08d}.shards"


def _agree(error: str | None) -> None:
    """Collective: raise ``ConfigError`` on every rank if any rank reports an error."""
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, error)
    bad = [(r, e) for r, e in enumerate(everyone) if e]
    if bad:
        raise ConfigError(bad[0][1])


def _agree_stop(signum: int | None, flag: bool, device: torch.device) -> tuple[int | None, bool]:
    """Collective stop decision at a step boundary: (max_r s_r, OR_r f_r) over all ranks r.

    ``s_r`` is the signal rank r caught (0 if none), ``f_r`` its other stop reasons. One
    all-reduce (MAX) of two scalars, so every rank stops at the same step with the same signal
    (and exit status 128 + signal), whichever rank(s) the signal reached.
    """
    t = torch.tensor([float(signum or 0), 1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    sig = int(t[0].item())
    return (sig or None), bool(sig) or bool(t[1].item())


def check_layout(cfg: Config, world: int) -> tuple[int, int]:
    """``(dp, P)`` of a world of ``world`` ranks: dp = world / P; ``ConfigError`` unless
    B mod (dp·m) = 0 and the run uses only settings the executor realises."""
    P, m, B = cfg.pipeline.stages, cfg.pipeline.microbatches, cfg.train.batch_size
    if world % P:
        raise ConfigError(f"the world size {world} is not divisible by pipeline.stages={P}; "
                          f"launch a multiple of {P} processes")
    dp = world // P
    if B % (dp * m):
        raise ConfigError(
            f"train.batch_size={B} must split into {dp} data-parallel replicas × {m} "
            f"microbatches under torchrun ({world} ranks / {P} stages); use a multiple of "
            f"{dp * m}")
    mc = cfg.model_config()
    if cfg.train.clip_scope == "stage" and cfg.train.grad_clip > 0 and mc.tie_embeddings \
            and P > 1:
        raise ConfigError("train.clip_scope='stage' with tied embeddings has no multi-process "
                          "equivalent (the tied matrix belongs to stage 0 only in the "
                          "simulation); use --train.clip_scope global or "
                          "--model.tie_embeddings false")
    if cfg.train.on_nonfinite == "skip":
        raise ConfigError("train.on_nonfinite='skip' is not supported under torchrun (the "
                          "update is applied inside the pipeline before the loss is known); use "
                          "--train.on_nonfinite stop")
    if cfg.train.export:
        raise ConfigError("train.export is not supported under torchrun yet (each rank holds "
                          "one stage); export from a single-process run, or set "
                          "--train.export false")
    if cfg.run.compile:
        raise ConfigError("run.compile is not supported under torchrun yet (the executor calls "
                          "each stage through torch.func.functional_call); use "
                          "--run.compile false")
    return dp, P


def _lr_on_apply(dopt, cfg: Config, per_step: int) -> None:
    r"""Make ``dopt.apply_stale`` set :math:`\eta_{\min(\lfloor a/k\rfloor, T-1)}` first, with
    a = ``dopt.step_count`` (the executor sets it to ``OptimizerStep.applied_at``)."""
    inner = dopt.apply_stale
    T = cfg.train.steps

    def apply_stale(delay, stale_params=None):
        t = min(dopt.step_count // per_step, T - 1)
        apply_lr(dopt.optimizer, cfg, lr_factor(t, T, cfg.train.warmup_frac,
                                                 cfg.train.min_lr_ratio))
        return inner(delay, stale_params=stale_params)

    dopt.apply_stale = apply_stale


def _autocast_forward(forward, device: torch.device):
    def run(*args, **kwargs):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return forward(*args, **kwargs)
    return run


def _is_default(hooks: Hooks | None) -> bool:
    return hooks is None or all(getattr(hooks, f.name) is getattr(Hooks, f.name)
                                for f in dataclasses.fields(Hooks))


def train_distributed(cfg: Config, *, resume: bool = False,
                      hooks: Hooks | None = None) -> RunResult:
    """Run (or resume) ``cfg`` on this rank of a ``torchrun`` launch (see the module docstring
    for the layout and the update rule); returns the same :class:`RunResult` on every rank."""
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    try:
        device = init_distributed(resolve_device(cfg.run.device), timeout=TIMEOUT_S)
    except ValueError as e:  # an incomplete torchrun environment
        raise ConfigError(str(e)) from None
    try:
        return _run(cfg, resume, hooks, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(cfg: Config, resume: bool, hooks: Hooks | None, device: torch.device) -> RunResult:
    rank, world = dist.get_rank(), dist.get_world_size()
    dp, P = check_layout(cfg, world)
    m, B, T = cfg.pipeline.microbatches, cfg.train.batch_size, cfg.train.steps
    run_dir = cfg.run_dir

    # -- inputs: rank 0 first (trains/caches the tokenizer), then the others from the cache ----
    prepared = None
    for turn in (0, 1):
        err = None
        if (rank == 0) == (turn == 0):
            try:
                prepared = prepare_run(cfg, resume=resume, distributed=True)
            except (ConfigError, ValueError) as e:
                err = str(e)
            except OSError as e:  # e.g. an unwritable cache folder
                err = (f"{e.strerror or e}: {e.filename!r}; check data.path, data.cache_dir / "
                       "$ASYNCPP_CACHE and run.dir")
        _agree(err)
    data, manifest, _ = prepared
    layout = {"world_size": world, "stages": P, "dp": dp}
    err = None
    if manifest is not None:
        if "distributed" not in manifest:
            err = ("the checkpoint was written by a single-process run; resume it without "
                   "torchrun (asyncpp-train --resume)")
        elif manifest["distributed"] != layout:
            err = (f"the checkpoint was written with {manifest['distributed']}, this launch has "
                   f"{layout}; relaunch with world size {manifest['distributed']['world_size']}")
        elif not (_shard_dir(run_dir, int(manifest["step"])) / f"rank-{rank:05d}.pt").is_file():
            err = (f"the checkpoint of step {manifest['step']} lacks the shard of rank {rank}; "
                   "delete that checkpoint to resume from the previous one")
    _agree(err)

    # -- hooks: rank 0 reports, the others stay quiet --------------------------------------
    bar_state = None
    if rank != 0:
        hooks = Hooks()
    elif _is_default(hooks):
        from .cli import _progress_hooks

        hooks, bar_state = _progress_hooks(cfg, {"signal": None})
    stop = {"signal": None}
    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            stop["signal"] = signum
            signal.signal(signum, signal.SIG_DFL)
        old_handlers = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    resolved = dataclasses.replace(
        cfg.resolved(), train=dataclasses.replace(cfg.train, stop_after=0),
        run=dataclasses.replace(cfg.run, overwrite=False))
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.run.overwrite and not resume:
            _clear_run_dir(run_dir)
        (run_dir / "config.toml").write_text(to_toml(resolved))
        (run_dir / "config.json").write_text(json.dumps(resolved.to_dict(), indent=2) + "\n")
        if data.tokenizer_file is not None:
            shutil.copyfile(data.tokenizer_file, run_dir / "tokenizer.json")
    dist.barrier()

    t_wall = time.perf_counter()
    # -- this rank's stage ------------------------------------------------------------------
    topo = PipelineTopology.create(P, timeout=TIMEOUT_S)
    s = topo.stage
    mc = cfg.model_config()
    model = build_model(mc, device="meta")
    stage = build_stage(model.pipeline_layers(), s, P,
                        boundaries=pipeline_boundaries(mc.n_layers, P))
    split_stage(model, s, P)  # the same sub-modules as `stage`, others dropped
    model.to_empty(device=device)
    if mc.tie_embeddings and model.tok_embeddings is not None and model.output is not None:
        model.output.weight = model.tok_embeddings.weight  # to_empty unties
    model.init_weights(cfg.run.seed)
    per_microbatch = cfg.pipeline.schedule == "pipedream"
    model.set_aux_loss_scale(1.0 if per_microbatch else 1.0 / m)
    if cfg.run.precision == "bf16":
        stage.forward = _autocast_forward(stage.forward, device)
    torch.manual_seed(cfg.run.seed)

    dopt = build_stage_optimizer(cfg, stage.named_parameters(), s, device)
    _lr_on_apply(dopt, cfg, m if per_microbatch else 1)
    clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else None
    executor_clips = clip is not None and cfg.train.clip_scope == "global"
    tied = set(stage.tied_parameters) if (topo.is_last and P > 1) else set()
    norms: list[float] = []

    def on_gradients(update: int, grads: dict) -> None:
        if executor_clips:
            norms.append(ex.last_grad_norm)
            return
        sq = 0.0
        for n, g in grads.items():
            if n not in tied:
                sq += float(torch.linalg.vector_norm(g).double() ** 2)
        norms.append(sq)
        if clip is not None:  # stage scope
            coef = min(clip / (math.sqrt(sq) + 1e-6), 1.0)
            for g in grads.values():
                g.mul_(coef)

    schedule = cfg.pipeline.schedule if cfg.pipeline.schedule != "none" else "gpipe"
    ex = PipelineExecutor(stage, dopt, schedule=schedule, num_microbatches=m, topology=topo,
                          loss_fn=lm_loss, max_grad_norm=clip if executor_clips else None,
                          timeout=TIMEOUT_S, on_gradients=on_gradients,
                          config=resolved.to_dict())
    sampler = BatchSampler(data.train, B, seed=cfg.run.seed)
    meter = None
    if cfg.delay.track_updates:
        meter = DriftMeter.for_optimizers([dopt], T * (m if per_microbatch else 1))
        # The last stage's copy of a tied weight gets the same update as the first stage's.
        named = dict(stage.named_parameters())
        dopt.exclude_from_stats(named[n] for n in tied if n in named)
    start = 0
    if manifest is not None:
        start = int(manifest["step"])
        shard = ckpt_io.load_checkpoint(_shard_dir(run_dir, start) / f"rank-{rank:05d}.pt")
        ex.load_state_dict(shard["executor"])
        if meter is not None:
            meter.load_state_dict(shard["drift"])
        sampler.load_state_dict(shard["sampler"])
        ckpt_io.set_rng_state(shard["rng"])
        if rank == 0:
            truncate_metrics(run_dir, start)
        hooks.on_message(f"resumed from step {start}")

    lo, hi = topo.dp_rank * B // dp, (topo.dp_rank + 1) * B // dp
    val = []
    if data.val is not None:
        val = [(x, y) for x, y in eval_batches(data.val, B, cfg.train.eval_batches)
               if x.shape[0] % m == 0]

    def validate(version) -> float:
        sizes = [x.shape[0] for x, _ in val]
        losses = ex.evaluate([(x.to(device), y.to(device)) for x, y in val], version=version)
        return sum(v * n for v, n in zip(losses, sizes)) / max(sum(sizes), 1)

    metrics = None
    if rank == 0:
        use_tb = cfg.log.tensorboard == "on" or (cfg.log.tensorboard == "auto"
                                                 and tensorboard_available())
        metrics = MetricsWriter(run_dir, tensorboard=use_tb)
    tokens_per_step = B * cfg.data.seq_len
    max_delay = max(cfg.stage_delays())
    hooks.on_start(start, T)
    result = RunResult(run_dir=run_dir, steps_done=start, finished=False)
    last_ckpt = {"step": start if manifest is not None else -1}
    tok_time, tok_count = 0.0, 0

    def save(step: int) -> None:
        if last_ckpt["step"] == step:
            return
        shard = {"format": ckpt_io.FORMAT, "step": step, "rank": rank, "layout": layout,
                 "executor": ex.state_dict(), "sampler": sampler.state_dict(),
                 "rng": ckpt_io.rng_state(),
                 **({"drift": meter.state_dict()} if meter is not None else {})}
        atomic_write(_shard_dir(run_dir, step) / f"rank-{rank:05d}.pt",
                     lambda f: torch.save(shard, f))
        dist.barrier()  # every shard is on disk before the manifest commits the checkpoint
        if rank == 0:
            ckpt_io.save_checkpoint(run_dir, {
                "step": step, "config": resolved.to_dict(), "distributed": layout,
                "sampler": sampler.state_dict(), "rng": ckpt_io.rng_state()},
                keep=cfg.train.keep_checkpoints)
            kept = {st for st, _ in ckpt_io.list_checkpoints(run_dir)}
            for d in ckpt_io.checkpoint_dir(run_dir).glob("step-*.shards"):
                if int(d.name[5:13]) not in kept:
                    shutil.rmtree(d, ignore_errors=True)
        last_ckpt["step"] = step

    step = start
    stopped = False
    try:
        while step < T:
            want_stop = bool(cfg.train.stop_after and step - start >= cfg.train.stop_after)
            sig, halt = _agree_stop(stop["signal"], want_stop or hooks.should_stop(), device)
            if sig is not None:  # a signal on any rank stops every rank, with its status
                stop["signal"] = sig
            if halt:
                save(step)
                hooks.on_message(f"stopped at step {step}; continue with --resume")
                stopped = True
                break
            t0 = time.perf_counter()
            factor = lr_factor(step, T, cfg.train.warmup_frac, cfg.train.min_lr_ratio)
            x, y = sampler.next_batch()
            batch = (x[lo:hi].to(device, non_blocking=True),
                     y[lo:hi].to(device, non_blocking=True))
            idx = step * (m if per_microbatch else 1)
            record = {"step": step + 1, "tokens": (step + 1) * tokens_per_step,
                      "lr": cfg.optimizer.lr * factor,
                      "delay": 0 if dopt.schedule.in_sync_window(idx) else max_delay}
            norms.clear()
            loss = ex.train_steps([batch])[0]
            if executor_clips:
                gnorm = sum(norms) / len(norms) if norms else float("nan")
            else:
                k = m if per_microbatch else 1
                sq = torch.zeros(k, dtype=torch.float64, device=device)
                sq[:len(norms)] = torch.tensor(norms[:k], dtype=torch.float64)
                dist.all_reduce(sq)  # Σ over stages and replicas (replicas hold equal grads)
                gnorm = float((sq / dp).sqrt().mean())
            if not (math.isfinite(loss) and math.isfinite(gnorm)):
                what = "loss" if not math.isfinite(loss) else "gradient"
                good = ckpt_io.list_checkpoints(run_dir)
                where = f"; last good checkpoint: {good[-1][1]}" if good else ""
                raise TrainingError(f"non-finite {what} at step {step + 1} (loss {loss}, grad "
                                    f"norm {gnorm}){where}; lower optimizer.lr")
            record.update(train_loss=loss, grad_norm=gnorm)
            if meter is not None:
                record.update(_drift_fields(meter, dopt, m if per_microbatch else 1, dp,
                                            step + 1, device))
            record.update(step_timing(t0, tokens_per_step, device))
            tok_time += record["step_time_s"]
            tok_count += tokens_per_step
            step += 1
            if result.first_train_loss is None and start == 0:
                result.first_train_loss = loss
            result.final_train_loss = loss
            last = step == T
            if val and not last and cfg.train.eval_every and step % cfg.train.eval_every == 0:
                record["val_loss"] = validate(ex.version_for_step(ex.next_step))
            if last and val:
                record["val_loss"] = validate(None)
                result.final_val_loss = record["val_loss"]
            if metrics is not None and (last or step % cfg.train.log_every == 0
                                        or "val_loss" in record):
                metrics.write(record)
            hooks.on_step(record)
            if last or (cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0):
                save(step)
        # A signal during the last step: every rank reports it (same exit status everywhere).
        sig, _ = _agree_stop(stop["signal"], False, device)
        if sig is not None:
            stop["signal"] = sig
        result.steps_done = step
        result.finished = step >= T
    except TrainingError as e:
        if rank == 0:
            log.error("%s", e)
        result.steps_done = step
    finally:
        if metrics is not None:
            metrics.close()
        if bar_state is not None and bar_state["bar"] is not None:
            bar_state["bar"].close()
        for sig, h in old_handlers.items():
            signal.signal(sig, h)
    result.wall_s = time.perf_counter() - t_wall
    result.tokens_per_s = tok_count / tok_time if tok_time else None
    if rank == 0 and result.finished and step > start:
        summary = {"steps": step, "final_train_loss": result.final_train_loss,
                   "final_val_loss": result.final_val_loss, "tokens_per_s": result.tokens_per_s,
                   "wall_s": result.wall_s, "params": mc.num_params(), "world_size": world,
                   "stages": P, "dp": dp, **(meter.summary() if meter is not None else {})}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if cfg.log.plot:
            with contextlib.suppress(ImportError):
                from .plot import plot_runs

                result.plot = plot_runs([run_dir], run_dir / "loss.png")
    # Exit status for the CLI: 0 done or stopped by train.stop_after, 128 + signal when
    # interrupted (after the checkpoint), 1 failed.
    result.exit_code = 0 if result.finished or stopped else 1
    if stop["signal"] is not None:
        hooks.on_message(f"interrupted; checkpoint written at step {step}")
        result.exit_code = 128 + int(stop["signal"])
    return result
