r"""PipeDream-2BW (Narayanan et al., ICML 2021): 1F1B order over the microbatches of *all*
steps, no flush; the gradient of step t is accumulated over its m microbatches on version
:math:`x_t` and applied with a one-step delay, :math:`x_{t+1} = x_t - U(g_{t-1};\,x_t)`,
:math:`x_1 = x_0`. Steps in ``sync_steps`` have delay 0 (synchronous start / cooldown): the
pipeline drains after them. Two versions per stage; needs m ≥ P − 1; steady-state bubble 0."""

from __future__ import annotations

from .base import Program, register


@register
class TwoBW(Program):
    name = "2bw"

    def step_delay(self, stage: int, step: int) -> int:
        return 0 if self.is_sync(step) else 1

    def version(self, stage: int, step: int, mb: int) -> int:
        # v(k) = #{u : u + τ_u < k}: step t reads x_{t−1} after a delayed step t − 1
        return step - 1 if (step >= 1 and self.step_delay(stage, step - 1) == 1) else step

    def segment_end(self, stage: int, t0: int, end: int) -> int:
        if not self.has_sync:
            return end
        t = t0
        while t < end - 1 and not self.is_sync(t):
            t += 1
        return t + 1
