r"""``torchrun --max-restarts N`` relaunches failed workers with the same arguments; what a
relaunched worker does with the run directory it finds.

- After a checkpoint: it resumes from the newest valid one (as ``--resume`` would).
- Before the first checkpoint: it starts the run afresh, deleting only its own launch's files.
  The run directory carries a marker, :data:`MARKER`, holding the launch's
  ``TORCHELASTIC_RUN_ID`` (written by rank 0 when a torchrun launch starts a run); a directory
  whose marker names this launch holds nothing but what this launch wrote, so replacing it
  loses nothing. A directory without the marker, or with another launch's, is someone else's
  run and stays protected ("already holds files").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import checkpoint as ckpt_io

MARKER = ".torchrun-launch"


def launch_id() -> str | None:
    """This torchrun launch's id (the same in every restart of it), or ``None``."""
    return os.environ.get("TORCHELASTIC_RUN_ID") or None


def restart_count() -> int:
    text = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return int(text) if text.isdigit() else 0


@dataclass(frozen=True)
class RestartPlan:
    resume: bool
    overwrite: bool
    note: str | None = None


def plan_restart(run_dir: Path, resume: bool, overwrite: bool) -> RestartPlan:
    """What this worker does with ``run_dir`` (see the module docstring); on a first launch,
    or with ``--resume`` given, the arguments as they are."""
    n = restart_count()
    if n == 0 or resume:
        return RestartPlan(resume, overwrite)
    if ckpt_io.list_checkpoints(run_dir):
        return RestartPlan(True, overwrite, f"torchrun restart {n}: resuming from the latest "
                           f"checkpoint in {run_dir}")
    marker = Path(run_dir) / MARKER
    ident = launch_id()
    if ident is not None and marker.is_file() and marker.read_text().strip() == ident:
        return RestartPlan(False, True, f"torchrun restart {n}: no checkpoint yet; starting "
                           f"the run afresh in {run_dir}")
    return RestartPlan(resume, overwrite)


def mark_launch(run_dir: Path) -> None:
    """Record this torchrun launch as the owner of a run it starts (nothing outside one)."""
    ident = launch_id()
    if ident is not None:
        (Path(run_dir) / MARKER).write_text(ident + "\n")
