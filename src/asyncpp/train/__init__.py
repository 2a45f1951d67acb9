"""Training: configuration (TOML + CLI overrides), the trainer and its two step backends,
checkpoints, metrics, CLIs.

``asyncpp.train.config`` imports no torch (the CLI validates before loading anything heavy);
the other names are loaded on first use.
"""

from __future__ import annotations

import importlib

from .config import Config, ConfigError, load_config, to_toml, validate

_LAZY = {
    "Hooks": "trainer",
    "RunResult": "trainer",
    "Trainer": "trainer",
    "TrainingError": "components",
    "train": "run",
    "train_distributed": "run",
    "prepare_run": "components",
    "build_stage_optimizer": "components",
    "lr_factor": "components",
    "apply_lr": "components",
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "MetricsWriter": "metrics",
    "read_metrics": "metrics",
    "plot_runs": "plot",
}

__all__ = ["Config", "ConfigError", "load_config", "to_toml", "validate", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
