"""Compatibility names for code written against the first trainer (``asyncpp.train.loop``):
the one training loop is :mod:`asyncpp.train.trainer`, its building blocks are in
:mod:`asyncpp.train.components`. Nothing is defined here."""

from .components import (
    RESUME_FREE,
    TrainingError,
    apply_lr,
    build_stage_optimizer,
    check_resume_config,
    evaluate,
    lm_loss,
    lr_factor,
    optimizer_hparams,
    peak_memory_mb,
    prepare_run,
    resolve_device,
)
from .config import ConfigError
from .run import train, train_distributed
from .trainer import Hooks, RunResult

__all__ = ["RESUME_FREE", "ConfigError", "Hooks", "RunResult", "TrainingError", "apply_lr",
           "build_stage_optimizer", "check_resume_config", "evaluate", "lm_loss", "lr_factor",
           "optimizer_hparams", "peak_memory_mb", "prepare_run", "resolve_device", "train",
           "train_distributed"]
