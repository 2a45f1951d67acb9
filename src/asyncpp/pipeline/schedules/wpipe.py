r"""WPipe (Yang et al., ICLR 2022, group-based interleaved pipelining) on P partitions (P even)
and P/2 devices: G0 = partitions 0..P/2−1, G1 = P/2..P−1, device d holding partitions d and
P/2 + d (:func:`asyncpp.pipeline.simulator.default_devices`). Each partition accumulates the m
microbatches of a step and updates once per step. G1 runs 1F1B per step and drains: step t
reads :math:`x^{G1}_t`, τ = 0, one version. G0 runs 1F1B over all steps without draining (the
next step's forwards through G0 move ahead of the current step's backwards, the paper's "moving
operation"): step t reads :math:`x^{G0}_{t-1}`, τ = 1, two versions. Needs m ≥ P − 1. See
:mod:`asyncpp.pipeline.schedules` for what is assumed."""

from __future__ import annotations

from .base import Program, register


@register
class WPipe(Program):
    name = "wpipe"

    def in_second_group(self, stage: int) -> bool:
        return self.spec.in_second_group(self.num_stages, stage)

    def step_delay(self, stage: int, step: int) -> int:
        return self.spec.stage_delay(self.num_stages, stage)

    def version(self, stage: int, step: int, mb: int) -> int:
        if self.in_second_group(stage):
            return step
        return step - 1 if step >= 1 else step

    def segment_end(self, stage: int, t0: int, end: int) -> int:
        return t0 + 1 if self.in_second_group(stage) else end
