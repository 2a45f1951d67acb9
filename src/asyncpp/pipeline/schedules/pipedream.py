r"""Original PipeDream (Narayanan et al., SOSP 2019, weight stashing): every microbatch is its
own minibatch and its own update; 1F1B order, no flush. Stage s has delay
:math:`\tau_s = P-1-s` updates, reads version :math:`\max(0, tm + i - \tau_s)` and holds up to
P − s versions."""

from __future__ import annotations

from ..actions import OptimizerStep
from .base import Program, register


@register
class PipeDream(Program):
    name = "pipedream"

    def step_delay(self, stage: int, step: int) -> int:
        return self.num_stages - 1 - stage

    def version(self, stage: int, step: int, mb: int) -> int:
        return max(0, step * self.num_microbatches + mb - self.step_delay(stage, step))

    def update_after(self, stage: int, step: int, mb: int, version: int) -> OptimizerStep:
        u = step * self.num_microbatches + mb
        return OptimizerStep(step, mb, u, version, self.step_delay(stage, step), u + 1,
                             stage=stage)
