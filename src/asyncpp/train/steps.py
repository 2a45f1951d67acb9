"""What a step backend hands the trainer: completed steps as device tensors, and the batch
stream it pulls from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class StepOut:
    """One completed step as a backend reports it: device tensors, nothing fetched.

    ``loss``: 0-dim (None where this rank does not see the loss); ``grad_sq``: one squared
    gradient norm per update of the step (this rank's share under torchrun); ``aux``: MoE
    load-balancing loss (0-dim) or None; ``drift``: (U², D²) per update with
    ``delay.track_updates``; ``skipped``: a non-finite step skipped (``on_nonfinite=skip``).
    """

    step: int
    loss: torch.Tensor | None
    grad_sq: torch.Tensor
    aux: torch.Tensor | None = None
    drift: list = field(default_factory=list)
    skipped: bool = False


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
        return dict(self._state)

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
        self._state = self.sampler.state_dict()
        self._ahead = None
