r"""ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B with every backward
split into its input half I (the gradient sent upstream) and its weight half W, which sends
nothing and so can wait. Synchronous, one update per step, a flush: the same math as 1F1B
(τ = 0, one version; gradients bit-equal), a shorter critical path.

Order of stage s of P within a step of m microbatches: the P − 1 − s warm-up forwards of
1F1B; then forward and input half alternately, the weight half of the oldest microbatch
following each input half once more than ``s`` weight halves wait (the later a stage, the
sooner its upstream neighbour needs its gradients, so the longer its weight halves wait);
then the remaining input halves, each followed by one waiting weight half (they fill the time
until the next gradient arrives); then the rest. At most P − s microbatches are stashed, as
in 1F1B, plus up to ``s`` waiting weight halves. The update follows the last weight half.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from .base import Program, register


@register
class ZeroBubbleH1(Program):
    name = "zb-h1"

    def order(self, stage: int, count: Callable[[], int]) -> Iterator[tuple[str, int]]:
        nf = ni = 0
        waiting: deque[int] = deque()
        warm = self.num_stages - 1 - stage
        while nf < min(warm, count()):
            yield "F", nf
            nf += 1
        while nf < count():
            yield "F", nf
            nf += 1
            yield "I", ni
            waiting.append(ni)
            ni += 1
            if len(waiting) > stage:
                yield "W", waiting.popleft()
        while ni < nf:
            yield "I", ni
            waiting.append(ni)
            ni += 1
            yield "W", waiting.popleft()
        while waiting:
            yield "W", waiting.popleft()
        return nf
