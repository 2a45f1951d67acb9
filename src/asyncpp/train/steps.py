"""What a step backend hands the trainer: completed steps as device tensors, and the batch
stream it pulls from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from .components import Evaluation


@dataclass
class StepOut:
    """One completed step as a backend reports it: device tensors, nothing fetched.

    ``loss``: 0-dim (None where this rank does not see the loss); ``grad_sq``: one squared
    gradient norm per update of the step (this rank's share under torchrun); ``aux``: MoE
    load-balancing loss (0-dim) or None; ``drift``: (U², D²) per update with
    ``delay.track_updates``; ``spectral``: T2's δₙ per update with
    ``delay.spectral_drift`` (host floats); ``skipped``: a non-finite step skipped
    (``on_nonfinite=skip``).
    """

    step: int
    loss: torch.Tensor | None
    grad_sq: torch.Tensor
    aux: torch.Tensor | None = None
    drift: list = field(default_factory=list)
    skipped: bool = False
    spectral: list = field(default_factory=list)


class Prefetcher:
    """The training batches of a run: draws step t + 1's batch while step t runs, in pinned
    memory on CUDA, copied to the device without blocking.

    ``rows``: the slice of every batch this rank uses (data parallelism); ``need``: (inputs,
    targets) — a rank that needs neither still advances the sampler, so every rank's sampler
    is at the same position. :meth:`state_dict` is the sampler's state after the last batch
    handed out (what a checkpoint must record), not after the one drawn ahead.
    """

    def __init__(self, sampler, device: torch.device, rows: slice = slice(None),
                 need: tuple[bool, bool] = (True, True)) -> None:
        self.sampler, self.device, self.rows, self.need = sampler, device, rows, need
        self._pin = device.type == "cuda"
        self._ahead = None
        self._state = sampler.state_dict()

    def _draw(self):
        x, y = self.sampler.next_batch()
        after = self.sampler.state_dict()
        out = []
        for t, want in zip((x, y), self.need):
            if not want:
                out.append(None)
                continue
            t = t[self.rows]
            if self._pin:
                t = t.pin_memory()
            out.append(t.to(self.device, non_blocking=True))
        return tuple(out), after

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        if self._ahead is None:
            self._ahead = self._draw()
        batch, self._state = self._ahead
        self._ahead = self._draw()
        return batch

    def state_dict(self) -> dict:
        """The sampler's state after the last batch handed out (for a checkpoint)."""
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        """Resume the sampler at ``state``; nothing is drawn ahead yet."""
        self.sampler.load_state_dict(state)
        self._state = self.sampler.state_dict()
        self._ahead = None


class StepBackend(Protocol):
    """What :class:`~asyncpp.train.trainer.Trainer` needs from a way of running steps
    (implemented by :class:`~asyncpp.train.simulation.SimulationBackend` and
    :class:`~asyncpp.train.pipelined.PipelineBackend`)."""

    is_writer: bool
    """This process writes the run directory (rank 0)."""
    world: int
    """Processes (devices) running the job, for the MFU."""
    lookahead: int
    """Steps the first stage runs ahead of a step's completion; decisions (stop) shared across
    ranks take effect ``lookahead`` steps after they are known (0 in one process)."""
    device: torch.device
    has_validation: bool
    next_step: int
    meter: object

    def barrier(self) -> None:
        """Wait for every process (after rank 0 has written the run files)."""

    def setup(self, manifest: dict | None) -> int:
        """Build model, optimizers and data stream; load ``manifest``'s checkpoint; return the
        first step to run."""

    def run(self, first: int, num_steps: int) -> Iterator[StepOut]:
        """Run steps ``first ..`` (up to ``num_steps``), yielding each as it completes; the
        pipeline is quiet when the iterator ends."""

    def end_after(self, step: int) -> None:
        """Stop the running :meth:`run` after ``step``."""

    def pending_signal(self) -> int | None:
        """The signal this process caught, if any."""

    def post(self, outs: list[StepOut], stop: bool):
        """Start fetching (and, across ranks, summing) the stats of ``outs``; a handle."""

    def collect(self, handle) -> tuple[list[dict], int | None, bool]:
        """Per-step values (``loss``, ``grad_sq``, optional ``aux``, ``drift``), the signal any
        rank caught, and whether any rank asked to stop."""

    def delay_of(self, step: int) -> int:
        """The largest delay of ``step``'s updates."""

    def finish(self) -> None:
        """Apply what is still pending at the end of the run."""

    def evaluate(self, final: bool) -> Evaluation:
        """Validation on the weights the next step reads (``final``: the newest; the whole
        split with ``train.final_eval = "full"``)."""

    def save(self, step: int, config: dict) -> None:
        """Write the checkpoint of ``step`` (atomically; collective under torchrun)."""

    def summary_fields(self) -> dict:
        """Extra keys for ``summary.json``."""

    def rank_reports(self) -> list[dict]:
        """Every rank's :func:`~asyncpp.train.stage_report.rank_entry` (memory, time per
        stage), the same list on every rank (collective under torchrun)."""

    def export(self):
        """Export the model if configured (path) or ``None``."""
