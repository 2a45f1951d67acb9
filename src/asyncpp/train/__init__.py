"""Training: configuration (TOML + CLI overrides), the loop, checkpoints, metrics, CLIs.

``asyncpp.train.config`` imports no torch (the CLI validates before loading anything heavy);
the other names are loaded on first use.
"""

from __future__ import annotations

import importlib

from .config import Config, ConfigError, load_config, to_toml, validate

_LAZY = {
    "Hooks": "loop",
    "RunResult": "loop",
    "TrainingError": "loop",
    "train": "loop",
    "prepare_run": "loop",
    "run_distributed": "loop",
    "build_stage_optimizer": "loop",
    "lr_factor": "loop",
    "apply_lr": "loop",
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
