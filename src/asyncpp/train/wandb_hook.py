"""``--log.wandb PROJECT``: every step's metrics record (the line ``metrics.jsonl`` gets) is
also logged to Weights & Biases, with the resolved configuration as the run's config.

``wandb`` is imported only when the option is set (the ``wandb`` extra); a missing package is
a configuration error found before anything is written. Only the process that writes the run
directory (rank 0 under ``torchrun``) logs.
"""

from __future__ import annotations

import dataclasses
import importlib

from .config import Config, ConfigError


def require_wandb(cfg: Config):
    """The ``wandb`` module if ``log.wandb`` is set (else ``None``); ``ConfigError`` naming the
    fix when it is set and not installed."""
    if not cfg.log.wandb:
        return None
    try:
        return importlib.import_module("wandb")
    except ImportError:
        raise ConfigError(f"log.wandb={cfg.log.wandb!r} but wandb is not installed; "
                          "pip install -e \".[wandb]\" or drop --log.wandb") from None


def with_wandb(hooks, cfg: Config, wandb):
    """``hooks`` that also start a W&B run at the first step and log each record by step."""
    if wandb is None:
        return hooks
    state = {"run": None}

    def on_start(start, total):
        state["run"] = wandb.init(project=cfg.log.wandb, name=cfg.run.name,
                                  dir=str(cfg.run_dir), config=cfg.resolved().to_dict(),
                                  resume="allow")
        hooks.on_start(start, total)

    def on_step(rec):
        wandb.log({k: v for k, v in rec.items() if v is not None}, step=rec["step"])
        hooks.on_step(rec)

    return dataclasses.replace(hooks, on_start=on_start, on_step=on_step)


def finish_wandb(wandb) -> None:
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
