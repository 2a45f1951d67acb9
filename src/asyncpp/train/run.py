r"""Entry points of a training run: :func:`train` (one process,
:class:`~asyncpp.train.simulation.SimulationBackend`) and :func:`train_distributed` (one rank of a
``torchrun`` launch, :class:`~asyncpp.train.pipelined.PipelineBackend`), both driving the one
:class:`~asyncpp.train.trainer.Trainer`.

Start-up of a rank, in order: join the process group; compare the resolved configuration of
every rank (a difference stops every rank with one line per differing key,
:func:`~asyncpp.train.config.rank_differences`); prepare the data; on resume, pick the newest
checkpoint whose manifest and every rank's shard pass their checksums (a newer damaged one is
skipped with a note, never deleted) — or, written by another layout, whose change
:func:`~asyncpp.train.layouts.change_error` allows and whose every file loads; build the stage.
A peer that dies or stalls in any of these collectives ends the set-up with one line naming the
phase and the peer (:func:`~asyncpp.pipeline.topology.setup_phase`).
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from . import checkpoint as ckpt_io
from .components import TrainingError, prepare_run, resolve_device
from .config import Config, ConfigError
from .interrupts import stop_on_signals
from .trainer import Hooks, RunResult, Trainer

__all__ = ["train", "train_distributed"]


@contextlib.contextmanager
def _subnormals(flush: bool):
    """``run.flush_denormal``: the CPU flushes subnormal floats to zero (FTZ/DAZ) while the run
    trains; IEEE subnormals are restored when it ends, so nothing else in the process sees the
    mode. A CPU that cannot flush is a configuration error, not a silent slow run."""
    if not flush:
        yield
        return
    if not torch.set_flush_denormal(True):
        raise ConfigError("run.flush_denormal=true but this CPU cannot flush subnormal floats "
                          "(torch.set_flush_denormal needs SSE3); set --run.flush_denormal false")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def train(cfg: Config, *, resume: bool = False, hooks: Hooks | None = None,
          prepared: tuple | None = None, stop: dict | None = None) -> RunResult:
    """Run (or resume) ``cfg`` in this process (:class:`SimulationBackend`). ``stop``: a dict
    whose ``"signal"`` entry a signal handler sets (the CLI's); the run stops at the next step
    with a checkpoint."""
    from .simulation import SimulationBackend

    data, ckpt, device = prepared if prepared is not None else prepare_run(cfg, resume=resume)
    backend = SimulationBackend(cfg, data, device, stop if stop is not None else {})
    with _subnormals(cfg.run.flush_denormal):
        return Trainer(cfg, backend, hooks=hooks, manifest=ckpt, data=data).run(resume=resume)


def train_distributed(cfg: Config, *, resume: bool = False,
                      hooks: Hooks | None = None) -> RunResult:
    """Run (or resume) ``cfg`` on this rank of a ``torchrun`` launch
    (:class:`~asyncpp.train.pipelined.PipelineBackend`); returns the same
    :class:`RunResult` on every rank (exit status 128 + signal when interrupted)."""
    import torch.distributed as dist

    from ..pipeline import init_distributed
    from .pipelined import PipelineBackend, prepare_distributed

    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    try:
        device = init_distributed(resolve_device(cfg.run.device), timeout=cfg.run.peer_timeout_s)
    except ValueError as e:  # an incomplete torchrun environment
        raise ConfigError(str(e)) from None
    from ..pipeline.topology import setup_error, setup_phase

    stop = {"signal": None}
    timeout = cfg.run.peer_timeout_s
    try:
        with stop_on_signals(stop), _subnormals(cfg.run.flush_denormal):
            with setup_phase("the start-up configuration check", timeout):
                check_same_config(cfg)
            with setup_phase("the start-up data preparation", timeout):
                data, manifest = prepare_distributed(cfg, resume)
            notes: list[str] = []
            if manifest is not None:
                notes = list(manifest.pop("skipped", None) or [])
                with setup_phase("the start-up checkpoint check", timeout):
                    manifest = complete_checkpoint(cfg, manifest, notes)
            if dist.get_rank() != 0 or hooks is None:
                hooks = Hooks()
            for note in [data.description, *data.warnings, *notes]:
                hooks.on_message(note)
            phase = {"setup": True}
            user_start = hooks.on_start

            def on_start(start, total):  # set-up (groups, start-up checks) is over
                phase["setup"] = False
                user_start(start, total)

            hooks = dataclasses.replace(hooks, on_start=on_start)
            backend = PipelineBackend(cfg, data, device, stop)
            trainer = Trainer(cfg, backend, hooks=hooks, manifest=manifest, data=data)
            try:
                return trainer.run(resume=resume)
            except TrainingError as e:
                return dataclasses.replace(trainer.result, exit_code=1, error=str(e))
            except OSError as e:  # rank 0's metrics or summary (a full disk): one line
                return dataclasses.replace(
                    trainer.result, exit_code=1,
                    error=f"writing the run failed ({ckpt_io.disk_error_text(e)}); "
                          f"{ckpt_io.newest_checkpoint_text(cfg.run_dir)}")
            except dist.DistError as e:
                if not phase["setup"]:
                    raise
                raise setup_error("the pipeline set-up", timeout, e) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def check_same_config(cfg: Config) -> None:
    """Collective: ``ConfigError`` on every rank unless every rank resolved the same
    configuration; rank 0's message has one line per differing key with each rank's value."""
    import torch.distributed as dist

    from .config import rank_differences

    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, cfg.resolved().to_dict())
    lines = rank_differences(everyone)
    if not lines:
        return
    if dist.get_rank() == 0:
        raise ConfigError(f"the configuration differs across ranks in {len(lines)} "
                          f"key{'s' if len(lines) > 1 else ''}; launch every rank with the same "
                          "configuration file and options:\n" + "\n".join(f"  {ln}"
                                                                          for ln in lines))
    raise ConfigError(f"rank {dist.get_rank()}: the configuration differs from rank 0's (rank 0 "
                      "lists the keys)")


def complete_checkpoint(cfg: Config, manifest: dict, notes: list[str]) -> dict:
    """Collective: the manifest of the newest checkpoint, at or before ``manifest``'s step,
    that every rank can resume: written by this launch's layout, its manifest and each rank's
    own shard load and pass their checksums; written by another layout
    (:mod:`asyncpp.train.layouts`), the change is allowed and every rank reads the whole
    checkpoint (``"shards"``; marked ``"resharded_from"``). Each newer one skipped adds a note
    to ``notes`` naming it, the rank and why; nothing is deleted. ``ConfigError`` if none can
    be resumed."""
    import torch.distributed as dist

    from . import checkpoint as ckpt_io
    from .config import from_dict
    from .layouts import change_error, checkpoint_layout, resume_note
    from .pipelined import launch_layout

    rank, world = dist.get_rank(), dist.get_world_size()
    here = launch_layout(cfg, world)
    newest = int(manifest["step"])
    found = [(s, p) for s, p in ckpt_io.list_checkpoints(cfg.run_dir) if s <= newest]
    faults = []
    for step, path in reversed(found):
        mine, m = None, manifest
        where = ckpt_io.shard_path(cfg.run_dir, step, rank)
        try:
            if step != newest:
                m = ckpt_io.load_checkpoint(path)
            old, saved = checkpoint_layout(m), from_dict(m["config"])
            if old == here and saved.pipeline.microbatches == cfg.pipeline.microbatches:
                if not where.is_file():
                    raise FileNotFoundError(f"{str(where)!r} is missing")
                shard = ckpt_io.load_checkpoint(where)
                if int(shard["step"]) != step:
                    raise ValueError(f"{str(where)!r} holds step {shard['step']}, not {step}")
            else:
                err = change_error(saved, cfg, old, here, step)
                if err:
                    raise ValueError(err)
                if old.distributed:
                    m["shards"] = ckpt_io.load_shards(cfg.run_dir, step, old.processes)
                m["resharded_from"] = resume_note(saved, cfg, old, here, step)
        except (ValueError, KeyError, OSError) as e:  # OSError: the shard is missing
            failed = next((f for f in (where, *ckpt_io.shard_dir(cfg.run_dir, step).glob("*"))
                           if str(f) in str(e)), path)
            mine = f"{failed.name} {ckpt_io.fault_text(str(e), failed)}"
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        bad = [(r, e) for r, e in enumerate(everyone) if e]
        if not bad:
            notes.extend(f"{f}; resuming from {path.name}" for f in faults)
            if m.get("resharded_from"):
                notes.append(m["resharded_from"])
            m.pop("skipped", None)
            return m
        r, why = bad[0]
        faults.append(f"skipped {path.name}: on rank {r}, {why}")
    raise ConfigError("no checkpoint in {!r} can be resumed on every rank: {}".format(
        str(ckpt_io.checkpoint_dir(cfg.run_dir)), "; ".join(faults)))
