"""Checkpoints: written atomically (temp file + fsync + rename), read with
``torch.load(weights_only=True)``, refused with a clear message when damaged.

A checkpoint is one file ``checkpoints/step-NNNNNNNN.pt`` holding a dict of tensors and plain
containers: ``format``, ``step``, ``config`` (the resolved config as a dict), ``model``,
``optimizers`` (one ``DelayedOptimizer.state_dict()`` per stage: wrapped optimizer state,
pending gradient queue, EF memory, step counter), ``sampler`` (data position), ``rng``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ..data.cache import atomic_write

FORMAT = "asyncpp-checkpoint-1"
_NAME = re.compile(r"^step-(\d{8})\.pt$")


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, path)`` of the run's checkpoints, oldest first."""
    d = checkpoint_dir(run_dir)
    if not d.is_dir():
        return []
    out = [(int(m.group(1)), d / f.name) for f in d.iterdir() if (m := _NAME.match(f.name))]
    return sorted(out)


def save_checkpoint(run_dir: str | os.PathLike, payload: dict, keep: int = 2) -> Path:
    """Write ``payload`` as the checkpoint of step ``payload['step']`` and keep only the
    newest ``keep`` checkpoints. The previous checkpoints survive a crash during the write."""
    path = checkpoint_dir(run_dir) / f"step-{int(payload['step']):08d}.pt"
    atomic_write(path, lambda f: torch.save({"format": FORMAT, **payload}, f))
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read a checkpoint safely (``weights_only=True``); ``ValueError`` if it is damaged or
    not an asyncpp checkpoint."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({first}); it is truncated or "
                         "corrupt — delete it to resume from the previous one") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not an asyncpp checkpoint (format {FORMAT})")
    return ckpt


def rng_state() -> dict:
    """Torch CPU (and CUDA, if initialised) generator states."""
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
