"""What a caller reads of a rank's stages: one-stage views (each rank one stage: its module,
optimizer, tied weights) and, for any stage of the rank, its weight versions and the version
a step reads."""

from __future__ import annotations

import math

from torch import Tensor, nn

from ...delay import DelayedOptimizer
from .. import schedules as S
from .stage import Stage


class StageViews:
    """Read-only views of the executor's stages (``contexts``, by stage index); mixed into
    :class:`~.executor.PipelineExecutor`, whose set-up provides the attributes read here."""

    contexts: dict[int, Stage]

    # -- one-stage views (the common case: each rank one stage) --------------------------------
    def _only(self) -> Stage:
        if len(self.contexts) != 1:
            raise ValueError(f"this rank runs stages {sorted(self.contexts)}; name the stage "
                             "(executor.contexts[s])")
        return next(iter(self.contexts.values()))

    @property
    def stage(self) -> nn.Module:
        """This rank's stage module (one stage per rank)."""
        return self._only().module

    @property
    def optimizer(self) -> DelayedOptimizer:
        """This rank's stage's ``DelayedOptimizer`` (one stage per rank)."""
        return self._only().optimizer

    @property
    def tied(self) -> dict[str, str]:
        return self._only().tied

    @property
    def _versions(self) -> dict[int, dict[str, Tensor]]:
        return self._only().versions

    @property
    def _newest(self) -> int:
        return self._only().newest

    @property
    def updates_issued(self) -> int:
        """Updates this rank has applied (over its stages)."""
        return sum(c.updates_issued for c in self.contexts.values())

    @property
    def last_grad_norm(self) -> float | None:
        """The global gradient norm of the last update (``clip_scope='global'`` with
        ``max_grad_norm``), fetched from the device (a host synchronisation: for tests and
        debugging, not the training loop)."""
        sq = self._only().last_norm_sq
        return None if sq is None else math.sqrt(float(sq))

    # -- weights ---------------------------------------------------------------------------
    def version_for_step(self, step: int, stage: int | None = None) -> int:
        """The version label the forwards of ``step`` use on ``stage`` (microbatch 0; default:
        this rank's one stage)."""
        s = self._only().stage if stage is None else stage
        return S.version_of(self.schedule_name, self.num_stages, self.num_microbatches,
                            s, step, 0, self._sync_predicate())

    def live_versions(self, stage: int | None = None) -> list[int]:
        """Labels of the weight versions ``stage`` (default: this rank's one stage) holds."""
        ctx = self._only() if stage is None else self.contexts[stage]
        return sorted(ctx.versions)

    def weights(self, version: int | None = None, stage: int | None = None
                ) -> dict[str, Tensor]:
        """The tensors of weight version ``version`` of ``stage`` by parameter name (default:
        the version the next step's first microbatch uses, of this rank's one stage). Treat
        them as read-only; the stage's own parameters are the newest version."""
        ctx = self._only() if stage is None else self.contexts[stage]
        v = self.version_for_step(self.next_step, ctx.stage) if version is None else version
        if v not in ctx.versions:
            raise ValueError(f"version {v} is not held; live versions: {sorted(ctx.versions)}")
        return dict(ctx.versions[v])

    def _sync_predicate(self):
        if not self.spec.sync_windows:
            return None
        sched = next(iter(self.contexts.values())).optimizer.schedule
        if not (sched.sync_start or sched.sync_cooldown):
            return None
        return lambda t: sched.delay_at(t) == 0
