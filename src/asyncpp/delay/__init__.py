"""The delay core: one implementation of gradient delay and its corrections, shared by the
single-process simulation and the pipeline executor."""

from .delayed_optimizer import (
    CORRECTIONS,
    FORMULATIONS,
    DelayedOptimizer,
    taylor_compensate,
)
from .schedule import DelaySchedule

__all__ = ["CORRECTIONS", "FORMULATIONS", "DelayedOptimizer", "DelaySchedule", "taylor_compensate"]
