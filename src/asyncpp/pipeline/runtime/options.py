"""The optional settings of the pipeline executor, in one frozen value checked when it is made."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class ExecutorOptions:
    r"""The optional settings of a :class:`PipelineExecutor` (checked here, at construction).

    Attributes:
        num_stages: P (defaults to ``topology.num_stages``; 1 without a process group). With
            ``placement``: the number of stages in it.
        mesh: optional ``DeviceMesh`` ("dp", "pp") used when the topology is created by the
            executor.
        tied_parameters: local parameter name → tie key, for weights held by both the first
            and the last stage (default: ``stage.tied_parameters`` if present).
        max_grad_norm: clip the gradient norm to this value, as
            ``torch.nn.utils.clip_grad_norm_`` on the whole model:
            :math:`g \leftarrow g\cdot\min(1, c/\|g\|)`.
        clip_scope: with ``max_grad_norm``, ``"global"`` clips by the norm over all stages
            (one asynchronous scalar all-reduce per update), ``"stage"`` by each stage's own.
        timeout: seconds to wait for any message or collective before raising
            :class:`PipelineError`.
        reduce_dp_gradients: average gradients over the data-parallel group in the executor
            (set False when the optimizer does it itself).
        on_gradients: optional callback ``(update_index, {name: grad})`` after reduction and
            clipping, before the update.
        before_update: optional callback ``(applied_at)`` right before each update is applied,
            with the simulated step a(u) it belongs to (:attr:`OptimizerStep.applied_at`),
            e.g. to set that step's learning rate.
        forward_fn: optional replacement for ``functional_call(stage, weights, args)`` with
            the same signature ``(stage, weights, args)``, e.g. a ``torch.compile``-d one.
        eager_updates: apply every update as soon as its step completes on this stage
            (waiting for its reductions) instead of deferring it — for callers that inspect
            the optimizer after each step (update tracking); same results, less overlap.
        track_grad_norm: compute each update's squared gradient norm for
            :attr:`StepOutput.grad_sq` (default); when False and nothing clips, the norm is
            not computed and ``grad_sq`` is ``None``.
        config: extra settings (e.g. the training config as a dict) that must agree on all
            ranks; compared at start-up together with the executor's own.
    """

    num_stages: int | None = None
    mesh: object = None
    tied_parameters: Mapping[str, str] | None = None
    max_grad_norm: float | None = None
    clip_scope: str = "global"
    timeout: float = 600.0
    reduce_dp_gradients: bool = True
    on_gradients: Callable[[int, dict[str, Tensor]], None] | None = None
    before_update: Callable[[int], None] | None = None
    forward_fn: Callable | None = None
    eager_updates: bool = False
    track_grad_norm: bool = True
    config: Mapping | None = None

    def __post_init__(self) -> None:
        if self.clip_scope not in ("global", "stage"):
            raise ValueError(f"clip_scope must be 'global' or 'stage', got {self.clip_scope!r}")
        t = self.timeout
        if not (isinstance(t, (int, float)) and t > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {t!r}")
        c = self.max_grad_norm
        if c is not None and not (isinstance(c, (int, float)) and c > 0):
            raise ValueError(f"max_grad_norm must be a positive number, got {c!r}")
