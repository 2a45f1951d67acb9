r"""When the delay is on: a constant delay τ per parameter group, with synchronous start and
cooldown windows.

.. math::
    \tau_g(t) = \begin{cases}
        0 & t < N_\text{start} \ \text{ or } \ t \ge T - N_\text{cool}\\
        \tau_g & \text{otherwise}
    \end{cases}

The same object answers the single-process simulation (``DelayedOptimizer``) and the pipeline
executor, which flushes its pipeline exactly where :math:`\tau_g(t) = 0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DelaySchedule:
    """Per-group delays with synchronous start/cooldown windows.

    Args:
        delays: one non-negative integer per parameter group (uniform delay: one value repeated).
        sync_start: the first ``sync_start`` steps run with delay 0.
        sync_cooldown: the last ``sync_cooldown`` steps run with delay 0; needs ``total_steps``.
        total_steps: the planned number of steps T (only needed for a cooldown).
    """

    delays: tuple[int, ...]
    sync_start: int = 0
    sync_cooldown: int = 0
    total_steps: int | None = None

    def __post_init__(self) -> None:
        for d in self.delays:
            if not isinstance(d, int) or isinstance(d, bool) or d < 0:
                raise ValueError(
                    f"delay must be a non-negative integer, got {d!r} (in delays={self.delays!r})"
                )
        for name in ("sync_start", "sync_cooldown"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
        if self.sync_cooldown and self.total_steps is None:
            raise ValueError(
                "sync_cooldown needs total_steps (the cooldown window is counted from the end)"
            )
        if self.total_steps is not None and self.total_steps < 0:
            raise ValueError(f"total_steps must be >= 0, got {self.total_steps!r}")

    @classmethod
    def build(
        cls,
        delay: int | Sequence[int],
        num_groups: int,
        sync_start: int = 0,
        sync_cooldown: int = 0,
        total_steps: int | None = None,
    ) -> DelaySchedule:
        """A schedule from a uniform delay or a per-group sequence of length ``num_groups``."""
        if isinstance(delay, Sequence) and not isinstance(delay, str):
            delays = tuple(delay)
            if len(delays) != num_groups:
                raise ValueError(
                    f"got {len(delays)} per-group delays for {num_groups} parameter groups; "
                    "pass one delay per group or a single integer"
                )
        else:
            delays = (delay,) * num_groups
        return cls(delays, sync_start, sync_cooldown, total_steps)

    def in_sync_window(self, step: int) -> bool:
        """Whether step ``step`` (0-based) lies in the synchronous start or cooldown window."""
        if step < self.sync_start:
            return True
        return bool(
            self.sync_cooldown
            and self.total_steps is not None
            and step >= self.total_steps - self.sync_cooldown
        )

    def delay_at(self, step: int, group: int = 0) -> int:
        r"""The delay :math:`\tau_g(t)` of parameter group ``group`` at step ``step``."""
        return 0 if self.in_sync_window(step) else self.delays[group]

    @property
    def max_delay(self) -> int:
        return max(self.delays, default=0)
