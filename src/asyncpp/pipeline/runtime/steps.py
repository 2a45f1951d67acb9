"""One :meth:`~.executor.PipelineExecutor.run_steps` call's stream: what a rank reports per
step, the state its stages share, and the batches read from the stream and split into
microbatches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class StepOutput:
    r"""What one rank reports when it completes step ``step`` (its last update of the step
    has been issued). Everything stays on the device; nothing here synchronises the host.

    ``loss``: on the rank of the last stage, the step's loss (mean over its m microbatches,
    this data-parallel replica), a float64 0-dim tensor; ``None`` on the other ranks.
    ``grad_sq``: float64 tensor of one entry per update of the step (PipeDream: m), this
    rank's :math:`\|g_s\|^2` (summed over its stages) after the data-parallel mean and before
    clipping; a weight tied between the first and the last stage counts once, on the first
    stage (as their sum); ``None`` when the executor does not track it
    (``track_grad_norm=False`` without clipping).
    """

    step: int
    loss: Tensor | None
    grad_sq: Tensor | None


@dataclass
class RunState:
    """The state of one ``run_steps`` call shared by the rank's stages."""

    batches: Iterator
    pulled: int
    scale: float
    data: dict
    done: dict
    """step → the stages of this rank that completed it (a step is reported once all have)."""


def split_batch(batch, m: int, device, what: str) -> list:
    """``batch`` (a tensor) as m equal microbatches along dim 0, on ``device``; ``what``
    names it ("inputs", "targets") in the error."""
    if not isinstance(batch, Tensor):
        raise ValueError(f"the {what} of a batch must be a tensor, got {type(batch).__name__}")
    if batch.shape[0] % m:
        raise ValueError(f"a batch of {batch.shape[0]} {what} cannot be split into "
                         f"{m} equal microbatches; use a batch size divisible by {m}")
    return [x.to(device, non_blocking=True) for x in torch.tensor_split(batch, m, dim=0)]


def pull(run: RunState, step: int, m: int, device, first: bool, last: bool) -> None:
    """Read the batches up to ``step`` from the stream into ``run.data`` (inputs if this rank
    holds the first stage, targets if it holds the last)."""
    while run.pulled < step:
        run.pulled += 1
        b = next(run.batches, None)
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise ValueError(
                f"step {run.pulled}: each batch must be a pair (inputs, "
                f"targets), got {type(b).__name__}"
                + (" (the batches ran out)" if b is None else ""))
        run.data[run.pulled] = (split_batch(b[0], m, device, "inputs") if first else None,
                                split_batch(b[1], m, device, "targets") if last else None)
