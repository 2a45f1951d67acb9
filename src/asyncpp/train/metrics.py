"""Metrics: one JSON object per line in ``metrics.jsonl`` (and TensorBoard events if wanted).

Keys of a step line: ``step`` (optimizer steps done), ``tokens``, ``train_loss``, ``lr`` (of
the main parameter group), ``grad_norm`` (global, before clipping; PipeDream: mean over the step's m
updates), ``tokens_per_s``,
``step_time_s``, ``peak_mem_mb`` (CUDA: max allocated; CPU: the process's max RSS), ``delay``
(largest τ this step); optional ``aux_loss`` (MoE), ``val_loss`` (when validated at this
step), ``skipped`` (a non-finite step skipped).
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

log = logging.getLogger(__name__)


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no inf/nan
    return v


class MetricsWriter:
    """Append-only JSONL writer (line-buffered), with an optional TensorBoard mirror."""

    def __init__(self, run_dir: str | os.PathLike, tensorboard: bool = False) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._f = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / "tb"))

    def write(self, record: dict) -> None:
        self._f.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._f.flush()
        if self._tb is not None:
            step = record.get("step", 0)
            for k, v in record.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a ``metrics.jsonl`` (a torn last line is ignored)."""
    out = []
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.jsonl"
    with open(p, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def truncate_metrics(run_dir: str | os.PathLike, step: int) -> None:
    """Drop records after ``step`` (used on resume, so the file reads as one run)."""
    from ..data.cache import atomic_write

    p = Path(run_dir) / "metrics.jsonl"
    if not p.is_file():
        return
    keep = [r for r in read_metrics(p) if r.get("step", 0) <= step]
    data = "".join(json.dumps(r) + "\n" for r in keep).encode()
    atomic_write(p, lambda f: f.write(data))


def tensorboard_available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True
