"""The delay core: one implementation of gradient delay and its corrections, shared by the
single-process simulation and the pipeline executor."""

from .delayed_optimizer import (
    CORRECTIONS,
    FORMULATIONS,
    DelayedOptimizer,
    taylor_compensate,
)
from .drift import DriftMeter
from .ef_gamma import critical_p, group_beta, optimal_ef_gamma, resolve_ef_gamma
from .nesterov import lookahead_coefficient, resolve_nesterov
from .schedule import DelaySchedule

__all__ = ["CORRECTIONS", "FORMULATIONS", "DelayedOptimizer", "DelaySchedule", "DriftMeter",
           "critical_p", "group_beta", "lookahead_coefficient", "optimal_ef_gamma",
           "resolve_ef_gamma", "resolve_nesterov",
           "taylor_compensate"]
