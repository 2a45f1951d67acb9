"""GPipe (Huang et al., 2019): per step all forwards, then all backwards, one update, a flush.
τ = 0, one version, bubble (P − 1)/(m + P − 1), m activations stashed per stage."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .base import Program, register


@register
class GPipe(Program):
    name = "gpipe"

    def order(self, stage: int, count: Callable[[], int]) -> Iterator[tuple[str, int]]:
        n = count()
        for k in range(n):
            yield "F", k
        for k in range(n):
            yield "B", k
        return n
