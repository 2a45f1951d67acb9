r"""Which layout changes a checkpoint can be resumed across, decided from the configuration alone.

A *layout* is how a run's steps are executed: one process simulating P stages
(``--simulate``, or P = 1), or a ``torchrun`` launch of dp·P ranks. Resuming in another layout is
the same algorithm exactly when every parameter sees the same update rule in both:

.. math::
    \tau_\text{old}(w) = \tau_\text{new}(w)\quad\text{for every parameter } w,

where :math:`\tau(w)` is the delay of the stage that owns w (:func:`parameter_delays`), the
gradient is the mean over the same batch (split into m microbatches: another m only rounds the
sum differently, except where a microbatch is more than a part of the sum — PipeDream's
per-microbatch updates, a mixture of experts' per-microbatch load-balancing loss), and clipping
uses a norm that does not depend on the split (``train.clip_scope = global``). The
optimizers are per-parameter (Muon per matrix, AdamW per tensor), so regrouping the
parameters into other stages changes none of their states. Hence:

- synchronous schedules (τ = 0) and 2BW (τ = 1 on every stage) resume across backends and
  across P;
- WPipe (τ = 1 on the first half of the stages, 0 on the second) resumes across backends, and
  across P only where every layer stays in its half;
- PipeDream (τ = P − 1 − s) changes every stage's delay with P, and keeps one weight version
  per microbatch in flight, which no other backend holds: it resumes in the layout that wrote
  it only;
- ``train.clip_scope = stage`` clips each stage by its own norm, a different rule at another P;
- ``delay.track_updates`` keeps its drift statistics per stage optimizer, so they do not carry
  over to another layout;
- the placement of the stages on the ranks (``pipeline.placement``: one per rank, paired,
  looped) changes which rank holds a stage, not its update rule: at the same P it is a layout
  change like any other, resumed through the full-model names.

:func:`change_error` names the first difference and what the user can do; the caller refuses
the resume with it (exit status 2) before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.partition import stage_of_parameter
from .config import Config


@dataclass(frozen=True)
class Layout:
    """How a run executes: ``processes`` (1: one process; else a torchrun world of ranks),
    ``stages`` P, data-parallel replicas ``dp`` and, under torchrun, the ``placement`` of the
    stages on the ranks (``pipeline.placement`` resolved: one-per-rank, paired or looped)."""

    processes: int
    stages: int
    dp: int = 1
    placement: str = "one-per-rank"

    @property
    def distributed(self) -> bool:
        return self.processes > 1

    def __str__(self) -> str:
        if not self.distributed:
            return f"one process at P={self.stages}"
        dp = f", dp={self.dp}" if self.dp > 1 else ""
        where = "" if self.placement == "one-per-rank" else f", {self.placement} placement"
        return f"a torchrun launch of {self.processes} ranks (P={self.stages}{dp}{where})"

    def how_to_resume(self) -> str:
        """The command-line shape that resumes in this layout."""
        if not self.distributed:
            return f"resume it in one process with --pipeline.stages {self.stages}"
        where = "" if self.placement == "one-per-rank" else \
            f" --pipeline.placement {self.placement}"
        return (f"resume it under torchrun --nproc-per-node {self.processes} with "
                f"--pipeline.stages {self.stages}{where}")


def checkpoint_layout(ckpt: dict) -> Layout:
    """The layout that wrote ``ckpt`` (a one-process checkpoint or a torchrun manifest)."""
    d = ckpt.get("distributed")
    if d is not None:
        return Layout(int(d["world_size"]), int(d["stages"]), int(d.get("dp", 1)),
                      str(d.get("placement", "one-per-rank")))
    return Layout(1, int(ckpt["config"]["pipeline"].get("stages", 1)))


def parameter_delays(cfg: Config, stages: int) -> dict[str, int]:
    """Delay τ of each part of the model (embedding, every layer, final norm, head) at
    ``stages`` stages: the delay of the stage that owns it."""
    spec = cfg.schedule_spec
    L = cfg.model_config().n_layers
    parts = ["tok_embeddings", *(f"layers.{i}" for i in range(L)), "norm", "output"]
    return {p: spec.stage_delay(stages, stage_of_parameter(p + ".weight", L, stages))
            for p in parts}


def change_error(saved: Config, cfg: Config, old: Layout, new: Layout, step: int) -> str | None:
    """Why the checkpoint of ``step`` written by ``saved`` in layout ``old`` cannot be resumed
    by ``cfg`` in layout ``new`` (one line naming what differs and what to do), or ``None`` if
    the continuation is the same algorithm (see the module docstring). The same layout is
    never refused here."""
    m_old, m_new = saved.pipeline.microbatches, cfg.pipeline.microbatches
    if old == new and m_old == m_new:
        return None
    head = f"the checkpoint of step {step} was written by {old} and cannot resume in {new}"
    fix = old.how_to_resume()
    spec = cfg.schedule_spec
    if cfg.model.external is not None:
        kind = "model.hf" if cfg.model.hf else "model.factory"
        return (f"{head}: a model from {kind} is split by parameter counts, with its own "
                f"names; resuming it in another layout is not supported; {fix}")
    if m_old != m_new:
        head = (f"the checkpoint of step {step} was written with pipeline.microbatches={m_old} "
                f"and cannot resume with {m_new}")
        fix = f"resume with --pipeline.microbatches {m_old}"
        if spec.per_microbatch_updates:
            return (f"{head}: {spec.name} makes one update per microbatch, so the microbatches "
                    f"are its steps (another algorithm); {fix}")
        if cfg.model_config().is_moe:
            return (f"{head}: a mixture of experts computes its load-balancing loss per "
                    f"microbatch (another loss); {fix}")
        if old == new:
            return None
        fix = f"{old.how_to_resume()} --pipeline.microbatches {m_old}"
    if spec.per_microbatch_updates:
        if old.stages != new.stages:
            return (f"{head}: pipeline.schedule={spec.name!r} delays stage s of P by P−1−s "
                    f"updates, so the embedding's delay is {old.stages - 1} at P={old.stages} "
                    f"but {new.stages - 1} at P={new.stages} (another algorithm); {fix}")
        return (f"{head}: {spec.name} keeps one weight version per microbatch in flight, which "
                f"the other backend does not hold; {fix}")
    before, after = parameter_delays(saved, old.stages), parameter_delays(cfg, new.stages)
    moved = [p for p in before if before[p] != after.get(p)]
    if moved:
        p = moved[0]
        return (f"{head}: with pipeline.schedule={spec.name!r} the delay of {p} is {before[p]} "
                f"at P={old.stages} but {after[p]} at P={new.stages} (another algorithm); "
                f"choose a P that keeps every layer's delay, or {fix}")
    if old.stages != new.stages and cfg.train.grad_clip > 0 and cfg.train.clip_scope == "stage":
        return (f"{head}: train.clip_scope='stage' clips each stage by its own gradient norm, "
                f"so {old.stages} and {new.stages} stages clip differently; {fix}")
    if cfg.delay.track_updates:
        return (f"{head}: delay.track_updates keeps its drift statistics per stage optimizer "
                f"and they do not carry over to another layout; {fix}")
    if new.distributed and cfg.delay.formulation != "gradient":
        return (f"{head}: delay.formulation={cfg.delay.formulation!r} is realised in one "
                f"process only (the pipeline applies stale gradients); {fix}")
    return None


def resume_note(saved: Config, cfg: Config, old: Layout, new: Layout, step: int) -> str:
    """The line a resume in another layout (or with another m) prints."""
    m_old, m_new = saved.pipeline.microbatches, cfg.pipeline.microbatches
    a, b = (str(old), str(new)) if m_old == m_new else (f"{old} with m={m_old}",
                                                       f"{new} with m={m_new}")
    return f"the checkpoint of step {step} was written by {a}; resuming it in {b}"
