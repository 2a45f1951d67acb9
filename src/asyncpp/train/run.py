r"""Entry points of a training run: :func:`train` (one process,
:class:`~asyncpp.train.simulation.SimulationBackend`) and :func:`train_distributed` (one rank of a
``torchrun`` launch, :class:`~asyncpp.train.pipelined.PipelineBackend`), both driving the one
:class:`~asyncpp.train.trainer.Trainer`."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading

import torch

from .components import TrainingError, prepare_run, resolve_device
from .config import Config, ConfigError
from .trainer import Hooks, RunResult, Trainer

__all__ = ["train", "train_distributed"]


@contextlib.contextmanager
def _signals(stop: dict):
    """SIGINT/SIGTERM set ``stop["signal"]`` (a second one ends the process at once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        stop["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def train(cfg: Config, *, resume: bool = False, hooks: Hooks | None = None,
          prepared: tuple | None = None, stop: dict | None = None) -> RunResult:
    """Run (or resume) ``cfg`` in this process (:class:`SimulationBackend`). ``stop``: a dict
    whose ``"signal"`` entry a signal handler sets (the CLI's); the run stops at the next step
    with a checkpoint."""
    from .simulation import SimulationBackend

    data, ckpt, device = prepared if prepared is not None else prepare_run(cfg, resume=resume)
    backend = SimulationBackend(cfg, data, device, stop if stop is not None else {})
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
    stop = {"signal": None}
    try:
        with _signals(stop):
            data, manifest = prepare_distributed(cfg, resume)
            if dist.get_rank() != 0:
                hooks = Hooks()
            backend = PipelineBackend(cfg, data, device, stop)
            trainer = Trainer(cfg, backend, hooks=hooks, manifest=manifest, data=data)
            try:
                return trainer.run(resume=resume)
            except TrainingError:
                return dataclasses.replace(trainer.result, exit_code=1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
